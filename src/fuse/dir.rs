//! Attributes and listings: setattr (size changes stage the file), and directory handles
//! whose listing is read once per open (readdir is O(n) in the directory size).

use super::*;

/// An attribute update of a staged file in flight (`Staged::attr_updates`), counted down
/// when dropped.
struct AttrUpdate<'a> {
    inner: &'a Inner,
    ino: u64,
}

impl Drop for AttrUpdate<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.inner.staged.locked().get_mut(&self.ino) {
            s.attr_updates = s.attr_updates.saturating_sub(1);
        }
    }
}

impl WarcFs {
    #[allow(clippy::too_many_arguments)] // the FUSE request's own arguments
    pub(super) fn op_setattr(&self, ino: INodeNo, mode: Option<u32>, uid: Option<u32>, gid: Option<u32>, size: Option<u64>, atime: Option<TimeOrNow>, mtime: Option<TimeOrNow>, ctime: Option<SystemTime>, reply: ReplyAttr) {
        if is_virtual(ino.0) {
            return reply.error(Errno::EROFS);
        }
        let inner = &self.inner;
        let ino = ino.0;
        let r = (|| {
            if let Some(size) = size {
                // Another node's file on a shared store: refused before its bytes are copied.
                inner.store.check_owns_inode(ino).map_err(|e| super::errno(&e))?;
                let mut map = inner.ensure_staged(ino, size == 0)?;
                let s = map.get_mut(&ino).ok_or(Errno::EIO)?;
                crate::disk::set_len(&*s.file()?, size).map_err(|e| io_errno(&e))?;
                s.size = size;
                s.gen += 1;
                s.dirty = true;
            }
            let now = Timestamp::now();
            // Only the attributes asked for change. A commit in progress is waited for: its
            // outcome says whether the file is still staged. A staged file's commit then
            // waits for this update (`attr_updates`), whose staged size it must not undo;
            // the map itself is not held across the update, which syncs the log and the
            // index, so other files' requests go on meanwhile.
            let (staged_size, written_at) = {
                let mut map = inner.settled(ino);
                match map.get_mut(&ino) {
                    Some(s) => {
                        s.attr_updates += 1;
                        (Some(s.size), s.written_at)
                    }
                    None => (None, None),
                }
            };
            // Counted down however this ends (a panic in the update too: the ingest of this
            // file would otherwise wait for it for good).
            let _counted = staged_size.map(|_| AttrUpdate { inner, ino });
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
            } else if let Some(t) = written_at {
                inode.mtime = t;
            }
            inode.ctime = ctime.map(Timestamp::from).unwrap_or(now);
            if let Some(size) = staged_size {
                inode.size = size;
                inode.staged = true;
            }
            Ok::<(), Errno>(())
            });
            if staged_size.is_some() && updated.is_ok() {
                if let Some(s) = inner.staged.locked().get_mut(&ino) {
                    // The times just written hold the last write's (unless one came since).
                    if s.written_at == written_at {
                        s.written_at = None;
                    }
                }
            }
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
                        inner.let_go_if_idle(ino);
                    }
                }
                reply.attr(&TTL, &inner.attr(ino, &inode))
            }
            Err(e) => reply.error(e),
        }
    }

    pub(super) fn op_opendir(&self, reply: ReplyOpen) {
        let fh = self.inner.next_fh.fetch_add(1, Ordering::Relaxed);
        reply.opened(FileHandle(fh), FopenFlags::empty());
    }

    pub(super) fn op_releasedir(&self, fh: FileHandle, reply: ReplyEmpty) {
        self.inner.dirs.locked().remove(&fh.0);
        reply.ok();
    }

    pub(super) fn op_readdir(&self, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        if ino.0 == CTL_INO {
            let all = [(CTL_INO, FileType::Directory, &b"."[..]), (crate::store::ROOT_INO, FileType::Directory, b".."), (INDEX_INO, FileType::RegularFile, INDEX_NAME), (WACZ_INO, FileType::Directory, WACZ_NAME), (RESOLVED_INO, FileType::Directory, RESOLVED_NAME), (RESOLVED_INDEX_INO, FileType::RegularFile, RESOLVED_INDEX_NAME)];
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
            None if is_view(ino.0) => match inner.view_listing(ino.0) {
                Ok(l) => {
                    let l = Arc::new(l);
                    if fh.0 != 0 {
                        inner.dirs.locked().insert(fh.0, l.clone());
                    }
                    l
                }
                Err(e) => return reply.error(e),
            },
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
}
