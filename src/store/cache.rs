//! The caches shared by every reader of a store: decoded chunks and rebuilt gzip members
//! (bounded by bytes), recipe pieces, chunk places, the chunks being loaded (so two readers
//! of one chunk read it once), and the counters `stats` shows for a mounted store.

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use lru::LruCache;

use crate::LockExt;
use crate::digest::ChunkKey;
use crate::index::ChunkEntry;
use crate::recipe::Piece;

/// An LRU bounded by the bytes it holds rather than by entry count.
pub(super) struct SizedLru<K: Hash + Eq, V> {
    pub(super) map: LruCache<K, (Arc<V>, usize)>,
    pub(super) bytes: usize,
    pub(super) budget: usize,
}

impl<K: Hash + Eq, V> SizedLru<K, V> {
    pub(super) fn new(budget: usize) -> Self {
        SizedLru { map: LruCache::unbounded(), bytes: 0, budget }
    }

    pub(super) fn get(&mut self, k: &K) -> Option<Arc<V>> {
        self.map.get(k).map(|(v, _)| v.clone())
    }

    pub(super) fn put(&mut self, k: K, v: Arc<V>, size: usize) {
        if size > self.budget / 4 {
            return;
        }
        if let Some((_, old)) = self.map.put(k, (v, size)) {
            self.bytes -= old;
        }
        self.bytes += size;
        while self.bytes > self.budget {
            match self.map.pop_lru() {
                Some((_, (_, s))) => self.bytes -= s,
                None => break,
            }
        }
    }

    pub(super) fn clear(&mut self) {
        self.map.clear();
        self.bytes = 0;
    }
}

pub(super) type MemberKey = (u64, u32, u32);

pub struct ReadCache {
    pub(super) chunks: Mutex<SizedLru<ChunkKey, Vec<u8>>>,
    /// Chunks being read and decoded right now (a read-ahead worker and a FUSE thread often
    /// want the same one): later askers wait for the first.
    pub(super) loading: Mutex<HashSet<ChunkKey>>,
    pub(super) loaded: Condvar,
    pub(super) members: Mutex<SizedLru<MemberKey, Vec<u8>>>,
    /// Members being rebuilt right now: a second reader waits for the first instead of
    /// compressing the same member again.
    pub(super) building: Mutex<HashSet<MemberKey>>,
    pub(super) built: Condvar,
    pub(super) pieces: Mutex<SizedLru<(u64, u32), Piece>>,
    /// Where chunks live in the packs. A chunk's blob never moves while the store is open
    /// (only gc, which needs the store to itself, rewrites packs), and a blob stays readable
    /// under its key even after its last reference goes: a stale entry still reads right.
    pub(super) places: Mutex<LruCache<ChunkKey, ChunkEntry>>,
    pub(super) counters: Counters,
}

/// What reads have cost since the store was opened: how often the expensive steps ran.
#[derive(Default)]
pub(super) struct Counters {
    pub(super) members_rebuilt: AtomicU64,
    pub(super) member_hits: AtomicU64,
    pub(super) chunks_read: AtomicU64,
    pub(super) pieces_loaded: AtomicU64,
    /// In nanoseconds (a small member's deflate takes a few microseconds).
    pub(super) member_gather_ns: AtomicU64,
    pub(super) member_deflate_ns: AtomicU64,
}

/// A snapshot of the read counters (`warcfs stats` of a mounted store shows them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReadCounters {
    /// gzip members rebuilt (a parse decoded and replayed each).
    pub members_rebuilt: u64,
    /// Reads of a member served from the rebuilt-member cache.
    pub member_hits: u64,
    /// Chunks read from a pack and decoded.
    pub chunks_read: u64,
    /// Recipe pieces read from the index.
    pub pieces_loaded: u64,
    /// Microseconds the member rebuilds spent gathering their plain text (chunk locations,
    /// pack reads, decoding): with the next one, where a lookup in a `.warc.gz` goes.
    #[serde(default)]
    pub member_gather_us: u64,
    /// Microseconds the member rebuilds spent decoding and replaying their parses (the field
    /// keeps its name from when this was a zlib deflate: `stats --json` readers use it).
    #[serde(default)]
    pub member_deflate_us: u64,
}

pub(super) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl ReadCache {
    pub fn new(chunk_budget: usize, member_budget: usize) -> ReadCache {
        ReadCache {
            chunks: Mutex::new(SizedLru::new(chunk_budget)),
            loading: Mutex::new(HashSet::new()),
            loaded: Condvar::new(),
            members: Mutex::new(SizedLru::new(member_budget)),
            building: Mutex::new(HashSet::new()),
            built: Condvar::new(),
            pieces: Mutex::new(SizedLru::new(64 << 20)),
            places: Mutex::new(LruCache::new(std::num::NonZeroUsize::new(1 << 18).expect("non-zero"))),
            counters: Counters::default(),
        }
    }

    pub fn clear(&self) {
        self.chunks.locked().clear();
        self.members.locked().clear();
        self.pieces.locked().clear();
        self.places.locked().clear();
    }
}

/// Marks one chunk load or member rebuild as finished when dropped, and wakes those waiting
/// for it; they then find it cached, or do it themselves after a failure.
pub(super) struct InFlight<'a, K: Hash + Eq> {
    pub(super) set: &'a Mutex<HashSet<K>>,
    pub(super) done: &'a Condvar,
    pub(super) key: K,
}

impl<K: Hash + Eq> Drop for InFlight<'_, K> {
    fn drop(&mut self) {
        // A poisoned lock only means another thread panicked; the set is still usable.
        self.set.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.key);
        self.done.notify_all();
    }
}
