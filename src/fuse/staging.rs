//! Files written through the mount: their bytes in `STORE/staging/<inode>` (copied there
//! from the store first when a stored file is changed), made durable by `close` and `fsync`,
//! and ingested by a background worker after the last writer is gone, with retries when
//! that fails (a full disk). Per-file state lives in `Inner::staged`; a copy of a stored file
//! runs under that file's own gate, not the map's lock.

use super::*;

/// A file whose current bytes live in the staging area.
pub(super) struct Staged {
    /// Its staging file, open while something uses it. Let go once the file is idle (no
    /// writer, nothing unsynced: `let_go_if_idle`) and opened again when wanted
    /// (`staged_open`, `settled_open`): files waiting for their ingest hold no descriptor (a
    /// copy of many files into the mount, faster than they are stored, ran out of them).
    pub(super) file: Option<Arc<File>>,
    /// Which staging of the file this is (a file stored and staged again is another): a
    /// descriptor opened by path is kept only by the staging it was opened for.
    pub(super) id: u64,
    pub(super) size: u64,
    /// Bumped by every change, so an ingest of older bytes is never committed.
    pub(super) gen: u64,
    pub(super) writers: u32,
    /// Changed since it was last made durable.
    pub(super) dirty: bool,
    /// A sync of it failed. Linux may then have dropped the unwritten pages and the error
    /// with them, so a later sync would "succeed" without the bytes: every later fsync and
    /// close reports EIO instead, and it is not ingested (it stays dirty) until it is
    /// truncated to nothing; the next mount recovers what reached the disk.
    pub(super) sync_failed: bool,
    /// Held while it is synced: a second fsync or close waits for the first one's outcome
    /// rather than reporting bytes durable that are still on their way.
    pub(super) syncing: Arc<Mutex<()>>,
    /// Writes in flight: their bytes go to the file without the staged map locked (a write
    /// can wait long for the page cache), so an ingest must not commit while one is.
    pub(super) busy: u32,
    /// Its ingest is committing (the map is not locked meanwhile): a change waits for the
    /// outcome, after which the file is stored (and staged again by the change) or not.
    pub(super) committing: bool,
    /// Attribute updates in flight (`op_setattr`, without the map locked): they record the
    /// staged size in the inode, so a commit waits for them.
    pub(super) attr_updates: u32,
    /// When it was last written, on a mount without the writeback cache (which otherwise
    /// keeps a file's times in the kernel): its mtime and ctime until `persist` or a
    /// setattr records them.
    pub(super) written_at: Option<Timestamp>,
}

impl Staged {
    pub(super) fn new(file: Option<File>, size: u64, writers: u32) -> Staged {
        static STAGINGS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let id = STAGINGS.fetch_add(1, Ordering::Relaxed);
        Staged { file: file.map(Arc::new), id, size, gen: 0, writers, dirty: false, sync_failed: false, syncing: Arc::default(), busy: 0, committing: false, attr_updates: 0, written_at: None }
    }

    /// Its open staging file: the map was locked by `staged_open` or `settled_open`, which
    /// open it if need be.
    pub(super) fn file(&self) -> Result<Arc<File>, Errno> {
        self.file.clone().ok_or(Errno::EIO)
    }
}

impl Inner {
    /// The staged map, locked once no commit of `ino` is in progress: a commit decides
    /// whether the file is still staged, so whatever reads its staged state to change the
    /// file or its inode waits for it (other files are not held up: the map is free
    /// meanwhile).
    pub(super) fn settled(&self, ino: u64) -> MutexGuard<'_, HashMap<u64, Staged>> {
        let mut map = self.staged.locked();
        while map.get(&ino).is_some_and(|s| s.committing) {
            drop(map);
            std::thread::sleep(Duration::from_millis(1));
            map = self.staged.locked();
        }
        map
    }

    /// The staged map, locked, with the staging file of `ino` open if it is staged.
    pub(super) fn staged_open(&self, ino: u64) -> Result<MutexGuard<'_, HashMap<u64, Staged>>, Errno> {
        self.with_open(ino, || self.staged.locked())
    }

    /// `settled`, with the staging file of `ino` open if it is staged.
    pub(super) fn settled_open(&self, ino: u64) -> Result<MutexGuard<'_, HashMap<u64, Staged>>, Errno> {
        self.with_open(ino, || self.settled(ino))
    }

    /// The map as `lock` locks it, with the staging file of `ino` open if it is staged: one
    /// let go (`let_go_if_idle`) is opened again without the map locked, and kept only if the
    /// file is still in the same staging (stored and staged anew meanwhile, the path names
    /// another file). Descriptors are closed without the map locked.
    fn with_open<'a>(&'a self, ino: u64, lock: impl Fn() -> MutexGuard<'a, HashMap<u64, Staged>>) -> Result<MutexGuard<'a, HashMap<u64, Staged>>, Errno> {
        loop {
            let map = lock();
            let id = match map.get(&ino) {
                Some(s) if s.file.is_none() => s.id,
                _ => return Ok(map),
            };
            drop(map);
            let opened = OpenOptions::new().read(true).write(true).open(self.staging_path(ino));
            crate::failpoint::hold("staged_reopen");
            let mut map = lock();
            match (map.get_mut(&ino).filter(|s| s.id == id && s.file.is_none()), opened) {
                (Some(s), Ok(f)) => {
                    s.file = Some(Arc::new(f));
                    return Ok(map);
                }
                (Some(_), Err(e)) => {
                    drop(map);
                    quiet::io_error("staging", e.raw_os_error(), format!("staged inode {ino}: its staging file cannot be opened: {e}"));
                    return Err(Errno::EIO);
                }
                // Opened by another, stored, or staged anew meanwhile: look again.
                (_, spare) => {
                    drop(map);
                    drop(spare);
                }
            }
        }
    }

    /// Lets go of the staging file of `ino` if nothing uses it: no writer, no write, sync,
    /// commit or attribute update in flight, nothing unsynced. (A reader or an ingest that
    /// holds it keeps its own reference; the descriptor is closed without the map locked.)
    pub(super) fn let_go_if_idle(&self, ino: u64) {
        let idle = |s: &&mut Staged| s.writers == 0 && s.busy == 0 && !s.dirty && !s.committing && s.attr_updates == 0 && Arc::strong_count(&s.syncing) == 1;
        let let_go = self.staged.locked().get_mut(&ino).filter(idle).and_then(|s| s.file.take());
        drop(let_go);
    }

    pub(super) fn staging_path(&self, ino: u64) -> PathBuf {
        self.staging.join(format!("{ino:016x}"))
    }

    /// Drops a file's staging copy: it was unlinked and nothing has it open.
    pub(super) fn discard_staged(&self, ino: u64) {
        self.staged.locked().remove(&ino);
        let _ = crate::disk::remove_file(&self.staging_path(ino));
    }

    /// Moves a file's bytes to the staging area (if they are not there yet), so it can be
    /// written. `truncate` skips copying the old bytes. Returns the staged map still locked,
    /// with the file in it: the background ingest may finish and unstage the file as soon as
    /// the lock is let go, so the caller's change must be made under this same lock.
    pub(super) fn ensure_staged(&self, ino: u64, truncate: bool) -> Result<MutexGuard<'_, HashMap<u64, Staged>>, Errno> {
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
            map.insert(ino, Staged::new(Some(file), size, 0));
            // Handles opened before: their recipe is the one the ingest of this rewrite will
            // replace, and its pieces may stay in the store's cache, so reading it after the
            // commit would be the old bytes without an error. They read staging from now on,
            // and look the recipe up afterwards.
            for h in self.handles.locked().values_mut().filter(|h| h.ino == ino) {
                h.head = None;
            }
            Ok(map)
        })();
        let mut gates = self.staging_gates.locked();
        if gates.get(&ino).is_some_and(|g| Arc::strong_count(g) == 2) {
            gates.remove(&ino);
        }
        staged
    }

    /// The staged map, locked, if `ino` is in it (emptied first if `truncate`).
    pub(super) fn if_staged(&self, ino: u64, truncate: bool) -> Result<Option<MutexGuard<'_, HashMap<u64, Staged>>>, Errno> {
        let mut map = self.settled_open(ino)?;
        let Some(s) = map.get_mut(&ino) else { return Ok(None) };
        if truncate && s.size != 0 {
            crate::disk::set_len(&*s.file()?, 0).map_err(|e| io_errno(&e))?;
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
    pub(super) fn stage_copy(&self, ino: u64, truncate: bool) -> Result<(File, u64), Errno> {
        let inode = self.inode(ino)?;
        match inode.kind {
            InodeKind::File => {}
            InodeKind::Dir => return Err(Errno::EISDIR),
            _ => return Err(Errno::EINVAL),
        }
        let path = self.staging_path(ino);
        let file = crate::disk::create(&path).map_err(|e| io_errno(&e))?;
        let mut size = 0;
        if !truncate {
            if let Some(head) = &inode.recipe {
                // Refused at once if the whole file would not fit; then room is taken for
                // each write of the copy as it goes.
                if let Err(e) = self.store.space().take(head.size) {
                    let _ = crate::disk::remove_file(&path);
                    return Err(io_errno(&e));
                }
                let mut w = BufWriter::with_capacity(1 << 20, self.store.space().metered(crate::disk::Writer::new(&file, 0)));
                size = self.store.copy_to(head, &mut w).map_err(|e| errno(&e))?;
                w.flush().map_err(|e| io_errno(&e))?;
            }
        }
        // The staged flag may only point at complete bytes, under a name that survives a
        // power loss: the file's bytes, then the staging directory's new entry.
        crate::disk::sync_data(&file).map_err(|e| io_errno(&e))?;
        crate::pack::sync_dir(&self.staging).map_err(|e| io_errno(&e))?;
        crate::failpoint::crash_at("staged_created");
        self.set_staged(ino, size, None)?;
        Ok((file, size))
    }

    /// Makes a staged file's bytes durable and records its size: what `close` and `fsync`
    /// promise.
    pub(super) fn persist(&self, ino: u64) -> Result<(), Errno> {
        let Some(syncing) = self.staged.locked().get(&ino).map(|s| s.syncing.clone()) else { return Ok(()) };
        let _one_at_a_time = syncing.locked();
        let (file, size, written_at) = {
            let mut map = self.staged.locked();
            let Some(s) = map.get_mut(&ino) else { return Ok(()) };
            if s.sync_failed {
                return Err(Errno::EIO);
            }
            if !s.dirty {
                return Ok(());
            }
            // (Unsynced bytes came by a write, a truncate or a setattr, each through an open
            // staging file, which is let go only once synced.)
            let file = s.file()?;
            s.dirty = false;
            (file, s.size, s.written_at)
        };
        if let Err(e) = crate::failpoint::io_error("persist_sync").and_then(|()| crate::disk::sync_data(&file)).and_then(|()| crate::pack::sync_dir(&self.staging)) {
            log::error!("sync of staged inode {ino} failed: {e}; its fsyncs and closes get EIO until it is truncated, and the next mount recovers what reached the disk");
            if let Some(s) = self.staged.locked().get_mut(&ino) {
                s.dirty = true;
                s.sync_failed = true;
            }
            return Err(io_errno(&e));
        }
        crate::failpoint::crash_at("staged_synced");
        match self.set_staged(ino, size, written_at) {
            Ok(()) => {
                if let Some(s) = self.staged.locked().get_mut(&ino).filter(|s| s.written_at == written_at) {
                    s.written_at = None;
                }
                Ok(())
            }
            // Unlinked meanwhile: nothing to record.
            Err(Errno::ENOENT) => Ok(()),
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

    /// Records in the index that a file's bytes (of `size`) are in staging, and the time of
    /// its last write as its mtime and ctime where one is kept here (`Staged::written_at`).
    /// Only these fields change: a concurrent commit of other attributes is never
    /// overwritten.
    pub(super) fn set_staged(&self, ino: u64, size: u64, written_at: Option<Timestamp>) -> Result<(), Errno> {
        match self.store.update_inode(ino, |i| {
            i.staged = true;
            i.size = size;
            if let Some(t) = written_at {
                i.mtime = t;
                i.ctime = t;
            }
            Ok::<(), Errno>(())
        }) {
            Ok(r) => r.map(|_| ()),
            Err(e) => Err(errno(&e)),
        }
    }

    /// Ingests a staged file whose writers are all gone; called by the worker. An error is
    /// a failure to store it (a full disk, say): it stays staged, and the worker tries again.
    pub(super) fn ingest(&self, ino: u64) -> Result<(), StoreError> {
        let (file, gen) = {
            let map = self.staged.locked();
            match map.get(&ino) {
                Some(s) if s.writers == 0 => (s.file.clone(), s.gen),
                _ => return Ok(()),
            }
        };
        // A file let go while it waited is opened for this ingest alone (without the map
        // locked), and closed with it.
        let path = self.staging_path(ino);
        let file = match file {
            Some(f) => f,
            None => match File::open(&path) {
                Ok(f) => Arc::new(f),
                // Stored or removed meanwhile.
                Err(_) if self.staged.locked().get(&ino).is_none_or(|s| s.gen != gen) => return Ok(()),
                Err(err) => return Err(StoreError::Io { path, err }),
            },
        };
        // Read a window at a time (see `Source for File`); a racing change bumps `gen`, and
        // then this ingest is dropped.
        let prepared = match self.store.prepare(&*file) {
            Ok(p) => p,
            // Unless the file changed meanwhile (its new bytes are queued again).
            Err(e) if self.staged.locked().get(&ino).is_some_and(|s| s.gen == gen) => return Err(e),
            Err(_) => return Ok(()),
        };
        loop {
            let mut map = self.staged.locked();
            match map.get_mut(&ino) {
                // An attribute update records the staged size: it finishes first (briefly).
                Some(s) if s.attr_updates > 0 => {
                    drop(map);
                    std::thread::sleep(Duration::from_millis(1));
                }
                Some(s) if s.gen == gen && s.writers == 0 && !s.dirty && s.busy == 0 && !s.committing => {
                    s.committing = true;
                    break;
                }
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
                let _ = crate::disk::remove_file(&self.staging_path(ino));
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

/// The first wait before a failed ingest is tried again, and the longest.
const RETRY_FIRST: Duration = Duration::from_secs(2);
const RETRY_MAX: Duration = Duration::from_secs(300);

pub(super) fn ingest_loop(inner: Arc<Inner>, rx: Receiver<u64>) {
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
        crate::failpoint::hold("ingest");
        // A bug met while committing one file must not stop the ingest of all later ones
        // (the ingest itself already turns a panic into an error, see `Store::prepare`).
        let r = crate::store::bug_as_error("committing an ingest", || inner.ingest(ino));
        if let Err(e) = r {
            let wait = waited.map_or(RETRY_FIRST, |w| (w * 2).min(RETRY_MAX));
            let msg = format!("ingest of inode {ino} failed, it stays staged and is tried again in {} s: {e}", wait.as_secs());
            let os_error = match &e {
                StoreError::Io { err, .. } => err.raw_os_error(),
                _ => None,
            };
            quiet::io_error("ingest", os_error, msg);
            retries.retain(|r| r.1 != ino);
            retries.push((Instant::now() + wait, ino, wait));
            inner.store.ingests().failed.fetch_add(1, Ordering::Relaxed);
        }
        inner.store.ingests().retrying.store(retries.len() as u64, Ordering::Relaxed);
        // Between two files the writer is free: the moment to publish to the bucket (the
        // timer thread cannot while an ingest holds it). Nothing on a local store.
        if let Err(e) = inner.store.publish_if_due() {
            quiet::io_error("publish", None, format!("publishing to the bucket: {e}"));
        }
        if queued {
            inner.store.ingests().queued.fetch_sub(1, Ordering::Relaxed);
        }
    }
}
