//! Namespace changes: making nodes (mknod, mkdir, symlink, create), removing them (unlink,
//! rmdir), rename and link. Names under `/.warcfs` are refused; a staged file whose last
//! name goes while nothing has it open is discarded.

use super::*;

impl WarcFs {
    #[allow(clippy::too_many_arguments)] // the FUSE request's own arguments
    pub(super) fn op_mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        let kind = match mode & libc::S_IFMT {
            libc::S_IFIFO => InodeKind::Fifo,
            libc::S_IFSOCK => InodeKind::Socket,
            libc::S_IFCHR => InodeKind::CharDevice,
            libc::S_IFBLK => InodeKind::BlockDevice,
            // A regular file made by mknod: an empty stored file.
            libc::S_IFREG | 0 => InodeKind::File,
            _ => return reply.error(Errno::EINVAL),
        };
        let mut inode = owned(req, kind, mode & !umask & 0o7777);
        if matches!(kind, InodeKind::CharDevice | InodeKind::BlockDevice) {
            inode.rdev = rdev;
        }
        self.new_node(parent.0, name, inode, reply);
    }

    pub(super) fn op_mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        self.new_node(parent.0, name, owned(req, InodeKind::Dir, mode & !umask & 0o7777), reply);
    }

    pub(super) fn op_unlink(&self, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
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

    pub(super) fn op_rmdir(&self, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if let Some(e) = reserved(parent.0, name.as_bytes()) {
            return reply.error(if e == Errno::EEXIST { Errno::EBUSY } else { e });
        }
        match self.inner.store.unlink_entry(parent.0, name.as_bytes(), true, &|_| false) {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    pub(super) fn op_symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let mut inode = owned(req, InodeKind::Symlink, 0o777);
        inode.target = target.as_os_str().as_bytes().to_vec();
        inode.size = inode.target.len() as u64;
        self.new_node(parent.0, link_name, inode, reply);
    }

    pub(super) fn op_rename(&self, parent: INodeNo, name: &OsStr, newparent: INodeNo, newname: &OsStr, flags: RenameFlags, reply: ReplyEmpty) {
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

    pub(super) fn op_link(&self, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
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

    #[allow(clippy::too_many_arguments)] // the FUSE request's own arguments
    pub(super) fn op_create(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, flags: i32, reply: ReplyCreate) {
        if let Some(e) = reserved(parent.0, name.as_bytes()) {
            return reply.error(e);
        }
        if name.len() > NAME_MAX {
            return reply.error(Errno::ENAMETOOLONG);
        }
        let inner = &self.inner;
        let mut inode = owned(req, InodeKind::File, mode & !umask & 0o7777);
        inode.staged = true;
        let (ino, inode) = match inner.store.create_node(parent.0, name.as_bytes(), inode) {
            Ok(v) => v,
            Err(e) => return reply.error(errno(&e)),
        };
        let file = match crate::disk::create(&inner.staging_path(ino)) {
            Ok(f) => f,
            Err(e) => return reply.error(io_errno(&e)),
        };
        let write = (flags & libc::O_ACCMODE) != libc::O_RDONLY;
        inner.staged.locked().insert(ino, Staged::new(Some(file), 0, u32::from(write)));
        let fh = self.register(ino, write, None, false, None);
        reply.created(&TTL, &inner.attr(ino, &inode), Generation(0), FileHandle(fh), FopenFlags::empty());
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

/// A new inode of `kind` and `mode`, owned by whoever asked for it.
fn owned(req: &Request, kind: InodeKind, mode: u32) -> Inode {
    let mut inode = Inode::new(kind, mode);
    inode.uid = req.uid();
    inode.gid = req.gid();
    inode
}
