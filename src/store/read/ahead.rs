//! Read-ahead for sequential readers: while a reader consumes one part of a file, background
//! threads have the kernel read the pack ranges of the next `WINDOW` bytes and rebuild its
//! gzip members, so its next reads find the bytes in memory and the members in the cache.
//!
//! Readers (open handles) report where they are (`reader_at`); an idle worker turns the
//! newest report of each reader into planned work (`Store::plan_ahead`), and the workers take
//! that work in file order. A reader that needs a member a worker is rebuilding waits for it
//! rather than rebuilding it again (see `ReadCache`).
//!
//! Lookups (reads that jumped) are reported too (`looked_up`): the second in one MiB of a
//! file (a `ZONE`) has a worker ask the kernel for the pack ranges of everything reading that
//! MiB takes (`Store::warm_range`), since the records replayed together (a page and its
//! resources) were mostly captured together and lie near each other. A zone is read ahead
//! once while it is remembered, so lookups cost at most that (`WARM_BUDGET`), and only where a
//! reader came back.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use crate::store::read::Ahead;
use crate::store::Store;
use crate::LockExt;
use crate::recipe::RecipeHead;

/// How far ahead of a reader the work is done, at most.
pub const WINDOW: u64 = 32 << 20;
/// A reader starts being read ahead for once it has read this much in one sequential run:
/// a record lookup reads a few pages in a row, and rebuilding megabytes after each would
/// cost more than the lookups themselves.
pub const START_AFTER: u64 = 256 << 10;

/// How far behind its last report a reader's report may be and still be an earlier read's,
/// answered on another thread and reported late (the kernel has a few reads of at most 1 MiB
/// in flight), rather than a reader that went back.
const OVERTAKEN: u64 = 4 << 20;

/// The stretch of a file that lookups are counted in and read ahead for.
const ZONE: u64 = 1 << 20;
/// How many zones the lookups remember (about 40 bytes each); past that they start over, and
/// a zone may be read ahead for again.
const LOOKED_MAX: usize = 1 << 14;
/// How many zones may wait for a worker; lookups that come faster than the workers read
/// ahead go without.
const WARM_QUEUE: usize = 32;

/// How far ahead of a reader `run` bytes into a sequential run the work goes. Like the
/// kernel's read-ahead the window grows with the run, so short runs cost little and long ones
/// find their bytes read and their members rebuilt. How fast it grows depends on the work:
/// rebuilding gzip members takes the CPU the reader needs too, so it grows four times the run
/// (twice left a cold `cat` waiting on the disk more: 0.24 s against 0.20 s for 148 MB); plain
/// data only has its pack ranges read, which the disk does while the reader decodes, so it
/// grows sixteen times the run (a cold `cat` of the plain 148 MB file: 0.197-0.207 s against
/// 0.220-0.228 s with four times, medians of four or five alternating runs).
fn window_for(run: u64, rebuilds_members: bool) -> u64 {
    let factor = if rebuilds_members { 4 } else { 16 };
    run.saturating_mul(factor).min(WINDOW)
}

/// Threads that rebuild a file's gzip members ahead of one reader (`Store::copy_to`) or of
/// the mount's sequential readers (`ReadAhead`): one a core, 2 to 8. Rebuilding is CPU work
/// (a member in the predicted form at about 110 MB/s of text a core), so a `.warc.gz` is read
/// as fast as the cores given to it allow.
pub fn rebuild_threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(2, 8)
}

pub struct ReadAhead {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

struct Shared {
    store: Arc<Store>,
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Default)]
struct State {
    /// The newest position each reader reported, and how far ahead to work, not planned yet.
    reported: HashMap<u64, (Arc<RecipeHead>, u64, u64)>,
    /// How far each reader is planned.
    planned: HashMap<u64, u64>,
    /// Planned work, in order: the reader it is for, the file, the job.
    jobs: VecDeque<(u64, Arc<RecipeHead>, Ahead)>,
    /// Where each reader last said it would read next: a job for a member it has passed
    /// (it rebuilt that one itself, and streaming it dropped it from the cache) is skipped.
    at: HashMap<u64, u64>,
    /// Zones `(recipe, offset / ZONE)` a lookup touched: false once, true once read ahead.
    looked: HashMap<(u64, u64), bool>,
    /// Zones to read ahead for, in order.
    warm: VecDeque<(Arc<RecipeHead>, u64)>,
    closed: bool,
}

impl ReadAhead {
    /// Starts `threads` workers.
    pub fn start(store: Arc<Store>, threads: usize) -> std::io::Result<ReadAhead> {
        let shared = Arc::new(Shared { store, state: Mutex::new(State::default()), wake: Condvar::new() });
        let mut workers = Vec::new();
        for i in 0..threads {
            let s = shared.clone();
            workers.push(std::thread::Builder::new().name(format!("warcfs-ahead-{i}")).spawn(move || work(&s))?);
        }
        Ok(ReadAhead { shared, workers })
    }

    /// A reader of `head` will read at `offset` next, after `run` bytes read in a row (see
    /// `window_for` for how far ahead that takes the work). `rebuilds_members` is what its
    /// open found out about the file, if it opened one with a recipe. `open` says whether the
    /// reader is still open; it is asked with the state locked, so a report that races the
    /// reader's `forget` (its last read answered, then its close) is either dropped here or
    /// forgotten there, never kept for good.
    pub fn reader_at(&self, reader: u64, head: Arc<RecipeHead>, offset: u64, run: u64, rebuilds_members: Option<bool>, open: impl Fn() -> bool) {
        if run < START_AFTER {
            return;
        }
        // Outside the state lock: this may read the file's first recipe piece.
        let members = rebuilds_members.unwrap_or_else(|| self.shared.store.rebuilds_members(&head));
        let window = window_for(run, members);
        let mut st = self.shared.state.locked();
        if !open() {
            return;
        }
        st.reported.insert(reader, (head, offset, window));
        match st.at.get(&reader).copied() {
            // A reader that went back (a re-read) is planned afresh from where it is: what
            // was planned behind it may be gone from the cache (`Store::read_streaming`).
            Some(before) if offset.saturating_add(OVERTAKEN) < before => {
                st.at.insert(reader, offset);
                st.planned.remove(&reader);
                st.jobs.retain(|(r, _, _)| *r != reader);
            }
            // Reads answered on two threads report in either order: a report a later one
            // overtook says nothing new.
            Some(before) if offset < before => {}
            _ => {
                st.at.insert(reader, offset);
            }
        }
        drop(st);
        self.shared.wake.notify_one();
    }

    /// A reader jumped to `offset` of `head` (a record lookup): the second such read in one
    /// zone of the file queues that zone to be read ahead for.
    pub fn looked_up(&self, head: Arc<RecipeHead>, offset: u64) {
        if offset >= head.size {
            return;
        }
        let zone = offset / ZONE;
        let mut st = self.shared.state.locked();
        if st.looked.len() >= LOOKED_MAX {
            st.looked.clear();
        }
        let key = (head.id, zone);
        match st.looked.get(&key) {
            None => {
                st.looked.insert(key, false);
            }
            // (A full queue leaves the zone to the next lookup there.)
            Some(false) if st.warm.len() < WARM_QUEUE => {
                st.looked.insert(key, true);
                st.warm.push_back((head, zone));
                drop(st);
                self.shared.wake.notify_one();
            }
            Some(_) => {}
        }
    }

    /// The reader is gone (its handle was released): drop what was planned for it.
    pub fn forget(&self, reader: u64) {
        let mut st = self.shared.state.locked();
        st.reported.remove(&reader);
        st.at.remove(&reader);
        if st.planned.remove(&reader).is_some() {
            st.jobs.retain(|(r, _, _)| *r != reader);
        }
    }

    /// Drops pending work and stops the workers.
    pub fn stop(&mut self) {
        {
            let mut st = self.shared.state.locked();
            st.closed = true;
            st.jobs.clear();
            st.warm.clear();
        }
        self.shared.wake.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        self.stop();
    }
}

fn work(shared: &Shared) {
    let mut st = shared.state.locked();
    loop {
        if st.closed {
            return;
        }
        // Lookups' read-ahead first: it asks the disk for ranges and returns, and the lookups
        // it is for wait on the disk, where sequential readers are served from work done
        // already.
        if let Some((head, zone)) = st.warm.pop_front() {
            drop(st);
            match crate::store::bug_as_error("reading ahead for lookups", || shared.store.warm_range(&head, zone * ZONE, zone.saturating_add(1).saturating_mul(ZONE))) {
                Ok(bytes) => log::trace!("read ahead for lookups in MiB {zone} of recipe {}: {bytes} bytes asked for", head.id),
                Err(e) => log::debug!("reading ahead for lookups in MiB {zone} of recipe {}: {e}", head.id),
            }
            st = shared.state.locked();
            continue;
        }
        if let Some((reader, head, job)) = st.jobs.pop_front() {
            if st.at.get(&reader).is_some_and(|&at| at >= job.end) {
                continue;
            }
            drop(st);
            // The reader will hit the same error (or bug) itself and report it; this is only
            // a hint, and a worker lost to a panic would end read-ahead for every reader.
            if let Err(e) = crate::store::bug_as_error("read-ahead", || shared.store.run_ahead(&head, &job)) {
                log::debug!("read-ahead in recipe {}: {e}", head.id);
            }
            st = shared.state.locked();
            continue;
        }
        let Some(&reader) = st.reported.keys().next() else {
            st = crate::wait_on(&shared.wake, st);
            continue;
        };
        let (head, offset, window) = st.reported.remove(&reader).expect("key just seen");
        let planned = st.planned.get(&reader).copied().unwrap_or(0);
        // A reader that moved outside the planned window sought elsewhere: what was queued
        // for its old position is no longer wanted.
        let from = if offset > planned || offset + 2 * WINDOW < planned {
            st.jobs.retain(|(r, _, _)| *r != reader);
            offset
        } else {
            planned
        };
        let to = (offset + window).min(head.size);
        if from >= to {
            continue;
        }
        st.planned.insert(reader, to);
        drop(st);
        let planned_jobs = crate::store::bug_as_error("planning read-ahead", || shared.store.plan_ahead(&head, from, to));
        st = shared.state.locked();
        match planned_jobs {
            // The reader may have gone while this was planned.
            Ok(jobs) if st.planned.contains_key(&reader) => {
                st.jobs.extend(jobs.into_iter().map(|j| (reader, head.clone(), j)));
                shared.wake.notify_all();
            }
            Ok(_) => {}
            Err(e) => log::debug!("planning read-ahead of recipe {}: {e}", head.id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_reader_leaves_nothing_and_one_that_went_back_is_planned_afresh() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&dir.path().join("s"), true).unwrap());
        // No workers: the state stays as the reports leave it.
        let ahead = ReadAhead::start(store, 0).unwrap();
        let head = Arc::new(RecipeHead { size: 1 << 30, ..Default::default() });
        let state = || ahead.shared.state.locked();
        // Its last read answered after its close (and `forget`): the report is dropped.
        ahead.reader_at(1, head.clone(), 8 << 20, 8 << 20, Some(true), || false);
        {
            let st = state();
            assert!(st.reported.is_empty() && st.at.is_empty());
        }
        // An open reader is recorded; a job planned for it ahead stays while it goes on...
        ahead.reader_at(2, head.clone(), 8 << 20, 8 << 20, Some(true), || true);
        state().planned.insert(2, 12 << 20);
        state().jobs.push_back((2, head.clone(), Ahead { piece: 0, segment: 9, end: 11 << 20 }));
        ahead.reader_at(2, head.clone(), 9 << 20, 9 << 20, Some(true), || true);
        // (A report an earlier read makes late changes nothing.)
        ahead.reader_at(2, head.clone(), 8 << 20, 8 << 20, Some(true), || true);
        {
            let st = state();
            assert_eq!((st.planned.get(&2).copied(), st.jobs.len(), st.at.get(&2).copied()), (Some(12 << 20), 1, Some(9 << 20)));
        }
        // ...and goes when it reads again from further back.
        ahead.reader_at(2, head.clone(), 1 << 20, 1 << 20, Some(true), || true);
        {
            let st = state();
            assert_eq!((st.planned.get(&2).copied(), st.jobs.len(), st.at.get(&2).copied()), (None, 0, Some(1 << 20)));
        }
        ahead.forget(2);
        let st = state();
        assert!(st.at.is_empty() && st.reported.is_empty());
    }

    #[test]
    fn the_second_lookup_in_a_zone_reads_ahead_for_it_once_within_its_budget() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&dir.path().join("s"), true).unwrap());
        // No workers: the queue stays as the lookups leave it.
        let ahead = ReadAhead::start(store.clone(), 0).unwrap();
        let head = Arc::new(RecipeHead { id: 7, size: 3 * ZONE, piece_starts: vec![0] });
        let queued = || ahead.shared.state.locked().warm.iter().map(|(h, z)| (h.id, *z)).collect::<Vec<_>>();
        ahead.looked_up(head.clone(), ZONE + 50);
        assert!(queued().is_empty());
        ahead.looked_up(head.clone(), 2 * ZONE - 1);
        // Once however often it is looked in; another zone's first lookup, and one past the
        // file's end, queue nothing.
        ahead.looked_up(head.clone(), ZONE);
        ahead.looked_up(head.clone(), 10);
        ahead.looked_up(head.clone(), 3 * ZONE);
        ahead.looked_up(head.clone(), 3 * ZONE);
        assert_eq!(queued(), vec![(7, 1)]);
        // A full queue leaves a zone to its next lookup.
        let other = |id| Arc::new(RecipeHead { id, ..(*head).clone() });
        for id in 100..=100 + WARM_QUEUE as u64 {
            ahead.looked_up(other(id), 0);
            ahead.looked_up(other(id), 0);
        }
        assert_eq!(queued().len(), WARM_QUEUE);
        ahead.shared.state.locked().warm.clear();
        let last = 100 + WARM_QUEUE as u64;
        ahead.looked_up(other(last), 10);
        assert_eq!(queued(), vec![(last, 0)]);

        // A worker reads ahead in a stored file: every chunk the zone needs asked for, and
        // no more than the budget; a smaller budget is kept to.
        let mut data = vec![0u8; 3 << 20];
        let mut x = 1u64;
        for b in data.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        store.put_file(crate::store::ROOT_INO, b"f", &data, crate::store::FileMeta { mode: 0o644, mtime: crate::store::Timestamp::now() }).unwrap();
        let head = Arc::new(store.inode(store.resolve("/f").unwrap()).unwrap().unwrap().recipe.unwrap());
        let keys = store.piece(&head, 0).unwrap().keys.clone();
        assert!(keys.len() > 2);
        let places = store.locate(&keys).unwrap();
        assert_eq!(store.ask_for(&places, super::super::SEQUENTIAL_GAP, 100_000), 100_000);
        let ahead = ReadAhead::start(store.clone(), 1).unwrap();
        ahead.looked_up(head.clone(), ZONE + 10);
        ahead.looked_up(head.clone(), 2 * ZONE - 10);
        let t = std::time::Instant::now();
        while store.read_counters().lookup_read_aheads == 0 && t.elapsed() < std::time::Duration::from_secs(30) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(store.read_counters().lookup_read_aheads, 1);
        // The chunks that hold the zone's MiB (random bytes: stored as they are, so their
        // blobs add up to at least a MiB), not the whole file's; a range of the whole file
        // is cut at the budget.
        let (_, zone_keys) = store.needed_within(&head, ZONE, 2 * ZONE).unwrap();
        assert!(zone_keys.len() < keys.len(), "{} of the file's {} chunks", zone_keys.len(), keys.len());
        let zone_bytes = store.locate(&zone_keys).unwrap().iter().flatten().map(|e| e.stored_len as u64).sum::<u64>();
        let asked = store.warm_range(&head, ZONE, 2 * ZONE).unwrap();
        assert!(asked >= ZONE && asked >= zone_bytes && asked < super::super::prefetch::WARM_BUDGET, "{asked} bytes asked for");
        assert_eq!(store.warm_range(&head, 0, 3 * ZONE).unwrap(), super::super::prefetch::WARM_BUDGET);
    }

    #[test]
    fn plain_data_is_read_ahead_further_than_members_are_rebuilt() {
        let run = START_AFTER;
        assert_eq!(window_for(run, false), 16 * run);
        assert_eq!(window_for(run, true), 4 * run);
        // Both stop at the same bound, however long the run.
        assert_eq!(window_for(WINDOW, false), WINDOW);
        assert_eq!(window_for(u64::MAX, true), WINDOW);
    }
}
