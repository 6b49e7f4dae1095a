//! Ingest: any bytes in, a recipe and new chunks out, then one atomic commit.
//!
//! A file is read a window at a time (see `Windows`), so memory stays bounded whatever its
//! size, and a window is made ready on threads of its own while this one stores the window
//! before (`windows_ahead`). gzip files are split into members; the members' plain text is
//! segmented into WARC/ARC headers, payloads and unparsed bytes; each member's deflate parse
//! is recorded and proven to replay to the member's exact bytes (`format::deflate`). A member
//! that does not replay, and any bytes outside members, are stored as content-defined chunks
//! of the compressed bytes themselves. Headers go into literal blocks that recipes slice; the
//! shareable tail of a parse is a chunk. Each chunk is found or stored by `chunks`.

//! The wing: `source` (windows over a file), `direct` (reading around the page cache),
//! `ready` (splitting and proving a window), `tails` (parse tails named before), `chunks`
//! (finding or storing each chunk), `dict` (zstd dictionaries), `zip` (a ZIP's entries
//! ingested each as a file of its own), and here the loop over windows; `Store::put_file`
//! (namespace) is its entry.

pub(in crate::store) mod chunks;
pub(in crate::store) mod dict;
pub(in crate::store) mod direct;
pub(in crate::store) mod ready;
pub(in crate::store) mod source;
pub(in crate::store) mod tails;
pub(in crate::store) mod zip;
#[cfg(test)]
mod tail_tests;
#[cfg(test)]
mod predicted_tests;

use std::borrow::Cow;
use std::sync::MutexGuard;
use std::thread;

use crate::store::ingest::chunks::{Added, Pending};
use crate::store::ingest::ready::{prove_member, Proof, Proofs, Ready, TailFrom};
pub use crate::store::ingest::ready::Presplit;
use crate::store::ingest::source::{each_window, io_err, plain_room, split_window_in, Spares};
use crate::store::ingest::zip::zip_layout;
use crate::sync::Spare;
use crate::LockExt;
pub use crate::store::ingest::source::{Source, Windows, WINDOWS};
use crate::store::delta::captures::{url_of, Capture};
use crate::store::{Result, Store, StoreError, Writer};
use crate::digest::ChunkKey;
use crate::format::gzip::{self, Region};
use crate::format::zip as zipfmt;
use crate::format::warc::{self, SpanKind};
use crate::pack::ChunkKind;
use crate::recipe::{FileStats, MemberParts, Piece, RecipeBuilder};

/// Header bytes of one file are cut into blocks of about this size (one chunk each). Small
/// enough that a reader of one record decodes little besides its header; large enough for
/// zstd to find the repetition between neighbouring headers.
const LITERAL_BLOCK: usize = 64 << 10;
/// FastCDC sizes (min, average, max) for payloads and for unparsed bytes.
const PAYLOAD_CDC: (u32, u32, u32) = (256 << 10, 1 << 20, 4 << 20);
const RAW_CDC: (u32, u32, u32) = (16 << 10, 64 << 10, 256 << 10);
pub(in crate::store) use crate::recipe::Slice;

/// The result of ingesting one file, ready to commit.
pub(in crate::store) struct Ingested {
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
    /// Its records' URLs and first payload chunks (`delta::captures`).
    pub captures: Vec<Capture>,
    /// What the file's commit logs, naming it: a ZIP entry whose CRC-32 is not its bytes'.
    pub notes: Vec<String>,
}

struct Ctx {
    /// The parse forms its gzip members may take (`Forms::at_ingest`, or a reparse's).
    forms: ready::Forms,
    stats: FileStats,
    added: Added,
    /// Whether a member's parse took the longest form (an optimal parser's): the file's
    /// recipe pieces then hold mostly parse bytes that no other file shares.
    longest: bool,
    /// Each record's URL and first payload chunk, for the delta hints its commit leaves.
    captures: Vec<Capture>,
    notes: Vec<String>,
}

fn cdc(data: &[u8], (min, avg, max): (u32, u32, u32)) -> impl Iterator<Item = (usize, usize)> + '_ {
    fastcdc::v2020::FastCDC::new(data, min, avg, max).map(|c| (c.offset, c.length))
}

/// A window of a file ready to store: its bytes and what was made of them.
struct Proven<'a> {
    data: Cow<'a, [u8]>,
    ready: Ready,
}

/// Walks `src` a window at a time (`each_window`), making each ready to store in two steps,
/// each on a thread of its own, while this thread `store`s the window before: `prepare`
/// (for a gzip window, its members found and inflated: one thread's work, member after
/// member) gives the window's part and how much of the window it used (None if nothing: the
/// window is read again, larger), a window ahead of `finish` (the members' parses proven, on
/// the proving workers). So inflating overlaps both the proofs and the storing. A split
/// window waits for the provers to take it; a proven one may wait for this thread in a slot
/// of one (so the provers go on with the next window while a slow one is stored: import
/// 0.980x wall, ten pairs, for 10 MiB more peak RSS), so four windows are held at once.
/// This thread first runs `begin` (it makes what `store` needs: the writer) while the first windows are made
/// ready, and gives back what it made once every window is stored.
#[allow(clippy::too_many_arguments)]
fn windows_ahead<'s, S, T, U, X, P, G, B, F>(src: &'s S, total: u64, win: Windows, spare: &Spare, mut prepare: P, mut finish: G, begin: B, mut store: F) -> Result<X>
where
    S: Source + ?Sized + Sync,
    T: Send,
    U: Send,
    P: FnMut(u64, Cow<'s, [u8]>, bool) -> Option<(T, usize)> + Send,
    G: FnMut(T) -> U + Send,
    B: FnOnce() -> Result<X>,
    F: FnMut(&mut X, U) -> Result<()>,
{
    let (tx, rx) = std::sync::mpsc::sync_channel::<Result<U>>(1);
    thread::scope(|s| {
        let ahead = s.spawn(move || {
            let (half, halves) = std::sync::mpsc::sync_channel::<T>(0);
            thread::scope(|s| {
                let finished = tx.clone();
                let middle = s.spawn(move || {
                    for t in halves {
                        if finished.send(Ok(finish(t))).is_err() {
                            break;
                        }
                    }
                });
                let r = each_window(src, total, win, spare, |offset, data, last| {
                    let Some((t, used)) = prepare(offset, data, last) else { return Ok(0) };
                    if half.send(t).is_err() {
                        // The ingest stopped on an error of its own.
                        return Err(io_err(std::io::ErrorKind::Interrupted.into()));
                    }
                    Ok(used)
                });
                // The windows handed over are finished (and stored) before an error here.
                drop(half);
                middle.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                if let Err(e) = r {
                    let _ = tx.send(Err(e));
                }
            });
        });
        // (An error here drops `rx`: the threads ahead stop at their next hand-over.)
        let stored = begin().and_then(|mut x| rx.iter().try_for_each(|ready| store(&mut x, ready?)).map(|()| x));
        drop(rx);
        ahead.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        stored
    })
}

/// The parse tail a proven member stores next to its payload: one of its own encoded here,
/// not in the longest form.
fn follows(p: &Option<Proof>) -> Option<&[u8]> {
    p.as_ref().filter(|p| !p.stored.longest).and_then(|p| p.stored.tail.as_deref())
}

/// The chunks of the payload at plain range [a, b) (whole chunks that tile it, as
/// `chunk_segments` cuts a payload), given slices sorted by plain offset; None if they do
/// not tile it.
fn payload_slices(exts: &[(u64, Slice)], a: u64, b: u64) -> Option<Vec<Slice>> {
    let mut at = a;
    let mut out = Vec::new();
    for &(start, slice) in &exts[exts.partition_point(|(s, _)| *s < a)..] {
        if at == b {
            break;
        }
        if start != at || slice.1 != 0 {
            return None;
        }
        at += slice.2 as u64;
        out.push(slice);
    }
    (at == b).then_some(out)
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
    pub(in crate::store) fn ingest<S: Source + ?Sized + Sync>(&self, src: &S) -> Result<Ingested> {
        self.ingest_windows(src, Presplit::none(), WINDOWS)
    }

    /// Ingests `src` a window at a time. A panic anywhere in it (a parser bug met by some
    /// input, in this thread or in those that make windows ready) becomes this file's error,
    /// and the next ingest clears what this one left, as after any failed ingest. In the
    /// mount, the file then stays staged (readable, byte-exact) instead of the ingest worker
    /// dying with it.
    pub(in crate::store) fn ingest_windows<S: Source + ?Sized + Sync>(&self, src: &S, split: Presplit, win: Windows) -> Result<Ingested> {
        self.ingest_after(|| Ok(()), src, split, win, &Spares::new())
    }

    /// `ingest_windows`, the windows' buffers taken from and given back to `spare` (an
    /// importer's, kept from one file to the next). The writer is locked once the first
    /// windows are being made ready, after `first` has run on this thread with no lock held:
    /// the commit of the file before (`put_file_after`), which so overlaps this file's first
    /// proofs and ends before any of its chunks is looked up; an error from it ends the
    /// ingest. The writer is locked inside the unwind: a panic leaves it poisoned, which is
    /// cleared here (what it guards is left as after any failed ingest).
    pub(in crate::store) fn ingest_after<S: Source + ?Sized + Sync>(&self, first: impl FnOnce() -> Result<()>, src: &S, split: Presplit, win: Windows, spare: &Spares) -> Result<Ingested> {
        self.ingest_in_forms(first, src, split, win, spare, ready::Forms::at_ingest(&self.config))
    }

    /// Ingests `src` with its members' parses in the forms of the store's format, whatever
    /// ingest writes (gc's reparse: `maint::reparse`).
    pub(in crate::store) fn ingest_reparsing<S: Source + ?Sized + Sync>(&self, src: &S) -> Result<Ingested> {
        self.ingest_in_forms(|| Ok(()), src, Presplit::none(), WINDOWS, &Spares::new(), ready::Forms::of(self.config.version))
    }

    fn ingest_in_forms<S: Source + ?Sized + Sync>(&self, first: impl FnOnce() -> Result<()>, src: &S, split: Presplit, win: Windows, spare: &Spares, forms: ready::Forms) -> Result<Ingested> {
        let r = crate::store::bug_as_error("ingest", || self.ingest_windows_unguarded(first, src, split, win, spare, forms));
        self.writer.clear_poison();
        r
    }

    fn ingest_windows_unguarded<'a, 's, S: Source + ?Sized + Sync>(&'a self, first: impl FnOnce() -> Result<()>, src: &'s S, mut split: Presplit, win: Windows, spare: &Spares, forms: ready::Forms) -> Result<Ingested> {
        // What storing needs, made on this thread while the first windows are split and
        // proven (`windows_ahead`).
        let begin = move || -> Result<MutexGuard<'a, Writer>> {
            first()?;
            let mut w = self.writer.locked();
            // Chunks of an ingest that failed are garbage, never shared (nor is a dictionary
            // it stored).
            w.pending.clear();
            w.collisions = 0;
            // (The one it stored stays pinned: its commit may still read chunks named by it.)
            if let Some(d) = w.dicts.forget_candidate() {
                self.packs.unpin_dictionary(&d);
            }
            Ok(w)
        };
        let mut ctx = Ctx { forms, stats: FileStats::default(), added: Added::default(), longest: false, captures: Vec::new(), notes: Vec::new() };
        let mut rb = RecipeBuilder::new();
        let total = crate::failpoint::io_error("ingest_start").and_then(|()| src.size()).map_err(io_err)?;
        let win = Windows { bytes: win.bytes.max(1), max_bytes: win.max_bytes.max(win.bytes), plain: win.plain.max(1) };
        let head = src.window(0, 4).map_err(io_err)?;
        let zip = if zipfmt::looks_zip(&head) { zip_layout(src, total)? } else { None };
        let mut w = match zip {
            Some(layout) => self.ingest_zip(src, &layout, win, spare, begin, &mut ctx, &mut rb)?,
            None => self.ingest_stream(src, gzip::looks_gzip(&head), total, &mut split, win, spare, begin, &mut ctx, &mut rb)?,
        };
        let w: &mut Writer = &mut w;
        let (pieces, starts, size) = rb.finish();
        if size != total {
            return Err(io_err(std::io::Error::other(format!("the recipe covers {size} of the file's {total} bytes"))));
        }
        let encoded: Vec<Vec<u8>> = pieces.iter().map(|p| p.encode()).collect();
        let piece_items: Vec<(&[u8], ChunkKind)> = encoded.iter().map(|p| (p.as_slice(), ChunkKind::Recipe)).collect();
        let level = ctx.longest.then_some(crate::store::ingest::chunks::LONGEST_PARSE_ZSTD_LEVEL);
        let piece_keys = self.store_chunks_at(w, &mut ctx.added, &piece_items, level)?;
        let dict = ctx.added.dict;
        let pending = std::mem::take(&mut w.pending);
        let collisions = std::mem::take(&mut w.collisions);
        Ok(Ingested { pieces, piece_keys, starts, size, stats: ctx.stats, new_bytes: ctx.added.new_bytes, pending, collisions, dict, captures: ctx.captures, notes: ctx.notes })
    }

    /// Ingests `src` (a whole file, or one part of a ZIP: `ingest_zip`) as a stream of
    /// windows, gzip members (`gz`: it begins as gzip does) or plain text, into `rb`. The writer is locked by `begin`, once
    /// the first windows are being made ready, and given back at the end.
    #[allow(clippy::too_many_arguments)]
    fn ingest_stream<'a, 's, S: Source + ?Sized + Sync>(
        &'a self,
        src: &'s S,
        gz: bool,
        total: u64,
        split: &mut Presplit,
        win: Windows,
        spare: &Spares,
        begin: impl FnOnce() -> Result<MutexGuard<'a, Writer>>,
        ctx: &mut Ctx,
        rb: &mut RecipeBuilder,
    ) -> Result<MutexGuard<'a, Writer>> {
        // Each window's buffers go back to `spare` once it is stored, for the windows after it.
        let give = |data: Cow<'s, [u8]>| {
            if let Cow::Owned(buf) = data {
                spare.data.give(buf);
            }
        };
        if gz {
            // Finding and inflating the members of a window, and proving their parses, on
            // threads of their own while this one stores the window before.
            let mut arc_mode = false;
            let forms = ctx.forms;
            let prepare = |offset, data: Cow<'s, [u8]>, last| {
                let sw = split.take_for(offset, &data).unwrap_or_else(|| split_window_in(&data, last, win, spare.text.take(plain_room(data.len(), win))));
                let consumed = sw.consumed;
                (consumed > 0).then_some(((offset, data, sw), consumed))
            };
            let finish = |(offset, data, sw): (u64, Cow<'s, [u8]>, _)| {
                let ready = Ready::make(&data, sw, offset == 0, &mut arc_mode, forms, &self.tails);
                Proven { data, ready }
            };
            windows_ahead(src, total, win, &spare.data, prepare, finish, begin, |w: &mut MutexGuard<'a, Writer>, mut p: Proven<'s>| {
                let r = self.ingest_members(w, ctx, rb, &mut p);
                give(p.data);
                spare.text.give(p.ready.sw.plain);
                r
            })
        } else {
            // Segmenting a window on a thread of its own while this one stores the one before
            // (nothing to prove: the second step passes it on).
            let mut arc_mode = false;
            let prepare = |offset, data: Cow<'s, [u8]>, last| {
                let (seg, consumed) = warc::segment_window(&data, offset == 0, last, &mut arc_mode);
                (consumed > 0).then_some(((data, seg, consumed), consumed))
            };
            windows_ahead(src, total, win, &spare.data, prepare, |segmented| segmented, begin, |w: &mut MutexGuard<'a, Writer>, (data, seg, consumed)| {
                let exts = self.chunk_segments(w, ctx, &data[..consumed], &seg, &[], &mut Vec::new())?;
                rb.push_data(&exts.into_iter().map(|(_, s)| s).collect::<Vec<_>>());
                give(data);
                Ok(())
            })
        }
    }

    /// Stores one window of a gzip file, its members' parses proven.
    fn ingest_members(&self, w: &mut Writer, ctx: &mut Ctx, rb: &mut RecipeBuilder, window: &mut Proven<'_>) -> Result<()> {
        let Proven { data, ready: Ready { sw, seg, parses } } = window;
        let data = &data[..sw.consumed];
        let (plain, regions) = (&sw.plain[..], &sw.regions[..]);
        // Each parse tail is stored right after its payload's chunks (where a lookup of its
        // record reads them: one disk read for both); where the member's text ends, if it
        // has no payload. Those in the longest form (an optimal parser's) are stored apart,
        // at their level.
        let members: Vec<&gzip::Member> = regions.iter().filter_map(|r| if let Region::Member(m) = r { Some(m) } else { None }).collect();
        let mut tail_of: Vec<Option<ChunkKey>> = vec![None; members.len()];
        let exts = {
            // (member, where its tail goes in the text, the tail)
            let follow: Vec<(usize, u64, &[u8])> = members
                .iter()
                .zip(parses.iter())
                .enumerate()
                .filter_map(|(i, (m, p))| Some((i, p.as_ref()?.place.payload.map_or(m.plain_start + m.plain_len, |(_, b)| b), follows(p)?)))
                .collect();
            let tails: Vec<(u64, &[u8])> = follow.iter().map(|&(_, at, t)| (at, t)).collect();
            let mut keys = Vec::with_capacity(tails.len());
            let exts = self.chunk_segments(w, ctx, plain, seg, &tails, &mut keys)?;
            for (&(i, _, _), k) in follow.iter().zip(keys) {
                tail_of[i] = Some(k);
            }
            exts
        };
        self.confirm_named_tails(w, data, sw, &exts, parses)?;
        // Tails encoded by `confirm_named_tails` (a named one refused), stored now.
        let late: Vec<usize> = (0..members.len()).filter(|&i| tail_of[i].is_none() && follows(&parses[i]).is_some()).collect();
        if !late.is_empty() {
            let items: Vec<(&[u8], ChunkKind)> = late.iter().filter_map(|&i| Some((follows(&parses[i])?, ChunkKind::Parse))).collect();
            for (&i, k) in late.iter().zip(self.store_chunks(w, &mut ctx.added, &items)?) {
                tail_of[i] = Some(k);
            }
        }
        let longest: Vec<(&[u8], ChunkKind)> = parses.iter().filter_map(|p| p.as_ref().map(|p| &p.stored)).filter(|s| s.longest).filter_map(|s| Some((s.tail.as_deref()?, ChunkKind::Parse))).collect();
        let mut longest_tail_keys = self.store_chunks_at(w, &mut ctx.added, &longest, Some(crate::store::ingest::chunks::LONGEST_PARSE_ZSTD_LEVEL))?.into_iter();
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
                    let proof = parses[member_no].take();
                    member_no += 1;
                    ctx.stats.gzip_members += 1;
                    let (s, e) = (m.start as usize, (m.start + m.comp_len) as usize);
                    let Some(Proof { stored: parse, crc, trailer, tail: from, place }) = proof else {
                        ctx.stats.gzip_members_raw += 1;
                        raw_run = Some(raw_run.map_or((s, e), |(a, _)| (a, e)));
                        continue;
                    };
                    if let Some((a, b)) = raw_run.take() {
                        let sl = self.chunk_raw(w, ctx, &data[a..b])?;
                        rb.push_data(&sl);
                    }
                    let slices = slices_in(&exts, &mut cursor, m.plain_start, m.plain_start + m.plain_len);
                    let header = data[s..s + m.header_len].to_vec();
                    let (parse_tail, tail_len) = match (&parse.tail, &from) {
                        (Some(t), _) => {
                            let key = if parse.longest { longest_tail_keys.next() } else { tail_of[member_no - 1] };
                            (Some(key.ok_or_else(|| StoreError::Bug("a parse tail without its chunk".into()))?), t.len() as u64)
                        }
                        (None, TailFrom::Named(k)) => (Some(k.tail), k.tail_len),
                        (None, TailFrom::Encoded(_)) => (None, 0),
                    };
                    // A tail encoded here, for the copies of its payload to come.
                    if let (TailFrom::Encoded(Some(identity)), Some(tail), Some((a, b))) = (from, parse_tail, place.payload) {
                        if let Some(payload) = payload_slices(&exts, a, b) {
                            self.tails.remember(identity, payload.into(), tail, tail_len);
                        }
                    }
                    ctx.longest |= parse.longest;
                    ctx.stats.parse_bytes += parse.prefix.len() as u64 + tail_len;
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

    /// Checks each tail a member of this window named (`TailFrom::Named`) against what the
    /// window stored: the member's payload chunks must be the ones the tail was stored with,
    /// and the tail's chunk still a parse tail in the index or among this ingest's new
    /// chunks. A member that fails either is proven again here, its tail encoded (its parse
    /// recorded again too: the window no longer holds it).
    fn confirm_named_tails(&self, w: &Writer, data: &[u8], sw: &crate::store::ingest::source::SplitWindow, exts: &[(u64, Slice)], parses: &mut Proofs) -> Result<()> {
        let members = sw.regions.iter().filter_map(|r| if let Region::Member(m) = r { Some(m) } else { None });
        for (m, proof) in members.zip(parses.iter_mut()) {
            let Some(Proof { tail: TailFrom::Named(known), place, .. }) = proof else { continue };
            let ok = place.payload.and_then(|(a, b)| payload_slices(exts, a, b)).is_some_and(|s| *s == *known.payload) && self.holds_tail(w, &known.tail, known.tail_len)?;
            self.tails.count(ok);
            if !ok {
                let (place, identity) = (*place, known.identity().into());
                *proof = prove_member(data, &sw.plain, m, place, crate::store::longest_parses(self.config.version), None);
                // Its tail, stored now, takes the place of the one refused for the copies
                // to come.
                if let Some(p) = proof.as_mut().filter(|p| p.stored.tail.is_some() && !p.stored.longest) {
                    p.tail = TailFrom::Encoded(Some(identity));
                }
            }
        }
        Ok(())
    }

    /// Whether `key` is a parse tail of `len` bytes in the index or among this ingest's new
    /// chunks; under `--verify bytes`, one whose stored copy also reads back (as `find_chunk`
    /// asks of a copy it would join: an unreadable one must not absorb new members).
    fn holds_tail(&self, w: &Writer, key: &ChunkKey, len: u64) -> Result<bool> {
        let Some(e) = self.stored_entry(w, key)?.filter(|e| e.kind == ChunkKind::Parse as u8 && e.raw_len as u64 == len) else { return Ok(false) };
        Ok(self.config.verify != crate::store::Verify::Bytes || self.read_back(key, &e, |b| b.len() as u64 == len).unwrap_or(false))
    }

    /// Stores a window's text as chunks (its header blocks, then its payloads and unparsed
    /// bytes in text order, each of `tails` (plain offset, bytes) before the first payload or
    /// unparsed span that starts at or after its offset, or last, their keys pushed to
    /// `tail_keys` in order); returns each span's slices.
    fn chunk_segments(&self, w: &mut Writer, ctx: &mut Ctx, plain: &[u8], seg: &warc::Segmentation, tails: &[(u64, &[u8])], tail_keys: &mut Vec<ChunkKey>) -> Result<Vec<(u64, Slice)>> {
        ctx.stats.records += seg.records;
        ctx.stats.payloads += seg.payloads;
        // Header bytes first, into literal blocks, so each header becomes a slice of one.
        let mut blocks: Vec<Vec<u8>> = Vec::new();
        let mut places: Vec<(usize, u32)> = Vec::new();
        let mut buf: Vec<u8> = Vec::with_capacity(LITERAL_BLOCK);
        for span in seg.spans.iter().filter(|s| s.kind == SpanKind::Header) {
            let bytes = &plain[span.start as usize..(span.start + span.len) as usize];
            if !buf.is_empty() && buf.len() + bytes.len() > LITERAL_BLOCK {
                blocks.push(std::mem::replace(&mut buf, Vec::with_capacity(LITERAL_BLOCK)));
            }
            places.push((blocks.len(), buf.len() as u32));
            buf.extend_from_slice(bytes);
        }
        if !buf.is_empty() {
            blocks.push(buf);
        }
        // Then every chunk, stored at once: blocks first, then payloads and unparsed bytes
        // in text order, each with its plain offset and length (`cuts`).
        let mut items: Vec<(&[u8], ChunkKind)> = blocks.iter().map(|b| (b.as_slice(), ChunkKind::Literal)).collect();
        let mut cuts: Vec<(usize, usize)> = Vec::new();
        // The payloads' first chunks (by item) and their records' URLs.
        let mut heads: Vec<(usize, crate::index::UrlKey)> = Vec::new();
        let mut header: &[u8] = &[];
        // Items that are tails, and the next tail to place.
        let mut tail_items: Vec<usize> = Vec::with_capacity(tails.len());
        let mut next_tail = tails.iter().peekable();
        for span in &seg.spans {
            let (s, e) = (span.start as usize, (span.start + span.len) as usize);
            if span.kind != SpanKind::Header {
                while let Some((_, t)) = next_tail.next_if(|(at, _)| *at <= s as u64) {
                    tail_items.push(items.len());
                    items.push((t, ChunkKind::Parse));
                }
            }
            match span.kind {
                SpanKind::Header => header = &plain[s..e],
                SpanKind::Payload => {
                    ctx.stats.payload_bytes += span.len;
                    if let Some(url) = url_of(header) {
                        heads.push((items.len(), url));
                    }
                    for (i, (o, l)) in cdc(&plain[s..e], PAYLOAD_CDC).enumerate() {
                        let kind = if i == 0 { ChunkKind::PayloadHead } else { ChunkKind::Payload };
                        items.push((&plain[s + o..s + o + l], kind));
                        cuts.push((s + o, l));
                    }
                }
                SpanKind::Raw => {
                    for (o, l) in cdc(&plain[s..e], RAW_CDC) {
                        items.push((&plain[s + o..s + o + l], ChunkKind::Raw));
                        cuts.push((s + o, l));
                    }
                }
            }
        }
        for (_, t) in next_tail {
            tail_items.push(items.len());
            items.push((t, ChunkKind::Parse));
        }
        let keys = self.store_chunks(w, &mut ctx.added, &items)?;
        tail_keys.extend(tail_items.iter().map(|&i| keys[i]));
        for (item, url) in heads {
            let head = keys[item];
            let new = w.pending.get(&head.digest).is_some_and(|v| v.iter().any(|(k, _)| *k == head));
            // A new chunk's sketch, in case its URL was never captured before (`note_captures`).
            let sketch = (new && self.index.has_hints()).then(|| crate::store::delta::sketch::sketch(items[item].0)).flatten();
            ctx.captures.push(Capture { url, head, new, sketch });
        }
        // (`heads` above counts items with the tails among them; the spans below, without.)
        let keys: Vec<ChunkKey> = keys.into_iter().enumerate().filter(|(i, _)| tail_items.binary_search(i).is_err()).map(|(_, k)| k).collect();
        let (block_keys, chunk_keys) = keys.split_at(blocks.len());
        let mut out = Vec::with_capacity(seg.spans.len());
        let mut header_no = 0usize;
        let mut chunks = cuts.iter().zip(chunk_keys).peekable();
        for span in &seg.spans {
            match span.kind {
                SpanKind::Header => {
                    let (block, off) = places[header_no];
                    header_no += 1;
                    out.push((span.start, (block_keys[block], off, span.len as u32)));
                }
                _ => {
                    // This span's chunks: those that start before its end.
                    let end = (span.start + span.len) as usize;
                    while let Some((&(at, l), key)) = chunks.next_if(|((at, _), _)| *at < end) {
                        out.push((at as u64, (*key, 0, l as u32)));
                    }
                }
            }
        }
        debug_assert!(chunks.next().is_none(), "every chunk lies in a span");
        Ok(out)
    }

    fn chunk_raw(&self, w: &mut Writer, ctx: &mut Ctx, bytes: &[u8]) -> Result<Vec<Slice>> {
        let items: Vec<(&[u8], ChunkKind)> = cdc(bytes, RAW_CDC).map(|(o, l)| (&bytes[o..o + l], ChunkKind::Raw)).collect();
        let keys = self.store_chunks(w, &mut ctx.added, &items)?;
        Ok(keys.into_iter().zip(&items).map(|(key, (b, _))| (key, 0, b.len() as u32)).collect())
    }
}
