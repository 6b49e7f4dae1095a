//! Parse tails this process has stored, by what their bytes follow from: a member's tail
//! identity (`deflate::tail_identity`: the tail's matches as written, where it is cut, the
//! chain's table size) and the text of its member from the payload's start on (the payload's
//! chunks, and the few bytes after it). A copy of a payload met again names the stored tail
//! instead of encoding its own on the text's chains, which found every source again and was
//! a fifth of an import's CPU: 57 % of the corpus's tail text repeats a tail met before
//! (measured: the history of docs/BENCHMARKS.md).
//!
//! Nothing here rests on a digest. An identity is found by a hash but taken only if its bytes
//! are equal, and the payload is the same only if the member's own payload chunks are the
//! entry's (chunk keys, which the chunk store proves as the verify mode asks, as it proves
//! any duplicate). Both are checked before a tail is named: the identity where the window is
//! proven (`ready`), the chunks where it is stored (`ingest`), with the tail's chunk still
//! in the index or among the ingest's new ones (and read back, under `--verify bytes`). A
//! member that fails the second check is proven again in full there, and its tail takes the
//! refused entry's place.
//!
//! Memory is bounded (`MAX_BYTES`), oldest entries going first; gc empties it, since it may
//! collect the chunks it names. A new process starts with none, so a tail's first copy in
//! a process pays as every copy did before.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::digest::ChunkKey;
use crate::recipe::Slice;
use crate::LockExt;

/// What the entries may take, identities and payload slices: the corpus's 5,844 distinct
/// tails took 36.2 MB after its import.
const MAX_BYTES: usize = 64 << 20;
/// What an entry costs besides its bytes (the maps' slots, the allocations).
const ENTRY_OVERHEAD: usize = 96;

/// A tail stored before, and what its bytes follow from.
pub(in crate::store) struct KnownTail {
    /// The member's tail identity, then its text after the payload.
    identity: Box<[u8]>,
    /// The payload's chunks, as the member's recipe slices them.
    pub(in crate::store) payload: Box<[Slice]>,
    pub(in crate::store) tail: ChunkKey,
    /// The tail's length (for the file's statistics).
    pub(in crate::store) tail_len: u64,
}

impl KnownTail {
    /// The identity it was stored for (see the module's comment).
    pub(in crate::store) fn identity(&self) -> &[u8] {
        &self.identity
    }

    fn bytes(&self) -> usize {
        self.identity.len() + self.payload.len() * std::mem::size_of::<Slice>() + ENTRY_OVERHEAD
    }
}

#[derive(Default)]
struct Entries {
    by_hash: HashMap<u64, Vec<Arc<KnownTail>>>,
    /// Oldest first.
    order: VecDeque<(u64, Arc<KnownTail>)>,
    bytes: usize,
}

/// The tails known to this process (see the module's comment).
#[derive(Default)]
pub(in crate::store) struct KnownTails {
    entries: Mutex<Entries>,
    hasher: RandomState,
    /// Members whose tail was named, and those whose naming the store refused.
    named: AtomicU64,
    refused: AtomicU64,
}

impl KnownTails {
    /// The tail whose identity is `identity`, byte for byte.
    pub(in crate::store) fn find(&self, identity: &[u8]) -> Option<Arc<KnownTail>> {
        let h = self.hasher.hash_one(identity);
        let candidates: Vec<Arc<KnownTail>> = self.entries.locked().by_hash.get(&h).cloned().unwrap_or_default();
        // Compared outside the lock: identities run to tens of KiB.
        candidates.into_iter().find(|k| *k.identity == *identity)
    }

    /// Remembers `tail`, stored for a member of `identity` whose payload is `payload`. It
    /// replaces an entry of the same identity (whose chunk may be gone, or whose payload
    /// was another).
    pub(in crate::store) fn remember(&self, identity: Box<[u8]>, payload: Box<[Slice]>, tail: ChunkKey, tail_len: u64) {
        let h = self.hasher.hash_one(&identity[..]);
        let known = Arc::new(KnownTail { identity, payload, tail, tail_len });
        let size = known.bytes();
        if size > MAX_BYTES / 4 {
            return;
        }
        let mut e = self.entries.locked();
        let list = e.by_hash.entry(h).or_default();
        if let Some(i) = list.iter().position(|k| k.identity == known.identity) {
            // Its bytes are counted until it comes up in `order`, which holds it till then.
            list.swap_remove(i);
        }
        e.by_hash.entry(h).or_default().push(known.clone());
        e.order.push_back((h, known));
        e.bytes += size;
        while e.bytes > MAX_BYTES {
            let Some((h, old)) = e.order.pop_front() else { break };
            e.bytes -= old.bytes();
            if let Some(list) = e.by_hash.get_mut(&h) {
                if let Some(i) = list.iter().position(|k| Arc::ptr_eq(k, &old)) {
                    list.swap_remove(i);
                }
                if list.is_empty() {
                    e.by_hash.remove(&h);
                }
            }
        }
    }

    /// Forgets every tail: gc may collect their chunks.
    pub(in crate::store) fn clear(&self) {
        *self.entries.locked() = Entries::default();
    }

    /// Every entry, oldest first (tests change them, as a storage seam).
    #[cfg(test)]
    pub(in crate::store) fn entries(&self) -> Vec<Arc<KnownTail>> {
        self.entries.locked().order.iter().map(|(_, k)| k.clone()).collect()
    }

    /// `entry` again, with another payload and tail (tests).
    #[cfg(test)]
    pub(in crate::store) fn replace(&self, entry: &KnownTail, payload: Box<[Slice]>, tail: ChunkKey) {
        self.remember(entry.identity.clone(), payload, tail, entry.tail_len);
    }

    /// Members whose tail was named, and those whose naming the store refused.
    pub(in crate::store) fn counts(&self) -> (u64, u64) {
        (self.named.load(Ordering::Relaxed), self.refused.load(Ordering::Relaxed))
    }

    pub(in crate::store) fn count(&self, named: bool) {
        let c = if named { &self.named } else { &self.refused };
        c.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> ChunkKey {
        ChunkKey { digest: [b; 32], seq: 0 }
    }

    #[test]
    fn a_tail_is_found_by_its_identity_and_replaced_by_a_newer_one() {
        let t = KnownTails::default();
        assert!(t.find(b"abc").is_none());
        t.remember(b"abc".to_vec().into(), vec![(key(1), 0, 10)].into(), key(2), 5);
        assert_eq!(t.find(b"abc").unwrap().tail, key(2));
        assert!(t.find(b"abd").is_none(), "another identity is not found");
        t.remember(b"abc".to_vec().into(), vec![(key(3), 0, 10)].into(), key(4), 5);
        let k = t.find(b"abc").unwrap();
        assert_eq!((k.tail, &k.payload[..]), (key(4), &[(key(3), 0, 10)][..]));
        t.clear();
        assert!(t.find(b"abc").is_none());
    }

    #[test]
    fn memory_stays_bounded_oldest_first() {
        let t = KnownTails::default();
        let big = vec![7u8; 1 << 20];
        for i in 0..100u32 {
            let mut id = big.clone();
            id[..4].copy_from_slice(&i.to_le_bytes());
            t.remember(id.into(), Vec::new().into(), key(1), 1);
        }
        let e = t.entries.locked();
        assert!(e.bytes <= MAX_BYTES, "{} bytes kept", e.bytes);
        assert!(e.order.len() < 100 && e.order.len() >= 60);
        drop(e);
        let mut first = big.clone();
        first[..4].copy_from_slice(&0u32.to_le_bytes());
        assert!(t.find(&first).is_none(), "the oldest went first");
        let mut last = big;
        last[..4].copy_from_slice(&99u32.to_le_bytes());
        assert!(t.find(&last).is_some());
    }
}
