//! The mount: a store as a POSIX directory, through FUSE (fuser).
//!
//! Reads of a stored file walk its recipe (shared caches, random access). Writes never touch
//! the recipe: the file's bytes move to a staging file (`STORE/staging/<inode>`), which
//! `close` and `fsync` make durable and mark in the index, so a crash loses nothing that was
//! closed or fsynced. After the last writer closes, a background worker ingests the staging
//! file (records parsed, payloads deduplicated) and commits its recipe in one batch, unless
//! the file changed meanwhile; until then reads come from the staging file. `stats` counts
//! what is still staged.
//!
//! Lock order: the staged-file map, then the store's own lock (inside `Store` calls).
//!
//! Modules: `staging` (written files, their durability and background ingest), `data` (open,
//! read, write, flush, fsync, release, file handles), `names` (making, removing, renaming and
//! linking names), `dir` (setattr, directory handles), `xattr`, `virt` (`/.warcfs/`),
//! `control` (the control socket), `daemon` and `unmount` (mounting and ending), `guard` (a
//! panic is EIO), `quiet` (flooding errors logged once per interval). This file keeps the
//! shared state, lookups and attributes, and fuser's `Filesystem` impl, whose methods
//! forward to those modules or are short.

pub mod control;
mod daemon;
mod guard;
mod quiet;
mod dir;
mod names;
mod data;
mod staging;
mod xattr;
mod virt;
mod wacz;
mod resolved;
mod indexer;
mod unmount;

pub use daemon::{mount, MountArgs};
pub use unmount::umount;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, Sender};
use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, IoctlFlags, KernelConfig, LockOwner,
    OpenAccMode, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use crate::LockExt;
use crate::recipe::RecipeHead;
use crate::store::{Inode, InodeKind, ReadAhead, Store, StoreError, Timestamp};
use staging::{ingest_loop, Staged};
use resolved::{RESOLVED_INDEX_INO, RESOLVED_INDEX_NAME, RESOLVED_INO, RESOLVED_NAME};
use wacz::{is_view, WACZ_INO, WACZ_NAME};

const TTL: Duration = Duration::from_secs(1);
/// Longest file name, as statfs reports it.
const NAME_MAX: usize = 255;

/// `/.warcfs/`: what the store knows, as read-only files. Not listed in the root (so `cp -r`
/// and rsync of a mount copy only the archive), reachable by name. Its inode numbers are
/// far above any the store hands out.
const CTL_NAME: &[u8] = crate::store::RESERVED.as_bytes();
const CTL_INO: u64 = u64::MAX - 1;
/// `/.warcfs/index.cdxj`: the CDXJ index of every WARC in the store (paths relative to the
/// mount's root), sorted, regenerated when the store has changed, at most once a second.
const INDEX_NAME: &[u8] = b"index.cdxj";
const INDEX_INO: u64 = u64::MAX - 2;

fn is_virtual(ino: u64) -> bool {
    ino == CTL_INO || is_index(ino) || is_view(ino)
}

/// Whether `ino` is one of the CDXJ indexes of `/.warcfs/`.
fn is_index(ino: u64) -> bool {
    ino == INDEX_INO || ino == RESOLVED_INDEX_INO
}

/// The error for making or replacing `name` in `parent` when that touches `/.warcfs`.
fn reserved(parent: u64, name: &[u8]) -> Option<Errno> {
    if is_virtual(parent) {
        Some(Errno::EROFS)
    } else if parent == crate::store::ROOT_INO && name == CTL_NAME {
        Some(Errno::EEXIST)
    } else {
        None
    }
}
/// Reported as st_blksize, which sizes the buffers of stdio, Python and friends: a record
/// lookup through such a buffer reads a whole block, and a block of a stored file costs
/// decoding every chunk in it. Sequential readers of files in the page cache still get
/// 1 MiB FUSE requests from the kernel's read-ahead, and writers from the writeback cache
/// (where there is one: not where other nodes change files, see `init`);
/// readers of direct-I/O (gzip) files send their own read sizes (`cat` 128 KiB).
const BLKSIZE: u32 = 4096;

/// A direct-I/O reader that jumped and has read less than this since, and now reads from
/// inside a member, is taken to be finishing one record (see `read`): its read stops at the
/// end of that member instead of rebuilding the ones after it.
const LOOKUP_RUN: u64 = 64 << 10;


struct Handle {
    ino: u64,
    write: bool,
    /// Contents of a virtual file as of its open.
    snapshot: Option<(Arc<File>, u64)>,
    /// The recipe a read-only handle of a stored file reads: it holds while the file is
    /// stored (a writer here stages the file first, reads then go to staging, and staging
    /// drops this, so that once the rewrite is ingested each read looks the new recipe up).
    /// None where another node may rewrite it (`Inner::elsewhere`): each read looks it up.
    head: Option<Arc<RecipeHead>>,
    /// Where this handle's last read ended: a read that starts there is sequential and
    /// worth reading ahead for; one that starts elsewhere (a record lookup) is not.
    next: u64,
    /// Bytes read in the current sequential run.
    run: u64,
    /// A read of this handle started elsewhere than where the last one ended (a reader
    /// that starts at 0 and reads on never did).
    jumped: bool,
    /// Opened for direct I/O: reads may return short.
    direct: bool,
    /// Whether `head`'s file rebuilds gzip members (worked out once, at open; None for a
    /// handle opened without a recipe).
    rebuilds_members: Option<bool>,
    /// What a file of `/.warcfs/wacz/` reads.
    view: Option<wacz::EntryRead>,
}

/// An open directory's entries, "." and ".." first: (inode, kind, name).
type Listing = Vec<(u64, FileType, Vec<u8>)>;

struct Inner {
    store: Arc<Store>,
    /// `/.warcfs/index.cdxj` and `/.warcfs/resolved.cdxj` (`virt::slot`).
    index_files: [Mutex<virt::IndexFile>; 2],
    /// `/.warcfs/resolved/`'s originals and layouts.
    resolved: Mutex<resolved::ResolvedState>,
    staging: PathBuf,
    staged: Mutex<HashMap<u64, Staged>>,
    /// One lock per inode being staged (its stored bytes copied into staging): the copy
    /// runs without `staged` locked, so other files go on; the same file's next change
    /// waits for it.
    staging_gates: Mutex<HashMap<u64, Arc<Mutex<()>>>>,
    /// Open handles per inode (readers and writers), for orphans.
    opens: Mutex<HashMap<u64, u32>>,
    handles: Mutex<HashMap<u64, Handle>>,
    /// The entry trees of the WACZs `/.warcfs/wacz/` was asked about, and its inode numbers.
    wacz_trees: wacz::Trees,
    view_inos: Mutex<wacz::ViewInos>,
    /// The listing of each open directory handle, read once (at the first `readdir`, and
    /// again at a rewind to offset 0): listing a directory of n entries costs O(n), not a
    /// full read of it for every reply.
    dirs: Mutex<HashMap<u64, Arc<Listing>>>,
    next_fh: AtomicU64,
    /// The kernel allows mmap of files opened for direct I/O (see `open`).
    direct_mmap: std::sync::atomic::AtomicBool,
    /// Files here change without this process: another node writes them (`init`: no
    /// writeback cache; `open`: a handle keeps no recipe; `write`: the times kept here).
    elsewhere: bool,
}

pub struct WarcFs {
    inner: Arc<Inner>,
    tx: Option<Sender<u64>>,
    worker: Option<JoinHandle<()>>,
    /// Rebuilds the gzip members sequential readers of stored files will read next.
    ahead: Option<ReadAhead>,
    /// Keeps `STORE/search/` up to date, once it exists.
    search: Option<indexer::SearchIndexer>,
    /// Mounted `ro`: the kernel refuses every write, so the writeback cache has nothing to
    /// hold and is not asked for (see `init`).
    read_only: bool,
}

fn errno(e: &StoreError) -> Errno {
    match e {
        StoreError::NotFound(_) | StoreError::NoStore(_) => Errno::ENOENT,
        StoreError::NotADirectory(_) => Errno::ENOTDIR,
        StoreError::IsADirectory(_) => Errno::EISDIR,
        StoreError::NotEmpty(_) => Errno::ENOTEMPTY,
        StoreError::Exists(_) | StoreError::Reserved(_) => Errno::EEXIST,
        StoreError::InvalidPath(_) => Errno::EINVAL,
        StoreError::NotOwned { .. } => {
            log::warn!("{e}");
            Errno::EACCES
        }
        StoreError::Io { err: source, .. } => {
            quiet::io_error("store", source.raw_os_error(), e);
            Errno::from_i32(source.raw_os_error().unwrap_or(libc::EIO))
        }
        _ => {
            log::error!("{e}");
            Errno::EIO
        }
    }
}

fn io_errno(e: &io::Error) -> Errno {
    quiet::io_error("staging", e.raw_os_error(), format_args!("staging I/O: {e}"));
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

fn to_system(t: Timestamp) -> SystemTime {
    if t.secs >= 0 {
        UNIX_EPOCH + Duration::new(t.secs as u64, t.nanos)
    } else {
        UNIX_EPOCH - Duration::from_secs((-t.secs) as u64) + Duration::from_nanos(t.nanos as u64)
    }
}

fn time_or_now(t: TimeOrNow) -> Timestamp {
    match t {
        TimeOrNow::SpecificTime(t) => Timestamp::from(t),
        TimeOrNow::Now => Timestamp::now(),
    }
}

fn kind_of(k: InodeKind) -> FileType {
    match k {
        InodeKind::Dir => FileType::Directory,
        InodeKind::File => FileType::RegularFile,
        InodeKind::Symlink => FileType::Symlink,
        InodeKind::Fifo => FileType::NamedPipe,
        InodeKind::Socket => FileType::Socket,
        InodeKind::CharDevice => FileType::CharDevice,
        InodeKind::BlockDevice => FileType::BlockDevice,
    }
}

impl Inner {
    fn attr(&self, ino: u64, inode: &Inode) -> FileAttr {
        // A file staged here has its staging file's size. One staged elsewhere (another node
        // of a shared store is writing it, or the bucket's writer is) has only its last
        // committed bytes here, which reads serve: its size is theirs until its new recipe
        // arrives. Showing the size being written would have the kernel zero-fill the pages
        // no read can give, and keep them.
        let (staged, written_at) = match self.staged.locked().get(&ino) {
            Some(s) => (Some(s.size), s.written_at),
            None => (None, None),
        };
        let size = match staged {
            Some(size) => size,
            // `inode` was read before the map: a commit here may have come in between (it
            // clears the flag, then leaves the map), so the index says which it is now.
            None if inode.staged => match self.store.inode(ino) {
                Ok(Some(now)) if !now.staged => now.size,
                Ok(Some(now)) => now.recipe.as_ref().map_or(0, |r| r.size),
                _ => inode.recipe.as_ref().map_or(0, |r| r.size),
            },
            None => inode.size,
        };
        // Without the writeback cache the kernel leaves a write's times to us (`written_at`).
        let (mtime, ctime) = match written_at {
            Some(t) => (t, t),
            None => (inode.mtime, inode.ctime),
        };
        FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: to_system(inode.atime),
            mtime: to_system(mtime),
            ctime: to_system(ctime),
            crtime: to_system(inode.ctime),
            kind: kind_of(inode.kind),
            perm: (inode.mode & 0o7777) as u16,
            nlink: inode.nlink,
            uid: inode.uid,
            gid: inode.gid,
            rdev: inode.rdev,
            blksize: BLKSIZE,
            flags: 0,
        }
    }

    fn inode(&self, ino: u64) -> Result<Inode, Errno> {
        self.store.inode(ino).map_err(|e| errno(&e))?.ok_or(Errno::ENOENT)
    }

    fn is_open(&self, ino: u64) -> bool {
        self.opens.locked().get(&ino).copied().unwrap_or(0) > 0
    }
}

/// How much of the index a mount has the kernel read in at start.
const INDEX_WARM_BYTES: u64 = 256 << 20;

impl WarcFs {
    /// Wraps an open store; recovers staged files and orphans left by a crash. `read_only`:
    /// the mount is `ro`.
    pub fn new(store: Arc<Store>, read_only: bool) -> Result<WarcFs, StoreError> {
        let staging = store.root().join("staging");
        fs::create_dir_all(&staging).map_err(|err| StoreError::Io { path: staging.clone(), err })?;
        let inner = Arc::new(Inner {
            store: store.clone(),
            index_files: Default::default(),
            resolved: Mutex::new(resolved::ResolvedState::default()),
            staging,
            staged: Mutex::new(HashMap::new()),
            staging_gates: Mutex::new(HashMap::new()),
            opens: Mutex::new(HashMap::new()),
            handles: Mutex::new(HashMap::new()),
            wacz_trees: Mutex::new(HashMap::new()),
            view_inos: Mutex::new(wacz::ViewInos::default()),
            dirs: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            direct_mmap: std::sync::atomic::AtomicBool::new(false),
            elsewhere: store.changed_elsewhere(),
        });
        let (tx, rx) = crossbeam_channel::unbounded::<u64>();
        // A follower recovers nothing: the writer's staged files and orphans are the
        // writer's to recover, and its index takes no change of them.
        let (orphans, staged) = if store.is_follower() { Default::default() } else { store.orphans_and_staged()? };
        for ino in orphans {
            log::info!("dropping orphan inode {ino} left by a crash");
            store.drop_orphan(ino)?;
            let _ = crate::disk::remove_file(&inner.staging_path(ino));
        }
        for ino in staged {
            let path = inner.staging_path(ino);
            // Opened to see that it can be, then let go until it is wanted: hundreds of
            // recovered files must not hold a descriptor each while they wait for their ingest.
            match OpenOptions::new().read(true).write(true).open(&path).and_then(|f| f.metadata()) {
                Ok(md) => {
                    let size = md.len();
                    log::info!("recovering staged inode {ino} ({size} bytes)");
                    inner.staged.locked().insert(ino, Staged::new(None, size, 0));
                    inner.store.ingests().queued.fetch_add(1, Ordering::Relaxed);
                    let _ = tx.send(ino);
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    // Its staged bytes never reached the disk (the flag is set only once they
                    // have): the file is what its last commit made it, or empty if none.
                    let _ = store.update_inode(ino, |i| {
                        i.staged = false;
                        i.size = i.recipe.as_ref().map_or(0, |h| h.size);
                        Ok::<(), ()>(())
                    })?;
                }
                Err(err) => {
                    // Staged bytes that cannot be read now must not give way to older ones.
                    log::error!("staged inode {ino}: {}: {err}; not mounting", path.display());
                    return Err(StoreError::Io { path, err });
                }
            }
        }
        // Staging files that no inode claims are leftovers of an unlink during a crash.
        if let Ok(rd) = fs::read_dir(&inner.staging) {
            for e in rd.flatten() {
                let claimed = u64::from_str_radix(&e.file_name().to_string_lossy(), 16)
                    .map(|ino| inner.staged.locked().contains_key(&ino))
                    .unwrap_or(false);
                if !claimed {
                    let _ = crate::disk::remove_file(&e.path());
                }
            }
        }
        let worker_inner = inner.clone();
        let worker = std::thread::Builder::new()
            .name("warcfs-ingest".into())
            .spawn(move || ingest_loop(worker_inner, rx))
            .map_err(|err| StoreError::Io { path: "ingest thread".into(), err })?;
        // One worker a core (`rebuild_threads`): they rebuild the gzip members sequential
        // readers are about to reach and have the kernel read their pack ranges, and the pack
        // ranges around repeated lookups; plain chunks are decoded by the FUSE threads
        // straight into their replies.
        let ahead = ReadAhead::start(store.clone(), crate::store::rebuild_threads()).map_err(|err| StoreError::Io { path: "read-ahead threads".into(), err })?;
        // The index's tables, read in while the mount starts: a replay tool's first lookups
        // then wait for one cold read each, not for RocksDB's blocks too. Bounded: a huge
        // index is read in only as far as INDEX_WARM_BYTES (the kernel may drop it again),
        // and a chunk table into RocksDB's own cache only if it fits half of it.
        store.warm_index(INDEX_WARM_BYTES);
        // (A follower's search index is its writer's to keep.)
        let search = if store.is_follower() { None } else { Some(indexer::SearchIndexer::start(store.clone()).map_err(|err| StoreError::Io { path: "search thread".into(), err })?) };
        Ok(WarcFs { inner, tx: Some(tx), worker: Some(worker), ahead: Some(ahead), search, read_only })
    }

    fn queue(&self, ino: u64) {
        if let Some(tx) = &self.tx {
            self.inner.store.ingests().queued.fetch_add(1, Ordering::Relaxed);
            let _ = tx.send(ino);
        }
    }

    /// Finishes every queued ingest and stops the worker. Called on unmount.
    pub fn shutdown(&mut self) {
        if let Some(mut s) = self.search.take() {
            s.stop();
        }
        // Writers still open at unmount: their bytes are durable in staging; ingest them.
        let pending: Vec<u64> = {
            let mut map = self.inner.staged.locked();
            map.iter_mut().map(|(ino, s)| {
                s.writers = 0;
                *ino
            }).collect()
        };
        for ino in pending {
            let _ = self.inner.persist(ino);
            self.queue(ino);
        }
        self.tx.take();
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
        if let Some(mut a) = self.ahead.take() {
            a.stop();
        }
        if let Err(e) = self.inner.store.flush() {
            log::error!("sealing the open pack: {e}");
        }
        // On an object store: the packs go up before the daemon ends (bounded; what is left
        // waits in STORE/packs for the next process, which uploads it).
        if let Err(e) = self.inner.store.close_remote(crate::store::CLOSE_UPLOAD_WAIT) {
            log::error!("{e}");
        }
    }
}

impl Drop for WarcFs {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl Filesystem for WarcFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        let _ = config.set_max_write(1 << 20);
        // Gzip files are opened for direct I/O (see `open`), but only where the kernel
        // (6.6 and later) still lets them be mmap'ed then.
        // With the writeback cache the kernel keeps a regular file's size and times as it
        // last knew them and never takes them from here again: right while this process is
        // the only writer, wrong where another node rewrites a file (its new size would
        // never show, and reads would stop at the old one). There every attribute comes from
        // here, and the kernel drops what it cached of a file another node changed
        // (`FUSE_AUTO_INVAL_DATA`, and the follower's notices: `daemon::bucket_thread`).
        // A read-only mount has nothing to write back, and the cache would cost its readers
        // two round trips a file: with it the kernel sends FLUSH at every close whatever the
        // open said (`FOPEN_NOFLUSH` is ignored) and asks GETATTR at a `stat` after a read.
        // Without it a replay tool's open-seek-read-close is OPEN and READ (measured: the
        // history of docs/BENCHMARKS.md).
        let writeback = if self.inner.elsewhere || self.read_only { InitFlags::empty() } else { InitFlags::FUSE_WRITEBACK_CACHE };
        let wanted = writeback | InitFlags::FUSE_PARALLEL_DIROPS | InitFlags::FUSE_AUTO_INVAL_DATA | InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP;
        let _ = config.add_capabilities(wanted & config.capabilities());
        let direct_mmap = config.capabilities().contains(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP);
        self.inner.direct_mmap.store(direct_mmap, Ordering::Relaxed);
        if !direct_mmap {
            log::info!("this kernel cannot mmap direct-I/O files: gzip files go through the page cache");
        }
        let _ = config.set_time_granularity(Duration::from_nanos(1));
        Ok(())
    }

    fn destroy(&mut self) {
        self.shutdown();
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if name.len() > NAME_MAX {
            return reply.error(Errno::ENAMETOOLONG);
        }
        let virt = match (parent.0, name.as_bytes()) {
            (crate::store::ROOT_INO, CTL_NAME) => Some(CTL_INO),
            (CTL_INO, INDEX_NAME) => Some(INDEX_INO),
            (CTL_INO, WACZ_NAME) => Some(WACZ_INO),
            (CTL_INO, RESOLVED_NAME) => Some(RESOLVED_INO),
            (CTL_INO, RESOLVED_INDEX_NAME) => Some(RESOLVED_INDEX_INO),
            (CTL_INO, _) => return reply.error(Errno::ENOENT),
            (p, name) if is_view(p) => {
                return match self.inner.view_lookup(p, name) {
                    Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
                    Err(e) => reply.error(e),
                };
            }
            _ => None,
        };
        if let Some(v) = virt.filter(|&v| is_index(v)) {
            return self.with_index_attr(v, move |r| match r {
                Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
                Err(e) => reply.error(e),
            });
        }
        if let Some(v) = virt {
            let attr = if is_view(v) { self.inner.view_attr(v) } else { self.inner.virtual_attr(v) };
            return match attr {
                Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
                Err(e) => reply.error(e),
            };
        }
        let r = (|| {
            let ino = self.inner.store.lookup(parent.0, name.as_bytes()).map_err(|e| errno(&e))?.ok_or(Errno::ENOENT)?;
            let inode = self.inner.inode(ino)?;
            Ok::<_, Errno>(self.inner.attr(ino, &inode))
        })();
        match r {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if is_index(ino.0) {
            return self.with_index_attr(ino.0, move |r| match r {
                Ok(attr) => reply.attr(&Duration::ZERO, &attr),
                Err(e) => reply.error(e),
            });
        }
        if is_view(ino.0) {
            return match self.inner.view_attr(ino.0) {
                Ok(attr) => reply.attr(&TTL, &attr),
                Err(e) => reply.error(e),
            };
        }
        if is_virtual(ino.0) {
            return match self.inner.virtual_attr(ino.0) {
                Ok(attr) => reply.attr(&Duration::ZERO, &attr),
                Err(e) => reply.error(e),
            };
        }
        match self.inner.inode(ino.0) {
            Ok(inode) => reply.attr(&TTL, &self.inner.attr(ino.0, &inode)),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.op_setattr(ino, mode, uid, gid, size, atime, mtime, ctime, reply)
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.inner.inode(ino.0) {
            Ok(i) if i.kind == InodeKind::Symlink => reply.data(&i.target),
            Ok(_) => reply.error(Errno::EINVAL),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        self.op_mknod(req, parent, name, mode, umask, rdev, reply)
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        self.op_mkdir(req, parent, name, mode, umask, reply)
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.op_unlink(parent, name, reply)
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.op_rmdir(parent, name, reply)
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        self.op_symlink(req, parent, link_name, target, reply)
    }

    fn rename(&self, _req: &Request, parent: INodeNo, name: &OsStr, newparent: INodeNo, newname: &OsStr, flags: RenameFlags, reply: ReplyEmpty) {
        self.op_rename(parent, name, newparent, newname, flags, reply)
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        self.op_link(ino, newparent, newname, reply)
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.op_open(ino, flags, reply)
    }

    fn read(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, size: u32, _flags: OpenFlags, _lock: Option<LockOwner>, reply: ReplyData) {
        self.op_read(ino, fh, offset, size, reply)
    }

    fn write(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, data: &[u8], _wf: WriteFlags, _flags: OpenFlags, _lock: Option<LockOwner>, reply: ReplyWrite) {
        self.op_write(ino, offset, data, reply)
    }

    /// No ioctls. Every `open()` in Python and C stdio asks TCGETS (is it a terminal?): the
    /// answer must be cheap and quiet, not fuser's "not implemented" log line.
    fn ioctl(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _flags: IoctlFlags, _cmd: u32, _in: &[u8], _out: u32, reply: ReplyIoctl) {
        reply.error(Errno::ENOTTY);
    }

    fn flush(&self, _req: &Request, ino: INodeNo, fh: FileHandle, _lock: LockOwner, reply: ReplyEmpty) {
        self.op_flush(ino, fh, reply)
    }

    fn release(&self, _req: &Request, ino: INodeNo, fh: FileHandle, _flags: OpenFlags, _lock: Option<LockOwner>, _flush: bool, reply: ReplyEmpty) {
        self.op_release(ino, fh, reply)
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        self.op_fsync(ino, reply)
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.op_opendir(reply)
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.op_releasedir(fh, reply)
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, reply: ReplyDirectory) {
        self.op_readdir(ino, fh, offset, reply)
    }

    fn fsyncdir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        // Every namespace change is already a synced index batch.
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match nix::sys::statvfs::statvfs(self.inner.store.root()) {
            Ok(v) => reply.statfs(
                v.blocks(),
                v.blocks_free(),
                v.blocks_available(),
                v.files(),
                v.files_free(),
                v.block_size() as u32,
                255,
                v.fragment_size() as u32,
            ),
            Err(e) => reply.error(Errno::from_i32(e as i32)),
        }
    }

    fn setxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, value: &[u8], flags: i32, _position: u32, reply: ReplyEmpty) {
        self.op_setxattr(ino, name, value, flags, reply)
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.op_getxattr(ino, name, size, reply)
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.op_listxattr(ino, size, reply)
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.op_removexattr(ino, name, reply)
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        if is_virtual(ino.0) {
            return reply.ok();
        }
        // default_permissions: the kernel checks modes; this only answers existence.
        match self.inner.inode(ino.0) {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn create(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, flags: i32, reply: ReplyCreate) {
        self.op_create(req, parent, name, mode, umask, flags, reply)
    }
}
