//! Following a bucket: taking in what other nodes publish there.
//!
//! One process writes to a bucket at a time (its lock object). While it runs, it seals its
//! open packs every `PUBLISH_INTERVAL` when they hold anything (`writer`: data first, then
//! the metadata log, so that a record never reaches the bucket before the chunks it names),
//! and the upload thread sends them in that order. Any number of other nodes mount the store
//! read-only (`mount -o ro`) as followers: every `FOLLOW_INTERVAL` a follower lists the
//! bucket, reads the footers of packs it has not seen (their chunks go into its index where
//! they lie) and applies the metadata log records that follow its last one, in order. So a
//! file closed on the writer appears on every follower within about
//! PUBLISH_INTERVAL + upload + FOLLOW_INTERVAL (the test asks for 10 s at most). A writer of
//! a store several nodes write follows the others the same way (`shared`).
//!
//! A follower never writes to the bucket, and its index refuses every change but these.
//! Should the writer's gc have removed log records the follower never saw (it was away for
//! long), the follower says so and keeps what it has; mounting it again rebuilds its index
//! from the bucket (`Store::open`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::digest::ChunkKey;
use crate::index::{ChunkEntry, LogOp, CF_INODE};
use crate::pack::ChunkKind;
use crate::store::{Followed, Keep, MetaRecord, Opening, Peers, Result, Share, Store};
use crate::LockExt;

/// How often a mounted node takes in what the others published.
pub(super) const FOLLOW_INTERVAL: Duration = Duration::from_secs(2);

/// After this many rounds waiting for a chunk, a record's chunks are looked for in every
/// listed pack (`Store::find_chunks`).
const STALLED_ROUNDS: u32 = 3;

/// The inodes a log record's ops change (put or delete): what a mount must tell the kernel
/// to forget when it applies another node's record.
fn inodes_changed(ops: &[LogOp]) -> impl Iterator<Item = u64> + '_ {
    ops.iter().filter_map(|op| match op {
        LogOp::Put(CF_INODE, k, _) | LogOp::Delete(CF_INODE, k) => crate::index::id_of(k),
        _ => None,
    })
}

/// Whose log records a node takes in, and in which order.
#[derive(Clone, Copy)]
pub(super) enum Logs {
    /// The one log of a store one node writes at a time, in its order (a follower's).
    One,
    /// Each node's log in its own order (a store several nodes write). `own`: on a writer,
    /// its node, whose packs and records its index holds as it wrote them, and whose
    /// chunks keep their place and count (another node's copy of one is garbage).
    PerNode { own: Option<u16> },
}

/// What a node has seen of the bucket, and how it takes in the rest.
pub(super) struct Following {
    logs: Logs,
    state: Mutex<FollowState>,
}

/// What a node following a bucket has seen of it.
#[derive(Default)]
pub(super) struct FollowState {
    /// Packs whose footers are in the index.
    pub(super) seen: HashSet<u64>,
    /// Log records read but not applied yet (an earlier one is missing so far).
    pub(super) waiting: Vec<MetaRecord>,
    /// Set once a gap was reported, so that it is logged once.
    gap_reported: bool,
    /// Set on the placeholder left while a `follow` has the state out.
    pub(super) busy: bool,
    /// A follower's other copies of chunks it keeps elsewhere (met in later packs): where a
    /// chunk goes when gc trashes the pack it is kept in without copying it (gc kept the
    /// other copy). Only duplicates are here: a few, unless two writers stored one payload
    /// at once.
    copies: HashMap<ChunkKey, ChunkEntry>,
    /// How many rounds each waiting record of another node has waited for a chunk.
    stalled: HashMap<(u16, u64), u32>,
    /// Inodes changed by records applied and not yet handed out (a round that fails after
    /// applying some keeps them for the next).
    changed: Vec<u64>,
}

impl Following {
    /// A node whose index reflects exactly the packs `seen` (the listing it was checked or
    /// rebuilt against: a pack published since is read by the first `follow`).
    pub(super) fn new(logs: Logs, seen: impl Iterator<Item = u64>) -> Following {
        Following { logs, state: Mutex::new(FollowState { seen: seen.collect(), ..FollowState::default() }) }
    }

    /// What this node has seen, for a look that must not race a `follow` (`f` is given
    /// the placeholder while one is under way: `busy`).
    pub(super) fn look<T>(&self, f: impl FnOnce(&FollowState) -> T) -> T {
        f(&self.state.locked())
    }

    /// Takes in what the other nodes published since the last call. Returns what was
    /// applied.
    pub(super) fn follow(&self, store: &Store) -> Result<Followed> {
        // Its state is taken out while it reads (no lock held across the bucket's I/O); a
        // call meanwhile (the mount's last note at unmount, while its follow thread is at
        // work) finds the placeholder busy and leaves the work to the one under way: a
        // record must not be applied twice.
        let mut st = {
            let mut g = self.state.locked();
            if g.busy {
                return Ok(Followed::default());
            }
            let st = std::mem::take(&mut *g);
            g.busy = true;
            st
        };
        let r = self.step(store, &mut st);
        *self.state.locked() = st;
        r
    }

    fn step(&self, store: &Store, st: &mut FollowState) -> Result<Followed> {
        let listed = store.sealed_packs()?;
        let mut new: Vec<u64> = listed.iter().map(|p| p.0).filter(|id| !st.seen.contains(id)).collect();
        new.sort_unstable();
        let moved = !new.is_empty();
        let live: HashSet<u64> = listed.iter().map(|p| p.0).collect();
        let own = match self.logs {
            Logs::PerNode { own } => own,
            Logs::One => None,
        };
        for id in new {
            if own == Some(crate::bucket::node_of(id)) {
                st.seen.insert(id);
                continue;
            }
            let blobs = store.blobs_of(id)?;
            for blob in blobs.iter().filter(|b| ChunkKind::from_u8(b.kind) == ChunkKind::Meta) {
                st.waiting.push(store.read_record(id, blob.offset, &blob.key, blob.stored_len)?);
            }
            // A writer's commits put chunks too: looked up and put after the reads above.
            let copies = store.take_in_pack(id, &blobs, if own.is_some() { Keep::Known } else { Keep::Listed(&live) })?;
            if own.is_none() {
                st.copies.extend(copies);
            }
            st.seen.insert(id);
        }
        let departed = self.relocate_departed(store, st, &live)?;
        let applied = match self.logs {
            Logs::One => self.apply_waiting(store, st),
            Logs::PerNode { own } => self.apply_waiting_per_node(store, st, own),
        };
        if applied.as_ref().map_or(true, |&n| n > 0) || moved || departed {
            // Cached chunk places and recipe pieces may name what changed (a pack gc wrote
            // moves chunks without a log record).
            store.forget_cached();
        }
        // Handed out only with a round that succeeds (a failed one keeps them for the next).
        let records = applied?;
        let mut inodes = std::mem::take(&mut st.changed);
        inodes.sort_unstable();
        inodes.dedup();
        Ok(Followed { records, inodes })
    }

    /// Packs that left the listing (gc trashed them): a chunk still kept in one moves to
    /// another copy met (`Store::move_to_copies`). Returns whether any pack left.
    fn relocate_departed(&self, store: &Store, st: &mut FollowState, live: &HashSet<u64>) -> Result<bool> {
        let departed: HashSet<u64> = st.seen.iter().copied().filter(|id| !live.contains(id)).collect();
        if departed.is_empty() {
            return Ok(false);
        }
        st.seen.retain(|id| live.contains(id));
        store.move_to_copies(&mut st.copies, &departed, live)?;
        Ok(true)
    }

    /// Applies the waiting records of a store one node writes at a time: one sequence.
    fn apply_waiting(&self, store: &Store, st: &mut FollowState) -> Result<u64> {
        st.waiting.sort_by_key(|r| r.seq);
        let mut applied = 0u64;
        let mut last = store.applied_seq(None)?;
        let mut i = 0;
        while i < st.waiting.len() {
            let seq = st.waiting[i].seq;
            if last.is_some_and(|l| seq <= l) {
                i += 1;
                continue;
            }
            if seq != last.map_or(0, |l| l + 1) {
                report_gap(store, st, None, seq, last);
                break;
            }
            let rec = &st.waiting[i];
            store.apply_followed(rec)?;
            // A checkpoint restates what its node's records said before: nothing changes.
            if rec.checkpoint.is_none() {
                st.changed.extend(inodes_changed(&rec.ops));
            }
            last = Some(seq);
            applied += 1;
            i += 1;
        }
        st.waiting.drain(..i);
        Ok(applied)
    }

    /// Applies the waiting records of a store several nodes write: each node's in its own
    /// order (`Store::apply_foreign`); `own`'s are in this index already.
    fn apply_waiting_per_node(&self, store: &Store, st: &mut FollowState, own: Option<u16>) -> Result<u64> {
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
                        return Err(e);
                    }
                }
            };
        }
        while let Some(rec) = recs.next() {
            let Some(node) = rec.node.filter(|&n| Some(n) != own) else { continue };
            if blocked == Some(rec.node) {
                keep.push(rec);
                continue;
            }
            let prev = match last {
                Some((n, l)) if n == rec.node => l,
                _ => or_wait!(store.applied_seq(Some(node)), rec),
            };
            if prev.is_some_and(|l| rec.seq <= l) {
                continue;
            }
            if rec.seq != prev.map_or(0, |l| l + 1) {
                report_gap(store, st, Some(node), rec.seq, prev);
                blocked = Some(rec.node);
                keep.push(rec);
                continue;
            }
            let first = rec.checkpoint.filter(|c| c.last).map(|c| c.first_seq);
            let missing = or_wait!(store.apply_foreign(node, rec.seq, &rec.ops, first), rec);
            if !missing.is_empty() {
                // A chunk it names is not here yet: this node's later records wait with it.
                // Normally its pack is on its way up; one that waits for rounds may be in a
                // pack this index holds no entry of (another copy, kept by the node that
                // wrote the record, of a chunk whose copy here a gc took): look for it.
                let rounds = st.stalled.entry((node, rec.seq)).or_insert(0);
                *rounds += 1;
                if *rounds == STALLED_ROUNDS {
                    let found = or_wait!(store.find_chunks(&missing), rec);
                    if found < missing.len() {
                        log::error!(
                            "{}: node {node:04x}'s record {} names {} chunks no pack in the bucket holds (the first: {}); its changes wait",
                            store.root().display(),
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
                st.changed.extend(inodes_changed(&rec.ops));
            }
            last = Some((rec.node, Some(rec.seq)));
            applied += 1;
        }
        st.waiting = keep;
        Ok(applied)
    }
}

fn report_gap(store: &Store, st: &mut FollowState, node: Option<u16>, seq: u64, last: Option<u64>) {
    if !st.gap_reported {
        let whose = node.map(|n| format!("node {n:04x}'s")).unwrap_or_else(|| "the bucket's".into());
        log::warn!(
            "{}: {whose} metadata log goes on at record {seq}, after {last:?}: records in between are gone (gc'ed before this node saw them) or not uploaded yet; files changed then may be out of date here until the store is mounted again",
            store.root().display()
        );
        st.gap_reported = true;
    }
}

/// A node that follows a bucket another node writes (or other nodes write), changing
/// nothing: mounted read-only, it takes in what they publish.
pub(super) struct Follower {
    following: Following,
}

impl Follower {
    /// Opens `o` as a follower: no bucket lock, its index brought in line with the bucket
    /// (`join::sync_index`), nothing written but what `follow` takes in.
    pub(super) fn open(mut o: Opening) -> Result<Store> {
        let r = super::join::bucket_of(&o)?;
        let synced = super::join::sync_index(&mut o, &r, None, |_, _| None)?;
        // A follower's index keeps no refcounts (`follow` leaves chunk changes out): it must
        // never pass as up to date when this node next opens to write, where gc would take
        // its zero counts at their word. 0 is no signature of any listing.
        o.note_listing(0)?;
        let logs = match Share::of(&o.config).log_node() {
            None => Logs::One,
            Some(_) => Logs::PerNode { own: None },
        };
        let following = Following::new(logs, synced.listed.iter().map(|p| p.0));
        let next = o.max_id + 1;
        let store = o.into_store(next, Arc::new(Follower { following }))?;
        store.finish_open()?;
        Ok(store)
    }
}

impl Peers for Follower {
    fn follow(&self, store: &Store) -> Result<Followed> {
        self.following.follow(store)
    }

    fn in_step_every(&self) -> Option<(Duration, &'static str)> {
        Some((FOLLOW_INTERVAL, "following the bucket"))
    }

    fn keep_in_step(&self, store: &Store, changed: &mut dyn FnMut(&[u64])) -> Result<()> {
        changed(&self.following.follow(store)?.inodes);
        Ok(())
    }

    fn others_write(&self) -> bool {
        true
    }
}
