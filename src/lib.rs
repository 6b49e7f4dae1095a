//! warcfs: a deduplicating, byte-exact store for web archives.
//!
//! Data flows one way. Bytes come in (`store::Store::put_file`); `format` finds gzip members
//! and WARC/ARC records in them; payloads are hashed (`digest`) and stored once as chunks in
//! immutable `pack` files; a `recipe` saying how to rebuild the exact bytes commits
//! atomically with refcount changes in the `index`. A read walks the recipe back.

pub mod bucket;
pub mod cli;
pub mod digest;
pub mod disk;
pub mod extsort;
mod failpoint;
pub mod format;
pub mod fuse;
pub mod index;
pub mod nodes;
pub mod pack;
pub mod recipe;
pub mod search;
pub mod store;
mod sync;
// (Not behind cfg(test): the integration tests use it too; std only.)
#[doc(hidden)]
pub mod test_support;

pub(crate) use sync::{wait_on, LockExt};
