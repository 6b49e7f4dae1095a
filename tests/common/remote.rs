//! The object-store tests' set-up: a real 3-node Garage cluster on 127.0.0.1
//! (`scripts/garage-cluster`, installed by `scripts/setup`), stopped when dropped, a bucket
//! in a shared directory, and the guard of a mount made with `warcfs mount`.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;

pub const CLUSTER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/garage-cluster");

/// A running Garage cluster, stopped when dropped.
pub struct Cluster {
    pub dir: PathBuf,
    pub env: HashMap<String, String>,
    /// Its claim on its base port, held while it lives (`Cluster::start`): a test that stops
    /// the cluster and starts it again needs the same ports, which another cluster (another
    /// test, or another run of the suite at once) must not take in between.
    _claim: fs::File,
}

impl Cluster {
    /// Starts a cluster in `dir`, its ports from a base near `base` that is free: two test
    /// runs at once (a CI clone beside a checkout) must not meet on the same ports.
    pub fn start(dir: &Path, base: u16) -> Cluster {
        let ports_free = |b: u16| (0..3u16).flat_map(|i| [0u16, 1, 3].map(|o| b + 10 * i + o)).all(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok());
        let claims = std::env::temp_dir().join("warcfs-garage-ports");
        fs::create_dir_all(&claims).unwrap();
        let mut last = String::new();
        for attempt in 0..40u32 {
            // Spread over 30000-59999, a different start per process and per test.
            let b = 30000 + ((base as u32 + std::process::id() * 37 + attempt * 977) % 300) as u16 * 100;
            // Claimed by a live cluster (its ports may be free just now: stopped for a test).
            let claim = fs::OpenOptions::new().create(true).truncate(false).write(true).open(claims.join(format!("{b}.lock"))).unwrap();
            // SAFETY: flock on a descriptor we own; released when the file is closed, also
            // if this process dies.
            if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&claim), libc::LOCK_EX | libc::LOCK_NB) } != 0 || !ports_free(b) {
                continue;
            }
            let out = Command::new(CLUSTER).args(["start", &s(dir), &b.to_string()]).stdin(std::process::Stdio::null()).output().expect("spawn garage-cluster");
            if out.status.success() {
                let mut c = Cluster { dir: dir.to_path_buf(), env: HashMap::new(), _claim: claim };
                c.read_env();
                return c;
            }
            last = String::from_utf8_lossy(&out.stderr).into_owned();
            let _ = Command::new(CLUSTER).args(["stop", &s(dir)]).status();
            let _ = fs::remove_dir_all(dir);
            if !last.contains("already in use") {
                break;
            }
        }
        panic!("garage-cluster start failed: {last}");
    }

    pub fn read_env(&mut self) {
        for line in fs::read_to_string(self.dir.join("env")).unwrap().lines() {
            let Some(kv) = line.strip_prefix("export ") else { continue };
            let (k, v) = kv.split_once('=').unwrap();
            self.env.insert(k.to_string(), v.trim_matches('\'').trim_matches('"').to_string());
        }
    }

    pub fn vars(&self) -> Vec<(&str, &str)> {
        ["AWS_ENDPOINT_URL", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"].iter().map(|k| (*k, self.env[*k].as_str())).collect()
    }

    /// `warcfs ARGS` with the cluster's credentials.
    pub fn run(&self, args: &[&str]) -> Run {
        run_env(args, &self.vars())
    }

    pub fn ok(&self, args: &[&str]) -> Run {
        let r = self.run(args);
        assert!(r.ok(), "{}", r.describe());
        r
    }

    /// Stops every node; its ports stay claimed (`_claim`).
    pub fn stop(&self) {
        self.cluster(&["stop"]);
    }

    /// Starts the stopped nodes again, on their ports.
    pub fn restart(&self) {
        self.cluster(&["start"]);
    }

    pub fn cluster(&self, args: &[&str]) {
        let mut all = vec![args[0].to_string(), s(&self.dir)];
        all.extend(args[1..].iter().map(|a| a.to_string()));
        checked(Command::new(CLUSTER).args(&all), "garage-cluster");
    }

    /// Names of the objects under `prefix/packs/` (through a store's own view: `stats`).
    pub fn packs_in_bucket(&self, store: &Path) -> u64 {
        let st = self.ok(&["stats", &s(store), "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
        num(&v, "packs")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(CLUSTER).args(["stop", &s(&self.dir)]).status();
    }
}

/// A bucket in a shared directory under `tmp` (`file://`), its URL, and the STORE
/// directories of two nodes of it.
pub fn file_bucket(tmp: &Path) -> (PathBuf, String, PathBuf, PathBuf) {
    let shared = tmp.join("shared");
    let url = format!("file://{}", shared.display());
    (shared, url, tmp.join("node-a"), tmp.join("node-b"))
}

/// An fsck that passed and says the store is clean.
pub fn assert_clean(r: &Run) {
    assert!(r.ok() && r.out().contains("clean"), "{}", r.describe());
}

pub fn cat_with(c: &Cluster, store: &Path, path: &str) -> Vec<u8> {
    c.ok(&["cat", &s(store), path]).stdout
}

/// Unmounts (and waits for the daemon to let the store go) when dropped.
pub struct MountGuard {
    pub mnt: PathBuf,
    pub store: PathBuf,
}

impl Drop for MountGuard {
    fn drop(&mut self) {
        let _ = run(&["umount", &s(&self.mnt)]);
        // A mount `warcfs umount` could not end (its daemon killed, say): lazily, quietly.
        if fs::read_to_string("/proc/mounts").unwrap_or_default().contains(&format!(" {} ", s(&self.mnt))) {
            let _ = Command::new("fusermount3").args(["-u", "-z", &s(&self.mnt)]).stderr(std::process::Stdio::null()).status();
        }
        let t0 = std::time::Instant::now();
        while fs::File::open(self.store.join("lock")).is_ok_and(|f| {
            use std::os::fd::AsRawFd;
            // SAFETY: flock on a descriptor we own.
            unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) != 0 }
        }) && t0.elapsed() < std::time::Duration::from_secs(120)
        {
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }
}
