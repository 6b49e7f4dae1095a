//! POSIX conformance of the FUSE mount, with two external suites run against a fresh store:
//!
//! * `pjdfstest` (0.2.2, the Rust rewrite) with `tests/conformance/pjdfstest.toml`, whose
//!   `expected_failures` list holds the tests that do not apply to warcfs, each with its
//!   reason (also in `docs/CONFORMANCE.md`);
//! * `fsx` (0.3.2) for 100,000 seeded operations on one file, with
//!   `tests/conformance/fsx.toml`.
//!
//! Both tools come from `cargo install --locked`, which `scripts/setup` runs; a missing tool
//! fails the test (it never skips). As root the mount gets `allow_other`, so that
//! pjdfstest's user-switching tests can reach it; as another user those tests are skipped by
//! pjdfstest itself.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// The binary under test; `WARCFS_BIN` overrides it (to run these suites against another build).
fn bin() -> PathBuf {
    std::env::var_os("WARCFS_BIN").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_warcfs")))
}
const CONF_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/conformance");
/// The pjdfstest run takes seconds; this only stops a hung mount from hanging the test.
const PJDFSTEST_TIMEOUT: Duration = Duration::from_secs(900);
const FSX_TIMEOUT: Duration = Duration::from_secs(1800);
const FSX_OPS: u32 = 100_000;
const FSX_SEED: u32 = 20260101;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Finds an installed tool on PATH or in cargo's bin directory; panics (fails the test) if
/// it is missing.
fn tool(name: &str, version: &str) -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect()).unwrap_or_default();
    if let Some(home) = std::env::var_os("CARGO_HOME") {
        dirs.push(PathBuf::from(home).join("bin"));
    }
    if let Some(home) = std::env::var_os("HOME") {
        dirs.push(PathBuf::from(home).join(".cargo/bin"));
    }
    for d in dirs {
        let p = d.join(name);
        if p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0) {
            return p;
        }
    }
    panic!(
        "`{name}` is not installed (not on PATH nor in ~/.cargo/bin): run scripts/setup, which installs it \
         with `cargo install --locked {name}@{version}`"
    );
}

/// A fresh store mounted in a temporary directory; unmounted (and its daemon waited for) on
/// drop, whatever happened in between.
struct Mount {
    tmp: TempDir,
    store: PathBuf,
    mnt: PathBuf,
    pid: Option<i32>,
}

impl Mount {
    fn new() -> Mount {
        let tmp = TempDir::new().unwrap();
        let store = tmp.path().join("store");
        let mnt = tmp.path().join("mnt");
        fs::create_dir(&mnt).unwrap();
        let mut cmd = Command::new(bin());
        cmd.arg("mount");
        if is_root() {
            cmd.args(["-o", "allow_other"]);
        }
        let out = cmd.arg(&store).arg(&mnt).stdin(Stdio::null()).output().expect("running warcfs mount");
        assert!(
            out.status.success(),
            "warcfs mount {} {} failed: {}{}",
            store.display(),
            mnt.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let pid = fs::read_to_string(store.join("lock")).ok().and_then(|s| s.trim().parse().ok());
        let m = Mount { tmp, store, mnt, pid };
        // Others (pjdfstest's dummy users) must be able to traverse the mount's root.
        fs::set_permissions(&m.mnt, fs::Permissions::from_mode(0o755)).unwrap();
        m
    }

    /// A directory inside the mount, mode 0755.
    fn dir(&self, name: &str) -> PathBuf {
        let d = self.mnt.join(name);
        fs::create_dir(&d).unwrap();
        fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).unwrap();
        d
    }

    /// The daemon's process exists and is not a zombie (it is reparented on daemonizing, so
    /// nobody here reaps it).
    fn daemon_alive(&self) -> bool {
        self.pid.is_some_and(|p| {
            fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|st| st.rsplit_once(')').map(|(_, rest)| rest.trim_start().chars().next()))
                .is_some_and(|state| !matches!(state, Some('Z') | Some('X')))
        })
    }

    /// Panics with the tail of the store's log if the daemon died or the mount stopped
    /// answering.
    fn assert_healthy(&self, what: &str, tool_output: &str) {
        // read_dir goes to the daemon (stat of the root may come from the kernel's cache).
        let answers = fs::read_dir(&self.mnt).is_ok();
        if !(answers && self.daemon_alive()) {
            panic!(
                "the warcfs daemon (pid {:?}) died or the mount stopped answering during {what} \
                 (panics and signals are not in the log; re-run `warcfs mount -f` to see them); \
                 {what} output ends:\n{}\nlast lines of {}/warcfs.log (mknod warnings left out):\n{}",
                self.pid,
                tail(tool_output, 12),
                self.store.display(),
                tail(&log_lines(&fs::read_to_string(self.store.join("warcfs.log")).unwrap_or_default()), 15)
            );
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let ok = Command::new("fusermount3").arg("-u").arg(&self.mnt).stderr(Stdio::null()).status().is_ok_and(|s| s.success());
        if !ok {
            // Busy or dead: detach lazily so the temporary directory can go.
            let _ = Command::new("fusermount3").arg("-uz").arg(&self.mnt).stderr(Stdio::null()).status();
        }
        // The daemon finishes queued ingests and seals its pack before it exits.
        let t0 = Instant::now();
        while self.daemon_alive() && t0.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = &self.tmp;
    }
}

/// The log's entries without fuser's (multi-line) warnings about mknod, which pjdfstest
/// triggers by the hundred.
fn log_lines(log: &str) -> String {
    let mut out = Vec::new();
    let mut skipping = false;
    for l in log.lines() {
        if l.starts_with('[') {
            skipping = l.contains("[Not Implemented] mknod");
        }
        if !skipping {
            out.push(l);
        }
    }
    out.join("\n")
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // CSI: ESC [ params final-byte
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Runs a command with stdout and stderr in `log`, killing it after `timeout`.
fn run_logged(cmd: &mut Command, log: &Path, timeout: Duration) -> (std::process::ExitStatus, String, Duration) {
    let f = fs::File::create(log).unwrap();
    let t0 = Instant::now();
    let mut child = cmd.stdin(Stdio::null()).stdout(f.try_clone().unwrap()).stderr(f).spawn().expect("spawning the tool");
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not finish in {timeout:?}; output so far:\n{}", tail(&fs::read_to_string(log).unwrap_or_default(), 60));
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let elapsed = t0.elapsed();
    (status, strip_ansi(&fs::read_to_string(log).unwrap_or_default()), elapsed)
}

#[derive(Debug)]
struct Summary {
    failed: u64,
    skipped: u64,
    passed: u64,
    excluded: u64,
    total: u64,
}

/// Parses `Summary: 0 failed, 47 skipped, 351 passed, 12 expected failures, 410 total`.
fn parse_summary(out: &str) -> Option<Summary> {
    let line = out.lines().rev().find(|l| l.trim_start().starts_with("Summary:"))?;
    let mut nums = std::collections::HashMap::new();
    for part in line.trim_start().trim_start_matches("Summary:").split(',') {
        let part = part.trim();
        let (n, what) = part.split_once(' ')?;
        nums.insert(what.trim().to_string(), n.parse::<u64>().ok()?);
    }
    Some(Summary {
        failed: *nums.get("failed")?,
        skipped: *nums.get("skipped")?,
        passed: *nums.get("passed")?,
        excluded: *nums.get("expected failures")?,
        total: *nums.get("total")?,
    })
}

#[test]
fn pjdfstest_passes_with_listed_exclusions() {
    let pjdfstest = tool("pjdfstest", "0.2.2");
    let config = Path::new(CONF_DIR).join("pjdfstest.toml");
    assert!(config.is_file(), "{} is missing", config.display());
    let m = Mount::new();
    let dir = m.dir("pjdfstest");
    // A directory on another file system, for the EXDEV tests of link and rename.
    let secondary = m.tmp.path().join("secondary");
    fs::create_dir(&secondary).unwrap();
    let log = m.tmp.path().join("pjdfstest.log");
    let (status, out, took) = run_logged(
        Command::new(&pjdfstest)
            .arg("-c")
            .arg(&config)
            .arg("-p")
            .arg(&dir)
            .arg("-s")
            .arg(&secondary)
            .env("NO_COLOR", "1")
            .env("RUST_BACKTRACE", "0"),
        &log,
        PJDFSTEST_TIMEOUT,
    );
    m.assert_healthy("pjdfstest", &out);
    let Some(sum) = parse_summary(&out) else {
        panic!("pjdfstest printed no summary (exit {status}); output:\n{}", tail(&out, 80));
    };
    let applicable = sum.total - sum.skipped - sum.excluded;
    let share = if applicable == 0 { 0.0 } else { sum.passed as f64 / applicable as f64 };
    println!(
        "pjdfstest in {:.1} s: {} passed, {} failed, {} skipped, {} excluded (listed in {}), {} total; \
         pass share over applicable tests {:.1} % ({}/{})",
        took.as_secs_f64(),
        sum.passed,
        sum.failed,
        sum.skipped,
        sum.excluded,
        config.display(),
        sum.total,
        share * 100.0,
        sum.passed,
        applicable
    );
    // Failures print their panic message on the next line: show both.
    let lines: Vec<&str> = out.lines().collect();
    let detail: Vec<String> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.trim_end().ends_with("FAILED") || l.trim_end().ends_with("PASSED UNEXPECTEDLY"))
        .map(|(i, l)| format!("{}\n    {}", l.split_whitespace().collect::<Vec<_>>().join(" "), lines.get(i + 1).map_or("", |n| n.trim())))
        .collect();
    assert_eq!(
        sum.failed,
        0,
        "{} pjdfstest tests failed outside the exclusion list (an unexpected pass means an exclusion no \
         longer applies: drop it from {} and docs/CONFORMANCE.md):\n{}",
        detail.len(),
        config.display(),
        detail.join("\n")
    );
    assert!(status.success(), "pjdfstest exited with {status}; output:\n{}", tail(&out, 40));
    assert!(share >= 0.95, "pass share {:.1} % is under 95 %", share * 100.0);
}

#[test]
fn fsx_100k_ops() {
    let fsx = tool("fsx", "0.3.2");
    let config = Path::new(CONF_DIR).join("fsx.toml");
    assert!(config.is_file(), "{} is missing", config.display());
    let m = Mount::new();
    let dir = m.dir("fsx");
    let artifacts = m.tmp.path().join("fsx-artifacts");
    fs::create_dir(&artifacts).unwrap();
    let log = m.tmp.path().join("fsx.log");
    let (status, out, took) = run_logged(
        Command::new(&fsx)
            .arg("-N")
            .arg(FSX_OPS.to_string())
            .arg("-S")
            .arg(FSX_SEED.to_string())
            .arg("-f")
            .arg(&config)
            .arg("-P")
            .arg(&artifacts)
            .arg(dir.join("fsx.bin")),
        &log,
        FSX_TIMEOUT,
    );
    m.assert_healthy("fsx", &out);
    println!("fsx: {FSX_OPS} operations, seed {FSX_SEED}, {} in {:.1} s", if status.success() { "passed" } else { "FAILED" }, took.as_secs_f64());
    assert!(
        status.success(),
        "fsx -N {FSX_OPS} -S {FSX_SEED} -f {} failed (exit {status}); re-run that command on a mounted store \
         to reproduce; its output ends:\n{}",
        config.display(),
        tail(&out, 80)
    );
}
