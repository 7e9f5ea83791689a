//! Datastore syncers: where the resources come from.
//!
//! * [`file`]: the file datastore (`--datastore file:DIR`), a live
//!   [`file::FileSyncer`] thread emitting the [`crate::model`] syncer
//!   stream.
//! * [`snapshot`]: one complete state loaded in one go ([`snapshot::load_state`],
//!   used by `felix calc`), with the same rules as the live syncer.
//! * [`bench`]: the load benchmark (parse + validate + convert a directory).
//!
//! # File selection
//!
//! Every regular file under the directory (recursively, following symlinks)
//! named `*.yaml`, `*.yml` or `*.json`, except hidden files and anything in
//! hidden directories (names starting with `.`).  Editor temporaries such as
//! `.#x.yaml`, `x.yaml~`, `.x.yaml.swp` and `x.yaml.tmp` fall outside these
//! patterns and are ignored.  `.json` files are decoded as JSON, the rest as
//! (multi-document) YAML.
//!
//! # The duplicate rule
//!
//! A resource's identity is (kind, namespace, name).  When several
//! documents claim one identity, the copy in the file whose path, relative
//! to the datastore root, sorts first byte-wise is in force (within one
//! file, the earlier document); every other copy is ignored and reported as
//! an error naming both places.  When the winning copy goes away (its file
//! is deleted, or it is edited out), the next copy takes over.  The winner
//! is decided by location alone: a winning copy that fails validation makes
//! the resource absent rather than reviving another copy.  The same rule
//! applies when two different resources convert to the same
//! [`crate::model::Key`] (for example a `Profile` named `kns.x` and the
//! `Namespace` `x`): the value from the first path wins.  The outcome depends
//! only on the files present, never on the order in which changes were
//! seen.
//!
//! # Bad input
//!
//! A file that does not parse keeps its last good contents in force (an
//! empty set if it never parsed) and is reported once per change naming
//! file, line and reason; a resource that fails validation is absent and
//! reported naming file, line and field.  Nothing else is affected.

#[cfg(feature = "bench")]
pub mod bench;
pub mod etcd;
pub mod file;
#[doc(hidden)]
pub mod fuzzing;
pub mod snapshot;
pub mod stream;

mod chunks;
mod emit;
mod keyed;
mod merge;
mod source;
mod walk;

pub use file::{FileSyncer, FileSyncerConfig};
pub use snapshot::{
    load_state, ErrorClass, LoadError, StateError, StateLoader, StateSnapshot, StateUpdates,
};
