//! Several nodes of one bucket: a node joining a bucket store and its index kept in step
//! with the bucket (`join`), a read-only node following the packs and log records another
//! node publishes (`follow`), and several writers at once, each owning its namespace, with
//! leases and a gc lock (`shared`). Built on the store's open and metadata log; the bucket
//! itself is `crate::bucket`.

pub(in crate::store) mod follow;
pub(in crate::store) mod join;
pub(in crate::store) mod shared;
