//! What ingest reads: a file's bytes (`Source`), a window at a time (`Windows`,
//! `each_window`), with each window's gzip members found and inflated (`SplitWindow`).
//! Memory stays bounded by the window whatever the file's size.

use std::borrow::Cow;

use crate::store::{Result, StoreError};
use crate::sync::Spare;
use crate::format::gzip::{self, Region};

/// Members whose plain text is larger are kept raw: a read inside one would have to rebuild
/// it from its start.
pub(in crate::store) const MAX_MEMBER_PLAIN: u64 = crate::recipe::MAX_MEMBER_TEXT;

/// The bytes of a file to ingest. Ingest reads them a window at a time, so that its memory
/// is bounded by the window, whatever the file's size.
pub trait Source {
    fn size(&self) -> std::io::Result<u64>;
    /// Up to `len` bytes at `offset` (fewer only at the end): borrowed when the source is
    /// in memory, read into a buffer of their own otherwise (which can go to another thread).
    fn window(&self, offset: u64, len: usize) -> std::io::Result<Cow<'_, [u8]>>;
    /// `window`, read into `buf` (a buffer an earlier window was read into) if the bytes
    /// need one.
    fn window_in(&self, offset: u64, len: usize, buf: Vec<u8>) -> std::io::Result<Cow<'_, [u8]>> {
        drop(buf);
        self.window(offset, len)
    }
    /// `len` bytes at `offset` read for a look (a ZIP's tail, its directory), not as the next
    /// window: a source that reads ahead for its windows leaves that be.
    fn read_aside(&self, offset: u64, len: usize) -> std::io::Result<Cow<'_, [u8]>> {
        self.window(offset, len)
    }
}

/// The largest buffer `Spares` keeps: a window's bytes or text (12-26 MiB) and some, not one
/// an outsized member or record grew (up to 256 MiB), which an importer would otherwise hold
/// for the rest of its files.
const SPARE_MAX: usize = 32 << 20;

/// The buffers an ingest is done with, for its next windows: a fresh buffer is fresh
/// pages, each zeroed by the kernel as it is first touched (a sixth of an import's page
/// faults were so: the history of docs/BENCHMARKS.md). Four windows are in flight at
/// once (`ingest::windows_ahead`); a buffer not kept is a new one the next time. The bytes of
/// windows and their text are kept apart, each for its own size (a text's room is a little
/// larger, `plain_room`). An importer keeps one for all its files, the first windows its
/// loader reads and splits ahead included: 105k page faults an import of the corpus became
/// 80k, about one for each page of its peak memory.
pub struct Spares {
    pub(in crate::store) data: Spare,
    pub(in crate::store) text: Spare,
}

impl Spares {
    pub fn new() -> Spares {
        Spares { data: Spare::new(4, SPARE_MAX), text: Spare::new(4, SPARE_MAX) }
    }

    /// A buffer for `len` bytes of a file's window (`Source::window_in`).
    pub fn for_window(&self, len: usize) -> Vec<u8> {
        self.data.take(len)
    }

    /// A window's buffer (from `for_window`) back, for the next.
    pub fn give_window(&self, buf: Vec<u8>) {
        self.data.give(buf);
    }
}

impl Default for Spares {
    fn default() -> Spares {
        Spares::new()
    }
}

impl Source for [u8] {
    fn size(&self) -> std::io::Result<u64> {
        Ok(self.len() as u64)
    }

    fn window(&self, offset: u64, len: usize) -> std::io::Result<Cow<'_, [u8]>> {
        let from = (offset as usize).min(self.len());
        Ok(Cow::Borrowed(&self[from..from.saturating_add(len).min(self.len())]))
    }
}

/// A file read with `pread`, not mapped: a staged file can be truncated while it is being
/// ingested, and a mapped page past the new end would be a SIGBUS that takes the daemon down.
impl Source for std::fs::File {
    fn size(&self) -> std::io::Result<u64> {
        Ok(self.metadata()?.len())
    }

    fn window(&self, offset: u64, len: usize) -> std::io::Result<Cow<'_, [u8]>> {
        self.window_in(offset, len, Vec::new())
    }

    fn window_in(&self, offset: u64, len: usize, mut buf: Vec<u8>) -> std::io::Result<Cow<'_, [u8]>> {
        // Zeroes only what the buffer did not hold before: the read overwrites the rest.
        buf.resize(len, 0);
        let done = read_full_at(self, &mut buf, offset)?;
        buf.truncate(done);
        Ok(Cow::Owned(buf))
    }
}

/// Fills `buf` from `offset` of `file` (less only at its end); the bytes read.
pub(in crate::store) fn read_full_at(file: &std::fs::File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(k) => done += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// How much of a file ingest holds at once. A window of the file is read, its gzip members
/// inflated (stopping at a member's end once `plain` bytes of text are out), segmented and
/// stored; the next window starts where the last whole member or record ended. A member or
/// record that does not fit makes the window grow, up to `max_bytes`; past that it is taken
/// as cut short (stored raw or as a truncated record: every byte is kept either way).
#[derive(Clone, Copy, Debug)]
pub struct Windows {
    pub bytes: usize,
    pub max_bytes: usize,
    pub plain: usize,
}

/// 12 MiB since a gzip window is inflated, proven and stored on three threads at once
/// (`ingest::windows_ahead`; with a next file's first split by an importer, four
/// windows are held). Measured on the corpus against two steps of 16 MiB: import 0.945x wall
/// for the same peak RSS (364 against 361 MiB); 16 MiB in three steps 0.944x for 436 MiB,
/// 8 MiB 0.99x. (16 MiB was chosen against 32 MiB in two steps: import peak RSS 452-501
/// against 530-650 MB, a mount's cp + ingest peak 328 against 489 MiB.)
pub const WINDOWS: Windows = Windows { bytes: 12 << 20, max_bytes: 256 << 20, plain: 12 << 20 };

pub(in crate::store) struct SplitWindow {
    /// The length of the window split.
    pub(in crate::store) len: usize,
    pub(in crate::store) regions: Vec<Region>,
    pub(in crate::store) plain: Vec<u8>,
    pub(in crate::store) consumed: usize,
}

/// Room for the text of a window of `len` bytes at once: grown by doubling, the buffer was
/// copied whole at every step (realloc within malloc's heaps), nearly twice the text a
/// window. Bounded whatever the window asked for; a window with more text grows as before.
pub(in crate::store) fn plain_room(len: usize, win: Windows) -> usize {
    len.saturating_mul(4).min(win.plain).min(MAX_MEMBER_PLAIN as usize) + (1 << 20)
}

/// Finds and inflates the gzip members of one window, their text written into `plain` (a
/// buffer an earlier window's text was in, or a new one).
pub(in crate::store) fn split_window_in(data: &[u8], last: bool, win: Windows, mut plain: Vec<u8>) -> SplitWindow {
    plain.clear();
    plain.reserve(plain_room(data.len(), win));
    let (regions, consumed) = gzip::split_window(data, last, win.plain.max(1), MAX_MEMBER_PLAIN as usize, &mut plain);
    SplitWindow { len: data.len(), regions, plain, consumed }
}

pub(in crate::store) fn io_err(err: std::io::Error) -> StoreError {
    StoreError::Io { path: "(file being ingested)".into(), err }
}

/// Walks `src` a window at a time: `take` gets each window's offset and bytes and whether it
/// is to be taken as the last, and returns how much of it it used; the next window starts
/// there. A window of which nothing could be used (its first member or record goes on past
/// it) is read again, larger.
pub(in crate::store) fn each_window<'s, S: Source + ?Sized>(src: &'s S, total: u64, win: Windows, spare: &Spare, mut take: impl FnMut(u64, Cow<'s, [u8]>, bool) -> Result<usize>) -> Result<()> {
    let mut offset = 0u64;
    let mut want = win.bytes;
    while offset < total {
        // Never past the size taken at the start, even if the file grew since: the recipe
        // must describe exactly `total` bytes (a grown file is ingested again).
        let len = want.min((total - offset).min(usize::MAX as u64) as usize);
        let data = src.window_in(offset, len, spare.take(len)).map_err(io_err)?;
        if data.is_empty() {
            return Err(io_err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the file got shorter during its ingest")));
        }
        // A window that cannot grow any more is taken as if the file ended with it.
        let last = offset + data.len() as u64 >= total || want >= win.max_bytes;
        let consumed = take(offset, data, last)?;
        if consumed == 0 {
            want = want.saturating_mul(2).min(win.max_bytes);
            continue;
        }
        offset += consumed as u64;
        // Highly compressed gzip windows stop at the plain budget long before the end of
        // what was read: read about twice what the last one took, not a full window again.
        // Not much less: a window that runs out of bytes before its budget ends where the
        // file's compression put it, and a copy gzipped otherwise would cut its windows,
        // and so its header blocks, elsewhere (reading a quarter more, the GNU gzip copy of
        // a crawl stored 4.9 % of itself instead of 4.1 %).
        want = win.bytes.min(consumed.saturating_mul(2).max(win.bytes / 8).max(1));
    }
    Ok(())
}

