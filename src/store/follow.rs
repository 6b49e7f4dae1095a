//! Several nodes on one bucket: the writer publishes, the others follow.
//!
//! One process writes to a bucket at a time (its lock object). While it runs, it seals its
//! open packs every `PUBLISH_INTERVAL` when they hold anything (data first, then the
//! metadata log, so that a record never reaches the bucket before the chunks it names), and
//! the upload thread sends them in that order. Any number of other nodes mount the store
//! read-only (`mount -o ro`) as followers: every `FOLLOW_INTERVAL` a follower lists the
//! bucket, reads the footers of packs it has not seen (their chunks go into its index where
//! they lie) and applies the metadata log records that follow its last one, in order. So a
//! file closed on the writer appears on every follower within about
//! PUBLISH_INTERVAL + upload + FOLLOW_INTERVAL (the test asks for 10 s at most).
//!
//! A follower never writes to the bucket, and its index refuses every change but these.
//! Should the writer's gc have removed log records the follower never saw (it was away for
//! long), the follower says so and keeps what it has; mounting it again rebuilds its index
//! from the bucket (`Store::open`).

use std::collections::HashSet;
use std::time::Duration;

use super::journal::{MetaRecord, APPLIED_SEQ};
use super::{io_at, Result, Store, StoreError};
use crate::LockExt;
use crate::index::{Batch, ChunkEntry};
use crate::pack::ChunkKind;

pub const PUBLISH_INTERVAL: Duration = Duration::from_secs(4);
pub const FOLLOW_INTERVAL: Duration = Duration::from_secs(2);

/// What a follower has seen of the bucket.
#[derive(Default)]
pub(super) struct FollowState {
    /// Packs whose footers are in the index.
    seen: HashSet<u64>,
    /// Log records read but not applied yet (an earlier one is missing so far).
    waiting: Vec<(u64, Vec<crate::index::LogOp>)>,
    /// Set once a gap was reported, so that it is logged once.
    gap_reported: bool,
}

impl FollowState {
    /// A follower whose index reflects exactly the packs `ids` (the listing it was checked or
    /// rebuilt against: a pack published since is read by the first `follow`).
    pub(super) fn seeded(ids: impl Iterator<Item = u64>) -> FollowState {
        FollowState { seen: ids.collect(), ..FollowState::default() }
    }
}

impl Store {
    /// Whether this store follows a bucket that another node writes (`open_follower`).
    pub fn is_follower(&self) -> bool {
        self.follower
    }

    /// The writer's side: seals the open data pack, then the log's, if they hold anything,
    /// so that the upload thread sends them to the bucket. Nothing to do on a local store.
    /// Never waits for the writer lock (an ingest holds it for a whole file, and this holds
    /// the namespace lock meanwhile): if it is taken, this round is skipped, and the mount's
    /// ingest worker publishes between two files (`publish_if_due`).
    pub fn publish(&self) -> Result<()> {
        if !self.packs.uploads() {
            return Ok(());
        }
        // Namespace lock first (the lock order): a log pack is sealed only with every record
        // in it applied.
        let ns = self.ns.locked();
        let Ok(mut w) = self.writer.try_lock() else { return Ok(()) };
        if w.open.as_ref().is_some_and(|o| !o.is_empty()) {
            self.seal_open(&mut w)?;
        }
        {
            let mut j = self.journal.locked();
            if j.open.as_ref().is_some_and(|o| !o.is_empty()) {
                self.seal_journal(&mut j)?;
            }
        }
        drop(w);
        drop(ns);
        *self.published.locked() = std::time::Instant::now();
        Ok(())
    }

    /// `publish`, if the last one is PUBLISH_INTERVAL old.
    pub fn publish_if_due(&self) -> Result<()> {
        if !self.packs.uploads() || self.published.locked().elapsed() < PUBLISH_INTERVAL {
            return Ok(());
        }
        self.publish()
    }

    /// The follower's side: takes in what the writer published since the last call.
    /// Returns how many log records were applied.
    pub fn follow(&self) -> Result<u64> {
        if !self.follower {
            return Ok(0);
        }
        // Only the follow thread calls this; its state is taken out while it reads.
        let mut st = std::mem::take(&mut *self.follow.locked());
        let r = self.follow_step(&mut st);
        *self.follow.locked() = st;
        r
    }

    fn follow_step(&self, st: &mut FollowState) -> Result<u64> {
        let root = self.root.clone();
        let listed = self.packs.sealed_packs().map_err(io_at(&root))?;
        let mut new: Vec<u64> = listed.iter().map(|p| p.0).filter(|id| !st.seen.contains(id)).collect();
        new.sort_unstable();
        let moved = !new.is_empty();
        for id in new {
            let mut b = Batch::new();
            for blob in self.packs.footer(id)? {
                if ChunkKind::from_u8(blob.kind) == ChunkKind::Meta {
                    let raw = self.packs.read(id, blob.offset, &blob.key, blob.stored_len)?;
                    let rec = MetaRecord::decode(&raw).map_err(|e| StoreError::Log(format!("pack {id:016x} offset {}: {e}", blob.offset)))?;
                    st.waiting.push((rec.seq, rec.ops));
                }
                // Every blob is a chunk where it lies (a log record's refs are 1 for good).
                let refs = self.index.chunk(&blob.key)?.map(|e| e.refs).unwrap_or(matches!(ChunkKind::from_u8(blob.kind), ChunkKind::Meta | ChunkKind::Dict) as u64);
                let e = ChunkEntry { pack: id, offset: blob.offset, stored_len: blob.stored_len, raw_len: blob.raw_len, codec: blob.codec, kind: blob.kind, refs };
                b.put_chunk_unlogged(&self.index, &blob.key, &e);
            }
            self.index.write(b)?;
            st.seen.insert(id);
        }
        st.waiting.sort_by_key(|r| r.0);
        let mut applied = 0u64;
        let mut last = self.index.meta_u64_opt(APPLIED_SEQ)?;
        let mut i = 0;
        while i < st.waiting.len() {
            let seq = st.waiting[i].0;
            if last.is_some_and(|l| seq <= l) {
                i += 1;
                continue;
            }
            if seq != last.map_or(0, |l| l + 1) {
                if !st.gap_reported {
                    log::warn!(
                        "{}: the bucket's metadata log goes on at record {seq}, after {last:?}: records in between are gone (gc'ed before this node saw them); files changed then may be out of date here until the store is mounted again",
                        root.display()
                    );
                    st.gap_reported = true;
                }
                break;
            }
            let mut extra = Batch::new();
            extra.put_meta_u64_unlogged(&self.index, APPLIED_SEQ, seq);
            self.index.apply(&st.waiting[i].1, false, extra)?;
            last = Some(seq);
            applied += 1;
            i += 1;
        }
        st.waiting.drain(..i);
        if applied > 0 || moved {
            // Cached chunk places and recipe pieces may name what changed (a pack gc wrote
            // moves chunks without a log record).
            self.cache.clear();
        }
        Ok(applied)
    }
}
