//! Ingest: any bytes in, a recipe and new chunks out, then one atomic commit.
//!
//! A file is read a window at a time (see `Windows`), so memory stays bounded whatever its
//! size. gzip files are split into members; the members' plain text is segmented into
//! WARC/ARC headers, payloads and unparsed bytes; each member's deflate parse is recorded and
//! proven to replay to the member's exact bytes (`format::deflate`, on worker threads, while
//! this thread hashes and stores chunks). A member that does not replay, and any bytes outside
//! members, are stored as content-defined chunks of the compressed bytes themselves. Headers
//! go into literal blocks that recipes slice; the shareable tail of a parse is a chunk.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;

use super::source::{each_window, io_err, split_window, SplitWindow, MAX_MEMBER_PLAIN};
pub use super::source::{Presplit, Source, Windows, WINDOWS};
use super::{Compression, Ns, Result, Store, StoreError, Verify, Writer};
use crate::LockExt;
use crate::digest::{ChunkKey, Digest};
use crate::format::deflate;
use crate::format::gzip::{self, Member, Region};
use crate::format::warc::{self, SpanKind};
use crate::index::{Batch, ChunkEntry};
use crate::pack::{ChunkKind, Codec, OpenPack, BLOB_HEADER_LEN};
use crate::recipe::{FileStats, MemberParts, Piece, RecipeBuilder, RefDelta};

/// Header bytes of one file are cut into blocks of about this size (one chunk each). Small
/// enough that a reader of one record decodes little besides its header; large enough for
/// zstd to find the repetition between neighbouring headers.
const LITERAL_BLOCK: usize = 64 << 10;
/// FastCDC sizes (min, average, max) for payloads and for unparsed bytes.
const PAYLOAD_CDC: (u32, u32, u32) = (256 << 10, 1 << 20, 4 << 20);
const RAW_CDC: (u32, u32, u32) = (16 << 10, 64 << 10, 256 << 10);
/// A member's parse is shared from this many plain bytes into its payload on: by then the
/// writer's parse has (nearly always) stopped depending on the headers before the payload,
/// so copies of one payload store their parse tail once (see `format::deflate`).
const PARSE_SHARED_FROM: u64 = 4 << 10;
/// The most text whose matches a member keeps in its recipe (about 10-20 KiB of parse).
const PARSE_INLINE_TEXT: u64 = 64 << 10;
/// Compressed chunks are kept only if they save at least 3 %.
const MIN_SAVING_PERCENT: usize = 3;
const ZSTD_LEVEL: i32 = 3;
const RECIPE_ZSTD_LEVEL: i32 = 9;

/// A slice of a chunk: (chunk, offset in chunk, length).
pub(super) type Slice = (ChunkKey, u32, u32);

/// The result of ingesting one file, ready to commit.
pub(super) struct Ingested {
    pub pieces: Vec<Piece>,
    /// The chunks holding the pieces (stored like any chunk, so the packs hold them).
    pub piece_keys: Vec<ChunkKey>,
    pub starts: Vec<u64>,
    pub size: u64,
    pub stats: FileStats,
    pub new_bytes: u64,
    /// The chunks this ingest appended to packs; their index entries commit with the recipe.
    pub pending: Pending,
    /// Digest collisions met (and kept apart) by this ingest.
    pub collisions: u64,
    /// A zstd dictionary this ingest trained and stored (`dict`): committed with it, in use
    /// once committed.
    pub dict: Option<ChunkKey>,
}

/// Chunks appended to packs but not yet in the index, by digest.
pub(super) type Pending = HashMap<Digest, Vec<(ChunkKey, ChunkEntry)>>;

struct Ctx {
    stats: FileStats,
    new_bytes: u64,
    /// A dictionary this ingest trained and stored.
    dict: Option<ChunkKey>,
}

fn cdc(data: &[u8], (min, avg, max): (u32, u32, u32)) -> impl Iterator<Item = (usize, usize)> + '_ {
    fastcdc::v2020::FastCDC::new(data, min, avg, max).map(|c| (c.offset, c.length))
}

/// A member's parse, recorded while inflating it (by the splitter, or here when the splitter
/// left it to zlib) and proven to replay to its exact bytes in the form it is stored in; None
/// if it does not (the member is then kept raw).
fn record_member(data: &[u8], plain: &[u8], m: &Member, cut_at: u64) -> Option<deflate::Stored> {
    if !m.plain_kept || m.plain_len > MAX_MEMBER_PLAIN {
        return None;
    }
    let d0 = m.start as usize + m.header_len;
    let stream = data.get(d0..d0 + m.deflate_len as usize)?;
    let p0 = m.plain_start as usize;
    let plain = plain.get(p0..p0 + m.plain_len as usize)?;
    // The splitter's inflater recorded most members' parses already.
    let recorded;
    let parse = match &m.parse {
        Some(p) => p,
        None => {
            recorded = deflate::record(stream, plain).ok()?;
            &recorded
        }
    };
    // The proof: the stored form, read back and replayed, gives the member's exact bytes.
    let (stored, back) = deflate::encode_read_back(parse, plain, Some(cut_at as usize)).ok()?;
    let mut again = Vec::with_capacity(stream.len());
    deflate::replay(&back, plain, &mut again).ok()?;
    (again == stream).then_some(stored)
}

/// Where each member's parse may start to be shared, relative to its plain text: some way
/// into the first payload that starts in it, or its start if it begins inside a payload
/// (its window then sees nothing but payload). Never past PARSE_INLINE_TEXT: what comes
/// before the cut is kept in the recipe, whose pieces must stay small whatever a member
/// holds (one without a payload, a huge header).
fn parse_cuts(members: &[&Member], seg: &warc::Segmentation) -> Vec<u64> {
    let payloads: Vec<(u64, u64)> = seg.spans.iter().filter(|s| s.kind == SpanKind::Payload).map(|s| (s.start, s.start + s.len)).collect();
    members
        .iter()
        .map(|m| {
            let (ps, pe) = (m.plain_start, m.plain_start + m.plain_len);
            let i = payloads.partition_point(|&(_, end)| end <= ps);
            let cut = match payloads.get(i).filter(|&&(a, _)| a < pe) {
                Some(&(a, _)) if a < ps => 0,
                Some(&(a, _)) => a - ps + PARSE_SHARED_FROM,
                None => PARSE_INLINE_TEXT,
            };
            cut.min(PARSE_INLINE_TEXT)
        })
        .collect()
}

/// What `find_chunk` found: the chunk, or the seq a new copy takes (and whether others share
/// its digest: a collision).
enum Lookup {
    Found(ChunkKey),
    New { seq: u32, collides: bool },
}

/// Each of `items` compressed with zstd at `level`, on two threads (None where zstd fails).
fn compress_all(items: &[&[u8]], level: i32) -> Vec<Option<Vec<u8>>> {
    let next = AtomicUsize::new(0);
    let mut out: Vec<Option<Vec<u8>>> = vec![None; items.len()];
    let done: Vec<(usize, Option<Vec<u8>>)> = thread::scope(|s| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let next = &next;
                s.spawn(move || {
                    let mut z = zstd::bulk::Compressor::new(level).ok();
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(i) else { break };
                        done.push((i, z.as_mut().and_then(|z| z.compress(item).ok())));
                    }
                    done
                })
            })
            .collect();
        workers.into_iter().flat_map(|h| h.join().expect("compressing does not panic")).collect()
    });
    for (i, z) in done {
        out[i] = z;
    }
    out
}

/// The slices covering plain range [a, b), given slices sorted by plain offset; `cursor`
/// only moves forward because members come in plain-offset order.
fn slices_in(exts: &[(u64, Slice)], cursor: &mut usize, a: u64, b: u64) -> Vec<Slice> {
    while *cursor < exts.len() && exts[*cursor].0 + exts[*cursor].1 .2 as u64 <= a {
        *cursor += 1;
    }
    let mut out = Vec::new();
    let mut i = *cursor;
    while i < exts.len() && exts[i].0 < b {
        let (start, (key, off, len)) = exts[i];
        let s = a.max(start);
        let e = b.min(start + len as u64);
        if e > s {
            out.push((key, off + (s - start) as u32, (e - s) as u32));
        }
        i += 1;
    }
    out
}

impl Store {
    /// Goes on compressing with the dictionary the index names as in use (`dict`), on a
    /// store whose format has them. One that cannot be read is logged and left: chunks are
    /// then compressed without, and a new one is trained.
    pub(super) fn resume_dictionary(&self) -> Result<()> {
        let Some(raw) = self.index.meta_bytes(super::dict::META_KEY)? else { return Ok(()) };
        let Some(key) = ChunkKey::from_bytes(&raw) else {
            log::warn!("{}: the index names no readable zstd dictionary; a new one will be trained", self.root.display());
            return Ok(());
        };
        let bytes = match self.index.chunk(&key)? {
            Some(e) => self.packs.read(e.pack, e.offset, &key, e.stored_len),
            None => Err(crate::pack::PackError::Corrupt { pack: 0, offset: 0, what: format!("dictionary {} is in no pack", key.short()) }),
        };
        match bytes {
            Ok(bytes) => {
                if !self.writer.locked().dicts.use_dictionary(key.digest, &bytes) {
                    log::warn!("{}: the zstd dictionary in use ({}) cannot be prepared; a new one will be trained", self.root.display(), key.short());
                }
            }
            Err(e) => log::warn!("{}: the zstd dictionary in use cannot be read ({e}); a new one will be trained", self.root.display()),
        }
        Ok(())
    }

    pub(super) fn ingest<S: Source + ?Sized + Sync>(&self, w: &mut Writer, src: &S) -> Result<Ingested> {
        self.ingest_windows(w, src, Presplit::none(), WINDOWS)
    }

    /// Ingests `src` a window at a time. A panic anywhere in it (a parser bug met by some
    /// input, in this thread or the gzip splitter's) becomes this file's error: the caller
    /// holds the writer's lock outside the unwind, so the lock is not poisoned, and the next
    /// ingest clears what this one left, as after any failed ingest. In the mount, the file
    /// then stays staged (readable, byte-exact) instead of the ingest worker dying with it.
    pub(super) fn ingest_windows<S: Source + ?Sized + Sync>(&self, w: &mut Writer, src: &S, split: Presplit, win: Windows) -> Result<Ingested> {
        super::bug_as_error("ingest", || self.ingest_windows_unguarded(w, src, split, win))
    }

    fn ingest_windows_unguarded<S: Source + ?Sized + Sync>(&self, w: &mut Writer, src: &S, split: Presplit, win: Windows) -> Result<Ingested> {
        // Chunks of an ingest that failed are garbage, never shared (nor is a dictionary it
        // stored).
        w.pending.clear();
        w.collisions = 0;
        // (The one it stored stays pinned: its commit may still read chunks named by it.)
        if let Some(d) = w.dicts.forget_candidate() {
            self.packs.unpin_dictionary(&d);
        }
        let mut ctx = Ctx { stats: FileStats::default(), new_bytes: 0, dict: None };
        let mut rb = RecipeBuilder::new();
        let total = src.size().map_err(io_err)?;
        let win = Windows { bytes: win.bytes.max(1), max_bytes: win.max_bytes.max(win.bytes), plain: win.plain.max(1) };
        let mut arc_mode = false;
        if gzip::looks_gzip(&src.window(0, 3).map_err(io_err)?) {
            // Finding and inflating the members of the next window (a thread of its own)
            // overlaps with verifying and storing this one; the window's bytes go with it.
            let mut first = split.first;
            let (tx, rx) = std::sync::mpsc::sync_channel::<Result<(u64, Cow<'_, [u8]>, SplitWindow)>>(0);
            thread::scope(|s| -> Result<()> {
                s.spawn(move || {
                    let r = each_window(src, total, win, |offset, data, last| {
                        let sw = match first.take().filter(|sw| offset == 0 && sw.len == data.len()) {
                            Some(sw) => sw,
                            None => split_window(&data, last, win),
                        };
                        let consumed = sw.consumed;
                        if consumed > 0 && tx.send(Ok((offset, data, sw))).is_err() {
                            // The ingest stopped on an error of its own.
                            return Err(io_err(std::io::ErrorKind::Interrupted.into()));
                        }
                        Ok(consumed)
                    });
                    if let Err(e) = r {
                        let _ = tx.send(Err(e));
                    }
                });
                for msg in rx {
                    let (offset, data, sw) = msg?;
                    let seg = warc::segment_window(&sw.plain, offset == 0, true, &mut arc_mode).0;
                    self.ingest_members(w, &mut ctx, &mut rb, &data[..sw.consumed], &sw, &seg)?;
                }
                Ok(())
            })?;
        } else {
            each_window(src, total, win, |offset, data, last| {
                let (seg, consumed) = warc::segment_window(&data, offset == 0, last, &mut arc_mode);
                let exts = self.chunk_segments(w, &mut ctx, &data[..consumed], &seg)?;
                rb.push_data(&exts.into_iter().map(|(_, s)| s).collect::<Vec<_>>());
                Ok(consumed)
            })?;
        }
        let (pieces, starts, size) = rb.finish();
        if size != total {
            return Err(io_err(std::io::Error::other(format!("the recipe covers {size} of the file's {total} bytes"))));
        }
        let encoded: Vec<Vec<u8>> = pieces.iter().map(|p| p.encode()).collect();
        let piece_keys = self.store_pieces(w, &mut ctx, &encoded)?;
        let dict = ctx.dict;
        let pending = std::mem::take(&mut w.pending);
        let collisions = std::mem::take(&mut w.collisions);
        Ok(Ingested { pieces, piece_keys, starts, size, stats: ctx.stats, new_bytes: ctx.new_bytes, pending, collisions, dict })
    }

    /// Stores one window of a gzip file: `sw`'s regions tile `data`, and its members' plain
    /// text is segmented as `seg`.
    fn ingest_members(&self, w: &mut Writer, ctx: &mut Ctx, rb: &mut RecipeBuilder, data: &[u8], sw: &SplitWindow, seg: &warc::Segmentation) -> Result<()> {
        let (plain, regions) = (&sw.plain[..], &sw.regions[..]);
        let members: Vec<&Member> = regions
            .iter()
            .filter_map(|r| match r {
                Region::Member(m) => Some(m),
                Region::Raw { .. } => None,
            })
            .collect();
        let mut order: Vec<usize> = (0..members.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(members[i].plain_len));
        let cuts = parse_cuts(&members, seg);
        let next = AtomicUsize::new(0);
        let (mut parses, exts) = thread::scope(|s| {
            // Recording and replaying every member's parse is most of the CPU of ingest, so
            // it runs on two threads while this one stores chunks.
            // Largest members first, so one slow member does not finish alone at the end.
            const WORKERS: usize = 2;
            let handles: Vec<_> = (0..WORKERS)
                .map(|_| {
                    let (members, order, next, cuts) = (&members, &order, &next, &cuts);
                    s.spawn(move || {
                        let mut done = Vec::new();
                        loop {
                            let k = next.fetch_add(1, Ordering::Relaxed);
                            let Some(&i) = order.get(k) else { break };
                            done.push((i, record_member(data, plain, members[i], cuts[i])));
                        }
                        done
                    })
                })
                .collect();
            let exts = self.chunk_segments(w, ctx, plain, seg);
            let mut parses: Vec<Option<deflate::Stored>> = vec![None; members.len()];
            for h in handles {
                for (i, r) in h.join().expect("recording a parse does not panic") {
                    parses[i] = r;
                }
            }
            (parses, exts)
        });
        let exts = exts?;
        let mut cursor = 0usize;
        let mut member_no = 0usize;
        // Bytes that are stored as they are: raw regions and members that do not rebuild.
        let mut raw_run: Option<(usize, usize)> = None;
        for region in regions {
            match region {
                Region::Raw { start, len } => {
                    let (s, e) = (*start as usize, (*start + *len) as usize);
                    raw_run = Some(raw_run.map_or((s, e), |(a, _)| (a, e)));
                }
                Region::Member(m) => {
                    let parse = parses[member_no].take();
                    member_no += 1;
                    ctx.stats.gzip_members += 1;
                    let (s, e) = (m.start as usize, (m.start + m.comp_len) as usize);
                    let Some(parse) = parse else {
                        ctx.stats.gzip_members_raw += 1;
                        raw_run = Some(raw_run.map_or((s, e), |(a, _)| (a, e)));
                        continue;
                    };
                    if let Some((a, b)) = raw_run.take() {
                        let sl = self.chunk_raw(w, ctx, &data[a..b])?;
                        rb.push_data(&sl);
                    }
                    let plain_slice = &plain[m.plain_start as usize..(m.plain_start + m.plain_len) as usize];
                    // The splitter took its own text only with a trailer that matches it.
                    let trailer = (m.parse.is_none() && gzip::trailer_for(plain_slice) != m.trailer).then_some(m.trailer);
                    let slices = slices_in(&exts, &mut cursor, m.plain_start, m.plain_start + m.plain_len);
                    let header = data[s..s + m.header_len].to_vec();
                    let parse_tail = match &parse.tail {
                        Some(t) => Some(self.store_chunk(w, ctx, t, ChunkKind::Parse)?),
                        None => None,
                    };
                    ctx.stats.parse_bytes += parse.prefix.len() as u64 + parse.tail.as_ref().map_or(0, |t| t.len() as u64);
                    let crc = crc32fast::hash(&data[s..e]);
                    rb.push_member(MemberParts { header, parse: parse.prefix, parse_tail, trailer, comp_len: m.comp_len, crc }, &slices);
                }
            }
        }
        if let Some((a, b)) = raw_run.take() {
            let sl = self.chunk_raw(w, ctx, &data[a..b])?;
            rb.push_data(&sl);
        }
        Ok(())
    }

    /// Stores plain text as segmented into headers, payloads and unparsed bytes; returns
    /// slices covering `plain` in order, each with its plain offset.
    fn chunk_segments(&self, w: &mut Writer, ctx: &mut Ctx, plain: &[u8], seg: &warc::Segmentation) -> Result<Vec<(u64, Slice)>> {
        ctx.stats.records += seg.records;
        ctx.stats.payloads += seg.payloads;
        // Header bytes first, into literal blocks, so each header becomes a slice of one.
        let mut blocks: Vec<ChunkKey> = Vec::new();
        let mut places: Vec<(usize, u32)> = Vec::new();
        let mut buf: Vec<u8> = Vec::with_capacity(LITERAL_BLOCK);
        for span in seg.spans.iter().filter(|s| s.kind == SpanKind::Header) {
            let bytes = &plain[span.start as usize..(span.start + span.len) as usize];
            if !buf.is_empty() && buf.len() + bytes.len() > LITERAL_BLOCK {
                blocks.push(self.store_chunk(w, ctx, &buf, ChunkKind::Literal)?);
                buf.clear();
            }
            places.push((blocks.len(), buf.len() as u32));
            buf.extend_from_slice(bytes);
        }
        if !buf.is_empty() {
            blocks.push(self.store_chunk(w, ctx, &buf, ChunkKind::Literal)?);
        }
        let mut out = Vec::with_capacity(seg.spans.len());
        let mut header_no = 0usize;
        for span in &seg.spans {
            let (s, e) = (span.start as usize, (span.start + span.len) as usize);
            match span.kind {
                SpanKind::Header => {
                    let (block, off) = places[header_no];
                    header_no += 1;
                    out.push((span.start, (blocks[block], off, span.len as u32)));
                }
                SpanKind::Payload => {
                    ctx.stats.payload_bytes += span.len;
                    for (i, (o, l)) in cdc(&plain[s..e], PAYLOAD_CDC).enumerate() {
                        let kind = if i == 0 { ChunkKind::PayloadHead } else { ChunkKind::Payload };
                        let key = self.store_chunk(w, ctx, &plain[s + o..s + o + l], kind)?;
                        out.push(((s + o) as u64, (key, 0, l as u32)));
                    }
                }
                SpanKind::Raw => {
                    for (o, l) in cdc(&plain[s..e], RAW_CDC) {
                        let key = self.store_chunk(w, ctx, &plain[s + o..s + o + l], ChunkKind::Raw)?;
                        out.push(((s + o) as u64, (key, 0, l as u32)));
                    }
                }
            }
        }
        Ok(out)
    }

    fn chunk_raw(&self, w: &mut Writer, ctx: &mut Ctx, bytes: &[u8]) -> Result<Vec<Slice>> {
        let mut out = Vec::new();
        for (o, l) in cdc(bytes, RAW_CDC) {
            let key = self.store_chunk(w, ctx, &bytes[o..o + l], ChunkKind::Raw)?;
            out.push((key, 0, l as u32));
        }
        Ok(out)
    }

    /// Finds `data` in the store (proven equal as the verify mode demands) or appends it to
    /// the open pack as a new chunk.
    fn store_chunk(&self, w: &mut Writer, ctx: &mut Ctx, data: &[u8], kind: ChunkKind) -> Result<ChunkKey> {
        self.place_chunk(w, ctx, data, kind, (self.digest)(data), None)
    }

    /// Stores a file's recipe pieces (`encoded`): those the store lacks are compressed on
    /// both cores first (a high level, paid once the file's windows are done and the cores
    /// are free), then each is stored as `store_chunk` would.
    fn store_pieces(&self, w: &mut Writer, ctx: &mut Ctx, encoded: &[Vec<u8>]) -> Result<Vec<ChunkKey>> {
        let digests: Vec<Digest> = encoded.iter().map(|p| (self.digest)(p)).collect();
        let mut packed: Vec<Option<Vec<u8>>> = vec![None; encoded.len()];
        if self.config.compression == Compression::Zstd {
            let mut fresh = Vec::new();
            for (i, (p, d)) in encoded.iter().zip(&digests).enumerate() {
                if let Lookup::New { .. } = self.find_chunk(w, p, *d)? {
                    fresh.push(i);
                }
            }
            if fresh.len() > 1 {
                let items: Vec<&[u8]> = fresh.iter().map(|&i| encoded[i].as_slice()).collect();
                for (i, z) in fresh.into_iter().zip(compress_all(&items, RECIPE_ZSTD_LEVEL)) {
                    packed[i] = z;
                }
            }
        }
        // (A piece found above is found again: looked up, not compressed. Two equal pieces
        // new to the store: the second finds the first.)
        encoded.iter().zip(digests).zip(packed).map(|((p, d), z)| self.place_chunk(w, ctx, p, ChunkKind::Recipe, d, z)).collect()
    }

    /// Whether the store holds `data` (digest `digest`) already, as the verify mode proves it.
    fn find_chunk(&self, w: &mut Writer, data: &[u8], digest: Digest) -> Result<Lookup> {
        let mut candidates: Vec<(ChunkKey, ChunkEntry)> = w.pending.get(&digest).cloned().unwrap_or_default();
        // A point lookup of seq 0 answers most misses from the bloom filter; only a hit (or
        // a collision chain) needs the range scan.
        let first = ChunkKey { digest, seq: 0 };
        if candidates.is_empty() {
            if let Some(e) = self.index.chunk(&first)? {
                candidates.push((first, e));
                if self.config.verify != Verify::Off {
                    candidates = self.index.chunks_with_digest(&digest)?;
                }
            }
        } else {
            for (k, e) in self.index.chunks_with_digest(&digest)? {
                if !candidates.iter().any(|(c, _)| *c == k) {
                    candidates.push((k, e));
                }
            }
        }
        for (key, entry) in &candidates {
            let same = match self.config.verify {
                Verify::Off => true,
                Verify::Size => entry.raw_len as usize == data.len(),
                Verify::Bytes => {
                    entry.raw_len as usize == data.len()
                        && match self.chunk_bytes(key, entry) {
                            Ok(bytes) => bytes.as_slice() == data,
                            // A stored copy that cannot be read must not absorb new copies.
                            Err(e) => {
                                log::warn!("dedup candidate {} unreadable, storing a fresh copy: {e}", key.short());
                                false
                            }
                        }
                }
            };
            if same {
                return Ok(Lookup::Found(*key));
            }
        }
        let seq = candidates.iter().map(|(k, _)| k.seq + 1).max().unwrap_or(0);
        Ok(Lookup::New { seq, collides: !candidates.is_empty() })
    }

    /// `store_chunk` of `data` whose digest is `digest`; a recipe piece may come compressed
    /// already (`precompressed`, see `store_pieces`).
    fn place_chunk(&self, w: &mut Writer, ctx: &mut Ctx, data: &[u8], kind: ChunkKind, digest: Digest, precompressed: Option<Vec<u8>>) -> Result<ChunkKey> {
        debug_assert!(precompressed.is_none() || kind == ChunkKind::Recipe);
        let seq = match self.find_chunk(w, data, digest)? {
            Lookup::Found(key) => return Ok(key),
            Lookup::New { seq, collides } => {
                if collides {
                    w.collisions += 1;
                    log::warn!("digest collision on {}: stored as a separate chunk (seq {seq})", ChunkKey { digest, seq: 0 }.short());
                }
                seq
            }
        };
        let key = ChunkKey { digest, seq };
        // Payloads, headers and unparsed bytes are what a dictionary trained on them helps.
        let dictable = matches!(kind, ChunkKind::Raw | ChunkKind::Literal | ChunkKind::Payload | ChunkKind::PayloadHead);
        let compressed = match self.config.compression {
            Compression::Zstd => {
                if w.zstd.is_none() {
                    w.zstd = zstd::bulk::Compressor::new(ZSTD_LEVEL).ok();
                }
                if dictable {
                    w.dicts.sample(data);
                    // Enough new chunks seen to train a dictionary: stored now (before the
                    // chunks that name it), committed with this file.
                    if let Some(bytes) = w.dicts.train() {
                        let key = self.store_chunk(w, ctx, &bytes, ChunkKind::Dict)?;
                        // Blobs name a dictionary by digest, found at seq 0, as kind Dict: one
                        // that landed otherwise (a collision) is not used.
                        let is_dict = |e: &ChunkEntry| e.kind == ChunkKind::Dict as u8;
                        let stored_as_dict = key.seq == 0
                            && (w.pending.get(&key.digest).is_some_and(|v| v.iter().any(|(k, e)| *k == key && is_dict(e))) || self.index.chunk(&key)?.is_some_and(|e| is_dict(&e)));
                        // Its chunks may be read back (a verify) before it is in the index.
                        if stored_as_dict && self.packs.pin_dictionary(key.digest, &bytes) {
                            w.dicts.stored(key.digest, &bytes);
                            ctx.dict = Some(key);
                        }
                    }
                }
                let with_dict = if dictable { w.dicts.compress(data).map(|z| (Codec::ZstdDict, z)) } else { None };
                match w.zstd.as_mut() {
                    _ if with_dict.is_some() => with_dict,
                    // Recipe pieces are small (bytes per file, not per payload), read often,
                    // and compress much better with more effort.
                    _ if kind == ChunkKind::Recipe => precompressed.or_else(|| zstd::bulk::compress(data, RECIPE_ZSTD_LEVEL).ok()).map(|z| (Codec::Zstd, z)),
                    Some(z) => z.compress(data).ok().map(|z| (Codec::Zstd, z)),
                    None => zstd::bulk::compress(data, ZSTD_LEVEL).ok().map(|z| (Codec::Zstd, z)),
                }
                .filter(|(_, z)| z.len() * 100 <= data.len() * (100 - MIN_SAVING_PERCENT))
            }
            Compression::None => None,
        };
        let (codec, stored) = match &compressed {
            Some((codec, z)) => (*codec, z.as_slice()),
            None => (Codec::None, data),
        };
        let tmp_dir = self.root.join("packs-tmp");
        if w.open.is_none() {
            let id = self.alloc_pack_id();
            w.open = Some(OpenPack::create(&tmp_dir, id).map_err(|err| StoreError::Io { path: tmp_dir.clone(), err })?);
        }
        self.space.take((BLOB_HEADER_LEN + stored.len()) as u64).map_err(|err| StoreError::Io { path: tmp_dir.clone(), err })?;
        let open = w.open.as_mut().expect("open pack exists");
        let info = open
            .append(key, kind, codec, data.len() as u32, stored)
            .map_err(|err| StoreError::Io { path: tmp_dir.clone(), err })?;
        ctx.new_bytes += (BLOB_HEADER_LEN + stored.len()) as u64;
        let entry = ChunkEntry {
            pack: open.id,
            offset: info.offset,
            stored_len: info.stored_len,
            raw_len: info.raw_len,
            codec: info.codec,
            kind: info.kind,
            refs: 0,
        };
        w.pending.entry(digest).or_default().push((key, entry));
        if open.len() >= self.config.pack_size {
            self.seal_open(w)?;
        }
        Ok(key)
    }

    /// Whether two stored copies under one key hold the same chunk, as the verify mode
    /// proves it.
    fn same_chunk(&self, key: &ChunkKey, a: &ChunkEntry, b: &ChunkEntry) -> Result<bool> {
        Ok(match self.config.verify {
            Verify::Off => true,
            Verify::Size => a.raw_len == b.raw_len,
            Verify::Bytes => {
                a.raw_len == b.raw_len && *self.packs.read(a.pack, a.offset, key, a.stored_len)? == *self.packs.read(b.pack, b.offset, key, b.stored_len)?
            }
        })
    }

    /// Writes `b` with the refcount changes in one synced batch. The caller holds the
    /// namespace lock (`ns`), which makes the refcount read-modify-write atomic.
    pub(super) fn commit(&self, ns: &mut Ns, b: Batch, delta: RefDelta) -> Result<()> {
        self.commit_with(ns, b, delta, &Pending::new(), 0, None)
    }

    /// `commit` for a batch that references the chunks of an ingest (`pending`): the open
    /// pack is made durable first, so the index never points at bytes that are not on disk.
    /// `dict`: a dictionary the ingest stored, committed with it (one reference for good)
    /// and named in the index as the one in use; the writer compresses with it once this
    /// batch is durable.
    pub(super) fn commit_with(&self, ns: &mut Ns, mut b: Batch, mut delta: RefDelta, pending: &Pending, collisions: u64, dict: Option<ChunkKey>) -> Result<()> {
        if let Some(k) = dict {
            delta.add([k], 1);
            b.put_meta_bytes(&self.index, super::dict::META_KEY, &k.to_bytes());
        }
        if !pending.is_empty() {
            let mut w = self.writer.locked();
            if let Some(open) = w.open.as_mut() {
                let dir = self.root.join("packs-tmp");
                open.sync().map_err(|err| StoreError::Io { path: dir, err })?;
                crate::failpoint::crash_at("pack_synced");
            }
        }
        for (key, d) in delta.0 {
            if d == 0 {
                continue;
            }
            let new = pending.get(&key.digest).and_then(|v| v.iter().find(|(k, _)| *k == key)).map(|(_, e)| e.clone());
            let mut entry = match (self.index.chunk(&key)?, new) {
                // Another ingest committed the same new chunk after this one stored its own
                // copy (ingests run one at a time, but commit later): one entry, both
                // references; this copy is garbage in its pack. Unless the two differ
                // behind one digest: then nothing of this commit may count.
                (Some(committed), Some(ours)) => {
                    if !self.same_chunk(&key, &committed, &ours)? {
                        return Err(StoreError::ConcurrentCollision(key.to_string()));
                    }
                    committed
                }
                (Some(committed), None) => committed,
                (None, Some(ours)) => ours,
                (None, None) => return Err(StoreError::MissingChunk(key.to_string())),
            };
            let refs = entry.refs as i64 + d;
            if refs < 0 {
                // The index contradicts itself: refuse the change rather than guess.
                log::error!("refcount of chunk {} would drop below zero ({refs}); change refused", key.short());
                return Err(StoreError::RefcountUnderflow { chunk: key.to_string(), refs });
            }
            entry.refs = refs as u64;
            b.put_chunk(&self.index, &key, &entry);
        }
        if collisions > 0 {
            let total = self.index.meta_u64("collisions")? + collisions;
            b.put_meta_u64(&self.index, "collisions", total);
        }
        crate::failpoint::crash_at("before_commit");
        self.write_batch(ns, b)?;
        crate::failpoint::crash_at("committed");
        if let Some(k) = dict {
            self.writer.locked().dicts.activate(&k.digest);
            self.packs.unpin_dictionary(&k.digest);
        }
        Ok(())
    }
}
