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

pub mod control;
mod daemon;
mod guard;
mod quiet;
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

const TTL: Duration = Duration::from_secs(1);
/// Longest file name, as statfs reports it.
const NAME_MAX: usize = 255;

/// `/.warcfs/`: what the store knows, as read-only files. Not listed in the root (so `cp -r`
/// and rsync of a mount copy only the archive), reachable by name. Its inode numbers are
/// far above any the store hands out.
const CTL_NAME: &[u8] = b".warcfs";
const CTL_INO: u64 = u64::MAX - 1;
/// `/.warcfs/index.cdxj`: the CDXJ index of every WARC in the store (paths relative to the
/// mount's root), sorted, regenerated when the store has changed, at most once a second.
const INDEX_NAME: &[u8] = b"index.cdxj";
const INDEX_INO: u64 = u64::MAX - 2;

fn is_virtual(ino: u64) -> bool {
    ino == CTL_INO || ino == INDEX_INO
}

/// The error for making or replacing `name` in `parent` when that touches `/.warcfs`.
fn reserved(parent: u64, name: &[u8]) -> Option<Errno> {
    if parent == CTL_INO {
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
/// 1 MiB FUSE requests from the kernel's read-ahead, and writers from the writeback cache;
/// readers of direct-I/O (gzip) files send their own read sizes (`cat` 128 KiB).
const BLKSIZE: u32 = 4096;

/// A direct-I/O reader that jumped and has read less than this since, and now reads from
/// inside a member, is taken to be finishing one record (see `read`): its read stops at the
/// end of that member instead of rebuilding the ones after it.
const LOOKUP_RUN: u64 = 64 << 10;

/// A file whose current bytes live in the staging area.
struct Staged {
    file: Arc<File>,
    size: u64,
    /// Bumped by every change, so an ingest of older bytes is never committed.
    gen: u64,
    writers: u32,
    /// Changed since it was last made durable.
    dirty: bool,
    /// A sync of it failed. Linux may then have dropped the unwritten pages and the error
    /// with them, so a later sync would "succeed" without the bytes: every later fsync and
    /// close reports EIO instead, and it is not ingested (it stays dirty) until it is
    /// truncated to nothing; the next mount recovers what reached the disk.
    sync_failed: bool,
    /// Held while it is synced: a second fsync or close waits for the first one's outcome
    /// rather than reporting bytes durable that are still on their way.
    syncing: Arc<Mutex<()>>,
    /// Writes in flight: their bytes go to the file without the staged map locked (a write
    /// can wait long for the page cache), so an ingest must not commit while one is.
    busy: u32,
    /// Its ingest is committing (the map is not locked meanwhile): a change waits for the
    /// outcome, after which the file is stored (and staged again by the change) or not.
    committing: bool,
}

impl Staged {
    fn new(file: File, size: u64, writers: u32) -> Staged {
        Staged { file: Arc::new(file), size, gen: 0, writers, dirty: false, sync_failed: false, syncing: Arc::default(), busy: 0, committing: false }
    }
}

struct Handle {
    write: bool,
    /// Contents of a virtual file as of its open.
    snapshot: Option<(Arc<File>, u64)>,
    /// The recipe a read-only handle of a stored file reads (it cannot change while open:
    /// a writer stages the file first, and reads then go to staging).
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
}

/// An open directory's entries, "." and ".." first: (inode, kind, name).
type Listing = Vec<(u64, FileType, Vec<u8>)>;

/// The last generated `/.warcfs/index.cdxj`: store generation, when, and its bytes in an
/// unlinked file under `STORE/cache/` (on disk, not in memory; gone with its last handle).
type IndexFile = Option<(u64, std::time::Instant, Arc<File>, u64)>;

struct Inner {
    store: Arc<Store>,
    index_file: Mutex<IndexFile>,
    staging: PathBuf,
    staged: Mutex<HashMap<u64, Staged>>,
    /// One lock per inode being staged (its stored bytes copied into staging): the copy
    /// runs without `staged` locked, so other files go on; the same file's next change
    /// waits for it.
    staging_gates: Mutex<HashMap<u64, Arc<Mutex<()>>>>,
    /// Open handles per inode (readers and writers), for orphans.
    opens: Mutex<HashMap<u64, u32>>,
    handles: Mutex<HashMap<u64, Handle>>,
    /// The listing of each open directory handle, read once (at the first `readdir`, and
    /// again at a rewind to offset 0): listing a directory of n entries costs O(n), not a
    /// full read of it for every reply.
    dirs: Mutex<HashMap<u64, Arc<Listing>>>,
    next_fh: AtomicU64,
    /// The kernel allows mmap of files opened for direct I/O (see `open`).
    direct_mmap: std::sync::atomic::AtomicBool,
}

pub struct WarcFs {
    inner: Arc<Inner>,
    tx: Option<Sender<u64>>,
    worker: Option<JoinHandle<()>>,
    /// Rebuilds the gzip members sequential readers of stored files will read next.
    ahead: Option<ReadAhead>,
}

fn errno(e: &StoreError) -> Errno {
    match e {
        StoreError::NotFound(_) | StoreError::NoStore(_) => Errno::ENOENT,
        StoreError::NotADirectory(_) => Errno::ENOTDIR,
        StoreError::IsADirectory(_) => Errno::EISDIR,
        StoreError::NotEmpty(_) => Errno::ENOTEMPTY,
        StoreError::Exists(_) => Errno::EEXIST,
        StoreError::InvalidPath(_) => Errno::EINVAL,
        StoreError::Io { err: source, .. } => {
            match quiet::flood_kind(source.raw_os_error()) {
                Some(kind) => quiet::error(("store", kind), e),
                None => log::error!("{e}"),
            }
            Errno::from_i32(source.raw_os_error().unwrap_or(libc::EIO))
        }
        _ => {
            log::error!("{e}");
            Errno::EIO
        }
    }
}

/// Answers an xattr read: the size when asked for it, the bytes if they fit, else ERANGE.
fn reply_xattr(reply: ReplyXattr, size: u32, value: &[u8]) {
    if size == 0 {
        reply.size(value.len() as u32)
    } else if value.len() <= size as usize {
        reply.data(value)
    } else {
        reply.error(Errno::ERANGE)
    }
}

/// Answers an xattr change made through `Store::update_inode`.
fn reply_update(reply: ReplyEmpty, r: Result<Result<Inode, Errno>, StoreError>) {
    match r {
        Ok(Ok(_)) => reply.ok(),
        Ok(Err(e)) => reply.error(e),
        Err(e) => reply.error(errno(&e)),
    }
}

fn io_errno(e: &io::Error) -> Errno {
    match quiet::flood_kind(e.raw_os_error()) {
        Some(kind) => quiet::error(("staging", kind), format_args!("staging I/O: {e}")),
        None => log::error!("staging I/O: {e}"),
    }
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
    /// The staged map, locked once no commit of `ino` is in progress: a commit decides
    /// whether the file is still staged, so whatever reads its staged state to change the
    /// file or its inode waits for it (other files are not held up: the map is free
    /// meanwhile).
    fn settled(&self, ino: u64) -> MutexGuard<'_, HashMap<u64, Staged>> {
        let mut map = self.staged.locked();
        while map.get(&ino).is_some_and(|s| s.committing) {
            drop(map);
            std::thread::sleep(Duration::from_millis(1));
            map = self.staged.locked();
        }
        map
    }

    fn staging_path(&self, ino: u64) -> PathBuf {
        self.staging.join(format!("{ino:016x}"))
    }

    fn attr(&self, ino: u64, inode: &Inode) -> FileAttr {
        let size = self.staged.locked().get(&ino).map(|s| s.size).unwrap_or(inode.size);
        FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: to_system(inode.atime),
            mtime: to_system(inode.mtime),
            ctime: to_system(inode.ctime),
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

    /// Drops a file's staging copy: it was unlinked and nothing has it open.
    fn discard_staged(&self, ino: u64) {
        self.staged.locked().remove(&ino);
        let _ = fs::remove_file(self.staging_path(ino));
    }

    /// The current `/.warcfs/index.cdxj`.
    fn index_file(&self) -> Result<(Arc<File>, u64), Errno> {
        let mut cache = self.index_file.locked();
        let gen = self.store.generation();
        if let Some((g, at, file, len)) = cache.as_ref() {
            if *g == gen || at.elapsed() < Duration::from_secs(1) {
                return Ok((file.clone(), *len));
            }
        }
        let (file, len) = self.build_index_file().map_err(|e| {
            log::error!("building /.warcfs/index.cdxj: {e}");
            Errno::EIO
        })?;
        let file = Arc::new(file);
        *cache = Some((gen, std::time::Instant::now(), file.clone(), len));
        Ok((file, len))
    }

    /// Writes the sorted CDXJ of every stored WARC (files still being written are left out
    /// until stored) into an unlinked file, sorting in bounded memory.
    fn build_index_file(&self) -> std::io::Result<(File, u64)> {
        let dir = self.store.root().join("cache");
        fs::create_dir_all(&dir)?;
        let mut sorter = crate::extsort::LineSorter::new(&dir.join("runs"), crate::cli::INDEX_RUN_BYTES)?;
        self.store.cdxj_each("/", crate::store::StagedFiles::Skip, &mut |l| sorter.push(l)).map_err(std::io::Error::other)?;
        let path = dir.join("index.cdxj.building");
        let mut w = BufWriter::new(File::create(&path)?);
        let len = sorter.finish_into(&mut w)?;
        w.flush()?;
        drop(w);
        let file = File::open(&path)?;
        fs::remove_file(&path)?;
        Ok((file, len))
    }

    fn virtual_attr(&self, ino: u64) -> Result<FileAttr, Errno> {
        let root = self.inode(crate::store::ROOT_INO)?;
        let mut attr = self.attr(ino, &root);
        attr.ino = INodeNo(ino);
        if ino == INDEX_INO {
            attr.kind = FileType::RegularFile;
            attr.perm = 0o444;
            attr.nlink = 1;
            attr.size = self.index_file()?.1;
            attr.blocks = attr.size.div_ceil(512);
        } else {
            attr.perm = 0o555;
            attr.nlink = 2;
            attr.size = 0;
        }
        Ok(attr)
    }

    fn inode(&self, ino: u64) -> Result<Inode, Errno> {
        self.store.inode(ino).map_err(|e| errno(&e))?.ok_or(Errno::ENOENT)
    }

    fn is_open(&self, ino: u64) -> bool {
        self.opens.locked().get(&ino).copied().unwrap_or(0) > 0
    }

    /// Moves a file's bytes to the staging area (if they are not there yet), so it can be
    /// written. `truncate` skips copying the old bytes. Returns the staged map still locked,
    /// with the file in it: the background ingest may finish and unstage the file as soon as
    /// the lock is let go, so the caller's change must be made under this same lock.
    fn ensure_staged(&self, ino: u64, truncate: bool) -> Result<MutexGuard<'_, HashMap<u64, Staged>>, Errno> {
        if let Some(map) = self.if_staged(ino, truncate)? {
            return Ok(map);
        }
        // Copied with only this file's gate held: a copy of a large file must not stop the
        // requests of every other file. Until it is in the map, the file reads as stored.
        let gate = self.staging_gates.locked().entry(ino).or_default().clone();
        let staged = (|| {
            let _one_stager = gate.locked();
            if let Some(map) = self.if_staged(ino, truncate)? {
                return Ok(map);
            }
            let (file, size) = self.stage_copy(ino, truncate)?;
            let mut map = self.settled(ino);
            // Removed while it was copied (an unlink with no handle open drops the inode
            // and its staging file at once): nothing to stage any more.
            if !self.store.inode(ino).is_ok_and(|i| i.is_some()) {
                return Err(Errno::ENOENT);
            }
            map.insert(ino, Staged::new(file, size, 0));
            Ok(map)
        })();
        let mut gates = self.staging_gates.locked();
        if gates.get(&ino).is_some_and(|g| Arc::strong_count(g) == 2) {
            gates.remove(&ino);
        }
        staged
    }

    /// The staged map, locked, if `ino` is in it (emptied first if `truncate`).
    fn if_staged(&self, ino: u64, truncate: bool) -> Result<Option<MutexGuard<'_, HashMap<u64, Staged>>>, Errno> {
        let mut map = self.settled(ino);
        let Some(s) = map.get_mut(&ino) else { return Ok(None) };
        if truncate && s.size != 0 {
            s.file.set_len(0).map_err(|e| io_errno(&e))?;
            s.size = 0;
            s.gen += 1;
            s.dirty = true;
            // The bytes a failed sync may have lost are gone anyway.
            s.sync_failed = false;
        }
        Ok(Some(map))
    }

    /// Copies a stored file's bytes (none if `truncate`) into its staging file, durably,
    /// and flags it staged in the index; returns the file and its size.
    fn stage_copy(&self, ino: u64, truncate: bool) -> Result<(File, u64), Errno> {
        let inode = self.inode(ino)?;
        match inode.kind {
            InodeKind::File => {}
            InodeKind::Dir => return Err(Errno::EISDIR),
            _ => return Err(Errno::EINVAL),
        }
        let path = self.staging_path(ino);
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).map_err(|e| io_errno(&e))?;
        let mut size = 0;
        if !truncate {
            if let Some(head) = &inode.recipe {
                if let Err(e) = self.store.space().take(head.size) {
                    let _ = fs::remove_file(&path);
                    return Err(io_errno(&e));
                }
                let mut w = BufWriter::with_capacity(1 << 20, &file);
                size = self.store.copy_to(head, &mut w).map_err(|e| errno(&e))?;
                w.flush().map_err(|e| io_errno(&e))?;
            }
        }
        // The staged flag may only point at complete bytes, under a name that survives a
        // power loss: the file's bytes, then the staging directory's new entry.
        file.sync_data().map_err(|e| io_errno(&e))?;
        crate::pack::sync_dir(&self.staging).map_err(|e| io_errno(&e))?;
        crate::failpoint::crash_at("staged_created");
        self.set_staged(ino, size)?;
        Ok((file, size))
    }

    /// Makes a staged file's bytes durable and records its size: what `close` and `fsync`
    /// promise.
    fn persist(&self, ino: u64) -> Result<(), Errno> {
        let Some(syncing) = self.staged.locked().get(&ino).map(|s| s.syncing.clone()) else { return Ok(()) };
        let _one_at_a_time = syncing.locked();
        let (file, size) = {
            let mut map = self.staged.locked();
            let Some(s) = map.get_mut(&ino) else { return Ok(()) };
            if s.sync_failed {
                return Err(Errno::EIO);
            }
            if !s.dirty {
                return Ok(());
            }
            s.dirty = false;
            (s.file.clone(), s.size)
        };
        if let Err(e) = crate::failpoint::io_error("persist_sync").and_then(|()| file.sync_data()) {
            log::error!("sync of staged inode {ino} failed: {e}; its fsyncs and closes get EIO until it is truncated, and the next mount recovers what reached the disk");
            if let Some(s) = self.staged.locked().get_mut(&ino) {
                s.dirty = true;
                s.sync_failed = true;
            }
            return Err(io_errno(&e));
        }
        crate::failpoint::crash_at("staged_synced");
        match self.set_staged(ino, size) {
            // Unlinked meanwhile: nothing to record.
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => {
                // The bytes are on the disk but not recorded as staged: the next fsync or
                // close records them again.
                if let Some(s) = self.staged.locked().get_mut(&ino) {
                    s.dirty = true;
                }
                Err(e)
            }
        }
    }

    /// Records in the index that a file's bytes (of `size`) are in staging. Only these two
    /// fields change: a concurrent commit of other attributes is never overwritten.
    fn set_staged(&self, ino: u64, size: u64) -> Result<(), Errno> {
        match self.store.update_inode(ino, |i| {
            i.staged = true;
            i.size = size;
            Ok::<(), Errno>(())
        }) {
            Ok(r) => r.map(|_| ()),
            Err(e) => Err(errno(&e)),
        }
    }

    /// Ingests a staged file whose writers are all gone; called by the worker. An error is
    /// a failure to store it (a full disk, say): it stays staged, and the worker tries again.
    fn ingest(&self, ino: u64) -> Result<(), StoreError> {
        let (file, gen) = {
            let map = self.staged.locked();
            match map.get(&ino) {
                Some(s) if s.writers == 0 => (s.file.clone(), s.gen),
                _ => return Ok(()),
            }
        };
        // Read a window at a time (see `Source for File`); a racing change bumps `gen`, and
        // then this ingest is dropped.
        let prepared = match self.store.prepare(&*file) {
            Ok(p) => p,
            // Unless the file changed meanwhile (its new bytes are queued again).
            Err(e) if self.staged.locked().get(&ino).is_some_and(|s| s.gen == gen) => return Err(e),
            Err(_) => return Ok(()),
        };
        {
            let mut map = self.staged.locked();
            match map.get_mut(&ino) {
                Some(s) if s.gen == gen && s.writers == 0 && !s.dirty && s.busy == 0 && !s.committing => s.committing = true,
                _ => return Ok(()),
            }
        }
        // Committed without the staged map locked (a commit syncs the log and the index):
        // changes to this file wait for it (`committing`), other files go on.
        let committed = prepared.commit_into(ino);
        let mut map = self.staged.locked();
        match committed {
            Ok(rep) => {
                map.remove(&ino);
                let _ = fs::remove_file(self.staging_path(ino));
                if let Some(rep) = rep {
                    log::info!("ingested inode {ino}: {} bytes, {} new bytes stored", rep.size, rep.new_bytes);
                }
            }
            Err(e) => {
                if let Some(s) = map.get_mut(&ino) {
                    s.committing = false;
                }
                return Err(e);
            }
        }
        Ok(())
    }
}

impl WarcFs {
    /// Wraps an open store; recovers staged files and orphans left by a crash.
    pub fn new(store: Arc<Store>) -> Result<WarcFs, StoreError> {
        let staging = store.root().join("staging");
        fs::create_dir_all(&staging).map_err(|err| StoreError::Io { path: staging.clone(), err })?;
        let inner = Arc::new(Inner {
            store: store.clone(),
            index_file: Mutex::new(None),
            staging,
            staged: Mutex::new(HashMap::new()),
            staging_gates: Mutex::new(HashMap::new()),
            opens: Mutex::new(HashMap::new()),
            handles: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            direct_mmap: std::sync::atomic::AtomicBool::new(false),
        });
        let (tx, rx) = crossbeam_channel::unbounded::<u64>();
        let (orphans, staged) = store.orphans_and_staged()?;
        for ino in orphans {
            log::info!("dropping orphan inode {ino} left by a crash");
            store.drop_orphan(ino)?;
            let _ = fs::remove_file(inner.staging_path(ino));
        }
        for ino in staged {
            let path = inner.staging_path(ino);
            match OpenOptions::new().read(true).write(true).open(&path) {
                Ok(file) => {
                    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
                    log::info!("recovering staged inode {ino} ({size} bytes)");
                    inner.staged.locked().insert(ino, Staged::new(file, size, 0));
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
                    let _ = fs::remove_file(e.path());
                }
            }
        }
        let worker_inner = inner.clone();
        let worker = std::thread::Builder::new()
            .name("warcfs-ingest".into())
            .spawn(move || ingest_loop(worker_inner, rx))
            .map_err(|err| StoreError::Io { path: "ingest thread".into(), err })?;
        // Two workers, one per core: they rebuild the gzip members sequential readers are
        // about to reach and have the kernel read their pack ranges; plain chunks are decoded
        // by the FUSE threads straight into their replies.
        let ahead = ReadAhead::start(store.clone(), 2).map_err(|err| StoreError::Io { path: "read-ahead threads".into(), err })?;
        Ok(WarcFs { inner, tx: Some(tx), worker: Some(worker), ahead: Some(ahead) })
    }

    fn queue(&self, ino: u64) {
        if let Some(tx) = &self.tx {
            self.inner.store.ingests().queued.fetch_add(1, Ordering::Relaxed);
            let _ = tx.send(ino);
        }
    }

    /// Finishes every queued ingest and stops the worker. Called on unmount.
    pub fn shutdown(&mut self) {
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
    }
}

impl Drop for WarcFs {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Runs `f` with a buffer of at least `len` bytes, one per FUSE thread and reused: a fresh
/// 1 MiB buffer per read request costs page faults and zeroing comparable to the copy itself.
fn with_reply_buffer<R>(len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    thread_local! {
        static REPLY: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    REPLY.with(|cell| {
        let mut buf = cell.borrow_mut();
        if buf.len() < len {
            buf.resize(len, 0);
        }
        f(&mut buf[..len])
    })
}

/// The first wait before a failed ingest is tried again, and the longest.
const RETRY_FIRST: Duration = Duration::from_secs(2);
const RETRY_MAX: Duration = Duration::from_secs(300);

fn ingest_loop(inner: Arc<Inner>, rx: Receiver<u64>) {
    // Failed ingests (a full disk, an unreadable staged file): when each is tried again,
    // and how long it waited last. Not counted in `queued`: an unmount does not wait for
    // them, and the next mount recovers them from staging.
    let mut retries: Vec<(Instant, u64, Duration)> = Vec::new();
    loop {
        let next_due = retries.iter().map(|r| r.0).min();
        let got = match next_due {
            Some(due) => rx.recv_timeout(due.saturating_duration_since(Instant::now())),
            None => rx.recv().map_err(|_| crossbeam_channel::RecvTimeoutError::Disconnected),
        };
        let (ino, waited, queued) = match got {
            Ok(ino) => (ino, None, true),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                let i = retries.iter().enumerate().min_by_key(|(_, r)| r.0).map(|(i, _)| i).expect("a retry is due");
                let (_, ino, waited) = retries.swap_remove(i);
                (ino, Some(waited), false)
            }
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
        };
        // A bug met while committing one file must not stop the ingest of all later ones
        // (the ingest itself already turns a panic into an error, see `Store::prepare`).
        let r = crate::store::bug_as_error("committing an ingest", || inner.ingest(ino));
        if let Err(e) = r {
            let wait = waited.map_or(RETRY_FIRST, |w| (w * 2).min(RETRY_MAX));
            let msg = format!("ingest of inode {ino} failed, it stays staged and is tried again in {} s: {e}", wait.as_secs());
            match &e {
                StoreError::Io { err, .. } if quiet::flood_kind(err.raw_os_error()).is_some() => quiet::error(("ingest", quiet::flood_kind(err.raw_os_error()).expect("checked")), msg),
                _ => log::error!("{msg}"),
            }
            retries.retain(|r| r.1 != ino);
            retries.push((Instant::now() + wait, ino, wait));
            inner.store.ingests().failed.fetch_add(1, Ordering::Relaxed);
        }
        inner.store.ingests().retrying.store(retries.len() as u64, Ordering::Relaxed);
        if queued {
            inner.store.ingests().queued.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Filesystem for WarcFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        let _ = config.set_max_write(1 << 20);
        // Gzip files are opened for direct I/O (see `open`), but only where the kernel
        // (6.6 and later) still lets them be mmap'ed then.
        let wanted = InitFlags::FUSE_WRITEBACK_CACHE
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_AUTO_INVAL_DATA
            | InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP;
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
            (CTL_INO, _) => return reply.error(Errno::ENOENT),
            _ => None,
        };
        if let Some(v) = virt {
            return match self.inner.virtual_attr(v) {
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
        if is_virtual(ino.0) {
            return reply.error(Errno::EROFS);
        }
        let inner = &self.inner;
        let ino = ino.0;
        let r = (|| {
            if let Some(size) = size {
                let mut map = inner.ensure_staged(ino, size == 0)?;
                let s = map.get_mut(&ino).ok_or(Errno::EIO)?;
                s.file.set_len(size).map_err(|e| io_errno(&e))?;
                s.size = size;
                s.gen += 1;
                s.dirty = true;
            }
            let now = Timestamp::now();
            // Hold the staged map so its size cannot change under this update; only the
            // attributes asked for change. A commit in progress is waited for: its outcome
            // says whether the file is still staged.
            let map = inner.settled(ino);
            let staged_size = map.get(&ino).map(|s| s.size);
            let updated = inner.store.update_inode(ino, |inode| {
            if let Some(m) = mode {
                inode.mode = m & 0o7777;
            }
            if let Some(u) = uid {
                inode.uid = u;
            }
            if let Some(g) = gid {
                inode.gid = g;
            }
            if uid.is_some() || gid.is_some() {
                // chown clears setuid/setgid, as the kernel expects of filesystems.
                if inode.kind == InodeKind::File {
                    inode.mode &= !0o6000;
                }
            }
            if let Some(t) = atime {
                inode.atime = time_or_now(t);
            }
            if let Some(t) = mtime {
                inode.mtime = time_or_now(t);
            } else if size.is_some() {
                inode.mtime = now;
            }
            inode.ctime = ctime.map(Timestamp::from).unwrap_or(now);
            if let Some(size) = staged_size {
                inode.size = size;
                inode.staged = true;
            }
            Ok::<(), Errno>(())
            });
            drop(map);
            updated.map_err(|e| errno(&e))?
        })();
        match r {
            Ok(inode) => {
                if size.is_some() {
                    // truncate(2) by path opens no handle: nothing else would ingest it.
                    let idle = inner.staged.locked().get(&ino).is_some_and(|s| s.writers == 0);
                    if idle {
                        let _ = inner.persist(ino);
                        self.queue(ino);
                    }
                }
                reply.attr(&TTL, &inner.attr(ino, &inode))
            }
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.inner.inode(ino.0) {
            Ok(i) if i.kind == InodeKind::Symlink => reply.data(&i.target),
            Ok(_) => reply.error(Errno::EINVAL),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        let kind = match mode & libc::S_IFMT {
            libc::S_IFIFO => InodeKind::Fifo,
            libc::S_IFSOCK => InodeKind::Socket,
            libc::S_IFCHR => InodeKind::CharDevice,
            libc::S_IFBLK => InodeKind::BlockDevice,
            // A regular file made by mknod: an empty stored file.
            libc::S_IFREG | 0 => InodeKind::File,
            _ => return reply.error(Errno::EINVAL),
        };
        let mut inode = Inode::new(kind, mode & !umask & 0o7777);
        inode.uid = req.uid();
        inode.gid = req.gid();
        if matches!(kind, InodeKind::CharDevice | InodeKind::BlockDevice) {
            inode.rdev = rdev;
        }
        self.new_node(parent.0, name, inode, reply);
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let mut inode = Inode::new(InodeKind::Dir, mode & !umask & 0o7777);
        inode.uid = req.uid();
        inode.gid = req.gid();
        self.new_node(parent.0, name, inode, reply);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if let Some(e) = reserved(parent.0, name.as_bytes()) {
            return reply.error(if e == Errno::EEXIST { Errno::EISDIR } else { e });
        }
        let inner = &self.inner;
        match inner.store.unlink_entry(parent.0, name.as_bytes(), false, &|ino| inner.is_open(ino)) {
            Ok(ino) => {
                if !inner.is_open(ino) && inner.store.inode(ino).ok().flatten().is_none() {
                    inner.discard_staged(ino);
                }
                reply.ok()
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if let Some(e) = reserved(parent.0, name.as_bytes()) {
            return reply.error(if e == Errno::EEXIST { Errno::EBUSY } else { e });
        }
        match self.inner.store.unlink_entry(parent.0, name.as_bytes(), true, &|_| false) {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let mut inode = Inode::new(InodeKind::Symlink, 0o777);
        inode.uid = req.uid();
        inode.gid = req.gid();
        inode.target = target.as_os_str().as_bytes().to_vec();
        inode.size = inode.target.len() as u64;
        self.new_node(parent.0, link_name, inode, reply);
    }

    fn rename(&self, _req: &Request, parent: INodeNo, name: &OsStr, newparent: INodeNo, newname: &OsStr, flags: RenameFlags, reply: ReplyEmpty) {
        if flags.contains(RenameFlags::RENAME_EXCHANGE) || flags.contains(RenameFlags::RENAME_WHITEOUT) {
            return reply.error(Errno::EINVAL);
        }
        if newname.len() > NAME_MAX {
            return reply.error(Errno::ENAMETOOLONG);
        }
        if let Some(e) = reserved(parent.0, name.as_bytes()).or(reserved(newparent.0, newname.as_bytes())) {
            return reply.error(if e == Errno::EEXIST { Errno::EBUSY } else { e });
        }
        let inner = &self.inner;
        let noreplace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        let target = inner.store.lookup(newparent.0, newname.as_bytes()).ok().flatten();
        match inner.store.rename(parent.0, name.as_bytes(), newparent.0, newname.as_bytes(), noreplace, &|ino| inner.is_open(ino)) {
            Ok(()) => {
                if let Some(t) = target {
                    if !inner.is_open(t) && inner.store.inode(t).ok().flatten().is_none() {
                        inner.discard_staged(t);
                    }
                }
                reply.ok()
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        if let Some(e) = reserved(newparent.0, newname.as_bytes()).or(is_virtual(ino.0).then_some(Errno::EPERM)) {
            return reply.error(e);
        }
        if newname.len() > NAME_MAX {
            return reply.error(Errno::ENAMETOOLONG);
        }
        match self.inner.store.link(ino.0, newparent.0, newname.as_bytes()) {
            Ok(inode) => reply.entry(&TTL, &self.inner.attr(ino.0, &inode), Generation(0)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if ino.0 == INDEX_INO {
            if flags.acc_mode() != OpenAccMode::O_RDONLY || flags.0 & libc::O_TRUNC != 0 {
                return reply.error(Errno::EROFS);
            }
            let bytes = match self.inner.index_file() {
                Ok(b) => b,
                Err(e) => return reply.error(e),
            };
            let fh = self.inner.next_fh.fetch_add(1, Ordering::Relaxed);
            self.inner.handles.locked().insert(fh, Handle { write: false, head: None, snapshot: Some(bytes), next: 0, run: 0, jumped: false, direct: true, rebuilds_members: None });
            // Its size changes with the store: no page cache, every read comes here.
            return reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO);
        }
        let inner = &self.inner;
        let ino = ino.0;
        let trunc = flags.0 & libc::O_TRUNC != 0;
        // O_RDONLY|O_TRUNC truncates on Linux: that handle changes the file like a writer.
        let write = flags.acc_mode() != OpenAccMode::O_RDONLY || trunc;
        let r = (|| {
            let inode = inner.inode(ino)?;
            if inode.kind == InodeKind::Dir && write {
                return Err(Errno::EISDIR);
            }
            if write || trunc {
                let mut map = inner.ensure_staged(ino, trunc)?;
                if write {
                    map.get_mut(&ino).ok_or(Errno::EIO)?.writers += 1;
                }
            }
            Ok::<_, Errno>((inode.recipe, inode.staged))
        })();
        let (recipe, was_staged) = match r {
            Ok(r) => r,
            Err(e) => return reply.error(e),
        };
        let staged = inner.staged.locked().contains_key(&ino);
        let keep = !write && !staged;
        // A file being written (or ingested) gets a new recipe when its ingest commits: a
        // handle opened meanwhile must not keep the old one, or it would read the old bytes
        // once the file leaves staging. Without one, each read looks the recipe up.
        let recipe = if write || staged || was_staged { None } else { recipe };
        // Through the page cache, a read of one gzip member (a record at its CDX offset) grows
        // to whole pages, which hold the ends of its neighbours: each of them would have to be
        // rebuilt too. Direct I/O hands us the reader's exact range instead. (Decided before
        // the handle is counted: a failure in here must not leave an open the kernel will
        // never release.)
        let rebuilds_members = recipe.as_ref().map(|h| {
            crate::failpoint::panic_at("open");
            inner.store.rebuilds_members(h)
        });
        let direct = keep && inner.direct_mmap.load(Ordering::Relaxed) && rebuilds_members == Some(true);
        let fh = self.register(ino, write, recipe, direct, rebuilds_members);
        // A reader has nothing to persist at close. (With the writeback cache the kernel sends
        // FLUSH anyway: measured, it ignores this flag then; it matters only without it.)
        let noflush = if write { FopenFlags::empty() } else { FopenFlags::FOPEN_NOFLUSH };
        let flags = noflush | match (keep, direct) {
            (false, _) => FopenFlags::empty(),
            (true, true) => FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_KEEP_CACHE,
            (true, false) => FopenFlags::FOPEN_KEEP_CACHE,
        };
        reply.opened(FileHandle(fh), flags);
    }

    fn read(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, size: u32, _flags: OpenFlags, _lock: Option<LockOwner>, reply: ReplyData) {
        if ino.0 == INDEX_INO {
            let snap = self.inner.handles.locked().get(&fh.0).and_then(|h| h.snapshot.clone());
            let Some((file, len)) = snap else { return reply.error(Errno::EBADF) };
            let n = len.saturating_sub(offset).min(size as u64) as usize;
            return with_reply_buffer(n, |buf| match file.read_exact_at(&mut buf[..n], offset) {
                Ok(()) => reply.data(&buf[..n]),
                Err(e) => {
                    log::error!("reading /.warcfs/index.cdxj at {offset}: {e}");
                    reply.error(Errno::EIO)
                }
            });
        }
        let inner = &self.inner;
        let ino = ino.0;
        let staged = inner.staged.locked().get(&ino).map(|s| (s.file.clone(), s.size));
        if let Some((file, len)) = staged {
            let n = (len.saturating_sub(offset)).min(size as u64) as usize;
            return with_reply_buffer(n, |buf| {
                let mut done = 0;
                while done < n {
                    match file.read_at(&mut buf[done..], offset + done as u64) {
                        Ok(0) => break,
                        Ok(k) => done += k,
                        Err(e) => return reply.error(io_errno(&e)),
                    }
                }
                reply.data(&buf[..done]);
            });
        }
        // The handle's recipe saves an index lookup per read; if the file was rewritten
        // since (its old recipe is gone), the current one answers.
        let (cached, sequential, run, jumped, direct, rebuilds_members) = {
            let handles = inner.handles.locked();
            // (Inside the lock: a test makes this panic to show the lock outlives it.)
            crate::failpoint::panic_at("read");
            match handles.get(&fh.0) {
                Some(h) => (h.head.clone(), h.next == offset, h.run, h.jumped, h.direct, h.rebuilds_members),
                None => (None, false, 0, false, false, None),
            }
        };
        let fresh = || match inner.store.head(ino) {
            Ok(h) => Ok(Arc::new(h.unwrap_or_default())),
            Err(e) => Err(errno(&e)),
        };
        let mut head = match cached {
            Some(h) => h,
            None => match fresh() {
                Ok(h) => h,
                Err(e) => return reply.error(e),
            },
        };
        with_reply_buffer(size as usize, |buf| {
            let mut result = Err(Errno::EIO);
            for attempt in 0..2 {
                let n = (head.size.saturating_sub(offset)).min(size as u64) as usize;
                // Direct I/O (gzip files) lets a read come back short, and a reader that is
                // not reading straight through is likely after one record: give it that. So
                // is one that jumped, has read under LOOKUP_RUN since, and now reads the rest
                // of a member: a buffered reader (Python's, stdio) takes a record larger than
                // its buffer in two reads, and the second one must not rebuild the members
                // after the record (a deflate each, as long as the record's own). A reader
                // that goes on from a member's end, or that started at 0, is reading on and
                // gets it all. Page-aligned requests may come from the page cache (mmap is
                // allowed on these files), where a short read would read as the end of the
                // file: they always get everything.
                let finishing = sequential && jumped && run < LOOKUP_RUN;
                let lookup =
                    direct && !offset.is_multiple_of(4096) && (!sequential || (finishing && inner.store.inside_member(&head, offset)));
                let r = if lookup {
                    inner.store.read_some(&head, offset, &mut buf[..n])
                } else {
                    inner.store.read_at(&head, offset, &mut buf[..n])
                };
                match r {
                    Ok(k) => {
                        result = Ok(k);
                        break;
                    }
                    // A member that does not rebuild to its original bytes is this file's
                    // problem, not the store's: name the file (its inode) in the log.
                    Err(e @ StoreError::Member { .. }) => {
                        log::error!("read of inode {ino} at offset {offset}: {e}");
                        result = Err(Errno::EIO);
                        break;
                    }
                    Err(e) if attempt == 0 => match fresh() {
                        Ok(h) => head = h,
                        Err(_) => {
                            result = Err(errno(&e));
                            break;
                        }
                    },
                    Err(e) => result = Err(errno(&e)),
                }
            }
            match result {
                Ok(k) => {
                    // Before the reply: the reader's next read may reach the other FUSE
                    // thread as soon as this one is answered.
                    let run = match inner.handles.locked().get_mut(&fh.0) {
                        Some(h) => {
                            h.run = if sequential { h.run + k as u64 } else { 0 };
                            h.jumped |= !sequential;
                            h.next = offset + k as u64;
                            h.run
                        }
                        None => 0,
                    };
                    reply.data(&buf[..k]);
                    if let Some(a) = &self.ahead {
                        a.reader_at(fh.0, head, offset + k as u64, run, rebuilds_members);
                    }
                }
                Err(e) => reply.error(e),
            }
        });
    }

    fn write(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, data: &[u8], _wf: WriteFlags, _flags: OpenFlags, _lock: Option<LockOwner>, reply: ReplyWrite) {
        let inner = &self.inner;
        let ino = ino.0;
        // Writeback-cache writes can arrive after the writer closed: stage again if needed.
        let file = {
            let mut map = match inner.ensure_staged(ino, false) {
                Ok(map) => map,
                Err(e) => return reply.error(e),
            };
            let Some(s) = map.get_mut(&ino) else { return reply.error(Errno::EIO) };
            s.gen += 1;
            s.dirty = true;
            s.busy += 1;
            s.file.clone()
        };
        // The bytes go in without the staged map locked: a write may wait long for the page
        // cache (dirty throttling), and every other file's requests need the map.
        // Data stops at the disk's floor of free space (see `store::Space`).
        let written = inner.store.space().take(data.len() as u64).and_then(|()| file.write_all_at(data, offset));
        {
            let mut map = inner.staged.locked();
            if let Some(s) = map.get_mut(&ino) {
                s.busy -= 1;
                // Bumped again: an ingest that read the file meanwhile must not commit.
                s.gen += 1;
                s.dirty = true;
                if written.is_ok() {
                    s.size = s.size.max(offset + data.len() as u64);
                }
            }
        }
        match written {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(io_errno(&e)),
        }
    }

    /// No ioctls. Every `open()` in Python and C stdio asks TCGETS (is it a terminal?): the
    /// answer must be cheap and quiet, not fuser's "not implemented" log line.
    fn ioctl(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _flags: IoctlFlags, _cmd: u32, _in: &[u8], _out: u32, reply: ReplyIoctl) {
        reply.error(Errno::ENOTTY);
    }

    fn flush(&self, _req: &Request, ino: INodeNo, fh: FileHandle, _lock: LockOwner, reply: ReplyEmpty) {
        let write = self.inner.handles.locked().get(&fh.0).is_some_and(|h| h.write);
        if write {
            if let Err(e) = self.inner.persist(ino.0) {
                return reply.error(e);
            }
        }
        reply.ok();
    }

    fn release(&self, _req: &Request, ino: INodeNo, fh: FileHandle, _flags: OpenFlags, _lock: Option<LockOwner>, _flush: bool, reply: ReplyEmpty) {
        if is_virtual(ino.0) {
            self.inner.handles.locked().remove(&fh.0);
            return reply.ok();
        }
        let inner = &self.inner;
        let ino = ino.0;
        let handle = inner.handles.locked().remove(&fh.0);
        if let Some(a) = &self.ahead {
            a.forget(fh.0);
        }
        let last_open = {
            let mut opens = inner.opens.locked();
            let n = opens.entry(ino).or_insert(1);
            *n = n.saturating_sub(1);
            let last = *n == 0;
            if last {
                opens.remove(&ino);
            }
            last
        };
        let mut result = Ok(());
        if handle.is_some_and(|h| h.write) {
            let idle = {
                let mut map = inner.staged.locked();
                map.get_mut(&ino).map(|s| {
                    s.writers = s.writers.saturating_sub(1);
                    s.writers == 0
                })
            };
            if idle == Some(true) {
                result = inner.persist(ino);
                self.queue(ino);
            }
        }
        if last_open && inner.store.inode(ino).ok().flatten().is_some_and(|i| i.nlink == 0) {
            inner.discard_staged(ino);
            if let Err(e) = inner.store.drop_orphan(ino) {
                log::error!("dropping orphan inode {ino}: {e}");
            }
        }
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        match self.inner.persist(ino.0) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let fh = self.inner.next_fh.fetch_add(1, Ordering::Relaxed);
        reply.opened(FileHandle(fh), FopenFlags::empty());
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.inner.dirs.locked().remove(&fh.0);
        reply.ok();
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        if ino.0 == CTL_INO {
            let all = [(CTL_INO, FileType::Directory, &b"."[..]), (crate::store::ROOT_INO, FileType::Directory, b".."), (INDEX_INO, FileType::RegularFile, INDEX_NAME)];
            for (i, (child, kind, name)) in all.into_iter().enumerate().skip(offset as usize) {
                if reply.add(INodeNo(child), (i + 1) as u64, kind, OsStr::from_bytes(name)) {
                    break;
                }
            }
            return reply.ok();
        }
        let inner = &self.inner;
        let cached = if offset == 0 { None } else { inner.dirs.locked().get(&fh.0).cloned() };
        let listing = match cached {
            Some(l) => l,
            None => {
                let dir = match inner.inode(ino.0) {
                    Ok(d) if d.kind == InodeKind::Dir => d,
                    Ok(_) => return reply.error(Errno::ENOTDIR),
                    Err(e) => return reply.error(e),
                };
                let entries = match inner.store.read_dir(ino.0) {
                    Ok(e) => e,
                    Err(e) => return reply.error(errno(&e)),
                };
                let parent = if dir.parent == 0 { ino.0 } else { dir.parent };
                let all: Listing = [(ino.0, FileType::Directory, b".".to_vec()), (parent, FileType::Directory, b"..".to_vec())]
                    .into_iter()
                    .chain(entries.into_iter().map(|e| (e.ino, kind_of(e.inode.kind), e.name)))
                    .collect();
                let all = Arc::new(all);
                if fh.0 != 0 {
                    inner.dirs.locked().insert(fh.0, all.clone());
                }
                all
            }
        };
        for (i, (child, kind, name)) in listing.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*child), (i + 1) as u64, *kind, OsStr::from_bytes(name)) {
                break;
            }
        }
        reply.ok();
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
        if is_virtual(ino.0) {
            return reply.error(Errno::EROFS);
        }
        if !name.as_bytes().starts_with(b"user.") {
            return reply.error(Errno::from_i32(libc::EOPNOTSUPP));
        }
        if name.as_bytes().starts_with(b"user.warcfs.") {
            // Computed from the store; not settable.
            return reply.error(Errno::EPERM);
        }
        let r = self.inner.store.update_inode(ino.0, |inode| {
            let exists = inode.xattrs.contains_key(name.as_bytes());
            if flags & libc::XATTR_CREATE != 0 && exists {
                return Err(Errno::EEXIST);
            }
            if flags & libc::XATTR_REPLACE != 0 && !exists {
                return Err(Errno::from_i32(libc::ENODATA));
            }
            inode.xattrs.insert(name.as_bytes().to_vec(), value.to_vec());
            inode.ctime = Timestamp::now();
            Ok(())
        });
        reply_update(reply, r);
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        if is_virtual(ino.0) {
            return reply.error(Errno::from_i32(libc::ENODATA));
        }
        // Read-only attributes every stored file has, computed from the index.
        if let Some(field) = name.as_bytes().strip_prefix(b"user.warcfs.") {
            let value = match self.inner.store.file_usage(ino.0) {
                Ok(u) => match field {
                    b"logical_size" => u.logical_bytes.to_string(),
                    b"stored_bytes" => u.own_stored_bytes.to_string(),
                    b"records" => u.records.to_string(),
                    b"duplicate_share" => format!("{:.4}", u.duplicate_share),
                    _ => return reply.error(Errno::from_i32(libc::ENODATA)),
                },
                Err(e) => return reply.error(errno(&e)),
            };
            return reply_xattr(reply, size, value.as_bytes());
        }
        match self.inner.inode(ino.0) {
            Ok(inode) => match inode.xattrs.get(name.as_bytes()) {
                Some(v) => reply_xattr(reply, size, v),
                None => reply.error(Errno::from_i32(libc::ENODATA)),
            },
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        if is_virtual(ino.0) {
            return reply_xattr(reply, size, &[]);
        }
        match self.inner.inode(ino.0) {
            Ok(inode) => {
                // The computed user.warcfs.* attributes are not listed: `cp -a` and `rsync -X`
                // would try to copy them and fail to set them.
                let mut list = Vec::new();
                for k in inode.xattrs.keys() {
                    list.extend_from_slice(k);
                    list.push(0);
                }
                reply_xattr(reply, size, &list)
            }
            Err(e) => reply.error(e),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if is_virtual(ino.0) {
            return reply.error(Errno::EROFS);
        }
        let r = self.inner.store.update_inode(ino.0, |inode| {
            if inode.xattrs.remove(name.as_bytes()).is_none() {
                return Err(Errno::from_i32(libc::ENODATA));
            }
            inode.ctime = Timestamp::now();
            Ok(())
        });
        reply_update(reply, r);
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
        if let Some(e) = reserved(parent.0, name.as_bytes()) {
            return reply.error(e);
        }
        if name.len() > NAME_MAX {
            return reply.error(Errno::ENAMETOOLONG);
        }
        let inner = &self.inner;
        let mut inode = Inode::new(InodeKind::File, mode & !umask & 0o7777);
        inode.uid = req.uid();
        inode.gid = req.gid();
        inode.staged = true;
        let (ino, inode) = match inner.store.create_node(parent.0, name.as_bytes(), inode) {
            Ok(v) => v,
            Err(e) => return reply.error(errno(&e)),
        };
        let file = match OpenOptions::new().read(true).write(true).create(true).truncate(true).open(inner.staging_path(ino)) {
            Ok(f) => f,
            Err(e) => return reply.error(io_errno(&e)),
        };
        let write = (flags & libc::O_ACCMODE) != libc::O_RDONLY;
        inner.staged.locked().insert(ino, Staged::new(file, 0, u32::from(write)));
        let fh = self.register(ino, write, None, false, None);
        reply.created(&TTL, &inner.attr(ino, &inode), Generation(0), FileHandle(fh), FopenFlags::empty());
    }
}

impl WarcFs {
    /// A new handle, counted as an open of `ino`; a reader's carries the file's recipe (read
    /// with its inode at open).
    fn register(&self, ino: u64, write: bool, recipe: Option<RecipeHead>, direct: bool, rebuilds_members: Option<bool>) -> u64 {
        let fh = self.inner.next_fh.fetch_add(1, Ordering::Relaxed);
        let head = recipe.map(Arc::new);
        self.inner.handles.locked().insert(fh, Handle { write, head, snapshot: None, next: 0, run: 0, jumped: false, direct, rebuilds_members });
        *self.inner.opens.locked().entry(ino).or_insert(0) += 1;
        fh
    }

    fn new_node(&self, parent: u64, name: &OsStr, inode: Inode, reply: ReplyEntry) {
        if let Some(e) = reserved(parent, name.as_bytes()) {
            return reply.error(e);
        }
        if name.len() > NAME_MAX {
            return reply.error(Errno::ENAMETOOLONG);
        }
        match self.inner.store.create_node(parent, name.as_bytes(), inode) {
            Ok((ino, inode)) => reply.entry(&TTL, &self.inner.attr(ino, &inode), Generation(0)),
            Err(e) => reply.error(errno(&e)),
        }
    }
}
