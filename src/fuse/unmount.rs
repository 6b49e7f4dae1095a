//! `warcfs umount`, and `warcfs mount` of a store whose previous daemon is still storing
//! what was written through its mount.
//!
//! After the kernel lets go of a mount, its daemon goes on until every staged file is
//! ingested and committed (possibly minutes for a large crawl), holding the store's lock.
//! `umount` unmounts and waits for that, saying what it waits for; `mount` waits for such a
//! daemon instead of failing with "store is in use".

use std::fs::{self, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// The warcfs mounts of this machine, as (mount point, store), from the kernel's table: FUSE
/// mounts (type `fuse`, or `fuse.warcfs` where the subtype is kept) whose source, the name
/// warcfs gives its mounts, is a store.
fn warcfs_mounts() -> Vec<(PathBuf, PathBuf)> {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (a, b) = l.split_once(" - ")?;
            let mnt = a.split(' ').nth(4)?;
            let mut rest = b.split(' ');
            let (fstype, source) = (rest.next()?, rest.next()?);
            let store = PathBuf::from(unescape(source));
            (matches!(fstype, "fuse" | "fuse.warcfs") && crate::store::layout::config(&store).is_file()).then(|| (PathBuf::from(unescape(mnt)), store))
        })
        .collect()
}

/// Undoes mountinfo's octal escapes (`\040` for a space, and so on).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether some process holds the store's lock (tested by taking it for a moment).
fn lock_held(store: &Path) -> bool {
    let Ok(f) = OpenOptions::new().read(true).write(true).open(crate::store::layout::lock(store)) else { return false };
    // SAFETY: flock on a descriptor we own; released at once (closing it would too).
    let free = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
    if free {
        unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_UN) };
    }
    !free
}

fn holder(store: &Path) -> Option<i32> {
    fs::read_to_string(crate::store::layout::lock(store)).ok()?.trim().parse().ok()
}

/// Whether process `pid` is a `warcfs mount` (its command line names the subcommand).
fn is_mount_daemon(pid: i32) -> bool {
    fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.split(|&b| b == 0).nth(1) == Some(b"mount"))
}

fn staged(store: &Path) -> usize {
    fs::read_dir(crate::store::layout::staging(store)).map(|d| d.count()).unwrap_or(0)
}

/// Waits until no process holds the store's lock, telling the user (on stderr, every few
/// seconds) what the daemon is still doing.
fn wait_released(store: &Path, why: &str) {
    let t0 = Instant::now();
    let mut said = None::<Instant>;
    while lock_held(store) {
        if said.is_none_or(|s| s.elapsed() >= Duration::from_secs(5)) && t0.elapsed() >= Duration::from_millis(500) {
            let pid = holder(store).map_or_else(|| "?".into(), |p| p.to_string());
            eprintln!("warcfs: {why}: the daemon (pid {pid}) is storing {} files written through the mount ({} s so far)", staged(store), t0.elapsed().as_secs());
            said = Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `warcfs umount MOUNTPOINT`: unmounts, then returns once the daemon has stored every
/// file written through the mount and exited.
pub fn umount(mountpoint: &Path) -> Result<i32> {
    let mnt = mountpoint.canonicalize().with_context(|| format!("{}: no such mount point", mountpoint.display()))?;
    let Some((_, store)) = warcfs_mounts().into_iter().find(|(m, _)| *m == mnt) else {
        bail!("{}: not a warcfs mount", mnt.display());
    };
    let out = std::process::Command::new("fusermount3").arg("-u").arg(&mnt).output().context("running fusermount3 -u")?;
    if !out.status.success() {
        bail!("{}: cannot unmount: {}", mnt.display(), String::from_utf8_lossy(&out.stderr).trim());
    }
    wait_released(&store, &format!("{} unmounted", mnt.display()));
    // Files the daemon could not store (a full disk) stay staged: durable, and stored by the
    // next mount. Not a clean finish, and said so.
    let left = staged(&store);
    if left > 0 {
        bail!(
            "{} unmounted, but {left} files written through it could not be stored yet (see {}/warcfs.log); they are kept in {}/staging and stored by the next mount",
            mnt.display(),
            store.display(),
            store.display()
        );
    }
    println!("unmounted {}; every file written through it is stored ({})", mnt.display(), store.display());
    Ok(0)
}

/// Before `warcfs mount`: if the store's lock is held by a mount daemon whose mount is gone
/// (it is still storing what was written), waits for it; a store mounted elsewhere, or in
/// use by another command, is left for the open to refuse.
pub fn wait_for_draining_daemon(store: &Path) {
    if !lock_held(store) {
        return;
    }
    let Some(pid) = holder(store) else { return };
    let canonical = store.canonicalize().unwrap_or(store.to_path_buf());
    let still_mounted = warcfs_mounts().iter().any(|(_, s)| *s == canonical);
    if is_mount_daemon(pid) && !still_mounted {
        wait_released(store, "waiting for the previous mount to finish");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(super::unescape(r"/tmp/a\040b\011c"), "/tmp/a b\tc");
        assert_eq!(super::unescape(r"/plain/path"), "/plain/path");
        assert_eq!(super::unescape(r"/ends\04"), r"/ends\04");
    }
}
