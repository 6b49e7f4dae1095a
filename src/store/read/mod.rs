//! Read: any byte range of a stored file, rebuilt from its recipe with random access.
//!
//! A read finds the recipe piece that holds its offset, then the segments it overlaps. Data
//! segments copy slices of chunks; member segments are rebuilt whole (header, the replay of
//! the member's recorded deflate parse over its plain text, trailer) and checked against the
//! CRC-32 of the original bytes. Decoded chunks, recipe pieces and rebuilt members are kept in
//! caches shared by all readers (`cache`), so a sequential reader never does the same work
//! twice.

//! The wing: `ahead` (read-ahead threads), `prefetch` (which pack ranges the disk is asked
//! for, and when), `cache` (shared caches and read counters), `records`
//! (WARC record heads and the CDXJ lines of stored files), `raw_members` (records of
//! members kept raw), `entries` (a stored ZIP's entries), `export` (copies deduplicated by
//! revisit records), and here the reader.

pub(in crate::store) mod ahead;
pub(in crate::store) mod cache;
pub mod entries;
pub mod export;
pub mod originals;
pub mod resolved;
mod prefetch;
mod tails;
pub(in crate::store) mod raw_members;
pub(in crate::store) mod records;
#[cfg(test)]
mod raw_member_tests;

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use crate::store::read::cache::{bump, Flight, MemberKey, ReadCounters};
use crate::store::{Result, Store, StoreError};
use crate::LockExt;
use crate::digest::ChunkKey;
use crate::format::{deflate, gzip};
use crate::index::ChunkEntry;
use crate::recipe::{Extent, Piece, RecipeHead, Segment};
pub use prefetch::Ahead;

/// Reads up to this size are taken for lookups: the pack reads of all their chunks start at
/// once. Larger reads come from sequential readers (the kernel's read-ahead, or a program's
/// big buffer), whose chunks the read-ahead workers have requested already.
const LOOKUP_READ: u64 = 256 << 10;

/// How far apart two blobs may lie for one disk read to take both, for a lookup and for a
/// sequential reader. A cold read here costs about 45 us for a page and 1 us more for every
/// KiB after it (64 KiB: 100 us, 512 KiB: 520 us), while reads issued together overlap (three
/// 8 KiB reads a quarter MiB apart: 75 us, the same as one). A lookup's blobs are read apart
/// unless at most a page lies between them; a sequential reader will read what lies between
/// them anyway.
const LOOKUP_GAP: u64 = 4 << 10;
const SEQUENTIAL_GAP: u64 = 1 << 20;


/// The bytes of extent `e` of chunk `key`; an error if the chunk is shorter (damage).
pub(in crate::store) fn extent_bytes<'a>(chunk: &'a [u8], e: &Extent, key: &ChunkKey) -> Result<&'a [u8]> {
    chunk
        .get(e.offset as usize..e.offset as usize + e.len as usize)
        .ok_or_else(|| StoreError::MissingChunk(format!("{} (slice {}+{} beyond its {} bytes)", key.short(), e.offset, e.len, chunk.len())))
}

/// The extents of a data segment starting at file offset `seg_start` that hold any byte of
/// [from, to).
fn extents_within(extents: &[Extent], seg_start: u64, from: u64, to: u64) -> impl Iterator<Item = &Extent> {
    extents
        .iter()
        .scan(seg_start, |start, e| {
            let at = *start;
            *start += e.len as u64;
            Some((at, e))
        })
        .filter(move |&(at, e)| at + e.len as u64 > from && at < to)
        .map(|(_, e)| e)
}

/// The pieces `rebuilds_members` looks in past a first piece shorter than a ZIP's first
/// ingested entry can be (`ingest::zip::MIN_ENTRY`: that piece is a local header): its
/// first entries'.
const MEMBERS_WITHIN: u32 = 4;

impl Store {
    /// The bytes of one chunk, from the cache or its pack.
    pub(crate) fn chunk_bytes(&self, key: &ChunkKey, entry: &ChunkEntry) -> Result<Arc<Vec<u8>>> {
        // Whatever happens below (even a panic), later askers must not wait forever: the
        // flight ends when dropped.
        let _flight = match self.cache.loading.cached_or_begin(*key, || self.cache.chunks.locked().get(key)) {
            Ok(v) => return Ok(v),
            Err(flight) => flight,
        };
        bump(&self.cache.counters.chunks_read);
        let r = self.packs.read(entry.pack, entry.offset, key, entry.stored_len).map(Arc::new);
        if let Ok(bytes) = &r {
            self.cache.chunks.locked().put(*key, bytes.clone(), bytes.len());
        }
        Ok(r?)
    }

    /// Where each chunk is stored (None for a key the index does not know).
    fn locate(&self, keys: &[ChunkKey]) -> Result<Vec<Option<ChunkEntry>>> {
        let mut found: Vec<Option<ChunkEntry>> = {
            let mut places = self.cache.places.locked();
            keys.iter().map(|k| places.get(k).cloned()).collect()
        };
        let missing: Vec<ChunkKey> = keys.iter().zip(&found).filter(|(_, f)| f.is_none()).map(|(k, _)| *k).collect();
        if missing.is_empty() {
            return Ok(found);
        }
        let looked_up = if missing.len() == 1 { vec![self.index.chunk(&missing[0])?] } else { self.index.chunks(&missing)? };
        let mut places = self.cache.places.locked();
        let mut looked_up = looked_up.into_iter();
        for (k, slot) in keys.iter().zip(found.iter_mut()) {
            if slot.is_none() {
                *slot = looked_up.next().flatten();
                if let Some(e) = slot {
                    places.put(*k, e.clone());
                }
            }
        }
        Ok(found)
    }

    /// What reads have cost since the store was opened.
    pub fn read_counters(&self) -> ReadCounters {
        let c = &self.cache.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ReadCounters {
            members_rebuilt: get(&c.members_rebuilt),
            member_hits: get(&c.member_hits),
            tail_hits: get(&c.tail_hits),
            chunks_read: get(&c.chunks_read),
            pieces_loaded: get(&c.pieces_loaded),
            lookup_read_aheads: get(&c.lookup_read_aheads),
            member_gather_us: get(&c.member_gather_ns) / 1000,
            member_deflate_us: get(&c.member_deflate_ns) / 1000,
        }
    }

    /// Piece `piece` of the recipe `head` names, from the cache or its chunk. A piece whose
    /// length is not the span `head` gives it is refused: a read would otherwise run past
    /// its end into the next piece's offsets with this one's bytes (its data segments carry
    /// no checksum), or come back short.
    pub(crate) fn piece(&self, head: &RecipeHead, piece: u32) -> Result<Arc<Piece>> {
        let rid = head.id;
        if let Some(p) = self.cache.pieces.locked().get(&(rid, piece)) {
            return Ok(p);
        }
        bump(&self.cache.counters.pieces_loaded);
        let p = Arc::new(self.load_piece(rid, piece)?);
        let starts = &head.piece_starts;
        let start = starts.get(piece as usize).copied();
        let end = starts.get(piece as usize + 1).copied().unwrap_or(head.size);
        if start.and_then(|s| end.checked_sub(s)) != Some(p.len()) || starts.first() != Some(&0) {
            return Err(StoreError::Recipe { rid, piece, what: format!("{} bytes long where the file's recipe gives it {start:?}..{end}", p.len()) });
        }
        let size = p.keys.len() * 40 + p.segments.iter().map(|s| s.extent_count() * 16 + 64 + s.inline_bytes()).sum::<usize>();
        self.cache.pieces.locked().put((rid, piece), p.clone(), size);
        Ok(p)
    }

    /// Appends the plain text described by `extents` to `out`; `also` is one more chunk (a
    /// member's parse tail) to have read at the same time, unless the caller had the kernel
    /// read every one of them already (`advised`).
    fn gather_with(&self, piece: &Piece, extents: &[Extent], also: Option<ChunkKey>, advised: bool, out: &mut Vec<u8>) -> Result<()> {
        if !advised && extents.len() + also.is_some() as usize > 1 {
            // Start every pack read at once rather than one after the other.
            let keys: Vec<ChunkKey> = extents.iter().map(|e| piece.keys[e.chunk as usize]).chain(also).collect();
            self.request_chunks(&keys, LOOKUP_GAP)?;
        }
        for e in extents {
            let at = out.len();
            out.resize(at + e.len as usize, 0);
            self.copy_extent(&piece.keys[e.chunk as usize], e, 0, &mut out[at..])?;
        }
        Ok(())
    }

    /// Copies extent `e`'s bytes from `from` on into `dst`, as many as fit; returns how many.
    /// One cache lookup and at most one location lookup per extent: this runs for every
    /// extent a read touches.
    fn copy_extent(&self, key: &ChunkKey, e: &Extent, from: usize, dst: &mut [u8]) -> Result<usize> {
        let cached = self.cache.chunks.locked().get(key);
        let chunk = match cached {
            Some(c) => c,
            None => {
                let entry = self.locate(std::slice::from_ref(key))?.pop().flatten().ok_or_else(|| StoreError::MissingChunk(key.to_string()))?;
                // A whole chunk that is not cached is decoded straight to where its bytes go,
                // without a cache entry (and its allocation and copy) that a reader going
                // through a file would not come back for. Header blocks, which many records
                // slice, are never whole and go through the cache.
                let n = e.len as usize;
                if from == 0 && e.offset == 0 && entry.raw_len == e.len && n <= dst.len() {
                    bump(&self.cache.counters.chunks_read);
                    self.packs.read_into(entry.pack, entry.offset, key, entry.stored_len, &mut dst[..n])?;
                    return Ok(n);
                }
                self.chunk_bytes(key, &entry)?
            }
        };
        let bytes = extent_bytes(&chunk, e, key)?;
        let n = (bytes.len() - from).min(dst.len());
        dst[..n].copy_from_slice(&bytes[from..from + n]);
        Ok(n)
    }

    /// Rebuilds one gzip member's exact compressed bytes: its plain text gathered, its
    /// recorded deflate parse replayed over it, and the result checked against the CRC-32 of
    /// the original bytes kept in the recipe. A mismatch is an error, never wrong bytes.
    /// `advised` as for `gather_with`.
    fn rebuild_member(&self, head: &RecipeHead, pno: u32, sno: usize, piece: &Piece, advised: bool) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.rebuild_member_into(head, pno, sno, piece, advised, &mut out)?;
        Ok(out)
    }

    /// `rebuild_member`, appending to `out` (a reader copying out a run of members writes
    /// them where they go, not into a buffer of their own first). On an error `out` is left
    /// as it was. `advised` as for `gather_with`.
    fn rebuild_member_into(&self, head: &RecipeHead, pno: u32, sno: usize, piece: &Piece, advised: bool, out: &mut Vec<u8>) -> Result<()> {
        let Segment::Member { header, plain, parse, parse_tail, trailer, comp_len, crc } = &piece.segments[sno] else {
            unreachable!("rebuild_member is called on member segments only");
        };
        bump(&self.cache.counters.members_rebuilt);
        let plain_len: usize = plain.iter().map(|e| e.len as usize).sum();
        let mut text = Vec::with_capacity(plain_len);
        let started = std::time::Instant::now();
        self.gather_with(piece, plain, parse_tail.map(|t| piece.keys[t as usize]), advised, &mut text)?;
        let tail = match parse_tail {
            Some(t) => {
                let key = piece.keys[*t as usize];
                let entry = self.locate(std::slice::from_ref(&key))?.pop().flatten().ok_or_else(|| StoreError::MissingChunk(key.to_string()))?;
                Some((key, self.chunk_bytes(&key, &entry)?))
            }
            None => None,
        };
        let gathered = std::time::Instant::now();
        let bad = |what: String| {
            let at = head.piece_starts.get(pno as usize).copied().unwrap_or(0) + piece.segments[..sno].iter().map(Segment::len).sum::<u64>();
            StoreError::Member { offset: at, len: *comp_len, what }
        };
        let start = out.len();
        out.reserve((*comp_len).min(text.len() as u64 + (1 << 20)) as usize);
        let tail = tail.as_ref().map(|(k, t)| (*k, t.as_slice()));
        let mut reuse = true;
        loop {
            out.extend_from_slice(header);
            let (decoded, reused) = self.decode_member_parse(piece, plain, parse, tail, &text, reuse);
            let failed = match decoded.and_then(|p| deflate::replay(&p, &text, out)) {
                Err(e) => Some(e.to_string()),
                Ok(()) => {
                    out.extend_from_slice(&trailer.unwrap_or_else(|| gzip::trailer_for(&text)));
                    crate::failpoint::corrupt("member_rebuilt", &mut out[start..]);
                    let member = &out[start..];
                    let n = member.len();
                    (n as u64 != *comp_len || crc32fast::hash(member) != *crc).then(|| format!("its {n} rebuilt bytes do not match the original's length and CRC-32"))
                }
            };
            let Some(what) = failed else {
                if reused.is_some() {
                    bump(&self.cache.counters.tail_hits);
                }
                break;
            };
            out.truncate(start);
            match reused {
                // Kept matches the member does not rebuild from: forgotten, and the tail
                // decoded again from its stored form, which decides.
                Some(id) => {
                    self.forget_tail(&id);
                    reuse = false;
                }
                None => return Err(bad(what)),
            }
        }
        let c = &self.cache.counters;
        c.member_gather_ns.fetch_add((gathered - started).as_nanos() as u64, Ordering::Relaxed);
        c.member_deflate_ns.fetch_add(gathered.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Member `sno` of piece `pno`, from the cache or rebuilt into it (one rebuild however
    /// many ask at once; a second only where a streaming reader let the member go before a
    /// waiter for it woke). `advised` as for `gather_with`.
    fn member_cached(&self, head: &RecipeHead, pno: u32, sno: u32, piece: &Piece, advised: bool) -> Result<Arc<Vec<u8>>> {
        let k = (head.id, pno, sno);
        match self.cache.building.cached_or_begin(k, || self.cache.members.locked().get(&k)) {
            Ok(m) => {
                bump(&self.cache.counters.member_hits);
                Ok(m)
            }
            Err(flight) => self.rebuild_into_cache(head, pno, sno, piece, advised, flight),
        }
    }

    /// Rebuilds member `sno` of piece `pno` into the cache, as the `flight` taken for it.
    fn rebuild_into_cache(&self, head: &RecipeHead, pno: u32, sno: u32, piece: &Piece, advised: bool, flight: Flight<'_, MemberKey>) -> Result<Arc<Vec<u8>>> {
        let r = self.rebuild_member(head, pno, sno as usize, piece, advised).map(Arc::new);
        if let Ok(m) = &r {
            self.cache.members.locked().put((head.id, pno, sno), m.clone(), m.len());
        }
        // Only now, with the result where waiters look.
        drop(flight);
        r
    }

    /// Whether reading the file means rebuilding gzip members (its first piece holds one):
    /// then any read that touches a member costs a whole member's deflate. A ZIP's entries
    /// start pieces of their own, so a WACZ's first piece is its first local header alone, a
    /// few bytes, and its members lie in the pieces after: past so short a first piece, the
    /// next ones are looked at too (a file whose first piece is full costs one load).
    pub fn rebuilds_members(&self, head: &RecipeHead) -> bool {
        let holds = |i: u32| self.piece(head, i).is_ok_and(|p| p.segments.iter().any(|s| matches!(s, Segment::Member { .. })));
        let short_first = head.piece_starts.get(1).is_some_and(|&end| end < crate::store::ingest::zip::MIN_ENTRY);
        head.pieces() > 0 && (holds(0) || (short_first && (1..head.pieces().min(MEMBERS_WITHIN)).any(holds)))
    }

    /// Whether `offset` falls inside a gzip member, past its first byte: a read from there
    /// is finishing a record rather than starting on the next one.
    pub fn inside_member(&self, head: &RecipeHead, offset: u64) -> bool {
        let Some(pno) = head.piece_at(offset) else { return false };
        let Ok(piece) = self.piece(head, pno) else { return false };
        let mut seg_start = head.piece_starts[pno as usize];
        for seg in &piece.segments {
            let seg_end = seg_start + seg.len();
            if offset < seg_end {
                return matches!(seg, Segment::Member { .. }) && offset > seg_start;
            }
            seg_start = seg_end;
        }
        false
    }

    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read (0 at EOF).
    pub fn read_at(&self, head: &RecipeHead, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.read_inner(head, offset, buf, true, false)
    }

    /// Like `read_at`, but stops short before a gzip member that would have to be rebuilt,
    /// once it has read something: a reader that looks up one record at its offset with a
    /// large buffer gets that record's member without paying for its neighbours.
    pub fn read_some(&self, head: &RecipeHead, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.read_inner(head, offset, buf, false, false)
    }

    /// `read_at` for a reader streaming through the file (well into a sequential run): the
    /// members it reads to their end leave the member cache. It will not come back for
    /// them, and a scan of a whole archive (a backup, a text extraction) would otherwise
    /// push out every member that lookups come back for, and grow the daemon to the cache's
    /// bound. (Measured for a cold `cat` of the four crawls through the mount: twenty-third
    /// session in docs/BENCHMARKS.md.)
    pub fn read_streaming(&self, head: &RecipeHead, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.read_inner(head, offset, buf, true, true)
    }

    fn read_inner(&self, head: &RecipeHead, offset: u64, buf: &mut [u8], whole: bool, streaming: bool) -> Result<usize> {
        let mut done = 0usize;
        while done < buf.len() {
            let pos = offset + done as u64;
            let Some(pno) = head.piece_at(pos) else { break };
            let piece = self.piece(head, pno)?;
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
                        if buf.len() as u64 <= LOOKUP_READ {
                            // A lookup-sized read (a record, a few pages) of plain bytes: start
                            // the pack reads of all its chunks at once. Larger reads are
                            // sequential, and the read-ahead has started theirs already.
                            let end = offset + buf.len() as u64;
                            let keys: Vec<ChunkKey> = extents_within(extents, seg_start, pos, end).map(|e| piece.keys[e.chunk as usize]).collect();
                            if keys.len() > 1 {
                                self.request_chunks(&keys, LOOKUP_GAP)?;
                            }
                        }
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
                            let from = (cur - ext_start) as usize;
                            done += self.copy_extent(&piece.keys[e.chunk as usize], e, from, &mut buf[done..])?;
                            ext_start += e.len as u64;
                        }
                    }
                    Segment::Member { .. } => {
                        if !whole && done > 0 && self.cache.members.locked().get(&(head.id, pno, sno as u32)).is_none() {
                            return Ok(done);
                        }
                        let m = self.member_cached(head, pno, sno as u32, &piece, false)?;
                        let from = (offset + done as u64 - seg_start) as usize;
                        let n = (m.len() - from).min(buf.len() - done);
                        buf[done..done + n].copy_from_slice(&m[from..from + n]);
                        done += n;
                        if streaming && from + n == m.len() {
                            self.cache.members.locked().remove(&(head.id, pno, sno as u32));
                        }
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

    /// Writes a whole file to `out`, rebuilding gzip members on threads (`rebuild_threads`)
    /// that run ahead of the writer by a bounded amount. Returns the number of bytes written.
    pub fn copy_to(&self, head: &RecipeHead, out: &mut dyn Write) -> Result<u64> {
        /// Output a worker may have finished before the writer catches up.
        const AHEAD: u64 = 64 << 20;
        const TASK: u64 = 4 << 20;
        // Units of work in file order: a run of whole members (about TASK of them, so that
        // the threads meet once a run rather than once a member: 15,000 members of a crawl
        // cost as many wake-ups otherwise), or a run of a data segment's extents.
        #[derive(Clone, Copy)]
        struct Task {
            pno: u32,
            sno: usize,
            /// Members: segments sno..b. Data: extents a..b of segment sno.
            a: usize,
            b: usize,
            len: u64,
            members: bool,
        }
        /// The tasks of one piece.
        fn tasks_of(pno: u32, piece: &Piece, tasks: &mut Vec<Task>) {
            for (sno, seg) in piece.segments.iter().enumerate() {
                match seg {
                    Segment::Member { comp_len, .. } => match tasks.last_mut() {
                        Some(t) if t.members && t.pno == pno && t.b == sno && t.len < TASK / 4 => {
                            t.b = sno + 1;
                            t.len = t.len.saturating_add(*comp_len);
                        }
                        _ => tasks.push(Task { pno, sno, a: 0, b: sno + 1, len: *comp_len, members: true }),
                    },
                    Segment::Data { extents } => {
                        let (mut a, mut len) = (0usize, 0u64);
                        for (i, e) in extents.iter().enumerate() {
                            len += e.len as u64;
                            if len >= TASK || i + 1 == extents.len() {
                                tasks.push(Task { pno, sno, a, b: i + 1, len, members: false });
                                a = i + 1;
                                len = 0;
                            }
                        }
                    }
                }
            }
        }
        struct Progress {
            /// Tasks found so far (a loader adds them piece by piece, so the workers start
            /// on the first piece while the others load), and whether that is all of them.
            tasks: Vec<Task>,
            loaded: bool,
            done: Vec<Option<Result<Vec<u8>>>>,
            /// Tasks handed out, and bytes of output between the writer and them.
            next: usize,
            in_flight: u64,
            failed: bool,
        }
        let state = Mutex::new(Progress { tasks: Vec::new(), loaded: false, done: Vec::new(), next: 0, in_flight: 0, failed: false });
        // Buffers the writer is done with, for the next tasks: a few, and none grown past a
        // task's usual size by one huge member.
        let spare = crate::sync::Spare::new(4, 2 * TASK as usize);
        let changed = Condvar::new();
        let io_err = |err| StoreError::Io { path: "<output>".into(), err };
        let fail = |e| {
            state.locked().failed = true;
            changed.notify_all();
            e
        };
        let load = || -> Result<()> {
            for pno in 0..head.pieces() {
                let piece = self.piece(head, pno)?;
                let mut tasks = Vec::new();
                tasks_of(pno, &piece, &mut tasks);
                {
                    let mut st = state.locked();
                    if st.failed {
                        return Ok(());
                    }
                    st.done.extend((0..tasks.len()).map(|_| None));
                    st.tasks.append(&mut tasks);
                }
                changed.notify_all();
                // Cold packs: let the kernel fetch this piece's blobs at once. Advice only: a
                // place it cannot find, a worker reports.
                let _ = self.request_chunks(&piece.keys, SEQUENTIAL_GAP);
            }
            state.locked().loaded = true;
            changed.notify_all();
            Ok(())
        };
        let work = || loop {
            let (i, t) = {
                let mut st = state.locked();
                loop {
                    if st.failed || (st.loaded && st.next >= st.tasks.len()) {
                        return;
                    }
                    if st.next < st.tasks.len() && (st.in_flight < AHEAD || st.in_flight == 0) {
                        break;
                    }
                    st = crate::wait_on(&changed, st);
                }
                let i = st.next;
                st.next += 1;
                let t = st.tasks[i];
                st.in_flight = st.in_flight.saturating_add(t.len);
                (i, t)
            };
            // A panic here (a bug) must still fill the slot: the writer waits for it, and in
            // the mount that writer may hold the staged map (copy on write), which would
            // wedge every request instead of failing one.
            let r = crate::store::bug_as_error("copying out a part of a file", || {
                crate::failpoint::panic_at("copy_to");
                let piece = self.piece(head, t.pno)?;
                // A hint only: lengths come from the recipe, which may be damaged.
                let mut v = spare.take(0);
                v.reserve(t.len.min(2 * TASK) as usize);
                if t.members {
                    for sno in t.sno..t.b {
                        self.rebuild_member_into(head, t.pno, sno, &piece, true, &mut v)?;
                    }
                } else if let Segment::Data { extents } = &piece.segments[t.sno] {
                    self.gather_with(&piece, &extents[t.a..t.b], None, true, &mut v)?;
                }
                Ok(v)
            });
            state.locked().done[i] = Some(r);
            changed.notify_all();
        };
        let mut written = 0u64;
        let result = std::thread::scope(|s| -> Result<()> {
            // A panic in it (a bug) must end the copy as an error too, not leave the
            // writer and the workers waiting for pieces that never come.
            let loader = s.spawn(|| crate::store::bug_as_error("loading a file's recipe pieces", load).map_err(fail));
            for _ in 0..ahead::rebuild_threads() {
                s.spawn(work);
            }
            let mut i = 0;
            loop {
                // The next task's output; None once every task is written (or the loader
                // failed).
                let next = {
                    let mut st = state.locked();
                    loop {
                        if let Some(r) = st.done.get_mut(i).and_then(Option::take) {
                            break Some((r, st.tasks[i].len));
                        }
                        if st.failed || (st.loaded && i >= st.tasks.len()) {
                            break None;
                        }
                        st = crate::wait_on(&changed, st);
                    }
                };
                let Some((bytes, len)) = next else { break };
                let mut bytes = bytes.map_err(fail)?;
                out.write_all(&bytes).map_err(io_err).map_err(fail)?;
                written += bytes.len() as u64;
                bytes.clear();
                spare.give(bytes);
                let mut st = state.locked();
                st.in_flight = st.in_flight.saturating_sub(len);
                drop(st);
                changed.notify_all();
                i += 1;
            }
            // The loader's own error, if it stopped everything (a piece that cannot be read).
            loader.join().map_err(|_| StoreError::Bug("the piece loader panicked".into()))??;
            Ok(())
        });
        result.map(|_| written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extents_within_takes_those_that_touch_the_range() {
        let ext = |len| Extent { chunk: 0, offset: 0, len };
        let extents = [ext(10), ext(20), ext(30)]; // at 100..110, 110..130, 130..160
        let lens = |from, to| extents_within(&extents, 100, from, to).map(|e| e.len).collect::<Vec<_>>();
        assert_eq!(lens(105, 131), vec![10, 20, 30]);
        assert_eq!(lens(110, 130), vec![20]);
        assert_eq!(lens(109, 110), vec![10]);
        assert_eq!(lens(130, 130), Vec::<u32>::new());
        assert_eq!(lens(0, 100), Vec::<u32>::new());
        assert_eq!(lens(159, 1000), vec![30]);
    }
}
