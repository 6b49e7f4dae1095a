//! Room on the store's disk. Data (bytes staged by the mount, chunks appended to packs)
//! stops at a floor of free space, so that what must always be written finds room on a disk
//! that writers filled: the metadata log (an `rm` that would free space is a log record
//! too), RocksDB's log, flushes and compactions, and the footers that seal packs. RocksDB
//! that meets a full disk stops taking writes until it is reopened, so it must never be the
//! one to meet it. Like ext4's reserved blocks; `mount -o min_free=SIZE` sets the floor.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// The floor unless the mount sets another: small beside an archive's disk, large beside
/// what RocksDB writes at once.
pub const DEFAULT_MIN_FREE: u64 = 256 << 20;

#[derive(Debug)]
pub struct Space {
    dir: PathBuf,
    floor: AtomicU64,
    /// Room taken and not yet written: the disk does not show it yet.
    taken: AtomicU64,
}

/// Room taken for bytes being written; given back when dropped, once the write is done and
/// the disk's own count shows it.
#[derive(Debug)]
#[must_use = "the room is given back when this is dropped: hold it across the write"]
pub struct Taken<'a> {
    space: &'a Space,
    n: u64,
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        self.space.taken.fetch_sub(self.n, Ordering::AcqRel);
    }
}

impl Space {
    pub fn new(dir: PathBuf, floor: u64) -> Space {
        Space { dir, floor: AtomicU64::new(floor), taken: AtomicU64::new(0) }
    }

    pub fn set_floor(&self, bytes: u64) {
        self.floor.store(bytes, Ordering::Relaxed);
    }

    pub fn floor(&self) -> u64 {
        self.floor.load(Ordering::Relaxed)
    }

    /// Takes room for `n` bytes of data, held until the returned guard is dropped: ENOSPC if
    /// they, and what other writers of this store have taken and are still writing, would
    /// bring the disk below its floor. The disk is asked every time (statfs costs about a
    /// microsecond, a FUSE request fifty): other writers to it take room unseen. (Without
    /// counting the writes in flight, the mount's three FUSE threads each found the same
    /// room free and went below the floor together.)
    pub fn take(&self, n: u64) -> std::io::Result<Taken<'_>> {
        let st = nix::sys::statvfs::statvfs(&self.dir).map_err(std::io::Error::from)?;
        let avail = (st.blocks_available() as u64).saturating_mul(st.fragment_size() as u64);
        let before = self.taken.fetch_add(n, Ordering::AcqRel);
        let taken = Taken { space: self, n };
        if avail.saturating_sub(self.floor()).saturating_sub(before) < n {
            return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
        }
        Ok(taken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_stops_at_the_floor() {
        let dir = tempfile::tempdir().unwrap();
        let st = nix::sys::statvfs::statvfs(dir.path()).unwrap();
        let avail = st.blocks_available() as u64 * st.fragment_size() as u64;
        let s = Space::new(dir.path().to_path_buf(), avail.saturating_sub(1 << 30));
        drop(s.take(1 << 20).unwrap());
        s.set_floor(avail + (1 << 30));
        assert_eq!(s.take(1).unwrap_err().raw_os_error(), Some(libc::ENOSPC));
    }

    /// Room taken and still being written counts against the floor: two writers cannot both
    /// take the last of it.
    #[test]
    fn room_being_written_is_not_taken_twice() {
        let dir = tempfile::tempdir().unwrap();
        let st = nix::sys::statvfs::statvfs(dir.path()).unwrap();
        let avail = st.blocks_available() as u64 * st.fragment_size() as u64;
        // 300 MiB above the floor (less if others write to the disk meanwhile).
        let s = Space::new(dir.path().to_path_buf(), avail.saturating_sub(300 << 20));
        let first = s.take(200 << 20).unwrap();
        assert_eq!(s.take(200 << 20).unwrap_err().raw_os_error(), Some(libc::ENOSPC), "the first writer's room is taken");
        drop(first);
        assert_eq!(s.taken.load(Ordering::Acquire), 0, "a refusal holds nothing, a dropped guard gives its room back");
        drop(s.take(200 << 20).unwrap());
    }
}
