//! Keeps a bug from taking the mount down. fuser runs each request on one of a few event-loop
//! threads; a panic there ends the thread, and the session stops when its join reaches a dead
//! one (at once for the first thread; the mount is then gone for every user: measured,
//! ENOTCONN after two panicking READs). Here each request runs inside `catch_unwind`: its
//! unsent reply goes back as EIO when the panic drops it, the panic hook has logged the
//! message and place, and the thread serves the next request. (Locks a panicking request held
//! stay usable: see `crate::LockExt`.)

use std::ffi::OsStr;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::SystemTime;

use fuser::{
    AccessFlags, FileHandle, Filesystem, INodeNo, IoctlFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use super::WarcFs;

/// The filesystem as the session sees it: `WarcFs` with every request contained.
pub struct Guarded(pub WarcFs);

fn contain(op: &str, f: impl FnOnce()) {
    if catch_unwind(AssertUnwindSafe(f)).is_err() {
        log::error!("{op}: internal error (a bug, logged above); the request got EIO, the mount goes on");
    }
}

/// Forwards each listed request to `WarcFs` inside `contain`.
macro_rules! contained {
    ($($op:ident($($arg:ident: $ty:ty),*);)*) => {
        $(
            fn $op(&self, $($arg: $ty),*) {
                // Named through the trait: an inherent method of the same name must not win.
                contain(stringify!($op), || Filesystem::$op(&self.0, $($arg),*))
            }
        )*
    };
}

impl Filesystem for Guarded {
    fn init(&mut self, req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        self.0.init(req, config)
    }

    fn destroy(&mut self) {
        self.0.destroy()
    }

    contained! {
        lookup(req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry);
        getattr(req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr);
        setattr(
            req: &Request, ino: INodeNo, mode: Option<u32>, uid: Option<u32>, gid: Option<u32>, size: Option<u64>,
            atime: Option<TimeOrNow>, mtime: Option<TimeOrNow>, ctime: Option<SystemTime>, fh: Option<FileHandle>,
            crtime: Option<SystemTime>, chgtime: Option<SystemTime>, bkuptime: Option<SystemTime>,
            flags: Option<fuser::BsdFileFlags>, reply: ReplyAttr
        );
        readlink(req: &Request, ino: INodeNo, reply: ReplyData);
        mknod(req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry);
        mkdir(req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry);
        unlink(req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty);
        rmdir(req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty);
        symlink(req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry);
        rename(req: &Request, parent: INodeNo, name: &OsStr, newparent: INodeNo, newname: &OsStr, flags: RenameFlags, reply: ReplyEmpty);
        link(req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry);
        open(req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen);
        read(req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, size: u32, flags: OpenFlags, lock: Option<LockOwner>, reply: ReplyData);
        write(
            req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, data: &[u8], wf: WriteFlags, flags: OpenFlags,
            lock: Option<LockOwner>, reply: ReplyWrite
        );
        ioctl(req: &Request, ino: INodeNo, fh: FileHandle, flags: IoctlFlags, cmd: u32, in_data: &[u8], out_size: u32, reply: ReplyIoctl);
        flush(req: &Request, ino: INodeNo, fh: FileHandle, lock: LockOwner, reply: ReplyEmpty);
        release(req: &Request, ino: INodeNo, fh: FileHandle, flags: OpenFlags, lock: Option<LockOwner>, flush: bool, reply: ReplyEmpty);
        fsync(req: &Request, ino: INodeNo, fh: FileHandle, datasync: bool, reply: ReplyEmpty);
        opendir(req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen);
        readdir(req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, reply: ReplyDirectory);
        releasedir(req: &Request, ino: INodeNo, fh: FileHandle, flags: OpenFlags, reply: ReplyEmpty);
        fsyncdir(req: &Request, ino: INodeNo, fh: FileHandle, datasync: bool, reply: ReplyEmpty);
        statfs(req: &Request, ino: INodeNo, reply: ReplyStatfs);
        setxattr(req: &Request, ino: INodeNo, name: &OsStr, value: &[u8], flags: i32, position: u32, reply: ReplyEmpty);
        getxattr(req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr);
        listxattr(req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr);
        removexattr(req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty);
        access(req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty);
        create(req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, flags: i32, reply: ReplyCreate);
    }
}
