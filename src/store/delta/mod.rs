//! Payloads compressed against their relatives (format 9): a payload chunk stored as a zstd
//! frame whose dictionary is the raw bytes of another chunk, its base (`pack::Codec::ZstdDelta`).
//!
//! The relative is the previous capture of the same URL: ingest notes, for each record's
//! first payload chunk, its URL (`captures`: the index's `capture` hints), and for a chunk new
//! to the store whose URL was captured before, that capture's chunk as the base to try
//! (`delta_base` hints). A chunk whose URL was never captured tries the latest capture of
//! the URL whose page its similarity sketch resembles (`sketch`: a page moved to another URL,
//! a translation). Ingest compresses nothing against it: gc does, when it settles the
//! chunk's pack (`make`), keeping the delta only if it is much smaller than the chunk alone.
//!
//! What holds, and who keeps it so:
//! - **One base at most per read**: a base is never itself a delta. gc makes a chunk a delta
//!   only when it first settles it, and only against a base that is final: settled already
//!   (so never a delta later) and not a delta (a delta's base is taken instead).
//! - **Bases stay alive through refcounts**: a base's `refs` counts each delta entry in the
//!   index that names it besides the recipes' references, raised in the gc batch that moves
//!   the delta's entry into its new pack and lowered in the gc batch that drops a delta's
//!   entry (`bases`), so a base outlives its last delta and no longer. `fsck` and `repair
//!   index` count those references from the delta blobs themselves.
//! - **Hints are advice**: lost (a rebuilt index) or stale (naming a chunk gone since), they
//!   cost a delta not made, never a byte.

pub(in crate::store) mod bases;
pub(in crate::store) mod captures;
pub(in crate::store) mod make;
pub(in crate::store) mod sketch;

/// A delta is kept only if it takes at most this share of what the chunk takes alone
/// (numerator over 4): a delta costs its reader the base's read too, so a small saving is not
/// worth it.
pub(in crate::store) const KEEP_AT_MOST_QUARTERS: usize = 3;

#[cfg(test)]
mod tests;
