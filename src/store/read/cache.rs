//! The caches shared by every reader of a store: decoded chunks and rebuilt gzip members
//! (bounded by bytes), recipe pieces, chunk places, the chunks being loaded (so two readers
//! of one chunk read it once), and the counters `stats` shows for a mounted store.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use lru::LruCache;

use crate::LockExt;
use crate::digest::{ChunkKey, Digest};
use crate::format::deflate::Match;
use crate::index::ChunkEntry;
use crate::recipe::Piece;

/// An LRU bounded by the bytes it holds rather than by entry count.
pub(in crate::store) struct SizedLru<K: Hash + Eq, V> {
    pub(in crate::store) map: LruCache<K, (Arc<V>, usize)>,
    pub(in crate::store) bytes: usize,
    pub(in crate::store) budget: usize,
}

impl<K: Hash + Eq, V> SizedLru<K, V> {
    pub(in crate::store) fn new(budget: usize) -> Self {
        SizedLru { map: LruCache::unbounded(), bytes: 0, budget }
    }

    pub(in crate::store) fn get(&mut self, k: &K) -> Option<Arc<V>> {
        self.map.get(k).map(|(v, _)| v.clone())
    }

    /// Keeps `v` unless it would take more than a quarter of the budget.
    pub(in crate::store) fn put(&mut self, k: K, v: Arc<V>, size: usize) {
        if size <= self.budget / 4 {
            self.put_kept(k, v, size);
        }
    }

    /// Keeps `v` whatever its size (one a reader reads on in), the others going, least
    /// recently used first, until the rest fits.
    pub(in crate::store) fn put_kept(&mut self, k: K, v: Arc<V>, size: usize) {
        if let Some((_, old)) = self.map.put(k, (v, size)) {
            self.bytes -= old;
        }
        self.bytes += size;
        while self.bytes > self.budget && self.map.len() > 1 {
            match self.map.pop_lru() {
                Some((_, (_, s))) => self.bytes -= s,
                None => break,
            }
        }
    }

    /// Drops `k`'s entry, if there is one.
    pub(in crate::store) fn remove(&mut self, k: &K) {
        if let Some((_, s)) = self.map.pop(k) {
            self.bytes -= s;
        }
    }

    pub(in crate::store) fn clear(&mut self) {
        self.map.clear();
        self.bytes = 0;
    }
}

pub(in crate::store) type MemberKey = (u64, u32, u32);

pub struct ReadCache {
    pub(in crate::store) chunks: Mutex<SizedLru<ChunkKey, Vec<u8>>>,
    /// Chunks being read and decoded right now (a read-ahead worker and a FUSE thread often
    /// want the same one): later askers wait for the first.
    pub(in crate::store) loading: Flights<ChunkKey>,
    pub(in crate::store) members: Mutex<SizedLru<MemberKey, Vec<u8>>>,
    /// Members being rebuilt right now: a second reader waits for the first instead of
    /// rebuilding the same member again.
    pub(in crate::store) building: Flights<MemberKey>,
    pub(in crate::store) pieces: Mutex<SizedLru<(u64, u32), Piece>>,
    /// Parse tails' matches, decoded once for every member holding their text (`tails`).
    pub(in crate::store) tails: Mutex<SizedLru<Digest, Vec<Match>>>,
    /// Where chunks live in the packs. A chunk's blob never moves while the store is open
    /// (only gc, which needs the store to itself, rewrites packs), and a blob stays readable
    /// under its key even after its last reference goes: a stale entry still reads right.
    pub(in crate::store) places: Mutex<LruCache<ChunkKey, ChunkEntry>>,
    pub(in crate::store) counters: Counters,
}

/// What reads have cost since the store was opened: how often the expensive steps ran.
#[derive(Default)]
pub(in crate::store) struct Counters {
    pub(in crate::store) members_rebuilt: AtomicU64,
    pub(in crate::store) member_hits: AtomicU64,
    pub(in crate::store) tail_hits: AtomicU64,
    pub(in crate::store) chunks_read: AtomicU64,
    pub(in crate::store) pieces_loaded: AtomicU64,
    pub(in crate::store) lookup_read_aheads: AtomicU64,
    /// In nanoseconds (a small member's deflate takes a few microseconds).
    pub(in crate::store) member_gather_ns: AtomicU64,
    pub(in crate::store) member_deflate_ns: AtomicU64,
}

/// A snapshot of the read counters (`warcfs stats` of a mounted store shows them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReadCounters {
    /// gzip members rebuilt (a parse decoded and replayed each).
    pub members_rebuilt: u64,
    /// Reads of a member served from the rebuilt-member cache.
    pub member_hits: u64,
    /// Rebuilds that took their parse tail's matches as decoded for another member.
    #[serde(default)]
    pub tail_hits: u64,
    /// Chunks read from a pack and decoded.
    pub chunks_read: u64,
    /// Recipe pieces read from the index.
    pub pieces_loaded: u64,
    /// Read-aheads for lookups: a MiB of a file whose pack ranges the disk was asked for
    /// (`Store::warm_range`), counted where anything was asked.
    #[serde(default)]
    pub lookup_read_aheads: u64,
    /// Microseconds the member rebuilds spent gathering their plain text (chunk locations,
    /// pack reads, decoding): with the next one, where a lookup in a `.warc.gz` goes.
    #[serde(default)]
    pub member_gather_us: u64,
    /// Microseconds the member rebuilds spent decoding and replaying their parses (the field
    /// keeps its name from when this was a zlib deflate: `stats --json` readers use it).
    #[serde(default)]
    pub member_deflate_us: u64,
}

pub(in crate::store) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl ReadCache {
    pub fn new(chunk_budget: usize, member_budget: usize, tail_budget: usize) -> ReadCache {
        ReadCache {
            chunks: Mutex::new(SizedLru::new(chunk_budget)),
            loading: Flights::new(),
            members: Mutex::new(SizedLru::new(member_budget)),
            building: Flights::new(),
            pieces: Mutex::new(SizedLru::new(64 << 20)),
            tails: Mutex::new(SizedLru::new(tail_budget)),
            places: Mutex::new(LruCache::new(std::num::NonZeroUsize::new(1 << 18).expect("non-zero"))),
            counters: Counters::default(),
        }
    }

    pub fn clear(&self) {
        self.chunks.locked().clear();
        self.members.locked().clear();
        self.pieces.locked().clear();
        self.tails.locked().clear();
        self.places.locked().clear();
    }
}

/// Work in flight by key (a chunk being read, a member being rebuilt): the first asker does
/// it, later askers of the same key wait for that one alone. (One condition variable for all
/// keys woke every waiting reader at every member a read-ahead worker finished, 20,000 times
/// for a `cat` of four crawls, each wake-up preempting a worker; measured in the twenty-third
/// session.)
pub(in crate::store) struct Flights<K: Hash + Eq> {
    gates: Mutex<HashMap<K, Arc<Gate>>>,
}

#[derive(Default)]
struct Gate {
    done: Mutex<bool>,
    finished: Condvar,
}

impl<K: Hash + Eq + Copy> Flights<K> {
    pub(in crate::store) fn new() -> Self {
        Flights { gates: Mutex::new(HashMap::new()) }
    }

    /// What `cached` finds for `key`, waiting first for a flight of `key` under way; or, if
    /// there is neither, a new flight the caller is to carry out (it must put its result
    /// where `cached` looks before the flight ends). `cached` runs with the flights locked,
    /// so a result and the end of its flight are never seen apart (the result may still be
    /// gone by the time a waiter wakes, evicted or let go by a streaming reader: the waiter
    /// then carries out the work itself).
    pub(in crate::store) fn cached_or_begin<R>(&self, key: K, cached: impl Fn() -> Option<R>) -> Result<R, Flight<'_, K>> {
        loop {
            let gate = {
                let mut gates = self.gates.locked();
                if let Some(r) = cached() {
                    return Ok(r);
                }
                match gates.get(&key) {
                    Some(g) => g.clone(),
                    None => {
                        gates.insert(key, Arc::new(Gate::default()));
                        return Err(Flight { flights: self, key });
                    }
                }
            };
            let mut done = gate.done.locked();
            while !*done {
                done = crate::wait_on(&gate.finished, done);
            }
        }
    }

    /// A new flight for `key`, unless `cached` finds its result or one is under way already:
    /// for work ahead of need (read-ahead), which has nothing to wait for.
    pub(in crate::store) fn begin_unless_under_way(&self, key: K, cached: impl Fn() -> bool) -> Option<Flight<'_, K>> {
        let mut gates = self.gates.locked();
        if cached() || gates.contains_key(&key) {
            return None;
        }
        gates.insert(key, Arc::new(Gate::default()));
        Some(Flight { flights: self, key })
    }
}

/// One flight under way: ends when dropped (after a success, a failure or a panic alike),
/// waking those waiting for it; they then find the result, or carry out the work themselves
/// after a failure.
pub(in crate::store) struct Flight<'a, K: Hash + Eq + Copy> {
    flights: &'a Flights<K>,
    key: K,
}

impl<K: Hash + Eq + Copy> Drop for Flight<'_, K> {
    fn drop(&mut self) {
        // A poisoned lock only means another thread panicked; the map is still usable.
        let gate = self.flights.gates.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.key);
        if let Some(g) = gate {
            *g.done.lock().unwrap_or_else(|e| e.into_inner()) = true;
            g.finished.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_key_is_worked_once_and_its_waiters_get_the_result() {
        let flights = Flights::<u32>::new();
        let results: Mutex<HashMap<u32, u32>> = Mutex::new(HashMap::new());
        let runs = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for key in 0..200u32 {
                        match flights.cached_or_begin(key, || results.locked().get(&key).copied()) {
                            Ok(v) => assert_eq!(v, key * 2),
                            Err(_flight) => {
                                runs.fetch_add(1, Ordering::Relaxed);
                                std::thread::yield_now();
                                results.locked().insert(key, key * 2);
                            }
                        }
                    }
                });
            }
        });
        assert_eq!(runs.load(Ordering::Relaxed), 200, "every key's work done exactly once");
    }

    #[test]
    fn a_flight_that_ends_without_a_result_hands_the_work_to_a_waiter() {
        let flights = Flights::<u32>::new();
        let Err(first) = flights.cached_or_begin(7, || None::<u32>) else { panic!("the first asker carries out the work") };
        std::thread::scope(|s| {
            let waiter = s.spawn(|| flights.cached_or_begin(7, || None::<u32>).is_err());
            std::thread::sleep(std::time::Duration::from_millis(20));
            // Failed: no result, the flight just ends.
            drop(first);
            assert!(waiter.join().unwrap(), "the waiter should carry out the work itself");
        });
        // And nothing is left in flight.
        assert!(flights.gates.locked().is_empty());
    }

    #[test]
    fn work_ahead_of_need_is_not_begun_twice_nor_after_its_result() {
        let flights = Flights::<u32>::new();
        let Err(reader) = flights.cached_or_begin(3, || None::<()>) else { panic!("the first asker carries out the work") };
        assert!(flights.begin_unless_under_way(3, || false).is_none(), "under way already");
        assert!(flights.begin_unless_under_way(4, || true).is_none(), "its result is there");
        drop(reader);
        let ahead = flights.begin_unless_under_way(3, || false).expect("neither: begun");
        // A reader asking meanwhile would wait for it, not begin it again.
        assert!(flights.begin_unless_under_way(3, || false).is_none());
        drop(ahead);
        assert!(flights.gates.locked().is_empty());
    }
}
