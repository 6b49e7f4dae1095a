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

pub struct Space {
    dir: PathBuf,
    floor: AtomicU64,
}

impl Space {
    pub fn new(dir: PathBuf, floor: u64) -> Space {
        Space { dir, floor: AtomicU64::new(floor) }
    }

    pub fn set_floor(&self, bytes: u64) {
        self.floor.store(bytes, Ordering::Relaxed);
    }

    pub fn floor(&self) -> u64 {
        self.floor.load(Ordering::Relaxed)
    }

    /// Takes room for `n` bytes of data: ENOSPC if they would bring the disk below its
    /// floor. The disk is asked every time (statfs costs about a microsecond, a FUSE request
    /// fifty): other writers to it take room unseen.
    pub fn take(&self, n: u64) -> std::io::Result<()> {
        let st = nix::sys::statvfs::statvfs(&self.dir).map_err(std::io::Error::from)?;
        let avail = (st.blocks_available() as u64).saturating_mul(st.fragment_size() as u64);
        if avail.saturating_sub(self.floor()) < n {
            return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
        }
        Ok(())
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
        s.take(1 << 20).unwrap();
        s.set_floor(avail + (1 << 30));
        assert_eq!(s.take(1).unwrap_err().raw_os_error(), Some(libc::ENOSPC));
    }
}
