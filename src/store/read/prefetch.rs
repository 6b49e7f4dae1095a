//! Which pack ranges the disk is asked to read before a reader needs them, and when: a
//! lookup's chunks all at once, a sequential reader's window (planned as read-ahead jobs for
//! `ahead`'s threads), and the MiB of file around repeated lookups. Advice only
//! (`posix_fadvise(WILLNEED)`, or a background fetch for a pack kept elsewhere): a reader
//! that gets there first reads for itself, and a place that cannot be found is its error.

use super::{extents_within, LOOKUP_GAP, SEQUENTIAL_GAP};
use crate::digest::ChunkKey;
use crate::index::ChunkEntry;
use crate::pack::BLOB_HEADER_LEN;
use crate::recipe::{RecipeHead, Segment};
use crate::store::read::cache::bump;
use crate::store::{Result, Store};
use crate::LockExt;

/// The most one read-ahead for lookups (`Store::warm_range`) asks the disk for, and how far
/// apart two of its blobs may lie for one range to take both (below `LOOKUP_GAP`'s cost
/// model's break-even, about 45 KiB). A MiB of a crawl's file lies in about 0.5-1 MB of
/// pack where the crawl was stored alone; where its payloads were stored by earlier crawls
/// its blobs are scattered, and the budget bounds what is read for them.
pub(super) const WARM_BUDGET: u64 = 2 << 20;
const WARM_GAP: u64 = 32 << 10;

/// A gzip member of the file that a sequential reader will need soon: rebuilding it ahead of
/// the reader is the work worth a worker thread (see `Store::plan_ahead`).
pub struct Ahead {
    pub piece: u32,
    pub segment: u32,
    /// Where the member ends in the file: a reader already past it needs it no more.
    pub end: u64,
}

/// Blobs `(pack, offset, len)` in order, merged into ranges where at most `gap` bytes lie
/// between them in one pack.
fn merge_blobs(blobs: &[(u64, u64, u64)], gap: u64) -> Vec<(u64, u64, u64)> {
    let mut merged: Vec<(u64, u64, u64)> = Vec::new();
    for &(pack, off, len) in blobs {
        match merged.last_mut() {
            Some(last) if last.0 == pack && off <= last.1 + last.2 + gap => last.2 = (off + len).max(last.1 + last.2) - last.1,
            _ => merged.push((pack, off, len)),
        }
    }
    merged
}

impl Store {
    /// The gzip members a reader of [offset, end) will need that are not rebuilt yet, in file
    /// order. The kernel starts reading the pack ranges of every chunk there at once. Plain
    /// chunks are left to the reader itself: it decodes them straight into its reply, while
    /// the kernel's own read-ahead keeps the FUSE threads busy; decoding them here as well
    /// only raced it for the CPU and filled the cache.
    pub fn plan_ahead(&self, head: &RecipeHead, offset: u64, end: u64) -> Result<Vec<Ahead>> {
        let (jobs, needed) = self.needed_within(head, offset, end)?;
        self.request_chunks(&needed, SEQUENTIAL_GAP)?;
        Ok(jobs)
    }

    /// Rebuilds one planned member into the cache (`plan_ahead` had the kernel read its
    /// chunks already), unless it is there or being rebuilt already: a reader that caught
    /// up with the read-ahead rebuilds the member it needs itself, and may have read it
    /// and let it go (`read_streaming`) by the time a worker waiting for it would wake.
    pub fn run_ahead(&self, head: &RecipeHead, job: &Ahead) -> Result<()> {
        let p = self.piece(head, job.piece)?;
        let k = (head.id, job.piece, job.segment);
        match self.cache.building.begin_unless_under_way(k, || self.cache.members.locked().get(&k).is_some()) {
            Some(flight) => self.rebuild_into_cache(head, job.piece, job.segment, &p, true, flight).map(drop),
            None => Ok(()),
        }
    }

    /// Has the kernel read the pack ranges of every chunk that reading [from, to) of `head`
    /// needs, for a reader doing lookups there: records replayed together (a page and its
    /// resources) were mostly captured together, and lie near each other in the file. At
    /// most `WARM_BUDGET` bytes, blobs merged across `WARM_GAP`; past the budget, the ranges
    /// of the highest-numbered packs are left (a later crawl's payloads stored by earlier
    /// crawls lie in older packs, its own records in its own). Returns the bytes asked for;
    /// the read counters count the read-aheads that asked for any.
    pub fn warm_range(&self, head: &RecipeHead, from: u64, to: u64) -> Result<u64> {
        let (_, needed) = self.needed_within(head, from, to)?;
        let places = self.locate(&self.uncached(&needed))?;
        let asked = self.ask_for(&places, WARM_GAP, WARM_BUDGET);
        if asked > 0 {
            bump(&self.cache.counters.lookup_read_aheads);
        }
        Ok(asked)
    }

    /// Starts the kernel reading the blobs of the chunks that are not cached, in pack order,
    /// blobs at most `gap` bytes apart merged into one range; their locations land in the
    /// location cache.
    pub(super) fn request_chunks(&self, keys: &[ChunkKey], gap: u64) -> Result<()> {
        let wanted = self.uncached(keys);
        let places = self.locate(&wanted)?;
        // One read: nothing to overlap it with; the reader issues it right away.
        if wanted.len() >= 2 {
            self.ask_for(&places, gap, u64::MAX);
        }
        Ok(())
    }

    /// What reading [offset, end) of `head` takes: the gzip members there that are not
    /// cached (as read-ahead jobs), and the chunks (sorted, once each) that reading the range
    /// needs.
    pub(super) fn needed_within(&self, head: &RecipeHead, offset: u64, end: u64) -> Result<(Vec<Ahead>, Vec<ChunkKey>)> {
        let end = end.min(head.size);
        let mut jobs: Vec<Ahead> = Vec::new();
        let mut needed: Vec<ChunkKey> = Vec::new();
        let mut pos = offset;
        while pos < end {
            let Some(pno) = head.piece_at(pos) else { break };
            let piece = self.piece(head, pno)?;
            let mut seg_start = head.piece_starts[pno as usize];
            for (sno, seg) in piece.segments.iter().enumerate() {
                let seg_end = seg_start + seg.len();
                if seg_end > pos && seg_start < end {
                    match seg {
                        Segment::Member { plain, parse_tail, .. } => {
                            if self.cache.members.locked().get(&(head.id, pno, sno as u32)).is_none() {
                                jobs.push(Ahead { piece: pno, segment: sno as u32, end: seg_end });
                                needed.extend(plain.iter().map(|e| piece.keys[e.chunk as usize]));
                                needed.extend(parse_tail.map(|t| piece.keys[t as usize]));
                            }
                        }
                        Segment::Data { extents } => {
                            needed.extend(extents_within(extents, seg_start, pos, end).map(|e| piece.keys[e.chunk as usize]));
                        }
                    }
                }
                seg_start = seg_end;
                if seg_start >= end {
                    break;
                }
            }
            pos = seg_start.max(pos + 1);
        }
        needed.sort_unstable();
        needed.dedup();
        Ok((jobs, needed))
    }

    /// The keys whose chunks are not in the chunk cache.
    fn uncached(&self, keys: &[ChunkKey]) -> Vec<ChunkKey> {
        let mut chunks = self.cache.chunks.locked();
        keys.iter().filter(|k| chunks.get(k).is_none()).copied().collect()
    }

    /// Asks the kernel for the blobs found at `places`, at most `budget` bytes: if merging
    /// across `gap` would ask for more, the blobs are merged only across a page, and the
    /// ranges past the budget (in pack order) are left. Returns the bytes asked for.
    pub(super) fn ask_for(&self, places: &[Option<ChunkEntry>], gap: u64, budget: u64) -> u64 {
        let mut blobs: Vec<(u64, u64, u64)> = places.iter().flatten().map(|e| (e.pack, e.offset, BLOB_HEADER_LEN as u64 + e.stored_len as u64)).collect();
        blobs.sort_unstable();
        blobs.dedup();
        let mut ranges = merge_blobs(&blobs, gap);
        if gap > LOOKUP_GAP && ranges.iter().map(|r| r.2).sum::<u64>() > budget {
            ranges = merge_blobs(&blobs, LOOKUP_GAP);
        }
        let mut asked = 0;
        let mut i = 0;
        while i < ranges.len() && asked < budget {
            let pack = ranges[i].0;
            let mut these = Vec::new();
            while i < ranges.len() && ranges[i].0 == pack && asked < budget {
                let len = ranges[i].2.min(budget - asked);
                these.push((ranges[i].1, len));
                asked += len;
                i += 1;
            }
            self.packs.will_need(pack, &these);
        }
        asked
    }
}
