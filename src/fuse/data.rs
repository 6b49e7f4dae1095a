//! The file data path of the mount: open, read (stored files through their recipe, staged
//! files from staging, read-ahead for sequential readers), write, flush, fsync, release.

use super::*;

impl WarcFs {
    pub(super) fn op_open(&self, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if is_index(ino.0) {
            if flags.acc_mode() != OpenAccMode::O_RDONLY || flags.0 & libc::O_TRUNC != 0 {
                return reply.error(Errno::EROFS);
            }
            let inner = self.inner.clone();
            let ino = ino.0;
            return self.inner.with_index_file(ino, Box::new(move |r| {
                let bytes = match r {
                    Ok(b) => b,
                    Err(e) => return reply.error(e),
                };
                let fh = inner.next_fh.fetch_add(1, Ordering::Relaxed);
                inner.handles.locked().insert(fh, Handle { ino, write: false, head: None, snapshot: Some(bytes), next: 0, run: 0, jumped: false, direct: true, rebuilds_members: None, view: None });
                // Its size changes with the store: no page cache, every read comes here.
                reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO)
            }));
        }
        if is_view(ino.0) {
            if flags.acc_mode() != OpenAccMode::O_RDONLY || flags.0 & libc::O_TRUNC != 0 {
                return reply.error(Errno::EROFS);
            }
            let view = match self.inner.view_open(ino.0) {
                Ok(v) => v,
                Err(e) => return reply.error(e),
            };
            let fh = self.inner.next_fh.fetch_add(1, Ordering::Relaxed);
            let resolved = matches!(view, wacz::EntryRead::Resolved(_));
            self.inner.handles.locked().insert(fh, Handle { ino: ino.0, write: false, head: None, snapshot: None, next: 0, run: 0, jumped: false, direct: true, rebuilds_members: None, view: Some(view) });
            // A record read of a WARC inside a WACZ rebuilds its own member only (see below).
            let direct = if self.inner.direct_mmap.load(Ordering::Relaxed) { FopenFlags::FOPEN_DIRECT_IO } else { FopenFlags::empty() };
            // A resolved file's bytes change with other files (its originals) while its own
            // size and time may not: no page of it is kept.
            if resolved {
                return reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_NOFLUSH);
            }
            return reply.opened(FileHandle(fh), direct | FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_NOFLUSH);
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
                // Another node's file on a shared store: refused here, not at its ingest.
                inner.store.check_owns_inode(ino).map_err(|e| super::errno(&e))?;
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
        // Where another node may rewrite the file, a handle keeps no recipe: its reads would
        // go on filling the kernel's cache with the old bytes after that cache was dropped.
        let recipe = recipe.filter(|_| !inner.elsewhere);
        let fh = self.register(ino, write, recipe, direct, rebuilds_members);
        // A reader has nothing to persist at close. (With the writeback cache the kernel sends
        // FLUSH anyway: measured, it ignores this flag then; it matters only without it: on
        // read-only mounts and shared stores.)
        let noflush = if write { FopenFlags::empty() } else { FopenFlags::FOPEN_NOFLUSH };
        let flags = noflush | match (keep, direct) {
            (false, _) => FopenFlags::empty(),
            (true, true) => FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_KEEP_CACHE,
            (true, false) => FopenFlags::FOPEN_KEEP_CACHE,
        };
        reply.opened(FileHandle(fh), flags);
    }

    pub(super) fn op_read(&self, ino: INodeNo, fh: FileHandle, offset: u64, size: u32, reply: ReplyData) {
        if is_index(ino.0) {
            let snap = self.inner.handles.locked().get(&fh.0).and_then(|h| h.snapshot.clone());
            let Some((file, len)) = snap else { return reply.error(Errno::EBADF) };
            let n = len.saturating_sub(offset).min(size as u64) as usize;
            return with_reply_buffer(n, |buf| match file.read_exact_at(&mut buf[..n], offset) {
                Ok(()) => reply.data(&buf[..n]),
                Err(e) => {
                    log::error!("reading /.warcfs/{} at {offset}: {e}", virt::name(ino.0));
                    reply.error(Errno::EIO)
                }
            });
        }
        if is_view(ino.0) {
            let handles = self.inner.handles.locked();
            let Some(view) = handles.get(&fh.0).and_then(|h| h.view.clone()) else { return reply.error(Errno::EBADF) };
            drop(handles);
            return self.inner.view_read(&view, offset, size, reply);
        }
        let inner = &self.inner;
        let ino = ino.0;
        let staged = match inner.staged_open(ino) {
            Ok(map) => map.get(&ino).map(|s| (s.file(), s.size)),
            Err(e) => return reply.error(e),
        };
        if let Some((file, len)) = staged {
            let file = match file {
                Ok(f) => f,
                Err(e) => return reply.error(e),
            };
            let n = (len.saturating_sub(offset)).min(size as u64) as usize;
            return with_reply_buffer(n, |buf| {
                let mut done = 0;
                while done < n {
                    match file.read_at(&mut buf[done..n], offset + done as u64) {
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
        let (cached, sequential, run_before, jumped, direct, rebuilds_members) = {
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
                let finishing = sequential && jumped && run_before < LOOKUP_RUN;
                let lookup =
                    direct && !offset.is_multiple_of(4096) && (!sequential || (finishing && inner.store.inside_member(&head, offset)));
                let r = if lookup {
                    inner.store.read_some(&head, offset, &mut buf[..n])
                } else if sequential && run_before >= crate::store::STREAMING_RUN {
                    inner.store.read_streaming(&head, offset, &mut buf[..n])
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
                    // Before the reply: the reader's next read may reach another FUSE
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
                        // A read that jumped, by a reader that was not streaming: a lookup.
                        // (A streaming reader's reads may be answered out of order.)
                        if !sequential && run_before < crate::store::STREAMING_RUN {
                            a.looked_up(head.clone(), offset);
                        }
                        a.reader_at(fh.0, head, offset + k as u64, run, rebuilds_members, || inner.handles.locked().contains_key(&fh.0));
                    }
                }
                Err(e) => reply.error(e),
            }
        });
    }

    pub(super) fn op_write(&self, ino: INodeNo, offset: u64, data: &[u8], reply: ReplyWrite) {
        let inner = &self.inner;
        let ino = ino.0;
        // Writeback-cache writes can arrive after the writer closed: stage again if needed.
        let file = {
            let mut map = match inner.ensure_staged(ino, false) {
                Ok(map) => map,
                Err(e) => return reply.error(e),
            };
            let Some(s) = map.get_mut(&ino) else { return reply.error(Errno::EIO) };
            let file = match s.file() {
                Ok(f) => f,
                Err(e) => return reply.error(e),
            };
            s.gen += 1;
            s.dirty = true;
            s.busy += 1;
            file
        };
        // The bytes go in without the staged map locked: a write may wait long for the page
        // cache (dirty throttling), and every other file's requests need the map.
        // Data stops at the disk's floor of free space (see `store::Space`).
        let written = inner.store.space().take(data.len() as u64).and_then(|_taken| crate::disk::write_at(&file, data, offset));
        {
            let mut map = inner.staged.locked();
            if let Some(s) = map.get_mut(&ino) {
                s.busy -= 1;
                // Bumped again: an ingest that read the file meanwhile must not commit.
                s.gen += 1;
                s.dirty = true;
                if written.is_ok() {
                    s.size = s.size.max(offset + data.len() as u64);
                    if inner.elsewhere {
                        s.written_at = Some(Timestamp::now());
                    }
                }
            }
        }
        match written {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(io_errno(&e)),
        }
    }

    pub(super) fn op_flush(&self, ino: INodeNo, fh: FileHandle, reply: ReplyEmpty) {
        // (A test arms this to see which closes the kernel sends a FLUSH for.)
        if crate::failpoint::io_error("flush").is_err() {
            return reply.error(Errno::EIO);
        }
        let write = self.inner.handles.locked().get(&fh.0).is_some_and(|h| h.write);
        if write {
            if let Err(e) = self.inner.persist(ino.0) {
                return reply.error(e);
            }
        }
        reply.ok();
    }

    pub(super) fn op_release(&self, ino: INodeNo, fh: FileHandle, reply: ReplyEmpty) {
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
        // Waiting for its ingest, a staged file holds no descriptor.
        inner.let_go_if_idle(ino);
        // (Another node's orphan, on a shared store, is that node's to drop.)
        if last_open && inner.store.owns(ino) && inner.store.inode(ino).ok().flatten().is_some_and(|i| i.nlink == 0) {
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

    pub(super) fn op_fsync(&self, ino: INodeNo, reply: ReplyEmpty) {
        match self.inner.persist(ino.0) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }
}

impl WarcFs {
    /// A new handle, counted as an open of `ino`; a reader's carries the file's recipe (read
    /// with its inode at open).
    pub(super) fn register(&self, ino: u64, write: bool, recipe: Option<RecipeHead>, direct: bool, rebuilds_members: Option<bool>) -> u64 {
        let fh = self.inner.next_fh.fetch_add(1, Ordering::Relaxed);
        let head = recipe.map(Arc::new);
        let keeps_recipe = head.is_some();
        self.inner.handles.locked().insert(fh, Handle { ino, write, head, snapshot: None, next: 0, run: 0, jumped: false, direct, rebuilds_members, view: None });
        *self.inner.opens.locked().entry(ino).or_insert(0) += 1;
        // Staged since the open looked (a writer came): the staging dropped the recipes of
        // the handles there were then, so this one drops its own. (One lock at a time: the
        // staging takes the staged map, then the handles.)
        if keeps_recipe && self.inner.staged.locked().contains_key(&ino) {
            if let Some(h) = self.inner.handles.locked().get_mut(&fh) {
                h.head = None;
            }
        }
        fh
    }
}

/// Runs `f` with a buffer of at least `len` bytes, one per FUSE thread and reused: a fresh
/// 1 MiB buffer per read request costs page faults and zeroing comparable to the copy itself.
pub(super) fn with_reply_buffer<R>(len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    thread_local! {
        static REPLY: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
    }
    crate::sync::with_thread_buffer(&REPLY, len, usize::MAX, f)
}
