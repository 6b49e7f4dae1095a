//! Several nodes of one bucket, built on the store's own API: opening a store as what its
//! `Mode` says this node is (`open`), a node joining a bucket's store and its index kept in
//! step with the bucket (`join`), the writer publishing what it writes (`writer`), a
//! read-only node following what the others publish (`follow`), and several writers at
//! once, each owning its namespace, with leases and a gc lock (`shared`). Each kind of node
//! is a part the store calls without asking which it is (`store::Peers`); the bucket itself
//! is `crate::bucket`. docs/MULTIWRITER.md has the design.

mod follow;
mod join;
mod open;
mod shared;
mod writer;
#[cfg(test)]
mod tests;

pub use join::{init_remote, repair_index, Joined};
pub use shared::default_dir;
