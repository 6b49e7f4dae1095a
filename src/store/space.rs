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
        self.take_of(n, || self.avail())
    }

    /// `take`, with the disk's free bytes from `avail`. They are asked after this taker is
    /// counted: a write that ends (and gives its room back) in between is then on the disk
    /// already, so nothing is missed (at worst a write is counted twice, for a moment).
    fn take_of(&self, n: u64, avail: impl FnOnce() -> std::io::Result<u64>) -> std::io::Result<Taken<'_>> {
        let enospc = || std::io::Error::from_raw_os_error(libc::ENOSPC);
        let before = self.taken.fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| t.checked_add(n)).map_err(|_| enospc())?;
        let taken = Taken { space: self, n };
        if avail()?.saturating_sub(self.floor()).saturating_sub(before) < n {
            return Err(enospc());
        }
        Ok(taken)
    }

    /// Bytes that can still be taken: free above the floor, less what writers hold.
    pub fn room(&self) -> std::io::Result<u64> {
        Ok(self.avail()?.saturating_sub(self.floor()).saturating_sub(self.taken.load(Ordering::Acquire)))
    }

    /// Free bytes on the disk, as an unprivileged writer sees them.
    fn avail(&self) -> std::io::Result<u64> {
        let st = nix::sys::statvfs::statvfs(&self.dir).map_err(std::io::Error::from)?;
        Ok((st.blocks_available() as u64).saturating_mul(st.fragment_size() as u64))
    }

    /// `inner`, writing through which takes room for each write as it goes (a long copy
    /// holds only the room of the write in progress, not of all it will write).
    pub fn metered<W: std::io::Write>(&self, inner: W) -> Metered<'_, W> {
        Metered { space: self, inner }
    }
}

/// See `Space::metered`.
pub struct Metered<'a, W> {
    space: &'a Space,
    inner: W,
}

impl<W: std::io::Write> std::io::Write for Metered<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _taken = self.space.take(buf.len() as u64)?;
        self.inner.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_stops_at_the_floor() {
        let dir = tempfile::tempdir().unwrap();
        let s = Space::new(dir.path().to_path_buf(), 0);
        let avail = s.avail().unwrap();
        s.set_floor(avail.saturating_sub(1 << 30));
        drop(s.take(1 << 20).unwrap());
        s.set_floor(avail + (1 << 30));
        assert_eq!(s.take(1).unwrap_err().raw_os_error(), Some(libc::ENOSPC));
    }

    /// Room taken and still being written counts against the floor: two writers cannot both
    /// take the last of it.
    #[test]
    fn room_being_written_is_not_taken_twice() {
        let dir = tempfile::tempdir().unwrap();
        let s = Space::new(dir.path().to_path_buf(), 100 << 20);
        // A disk with 400 MiB free, whatever else writes to the real one meanwhile.
        let free = || Ok(400 << 20);
        let first = s.take_of(200 << 20, free).unwrap();
        assert_eq!(s.take_of(200 << 20, free).unwrap_err().raw_os_error(), Some(libc::ENOSPC), "the first writer's room is taken");
        assert_eq!(s.take_of(u64::MAX, free).unwrap_err().raw_os_error(), Some(libc::ENOSPC), "no count wraps");
        drop(first);
        assert_eq!(s.taken.load(Ordering::Acquire), 0, "a refusal holds nothing, a dropped guard gives its room back");
        drop(s.take_of(200 << 20, free).unwrap());
        // A failure to ask the disk gives the room back too.
        assert!(s.take_of(1, || Err(std::io::Error::other("statfs"))).is_err());
        assert_eq!(s.taken.load(Ordering::Acquire), 0);
    }
}
