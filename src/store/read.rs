//! Read: any byte range of a stored file, rebuilt from its recipe with random access.
//!
//! A read finds the recipe piece that holds its offset, then the segments it overlaps. Data
//! segments copy slices of chunks; member segments are rebuilt whole (header, zlib deflate of
//! the plain text, trailer). Decoded chunks, recipe pieces and rebuilt members are kept in
//! LRU caches shared by all readers, so a sequential reader never does the same work twice.

use std::hash::Hash;
use std::io::Write;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex};

use lru::LruCache;

use super::{Result, Store, StoreError};
use crate::digest::ChunkKey;
use crate::format::gzip;
use crate::index::ChunkEntry;
use crate::pack::BLOB_HEADER_LEN;
use crate::recipe::{Extent, Piece, RecipeHead, Segment};

/// An LRU bounded by the bytes it holds rather than by entry count.
struct SizedLru<K: Hash + Eq, V> {
    map: LruCache<K, (Arc<V>, usize)>,
    bytes: usize,
    budget: usize,
}

impl<K: Hash + Eq, V> SizedLru<K, V> {
    fn new(budget: usize) -> Self {
        SizedLru { map: LruCache::unbounded(), bytes: 0, budget }
    }

    fn get(&mut self, k: &K) -> Option<Arc<V>> {
        self.map.get(k).map(|(v, _)| v.clone())
    }

    fn put(&mut self, k: K, v: Arc<V>, size: usize) {
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

    fn clear(&mut self) {
        self.map.clear();
        self.bytes = 0;
    }
}

type MemberKey = (u64, u32, u32);

pub struct ReadCache {
    chunks: Mutex<SizedLru<ChunkKey, Vec<u8>>>,
    /// Chunks being read and decoded right now (the prefetcher and the FUSE threads often
    /// want the same one): later askers wait for the first.
    loading: Mutex<HashSet<ChunkKey>>,
    loaded: Condvar,
    members: Mutex<SizedLru<MemberKey, Vec<u8>>>,
    /// Members being rebuilt right now: a second reader waits for the first instead of
    /// compressing the same member again.
    building: Mutex<HashSet<MemberKey>>,
    built: Condvar,
    pieces: Mutex<SizedLru<(u64, u32), Piece>>,
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
        }
    }

    pub fn clear(&self) {
        self.chunks.lock().unwrap().clear();
        self.members.lock().unwrap().clear();
        self.pieces.lock().unwrap().clear();
    }
}

fn extent_bytes<'a>(chunk: &'a [u8], e: &Extent, key: &ChunkKey) -> Result<&'a [u8]> {
    chunk
        .get(e.offset as usize..e.offset as usize + e.len as usize)
        .ok_or_else(|| StoreError::MissingChunk(format!("{} (slice {}+{} beyond its {} bytes)", key.short(), e.offset, e.len, chunk.len())))
}

impl Store {
    /// The bytes of one chunk, from the cache or its pack.
    pub(crate) fn chunk_bytes(&self, key: &ChunkKey, entry: &ChunkEntry) -> Result<Arc<Vec<u8>>> {
        {
            let mut loading = self.cache.loading.lock().unwrap();
            loop {
                if let Some(v) = self.cache.chunks.lock().unwrap().get(key) {
                    return Ok(v);
                }
                if loading.insert(*key) {
                    break;
                }
                loading = self.cache.loaded.wait(loading).unwrap();
            }
        }
        let r = self.packs.read(entry.pack, entry.offset, key, entry.stored_len).map(Arc::new);
        if let Ok(bytes) = &r {
            self.cache.chunks.lock().unwrap().put(*key, bytes.clone(), bytes.len());
        }
        self.cache.loading.lock().unwrap().remove(key);
        self.cache.loaded.notify_all();
        Ok(r?)
    }

    fn chunk_by_key(&self, key: &ChunkKey) -> Result<Arc<Vec<u8>>> {
        if let Some(v) = self.cache.chunks.lock().unwrap().get(key) {
            return Ok(v);
        }
        let entry = self.index.chunk(key)?.ok_or_else(|| StoreError::MissingChunk(key.to_string()))?;
        self.chunk_bytes(key, &entry)
    }

    pub(crate) fn piece(&self, rid: u64, piece: u32) -> Result<Arc<Piece>> {
        if let Some(p) = self.cache.pieces.lock().unwrap().get(&(rid, piece)) {
            return Ok(p);
        }
        let p = Arc::new(self.load_piece(rid, piece)?);
        let size = p.keys.len() * 40 + p.segments.iter().map(|s| s.extent_count() * 16 + 64).sum::<usize>();
        self.cache.pieces.lock().unwrap().put((rid, piece), p.clone(), size);
        Ok(p)
    }

    /// Appends the plain text described by `extents` to `out`.
    fn gather(&self, piece: &Piece, extents: &[Extent], out: &mut Vec<u8>) -> Result<()> {
        for e in extents {
            let key = &piece.keys[e.chunk as usize];
            let chunk = self.chunk_by_key(key)?;
            out.extend_from_slice(extent_bytes(&chunk, e, key)?);
        }
        Ok(())
    }

    /// Rebuilds one gzip member's exact compressed bytes.
    fn rebuild_member(&self, piece: &Piece, seg: &Segment) -> Result<Vec<u8>> {
        let Segment::Member { header, plain, deflate, trailer, comp_len } = seg else {
            unreachable!("rebuild_member is called on member segments only");
        };
        let plain_len: usize = plain.iter().map(|e| e.len as usize).sum();
        let mut text = Vec::with_capacity(plain_len);
        self.gather(piece, plain, &mut text)?;
        let mut out = Vec::with_capacity(*comp_len as usize);
        out.extend_from_slice(header);
        gzip::deflate(&text, deflate, &mut out);
        out.extend_from_slice(&trailer.unwrap_or_else(|| gzip::trailer_for(&text)));
        if out.len() as u64 != *comp_len {
            // Never hand out wrong bytes: this means the zlib engine changed under the store.
            return Err(StoreError::ZlibEngine(format!("rebuilt member is {} bytes, expected {comp_len}", out.len())));
        }
        Ok(out)
    }

    fn member_cached(&self, rid: u64, pno: u32, sno: u32, piece: &Piece) -> Result<Arc<Vec<u8>>> {
        let k = (rid, pno, sno);
        {
            let mut building = self.cache.building.lock().unwrap();
            loop {
                if let Some(m) = self.cache.members.lock().unwrap().get(&k) {
                    return Ok(m);
                }
                if !building.contains(&k) {
                    building.insert(k);
                    break;
                }
                building = self.cache.built.wait(building).unwrap();
            }
        }
        let r = self.rebuild_member(piece, &piece.segments[sno as usize]).map(Arc::new);
        if let Ok(m) = &r {
            self.cache.members.lock().unwrap().put(k, m.clone(), m.len());
        }
        self.cache.building.lock().unwrap().remove(&k);
        self.cache.built.notify_all();
        r
    }

    /// Rebuilds the gzip members in [offset, offset + len) that are not cached yet, so that a
    /// sequential reader finds them ready: called from a background thread.
    pub fn prefetch(&self, head: &RecipeHead, offset: u64, len: u64) -> Result<()> {
        let end = (offset + len).min(head.size);
        self.will_need(head, offset, end)?;
        let mut pos = offset;
        while pos < end {
            let Some(pno) = head.piece_at(pos) else { break };
            let piece = self.piece(head.id, pno)?;
            let mut seg_start = head.piece_starts[pno as usize];
            for (sno, seg) in piece.segments.iter().enumerate() {
                let seg_end = seg_start + seg.len();
                if seg_end > pos && seg_start < end {
                    match seg {
                        Segment::Member { .. } => {
                            self.member_cached(head.id, pno, sno as u32, &piece)?;
                        }
                        // Plain bytes: decode the chunks ahead of the reader, on this thread.
                        Segment::Data { extents } => {
                            let mut e_start = seg_start;
                            for e in extents {
                                let e_end = e_start + e.len as u64;
                                if e_end > pos && e_start < end {
                                    self.chunk_by_key(&piece.keys[e.chunk as usize])?;
                                }
                                e_start = e_end;
                                if e_start >= end {
                                    break;
                                }
                            }
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
        Ok(())
    }

    /// Asks the kernel to read the pack ranges of every chunk of [offset, end) that is not
    /// cached: one batch of asynchronous reads instead of one blocking read per chunk.
    fn will_need(&self, head: &RecipeHead, offset: u64, end: u64) -> Result<()> {
        let mut keys = Vec::new();
        let mut pos = offset;
        while pos < end {
            let Some(pno) = head.piece_at(pos) else { break };
            let piece = self.piece(head.id, pno)?;
            let mut seg_start = head.piece_starts[pno as usize];
            for seg in &piece.segments {
                let seg_end = seg_start + seg.len();
                if let (true, Segment::Data { extents }) = (seg_end > pos && seg_start < end, seg) {
                    let mut e_start = seg_start;
                    for e in extents {
                        if e_start + e.len as u64 > pos && e_start < end {
                            keys.push(piece.keys[e.chunk as usize]);
                        }
                        e_start += e.len as u64;
                    }
                }
                seg_start = seg_end;
                if seg_start >= end {
                    break;
                }
            }
            pos = seg_start.max(pos + 1);
        }
        self.request_chunks(&keys)
    }

    /// Starts the kernel reading the blobs of the chunks that are not cached, in pack order,
    /// with nearby blobs merged into one range.
    fn request_chunks(&self, keys: &[ChunkKey]) -> Result<()> {
        let mut wanted: HashMap<u64, Vec<(u64, u64)>> = HashMap::new();
        let mut seen: HashSet<ChunkKey> = HashSet::new();
        for key in keys {
            if seen.insert(*key) && self.cache.chunks.lock().unwrap().get(key).is_none() {
                if let Some(e) = self.index.chunk(key)? {
                    wanted.entry(e.pack).or_default().push((e.offset, BLOB_HEADER_LEN as u64 + e.stored_len as u64));
                }
            }
        }
        for (pack, mut ranges) in wanted {
            ranges.sort_unstable();
            let mut merged: Vec<(u64, u64)> = Vec::new();
            for (off, len) in ranges {
                match merged.last_mut() {
                    Some(last) if off <= last.0 + last.1 + (1 << 20) => last.1 = (off + len).max(last.0 + last.1) - last.0,
                    _ => merged.push((off, len)),
                }
            }
            self.packs.will_need(pack, &merged);
        }
        Ok(())
    }

    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read (0 at EOF).
    pub fn read_at(&self, head: &RecipeHead, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let mut done = 0usize;
        while done < buf.len() {
            let pos = offset + done as u64;
            let Some(pno) = head.piece_at(pos) else { break };
            let piece = self.piece(head.id, pno)?;
            let mut seg_start = head.piece_starts[pno as usize];
            let mut progressed = false;
            for (sno, seg) in piece.segments.iter().enumerate() {
                let seg_len = seg.len();
                if seg_start + seg_len <= pos {
                    seg_start += seg_len;
                    continue;
                }
                match seg {
                    Segment::Data { extents } => {
                        let mut ext_start = seg_start;
                        for e in extents {
                            let cur = offset + done as u64;
                            if done == buf.len() {
                                break;
                            }
                            if ext_start + e.len as u64 <= cur {
                                ext_start += e.len as u64;
                                continue;
                            }
                            let key = &piece.keys[e.chunk as usize];
                            let chunk = self.chunk_by_key(key)?;
                            let bytes = extent_bytes(&chunk, e, key)?;
                            let from = (cur - ext_start) as usize;
                            let n = (bytes.len() - from).min(buf.len() - done);
                            buf[done..done + n].copy_from_slice(&bytes[from..from + n]);
                            done += n;
                            ext_start += e.len as u64;
                        }
                    }
                    Segment::Member { .. } => {
                        let m = self.member_cached(head.id, pno, sno as u32, &piece)?;
                        let from = (offset + done as u64 - seg_start) as usize;
                        let n = (m.len() - from).min(buf.len() - done);
                        buf[done..done + n].copy_from_slice(&m[from..from + n]);
                        done += n;
                    }
                }
                progressed = true;
                seg_start += seg_len;
                if done == buf.len() {
                    break;
                }
            }
            if !progressed {
                break;
            }
        }
        Ok(done)
    }

    /// Writes a whole file to `out`, rebuilding gzip members on two threads that run ahead
    /// of the writer by a bounded amount. Returns the number of bytes written.
    pub fn copy_to(&self, head: &RecipeHead, out: &mut dyn Write) -> Result<u64> {
        /// Output a worker may have finished before the writer catches up.
        const AHEAD: u64 = 64 << 20;
        const TASK: u64 = 4 << 20;
        // Units of work in file order: a whole member, or a run of a data segment's extents.
        let mut tasks: Vec<(u32, usize, usize, usize, u64)> = Vec::new();
        let mut keys: Vec<ChunkKey> = Vec::new();
        for pno in 0..head.pieces() {
            let piece = self.piece(head.id, pno)?;
            keys.extend_from_slice(&piece.keys);
            for (sno, seg) in piece.segments.iter().enumerate() {
                match seg {
                    Segment::Member { comp_len, .. } => tasks.push((pno, sno, 0, 0, *comp_len)),
                    Segment::Data { extents } => {
                        let (mut a, mut len) = (0usize, 0u64);
                        for (i, e) in extents.iter().enumerate() {
                            len += e.len as u64;
                            if len >= TASK || i + 1 == extents.len() {
                                tasks.push((pno, sno, a, i + 1, len));
                                a = i + 1;
                                len = 0;
                            }
                        }
                    }
                }
            }
        }
        // Cold packs: let the kernel fetch every needed blob at once.
        self.request_chunks(&keys)?;
        struct Progress {
            done: Vec<Option<Result<Vec<u8>>>>,
            /// Tasks handed out, and bytes of output between the writer and them.
            next: usize,
            in_flight: u64,
            failed: bool,
        }
        let state = Mutex::new(Progress { done: (0..tasks.len()).map(|_| None).collect(), next: 0, in_flight: 0, failed: false });
        let changed = Condvar::new();
        let io_err = |err| StoreError::Io { path: "<output>".into(), err };
        let work = || loop {
            let i = {
                let mut st = state.lock().unwrap();
                loop {
                    if st.failed || st.next >= tasks.len() {
                        return;
                    }
                    if st.in_flight < AHEAD || st.in_flight == 0 {
                        break;
                    }
                    st = changed.wait(st).unwrap();
                }
                let i = st.next;
                st.next += 1;
                st.in_flight += tasks[i].4;
                i
            };
            let (pno, sno, a, b, len) = tasks[i];
            let r = self.piece(head.id, pno).and_then(|piece| match &piece.segments[sno] {
                seg @ Segment::Member { .. } => self.rebuild_member(&piece, seg),
                Segment::Data { extents } => {
                    let mut v = Vec::with_capacity(len as usize);
                    self.gather(&piece, &extents[a..b], &mut v).map(|_| v)
                }
            });
            state.lock().unwrap().done[i] = Some(r);
            changed.notify_all();
        };
        let mut written = 0u64;
        let result = std::thread::scope(|s| -> Result<()> {
            for _ in 0..2 {
                s.spawn(work);
            }
            let fail = |e| {
                state.lock().unwrap().failed = true;
                changed.notify_all();
                e
            };
            for i in 0..tasks.len() {
                let bytes = {
                    let mut st = state.lock().unwrap();
                    loop {
                        if let Some(r) = st.done[i].take() {
                            break r;
                        }
                        st = changed.wait(st).unwrap();
                    }
                };
                let bytes = bytes.map_err(fail)?;
                out.write_all(&bytes).map_err(io_err).map_err(fail)?;
                written += bytes.len() as u64;
                state.lock().unwrap().in_flight -= tasks[i].4;
                changed.notify_all();
            }
            Ok(())
        });
        result.map(|_| written)
    }
}
