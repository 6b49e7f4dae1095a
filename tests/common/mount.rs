//! Mounts for the end-to-end tests: `Mounted`, a live mount and its daemon (reaped, or
//! killed, whatever the test does), `MountFixture`, the store and mount point most mount
//! tests start from, and `Mount`, the lighter guard of the tests that only need a mount up;
//! with the waits and byte comparisons the mount tests share.
//!
//! A test process that mounts with `Mounted` makes itself a child subreaper, so every daemon
//! (the grandchild that `warcfs mount` forks and leaves behind) becomes its child: its exit
//! status can be checked and a killed daemon is really reaped.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::IntoRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Once;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use rand::rngs::StdRng;
use rand::{Rng, RngCore};
use tempfile::TempDir;

use super::*;

/// Makes this process the reaper of orphaned descendants (the mount daemons).
pub fn become_subreaper() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: prctl with integer arguments.
        let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong) };
        assert_eq!(rc, 0, "prctl(PR_SET_CHILD_SUBREAPER): {}", io::Error::last_os_error());
    });
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
    /// Gone, but not our child, so its status is unknown.
    Gone,
}

/// Reaps `pid` if it has exited (or tells that it is gone when it is not our child).
pub fn try_reap(pid: i32) -> Option<Exit> {
    match waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)) {
        Ok(WaitStatus::Exited(_, c)) => Some(Exit::Code(c)),
        Ok(WaitStatus::Signaled(_, sig, _)) => Some(Exit::Signal(sig as i32)),
        Ok(_) => None,
        Err(nix::errno::Errno::ECHILD) => match fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => Some(Exit::Gone),
            Ok(st) => {
                let state = st.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next()).unwrap_or('?');
                if state == 'Z' || state == 'X' {
                    Some(Exit::Gone)
                } else {
                    None
                }
            }
        },
        Err(e) => panic!("waitpid {pid}: {e}"),
    }
}

pub fn wait_exit(pid: i32, timeout: Duration) -> Option<Exit> {
    let t0 = Instant::now();
    loop {
        if let Some(e) = try_reap(pid) {
            return Some(e);
        }
        if t0.elapsed() > timeout {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Drops the kernel's clean cached pages, so that the next read of a file goes to its
/// filesystem.
pub fn drop_caches() {
    fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
}

/// Whether `mnt` (canonical) is a mount point in this mount namespace.
pub fn is_mounted(mnt: &Path) -> bool {
    let want = mnt.to_str().unwrap();
    fs::read_to_string("/proc/self/mountinfo").unwrap().lines().any(|l| l.split(' ').nth(4) == Some(want))
}

pub fn fusermount_u(mnt: &Path) -> Result<(), String> {
    let out = Command::new("fusermount3").arg("-u").arg(mnt).stdin(Stdio::null()).output().map_err(|e| format!("spawn fusermount3: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("fusermount3 -u {}: {} {}", mnt.display(), out.status, String::from_utf8_lossy(&out.stderr).trim()))
    }
}

pub fn umount_lazy(mnt: &Path) -> Result<(), String> {
    let out = Command::new("umount").arg("-l").arg(mnt).stdin(Stdio::null()).output().map_err(|e| format!("spawn umount: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("umount -l {}: {} {}", mnt.display(), out.status, String::from_utf8_lossy(&out.stderr).trim()))
    }
}

pub fn log_tail(store: &Path) -> String {
    let log = fs::read_to_string(store.join("warcfs.log")).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(25)..].join("\n")
}

/// A live mount and its daemon. Dropping it unmounts (fusermount3 -u, else umount -l) and
/// waits for the daemon; a daemon still alive after 10 s is killed with SIGKILL.
pub struct Mounted {
    pub mnt: PathBuf,
    pub store: PathBuf,
    /// The daemon's pid (from STORE/lock).
    pub pid: i32,
    /// Whether this guard still owns the mount (false once unmounted, or handed over).
    pub live: bool,
}

impl Mounted {
    pub fn new(store: &Path, mnt: &Path) -> Mounted {
        Mounted::with(store, mnt, &[])
    }

    pub fn with(store: &Path, mnt: &Path, opts: &[&str]) -> Mounted {
        Mounted::with_env(store, mnt, opts, &[])
    }

    /// Mounts with extra environment variables for the daemon.
    pub fn with_env(store: &Path, mnt: &Path, opts: &[&str], env: &[(&str, &str)]) -> Mounted {
        Mounted::with_limit(store, mnt, opts, env, None)
    }

    /// `with_env`, the daemon's open-file limit (soft and hard) set to `nofile` if given.
    pub fn with_limit(store: &Path, mnt: &Path, opts: &[&str], env: &[(&str, &str)], nofile: Option<u64>) -> Mounted {
        become_subreaper();
        fs::create_dir_all(mnt).unwrap();
        let mnt = mnt.canonicalize().unwrap();
        let mut args = vec!["mount".to_string(), s(store), s(&mnt)];
        for o in opts {
            args.push("-o".into());
            args.push(o.to_string());
        }
        let mut cmd = warcfs();
        cmd.args(&args).envs(env.iter().copied());
        if let Some(n) = nofile {
            use std::os::unix::process::CommandExt;
            // SAFETY: setrlimit only, between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    let lim = libc::rlimit { rlim_cur: n, rlim_max: n };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let out = cmd.output().expect("spawn warcfs mount");
        let r = Run { args: args.clone(), code: out.status.code(), stdout: out.stdout, stderr: String::from_utf8_lossy(&out.stderr).into_owned() };
        // From here on a guard owns whatever got mounted.
        let pid = fs::read_to_string(store.join("lock")).ok().and_then(|p| p.trim().parse::<i32>().ok()).unwrap_or(-1);
        let m = Mounted { mnt: mnt.clone(), store: store.to_path_buf(), pid, live: true };
        assert!(r.ok(), "mount failed:\n{}\nlog:\n{}", r.describe(), log_tail(store));
        assert!(pid > 0, "no daemon pid in {}/lock after mounting", store.display());
        assert!(is_mounted(&mnt), "warcfs mount exited 0 but {} is not a mount point", mnt.display());
        assert!(r.stderr.is_empty(), "mount printed to stderr: {}", r.stderr);
        m
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel.trim_start_matches('/'))
    }

    /// Unmounts cleanly and returns the daemon's exit (it finishes queued ingests first).
    pub fn unmount(mut self) -> Exit {
        let t0 = Instant::now();
        loop {
            match fusermount_u(&self.mnt) {
                Ok(()) => break,
                // A release still in flight can keep the mount busy for a moment.
                Err(e) if t0.elapsed() > Duration::from_secs(20) => panic!("cannot unmount: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
        let exit = wait_exit(self.pid, Duration::from_secs(600));
        self.live = false;
        match exit {
            Some(e) => {
                assert!(!is_mounted(&self.mnt), "{} still mounted after the daemon exited", self.mnt.display());
                e
            }
            None => {
                let _ = kill(Pid::from_raw(self.pid), Signal::SIGKILL);
                let _ = wait_exit(self.pid, Duration::from_secs(10));
                panic!("daemon {} did not exit within 600 s of unmount; log:\n{}", self.pid, log_tail(&self.store));
            }
        }
    }

    /// Unmounts and asserts the daemon exited 0.
    pub fn unmount_clean(self) {
        let store = self.store.clone();
        let e = self.unmount();
        assert_eq!(e, Exit::Code(0), "daemon exit after a clean unmount; log:\n{}", log_tail(&store));
    }

    /// SIGKILLs the daemon and reaps it; the dead mount stays until `unmount_dead`.
    pub fn kill_daemon(&mut self) -> Exit {
        kill(Pid::from_raw(self.pid), Signal::SIGKILL).unwrap_or_else(|e| panic!("kill -9 {}: {e}", self.pid));
        wait_exit(self.pid, Duration::from_secs(20)).unwrap_or_else(|| panic!("daemon {} still alive 20 s after SIGKILL", self.pid))
    }

    /// Whether the daemon still runs (it is not reaped here).
    pub fn running(&self) -> bool {
        fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .is_ok_and(|st| !matches!(st.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next()), Some('Z' | 'X')))
    }

    /// Unmounts a daemon that may end on its own meanwhile (a power-cut test's daemon dies at
    /// its cut, perhaps in the unmount itself) and returns how it ended.
    pub fn finish(mut self) -> Exit {
        let t0 = Instant::now();
        let mut exit = None;
        while exit.is_none() && fusermount_u(&self.mnt).is_err() {
            assert!(t0.elapsed() < Duration::from_secs(60), "cannot unmount {}", self.mnt.display());
            exit = try_reap(self.pid);
            std::thread::sleep(Duration::from_millis(100));
        }
        let exit = exit.or_else(|| wait_exit(self.pid, Duration::from_secs(600)));
        let exit = exit.unwrap_or_else(|| panic!("daemon {} did not exit; log:\n{}", self.pid, log_tail(&self.store)));
        if is_mounted(&self.mnt) {
            fusermount_u(&self.mnt).or_else(|e| umount_lazy(&self.mnt).map_err(|e2| format!("{e}; then {e2}"))).unwrap();
        }
        self.live = false;
        exit
    }

    /// Removes the mount of a dead daemon.
    pub fn unmount_dead(mut self) {
        if let Err(e) = fusermount_u(&self.mnt) {
            umount_lazy(&self.mnt).unwrap_or_else(|e2| panic!("{e}; then {e2}"));
        }
        assert!(!is_mounted(&self.mnt), "{} is still mounted after its daemon was killed and unmounted", self.mnt.display());
        self.live = false;
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if !self.live {
            return;
        }
        self.live = false;
        if is_mounted(&self.mnt) {
            if let Err(e) = fusermount_u(&self.mnt) {
                eprintln!("cleanup: {e}; trying umount -l");
                if let Err(e) = umount_lazy(&self.mnt) {
                    eprintln!("cleanup: {e}");
                }
            }
        }
        if self.pid > 0 && wait_exit(self.pid, Duration::from_secs(10)).is_none() {
            eprintln!("cleanup: daemon {} still alive 10 s after unmount; SIGKILL", self.pid);
            let _ = kill(Pid::from_raw(self.pid), Signal::SIGKILL);
            let _ = wait_exit(self.pid, Duration::from_secs(10));
        }
    }
}

/// The set-up of a mount test: a temporary directory with a store path (`STORE`, made by the
/// first mount or import) and a mount point (`mnt`), and the mounts of that store there. Each
/// mount is a `Mounted` guard; should one be left mounted all the same (a guard given up by
/// hand), dropping the fixture unmounts it before the directory is removed.
pub struct MountFixture {
    pub tmp: TempDir,
    pub store: PathBuf,
    pub mnt: PathBuf,
}

impl MountFixture {
    pub fn new() -> MountFixture {
        let tmp = TempDir::new().unwrap();
        let (store, mnt) = (tmp.path().join("store"), tmp.path().join("mnt"));
        MountFixture { tmp, store, mnt }
    }

    /// A path in the fixture's directory, beside the store.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    /// The store with one real sample imported (`store_with_sample`); returns the sample.
    pub fn with_sample(&self, sample: &str) -> PathBuf {
        let (store, src) = store_with_sample(self.tmp.path(), sample);
        assert_eq!(store, self.store);
        src
    }

    pub fn mount(&self) -> Mounted {
        Mounted::new(&self.store, &self.mnt)
    }

    /// Mounts with `-o` options.
    pub fn mount_with(&self, opts: &[&str]) -> Mounted {
        Mounted::with(&self.store, &self.mnt, opts)
    }

    /// Mounts with `-o` options and extra environment variables for the daemon.
    pub fn mount_env(&self, opts: &[&str], env: &[(&str, &str)]) -> Mounted {
        Mounted::with_env(&self.store, &self.mnt, opts, env)
    }
}

impl Drop for MountFixture {
    fn drop(&mut self) {
        let Ok(m) = self.mnt.canonicalize() else { return };
        if is_mounted(&m) {
            eprintln!("cleanup: {} is still mounted; unmounting", m.display());
            if fusermount_u(&m).is_err() {
                let _ = umount_lazy(&m);
            }
        }
    }
}

/// Whether the kernel let the mount of `store` open gzip files for direct I/O (Linux 6.6+,
/// which lets such files be mapped): what a record lookup costs, and how many requests it
/// makes, depends on it.
pub fn gzip_files_direct(store: &Path) -> bool {
    !fs::read_to_string(store.join("warcfs.log")).unwrap_or_default().contains("cannot mmap direct-I/O files")
}

/// Polls `f` until it gives Ok, or panics with the last Err after `timeout`.
pub fn wait_until<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Result<T, String>) -> T {
    let t0 = Instant::now();
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) if t0.elapsed() > timeout => panic!("timed out after {timeout:?} waiting for {what}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// Waits (up to 10 minutes) until nothing is staged, every file written through the mount
/// ingested, and no staged bytes are counted; returns those stats. (`wait_ingested` is the
/// lighter wait of the tests that use `Mount`.)
pub fn wait_stored(store: &Path) -> serde_json::Value {
    let st = wait_until("staged_files == 0", Duration::from_secs(600), || {
        let st = stats(store);
        if num(&st, "staged_files") == 0 {
            Ok(st)
        } else {
            Err(format!("stats {st}; log:\n{}", log_tail(store)))
        }
    });
    assert_eq!(num(&st, "staged_bytes"), 0, "nothing staged but staged_bytes > 0: {st}");
    st
}

/// The errno of a failed call (None if it succeeded).
pub fn errno_of<T>(r: io::Result<T>) -> Option<i32> {
    r.err().and_then(|e| e.raw_os_error())
}

pub fn first_diff(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()))
}

pub fn assert_bytes(path: &Path, want: &[u8], when: &str) {
    let got = fs::read(path).unwrap_or_else(|e| panic!("{when}: read {}: {e}", path.display()));
    if got != want {
        panic!("{when}: {} differs: {} bytes vs {} expected, first difference at byte {}", path.display(), got.len(), want.len(), first_diff(&got, want));
    }
}

/// Every regular file under `mnt` is exactly the expected set (store path -> source), with
/// the source's bytes.
pub fn assert_tree(mnt: &Path, files: &BTreeMap<String, PathBuf>, when: &str) {
    let mut seen = BTreeSet::new();
    for e in walkdir::WalkDir::new(mnt).follow_links(false) {
        let e = e.unwrap_or_else(|e| panic!("{when}: walking {}: {e}", mnt.display()));
        if e.file_type().is_file() {
            seen.insert(format!("/{}", e.path().strip_prefix(mnt).unwrap().to_str().unwrap()));
        }
    }
    let want: BTreeSet<String> = files.keys().cloned().collect();
    assert_eq!(seen, want, "{when}: the files in the mount");
    for (p, src) in files {
        let path = mnt.join(p.trim_start_matches('/'));
        let want = fs::read(src).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), want.len() as u64, "{when}: st_size of {p}");
        assert_bytes(&path, &want, when);
    }
}

pub fn assert_model(mnt: &Path, model: &BTreeMap<String, Vec<u8>>, when: &str) {
    for (rel, want) in model {
        let p = mnt.join(rel);
        assert_eq!(fs::metadata(&p).unwrap_or_else(|e| panic!("{when}: stat {rel}: {e}")).len(), want.len() as u64, "{when}: st_size of {rel}");
        assert_bytes(&p, want, when);
    }
}

/// close(2) with its result checked (a FUSE close carries the flush reply).
pub fn close_checked(f: File) -> io::Result<()> {
    let fd = f.into_raw_fd();
    // SAFETY: we own fd and close it once.
    if unsafe { libc::close(fd) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Writes `data` to a new file in random-sized chunks, fsyncing now and then; fsync + close
/// at the end.
pub fn write_chunked(path: &Path, data: &[u8], rng: &mut StdRng) -> io::Result<()> {
    let mut f = OpenOptions::new().write(true).create_new(true).open(path)?;
    let mut off = 0;
    while off < data.len() {
        let n = match rng.gen_range(0..4) {
            0 => rng.gen_range(1..512),
            1 => rng.gen_range(512..64 << 10),
            _ => rng.gen_range(64 << 10..=1 << 20),
        }
        .min(data.len() - off);
        f.write_all(&data[off..off + n])?;
        off += n;
        if rng.gen_ratio(1, 8) {
            f.sync_data()?;
        }
    }
    f.sync_all()?;
    close_checked(f)
}

pub fn random_bytes(rng: &mut StdRng, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rng.fill_bytes(&mut v);
    v
}

pub fn seed_from_env(var: &str) -> u64 {
    std::env::var(var).ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| rand::thread_rng().gen())
}

pub fn real_file(rel: &str) -> Vec<u8> {
    let p = real_corpus().join(rel);
    fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

pub fn cp_r(srcs: &[&Path], dest: &Path) {
    let out = Command::new("cp").arg("-r").args(srcs).arg(dest).stdin(Stdio::null()).output().expect("spawn cp");
    assert!(out.status.success(), "cp -r {srcs:?} {} failed ({}): {}", dest.display(), out.status, String::from_utf8_lossy(&out.stderr));
}

/// A live mount that is always unmounted, even when the test fails.
pub struct Mount {
    pub mnt: PathBuf,
    store: PathBuf,
}

impl Mount {
    pub fn new(store: &Path, mnt: &Path) -> Mount {
        fs::create_dir_all(mnt).unwrap();
        ok(&["mount", &s(store), &s(mnt)]);
        Mount { mnt: mnt.to_path_buf(), store: store.to_path_buf() }
    }
}

/// Whether a process holds the store's lock (a daemon still shutting down, say).
fn store_locked(store: &Path) -> bool {
    use std::os::fd::AsRawFd;
    let Ok(f) = fs::File::open(store.join("lock")) else { return false };
    // SAFETY: flock on a descriptor we own; released when `f` closes.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) != 0 }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let m = s(&self.mnt);
        let unmounted = Command::new("fusermount3").args(["-u", &m]).status().is_ok_and(|st| st.success());
        if !unmounted {
            let _ = Command::new("umount").args(["-l", &m]).status();
        }
        // The daemon finishes its ingests and releases the store after unmount.
        let t0 = std::time::Instant::now();
        while (fs::read_to_string("/proc/mounts").unwrap_or_default().contains(&format!(" {m} ")) || store_locked(&self.store))
            && t0.elapsed() < std::time::Duration::from_secs(20)
        {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}
