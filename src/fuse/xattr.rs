//! Extended attributes: stored per inode, plus the computed `user.warcfs.*` ones of a
//! stored file (its logical size, stored bytes, records, duplicate share).

use super::*;

impl WarcFs {
    pub(super) fn op_setxattr(&self, ino: INodeNo, name: &OsStr, value: &[u8], flags: i32, reply: ReplyEmpty) {
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

    pub(super) fn op_getxattr(&self, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
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

    pub(super) fn op_listxattr(&self, ino: INodeNo, size: u32, reply: ReplyXattr) {
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

    pub(super) fn op_removexattr(&self, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
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
