//! A ZIP (a WACZ above all) ingested as its framing plus its entries, each entry's bytes as
//! a file of its own would be.
//!
//! py-wacz, browsertrix-crawler and ArchiveWeb.page store a crawl's `archive/*.warc.gz` in
//! the WACZ as it is (method 0), behind a local header. Ingested as one stream, the WARC's
//! gzip members would not be found (the stream is not gzip from its start) and nothing would
//! be shared with the same WARC stored beside it. So once the file is whole, its layout is
//! read from the central directory (`format::zip`), and the file is ingested as runs: each
//! large entry's bytes on their own, from a fresh start, and the bytes between them (local
//! headers, data descriptors, small entries, the central directory) as they are. The recipe
//! is the runs' recipes one after another, with a piece boundary around each entry, so an
//! entry makes the very pieces (and chunks) its bytes make as a file: a WACZ imported after
//! its WARC costs its framing, its index and its small files.
//!
//! Nothing here decides what is stored: every byte of the file is in one run, and a ZIP
//! this module cannot read is ingested as any other file.

use std::borrow::Cow;
use std::sync::{Mutex, MutexGuard};

use crate::format::zip::{self as zipfmt, Entry, Layout, ZipError};
use crate::recipe::RecipeBuilder;
use crate::store::ingest::source::{io_err, Spares};
use crate::store::ingest::{Ctx, Presplit, Source, Windows};
use crate::store::{Result, Store, Writer};
use crate::LockExt;

/// Entries at least this large are ingested on their own; smaller ones (a WACZ's
/// `datapackage.json`, its `index.idx`) stay with the framing around them: a run costs a few
/// threads and a chunk of its own. (So a WACZ's first piece is the bytes before its first
/// large entry: its first local header, with small entries that come first; `Store::
/// rebuilds_members` looks past it only while it is shorter than this.)
pub(in crate::store) const MIN_ENTRY: u64 = 64 << 10;

/// The layout of the ZIP `src` is, if it is one this reader takes (None otherwise: the file
/// is ingested as any other).
pub(super) fn zip_layout<S: Source + ?Sized>(src: &S, total: u64) -> Result<Option<Layout>> {
    match zipfmt::layout(total, &mut |at, len| src.read_aside(at, len).map(Cow::into_owned)) {
        Ok(l) => Ok(Some(l)),
        Err(ZipError::Io(e)) => Err(io_err(e)),
        Err(e) => {
            log::debug!("{e}: ingested as one stream");
            Ok(None)
        }
    }
}

/// Bytes [start, start + len) of a source, as a source of their own, and the CRC-32 of what
/// has been read of them from their start on (windows are read forward, a window read
/// again larger starting where it did: each byte is taken once, in order).
struct Part<'a, S: ?Sized> {
    src: &'a S,
    start: u64,
    len: u64,
    /// Only for a stored entry, whose CRC-32 is checked.
    crc: Option<Mutex<(u64, crc32fast::Hasher)>>,
}

impl<'a, S: Source + ?Sized> Part<'a, S> {
    fn new(src: &'a S, start: u64, len: u64, checked: bool) -> Self {
        Part { src, start, len, crc: checked.then(|| Mutex::new((0, crc32fast::Hasher::new()))) }
    }

    fn note(&self, offset: u64, data: &[u8]) {
        let Some(crc) = &self.crc else { return };
        let mut c = crc.locked();
        let (pos, hasher) = &mut *c;
        if offset <= *pos && *pos < offset + data.len() as u64 {
            hasher.update(&data[(*pos - offset) as usize..]);
            *pos = offset + data.len() as u64;
        }
    }

    /// The CRC-32 of the part's bytes, if every one of them was read.
    fn crc(&self) -> Option<u32> {
        let c = self.crc.as_ref()?.locked();
        (c.0 == self.len).then(|| c.1.clone().finalize())
    }
}

impl<S: Source + ?Sized + Sync> Source for Part<'_, S> {
    fn size(&self) -> std::io::Result<u64> {
        Ok(self.len)
    }

    fn window(&self, offset: u64, len: usize) -> std::io::Result<Cow<'_, [u8]>> {
        self.window_in(offset, len, Vec::new())
    }

    fn window_in(&self, offset: u64, len: usize, buf: Vec<u8>) -> std::io::Result<Cow<'_, [u8]>> {
        let offset = offset.min(self.len);
        let len = len.min((self.len - offset).min(usize::MAX as u64) as usize);
        let w = self.src.window_in(self.start + offset, len, buf)?;
        self.note(offset, &w);
        Ok(w)
    }

    fn read_aside(&self, offset: u64, len: usize) -> std::io::Result<Cow<'_, [u8]>> {
        let offset = offset.min(self.len);
        self.src.read_aside(self.start + offset, len.min((self.len - offset).min(usize::MAX as u64) as usize))
    }
}

/// The file cut into runs that tile it: each entry of at least `MIN_ENTRY` bytes, and the
/// bytes between them.
fn runs(layout: &Layout) -> Vec<(u64, u64, Option<&Entry>)> {
    let mut out = Vec::new();
    let mut at = 0u64;
    for e in layout.entries.iter().filter(|e| e.comp_size >= MIN_ENTRY) {
        if e.data_at > at {
            out.push((at, e.data_at, None));
        }
        out.push((e.data_at, e.data_end(), Some(e)));
        at = e.data_end();
    }
    if layout.size > at {
        out.push((at, layout.size, None));
    }
    out
}

impl Store {
    /// Ingests the ZIP `src` of `layout` run after run (`runs`) into `rb`; the writer is
    /// locked by `begin` at the first run's start and kept to the end. A stored entry whose
    /// bytes do not have the CRC-32 its central directory gives is stored all the same (its
    /// bytes are the file's), and noted for the commit's log.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn ingest_zip<'a, S: Source + ?Sized + Sync>(
        &'a self,
        src: &S,
        layout: &Layout,
        win: Windows,
        spare: &Spares,
        begin: impl FnOnce() -> Result<MutexGuard<'a, Writer>>,
        ctx: &mut Ctx,
        rb: &mut RecipeBuilder,
    ) -> Result<MutexGuard<'a, Writer>> {
        let mut begin = Some(begin);
        let mut held: Option<MutexGuard<'a, Writer>> = None;
        for (a, b, entry) in runs(layout) {
            let part = Part::new(src, a, b - a, entry.is_some_and(Entry::is_stored));
            let (w, first) = (held.take(), begin.take());
            let lock = move || match (w, first) {
                (Some(w), _) => Ok(w),
                (None, Some(begin)) => begin(),
                (None, None) => unreachable!("the writer is locked once, then held"),
            };
            if entry.is_some() {
                rb.cut();
            }
            let gz = crate::format::gzip::looks_gzip(&part.read_aside(0, 3).map_err(io_err)?);
            held = Some(self.ingest_stream(&part, gz, b - a, &mut Presplit::none(), win, spare, lock, ctx, rb)?);
            let Some(e) = entry else { continue };
            rb.cut();
            if e.is_stored() {
                match part.crc() {
                    Some(crc) if crc == e.crc => {}
                    got => ctx.notes.push(format!(
                        "ZIP entry {}: its bytes' CRC-32 is {}, its central directory says {:08x}; stored as they are",
                        String::from_utf8_lossy(&e.name),
                        got.map_or("unknown".into(), |c| format!("{c:08x}")),
                        e.crc
                    )),
                }
            }
        }
        // (A ZIP has at least its end record: there is a run.)
        held.map_or_else(|| begin.take().expect("no run locked the writer")(), Ok)
    }
}
