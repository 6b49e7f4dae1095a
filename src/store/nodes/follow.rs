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

use crate::store::journal::{MetaRecord, APPLIED_SEQ};
use crate::store::{io_at, Result, Store, StoreError};
use crate::LockExt;
use crate::index::{Batch, ChunkEntry};
use crate::pack::ChunkKind;

pub const PUBLISH_INTERVAL: Duration = Duration::from_secs(4);
pub const FOLLOW_INTERVAL: Duration = Duration::from_secs(2);

/// What one `follow` took in: how many log records, and the inodes they changed (a mount
/// tells the kernel to drop what it cached of them: a file another node rewrote may keep
/// its size and times, and the kernel's pages would go on showing the old bytes).
#[derive(Debug, Default)]
pub struct Followed {
    pub records: u64,
    pub inodes: Vec<u64>,
}

/// What a follower has seen of the bucket.
#[derive(Default)]
pub(in crate::store) struct FollowState {
    /// Packs whose footers are in the index.
    pub(in crate::store) seen: HashSet<u64>,
    /// Log records read but not applied yet (an earlier one is missing so far).
    pub(in crate::store) waiting: Vec<MetaRecord>,
    /// Set once a gap was reported, so that it is logged once.
    gap_reported: bool,
    /// Set on the placeholder left while a `follow` has the state out.
    pub(in crate::store) busy: bool,
    /// A follower's other copies of chunks it keeps elsewhere (met in later packs): where a
    /// chunk goes when gc trashes the pack it is kept in without copying it (gc kept the
    /// other copy). Only duplicates are here: a few, unless two writers stored one payload
    /// at once.
    alternates: std::collections::HashMap<crate::digest::ChunkKey, ChunkEntry>,
    /// How many rounds each waiting record of another node has waited for a chunk.
    stalled: std::collections::HashMap<(u16, u64), u32>,
    /// Inodes changed by records applied and not yet handed out (a round that fails after
    /// applying some keeps them for the next).
    changed: Vec<u64>,
}

/// After this many rounds waiting for a chunk, a record's chunks are looked for in every
/// listed pack (`find_chunks`).
const STALLED_ROUNDS: u32 = 3;

impl FollowState {
    /// A follower whose index reflects exactly the packs `ids` (the listing it was checked or
    /// rebuilt against: a pack published since is read by the first `follow`).
    pub(in crate::store) fn seeded(ids: impl Iterator<Item = u64>) -> FollowState {
        FollowState { seen: ids.collect(), ..FollowState::default() }
    }
}

impl Store {
    /// Whether this store follows a bucket that another node writes (`open_follower`).
    pub fn is_follower(&self) -> bool {
        self.mode.follows()
    }

    /// Whether files here change without this process: another node writes them (this is
    /// a follower, or one of the nodes of a store several nodes write).
    pub fn changed_elsewhere(&self) -> bool {
        self.mode.changed_elsewhere()
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

    /// The follower's side: takes in what the writer published since the last call (and on
    /// a store several nodes write, each writer's side too: what the others published).
    /// Returns what was applied.
    pub fn follow(&self) -> Result<Followed> {
        if !self.changed_elsewhere() {
            return Ok(Followed::default());
        }
        // Its state is taken out while it reads (no lock held across the bucket's I/O); a
        // call meanwhile (the mount's last note at unmount, while its follow thread is at
        // work) finds the placeholder busy and leaves the work to the one under way: a
        // record must not be applied twice.
        let mut st = {
            let mut g = self.follow.locked();
            if g.busy {
                return Ok(Followed::default());
            }
            let st = std::mem::take(&mut *g);
            g.busy = true;
            st
        };
        let r = self.follow_step(&mut st);
        *self.follow.locked() = st;
        r
    }

    fn follow_step(&self, st: &mut FollowState) -> Result<Followed> {
        let root = self.root.clone();
        let listed = self.packs.sealed_packs().map_err(io_at(&root))?;
        let mut new: Vec<u64> = listed.iter().map(|p| p.0).filter(|id| !st.seen.contains(id)).collect();
        new.sort_unstable();
        let moved = !new.is_empty();
        let live: HashSet<u64> = listed.iter().map(|p| p.0).collect();
        // A writer of a shared store: its own packs are in its index as it wrote them, and a
        // chunk it has keeps its place and count (another node's copy of it is garbage).
        let writer = !self.mode.follows();
        for id in new {
            if writer && crate::bucket::node_of(id) == self.node() {
                st.seen.insert(id);
                continue;
            }
            // A damaged footer does not hide the blobs: they describe themselves (as a
            // rebuild reads them), and one bad pack must not stop this node following.
            let blobs = match self.packs.footer(id) {
                Err(e @ crate::pack::PackError::Corrupt { .. }) => {
                    log::warn!("{}: {e}; reading its blobs one by one instead", root.display());
                    self.packs.scan(id)?
                }
                r => r?,
            };
            for blob in blobs.iter().filter(|b| ChunkKind::from_u8(b.kind) == ChunkKind::Meta) {
                let raw = self.packs.read(id, blob.offset, &blob.key, blob.stored_len)?;
                let rec = MetaRecord::decode(&raw).map_err(|e| StoreError::BadLogRecord { at: format!("pack {id:016x} offset {}", blob.offset), what: e.to_string() })?;
                st.waiting.push(rec);
            }
            // A writer's commits put chunks too: looked up and put under their lock (after
            // the reads above), so that a chunk a commit just put keeps its count.
            let _ns = writer.then(|| self.ns.locked());
            let mut b = Batch::new();
            for blob in blobs {
                let known = self.index.chunk(&blob.key)?;
                // A chunk keeps its place while its pack is listed: a writer's index says
                // where the writer put it (another node's copy of it is garbage for gc), and
                // a follower keeps the copy it found first, as the writer does. It moves
                // only once gc has trashed that pack (and written the copy read here).
                if known.as_ref().is_some_and(|k| writer || live.contains(&k.pack)) {
                    if !writer && known.as_ref().is_some_and(|k| k.pack != id) {
                        let alt = ChunkEntry { pack: id, offset: blob.offset, stored_len: blob.stored_len, raw_len: blob.raw_len, codec: blob.codec, kind: blob.kind, refs: 0 };
                        st.alternates.insert(blob.key, alt);
                    }
                    continue;
                }
                // Every blob is a chunk where it lies (a log record's refs are 1 for good).
                let refs = known.map(|e| e.refs).unwrap_or(matches!(ChunkKind::from_u8(blob.kind), ChunkKind::Meta | ChunkKind::Dict) as u64);
                let e = ChunkEntry { pack: id, offset: blob.offset, stored_len: blob.stored_len, raw_len: blob.raw_len, codec: blob.codec, kind: blob.kind, refs };
                b.put_chunk_unlogged(&self.index, &blob.key, &e);
            }
            self.index.write(b)?;
            st.seen.insert(id);
        }
        let departed = self.relocate_departed(st, &live)?;
        let applied = if self.mode.shared() { self.apply_waiting_shared(st) } else { self.apply_waiting(st) };
        if applied.as_ref().map_or(true, |&n| n > 0) || moved || departed {
            // Cached chunk places and recipe pieces may name what changed (a pack gc wrote
            // moves chunks without a log record).
            self.cache.clear();
        }
        // Handed out only with a round that succeeds (a failed one keeps them for the next).
        let records = applied?;
        let mut inodes = std::mem::take(&mut st.changed);
        inodes.sort_unstable();
        inodes.dedup();
        Ok(Followed { records, inodes })
    }
}

impl Store {
    /// Applies the waiting records of a store one node writes at a time: one sequence.
    fn apply_waiting(&self, st: &mut FollowState) -> Result<u64> {
        st.waiting.sort_by_key(|r| r.seq);
        let mut applied = 0u64;
        let mut last = self.index.meta_u64_opt(APPLIED_SEQ)?;
        let mut i = 0;
        while i < st.waiting.len() {
            let seq = st.waiting[i].seq;
            if last.is_some_and(|l| seq <= l) {
                i += 1;
                continue;
            }
            if seq != last.map_or(0, |l| l + 1) {
                self.report_gap(st, None, seq, last);
                break;
            }
            let mut extra = Batch::new();
            extra.put_meta_u64_unlogged(&self.index, APPLIED_SEQ, seq);
            self.index.apply(&st.waiting[i].ops, false, extra)?;
            let rec = &st.waiting[i];
            // A checkpoint restates what its node's records said before: nothing changes.
            if rec.checkpoint.is_none() {
                st.changed.extend(crate::store::nodes::shared::inodes_changed(&rec.ops));
            }
            last = Some(seq);
            applied += 1;
            i += 1;
        }
        st.waiting.drain(..i);
        Ok(applied)
    }

    /// Applies the waiting records of a shared store: each node's in its own order
    /// (`Store::apply_foreign`); this node's own are in its index already.
    fn apply_waiting_shared(&self, st: &mut FollowState) -> Result<u64> {
        st.waiting.sort_by_key(|r| (r.node, r.seq));
        let mut applied = 0u64;
        let mut keep = Vec::new();
        let mut blocked: Option<Option<u16>> = None;
        let mut last: Option<(Option<u16>, Option<u64>)> = None;
        let mut recs = std::mem::take(&mut st.waiting).into_iter();
        // An error part-way (a piece of the other node's that does not read back, the bucket
        // unreachable) keeps this record and the rest waiting: their packs count as taken in,
        // so nothing would read them again, and a gc here would take the other node's new
        // chunks, which no recipe in this index names yet, for garbage.
        macro_rules! or_wait {
            ($r:expr, $rec:expr) => {
                match $r {
                    Ok(v) => v,
                    Err(e) => {
                        keep.push($rec);
                        keep.extend(recs);
                        st.waiting = keep;
                        return Err(e.into());
                    }
                }
            };
        }
        while let Some(rec) = recs.next() {
            let Some(node) = rec.node.filter(|&n| n != self.node() || self.mode.follows()) else { continue };
            if blocked == Some(rec.node) {
                keep.push(rec);
                continue;
            }
            let prev = match last {
                Some((n, l)) if n == rec.node => l,
                _ => or_wait!(self.index.meta_u64_opt(&crate::store::journal::applied_key(node)), rec),
            };
            if prev.is_some_and(|l| rec.seq <= l) {
                continue;
            }
            if rec.seq != prev.map_or(0, |l| l + 1) {
                self.report_gap(st, Some(node), rec.seq, prev);
                blocked = Some(rec.node);
                keep.push(rec);
                continue;
            }
            let first = rec.checkpoint.filter(|c| c.last).map(|c| c.first_seq);
            let missing = or_wait!(self.apply_foreign(node, rec.seq, &rec.ops, first), rec);
            if !missing.is_empty() {
                // A chunk it names is not here yet: this node's later records wait with it.
                // Normally its pack is on its way up; one that waits for rounds may be in a
                // pack this index holds no entry of (another copy, kept by the node that
                // wrote the record, of a chunk whose copy here a gc took): look for it.
                let rounds = st.stalled.entry((node, rec.seq)).or_insert(0);
                *rounds += 1;
                if *rounds == STALLED_ROUNDS {
                    let found = or_wait!(self.find_chunks(&missing), rec);
                    if found < missing.len() {
                        log::error!(
                            "{}: node {node:04x}'s record {} names {} chunks no pack in the bucket holds (the first: {}); its changes wait",
                            self.root.display(),
                            rec.seq,
                            missing.len() - found,
                            missing[0].short()
                        );
                    }
                    *rounds = 0;
                }
                blocked = Some(rec.node);
                keep.push(rec);
                continue;
            }
            st.stalled.remove(&(node, rec.seq));
            if rec.checkpoint.is_none() {
                st.changed.extend(crate::store::nodes::shared::inodes_changed(&rec.ops));
            }
            last = Some((rec.node, Some(rec.seq)));
            applied += 1;
        }
        st.waiting = keep;
        Ok(applied)
    }

    fn report_gap(&self, st: &mut FollowState, node: Option<u16>, seq: u64, last: Option<u64>) {
        if !st.gap_reported {
            let whose = node.map(|n| format!("node {n:04x}'s")).unwrap_or_else(|| "the bucket's".into());
            log::warn!(
                "{}: {whose} metadata log goes on at record {seq}, after {last:?}: records in between are gone (gc'ed before this node saw them) or not uploaded yet; files changed then may be out of date here until the store is mounted again",
                self.root.display()
            );
            st.gap_reported = true;
        }
    }
}

impl Store {
    /// A follower's packs that left the listing (gc trashed them): a chunk still kept in one
    /// moves to another copy it met, if any (gc's new packs moved the others already).
    /// Returns whether any pack left.
    fn relocate_departed(&self, st: &mut FollowState, live: &HashSet<u64>) -> Result<bool> {
        let departed: HashSet<u64> = st.seen.iter().copied().filter(|id| !live.contains(id)).collect();
        if departed.is_empty() {
            return Ok(false);
        }
        st.seen.retain(|id| live.contains(id));
        let mut b = Batch::new();
        for (key, alt) in &st.alternates {
            if !live.contains(&alt.pack) {
                continue;
            }
            if let Some(e) = self.index.chunk(key)?.filter(|e| departed.contains(&e.pack)) {
                b.put_chunk_unlogged(&self.index, key, &ChunkEntry { refs: e.refs, ..alt.clone() });
            }
        }
        self.index.write(b)?;
        // Keep only copies still listed that are not where the chunk is kept now (gc moves
        // every chunk of a rewritten pack: those would otherwise pile up with every gc).
        let mut keep = std::collections::HashMap::new();
        for (key, alt) in std::mem::take(&mut st.alternates) {
            if live.contains(&alt.pack) && self.index.chunk(&key)?.is_some_and(|e| e.pack != alt.pack) {
                keep.insert(key, alt);
            }
        }
        st.alternates = keep;
        Ok(true)
    }
}

impl Store {
    /// Looks for `keys` in the footers of every listed pack and puts each found into the
    /// index where it lies (unused here until a record counts it). Returns how many were
    /// found. Reads every footer: only for records that have waited for rounds.
    fn find_chunks(&self, keys: &[crate::digest::ChunkKey]) -> Result<usize> {
        let mut want: HashSet<crate::digest::ChunkKey> = keys.iter().copied().collect();
        let mut found = 0;
        let listed = self.packs.sealed_packs().map_err(io_at(&self.root))?;
        for (id, _) in listed {
            if want.is_empty() {
                break;
            }
            let blobs = match self.packs.footer(id) {
                Ok(b) => b,
                Err(e) => {
                    log::warn!("{}: {e}", self.root.display());
                    continue;
                }
            };
            let hits: Vec<_> = blobs.into_iter().filter(|b| want.contains(&b.key)).collect();
            if hits.is_empty() {
                continue;
            }
            let _ns = self.ns.locked();
            let mut b = Batch::new();
            for blob in hits {
                want.remove(&blob.key);
                if self.index.chunk(&blob.key)?.is_none() {
                    let e = ChunkEntry { pack: id, offset: blob.offset, stored_len: blob.stored_len, raw_len: blob.raw_len, codec: blob.codec, kind: blob.kind, refs: 0 };
                    b.put_chunk_unlogged(&self.index, &blob.key, &e);
                }
                found += 1;
            }
            self.index.write(b)?;
        }
        Ok(found)
    }
}
