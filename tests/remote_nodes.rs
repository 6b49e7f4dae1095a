//! Several nodes of one bucket at once, against a real 3-node Garage cluster
//! (`common::remote`): a following node sees what the writing node closes within seconds and
//! outlives its death; several writers, each under its own directory, read everything, survive
//! a kill, and keep gc off while their packs wait to go up. Each test starts a cluster of its
//! own and stops it, even on failure.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::*;

#[test]
fn a_file_closed_on_the_writing_node_appears_on_a_following_node_within_seconds() {
    let tmp = tempfile::tempdir().unwrap();
    let c = Cluster::start(&tmp.path().join("garage"), 45500);
    let n = WriterAndFollower::start(&c, tmp.path(), "s3://warcfs/follow");
    let files = crawl_files();
    for f in &files[..2] {
        let t0 = std::time::Instant::now();
        fs::copy(f, n.ma.join(f.file_name().unwrap())).unwrap();
        // Closed on A: on B within 10 s (ingest, publish, upload, follow), byte for byte.
        n.on_follower(f, 10 + 10 * (fs::metadata(f).unwrap().len() >> 26));
        eprintln!("{:?} ({} bytes) on the following node {:?} after cp began", f.file_name().unwrap(), fs::metadata(f).unwrap().len(), t0.elapsed());
    }
    // The follower writes nothing.
    let err = fs::write(n.mb.join("new.warc"), b"WARC/1.0\r\n").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    // A removal on A reaches B too.
    let gone = files[0].file_name().unwrap();
    fs::remove_file(n.ma.join(gone)).unwrap();
    let t0 = std::time::Instant::now();
    while n.mb.join(gone).exists() {
        assert!(t0.elapsed().as_secs() < 15, "{gone:?} still on the following node");
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    // Both stop; the follower becomes the writer. Its index (which followed, keeping no
    // refcounts) is rebuilt first, so its gc keeps every file A wrote.
    let b = n.b.clone();
    drop(n);
    c.ok(&["gc", &s(&b)]);
    let kept = format!("/{}", files[1].file_name().unwrap().to_str().unwrap());
    assert!(cat_with(&c, &b, &kept) == fs::read(&files[1]).unwrap(), "B's gc lost what A wrote");
    let fsck = c.run(&["fsck", "--deep", &s(&b)]);
    assert_clean(&fsck);
}

#[test]
fn a_writing_node_killed_leaves_the_followers_alone_and_recovers_on_its_next_mount() {
    let tmp = tempfile::tempdir().unwrap();
    let c = Cluster::start(&tmp.path().join("garage"), 45600);
    let mut n = WriterAndFollower::start(&c, tmp.path(), "s3://warcfs/killed");
    let files = crawl_files();
    fs::copy(&files[0], n.ma.join(files[0].file_name().unwrap())).unwrap();
    n.on_follower(&files[0], 20);

    // A file closed on A, then A's daemon is killed (-9) before it can publish it.
    fs::copy(&files[1], n.ma.join(files[1].file_name().unwrap())).unwrap();
    let pid: i32 = fs::read_to_string(n.a.join("lock")).unwrap().trim().parse().unwrap();
    // SAFETY: kill(2) of the daemon this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    n.ga.take();
    // B goes on serving what it has.
    let first = files[0].file_name().unwrap();
    assert!(fs::read(n.mb.join(first)).unwrap() == fs::read(&files[0]).unwrap());

    // A mounts again: its staged file is stored, published and reaches B.
    c.ok(&["mount", &s(&n.a), &s(&n.ma)]);
    n.ga = Some(MountGuard { mnt: n.ma.clone(), store: n.a.clone() });
    let second = files[1].file_name().unwrap();
    assert!(fs::read(n.ma.join(second)).unwrap() == fs::read(&files[1]).unwrap(), "A lost what it had when killed");
    n.on_follower(&files[1], 30);
}

/// Node A (writing, mounted at `ma`) and node B (following, mounted read-only at `mb`) of
/// one bucket; both unmounted when dropped (B first).
struct WriterAndFollower {
    a: PathBuf,
    b: PathBuf,
    ma: PathBuf,
    mb: PathBuf,
    gb: Option<MountGuard>,
    ga: Option<MountGuard>,
}

impl WriterAndFollower {
    fn start(c: &Cluster, dir: &Path, url: &str) -> WriterAndFollower {
        let (a, b) = (dir.join("node-a"), dir.join("node-b"));
        c.ok(&["init", &s(&a), "--backend", url]);
        c.ok(&["init", &s(&b), "--backend", url]);
        let (ma, mb) = (dir.join("mnt-a"), dir.join("mnt-b"));
        fs::create_dir_all(&ma).unwrap();
        fs::create_dir_all(&mb).unwrap();
        c.ok(&["mount", &s(&a), &s(&ma)]);
        let ga = Some(MountGuard { mnt: ma.clone(), store: a.clone() });
        c.ok(&["mount", &s(&b), &s(&mb), "-o", "ro"]);
        let gb = Some(MountGuard { mnt: mb.clone(), store: b.clone() });
        WriterAndFollower { a, b, ma, mb, gb, ga }
    }

    /// Waits until `f` reads back exactly on the follower; returns how long that took.
    fn on_follower(&self, f: &Path, within_secs: u64) -> std::time::Duration {
        let t0 = std::time::Instant::now();
        let name = f.file_name().unwrap();
        while !(self.mb.join(name).exists() && fs::read(self.mb.join(name)).unwrap() == fs::read(f).unwrap()) {
            assert!(t0.elapsed().as_secs() < within_secs, "{name:?} not on the following node after {:?}", t0.elapsed());
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
        t0.elapsed()
    }
}

impl Drop for WriterAndFollower {
    fn drop(&mut self) {
        self.gb.take();
        self.ga.take();
    }
}

/// Two nodes writing one bucket at once (`init --writers several`): A as `alpha`, mounted at
/// `ma`, and B as `beta`, at `mb`; both unmounted when dropped.
struct TwoWriters {
    a: PathBuf,
    b: PathBuf,
    ma: PathBuf,
    mb: PathBuf,
    ga: Option<MountGuard>,
    gb: Option<MountGuard>,
}

impl TwoWriters {
    fn init(c: &Cluster, dir: &Path, url: &str) -> TwoWriters {
        let (a, b) = (dir.join("node-a"), dir.join("node-b"));
        let made = c.ok(&["init", &s(&a), "--backend", url, "--writers", "several", "--node-name", "alpha"]);
        assert!(made.out().contains("writing under /alpha/"), "{}", made.describe());
        c.ok(&["init", &s(&b), "--backend", url, "--node-name", "beta"]);
        let (ma, mb) = (dir.join("mnt-a"), dir.join("mnt-b"));
        fs::create_dir_all(&ma).unwrap();
        fs::create_dir_all(&mb).unwrap();
        TwoWriters { a, b, ma, mb, ga: None, gb: None }
    }

    fn mount(&mut self, c: &Cluster) {
        c.ok(&["mount", &s(&self.a), &s(&self.ma)]);
        self.ga = Some(MountGuard { mnt: self.ma.clone(), store: self.a.clone() });
        c.ok(&["mount", &s(&self.b), &s(&self.mb)]);
        self.gb = Some(MountGuard { mnt: self.mb.clone(), store: self.b.clone() });
    }

    fn unmount(&mut self) {
        self.gb.take();
        self.ga.take();
    }
}

impl Drop for TwoWriters {
    fn drop(&mut self) {
        self.unmount();
    }
}

/// Waits until `path` reads back as `src` does; fails after `within_secs`, saying what the
/// path gave last and how each of `stores`' logs ends (the tempdir goes with the failure).
fn appears(path: &Path, src: &Path, within_secs: u64, stores: &[&Path]) -> std::time::Duration {
    let t0 = std::time::Instant::now();
    let want = fs::read(src).unwrap();
    loop {
        let got = fs::read(path);
        if got.as_ref().is_ok_and(|got| *got == want) {
            return t0.elapsed();
        }
        if t0.elapsed().as_secs() >= within_secs {
            let last = match got {
                Ok(got) => {
                    let at = got.iter().zip(&want).position(|(a, b)| a != b);
                    let show = |b: &[u8]| String::from_utf8_lossy(&b[at.unwrap_or(0).min(b.len())..][..64.min(b.len().saturating_sub(at.unwrap_or(0)))]).escape_debug().to_string();
                    format!("{} bytes of {}, first difference at {at:?}: {:?} where {:?} was written", got.len(), want.len(), show(&got), show(&want))
                }
                Err(e) => format!("{e}"),
            };
            let logs: Vec<String> = stores
                .iter()
                .map(|st| {
                    let log = fs::read_to_string(st.join("warcfs.log")).unwrap_or_default();
                    let tail: Vec<&str> = log.lines().rev().take(40).collect();
                    format!("--- {} (last lines)\n{}", st.display(), tail.into_iter().rev().collect::<Vec<_>>().join("\n"))
                })
                .collect();
            panic!("{} not there (exactly) after {:?}: {last}\n{}", path.display(), t0.elapsed(), logs.join("\n"));
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}

#[test]
fn several_nodes_write_at_once_each_under_its_own_directory_and_every_node_reads_everything() {
    let tmp = tempfile::tempdir().unwrap();
    let c = Cluster::start(&tmp.path().join("garage"), 45800);
    let mut n = TwoWriters::init(&c, tmp.path(), "s3://warcfs/several");
    // A name is a node's own: a third node may not take "beta".
    let third = c.run(&["init", &s(&tmp.path().join("node-c")), "--backend", "s3://warcfs/several", "--node-name", "beta"]);
    assert!(!third.ok() && third.stderr.contains("\"beta\""), "{}", third.describe());
    n.mount(&c);
    for m in [&n.ma, &n.mb] {
        let mut names: Vec<String> = fs::read_dir(m).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        assert_eq!(names, ["alpha", "beta"], "the root of {}", m.display());
    }
    let files = crawl_files();
    let within = |f: &Path| 10 + 10 * (fs::metadata(f).unwrap().len() >> 26);
    // Where a later step only asks that a file gets there (not how soon: the figure is the
    // first step's), a bound that a machine busy with the other tests cannot miss. (The
    // last step's misses, 10.2 s and then none in 60 s, were not the machine's: A's kernel
    // had cached the file's size while B still staged it, with zeros where A had no bytes
    // to give. See the test below.)
    let eventually = |f: &Path| 6 * within(f);

    // Both nodes write at once; each file appears on the other node within seconds, exact.
    std::thread::scope(|sc| {
        sc.spawn(|| fs::copy(&files[0], n.ma.join("alpha").join(files[0].file_name().unwrap())).unwrap());
        sc.spawn(|| fs::copy(&files[1], n.mb.join("beta").join(files[1].file_name().unwrap())).unwrap());
    });
    let on_b = appears(&n.mb.join("alpha").join(files[0].file_name().unwrap()), &files[0], within(&files[0]), &[&n.a, &n.b]);
    let on_a = appears(&n.ma.join("beta").join(files[1].file_name().unwrap()), &files[1], within(&files[1]), &[&n.a, &n.b]);
    eprintln!("written at once: on the other node after {on_b:?} and {on_a:?}");

    // A node writes only under its own directory: elsewhere is EACCES, and says why.
    for (what, err) in [
        ("a file at the root", fs::write(n.mb.join("x.warc"), b"WARC/1.0\r\n").unwrap_err()),
        ("a file in the other node's directory", fs::write(n.mb.join("alpha").join("x.warc"), b"WARC/1.0\r\n").unwrap_err()),
        ("a file of the other node, removed", fs::remove_file(n.mb.join("alpha").join(files[0].file_name().unwrap())).unwrap_err()),
        ("a file of the other node, opened to write", fs::OpenOptions::new().append(true).open(n.mb.join("alpha").join(files[0].file_name().unwrap())).unwrap_err()),
        ("a directory in the other node's", fs::create_dir(n.mb.join("alpha").join("d")).unwrap_err()),
    ] {
        assert_eq!(err.raw_os_error(), Some(libc::EACCES), "{what}: {err}");
    }
    let log = fs::read_to_string(n.b.join("warcfs.log")).unwrap_or_default();
    assert!(log.contains("writes only under /beta/"), "no log line says why: {log}");
    assert!(fs::read(n.mb.join("alpha").join(files[0].file_name().unwrap())).unwrap() == fs::read(&files[0]).unwrap(), "the refused writes changed A's file");

    // A payload A stored is not stored again by B, which has seen A's changes.
    let stored = |store: &Path| num(&serde_json::from_slice::<serde_json::Value>(&c.ok(&["stats", &s(store), "--json"]).stdout).unwrap(), "stored_bytes");
    let before = stored(&n.b);
    fs::copy(&files[0], n.mb.join("beta").join("again.warc.gz")).unwrap();
    appears(&n.ma.join("beta").join("again.warc.gz"), &files[0], eventually(&files[0]), &[&n.a, &n.b]);
    let grew = stored(&n.b) - before;
    let size = fs::metadata(&files[0]).unwrap().len();
    assert!(grew * 20 < size, "B stored {grew} new bytes for a {size}-byte file A had stored");

    // gc runs while no other node writes: refused while B's lease lives, then done.
    n.ga.take();
    let refused = c.run(&["gc", &s(&n.a)]);
    assert!(!refused.ok() && refused.stderr.contains("lease-"), "{}", refused.describe());
    n.unmount();
    c.ok(&["rm", &s(&n.a), &format!("/alpha/{}", files[0].file_name().unwrap().to_str().unwrap())]);
    c.ok(&["gc", &s(&n.a)]);
    for node in [&n.a, &n.b] {
        let deep = c.run(&["fsck", "--deep", &s(node)]);
        assert_clean(&deep);
        assert!(cat_with(&c, node, "/beta/again.warc.gz") == fs::read(&files[0]).unwrap(), "{} lost B's copy of what A removed", node.display());
        let second = format!("/beta/{}", files[1].file_name().unwrap().to_str().unwrap());
        assert!(cat_with(&c, node, &second) == fs::read(&files[1]).unwrap());
        let gone = c.run(&["cat", &s(node), &format!("/alpha/{}", files[0].file_name().unwrap().to_str().unwrap())]);
        assert!(!gone.ok(), "A's removal did not reach {}", node.display());
    }

    // B's index lost: rebuilt from both nodes' logs in the bucket, the same namespace.
    let listing = |node: &Path| ls_with(&c, node, "/beta");
    let want = listing(&n.b);
    fs::remove_dir_all(n.b.join("index")).unwrap();
    c.ok(&["repair", "index", &s(&n.b)]);
    assert_eq!(listing(&n.b), want);
    assert_eq!(listing(&n.a), want);
    let deep = c.run(&["fsck", "--deep", &s(&n.b)]);
    assert_clean(&deep);
    // And B writes on from it, in its own range.
    n.mount(&c);
    fs::copy(&files[2], n.mb.join("beta").join(files[2].file_name().unwrap())).unwrap();
    appears(&n.ma.join("beta").join(files[2].file_name().unwrap()), &files[2], eventually(&files[2]), &[&n.a, &n.b]);
}

/// A file another node is still writing (staged there, its bytes not in the bucket yet)
/// reads on this node as it was last committed, never as the size being written with zeros
/// in it; once committed there it reads exactly, even where the kernel had cached the old
/// bytes under the same size and times. B's ingest is held (`WARCFS_HOLD`) so that A sees
/// the staged state every time.
#[test]
#[cfg_attr(not(debug_assertions), ignore = "the hold fail point exists in debug builds only")]
fn a_file_another_node_is_still_writing_reads_as_it_was_then_exactly_as_written() {
    let tmp = tempfile::tempdir().unwrap();
    let c = Cluster::start(&tmp.path().join("garage"), 46000);
    let mut n = TwoWriters::init(&c, tmp.path(), "s3://warcfs/staged-elsewhere");
    // Dropped before the mounts: an unmount waits for B's held ingest.
    let gate = Gate(tmp.path().join("hold-ingest"));
    c.ok(&["mount", &s(&n.a), &s(&n.ma)]);
    n.ga = Some(MountGuard { mnt: n.ma.clone(), store: n.a.clone() });
    n.gb = Some(mount_held(&c, &n.b, &n.mb, &gate.0));
    // A plain WARC: read through the kernel's page cache (gzip files are read direct).
    let src = crawl_files().into_iter().find(|f| f.extension().is_some_and(|e| e == "warc")).expect("a plain crawl");
    let written = fs::read(&src).unwrap();
    let (on_b, on_a) = (n.mb.join("beta").join("w.warc"), n.ma.join("beta").join("w.warc"));
    let bound = std::time::Duration::from_secs(60);

    // A new file, staged on B: on A it is there, empty, and reads as such.
    gate.close();
    fs::write(&on_b, &written).unwrap();
    let t0 = std::time::Instant::now();
    while !on_a.exists() {
        assert!(t0.elapsed() < bound, "B's staged file never reached A");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    for _ in 0..3 {
        let got = fs::read(&on_a).unwrap();
        assert!(got.is_empty(), "A read {} bytes of a file whose bytes are only on B ({:?}...)", got.len(), String::from_utf8_lossy(&got[..got.len().min(16)]));
        assert_eq!(fs::metadata(&on_a).unwrap().len(), 0);
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    gate.open();
    appears(&on_a, &src, 60, &[&n.a, &n.b]);

    // Rewritten on B, same size: until B commits, A reads the old bytes (and the kernel
    // caches them under the new times); then the new ones.
    let mut rewritten = written.clone();
    let mid = rewritten.len() / 2;
    rewritten[mid] ^= 0x20;
    let new_src = tmp.path().join("rewritten.warc");
    fs::write(&new_src, &rewritten).unwrap();
    let seen = fs::metadata(&on_a).unwrap().modified().unwrap();
    gate.close();
    fs::write(&on_b, &rewritten).unwrap();
    let t0 = std::time::Instant::now();
    while fs::metadata(&on_a).unwrap().modified().unwrap() == seen {
        assert!(t0.elapsed() < bound, "B's rewrite never reached A");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    for _ in 0..3 {
        assert_eq!(fs::metadata(&on_a).unwrap().len(), written.len() as u64);
        assert!(fs::read(&on_a).unwrap() == written, "A read other bytes than B's committed ones while B rewrote them");
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    gate.open();
    appears(&on_a, &new_src, 60, &[&n.a, &n.b]);
    assert!(fs::read(&on_b).unwrap() == rewritten);

    // Without the writeback cache the kernel leaves a write's times to the daemon: an
    // append moves the file's mtime, on B and then on A.
    let before = fs::metadata(&on_b).unwrap().modified().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let mut f = fs::OpenOptions::new().append(true).open(&on_b).unwrap();
    std::io::Write::write_all(&mut f, b"\r\n").unwrap();
    drop(f);
    let after = fs::metadata(&on_b).unwrap().modified().unwrap();
    assert!(after > before, "an append left B's mtime at {before:?}");
    rewritten.extend_from_slice(b"\r\n");
    fs::write(&new_src, &rewritten).unwrap();
    appears(&on_a, &new_src, 60, &[&n.a, &n.b]);
    assert_eq!(fs::metadata(&on_a).unwrap().modified().unwrap(), after);
}

/// A read-only follower mounts while the writer holds a staged file (the writer's to
/// recover, not the follower's), shows it as last committed, then exactly once written.
#[test]
#[cfg_attr(not(debug_assertions), ignore = "the hold fail point exists in debug builds only")]
fn a_follower_mounts_while_the_writer_holds_a_staged_file_and_reads_it_once_stored() {
    let tmp = tempfile::tempdir().unwrap();
    let c = Cluster::start(&tmp.path().join("garage"), 46100);
    let (a, b) = (tmp.path().join("node-a"), tmp.path().join("node-b"));
    let (ma, mb) = (tmp.path().join("mnt-a"), tmp.path().join("mnt-b"));
    fs::create_dir_all(&ma).unwrap();
    fs::create_dir_all(&mb).unwrap();
    let url = "s3://warcfs/staged-follower";
    c.ok(&["init", &s(&a), "--backend", url]);
    let held = tmp.path().join("hold-ingest");
    let _ga = mount_held(&c, &a, &ma, &held);
    // Dropped before A's mount: its unmount waits for the held ingest.
    let gate = Gate(held);
    let src = crawl_files().into_iter().find(|f| f.extension().is_some_and(|e| e == "warc")).expect("a plain crawl");
    gate.close();
    fs::copy(&src, ma.join("w.warc")).unwrap();
    // B joins once the bucket shows the staged file (A publishes every few seconds).
    let t0 = std::time::Instant::now();
    loop {
        let _ = fs::remove_dir_all(&b);
        c.ok(&["init", &s(&b), "--backend", url]);
        if parse_ls(&c.ok(&["ls", &s(&b), "/"]).out()).iter().any(|e| e.0 == "w.warc") {
            break;
        }
        assert!(t0.elapsed().as_secs() < 60, "A's staged file never reached the bucket");
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    let r = c.run(&["mount", &s(&b), &s(&mb), "-o", "ro"]);
    assert!(r.ok(), "the follower could not mount while the writer held a staged file: {}", r.describe());
    let _gb = MountGuard { mnt: mb.clone(), store: b.clone() };
    assert_eq!(fs::metadata(mb.join("w.warc")).unwrap().len(), 0, "the follower shows bytes it does not have");
    assert!(fs::read(mb.join("w.warc")).unwrap().is_empty());
    gate.open();
    appears(&mb.join("w.warc"), &src, 60, &[&a, &b]);
}

/// Mounts `store` at `mnt` with its background ingest held while `gate` exists.
fn mount_held(c: &Cluster, store: &Path, mnt: &Path, gate: &Path) -> MountGuard {
    let hold = format!("ingest:{}", s(gate));
    let mut vars = c.vars();
    vars.push(("WARCFS_HOLD", &hold));
    let r = run_env(&["mount", &s(store), &s(mnt)], &vars);
    assert!(r.ok(), "{}", r.describe());
    MountGuard { mnt: mnt.to_path_buf(), store: store.to_path_buf() }
}

fn ls_with(c: &Cluster, store: &Path, dir: &str) -> Vec<(String, u64)> {
    parse_ls(&c.ok(&["ls", &s(store), dir]).out()).into_iter().map(|(name, e)| (name, e.size)).collect()
}

#[test]
fn a_writing_node_of_a_shared_store_killed_leaves_the_other_writing_and_recovers_on_its_next_mount() {
    let tmp = tempfile::tempdir().unwrap();
    let c = Cluster::start(&tmp.path().join("garage"), 45900);
    let mut n = TwoWriters::init(&c, tmp.path(), "s3://warcfs/killed-shared");
    n.mount(&c);
    let files = crawl_files();
    let within = |f: &Path| 20 + 10 * (fs::metadata(f).unwrap().len() >> 26);
    // A file closed on A, then A's daemon is killed (-9), most likely before it published.
    let first = files[0].file_name().unwrap();
    fs::copy(&files[0], n.ma.join("alpha").join(first)).unwrap();
    let pid: i32 = fs::read_to_string(n.a.join("lock")).unwrap().trim().parse().unwrap();
    // SAFETY: kill(2) of the daemon this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    n.ga.take();
    // B writes on and reads its own.
    let second = files[1].file_name().unwrap();
    fs::copy(&files[1], n.mb.join("beta").join(second)).unwrap();
    assert!(fs::read(n.mb.join("beta").join(second)).unwrap() == fs::read(&files[1]).unwrap());
    // A mounts again: its staged file is stored, reaches B, and A sees B's.
    c.ok(&["mount", &s(&n.a), &s(&n.ma)]);
    n.ga = Some(MountGuard { mnt: n.ma.clone(), store: n.a.clone() });
    assert!(fs::read(n.ma.join("alpha").join(first)).unwrap() == fs::read(&files[0]).unwrap(), "A lost what it had when killed");
    appears(&n.mb.join("alpha").join(first), &files[0], within(&files[0]), &[&n.a, &n.b]);
    appears(&n.ma.join("beta").join(second), &files[1], within(&files[1]), &[&n.a, &n.b]);

    // Unmounted, both import at once; each into its own directory by default.
    n.unmount();
    let third = files[2].file_name().unwrap().to_str().unwrap();
    std::thread::scope(|sc| {
        sc.spawn(|| c.ok(&["import", &s(&n.a), &s(&files[2])]));
        sc.spawn(|| c.ok(&["import", &s(&n.b), &s(&files[2])]));
    });
    for node in [&n.a, &n.b] {
        for dir in ["alpha", "beta"] {
            assert!(cat_with(&c, node, &format!("/{dir}/{third}")) == fs::read(&files[2]).unwrap(), "/{dir}/{third} on {}", node.display());
        }
        let fsck = c.run(&["fsck", &s(node)]);
        assert_clean(&fsck);
    }
    // A node that opens after another wrote (and no gc ran) takes in the new packs as a mount
    // follows, without rebuilding its index from the bucket.
    c.ok(&["import", &s(&n.a), &s(&files[1]), "--to", "/alpha/later"]);
    let second = second.to_str().unwrap();
    let seen = c.ok(&["ls", &s(&n.b), "/alpha/later"]);
    assert!(seen.out().contains(second) && !seen.stderr.contains("rebuilding"), "{}", seen.describe());
    assert!(cat_with(&c, &n.b, &format!("/alpha/later/{second}")) == fs::read(&files[1]).unwrap());
    let fsck = c.run(&["fsck", &s(&n.b)]);
    assert_clean(&fsck);
}

#[test]
fn a_writer_killed_with_packs_waiting_to_go_up_keeps_gc_off_until_it_uploads_them() {
    let tmp = tempfile::tempdir().unwrap();
    let (shared, url, a, b) = file_bucket(tmp.path());
    ok(&["init", &s(&a), "--backend", &url, "--writers", "several", "--node-name", "alpha"]);
    ok(&["init", &s(&b), "--backend", &url, "--node-name", "beta"]);
    let files = crawl_files();
    // A is killed (-9) as it starts uploading its first pack: its packs wait in A's packs/.
    let killed = run_env(&["import", &s(&a), &s(&files[0])], &[("WARCFS_CRASH_AT", "pack_uploading:1")]);
    assert!(killed.code.is_none(), "{}", killed.describe());
    assert!(!sealed_packs(&a).is_empty(), "no pack waits on A");
    let node_a = serde_json::from_slice::<serde_json::Value>(&fs::read(a.join("warcfs.json")).unwrap()).unwrap()["node"].as_u64().unwrap();
    let lease = shared.join("locks").join(format!("lease-{node_a:04x}"));
    let body = fs::read_to_string(&lease).unwrap();
    assert!(body.starts_with("pending-uploads"), "A's lease says {body:?}");
    // However old, it keeps B's gc off: B's gc could take chunks those packs rely on.
    fs::File::options().write(true).open(&lease).unwrap().set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(3600)).unwrap();
    let refused = run(&["gc", &s(&b)]);
    assert!(!refused.ok() && refused.stderr.contains(&format!("lease-{node_a:04x}")), "{}", refused.describe());
    // A starts again: its packs go up, its lease goes, and B's gc runs; nothing lost.
    ok(&["import", &s(&a), &s(&files[0])]);
    assert!(sealed_packs(&a).is_empty(), "packs still wait on A: {:?}", sealed_packs(&a));
    assert!(!lease.exists(), "A's lease outlived it");
    ok(&["gc", &s(&b)]);
    let name = format!("/alpha/{}", files[0].file_name().unwrap().to_str().unwrap());
    for node in [&a, &b] {
        assert_cat_eq(node, &name, &files[0]);
        let deep = run(&["fsck", "--deep", &s(node)]);
        assert_clean(&deep);
    }
    // A mounted writer's lease says so for as long as it writes, its packs uploaded or not.
    let ma = tmp.path().join("mnt-a");
    fs::create_dir_all(&ma).unwrap();
    ok(&["mount", &s(&a), &s(&ma)]);
    let _ga = MountGuard { mnt: ma.clone(), store: a.clone() };
    fs::copy(&files[1], ma.join("alpha").join("later.warc.gz")).unwrap();
    let t0 = std::time::Instant::now();
    while !(run(&["cat", &s(&b), "/alpha/later.warc.gz"]).ok() && sealed_packs(&a).is_empty()) {
        assert!(t0.elapsed().as_secs() < 60, "A's file not published and uploaded after {:?}", t0.elapsed());
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    let body = fs::read_to_string(&lease).unwrap();
    assert!(body.starts_with("pending-uploads"), "A's lease, its packs all up, says {body:?}");
}
