//! A base's references from its deltas: each delta entry in the index counts once in its
//! base's `refs`. gc raises them when it makes a delta (`make`) and lowers them here when it
//! drops a delta's entry (the dead deltas before anything else, so that a base whose last
//! delta goes is collected in the same pass); fsck and gc's safety check (`delta_references`) and `repair index`
//! (`count_delta_references`) count them from the delta blobs themselves.

use std::collections::HashMap;
use std::path::Path;

use crate::digest::ChunkKey;
use crate::extsort::Sorter;
use crate::index::{Batch, ChunkEntry, Index};
use crate::pack::{Codec, PackReader};
use crate::store::maint::gc::RefRecord;
use crate::store::{io_at, Ns, Result, Store, StoreError};

/// The inode a delta's reference to its base is sorted under (`RefRecord`): no file's.
pub(in crate::store) const DELTA_REFERENCE: u64 = 0;

/// Base entries lowered by one of gc's drop batches, written with it.
#[derive(Default)]
pub(in crate::store) struct Lowered {
    entries: HashMap<ChunkKey, ChunkEntry>,
}

impl Lowered {
    /// Lowers the refcount of the base of delta `key` (being dropped, its entry `e`) by one.
    /// A delta whose blob cannot be read is logged: its base keeps the reference (a leak fsck
    /// names), which is safe where a guess would not be.
    pub fn lower(&mut self, store: &Store, key: &ChunkKey, e: &ChunkEntry) -> Result<()> {
        if e.codec != Codec::ZstdDelta as u8 {
            return Ok(());
        }
        let base = match store.packs.base_named(e.pack, e.offset, key, e.stored_len) {
            Ok(Some(base)) => base,
            Ok(None) => return Ok(()),
            Err(err) => {
                log::warn!("gc: delta {} dropped, but its base cannot be named ({err}); the base keeps one reference too many (run `warcfs fsck`)", key.short());
                return Ok(());
            }
        };
        let entry = match self.entries.get(&base) {
            Some(e) => e.clone(),
            None => match store.index.chunk(&base)? {
                Some(e) => e,
                None => {
                    // Nothing to lower: the index already lacks what the delta needed (fsck
                    // names such a delta while it is there).
                    log::warn!("gc: delta {} dropped, but its base {} is not in the index", key.short(), base.short());
                    return Ok(());
                }
            },
        };
        let refs = entry.refs.checked_sub(1).ok_or_else(|| {
            log::error!("refcount of base {} would drop below zero as its delta {} goes; gc stopped", base.short(), key.short());
            StoreError::RefcountUnderflow { chunk: base.to_string(), refs: -1 }
        })?;
        self.entries.insert(base, ChunkEntry { refs, ..entry });
        Ok(())
    }

    /// Puts the lowered entries into `b` (the batch that drops their deltas).
    pub fn put_into(&mut self, idx: &Index, b: &mut Batch) {
        for (k, e) in self.entries.drain() {
            b.put_chunk(idx, &k, &e);
        }
    }
}

impl Store {
    /// Drops the entries of the deltas nothing uses, each batch lowering their bases' counts
    /// (so the index never counts a reference from a delta it does not hold); returns how
    /// many. First, as for every drop, every recipe is read to prove none uses them.
    pub(in crate::store) fn drop_dead_deltas(&self, ns: &mut Ns) -> Result<u64> {
        // A store whose format has no deltas holds none: no scan of its chunk table.
        if !crate::store::deltas(self.config.version) {
            return Ok(0);
        }
        let dead = |e: &ChunkEntry| e.refs == 0 && e.codec == Codec::ZstdDelta as u8;
        let mut any = false;
        for item in self.index.chunk_iter() {
            if dead(&item?.1) {
                any = true;
                break;
            }
        }
        if !any {
            return Ok(0);
        }
        self.refuse_dropping_referenced()?;
        let (mut b, mut lowered, mut dropped) = (Batch::new(), Lowered::default(), 0u64);
        for item in self.index.chunk_iter() {
            let (k, e) = item?;
            if !dead(&e) {
                continue;
            }
            b.delete_chunk(&self.index, &k);
            b.delete_delta_base_hint(&self.index, &k);
            lowered.lower(self, &k, &e)?;
            dropped += 1;
            if b.log().len() >= self.limits.batch_ops {
                lowered.put_into(&self.index, &mut b);
                self.gc_write(ns, std::mem::take(&mut b))?;
            }
        }
        lowered.put_into(&self.index, &mut b);
        self.gc_write(ns, b)?;
        self.packs.forget_bases();
        Ok(dropped)
    }

    /// Adds to `sorter` one reference to each delta's base, under `DELTA_REFERENCE`.
    pub(in crate::store) fn delta_references(&self, sorter: &mut Sorter<RefRecord>, runs: &Path) -> Result<()> {
        if !crate::store::deltas(self.config.version) {
            return Ok(());
        }
        for item in self.index.chunk_iter() {
            let (k, e) = item?;
            if e.codec != Codec::ZstdDelta as u8 {
                continue;
            }
            // A delta that cannot be read is fsck's to report when it reads every chunk.
            if let Ok(Some(base)) = self.packs.base_named(e.pack, e.offset, &k, e.stored_len) {
                let mut r = [0u8; 44];
                r[..36].copy_from_slice(&base.to_bytes());
                r[36..].copy_from_slice(&DELTA_REFERENCE.to_be_bytes());
                sorter.push(r).map_err(io_at(runs))?;
            }
        }
        Ok(())
    }
}

/// Adds one reference to each delta's base in `idx` to `refs` (`repair index`); a delta
/// whose base cannot be named is a problem of its own.
pub(in crate::store) fn count_delta_references(idx: &Index, packs: &PackReader, refs: &mut HashMap<ChunkKey, u64>, problems: &mut Vec<String>) -> Result<()> {
    for item in idx.chunk_iter() {
        let (k, e) = item?;
        if e.codec != Codec::ZstdDelta as u8 {
            continue;
        }
        match packs.base_named(e.pack, e.offset, &k, e.stored_len) {
            Ok(Some(base)) => *refs.entry(base).or_default() += 1,
            Ok(None) => {}
            Err(err) => problems.push(format!("delta {}: its base cannot be named: {err}", k.short())),
        }
    }
    Ok(())
}
