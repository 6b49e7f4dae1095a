//! End-to-end tests of `warcfs mount`: real FUSE mounts in temp dirs, a real RocksDB store,
//! the real sample corpus and the generated crawl corpus, and real clients (`cp`, `wget`,
//! `warcio`, threads doing pwrite/pread). Every mount is owned by a `Mounted` guard that
//! unmounts it (and reaps or kills its daemon) even when a test fails.
//!
//! The test process makes itself a child subreaper, so every daemon (the grandchild that
//! `warcfs mount` forks and leaves behind) becomes its child: its exit status can be checked
//! and a killed daemon is really reaped.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::IntoRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Once, OnceLock};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, RngCore, SeedableRng};
use tempfile::TempDir;

use common::*;

// ---------------------------------------------------------------------------------------
// Daemons, mounts and waiting
// ---------------------------------------------------------------------------------------

/// Makes this process the reaper of orphaned descendants (the mount daemons).
fn become_subreaper() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: prctl with integer arguments.
        let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong) };
        assert_eq!(rc, 0, "prctl(PR_SET_CHILD_SUBREAPER): {}", io::Error::last_os_error());
    });
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exit {
    Code(i32),
    Signal(i32),
    /// Gone, but not our child, so its status is unknown.
    Gone,
}

/// Reaps `pid` if it has exited (or tells that it is gone when it is not our child).
fn try_reap(pid: i32) -> Option<Exit> {
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

fn wait_exit(pid: i32, timeout: Duration) -> Option<Exit> {
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

/// Whether `mnt` (canonical) is a mount point in this mount namespace.
/// Drops the kernel's clean cached pages, so that the next read of a file goes to its
/// filesystem.
fn drop_caches() {
    fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
}

fn is_mounted(mnt: &Path) -> bool {
    let want = mnt.to_str().unwrap();
    fs::read_to_string("/proc/self/mountinfo").unwrap().lines().any(|l| l.split(' ').nth(4) == Some(want))
}

fn fusermount_u(mnt: &Path) -> Result<(), String> {
    let out = Command::new("fusermount3").arg("-u").arg(mnt).stdin(Stdio::null()).output().map_err(|e| format!("spawn fusermount3: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("fusermount3 -u {}: {} {}", mnt.display(), out.status, String::from_utf8_lossy(&out.stderr).trim()))
    }
}

fn umount_lazy(mnt: &Path) -> Result<(), String> {
    let out = Command::new("umount").arg("-l").arg(mnt).stdin(Stdio::null()).output().map_err(|e| format!("spawn umount: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("umount -l {}: {} {}", mnt.display(), out.status, String::from_utf8_lossy(&out.stderr).trim()))
    }
}

fn log_tail(store: &Path) -> String {
    let log = fs::read_to_string(store.join("warcfs.log")).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(25)..].join("\n")
}

/// A live mount and its daemon. Dropping it unmounts (fusermount3 -u, else umount -l) and
/// waits for the daemon; a daemon still alive after 10 s is killed with SIGKILL.
struct Mounted {
    mnt: PathBuf,
    store: PathBuf,
    pid: i32,
    live: bool,
}

impl Mounted {
    fn new(store: &Path, mnt: &Path) -> Mounted {
        Mounted::with(store, mnt, &[])
    }

    fn with(store: &Path, mnt: &Path, opts: &[&str]) -> Mounted {
        Mounted::with_env(store, mnt, opts, &[])
    }

    /// Mounts with extra environment variables for the daemon.
    fn with_env(store: &Path, mnt: &Path, opts: &[&str], env: &[(&str, &str)]) -> Mounted {
        Mounted::with_limit(store, mnt, opts, env, None)
    }

    /// `with_env`, the daemon's open-file limit (soft and hard) set to `nofile` if given.
    fn with_limit(store: &Path, mnt: &Path, opts: &[&str], env: &[(&str, &str)], nofile: Option<u64>) -> Mounted {
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

    fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel.trim_start_matches('/'))
    }

    /// Unmounts cleanly and returns the daemon's exit (it finishes queued ingests first).
    fn unmount(mut self) -> Exit {
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
    fn unmount_clean(self) {
        let store = self.store.clone();
        let e = self.unmount();
        assert_eq!(e, Exit::Code(0), "daemon exit after a clean unmount; log:\n{}", log_tail(&store));
    }

    /// SIGKILLs the daemon and reaps it; the dead mount stays until `unmount_dead`.
    fn kill_daemon(&mut self) -> Exit {
        kill(Pid::from_raw(self.pid), Signal::SIGKILL).unwrap_or_else(|e| panic!("kill -9 {}: {e}", self.pid));
        wait_exit(self.pid, Duration::from_secs(20)).unwrap_or_else(|| panic!("daemon {} still alive 20 s after SIGKILL", self.pid))
    }

    /// Removes the mount of a dead daemon.
    fn unmount_dead(mut self) {
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

/// Polls `f` until it gives Ok, or panics with the last Err after `timeout`.
fn wait_until<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Result<T, String>) -> T {
    let t0 = Instant::now();
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) if t0.elapsed() > timeout => panic!("timed out after {timeout:?} waiting for {what}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// Waits until nothing is staged (every written file ingested); returns those stats.
fn wait_ingested(store: &Path) -> serde_json::Value {
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

fn assert_fsck_clean(store: &Path) {
    let r = run(&["fsck", &s(store)]);
    assert!(r.ok() && r.out().contains(": clean ("), "fsck should be clean:\n{}", r.describe());
}

// ---------------------------------------------------------------------------------------
// Comparing bytes
// ---------------------------------------------------------------------------------------

fn first_diff(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()))
}

fn assert_bytes(path: &Path, want: &[u8], when: &str) {
    let got = fs::read(path).unwrap_or_else(|e| panic!("{when}: read {}: {e}", path.display()));
    if got != want {
        panic!("{when}: {} differs: {} bytes vs {} expected, first difference at byte {}", path.display(), got.len(), want.len(), first_diff(&got, want));
    }
}

/// Every regular file under `mnt` is exactly the expected set (store path -> source), with
/// the source's bytes.
fn assert_tree(mnt: &Path, files: &BTreeMap<String, PathBuf>, when: &str) {
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

fn assert_model(mnt: &Path, model: &BTreeMap<String, Vec<u8>>, when: &str) {
    for (rel, want) in model {
        let p = mnt.join(rel);
        assert_eq!(fs::metadata(&p).unwrap_or_else(|e| panic!("{when}: stat {rel}: {e}")).len(), want.len() as u64, "{when}: st_size of {rel}");
        assert_bytes(&p, want, when);
    }
}

/// close(2) with its result checked (a FUSE close carries the flush reply).
fn close_checked(f: File) -> io::Result<()> {
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
fn write_chunked(path: &Path, data: &[u8], rng: &mut StdRng) -> io::Result<()> {
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

fn random_bytes(rng: &mut StdRng, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rng.fill_bytes(&mut v);
    v
}

fn seed_from_env(var: &str) -> u64 {
    std::env::var(var).ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| rand::thread_rng().gen())
}

fn real_file(rel: &str) -> Vec<u8> {
    let p = real_corpus().join(rel);
    fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn cp_r(srcs: &[&Path], dest: &Path) {
    let out = Command::new("cp").arg("-r").args(srcs).arg(dest).stdin(Stdio::null()).output().expect("spawn cp");
    assert!(out.status.success(), "cp -r {srcs:?} {} failed ({}): {}", dest.display(), out.status, String::from_utf8_lossy(&out.stderr));
}

// ---------------------------------------------------------------------------------------
// 1. cp -r into the mount, remount
// ---------------------------------------------------------------------------------------

#[test]
fn cp_corpus_into_mount_then_remount_is_byte_identical() {
    let real = real_corpus();
    let crawl = crawl_corpus().to_path_buf();
    let srcs = vec![real.clone(), crawl.clone()];
    let files = expected_files(&srcs, "/");
    let logical: u64 = files.values().map(|p| fs::metadata(p).unwrap().len()).sum();

    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let mnt = tmp.path().join("mnt");

    let m = Mounted::new(&store, &mnt);
    cp_r(&[&real, &crawl], &m.mnt);
    assert_tree(&m.mnt, &files, "right after cp (staged)");
    let st = wait_ingested(&store);
    assert_eq!(num(&st, "files"), files.len() as u64, "{st}");
    assert_tree(&m.mnt, &files, "after ingest, before unmount");
    m.unmount_clean();

    let m = Mounted::new(&store, &mnt);
    assert_tree(&m.mnt, &files, "after remount");
    let st = stats(&store); // read-only while mounted
    m.unmount_clean();

    // The same sources through `warcfs import`, for reference.
    let refstore = tmp.path().join("ref");
    ok(&["import", &s(&refstore), &s(&real), &s(&crawl)]);
    let rst = stats(&refstore);
    eprintln!("cp into mount: {st}\nimport of the same: {rst}");

    assert_eq!(num(&st, "files"), files.len() as u64, "{st}");
    assert_eq!(num(&st, "logical_bytes"), logical, "{st}");
    assert_eq!(num(&st, "staged_files"), 0, "{st}");
    for k in ["files", "logical_bytes", "records", "payloads", "unique_payloads", "gzip_members", "gzip_members_raw"] {
        assert_eq!(num(&st, k), num(&rst, k), "{k}: ingest through the mount vs import\nmount:  {st}\nimport: {rst}");
    }
    let (members, raw) = (num(&st, "gzip_members"), num(&st, "gzip_members_raw"));
    assert!(members > 1000 && raw * 100 <= members, "gzip members kept raw should be few: {raw} of {members}");
    assert!(num(&st, "unique_payloads") < num(&st, "payloads"), "cross-crawl duplicates should dedup: {st}");
    let stored = num(&st, "stored_bytes");
    // The packs as ingest writes them (zstd level 1 until gc settles them): 50.0 % of the
    // files at 8369b7c, where level 3 gave just under half.
    assert!((stored as f64) < 0.55 * logical as f64, "stored_bytes {stored} should be much smaller than logical {logical}: {st}");
    let rstored = num(&rst, "stored_bytes");
    assert!(stored.abs_diff(rstored) * 10 <= rstored, "stored bytes via the mount ({stored}) vs import ({rstored}) differ by > 10 %");
    assert_fsck_clean(&store);
}

/// Whether the kernel let the mount of `store` open gzip files for direct I/O (Linux 6.6+,
/// which lets such files be mapped): what a record lookup costs, and how many requests it
/// makes, depends on it.
fn gzip_files_direct(store: &Path) -> bool {
    !fs::read_to_string(store.join("warcfs.log")).unwrap_or_default().contains("cannot mmap direct-I/O files")
}

/// How many gzip members the mounted daemon of `store` has rebuilt so far.
fn members_rebuilt(store: &Path) -> u64 {
    let st = stats(store);
    let reads = st.get("reads_since_mount").unwrap_or_else(|| panic!("a mounted store's stats have reads_since_mount: {st}"));
    num(reads, "members_rebuilt")
}

/// A replay tool reads one record of a .warc.gz at its CDX offset through a buffered reader:
/// Python's takes a record longer than its 4 KiB buffer as one read of whole buffers and a
/// second, unaligned one for the rest. Neither read may rebuild the next member (a level-9
/// deflate as costly as the record's own), and the record must read back exact.
#[test]
fn record_lookup_rebuilds_only_its_own_member() {
    let name = "crawl-1.warc.gz";
    let src = crawl_corpus().join(name);
    let bytes = fs::read(&src).unwrap();
    let mut plain = Vec::new();
    let members: Vec<(u64, u64)> = warcfs::format::gzip::split(&bytes, &mut plain)
        .into_iter()
        .filter_map(|r| match r {
            warcfs::format::gzip::Region::Member(m) => Some((m.start, m.comp_len)),
            warcfs::format::gzip::Region::Raw { .. } => None,
        })
        .collect();
    // Records past a 4 KiB buffer, at unaligned offsets, each with a member after it.
    let picked: Vec<(u64, u64)> = members
        .windows(2)
        .map(|w| w[0])
        .filter(|&(start, len)| start % 4096 != 0 && len > 8192 && len % 4096 != 0 && len < 256 << 10)
        .step_by(7)
        .take(5)
        .collect();
    assert_eq!(picked.len(), 5, "{name} should hold records of 8-256 KiB: {} members", members.len());

    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    ok(&["import", &s(&store), &s(&src)]);
    let m = Mounted::new(&store, &tmp.path().join("mnt"));
    if !gzip_files_direct(&store) {
        eprintln!("skipped: this kernel reads gzip files through the page cache");
        return m.unmount_clean();
    }
    let before = members_rebuilt(&store);
    for &(start, len) in &picked {
        let f = File::open(m.path(name)).unwrap();
        let whole = len - len % 4096;
        let mut got = vec![0u8; whole as usize];
        let n = f.read_at(&mut got, start).unwrap();
        got.truncate(n);
        // Then 4 KiB at a time, as the buffer refills, until the record is complete.
        while (got.len() as u64) < len {
            let mut buf = vec![0u8; 4096];
            let k = f.read_at(&mut buf, start + got.len() as u64).unwrap();
            assert!(k > 0, "EOF inside the record at {start}+{}", got.len());
            got.extend_from_slice(&buf[..k]);
        }
        let want = &bytes[start as usize..(start + len) as usize];
        assert!(got.len() >= want.len() && &got[..want.len()] == want, "record at {start} (+{len}) reads back different bytes");
    }
    let rebuilt = members_rebuilt(&store) - before;
    // Five deflates of 8-256 KiB members take milliseconds: the stats must show where.
    let reads = stats(&store)["reads_since_mount"].clone();
    m.unmount_clean();
    assert_eq!(rebuilt, picked.len() as u64, "looking up {} records rebuilt {rebuilt} members: neighbours were rebuilt too", picked.len());
    assert!(num(&reads, "member_deflate_us") > 100 && num(&reads, "member_gather_us") > 0, "rebuild times missing from the read counters: {reads}");
}

/// Files written through the mount wait for their ingest without holding a descriptor
/// each: with the ingest held and the daemon's open files limited to 256, a copy of 600
/// files in succeeds (it failed with EMFILE past about 240), and once the ingest goes on
/// every file is stored exact.
#[test]
#[cfg_attr(not(debug_assertions), ignore = "the hold exists in debug builds only")]
fn files_waiting_for_their_ingest_hold_no_descriptor() {
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let gate = Gate(tmp.path().join("gate"));
    gate.close();
    let hold = gate.hold("ingest");
    let m = Mounted::with_limit(&store, &tmp.path().join("mnt"), &[], &[("WARCFS_HOLD", &hold)], Some(256));
    fs::create_dir(m.path("d")).unwrap();
    let body = |i: usize| format!("file {i}\n").repeat(1 + i % 7).into_bytes();
    let failed: Vec<String> = (0..600).filter_map(|i| fs::write(m.path(&format!("d/f{i}")), body(i)).err().map(|e| format!("f{i}: {e}"))).collect();
    assert!(failed.is_empty(), "{} of 600 writes failed, the first: {:?}", failed.len(), failed.first());
    // Still staged (the ingest is held), and readable from staging.
    assert_eq!(fs::read(m.path("d/f599")).unwrap(), body(599));
    gate.open();
    wait_ingested(&store);
    for i in 0..600 {
        assert_eq!(fs::read(m.path(&format!("d/f{i}"))).unwrap(), body(i), "f{i}");
    }
    m.unmount_clean();
}

/// A staging file let go while its file waited is opened again by path, outside the staged
/// map's lock; if the file was stored and staged anew meanwhile, the path names another file.
/// Held there (`staged_reopen`) while the file is stored and written again, a reader must not
/// bring the old staging file back: it would have been read, synced and stored in place of
/// the new bytes, which the writer's close had reported durable.
#[test]
#[cfg_attr(not(debug_assertions), ignore = "the holds exist in debug builds only")]
fn a_reopened_staging_file_is_the_current_one() {
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let (ingest, reopen) = (Gate(tmp.path().join("ingest")), Gate(tmp.path().join("reopen")));
    ingest.close();
    reopen.close();
    let holds = format!("{},{}", ingest.hold("ingest"), reopen.hold("staged_reopen"));
    let m = Mounted::with_env(&store, &tmp.path().join("mnt"), &[], &[("WARCFS_HOLD", &holds)]);
    let (v1, v2) = (b"first bytes\n".repeat(100), b"second bytes, kept\n".repeat(100));
    let path = m.path("f.warc");
    fs::write(&path, &v1).unwrap();
    // The kernel sends the writer's release after `close` returns: until the daemon has
    // taken it, the staging file is still open and a reader would not reopen it.
    let staging = store.join("staging");
    wait_until("the writer's release", Duration::from_secs(10), || {
        let open = fs::read_dir(format!("/proc/{}/fd", m.pid)).map_err(|e| e.to_string())?.flatten().filter(|e| fs::read_link(e.path()).is_ok_and(|t| t.starts_with(&staging))).count();
        if open == 0 { Ok(()) } else { Err(format!("{open} staging files open")) }
    });
    // A reader of the staged file, past the page cache (O_DIRECT: no page of the file is
    // locked while its request waits, which any open would wait for): it opens the staging
    // file by path and is held before it takes it.
    let reader = std::thread::spawn({
        let path = path.clone();
        move || {
            use std::os::unix::fs::OpenOptionsExt;
            let f = OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(path)?;
            let mut buf = vec![0u8; 64 << 10];
            let n = f.read_at(&mut buf, 0)?;
            buf.truncate(n);
            io::Result::Ok(buf)
        }
    });
    std::thread::sleep(Duration::from_millis(500));
    assert!(!reader.is_finished(), "the reader is held at the reopen");
    // Meanwhile the file is stored, then written again (staged anew, its ingest held).
    ingest.open();
    wait_ingested(&store);
    ingest.close();
    fs::write(&path, &v2).unwrap();
    let want = v2.clone();
    reopen.open();
    let got = reader.join().unwrap().unwrap();
    assert!(got == v1 || got == want, "the reader gets one version or the other");
    ingest.open();
    wait_ingested(&store);
    drop_caches();
    assert!(fs::read(&path).unwrap() == want, "the bytes written last are the ones stored");
    m.unmount_clean();
}

/// Building `/.warcfs/index.cdxj` (seconds on a large store) holds no FUSE thread: with a
/// build held (`WARCFS_HOLD=index_build`), more requests for the index than the daemon has
/// threads wait for it, and a stored file still reads; they answer once it is built, with
/// the index of the store as it is then. (The build ran under a mutex on the request's
/// thread, so four such requests stalled every other file of the mount.)
#[test]
#[cfg_attr(not(debug_assertions), ignore = "the hold exists in debug builds only")]
fn a_build_of_the_index_file_holds_no_request_thread() {
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let real = real_corpus();
    ok(&["import", &s(&store), &s(&real.join("iipc-jwarc/cc.warc.gz"))]);
    let gate = Gate(tmp.path().join("gate"));
    let hold = gate.hold("index_build");
    let m = Mounted::with_env(&store, &tmp.path().join("mnt"), &[], &[("WARCFS_HOLD", &hold)]);
    let index = m.path(".warcfs/index.cdxj");
    // Handles on the index, so that each fstat below is a request of its own (stats by
    // path would wait in the kernel behind one lookup).
    let handles: Vec<File> = (0..4).map(|_| File::open(&index).unwrap()).collect();
    let before = handles[0].metadata().unwrap().len();
    // The store changes: the next request for the index builds it again, held at the gate.
    fs::copy(real.join("N0taN3rd-node-warc/parseMe.warc.gz"), m.path("parseMe.warc.gz")).unwrap();
    wait_ingested(&store);
    std::thread::sleep(Duration::from_millis(1100));
    gate.close();
    let waiting: Vec<_> = handles.into_iter().map(|f| std::thread::spawn(move || f.metadata().map(|md| md.len()))).collect();
    std::thread::sleep(Duration::from_millis(500));
    assert!(waiting.iter().all(|t| !t.is_finished()), "the requests wait for the held build");
    let path = m.path("cc.warc.gz");
    let read = std::thread::spawn(move || fs::read(path));
    let t0 = Instant::now();
    while !read.is_finished() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let done = read.is_finished();
    gate.open();
    assert!(done, "a stored file must read while the index is being built");
    assert_eq!(read.join().unwrap().unwrap(), fs::read(real.join("iipc-jwarc/cc.warc.gz")).unwrap());
    for t in waiting {
        t.join().unwrap().unwrap();
    }
    let now = fs::read_to_string(&index).unwrap();
    assert!(now.len() as u64 > before && now.contains("http://stringjs.com/"), "the index of the store as it is now:\n{now}");
    m.unmount_clean();
}

/// A bug that panics inside a request must cost that request an EIO and a log line, not the
/// mount: the daemon is built with a failpoint (debug builds only) that panics in READ while
/// it holds the table of open handles, so this also shows that the lock stays usable.
#[test]
#[cfg_attr(not(debug_assertions), ignore = "the failpoint exists in debug builds only")]
fn a_panic_in_a_request_is_eio_and_the_mount_goes_on() {
    let tmp = TempDir::new().unwrap();
    let (store, src) = store_with_sample(tmp.path(), "webrecorder-warcio/example.warc.gz");
    let want = fs::read(&src).unwrap();
    // Two fuser event loops: two panics would end both without the guard. The open failpoint
    // fires while the first open decides on direct I/O (reading the recipe): after that open
    // fails, nothing may count it as open (the kernel sends no RELEASE for it).
    let m = Mounted::with_env(&store, &tmp.path().join("mnt"), &[], &[("WARCFS_FAILPOINTS", "read=2,open=1")]);
    if !gzip_files_direct(&store) {
        // Through the page cache one read(2) may make several READs: the count below differs.
        eprintln!("skipped: this kernel reads gzip files through the page cache");
        return m.unmount_clean();
    }
    let path = m.path("example.warc.gz");
    let mut eio = 0;
    let got = loop {
        match fs::read(&path) {
            Ok(b) => break b,
            Err(e) if e.raw_os_error() == Some(libc::EIO) && eio < 3 => eio += 1,
            Err(e) => panic!("read {} after {eio} EIOs: {e}; log:\n{}", path.display(), log_tail(&store)),
        }
    };
    assert_eq!(eio, 3, "the failpoints should have failed one open and two reads with EIO");
    assert!(got == want, "{} reads back different bytes after the panics", path.display());
    // Still a working filesystem: write, read back, list; then a clean unmount.
    fs::write(m.path("after.txt"), b"still here").unwrap();
    assert_eq!(fs::read(m.path("after.txt")).unwrap(), b"still here");
    let names: BTreeSet<String> = fs::read_dir(&m.mnt).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(names.contains("example.warc.gz") && names.contains("after.txt"), "{names:?}");
    let log = fs::read_to_string(store.join("warcfs.log")).unwrap();
    assert_eq!(log.matches("failpoint read fired").count(), 2, "both read panics should be in the log:\n{log}");
    assert_eq!(log.matches("failpoint open fired").count(), 1, "the open panic should be in the log:\n{log}");
    // The failed open left no count behind: unlinked and closed everywhere, the file is gone
    // at once rather than kept as an orphan until the next mount.
    // (The RELEASE of the last read's handle may still be on its way: wait for it.)
    fs::remove_file(&path).unwrap();
    let gone = (0..50).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        num(&stats(&store), "files") == 1
    });
    assert!(gone, "the unlinked file is still an inode 5 s after its last close: an open was leaked");
    m.unmount_clean();
}

/// A failed sync is not retried into a false success: after an EIO, Linux may have dropped
/// the pages that did not reach the disk (and will not report it twice), so every later
/// fsync and close of the file must report EIO too, until the file is truncated. A failpoint
/// (debug builds only) makes the first sync of a staged file at fsync or close fail with EIO,
/// as a failing disk would; a real sync after it would succeed.
#[test]
#[cfg_attr(not(debug_assertions), ignore = "the failpoint exists in debug builds only")]
fn a_failed_fsync_fails_every_later_one_until_truncated() {
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let m = Mounted::with_env(&store, &tmp.path().join("mnt"), &[], &[("WARCFS_FAILPOINTS", "persist_sync=1")]);
    let record = |body: &str| format!("WARC/1.1\r\nWARC-Type: resource\r\nContent-Length: {}\r\n\r\n{body}\r\n\r\n", body.len()).repeat(100).into_bytes();
    let path = m.path("synced.warc");
    let mut f = File::create(&path).unwrap();
    f.write_all(&record("lost?")).unwrap();
    for what in ["the fsync that failed", "the next fsync", "the one after"] {
        match f.sync_all() {
            Err(e) if e.raw_os_error() == Some(libc::EIO) => {}
            other => panic!("{what} gave {other:?}, not EIO; log:\n{}", log_tail(&store)),
        }
    }
    match close_checked(f) {
        Err(e) if e.raw_os_error() == Some(libc::EIO) => {}
        other => panic!("close after a failed sync gave {other:?}, not EIO"),
    }
    // Written again from nothing, the file syncs and closes cleanly, and is what remains.
    let want = record("written again");
    let mut f = OpenOptions::new().write(true).truncate(true).open(&path).unwrap();
    f.write_all(&want).unwrap();
    f.sync_all().unwrap_or_else(|e| panic!("fsync after truncating: {e}; log:\n{}", log_tail(&store)));
    close_checked(f).unwrap();
    m.unmount_clean();
    let m = Mounted::new(&store, &tmp.path().join("mnt"));
    assert_bytes(&m.path("synced.warc"), &want, "after the failed sync, a rewrite and a remount");
    m.unmount_clean();
}

/// A tmpfs of `mib` MiB mounted at `dir`, unmounted (lazily) when dropped: a small disk
/// that a test can fill. Needs root, as every FUSE test here does in CI.
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn new(dir: &Path, mib: u64) -> SmallDisk {
        fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={mib}m,mode=0700"), "tmpfs"]).arg(dir).output().expect("spawn mount");
        assert!(out.status.success(), "mounting a {mib} MiB tmpfs at {} (the full-disk test needs root): {}", dir.display(), String::from_utf8_lossy(&out.stderr));
        SmallDisk(dir.to_path_buf())
    }

    fn avail(&self) -> u64 {
        let st = nix::sys::statvfs::statvfs(&self.0).unwrap();
        st.blocks_available() as u64 * st.fragment_size() as u64
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Writes `data` to a new file in 1 MiB writes, then fsync and close; the first error.
fn write_synced(path: &Path, data: &[u8]) -> io::Result<()> {
    let mut f = File::create(path)?;
    for part in data.chunks(1 << 20) {
        f.write_all(part)?;
    }
    f.sync_all()?;
    close_checked(f)
}

#[test]
fn a_full_disk_is_enospc_and_the_mount_goes_on() {
    let tmp = TempDir::new().unwrap();
    // RocksDB alone preallocates ~70 MiB for its log (64 MiB memtables).
    let disk = SmallDisk::new(&tmp.path().join("disk"), 256);
    let store = tmp.path().join("disk/store");
    // Data stops 16 MiB short of a full disk (the default, 256 MiB, is larger than the disk):
    // the room the index and the metadata log always need.
    const FLOOR: u64 = 16 << 20;
    let mount = || Mounted::with(&store, &tmp.path().join("mnt"), &[&format!("min_free={FLOOR}")]);
    let m = mount();
    let keep = real_file("webrecorder-pywb/iana.warc.gz");
    write_synced(&m.path("keep.warc.gz"), &keep).unwrap();
    wait_ingested(&store);
    let mut rng = StdRng::seed_from_u64(14);
    let free_at_start = disk.avail();

    // 1. A writer fills the disk: it gets ENOSPC (at a write, its fsync or its close).
    let big = random_bytes(&mut rng, (free_at_start + (32 << 20)) as usize);
    match write_synced(&m.path("big"), &big) {
        Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {}
        other => panic!("filling the disk gave {other:?}, not ENOSPC; log:\n{}", log_tail(&store)),
    }
    // The mount is up, what was committed reads back, and one writer's thousands of failed
    // writes are a few log lines, not one each.
    assert!(is_mounted(&m.mnt));
    assert_bytes(&m.path("keep.warc.gz"), &keep, "with the disk full");
    let log = fs::read_to_string(store.join("warcfs.log")).unwrap_or_default();
    let full_lines = log.lines().filter(|l| l.contains("No space left")).count();
    assert!(full_lines <= 5, "{full_lines} log lines about the full disk:\n{}", log_tail(&store));
    assert!(disk.avail() >= FLOOR - (1 << 20), "data went below the floor: {} bytes free", disk.avail());
    assert!(disk.avail() < FLOOR + (32 << 20), "the disk was not filled: {} bytes free", disk.avail());
    // Deleting is what frees space, so it must work on a full disk (the metadata log is
    // above the floor); the staged bytes go once the kernel releases the file.
    fs::remove_file(m.path("big")).unwrap_or_else(|e| panic!("rm on a full disk: {e}; log:\n{}", log_tail(&store)));
    wait_until("the space of the removed file to come back", Duration::from_secs(30), || {
        if disk.avail() + (4 << 20) > free_at_start { Ok(()) } else { Err(format!("{} bytes free, {free_at_start} at the start", disk.avail())) }
    });
    let after = random_bytes(&mut rng, 1 << 20);
    write_synced(&m.path("after"), &after).unwrap_or_else(|e| panic!("a write after freeing space: {e}; log:\n{}", log_tail(&store)));
    fs::create_dir(m.path("dir")).unwrap();

    // 2. A file that fits in staging but not in the packs: its close succeeds, its ingest
    // fails, and it is tried again (and stored) once there is room. A file outside the
    // store takes the room meanwhile.
    wait_ingested(&store);
    let filler = tmp.path().join("disk/filler");
    let room = disk.avail().saturating_sub(FLOOR + (20 << 20));
    fs::write(&filler, vec![0u8; room as usize]).unwrap();
    let staged = random_bytes(&mut rng, 14 << 20);
    write_synced(&m.path("dir/staged"), &staged).unwrap_or_else(|e| panic!("a file that fits in staging: {e}; log:\n{}", log_tail(&store)));
    assert!(disk.avail() < FLOOR + staged.len() as u64, "the staged file's chunks would fit: {} bytes free", disk.avail());
    wait_until("the ingest to fail for want of space", Duration::from_secs(60), || {
        let st = stats(&store);
        match st.get("ingests").and_then(|i| i.get("retrying")).and_then(|n| n.as_u64()) {
            Some(n) if n > 0 => Ok(()),
            _ => Err(format!("stats {st}; log:\n{}", log_tail(&store))),
        }
    });
    assert_bytes(&m.path("dir/staged"), &staged, "staged, its ingest failed");
    // `warcfs umount` now cannot say every file is stored: it says which are not (non-zero
    // exit), they stay staged, and the next mount stores them once there is room.
    let r = run(&["umount", &s(&m.mnt)]);
    assert!(!r.ok() && r.stderr.contains("1 files written through it could not be stored yet"), "{}", r.describe());
    drop(m);
    assert_eq!(fs::read_dir(store.join("staging")).unwrap().count(), 1, "the file stays staged");
    fs::remove_file(&filler).unwrap();
    let m = mount();
    wait_ingested(&store);
    assert_bytes(&m.path("dir/staged"), &staged, "stored by the next mount");

    m.unmount_clean();
    assert_fsck_clean(&store);
    let m = mount();
    assert_bytes(&m.path("keep.warc.gz"), &keep, "after a remount");
    assert_bytes(&m.path("after"), &after, "after a remount");
    assert_bytes(&m.path("dir/staged"), &staged, "after a remount");
    assert!(!m.path("big").exists());
    m.unmount_clean();
    drop(disk);
}

// ---------------------------------------------------------------------------------------
// 2. wget writes WARCs into the mount
// ---------------------------------------------------------------------------------------

/// `warcio` 1.8.1 in a venv under CARGO_TARGET_TMPDIR, made once and reused.
fn warcio_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let bin = pinned_venv("warcio-1.8.1-venv", "warcio==1.8.1\n", |bin| {
            assert!(bin.join("warcio").exists(), "pip installed warcio==1.8.1 but bin/warcio is missing");
        });
        bin.join("warcio")
    })
    .clone()
}

/// A static site of ~50 files (HTML and PNG from the Debian handbook, or the Python docs),
/// with an index linking to all of them. Returns the number of files linked.
fn make_site(dir: &Path) -> usize {
    let candidates = [("/usr/share/doc/debian-handbook/html/en-US", "images"), ("/usr/share/doc/python3.11/html", "_images")];
    let (root, imgdir) = candidates
        .iter()
        .map(|(r, i)| (Path::new(*r), *i))
        .find(|(r, _)| r.is_dir())
        .expect("neither the debian-handbook nor the python3.11 docs are installed");
    let list = |d: &Path, ext: &str| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = fs::read_dir(d)
            .map(|rd| rd.map(|e| e.unwrap().path()).filter(|p| p.is_file() && p.extension().is_some_and(|x| x == ext)).collect())
            .unwrap_or_default();
        v.sort();
        v
    };
    let html: Vec<PathBuf> = list(root, "html").into_iter().filter(|p| !p.ends_with("index.html")).take(35).collect();
    let png: Vec<PathBuf> = list(&root.join(imgdir), "png").into_iter().take(15).collect();
    assert!(html.len() + png.len() >= 30, "too few site files under {}", root.display());
    fs::create_dir_all(dir.join(imgdir)).unwrap();
    let mut index = String::from("<!DOCTYPE html>\n<html><head><title>test site</title></head><body>\n");
    for h in &html {
        let name = h.file_name().unwrap().to_str().unwrap();
        fs::copy(h, dir.join(name)).unwrap();
        index.push_str(&format!("<p><a href=\"{name}\">{name}</a></p>\n"));
    }
    for p in &png {
        let name = p.file_name().unwrap().to_str().unwrap();
        fs::copy(p, dir.join(imgdir).join(name)).unwrap();
        index.push_str(&format!("<p><img src=\"{imgdir}/{name}\"></p>\n"));
    }
    index.push_str("</body></html>\n");
    fs::write(dir.join("index.html"), index).unwrap();
    html.len() + png.len()
}

/// `python3 -m http.server` on a free port, killed on drop.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(dir: &Path) -> (Server, u16) {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = Command::new("python3")
        .args(["-m", "http.server", &port.to_string(), "--bind", "127.0.0.1", "--directory"])
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn python3 -m http.server");
    let server = Server(child);
    wait_until("the http server", Duration::from_secs(30), || TcpStream::connect(("127.0.0.1", port)).map(|_| ()).map_err(|e| e.to_string()));
    (server, port)
}

fn wget_crawl(warc_base: &Path, url: &str, scratch: &Path) {
    let out = Command::new("wget")
        .arg(format!("--warc-file={}", warc_base.display()))
        .args(["-r", "-l", "2", "-nv", "--delete-after", "-e", "robots=off", "-P"])
        .arg(scratch)
        .arg(url)
        .current_dir(scratch)
        .stdin(Stdio::null())
        .output()
        .expect("spawn wget");
    // 8: the server answered some request with an error (links to pages not copied).
    assert!(
        matches!(out.status.code(), Some(0) | Some(8)),
        "wget --warc-file={} failed ({}):\n{}",
        warc_base.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

fn warcio_check(warcio: &Path, file: &Path) -> usize {
    checked(Command::new(warcio).arg("check").arg("-v").arg(file), &format!("warcio check {}", file.display()));
    let out = checked(Command::new(warcio).args(["index", "-f", "warc-type"]).arg(file), &format!("warcio index {}", file.display()));
    String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.contains("\"response\"")).count()
}

#[test]
fn wget_writes_warc_into_mount_twice() {
    let warcio = warcio_bin();
    let tmp = TempDir::new().unwrap();
    let site = tmp.path().join("site");
    let site_files = make_site(&site);
    let (_server, port) = serve(&site);
    let url = format!("http://127.0.0.1:{port}/");
    let scratch = tmp.path().join("scratch");
    fs::create_dir(&scratch).unwrap();
    let store = tmp.path().join("store");
    let mnt = tmp.path().join("mnt");

    let m = Mounted::new(&store, &mnt);
    wget_crawl(&m.path("crawl-1"), &url, &scratch);
    let c1 = m.path("crawl-1.warc.gz");
    let bytes1 = fs::read(&c1).unwrap_or_else(|e| panic!("{}: {e}", c1.display()));
    let before = wait_ingested(&store);
    assert_bytes(&c1, &bytes1, "crawl-1 after ingest");
    let responses1 = warcio_check(&warcio, &c1);
    assert!(responses1 > site_files, "crawl-1 should hold a response per site file: {responses1} responses for {site_files} files");

    wget_crawl(&m.path("crawl-2"), &url, &scratch);
    let c2 = m.path("crawl-2.warc.gz");
    let bytes2 = fs::read(&c2).unwrap();
    let after = wait_ingested(&store);
    assert_bytes(&c2, &bytes2, "crawl-2 after ingest");
    let responses2 = warcio_check(&warcio, &c2);
    assert!(responses2 > site_files, "crawl-2: {responses2} responses for {site_files} files");
    assert!(fs::read_dir(&scratch).unwrap().all(|e| !e.unwrap().path().is_file()), "wget left downloads behind");

    let (sb0, sb1) = (num(&before, "stored_bytes"), num(&after, "stored_bytes"));
    let delta = sb1.saturating_sub(sb0);
    eprintln!(
        "wget: crawl-1 {} bytes ({responses1} responses), crawl-2 {} bytes ({responses2} responses); stored after crawl-1 {sb0}, after crawl-2 {sb1}: crawl-2 added {delta} bytes = {:.1} % of its size; gzip members {} ({} raw)",
        bytes1.len(),
        bytes2.len(),
        100.0 * delta as f64 / bytes2.len() as f64,
        num(&after, "gzip_members"),
        num(&after, "gzip_members_raw")
    );
    assert!(delta * 2 < bytes2.len() as u64, "crawl-2 ({} bytes) added {delta} stored bytes, not < 50 %: {after}", bytes2.len());
    assert!(num(&after, "unique_payloads") < num(&after, "payloads"), "{after}");
    m.unmount_clean();

    let m = Mounted::new(&store, &mnt);
    assert_bytes(&m.path("crawl-1.warc.gz"), &bytes1, "crawl-1 after remount");
    assert_bytes(&m.path("crawl-2.warc.gz"), &bytes2, "crawl-2 after remount");
    m.unmount_clean();
    assert_fsck_clean(&store);
}

// ---------------------------------------------------------------------------------------
// 3. Concurrent writers and readers
// ---------------------------------------------------------------------------------------

const BLOCK: usize = 64 << 10;
const NBLOCKS: usize = 64;
const PASSES: u64 = 3;

fn block_bytes(seed: u64, block: usize, pass: u64) -> Vec<u8> {
    random_bytes(&mut StdRng::seed_from_u64(seed ^ ((block as u64) << 32) ^ (pass << 16) ^ 0x5eed), BLOCK)
}

#[test]
fn concurrent_writers_and_readers() {
    let seed = seed_from_env("WARCFS_MOUNT_CONC_SEED");
    eprintln!("concurrent_writers_and_readers: seed {seed} (WARCFS_MOUNT_CONC_SEED)");
    let real = real_corpus();
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let mnt = tmp.path().join("mnt");
    let m = Mounted::new(&store, &mnt);

    // Ingested files for the readers.
    cp_r(&[&real], &m.mnt);
    wait_ingested(&store);
    let ro: Vec<(PathBuf, Vec<u8>)> = expected_files(std::slice::from_ref(&real), "/").into_iter().map(|(p, src)| (m.path(&p), fs::read(src).unwrap())).collect();
    let gz = [
        "oduwsdl-ipwb/IAH-20080430204825-00000-blackbook.warc.gz",
        "oduwsdl-ipwb/sample-1.warc.gz",
        "webrecorder-pywb/iana.warc.gz",
        "ukwa-webarchive-discovery/flashfrozen-jwat-recompressed.warc.gz",
    ];

    let model: Mutex<BTreeMap<String, Vec<u8>>> = Mutex::new(BTreeMap::new());
    let done = AtomicBool::new(false);
    let mnt_p = m.mnt.clone();
    let reader = |r: u64, check: &(dyn Fn(&mut StdRng) -> Result<(), String> + Sync)| -> u64 {
        let mut rng = StdRng::seed_from_u64(seed ^ (1000 + r));
        let mut n = 0;
        while n == 0 || !done.load(Ordering::Relaxed) {
            if let Err(e) = check(&mut rng) {
                done.store(true, Ordering::Relaxed);
                panic!("reader {r}: {e}");
            }
            n += 1;
        }
        n
    };

    // Phase 1: four writers, each its own files; four readers of ingested files.
    let read_ingested = |rng: &mut StdRng| -> Result<(), String> {
        let (p, want) = &ro[rng.gen_range(0..ro.len())];
        if rng.gen_bool(0.5) {
            let got = fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?;
            if got != *want {
                return Err(format!("{} read {} bytes, want {}, first diff {}", p.display(), got.len(), want.len(), first_diff(&got, want)));
            }
        } else if !want.is_empty() {
            let f = File::open(p).map_err(|e| format!("{}: {e}", p.display()))?;
            for _ in 0..8 {
                let off = rng.gen_range(0..want.len());
                let len = rng.gen_range(1..=(want.len() - off).min(300_000));
                let mut buf = vec![0u8; len];
                f.read_exact_at(&mut buf, off as u64).map_err(|e| format!("{} pread {off}+{len}: {e}", p.display()))?;
                if buf != want[off..off + len] {
                    return Err(format!("{} pread {off}+{len} differs", p.display()));
                }
            }
        }
        Ok(())
    };
    let reads: Vec<u64> = std::thread::scope(|sc| {
        let writers: Vec<_> = (0..4u64)
            .map(|t| {
                let (model, mnt_p, done) = (&model, &mnt_p, &done);
                let gz_rel = gz[t as usize];
                sc.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(seed ^ t);
                    let dir = format!("w{t}");
                    fs::create_dir(mnt_p.join(&dir)).unwrap();
                    let len = rng.gen_range(2 << 20..4 << 20);
                    let files = [(format!("{dir}/random.bin"), random_bytes(&mut rng, len)), (format!("{dir}/copy.warc.gz"), real_file(gz_rel))];
                    for (rel, data) in files {
                        if let Err(e) = write_chunked(&mnt_p.join(&rel), &data, &mut rng) {
                            done.store(true, Ordering::Relaxed);
                            panic!("writer {t}: {rel}: {e}");
                        }
                        model.lock().unwrap().insert(rel, data);
                    }
                })
            })
            .collect();
        let readers: Vec<_> = (0..4u64).map(|r| sc.spawn(move || reader(r, &read_ingested))).collect();
        for w in writers {
            w.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
        readers.into_iter().map(|r| r.join().unwrap()).collect()
    });
    eprintln!("phase 1: reads per reader {reads:?}");
    let snapshot = model.lock().unwrap().clone();
    assert_model(&m.mnt, &snapshot, "phase 1, right after the writers closed");

    // Phase 2: four threads pwrite disjoint 64 KiB blocks of one file (thread t owns every
    // 4th block, several passes), four threads read it meanwhile.
    let shared = "shared.bin";
    close_checked(File::create(m.path(shared)).unwrap()).unwrap();
    done.store(false, Ordering::Relaxed);
    let shared_path = m.path(shared);
    let read_shared = |rng: &mut StdRng| -> Result<(), String> {
        let f = File::open(&shared_path).map_err(|e| format!("open shared: {e}"))?;
        if rng.gen_bool(0.5) {
            let mut v = Vec::new();
            (&f).read_to_end(&mut v).map_err(|e| format!("read shared: {e}"))?;
            if v.len() > NBLOCKS * BLOCK {
                return Err(format!("shared file read {} bytes, more than was ever written", v.len()));
            }
        } else {
            let mut buf = vec![0u8; BLOCK];
            let b = rng.gen_range(0..NBLOCKS);
            f.read_at(&mut buf, (b * BLOCK) as u64).map_err(|e| format!("pread block {b}: {e}"))?;
        }
        Ok(())
    };
    let reads: Vec<u64> = std::thread::scope(|sc| {
        let writers: Vec<_> = (0..4usize)
            .map(|t| {
                let (shared_path, done) = (&shared_path, &done);
                sc.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(seed ^ 0xb10c ^ t as u64);
                    let f = OpenOptions::new().write(true).open(shared_path).unwrap();
                    let r = (|| -> io::Result<()> {
                        for pass in 0..PASSES {
                            let mut blocks: Vec<usize> = (t..NBLOCKS).step_by(4).collect();
                            blocks.shuffle(&mut rng);
                            for b in blocks {
                                f.write_all_at(&block_bytes(seed, b, pass), (b * BLOCK) as u64)?;
                                if rng.gen_ratio(1, 10) {
                                    f.sync_data()?;
                                }
                            }
                        }
                        f.sync_all()
                    })();
                    if let Err(e) = r.and_then(|_| close_checked(f)) {
                        done.store(true, Ordering::Relaxed);
                        panic!("pwrite thread {t}: {e}");
                    }
                })
            })
            .collect();
        let readers: Vec<_> = (0..4u64).map(|r| sc.spawn(move || reader(r, &read_shared))).collect();
        for w in writers {
            w.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
        readers.into_iter().map(|r| r.join().unwrap()).collect()
    });
    eprintln!("phase 2: reads per reader {reads:?}");
    let final_shared: Vec<u8> = (0..NBLOCKS).flat_map(|b| block_bytes(seed, b, PASSES - 1)).collect();
    let mut model = model.into_inner().unwrap();
    model.insert(shared.to_string(), final_shared);
    for (p, want) in &ro {
        model.insert(p.strip_prefix(&m.mnt).unwrap().to_str().unwrap().to_string(), want.clone());
    }
    assert_model(&m.mnt, &model, "phase 2, right after the writers closed");
    wait_ingested(&store);
    assert_model(&m.mnt, &model, "after ingest");
    m.unmount_clean();

    let m = Mounted::new(&store, &mnt);
    assert_model(&m.mnt, &model, "after remount");
    let st = stats(&store);
    assert_eq!(num(&st, "files"), model.len() as u64, "{st}");
    m.unmount_clean();
    assert_fsck_clean(&store);
}

// ---------------------------------------------------------------------------------------
// 4. kill -9 of the daemon during writes
// ---------------------------------------------------------------------------------------

/// Writes files one by one (fsync + checked close each) until an operation fails; records
/// every file whose close succeeded, as it happens.
fn writer_until_error(mnt: &Path, trial: usize, seed: u64, sources: &[(String, Vec<u8>)], completed: &Mutex<Vec<(String, usize)>>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = format!("t{trial:02}");
    if fs::create_dir(mnt.join(&dir)).is_err() {
        return;
    }
    let mut written = 0usize;
    // At most ~40 files / 40 MB a trial (the kill may come after the last one: then it hits
    // the ingest of what was written).
    for k in 0..40 {
        if written > 40 << 20 {
            return;
        }
        // Mostly the small real-corpus files; now and then a large crawl (the last three).
        let i = if rng.gen_ratio(1, 10) { rng.gen_range(sources.len() - 3..sources.len()) } else { rng.gen_range(0..sources.len() - 3) };
        let rel = format!("{dir}/f{k:03}-{}", sources[i].0);
        if write_chunked(&mnt.join(&rel), &sources[i].1, &mut rng).is_err() {
            return;
        }
        written += sources[i].1.len();
        completed.lock().unwrap().push((rel, i));
    }
}

#[test]
fn kill_9_during_cp_loses_nothing_closed() {
    let seed = seed_from_env("WARCFS_MOUNT_CRASH_SEED");
    eprintln!("kill_9_during_cp_loses_nothing_closed: seed {seed} (rerun with WARCFS_MOUNT_CRASH_SEED={seed})");
    let ctx = |trial: usize| format!("(seed {seed}, trial {trial}; rerun with WARCFS_MOUNT_CRASH_SEED={seed})");
    let mut rng = StdRng::seed_from_u64(seed);
    let real = real_corpus();
    let mut sources: Vec<(String, Vec<u8>)> = expected_files(std::slice::from_ref(&real), "/")
        .into_iter()
        .map(|(p, src)| (p.trim_start_matches("/real/").replace('/', "_"), fs::read(src).unwrap()))
        .collect();
    for c in crawl_files() {
        sources.push((c.file_name().unwrap().to_str().unwrap().to_string(), fs::read(&c).unwrap()));
    }
    let sources = Arc::new(sources);

    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let mnt = tmp.path().join("mnt");
    const TRIALS: usize = 20;
    let mut all: Vec<(String, usize)> = Vec::new();
    let mut last: Vec<(String, usize)> = Vec::new();
    for trial in 0..TRIALS {
        let mut m = Mounted::new(&store, &mnt);
        for (rel, i) in &last {
            assert_bytes(&m.path(rel), &sources[*i].1, &format!("remount after the kill of trial {} {}", trial - 1, ctx(trial)));
        }
        let completed = Arc::new(Mutex::new(Vec::new()));
        let writer = {
            let (mnt, sources, completed) = (m.mnt.clone(), sources.clone(), completed.clone());
            let wseed = rng.gen();
            std::thread::spawn(move || writer_until_error(&mnt, trial, wseed, &sources, &completed))
        };
        let mut cp = Command::new("cp")
            .arg("-r")
            .arg(&real)
            .arg(m.path(&format!("cp-{trial:02}")))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn cp");
        std::thread::sleep(Duration::from_millis(rng.gen_range(0..1000)));
        let exit = m.kill_daemon();
        assert_eq!(exit, Exit::Signal(libc::SIGKILL), "daemon status after kill -9 {}", ctx(trial));
        // With the daemon gone every request fails, so the clients end.
        let t0 = Instant::now();
        while !writer.is_finished() {
            assert!(t0.elapsed() < Duration::from_secs(60), "writer still blocked 60 s after the daemon died {}", ctx(trial));
            std::thread::sleep(Duration::from_millis(20));
        }
        writer.join().unwrap();
        let _ = cp.wait();
        m.unmount_dead();
        if trial % 5 == 4 {
            // The store as the kill left it (open pack torn, files staged) checks out too.
            let r = run(&["fsck", &s(&store)]);
            assert!(r.ok() && r.out().contains(": clean ("), "fsck right after killing the daemon {}:\n{}", ctx(trial), r.describe());
        }
        last = completed.lock().unwrap().clone();
        eprintln!("trial {trial}: {} files closed before the kill", last.len());
        all.extend(last.iter().cloned());
    }
    let m = Mounted::new(&store, &mnt);
    let st = wait_ingested(&store);
    for (rel, i) in &all {
        assert_bytes(&m.path(rel), &sources[*i].1, &format!("after {TRIALS} kills and a final remount {}", ctx(TRIALS)));
    }
    eprintln!("kill -9: {} closed files checked over {TRIALS} trials; {st}", all.len());
    m.unmount_clean();
    let r = run(&["fsck", &s(&store)]);
    assert!(r.ok() && r.out().contains(": clean ("), "fsck after {TRIALS} daemon kills {}:\n{}", ctx(TRIALS), r.describe());
}

// ---------------------------------------------------------------------------------------
// 5. POSIX basics
// ---------------------------------------------------------------------------------------

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn errno_of<T>(r: io::Result<T>) -> Option<i32> {
    r.err().and_then(|e| e.raw_os_error())
}

fn setxattr(p: &Path, name: &str, value: &[u8], flags: i32) -> io::Result<()> {
    let n = CString::new(name).unwrap();
    // SAFETY: valid C strings and buffer.
    let rc = unsafe { libc::setxattr(cpath(p).as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), flags) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn getxattr(p: &Path, name: &str) -> io::Result<Vec<u8>> {
    let n = CString::new(name).unwrap();
    let mut buf = vec![0u8; 4096];
    // SAFETY: valid C strings and buffer.
    let rc = unsafe { libc::getxattr(cpath(p).as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(rc as usize);
    Ok(buf)
}

fn listxattr(p: &Path) -> io::Result<Vec<String>> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: valid C string and buffer.
    let rc = unsafe { libc::listxattr(cpath(p).as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(rc as usize);
    Ok(buf.split(|b| *b == 0).filter(|s| !s.is_empty()).map(|s| String::from_utf8_lossy(s).into_owned()).collect())
}

fn removexattr(p: &Path, name: &str) -> io::Result<()> {
    let n = CString::new(name).unwrap();
    // SAFETY: valid C strings.
    if unsafe { libc::removexattr(cpath(p).as_ptr(), n.as_ptr()) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn truncate_path(p: &Path, len: u64) {
    // SAFETY: valid C string.
    let rc = unsafe { libc::truncate(cpath(p).as_ptr(), len as libc::off_t) };
    assert_eq!(rc, 0, "truncate({}, {len}): {}", p.display(), io::Error::last_os_error());
}

const ATIME: (i64, i64) = (1_000_000_000, 123_456_789);
const MTIME: (i64, i64) = (1_234_567_890, 987_654_321);

fn set_times(p: &Path) {
    let ts = [libc::timespec { tv_sec: ATIME.0, tv_nsec: ATIME.1 }, libc::timespec { tv_sec: MTIME.0, tv_nsec: MTIME.1 }];
    // SAFETY: valid C string and two timespecs.
    let rc = unsafe { libc::utimensat(libc::AT_FDCWD, cpath(p).as_ptr(), ts.as_ptr(), 0) };
    assert_eq!(rc, 0, "utimensat {}: {}", p.display(), io::Error::last_os_error());
}

/// Names, metadata and links that `posix_basics` sets up, checked after each remount.
fn check_posix_meta(m: &Mounted, when: &str) {
    let md = fs::metadata(m.path("meta.txt")).unwrap();
    assert_eq!(md.mode() & 0o7777, 0o640, "{when}: chmod");
    assert_eq!((md.uid(), md.gid()), (1234, 5678), "{when}: chown");
    assert_eq!((md.atime(), md.atime_nsec()), ATIME, "{when}: atime set by utimensat");
    assert_eq!((md.mtime(), md.mtime_nsec()), MTIME, "{when}: mtime set by utimensat");
    let dm = fs::metadata(m.path("keep")).unwrap();
    assert!(dm.is_dir() && dm.mode() & 0o7777 == 0o750, "{when}: directory 'keep' mode {:o}", dm.mode());
    assert!(!m.path("d/sub").exists(), "{when}: rmdir'ed d/sub is back");
    assert!(!m.path("a.txt").exists() && !m.path("x.warc.gz.open").exists() && !m.path("y.warc.gz").exists(), "{when}: renamed/unlinked names are back");
    let (x, hl) = (fs::metadata(m.path("x.warc.gz")).unwrap(), fs::metadata(m.path("d/hl.warc.gz")).unwrap());
    assert_eq!((x.ino(), x.nlink(), hl.nlink()), (hl.ino(), 2, 2), "{when}: hard link x.warc.gz / d/hl.warc.gz");
    assert_eq!(fs::metadata(m.path("y2.warc.gz")).unwrap().nlink(), 1, "{when}: nlink after unlinking the other name");
    assert_eq!(fs::read_link(m.path("sl")).unwrap(), Path::new("x.warc.gz"), "{when}: readlink sl");
    assert_eq!(fs::read_link(m.path("dangling")).unwrap(), Path::new("/nonexistent/target"), "{when}: readlink dangling");
    assert!(fs::symlink_metadata(m.path("sl")).unwrap().file_type().is_symlink(), "{when}: sl is a symlink");
    assert_eq!(getxattr(&m.path("x.warc.gz"), "user.crawler").unwrap(), b"wget 1.21", "{when}: user.crawler xattr");
    assert_eq!(listxattr(&m.path("x.warc.gz")).unwrap(), vec!["user.crawler".to_string()], "{when}: listxattr");
}

#[test]
fn posix_basics() {
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let mnt = tmp.path().join("mnt");
    let iana = real_file("webrecorder-pywb/iana.warc.gz");
    let sample = real_file("oduwsdl-ipwb/sample-1.warc.gz");
    let big = real_file("oduwsdl-ipwb/IAH-20080430204825-00000-blackbook.warc.gz");
    let bl = real_file("ukwa-webarchive-discovery/BL-20140325121225068-00000-32090~opera~8443.warc.gz");
    let flash = real_file("ukwa-webarchive-discovery/flashfrozen-jwat-recompressed.warc.gz");
    let quirk = real_file("chatnoir-eu-chatnoir-resiliparse/clueweb-quirk.warc.gz");
    let warcfile = real_file("chatnoir-eu-chatnoir-resiliparse/warcfile.warc.gz");
    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();

    let m = Mounted::new(&store, &mnt);
    let p = |rel: &str| m.path(rel);

    // mkdir / rmdir
    fs::create_dir(p("d")).unwrap();
    fs::create_dir_all(p("d/sub/deeper")).unwrap();
    assert_eq!(errno_of(fs::remove_dir(p("d/sub"))), Some(libc::ENOTEMPTY), "rmdir of a non-empty directory");
    assert_eq!(errno_of(fs::create_dir(p("d"))), Some(libc::EEXIST), "mkdir of an existing name");
    fs::remove_dir(p("d/sub/deeper")).unwrap();
    fs::remove_dir(p("d/sub")).unwrap();
    assert!(!p("d/sub").exists());
    fs::create_dir(p("keep")).unwrap();
    fs::set_permissions(p("keep"), fs::Permissions::from_mode(0o750)).unwrap();

    // Files that get ingested before they are renamed over, truncated or overwritten.
    fs::write(p("b.txt"), &bl).unwrap();
    for (name, data) in [("t-small.warc.gz", &big), ("t-zero.warc.gz", &quirk), ("t-ext.warc.gz", &warcfile), ("t-mid.warc.gz", &flash)] {
        fs::write(p(name), data).unwrap();
    }
    wait_ingested(&store);

    // rename over an existing (ingested) file
    fs::write(p("a.txt"), b"version A\n").unwrap();
    wait_ingested(&store); // see metadata_change_racing_ingest
    fs::rename(p("a.txt"), p("b.txt")).unwrap();
    assert!(!p("a.txt").exists(), "rename source still exists");
    model.insert("b.txt".into(), b"version A\n".to_vec());

    // a crawler's x.warc.gz.open, renamed when done
    {
        let mut f = File::create(p("x.warc.gz.open")).unwrap();
        for c in iana.chunks(100_000) {
            f.write_all(c).unwrap();
        }
        close_checked(f).unwrap();
    }
    // Renaming right away races the ingest (the kernel sends a SETATTR of the times after
    // the rename): see metadata_change_racing_ingest.
    wait_ingested(&store);
    fs::rename(p("x.warc.gz.open"), p("x.warc.gz")).unwrap();
    assert!(!p("x.warc.gz.open").exists());
    model.insert("x.warc.gz".into(), iana.clone());

    // hard links
    fs::hard_link(p("x.warc.gz"), p("d/hl.warc.gz")).unwrap();
    model.insert("d/hl.warc.gz".into(), iana.clone());
    fs::write(p("y.warc.gz"), &sample).unwrap();
    wait_ingested(&store);
    fs::hard_link(p("y.warc.gz"), p("y2.warc.gz")).unwrap();
    for n in ["y.warc.gz", "y2.warc.gz"] {
        assert_eq!(fs::metadata(p(n)).unwrap().nlink(), 2, "nlink of {n} after link");
        assert_bytes(&p(n), &sample, "hard link");
    }
    fs::remove_file(p("y.warc.gz")).unwrap();
    assert!(!p("y.warc.gz").exists());
    model.insert("y2.warc.gz".into(), sample.clone());

    // symlinks
    std::os::unix::fs::symlink("x.warc.gz", p("sl")).unwrap();
    std::os::unix::fs::symlink("/nonexistent/target", p("dangling")).unwrap();
    assert_bytes(&p("sl"), &iana, "read through a symlink");

    // chmod / chown / utimensat, and xattrs below, on ingested files. (Right after a write
    // they race the ingest and lose the content: see metadata_change_racing_ingest.)
    fs::write(p("meta.txt"), b"metadata\n").unwrap();
    wait_ingested(&store);
    fs::set_permissions(p("meta.txt"), fs::Permissions::from_mode(0o640)).unwrap();
    std::os::unix::fs::chown(p("meta.txt"), Some(1234), Some(5678)).unwrap();
    set_times(&p("meta.txt"));
    model.insert("meta.txt".into(), b"metadata\n".to_vec());

    // truncate ingested files: smaller (by path), to 0 (ftruncate), larger (by path)
    truncate_path(&p("t-small.warc.gz"), big.len() as u64 / 3);
    model.insert("t-small.warc.gz".into(), big[..big.len() / 3].to_vec());
    {
        let f = OpenOptions::new().write(true).open(p("t-zero.warc.gz")).unwrap();
        f.set_len(0).unwrap();
        close_checked(f).unwrap();
    }
    model.insert("t-zero.warc.gz".into(), Vec::new());
    truncate_path(&p("t-ext.warc.gz"), warcfile.len() as u64 + 100_000);
    let mut ext = warcfile.clone();
    ext.resize(warcfile.len() + 100_000, 0);
    model.insert("t-ext.warc.gz".into(), ext);
    // overwrite in the middle of an ingested file
    {
        let f = OpenOptions::new().write(true).open(p("t-mid.warc.gz")).unwrap();
        f.write_all_at(&[0xAB; 4096], flash.len() as u64 / 2).unwrap();
        close_checked(f).unwrap();
    }
    let mut mid = flash.clone();
    mid[flash.len() / 2..flash.len() / 2 + 4096].fill(0xAB);
    model.insert("t-mid.warc.gz".into(), mid);

    // xattrs
    let x = p("x.warc.gz");
    setxattr(&x, "user.crawler", b"wget 1.21", 0).unwrap();
    setxattr(&x, "user.tmp", b"", 0).unwrap();
    assert_eq!(getxattr(&x, "user.crawler").unwrap(), b"wget 1.21");
    assert_eq!(getxattr(&x, "user.tmp").unwrap(), b"");
    let mut names = listxattr(&x).unwrap();
    names.sort();
    assert_eq!(names, vec!["user.crawler".to_string(), "user.tmp".to_string()]);
    assert_eq!(errno_of(setxattr(&x, "user.crawler", b"x", libc::XATTR_CREATE)), Some(libc::EEXIST), "XATTR_CREATE of an existing name");
    assert_eq!(errno_of(setxattr(&x, "user.nope", b"x", libc::XATTR_REPLACE)), Some(libc::ENODATA), "XATTR_REPLACE of a missing name");
    removexattr(&x, "user.tmp").unwrap();
    assert_eq!(errno_of(getxattr(&x, "user.tmp")), Some(libc::ENODATA), "getxattr after removexattr");
    assert_eq!(errno_of(removexattr(&x, "user.tmp")), Some(libc::ENODATA), "removexattr of a missing name");

    // statfs
    let sv = nix::sys::statvfs::statvfs(&m.mnt).unwrap();
    assert!(sv.blocks() > 0 && sv.block_size() > 0, "statfs: {} blocks of {}", sv.blocks(), sv.block_size());

    assert_model(&m.mnt, &model, "posix: right after the changes");
    check_posix_meta(&m, "posix: right after the changes");
    wait_ingested(&store);
    assert_model(&m.mnt, &model, "posix: after ingest");
    check_posix_meta(&m, "posix: after ingest");
    m.unmount_clean();

    let m = Mounted::new(&store, &mnt);
    assert_model(&m.mnt, &model, "posix: after remount");
    check_posix_meta(&m, "posix: after remount");
    m.unmount_clean();
    assert_fsck_clean(&store);
    let gc1 = ok(&["gc", &s(&store)]);
    eprintln!("posix: gc after truncates/overwrites/renames: {}", gc1.out().trim());

    // unlink of open files: an ingested one open for reading, a staged one open for writing.
    let m = Mounted::new(&store, &mnt);
    let mut rng = StdRng::seed_from_u64(7);
    let u_data = random_bytes(&mut rng, 3 << 20);
    fs::write(m.path("u.bin"), &u_data).unwrap();
    wait_ingested(&store);
    let mut ur = File::open(m.path("u.bin")).unwrap();
    fs::remove_file(m.path("u.bin")).unwrap();
    assert_eq!(errno_of(fs::metadata(m.path("u.bin"))), Some(libc::ENOENT), "stat of an unlinked name");
    let mut got = Vec::new();
    ur.read_to_end(&mut got).unwrap();
    assert!(got == u_data, "an unlinked, open file reads back through its fd ({} of {} bytes)", got.len(), u_data.len());
    let mut buf = vec![0u8; 1000];
    ur.read_exact_at(&mut buf, 1_000_000).unwrap();
    assert_eq!(buf, u_data[1_000_000..1_001_000], "pread of an unlinked, open file");
    assert_eq!(ur.metadata().unwrap().nlink(), 0, "fstat nlink of an unlinked file");

    let w1 = random_bytes(&mut rng, 1 << 20);
    let w2 = random_bytes(&mut rng, 1 << 20);
    let mut w = OpenOptions::new().read(true).write(true).create_new(true).open(m.path("w.bin")).unwrap();
    w.write_all(&w1).unwrap();
    fs::remove_file(m.path("w.bin")).unwrap();
    w.write_all(&w2).unwrap();
    w.sync_all().unwrap();
    w.seek(SeekFrom::Start(0)).unwrap();
    let mut got = Vec::new();
    w.read_to_end(&mut got).unwrap();
    assert!(got.len() == 2 << 20 && got[..1 << 20] == w1[..] && got[1 << 20..] == w2[..], "unlinked file open for writing reads back what was written");
    close_checked(w).unwrap();
    drop(ur);
    let names: BTreeSet<String> = fs::read_dir(&m.mnt).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(!names.contains("u.bin") && !names.contains("w.bin"), "unlinked names listed: {names:?}");
    let st = wait_ingested(&store);
    eprintln!("posix: after closing the unlinked files: {st}");
    m.unmount_clean();
    let gc = ok(&["gc", &s(&store)]);
    let reclaimed: u64 = gc.out().split_whitespace().nth(1).and_then(|w| w.parse().ok()).unwrap_or_else(|| panic!("unexpected gc output: {}", gc.out()));
    eprintln!("posix: gc after the unlinked 3 MiB file was closed: {}", gc.out().trim());
    assert!(reclaimed > 0, "gc reclaimed nothing after an unlinked, ingested file was closed:\n{}", gc.describe());
    assert!(reclaimed >= (u_data.len() as u64) * 9 / 10, "gc should reclaim the unlinked random file's {} bytes, reclaimed {reclaimed}", u_data.len());
    assert_fsck_clean(&store);

    // Everything else survives gc.
    let m = Mounted::new(&store, &mnt);
    assert_model(&m.mnt, &model, "posix: after gc and remount");
    check_posix_meta(&m, "posix: after gc and remount");
    assert!(!m.path("u.bin").exists() && !m.path("w.bin").exists());
    m.unmount_clean();
    assert_fsck_clean(&store);
}

/// chmod/chown/utimensat/setxattr, or a rename, right after a file is written and closed,
/// while the background worker ingests it; the content must survive a remount and fsck
/// stay clean.
#[test]
fn metadata_change_racing_ingest() {
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let mnt = tmp.path().join("mnt");
    let m = Mounted::new(&store, &mnt);
    let mut model = BTreeMap::new();
    for i in 0..200 {
        let rel = format!("f{i:03}.txt");
        let data = format!("metadata {i}\n").into_bytes();
        fs::write(m.path(&rel), &data).unwrap();
        // A few metadata changes in a row, as `touch`, `cp -p` or a crawler's bookkeeping do.
        for _ in 0..5 {
            match i % 3 {
                0 => fs::set_permissions(m.path(&rel), fs::Permissions::from_mode(0o640)).unwrap(),
                1 => std::os::unix::fs::chown(m.path(&rel), Some(1234), Some(5678)).unwrap(),
                _ => setxattr(&m.path(&rel), "user.note", b"racing", 0).unwrap(),
            }
            set_times(&m.path(&rel));
        }
        model.insert(rel, data);
        if i % 5 != 0 {
            continue;
        }
        // A crawler's pattern: write NAME.open, close, rename it to NAME.
        let rel = format!("g{i:03}.warc.gz");
        let data = real_file("webrecorder-pywb/iana.warc.gz");
        fs::write(m.path(&format!("{rel}.open")), &data).unwrap();
        fs::rename(m.path(&format!("{rel}.open")), m.path(&rel)).unwrap();
        model.insert(rel, data);
    }
    wait_ingested(&store);
    m.unmount_clean();
    let m = Mounted::new(&store, &mnt);
    let lost: Vec<String> = model
        .iter()
        .filter(|(rel, want)| fs::read(m.path(rel)).ok().as_ref() != Some(*want))
        .map(|(rel, _)| format!("{rel} ({} bytes)", fs::metadata(m.path(rel)).map(|md| md.len()).unwrap_or(0)))
        .collect();
    m.unmount_clean();
    let fsck = run(&["fsck", &s(&store)]);
    // Regression (fixed): setattr/setxattr/removexattr used to write back a whole inode read
    // before a background ingest committed, dropping the new recipe (empty file after a
    // remount, refcounts off in fsck). They now change only their fields under the store's
    // namespace lock (Store::update_inode).
    assert!(lost.is_empty() && fsck.ok(), "metadata changes racing the ingest lost content after remount: {lost:?}\n{}", fsck.describe());
}

/// A reader opened before a writer rewrites the file, or while it does, must read what the
/// file holds once the rewrite is ingested, not the recipe it had when the reader opened:
/// that one's pieces may still sit in the daemon's cache, and serving them is silent
/// (regressions: open used to give every read-only handle the recipe the inode held at open;
/// a handle opened before the writer kept it after the ingest, found by a review).
#[test]
fn a_reader_of_a_rewritten_file_reads_the_new_content() {
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let mnt = tmp.path().join("mnt");
    let m = Mounted::new(&store, &mnt);
    let old = real_file("webrecorder-pywb/iana.warc.gz");
    let new = real_file("webrecorder-warcio/example.warc.gz");
    for opened in ["before the writer", "while it writes"] {
        fs::write(m.path("f.warc.gz"), &old).unwrap();
        wait_ingested(&store);
        // Read once, so the old recipe's pieces are in the daemon's cache.
        let mut reader = None;
        if opened == "before the writer" {
            let r = File::open(m.path("f.warc.gz")).unwrap();
            let mut first = vec![0u8; 4096];
            assert_eq!(r.read_at(&mut first, 0).unwrap(), 4096);
            assert_eq!(first[..], old[..4096]);
            reader = Some(r);
        } else {
            assert_bytes(&m.path("f.warc.gz"), &old, "before the rewrite");
        }
        let mut writer = OpenOptions::new().write(true).truncate(true).open(m.path("f.warc.gz")).unwrap();
        let reader = reader.unwrap_or_else(|| File::open(m.path("f.warc.gz")).unwrap());
        writer.write_all(&new).unwrap();
        close_checked(writer).unwrap();
        wait_ingested(&store);
        // Not from the kernel's cache (the writer's pages are there): from the daemon.
        drop_caches();
        let mut got = vec![0u8; old.len().max(new.len()) + 1];
        let mut n = 0;
        while n < got.len() {
            match reader.read_at(&mut got[n..], n as u64).unwrap() {
                0 => break,
                k => n += k,
            }
        }
        got.truncate(n);
        assert!(got == new, "a reader opened {opened} read {} bytes (new {}, old {}), first difference at {}", got.len(), new.len(), old.len(), first_diff(&got, &new));
    }
    m.unmount_clean();
}

// ---------------------------------------------------------------------------------------
// 6. Bad mount input
// ---------------------------------------------------------------------------------------

#[test]
fn bad_mount_input() {
    become_subreaper();
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let mnt_a = tmp.path().join("a");
    let mnt_b = tmp.path().join("b");
    fs::create_dir(&mnt_b).unwrap();
    let mnt_b_c = mnt_b.canonicalize().unwrap();
    let mut doubled = Vec::new();

    let missing = tmp.path().join("no-such-dir");
    let line = fails_with(&["mount", &s(&store), &s(&missing)], &[&s(&missing)]);
    eprintln!("missing mount point: {line}");
    let file = tmp.path().join("plain-file");
    fs::write(&file, b"x").unwrap();
    let line = fails_with(&["mount", &s(&store), &s(&file)], &[&s(&file)]);
    eprintln!("mount point is a file: {line}");

    let line = fails_with(&["mount", &s(&store), &s(&mnt_b), "-o", "frobnicate"], &["frobnicate"]);
    eprintln!("unknown option: {line}");
    let line = fails_with(&["mount", &s(&store), &s(&mnt_b), "-o", "ro,bogus_opt"], &["bogus_opt"]);
    eprintln!("unknown option in a list: {line}");
    assert!(!is_mounted(&mnt_b_c));

    let notstore = tmp.path().join("notstore");
    fs::create_dir(&notstore).unwrap();
    fs::write(notstore.join("data.txt"), b"not a store").unwrap();
    let line = fails_with(&["mount", &s(&notstore), &s(&mnt_b)], &[&s(&notstore)]);
    eprintln!("not a store: {line}");
    if line.starts_with("warcfs: warcfs: ") {
        doubled.push(line.clone());
    }
    assert!(!is_mounted(&mnt_b_c));

    // A store that is already mounted: the second mount names the holder.
    let m = Mounted::new(&store, &mnt_a);
    let line = fails_with(&["mount", &s(&store), &s(&mnt_b)], &[&m.pid.to_string(), "in use"]);
    eprintln!("already mounted: {line}");
    if line.starts_with("warcfs: warcfs: ") {
        doubled.push(line.clone());
    }
    assert!(!is_mounted(&mnt_b_c), "the failed second mount left {} mounted", mnt_b.display());
    // The first mount is unaffected.
    fs::write(m.path("hello.txt"), b"hello\n").unwrap();
    assert_bytes(&m.path("hello.txt"), b"hello\n", "first mount after a refused second mount");
    m.unmount_clean();

    // -o ro: reads work, writes fail with EROFS.
    let m = Mounted::with(&store, &mnt_a, &["ro"]);
    assert_bytes(&m.path("hello.txt"), b"hello\n", "read-only mount");
    assert_eq!(errno_of(fs::write(m.path("new.txt"), b"x")), Some(libc::EROFS), "create on a read-only mount");
    assert_eq!(errno_of(OpenOptions::new().write(true).open(m.path("hello.txt"))), Some(libc::EROFS), "open for writing on a read-only mount");
    m.unmount_clean();

    // Regression (fixed): errors the daemon reported back came out as "warcfs: warcfs: ...".
    assert!(doubled.is_empty(), "error lines with a doubled 'warcfs: ' prefix:\n{}", doubled.join("\n"));
}

/// Through the mount, a gzip member whose rebuild does not match its recorded CRC-32 is EIO
/// for that read and a log line naming the file's inode and the offset, never wrong bytes;
/// the next read (the failpoint used up) gets the exact file.
#[test]
#[cfg_attr(not(debug_assertions), ignore = "the failpoint exists in debug builds only")]
fn a_member_that_does_not_rebuild_is_eio_and_a_log_line() {
    let tmp = TempDir::new().unwrap();
    let (store, src) = store_with_sample(tmp.path(), "webrecorder-warcio/example.warc.gz");
    let want = fs::read(&src).unwrap();
    let m = Mounted::with_env(&store, &tmp.path().join("mnt"), &[], &[("WARCFS_FAILPOINTS", "member_rebuilt=1")]);
    let path = m.path("example.warc.gz");
    let err = fs::read(&path).expect_err("a read of a damaged member should fail");
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    let got = fs::read(&path).unwrap();
    assert!(got == want, "{} reads back different bytes", path.display());
    let log = fs::read_to_string(store.join("warcfs.log")).unwrap();
    let line = log.lines().find(|l| l.contains("does not rebuild")).unwrap_or_else(|| panic!("no log line for the damaged member:\n{log}"));
    assert!(line.contains("read of inode") && line.contains("gzip member at offset 0"), "{line}");
    m.unmount_clean();
}

/// A read-only mount asks the kernel for no writeback cache, so a reader's close is not a
/// FLUSH round trip (with the cache the kernel sends one at every close, whatever the open
/// said). Seen through a failpoint that fails every FLUSH: on a read-write mount a reader's
/// `close` reports it (EIO), on a read-only one nothing reaches it. Either way the bytes read
/// are the file's.
#[test]
#[cfg_attr(not(debug_assertions), ignore = "the failpoint exists in debug builds only")]
fn a_read_only_mount_sends_no_flush_at_a_readers_close() {
    let tmp = TempDir::new().unwrap();
    let (store, src) = store_with_sample(tmp.path(), "webrecorder-warcio/example.warc.gz");
    let want = fs::read(&src).unwrap();
    // Open, read it all, close; the close's own result.
    let read_and_close = |path: &Path| -> (Vec<u8>, io::Result<()>) {
        let mut f = fs::File::open(path).unwrap();
        let mut got = Vec::new();
        io::Read::read_to_end(&mut f, &mut got).unwrap();
        // SAFETY: the descriptor is ours (taken from the File) and closed once.
        let rc = unsafe { libc::close(f.into_raw_fd()) };
        (got, if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) })
    };
    let failing = [("WARCFS_FAILPOINTS", "flush=1000")];
    let mnt = tmp.path().join("mnt");
    for (opts, flushed) in [(&[][..], true), (&["ro"][..], false)] {
        let m = Mounted::with_env(&store, &mnt, opts, &failing);
        let (got, closed) = read_and_close(&m.path("example.warc.gz"));
        assert!(got == want, "-o {opts:?}: the bytes read are not the file's");
        match (flushed, closed) {
            (true, Err(e)) => assert_eq!(e.raw_os_error(), Some(libc::EIO), "-o {opts:?}: {e}"),
            (true, Ok(())) => panic!("-o {opts:?}: the failing FLUSH did not reach the close: is the failpoint armed?"),
            (false, Ok(())) => {}
            (false, Err(e)) => panic!("-o {opts:?}: a reader's close on a read-only mount was sent a FLUSH: {e}"),
        }
        m.unmount_clean();
    }
}

/// What a walk of a mounted tree sees of one path: kind, mode, size, mtime, link count, and
/// its bytes (files) or target (symlinks).
type Seen = (String, u32, u64, i64, u64, Vec<u8>);

fn snapshot_tree(root: &Path) -> BTreeMap<String, Seen> {
    let mut out = BTreeMap::new();
    for e in walkdir::WalkDir::new(root).min_depth(1).sort_by_file_name() {
        let e = e.unwrap();
        let md = fs::symlink_metadata(e.path()).unwrap();
        let rel = e.path().strip_prefix(root).unwrap().to_string_lossy().into_owned();
        let (kind, body) = if md.file_type().is_symlink() {
            ("symlink", fs::read_link(e.path()).unwrap().as_os_str().as_bytes().to_vec())
        } else if md.is_dir() {
            ("dir", Vec::new())
        } else {
            ("file", fs::read(e.path()).unwrap())
        };
        // Directory sizes and link counts are the filesystem's own bookkeeping: compared too.
        out.insert(rel, (kind.to_string(), md.mode(), md.size(), md.mtime(), md.nlink(), body));
    }
    out
}

#[test]
fn repair_index_gives_back_what_was_written_through_the_mount() {
    // Files, directories, renames, modes, times, symlinks and hard links made through the
    // mount live in the packs as well: after `rm -rf STORE/index` and `repair index`, a new
    // mount shows the same tree, byte for byte and attribute for attribute.
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let mnt = tmp.path().join("mnt");
    let real = real_corpus();
    let m = Mounted::new(&store, &mnt);
    cp_r(&[&real.join("webrecorder-warcio"), &real.join("iipc-jwarc")], &m.mnt);
    fs::create_dir_all(m.path("a/b/c")).unwrap();
    fs::write(m.path("a/b/c/note.txt"), b"written through the mount\n").unwrap();
    fs::write(m.path("a/gone.txt"), b"removed again").unwrap();
    fs::remove_file(m.path("a/gone.txt")).unwrap();
    fs::rename(m.path("iipc-jwarc"), m.path("a/jwarc")).unwrap();
    fs::set_permissions(m.path("a/b/c/note.txt"), fs::Permissions::from_mode(0o640)).unwrap();
    std::os::unix::fs::symlink("b/c/note.txt", m.path("a/link")).unwrap();
    fs::hard_link(m.path("a/b/c/note.txt"), m.path("a/hard.txt")).unwrap();
    let f = File::options().write(true).open(m.path("a/b/c/note.txt")).unwrap();
    f.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(1_000_000_000)).unwrap();
    drop(f);
    wait_ingested(&store);
    let before = snapshot_tree(&m.mnt);
    assert!(before.len() > 10, "{:?}", before.keys());
    m.unmount_clean();

    fs::remove_dir_all(store.join("index")).unwrap();
    let r = ok(&["repair", "index", &s(&store)]);
    eprintln!("{}", r.out());
    assert_fsck_clean(&store);
    let m = Mounted::new(&store, &mnt);
    let after = snapshot_tree(&m.mnt);
    for (p, b) in &before {
        let a = after.get(p).unwrap_or_else(|| panic!("{p} is gone after repair"));
        assert_eq!((&a.0, a.1, a.2, a.3, a.4), (&b.0, b.1, b.2, b.3, b.4), "{p}: kind, mode, size, mtime, links after repair");
        assert!(a.5 == b.5, "{p}: bytes after repair");
    }
    assert_eq!(after.keys().collect::<Vec<_>>(), before.keys().collect::<Vec<_>>());
    m.unmount_clean();
}

#[test]
fn the_cli_on_a_mounted_store_refuses_staged_files_instead_of_stale_bytes() {
    // A WARC still being written through the mount: `warcfs cat` and `warcfs index` of the
    // store used to print its old bytes (or none) and exit 0. They must fail, naming it,
    // until the mount has stored it; then they give the new bytes.
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let mnt = tmp.path().join("mnt");
    let warc = real_file("webrecorder-warcio/example.warc.gz");
    let m = Mounted::new(&store, &mnt);
    let mut f = File::create(m.path("live.warc.gz")).unwrap();
    f.write_all(&warc).unwrap();
    f.sync_all().unwrap();
    for args in [vec!["cat", &s(&store) as &str, "/live.warc.gz"], vec!["index", &s(&store)]] {
        let r = run(&args);
        assert!(!r.ok() && r.stderr.contains("live.warc.gz") && r.stderr.contains("being written through a mount"), "{args:?} while staged:\n{}", r.describe());
    }
    // The mount's own live index leaves it out until it is stored, rather than fail.
    let live = fs::read_to_string(m.path(".warcfs/index.cdxj")).unwrap();
    assert!(!live.contains("live.warc.gz"), "{live}");
    drop(f);
    wait_ingested(&store);
    // The mount rebuilds its index at most once a second.
    std::thread::sleep(Duration::from_millis(1100));
    let live = fs::read_to_string(m.path(".warcfs/index.cdxj")).unwrap();
    assert!(live.contains("live.warc.gz") && live == ok(&["index", &s(&store)]).out(), "the mount's index once stored equals `warcfs index`");
    let r = ok(&["cat", &s(&store), "/live.warc.gz"]);
    assert!(r.stdout == warc, "cat after the mount stored it");
    assert!(ok(&["index", &s(&store)]).out().contains("live.warc.gz"));
    m.unmount_clean();
}

#[test]
fn umount_returns_once_everything_is_stored_and_mount_waits_for_a_draining_daemon() {
    // `fusermount3 -u` returns while the daemon still ingests what was written; `warcfs
    // umount` must return only once it is all stored and the daemon is gone, and a `warcfs
    // mount` issued while a daemon drains must wait for it rather than fail "in use".
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let mnt = tmp.path().join("mnt");
    let crawls = crawl_files();
    let m = Mounted::new(&store, &mnt);
    fs::copy(&crawls[0], m.path("c1.warc.gz")).unwrap();
    let r = ok(&["umount", &s(&m.mnt)]);
    assert!(r.out().contains("every file written through it is stored"), "{}", r.describe());
    assert!(!is_mounted(&m.mnt));
    // No waiting here: the lock is free and the file is stored.
    let st = stats(&store);
    assert_eq!(num(&st, "staged_files"), 0, "{st}");
    assert!(ok(&["cat", &s(&store), "/c1.warc.gz"]).stdout == fs::read(&crawls[0]).unwrap());
    drop(m);

    let mut m = Mounted::new(&store, &mnt);
    fs::copy(&crawls[1], m.path("c2.warc.gz")).unwrap();
    fusermount_u(&m.mnt).unwrap();
    // Unmounted by hand: this guard must not unmount what comes next at the same path.
    m.live = false;
    let old_pid = m.pid;
    // At once: the old daemon is (most likely) still storing c2.
    let r = run(&["mount", &s(&store), &s(&mnt)]);
    let pid = fs::read_to_string(store.join("lock")).ok().and_then(|p| p.trim().parse::<i32>().ok()).unwrap_or(-1);
    let m2 = Mounted { mnt: mnt.canonicalize().unwrap(), store: store.clone(), pid, live: true };
    assert!(r.ok(), "mount while the previous daemon drains:\n{}", r.describe());
    assert_ne!(pid, old_pid, "a new daemon holds the store");
    assert!(wait_exit(old_pid, Duration::from_secs(60)).is_some(), "the old daemon is gone");
    for (name, src) in [("c1.warc.gz", &crawls[0]), ("c2.warc.gz", &crawls[1])] {
        assert_bytes(&m2.path(name), &fs::read(src).unwrap(), "after mounting over a draining daemon");
    }
    m2.unmount_clean();
}

#[test]
fn a_large_directory_lists_every_entry_once() {
    // Thousands of entries take many readdir replies; each reply used to read the whole
    // directory again (O(n^2)). The listing, now read once per open directory, must still
    // hold every name exactly once, and a rewind must see a file created since.
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let src = tmp.path().join("big");
    fs::create_dir(&src).unwrap();
    let names: BTreeSet<String> = (0..3000).map(|i| format!("r{i:05}.warc")).collect();
    for n in &names {
        File::create(src.join(n)).unwrap();
    }
    ok(&["import", &s(&store), &s(&src)]);
    let m = Mounted::new(&store, &tmp.path().join("mnt"));
    let listed: Vec<String> = fs::read_dir(m.path("big")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(listed.len(), names.len(), "no name twice");
    assert_eq!(listed.into_iter().collect::<BTreeSet<_>>(), names);
    fs::write(m.path("big/zz-new.warc"), b"").unwrap();
    let again: BTreeSet<String> = fs::read_dir(m.path("big")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(again.contains("zz-new.warc") && again.len() == names.len() + 1);
    m.unmount_clean();
}

#[test]
#[cfg_attr(not(debug_assertions), ignore = "the crash points exist in debug builds only")]
fn a_daemon_killed_at_each_durability_point_of_a_write_loses_nothing_closed() {
    // The daemon SIGKILLs itself (WARCFS_CRASH_AT=point:k) at each point of the write path:
    // a staged file created and synced, its size recorded (a metadata log record), the
    // background ingest's chunks appended and synced, its log record, its commit, a pack
    // sealed. Every file whose close returned success must read back exact after a remount,
    // and fsck must pass. Deterministic: the same points on every run.
    let real = real_corpus();
    let files: Vec<(String, Vec<u8>)> = ["webrecorder-warcio/example.warc.gz", "iipc-jwarc", "webrecorder-pywb"]
        .iter()
        .flat_map(|d| expected_files(&[real.join(d)], "/").into_values())
        .take(6)
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), fs::read(&p).unwrap()))
        .collect();
    assert!(files.len() >= 4);
    let tmp = TempDir::new().unwrap();
    let points = [
        ("staged_created", 1), ("staged_synced", 1), ("staged_synced", 3), ("log_synced", 2), ("log_synced", 5),
        ("pack_appended", 1), ("pack_appended", 8), ("pack_synced", 1), ("before_commit", 1), ("committed", 1), ("committed", 3), ("pack_footer_synced", 1),
    ];
    let mut killed_at: BTreeMap<&str, usize> = BTreeMap::new();
    for (trial, (point, k)) in points.into_iter().enumerate() {
        let store = tmp.path().join(format!("store{trial}"));
        let mnt = tmp.path().join(format!("mnt{trial}"));
        let ctx = format!("crash at {point}:{k}");
        // Created beforehand, with one file stored, so the daemon's passes are those of the
        // writes alone; the first write rewrites that file (copy on write into staging).
        let pre = tmp.path().join(format!("pre{trial}"));
        fs::create_dir(&pre).unwrap();
        fs::write(pre.join("rewritten"), &files[1].1).unwrap();
        ok(&["import", &s(&store), &s(&pre.join("rewritten"))]);
        let mut m = Mounted::with_env(&store, &mnt, &[], &[("WARCFS_CRASH_AT", &format!("{point}:{k}"))]);
        let mut closed = Vec::new();
        let rewrite = ("rewritten".to_string(), files[0].1.clone());
        for (name, bytes) in std::iter::once(&rewrite).chain(files.iter()) {
            let written = File::create(m.path(name)).and_then(|mut f| {
                f.write_all(bytes)?;
                close_checked(f)
            });
            if written.is_err() {
                break;
            }
            closed.push((name.clone(), bytes.clone()));
        }
        // The crash may come in the background ingest after the last close, or at the seal
        // when unmounting.
        let t0 = Instant::now();
        let mut exit = None;
        while exit.is_none() && num(&stats(&store), "staged_files") > 0 && t0.elapsed() < Duration::from_secs(120) {
            exit = try_reap(m.pid);
            std::thread::sleep(Duration::from_millis(50));
        }
        let exit = match exit.or_else(|| try_reap(m.pid)) {
            Some(e) => {
                m.live = false;
                let _ = fusermount_u(&m.mnt).or_else(|_| umount_lazy(&m.mnt));
                e
            }
            None => m.unmount(),
        };
        let killed = exit == Exit::Signal(libc::SIGKILL);
        assert!(killed || exit == Exit::Code(0), "daemon exit {exit:?} ({ctx})");
        *killed_at.entry(point).or_default() += killed as usize;
        let r = run(&["fsck", &s(&store)]);
        assert!(r.ok(), "fsck after a {ctx}:\n{}", r.describe());
        let m = Mounted::new(&store, &mnt);
        for (name, bytes) in &closed {
            assert_bytes(&m.path(name), bytes, &format!("closed before a {ctx}, after remount"));
        }
        wait_ingested(&store);
        m.unmount_clean();
        assert!(run(&["fsck", &s(&store)]).ok(), "{ctx}");
    }
    eprintln!("daemons killed at each point: {killed_at:?}");
    for (point, n) in &killed_at {
        assert!(*n > 0, "no write passed through {point}: {killed_at:?}");
    }
}

#[test]
fn recovery_of_a_staged_file_never_silently_falls_back() {
    // A file being rewritten when the daemon died is staged: its new bytes are in
    // STORE/staging. If they are gone (never made durable), the file is what its last commit
    // made it, size included; if they are there but cannot be read, the mount refuses,
    // naming them, rather than serve the older bytes.
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let mnt = tmp.path().join("mnt");
    let old = real_file("webrecorder-warcio/example.warc.gz");
    let m = Mounted::new(&store, &mnt);
    fs::write(m.path("a.warc.gz"), &old).unwrap();
    wait_ingested(&store);
    m.unmount_clean();
    let leave_staged = || {
        let mut m = Mounted::new(&store, &mnt);
        let mut f = OpenOptions::new().write(true).truncate(true).open(m.path("a.warc.gz")).unwrap();
        f.write_all(b"new bytes, staged when the daemon dies").unwrap();
        f.sync_all().unwrap();
        m.kill_daemon();
        drop(f);
        m.unmount_dead();
        let staged: Vec<PathBuf> = fs::read_dir(store.join("staging")).unwrap().map(|e| e.unwrap().path()).collect();
        assert_eq!(staged.len(), 1, "one staged file after the kill");
        staged[0].clone()
    };
    // Staged bytes gone: the committed content, with its size.
    let staged = leave_staged();
    fs::remove_file(&staged).unwrap();
    let m = Mounted::new(&store, &mnt);
    assert_bytes(&m.path("a.warc.gz"), &old, "staged bytes lost: the last commit");
    assert_eq!(fs::metadata(m.path("a.warc.gz")).unwrap().len(), old.len() as u64);
    m.unmount_clean();
    assert!(run(&["fsck", &s(&store)]).ok());
    // Staged bytes unreadable (here: a directory in their place): the mount refuses.
    let staged = leave_staged();
    fs::remove_file(&staged).unwrap();
    fs::create_dir(&staged).unwrap();
    let r = run(&["mount", &s(&store), &s(&mnt)]);
    let name = staged.display().to_string();
    assert!(!r.ok() && r.stderr.contains(&name), "the mount refuses, naming the staged file:\n{}", r.describe());
    assert!(log_tail(&store).contains(&name), "the log names it too:\n{}", log_tail(&store));
    assert!(!is_mounted(&mnt));
    fs::remove_dir(&staged).unwrap();
    let m = Mounted::new(&store, &mnt);
    assert_bytes(&m.path("a.warc.gz"), &old, "after the unreadable staged file was removed");
    m.unmount_clean();
}
