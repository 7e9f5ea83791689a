//! Datastore syncers: the file datastore (and, later, etcd v3).
