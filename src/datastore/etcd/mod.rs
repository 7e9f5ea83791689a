//! The etcd v3 datastore (`--datastore etcdv3:URLS`), shared with
//! calicoctl in etcdv3 mode.
//!
//! * [`keys`]: upstream's key layout (which key holds which resource);
//! * [`syncer`]: [`EtcdSyncer`], the live syncer thread (list at one
//!   revision, then watch; resync on compaction or disconnection);
//! * [`config`]: `--datastore` parsing ([`parse_datastore_spec`]) and the
//!   etcd connection settings ([`EtcdConfig`]);
//! * [`apply`]: writing resources as calicoctl stores them and listing them
//!   (`felix datastore apply` / `get`);
//! * [`client`]: the etcd operations: reads over native gRPC (`grpc`, an
//!   HTTP/2 unary-call client on the `h2` crate, with the protobuf messages
//!   of `pb`), writes and the watch over etcd's JSON gateway with a small
//!   built-in HTTP/1.1 client (`http`); `http://`, or `https://` through
//!   [`tls`] for both;
//! * [`tls`]: `EtcdCaFile`/`EtcdCertFile`/`EtcdKeyFile` as a rustls client
//!   configuration (server verification, client certificates);
//! * [`testing`]: a throwaway etcd server for tests and benchmarks;
//! * [`bench`]: the initial-sync and recovery benchmark.
//!
//! Values are decoded, validated and converted by [`crate::resources`]
//! exactly as the file datastore's documents are; a value that fails is
//! logged with its key and treated as absent.

pub mod apply;
#[cfg(feature = "bench")]
pub mod bench;
pub mod client;
pub mod config;
pub mod keys;
pub mod status;
pub mod syncer;
#[cfg(feature = "bench")]
pub mod testing;
pub mod tls;

mod grpc;
mod http;
mod pb;
pub(in crate::datastore) mod value;

pub use client::{EtcdClient, EtcdError};
pub use config::{parse_datastore_spec, parse_endpoints, ConfigError, DatastoreSpec, EtcdConfig};
pub use syncer::{EtcdSyncer, EtcdSyncerConfig, EtcdSyncerError, EtcdSyncerStats};
pub use tls::TlsFiles;
