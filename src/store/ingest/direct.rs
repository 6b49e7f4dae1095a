//! A file to import, read from disk around the page cache (`O_DIRECT`) a few blocks ahead of
//! its ingest, on a thread of its own, when the page cache does not hold it.
//!
//! Why: a cold import through the page cache spent a sixth of its CPU in the kernel,
//! filling the cache and copying out of it (on the bench corpus sys 0.97 of 6.2 s), and the
//! copy ran on the thread that inflates. Read directly, the disk's DMA fills the buffer and
//! the cache is left to what the machine was doing (a 100 GB import no longer evicts it):
//! sys 0.58 s, import 0.957x wall (ten pairs), for 36 MiB more peak RSS (the blocks a window
//! is copied from, and those ahead). A file mostly in the cache (just written by a crawler)
//! or with dirty pages is read through it as before: there, a direct read would go to disk,
//! or wait for the writeback.

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use memmap2::MmapMut;

use crate::store::ingest::source::{read_full_at, Source};
use crate::LockExt;
use std::borrow::Cow;

/// Bytes a direct read takes at once, and the buffers it reads into.
const BLOCK: usize = 2 << 20;
/// Blocks read before the ingest asks for them (besides the one being read).
const AHEAD: usize = 3;
/// Direct reads' offsets, lengths and buffers are multiples of this (the largest logical
/// block size of common disks).
const ALIGN: usize = 4096;
/// The largest window given from the blocks; a larger one is read with `pread`.
const MAX_WINDOW: usize = 32 << 20;

/// A file opened for import: read straight from disk ahead of its ingest when the page
/// cache does not hold it, through the page cache with `pread` otherwise.
pub struct ImportFile {
    file: File,
    /// Whether the file is read around the page cache.
    direct: bool,
    /// Bytes from the start that `first_window` read through the page cache: the reader
    /// takes them from there too (they are in it now).
    cached_below: AtomicU64,
    /// Blocks read ahead, once the ingest's first read started the reader (a file waiting
    /// in an importer's queue holds none). Only the ingest's reading thread locks it, one
    /// window after another: the lock is for `Source: Sync`, never waited for by another,
    /// so it may be held while the reader fills the next block.
    ahead: Mutex<Reader>,
}

impl ImportFile {
    /// `file`, read ahead around the page cache unless the cache holds half of it or any of
    /// it is dirty (or the kernel cannot tell: `cachestat` is Linux 6.5's), or it is small.
    pub fn new(file: File) -> ImportFile {
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        let direct = len >= BLOCK as u64 && !cached(&file, len);
        ImportFile { file, direct, cached_below: AtomicU64::new(0), ahead: Mutex::new(Reader::NotStarted) }
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    /// The file's first `len` bytes, read through the page cache (an importer's loader
    /// splits them before the ingest starts; the ingest's reader takes them from the cache
    /// again rather than from disk).
    pub fn first_window(&self, len: usize, buf: Vec<u8>) -> io::Result<Cow<'_, [u8]>> {
        let w = self.file.window_in(0, len, buf)?;
        self.cached_below.fetch_max(w.len() as u64, Ordering::Relaxed);
        Ok(w)
    }
}

enum Reader {
    NotStarted,
    Running(Ahead),
    /// Not started after all: the file is read with `pread` (all of it was read through the
    /// page cache already, or the reader could not be started).
    Off,
}

/// Blocks read by the reader thread that the ingest may still ask for.
struct Ahead {
    /// Contiguous blocks, in file order, from the first that holds the last offset asked for.
    blocks: VecDeque<Block>,
    /// The reader's blocks; None once it has sent its last (a short one) or failed.
    from_reader: Option<Receiver<io::Result<Block>>>,
    /// The reader's error, for every read that needs what it could not read.
    failed: Option<(io::ErrorKind, String)>,
    /// Windows given from the blocks.
    served: u64,
}

struct Block {
    offset: u64,
    /// The block's bytes are `buf[..len]`.
    buf: MmapMut,
    len: usize,
}

impl Block {
    fn end(&self) -> u64 {
        self.offset + self.len as u64
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// Whether the page cache holds half of the file's `len` bytes or any dirty page of it;
/// true where the kernel cannot say (the file is then read as it was before `cachestat`).
fn cached(file: &File, len: u64) -> bool {
    on_overlay(file) || cache_state(file).is_none_or(|c| c.dirty + c.writeback > 0 || c.cached >= len / 2)
}

/// Whether the file is on overlayfs (container roots), whose files' pages are cached on the
/// layer below: `cachestat` on the overlay's file would see none of them.
#[cfg(target_os = "linux")]
fn on_overlay(file: &File) -> bool {
    const OVERLAYFS_SUPER_MAGIC: libc::c_long = 0x794c_7630;
    nix::sys::statfs::fstatfs(file).is_ok_and(|s| s.filesystem_type().0 as libc::c_long == OVERLAYFS_SUPER_MAGIC)
}

#[cfg(not(target_os = "linux"))]
fn on_overlay(_: &File) -> bool {
    false
}

/// Bytes of a file in the page cache: all of them, dirty, under writeback.
#[derive(Debug)]
struct CacheState {
    cached: u64,
    dirty: u64,
    writeback: u64,
}

/// What `cachestat` (Linux 6.5) says of the whole file; None if it cannot be asked.
#[cfg(target_os = "linux")]
fn cache_state(file: &File) -> Option<CacheState> {
    use std::os::fd::AsRawFd;
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct Stat {
        cache: u64,
        dirty: u64,
        writeback: u64,
        evicted: u64,
        recently_evicted: u64,
    }
    // (Not in the libc crate for every target; one number on every Linux architecture but
    // alpha.)
    const SYS_CACHESTAT: libc::c_long = 451;
    // A length of 0 is to the end of the file.
    let range = Range { off: 0, len: 0 };
    let mut st = Stat::default();
    // SAFETY: the kernel reads `range` and writes `st`, both live and of the layout it takes.
    let r = unsafe { libc::syscall(SYS_CACHESTAT, file.as_raw_fd(), &range as *const Range, &mut st as *mut Stat, 0) };
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    (r == 0).then(|| CacheState { cached: st.cache.saturating_mul(page), dirty: st.dirty.saturating_mul(page), writeback: st.writeback.saturating_mul(page) })
}

#[cfg(not(target_os = "linux"))]
fn cache_state(_: &File) -> Option<CacheState> {
    None
}

/// Starts the thread that reads `file` block after block, AHEAD blocks before they are
/// asked for: the first `cached_below` bytes through the page cache, the rest with
/// `O_DIRECT` (on a descriptor of its own); None if the file cannot be opened so.
fn start_reader(file: &File, cached_below: u64) -> Option<Ahead> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    // The same open file, not its path (which may name another file by now).
    let direct = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()?;
    let buffered = file.try_clone().ok()?;
    let (tx, rx) = sync_channel(AHEAD);
    let read = move || read_blocks(Some(direct), &buffered, cached_below, &tx);
    std::thread::Builder::new().name("warcfs-read".into()).spawn(read).ok()?;
    Some(Ahead { blocks: VecDeque::new(), from_reader: Some(rx), failed: None, served: 0 })
}

/// Block buffers done with, for the next blocks of any file (an importer's files are read
/// one after the other). Each is a mapping of its own, page-aligned as direct reads need,
/// and unmapped when it is not kept: taken from malloc's heaps, buffers of this size were
/// left among other allocations there and the import's peak RSS grew by a fifth.
static SPARE: Mutex<Vec<MmapMut>> = Mutex::new(Vec::new());
/// The most buffers SPARE keeps: about the blocks a window moves past (half a window for a
/// gzip file's; more are unmapped and mapped again, a few page faults a window).
const SPARE_KEPT: usize = 4;

fn spare_block() -> io::Result<MmapMut> {
    match SPARE.locked().pop() {
        Some(b) => Ok(b),
        None => MmapMut::map_anon(BLOCK),
    }
}

fn give_block(buf: MmapMut) {
    let mut spare = SPARE.locked();
    if spare.len() < SPARE_KEPT {
        spare.push(buf);
    }
}

/// The reader thread: every block of the file in order, until a short one (the end) or an
/// error, each sent to the ingest; stops early when the ingest drops its end. Blocks from
/// `cached_below` on are read with `direct`; a direct read that fails (a filesystem that
/// takes the flag but not the reads) is made again through the page cache, and so are the
/// rest.
fn read_blocks(mut direct: Option<File>, buffered: &File, cached_below: u64, tx: &SyncSender<io::Result<Block>>) {
    let mut offset = 0u64;
    loop {
        let read = spare_block().and_then(|mut buf| {
            let len = match direct.as_ref().filter(|_| offset >= cached_below) {
                Some(d) => read_block(Some(d), buffered, &mut buf[..], offset).or_else(|e| {
                    log::debug!("a direct read failed ({e}); reading through the page cache");
                    direct = None;
                    read_block(None, buffered, &mut buf[..], offset)
                }),
                None => read_block(None, buffered, &mut buf[..], offset),
            }?;
            Ok(Block { offset, buf, len })
        });
        let last = read.as_ref().map_or(true, |b| b.len < BLOCK);
        let sent = tx.send(read);
        if last || sent.is_err() {
            return;
        }
        offset += BLOCK as u64;
    }
}

/// Fills `room` from `offset`, less only at the end of the file: with `direct` while what is
/// read stays a whole number of ALIGN, through `buffered` after a read that did not (some
/// filesystems end direct reads short mid-file; the next one would be unaligned).
fn read_block(direct: Option<&File>, buffered: &File, room: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut len = 0;
    if let Some(d) = direct {
        while len < room.len() && len % ALIGN == 0 {
            match d.read_at(&mut room[len..], offset + len as u64) {
                Ok(0) => return Ok(len),
                Ok(k) => len += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(len + read_full_at(buffered, &mut room[len..], offset + len as u64)?)
}

impl Drop for Ahead {
    fn drop(&mut self) {
        for b in self.blocks.drain(..) {
            give_block(b.buf);
        }
    }
}

impl Ahead {
    /// Bytes [offset, offset + len) into `out` (fewer at the end of the file), from the blocks
    /// read; None if `offset` is before them (the caller reads it itself).
    fn read_into(&mut self, offset: u64, len: usize, out: &mut Vec<u8>) -> Option<io::Result<()>> {
        // A window grown for a member that does not fit (up to 256 MiB) would hold its
        // size in blocks besides its own buffer.
        if len > MAX_WINDOW {
            return None;
        }
        // Blocks wholly before the offset are done with: ingest reads forward (a window
        // read again starts where it did).
        while self.blocks.front().is_some_and(|b| b.end() <= offset && b.len == BLOCK) {
            let b = self.blocks.pop_front().expect("a front block");
            give_block(b.buf);
        }
        if self.blocks.front().is_some_and(|b| b.offset > offset) {
            return None;
        }
        let want_end = offset.saturating_add(len as u64);
        while self.blocks.back().map_or(0, Block::end) < want_end {
            let Some(rx) = &self.from_reader else { break };
            match rx.recv() {
                Ok(Ok(b)) => {
                    if b.len < BLOCK {
                        self.from_reader = None;
                    }
                    if b.end() <= offset && b.len == BLOCK {
                        give_block(b.buf);
                    } else {
                        self.blocks.push_back(b);
                    }
                }
                Ok(Err(e)) => {
                    self.failed = Some((e.kind(), e.to_string()));
                    self.from_reader = None;
                }
                // Gone before its last block: it panicked.
                Err(_) => {
                    self.failed = Some((io::ErrorKind::Other, "the thread reading ahead stopped".into()));
                    self.from_reader = None;
                }
            }
        }
        let have_end = self.blocks.back().map_or(0, Block::end);
        if have_end < want_end {
            if let Some((kind, msg)) = &self.failed {
                return Some(Err(io::Error::new(*kind, msg.clone())));
            }
        }
        out.clear();
        // (Exactly: grown block by block, a window's buffer would double past its size.)
        out.reserve_exact((want_end.min(have_end).saturating_sub(offset)) as usize);
        for b in &self.blocks {
            if b.end() <= offset || b.offset >= want_end {
                continue;
            }
            let from = offset.saturating_sub(b.offset) as usize;
            let to = (want_end.min(b.end()) - b.offset) as usize;
            out.extend_from_slice(&b.bytes()[from..to]);
        }
        self.served += 1;
        Some(Ok(()))
    }
}

impl Source for ImportFile {
    fn size(&self) -> io::Result<u64> {
        self.file.size()
    }

    fn window(&self, offset: u64, len: usize) -> io::Result<Cow<'_, [u8]>> {
        self.window_in(offset, len, Vec::new())
    }

    fn window_in(&self, offset: u64, len: usize, mut buf: Vec<u8>) -> io::Result<Cow<'_, [u8]>> {
        if self.direct {
            let mut ahead = self.ahead.locked();
            if let Reader::NotStarted = *ahead {
                // (A file no longer than its first window was read through the cache whole.)
                let below = self.cached_below.load(Ordering::Relaxed);
                let started = (below < self.file.size()?).then(|| start_reader(&self.file, below)).flatten();
                *ahead = started.map_or(Reader::Off, Reader::Running);
            }
            if let Reader::Running(a) = &mut *ahead {
                if let Some(r) = a.read_into(offset, len, &mut buf) {
                    return r.map(|()| Cow::Owned(buf));
                }
            }
        }
        self.file.window_in(offset, len, buf)
    }

    fn read_aside(&self, offset: u64, len: usize) -> io::Result<Cow<'_, [u8]>> {
        self.file.window_in(offset, len, Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn bytes(n: usize, mut x: u32) -> Vec<u8> {
        (0..n)
            .map(|_| {
                x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (x >> 24) as u8
            })
            .collect()
    }

    fn file_with(dir: &std::path::Path, name: &str, data: &[u8]) -> File {
        let p = dir.join(name);
        std::fs::File::create(&p).unwrap().write_all(data).unwrap();
        File::open(&p).unwrap()
    }

    /// Read around the page cache whatever `cachestat` says (a file just written is in it).
    fn around_the_cache(file: File) -> ImportFile {
        ImportFile { file, direct: true, cached_below: AtomicU64::new(0), ahead: Mutex::new(Reader::NotStarted) }
    }

    /// Windows as an ingest asks for them (forward, a window asked for again larger, across
    /// blocks, past the end) and one behind the blocks kept: each is the file's own bytes.
    #[test]
    fn windows_read_ahead_are_the_files_own_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let data = bytes(3 * BLOCK + 5 * ALIGN + 17, 1);
        let f = around_the_cache(file_with(dir.path(), "f", &data));
        let end = data.len() as u64;
        let want = |off: u64, n: usize| &data[off.min(end) as usize..(off + n as u64).min(end) as usize];
        let first = f.first_window(3 * ALIGN + 5, Vec::new()).unwrap();
        assert_eq!(&first[..], want(0, 3 * ALIGN + 5));
        let windows = [(0, 3), (0, BLOCK / 2), (0, BLOCK + 3), (BLOCK as u64 - 1, 2 * BLOCK), (2 * BLOCK as u64 + 9, 2 * BLOCK), (end - 1, 1), (end + 5, 10)];
        for (off, n) in windows {
            let w = f.window_in(off, n, Vec::new()).unwrap();
            assert_eq!(&w[..], want(off, n), "window at {off}, {n} bytes");
        }
        assert_eq!(served(&f), windows.len() as u64, "every window from the blocks (this filesystem takes O_DIRECT)");
        // Behind the blocks kept: read with pread.
        let w = f.window_in(10, 100, Vec::new()).unwrap();
        assert_eq!(&w[..], want(10, 100));
        assert_eq!(served(&f), windows.len() as u64);
    }

    fn served(f: &ImportFile) -> u64 {
        match &*f.ahead.locked() {
            Reader::Running(a) => a.served,
            _ => 0,
        }
    }

    /// A file of whole blocks ends with an empty one; a window larger than MAX_WINDOW is
    /// read with pread, and the windows after it from the blocks again.
    #[test]
    fn whole_blocks_and_outsized_windows_read_as_the_file_is() {
        let dir = tempfile::tempdir().unwrap();
        let data = bytes(MAX_WINDOW + 2 * BLOCK, 5);
        let f = around_the_cache(file_with(dir.path(), "f", &data));
        assert_eq!(&f.window_in(0, 10, Vec::new()).unwrap()[..], &data[..10]);
        assert_eq!(&f.window_in(5, MAX_WINDOW + 1, Vec::new()).unwrap()[..], &data[5..MAX_WINDOW + 6]);
        assert_eq!(served(&f), 1, "the outsized window by pread");
        let at = (MAX_WINDOW + BLOCK) as u64 - 3;
        assert_eq!(&f.window_in(at, 3 * BLOCK, Vec::new()).unwrap()[..], &data[at as usize..]);
        assert!(f.window_in(data.len() as u64, BLOCK, Vec::new()).unwrap().is_empty());
        assert_eq!(served(&f), 3);
    }

    /// A file cut short after it was opened reads short where it ends now (the ingest takes
    /// that as an error: `each_window`).
    #[test]
    fn a_file_cut_short_reads_short() {
        let dir = tempfile::tempdir().unwrap();
        let data = bytes(3 * BLOCK, 6);
        let f = around_the_cache(file_with(dir.path(), "f", &data));
        std::fs::OpenOptions::new().write(true).open(dir.path().join("f")).unwrap().set_len(BLOCK as u64 + 5).unwrap();
        assert_eq!(&f.window_in(0, 3 * BLOCK, Vec::new()).unwrap()[..], &data[..BLOCK + 5]);
        assert!(f.window_in(2 * BLOCK as u64, BLOCK, Vec::new()).unwrap().is_empty());
    }

    /// A file read through the page cache whole by its first window starts no reader.
    #[test]
    fn a_file_its_first_window_covers_starts_no_reader() {
        let dir = tempfile::tempdir().unwrap();
        let data = bytes(BLOCK + 7, 7);
        let f = around_the_cache(file_with(dir.path(), "f", &data));
        assert_eq!(&f.first_window(2 * BLOCK, Vec::new()).unwrap()[..], &data[..]);
        assert_eq!(&f.window_in(3, BLOCK, Vec::new()).unwrap()[..], &data[3..BLOCK + 3]);
        assert!(matches!(*f.ahead.locked(), Reader::Off));
    }

    /// A direct read that fails (here a descriptor that cannot be read at all, as a
    /// filesystem that takes O_DIRECT at open but not its reads) is made through the page
    /// cache, and so is the rest of the file.
    #[test]
    fn a_failed_direct_read_is_made_through_the_page_cache() {
        let dir = tempfile::tempdir().unwrap();
        let data = bytes(2 * BLOCK + 99, 2);
        let file = file_with(dir.path(), "f", &data);
        let unreadable = std::fs::OpenOptions::new().write(true).open(dir.path().join("f")).unwrap();
        let (tx, rx) = sync_channel(16);
        read_blocks(Some(unreadable), &file, 0, &tx);
        drop(tx);
        let got: Vec<u8> = rx.iter().flat_map(|b| b.unwrap().bytes().to_vec()).collect();
        assert_eq!(got, data);
    }

    /// A read that fails both ways is the ingest's error for the bytes it could not read;
    /// the bytes before it are still given.
    #[test]
    fn a_read_error_reaches_the_ingest() {
        let dir = tempfile::tempdir().unwrap();
        let data = bytes(BLOCK + 10, 3);
        let file = file_with(dir.path(), "f", &data);
        let unreadable = || std::fs::OpenOptions::new().write(true).open(dir.path().join("f")).unwrap();
        // The first block through the page cache (a descriptor that reads), the next from
        // two that cannot.
        let (tx, rx) = sync_channel(AHEAD);
        let (direct, bad) = (unreadable(), unreadable());
        let reader = std::thread::spawn(move || {
            let mut first = spare_block().unwrap();
            let n = read_block(None, &file, &mut first[..], 0).unwrap();
            tx.send(Ok(Block { offset: 0, buf: first, len: n })).unwrap();
            read_blocks(Some(direct), &bad, 0, &tx);
        });
        let mut a = Ahead { blocks: VecDeque::new(), from_reader: Some(rx), failed: None, served: 0 };
        let mut out = Vec::new();
        assert!(matches!(a.read_into(0, 100, &mut out), Some(Ok(()))));
        assert_eq!(out, data[..100]);
        let err = a.read_into(BLOCK as u64 - 5, 10, &mut out).unwrap().unwrap_err();
        assert_eq!(err.raw_os_error(), None, "kept as its kind and message: {err}");
        assert!(err.to_string().contains("Bad file descriptor"), "{err}");
        reader.join().unwrap();
    }

    /// A file just written is read through the page cache; once the cache has let it go, around it.
    #[test]
    fn a_file_is_read_around_the_page_cache_only_when_the_cache_lacks_it() {
        use std::os::fd::AsRawFd;
        let dir = tempfile::tempdir().unwrap();
        let data = bytes(2 * BLOCK, 4);
        let file = file_with(dir.path(), "f", &data);
        let Some(state) = cache_state(&file) else {
            eprintln!("no cachestat on this kernel: every file is read through the page cache");
            assert!(!ImportFile::new(file).direct);
            return;
        };
        assert!(state.cached + state.dirty > 0, "just written: {state:?}");
        assert!(!ImportFile::new(file).direct, "in the page cache: read through it");
        let file = File::open(dir.path().join("f")).unwrap();
        file.sync_all().unwrap();
        // SAFETY: plain advice on a descriptor this test holds open.
        assert_eq!(unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) }, 0);
        assert!(ImportFile::new(file).direct, "out of the cache: read around it");
    }

    /// A `.warc.gz` of many members, read around the page cache window after window, is
    /// stored and read back byte for byte.
    #[test]
    fn a_gzip_file_read_around_the_page_cache_is_stored_byte_exact() {
        use crate::store::{FileMeta, Presplit, Spares, Store, Timestamp, ROOT_INO};
        let real = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/corpus/real/");
        let one: Vec<u8> = ["chatnoir-eu-chatnoir-resiliparse/clueweb-quirk.warc.gz", "chatnoir-eu-chatnoir-resiliparse/warcfile.warc.gz", "N0taN3rd-node-warc/parseMe.warc.gz"]
            .iter()
            .flat_map(|p| std::fs::read(format!("{real}{p}")).unwrap())
            .collect();
        // Several blocks and windows' worth (about 28 MB).
        let data: Vec<u8> = (0..60).flat_map(|_| one.iter().copied()).collect();
        assert!(data.len() > 2 * crate::store::FIRST_WINDOW);
        let dir = tempfile::tempdir().unwrap();
        let src = around_the_cache(file_with(dir.path(), "in.warc.gz", &data));
        let s = Store::open(&dir.path().join("store"), true).unwrap();
        let meta = FileMeta { mode: 0o644, mtime: Timestamp::now() };
        let (_, ingest) = s.put_file_after(None, ROOT_INO, b"in.warc.gz", &src, Presplit::none(), meta, || true, &Spares::new());
        s.commit_put(ingest.unwrap()).unwrap();
        assert!(served(&src) > 3, "read ahead, window after window");
        let head = s.head(s.lookup(ROOT_INO, b"in.warc.gz").unwrap().unwrap()).unwrap().unwrap();
        let mut back = vec![0u8; head.size as usize];
        s.read_at(&head, 0, &mut back).unwrap();
        assert!(back == data, "the file reads back as it was");
    }
}
