//! The object-store back end against a real 3-node Garage cluster on 127.0.0.1
//! (`common::remote`), one writing node: stores made in a bucket, nodes joining them, gc
//! deleting objects (after a grace period), a Garage node killed, the whole object store
//! stopped under a live mount, a second writer refused. Each test starts a cluster of its
//! own and stops it, even on failure. Several nodes at once: `remote_nodes.rs`.

mod common;

use std::fs;
use std::path::Path;

use common::*;

#[test]
fn a_second_node_joins_the_bucket_and_reads_every_file_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let c = Cluster::start(&tmp.path().join("garage"), 45100);
    let (a, b) = (tmp.path().join("node-a"), tmp.path().join("node-b"));
    let url = "s3://warcfs/archive";
    c.ok(&["init", &s(&a), "--backend", url]);
    let files = crawl_files();
    let mut args = vec!["import".to_string(), s(&a)];
    args.extend(files.iter().map(|f| s(f)));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    c.ok(&args);
    // Everything sealed is in the bucket: nothing waits in A's packs/.
    assert!(sealed_packs(&a).is_empty(), "packs left to upload: {:?}", sealed_packs(&a));
    let packs = c.packs_in_bucket(&a);
    assert!(packs >= 2, "{packs} packs");

    // B joins: its index comes from the bucket alone.
    let joined = c.ok(&["init", &s(&b), "--backend", url]);
    assert!(joined.out().contains("joined the store"), "{}", joined.describe());
    for f in &files {
        let name = format!("/{}", f.file_name().unwrap().to_str().unwrap());
        assert!(cat_with(&c, &b, &name) == fs::read(f).unwrap(), "{name} differs when read on node B");
    }
    let fsck = c.run(&["fsck", &s(&b)]);
    assert_clean(&fsck);

    // A payload A stored is not stored again by B: B imports the same crawl under another name.
    let again = c.ok(&["import", &s(&b), &s(&files[0]), "--to", "/again"]);
    let summary = parse_import_summary(&again.out());
    let size = fs::metadata(&files[0]).unwrap().len();
    assert!(summary.new_bytes * 20 < size, "B stored {} new bytes of a {size}-byte file A has: {}", summary.new_bytes, again.describe());
    // A writes next. Its index no longer matches the bucket (B wrote), so it is rebuilt
    // from the bucket before A writes anything: A sees B's file, and A's gc, which takes
    // what A's index says nothing uses, leaves B's file whole.
    let first = files[0].file_name().unwrap().to_str().unwrap().to_string();
    c.ok(&["rm", &s(&a), &format!("/{first}")]);
    c.ok(&["gc", &s(&a)]);
    assert!(cat_with(&c, &a, &format!("/again/{first}")) == fs::read(&files[0]).unwrap(), "A does not read what B wrote");
    // And B, writing again after A, sees A's removal and still reads its own file.
    c.ok(&["import", &s(&b), &s(&files[1]), "--to", "/b2"]);
    let names: Vec<String> = parse_ls(&c.ok(&["ls", &s(&b), "/"]).out()).into_iter().map(|e| e.0).collect();
    assert!(!names.contains(&first), "B still lists /{first}, which A removed: {names:?}");
    assert!(cat_with(&c, &b, &format!("/again/{first}")) == fs::read(&files[0]).unwrap());
    let fsck = c.run(&["fsck", &s(&b)]);
    assert_clean(&fsck);
}

#[test]
fn gc_deletes_the_objects_nothing_uses_and_a_rebuilt_node_still_reads_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let c = Cluster::start(&tmp.path().join("garage"), 45200);
    let (a, b) = (tmp.path().join("node-a"), tmp.path().join("node-b"));
    let url = "s3://warcfs/gc";
    // Small packs, so that removing a file leaves whole packs dead.
    c.ok(&["init", &s(&a), "--backend", url, "--pack-size", "1048576"]);
    let files = crawl_files();
    c.ok(&["import", &s(&a), &s(&files[0])]);
    c.ok(&["import", &s(&a), &s(&files[2])]);
    let before = c.packs_in_bucket(&a);
    c.ok(&["rm", &s(&a), &format!("/{}", files[0].file_name().unwrap().to_str().unwrap())]);
    let gc = c.ok(&["gc", &s(&a), "--json"]);
    let after = c.packs_in_bucket(&a);
    assert!(after < before, "gc left {after} of {before} packs in the bucket: {}", gc.describe());
    c.ok(&["init", &s(&b), "--backend", url]);
    let kept = format!("/{}", files[2].file_name().unwrap().to_str().unwrap());
    assert!(cat_with(&c, &b, &kept) == fs::read(&files[2]).unwrap());
    let fsck = c.run(&["fsck", &s(&b)]);
    assert_clean(&fsck);
    // B's index lost: `repair index` rebuilds it from the bucket, and fsck --deep reads every
    // chunk back from there.
    fs::remove_dir_all(b.join("index")).unwrap();
    let miss = c.run(&["ls", &s(&b), "/"]);
    assert!(!miss.ok() && miss.stderr.contains("repair index"), "{}", miss.describe());
    c.ok(&["repair", "index", &s(&b)]);
    let deep = c.run(&["fsck", "--deep", &s(&b)]);
    assert_clean(&deep);
    assert!(cat_with(&c, &b, &kept) == fs::read(&files[2]).unwrap());
}

#[test]
fn a_garage_node_killed_during_an_import_loses_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let c = Cluster::start(&tmp.path().join("garage"), 45300);
    let (a, b) = (tmp.path().join("node-a"), tmp.path().join("node-b"));
    let url = "s3://warcfs/kill";
    c.ok(&["init", &s(&a), "--backend", url, "--pack-size", "4194304"]);
    let files = crawl_files();
    c.ok(&["import", &s(&a), &s(&files[0])]);
    // Node 3 dies (kill -9); writes and reads go on with two of three replicas.
    c.cluster(&["kill-node", "3"]);
    c.ok(&["import", &s(&a), &s(&files[1])]);
    c.ok(&["init", &s(&b), "--backend", url]);
    for f in &files[..2] {
        let name = format!("/{}", f.file_name().unwrap().to_str().unwrap());
        assert!(cat_with(&c, &b, &name) == fs::read(f).unwrap(), "{name}");
    }
    c.cluster(&["start-node", "3"]);
}

#[test]
fn a_store_whose_object_store_is_down_says_so_and_keeps_its_packs_until_it_is_back() {
    let tmp = tempfile::tempdir().unwrap();
    let c = Cluster::start(&tmp.path().join("garage"), 45400);
    let (a, b) = (tmp.path().join("node-a"), tmp.path().join("node-b"));
    let url = "s3://warcfs/down";
    c.ok(&["init", &s(&a), "--backend", url]);
    let files = crawl_files();
    // The store is mounted; the object store then goes away entirely.
    let mnt = tmp.path().join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    let m = run_env(&["mount", &s(&a), &s(&mnt)], &c.vars());
    assert!(m.ok(), "{}", m.describe());
    let _mount = MountGuard { mnt: mnt.clone(), store: a.clone() };
    c.stop();
    for f in &files {
        fs::copy(f, mnt.join(f.file_name().unwrap())).unwrap();
    }
    // Reads go on from what this node has.
    for f in &files {
        assert!(fs::read(mnt.join(f.file_name().unwrap())).unwrap() == fs::read(f).unwrap());
    }
    // Ingested meanwhile, into packs that wait here for the object store.
    let t0 = std::time::Instant::now();
    while fs::read_dir(a.join("staging")).unwrap().next().is_some() {
        assert!(t0.elapsed().as_secs() < 300, "staged files not ingested");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(!sealed_packs(&a).is_empty() || fs::read_dir(a.join("packs-tmp")).unwrap().next().is_some());
    // The object store comes back; unmounting waits for the uploads.
    c.restart();
    drop(_mount);
    assert!(sealed_packs(&a).is_empty(), "packs left to upload: {:?}", sealed_packs(&a));
    c.ok(&["init", &s(&b), "--backend", url]);
    for f in &files {
        let name = format!("/{}", f.file_name().unwrap().to_str().unwrap());
        assert!(cat_with(&c, &b, &name) == fs::read(f).unwrap(), "{name}");
    }
}

/// A read that needs bytes only the bucket has, while the object store is down: EIO after the
/// client's retries (never a hang, never wrong bytes), a log line naming the pack, the mount
/// answering everything else meanwhile; once the store is back the same read is exact.
#[test]
fn a_read_the_cache_cannot_answer_while_the_object_store_is_down_is_eio_and_the_mount_stays_up() {
    let tmp = tempfile::tempdir().unwrap();
    let c = Cluster::start(&tmp.path().join("garage"), 45600);
    let (a, b) = (tmp.path().join("node-a"), tmp.path().join("node-b"));
    let url = "s3://warcfs/eio";
    c.ok(&["init", &s(&a), "--backend", url]);
    let f = crawl_files().into_iter().find(|f| f.extension().is_some_and(|e| e == "gz")).unwrap();
    let name = f.file_name().unwrap().to_str().unwrap().to_string();
    c.ok(&["import", &s(&a), &s(&f)]);
    // Node B joins: its index comes from the bucket, its cache of pack ranges is empty.
    c.ok(&["init", &s(&b), "--backend", url]);
    let mnt = tmp.path().join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    c.ok(&["mount", &s(&b), &s(&mnt), "-o", "ro"]);
    let _mount = MountGuard { mnt: mnt.clone(), store: b.clone() };
    let log_before = fs::read_to_string(b.join("warcfs.log")).unwrap_or_default().len();
    c.stop();
    let t0 = std::time::Instant::now();
    let err = fs::read(mnt.join(&name)).expect_err("bytes only the bucket holds, while it is down");
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    assert!(t0.elapsed().as_secs() < 120, "the read failed only after {:?}", t0.elapsed());
    // The mount is up and answers what it knows.
    assert_eq!(fs::metadata(mnt.join(&name)).unwrap().len(), fs::metadata(&f).unwrap().len());
    assert!(fs::read_dir(&mnt).unwrap().count() >= 1);
    let log = fs::read_to_string(b.join("warcfs.log")).unwrap_or_default();
    let new = log.get(log_before..).unwrap_or_default();
    assert!(new.contains("ERROR") && new.contains("pack"), "no log line naming the pack of the failed read:\n{new}");
    // Back: the same read is exact.
    c.restart();
    let t1 = std::time::Instant::now();
    loop {
        match fs::read(mnt.join(&name)) {
            Ok(bytes) => {
                assert!(bytes == fs::read(&f).unwrap(), "{name} differs after the object store came back");
                break;
            }
            Err(e) => assert!(t1.elapsed().as_secs() < 120, "{name} still unreadable {:?} after the object store came back: {e}", t1.elapsed()),
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

#[test]
fn a_shared_directory_serves_as_the_bucket_and_a_second_writer_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (shared, url, a, b) = file_bucket(tmp.path());
    ok(&["init", &s(&a), "--backend", &url]);
    let files = crawl_files();
    ok(&["import", &s(&a), &s(&files[0])]);
    assert!(fs::read_dir(shared.join("packs")).unwrap().count() >= 2);
    ok(&["init", &s(&b), "--backend", &url]);
    let name = format!("/{}", files[0].file_name().unwrap().to_str().unwrap());
    assert!(cat(&b, &name) == fs::read(&files[0]).unwrap());
    // A writes (mounted); B may read but not write: the lock names A's node.
    let ma = tmp.path().join("mnt-a");
    fs::create_dir_all(&ma).unwrap();
    ok(&["mount", &s(&a), &s(&ma)]);
    let _ga = MountGuard { mnt: ma.clone(), store: a.clone() };
    let node_a = serde_json::from_slice::<serde_json::Value>(&fs::read(a.join("warcfs.json")).unwrap()).unwrap()["node"].as_u64().unwrap();
    let refused = run(&["import", &s(&b), &s(&files[1])]);
    assert_eq!(refused.code, Some(3), "{}", refused.describe());
    assert!(refused.stderr.contains(&format!("node-{node_a:04x}")), "{}", refused.describe());
    assert!(cat(&b, &name) == fs::read(&files[0]).unwrap(), "B cannot read while A writes");
}

#[test]
fn gc_on_an_object_store_trashes_packs_and_deletes_their_objects_only_after_a_grace_period() {
    let tmp = tempfile::tempdir().unwrap();
    let (shared, url, a, b) = file_bucket(tmp.path());
    ok(&["init", &s(&a), "--backend", &url, "--pack-size", "1048576"]);
    let files = crawl_files();
    ok(&["import", &s(&a), &s(&files[0]), &s(&files[2])]);
    ok(&["rm", &s(&a), &format!("/{}", files[0].file_name().unwrap().to_str().unwrap())]);
    let objects = |dir: &str| fs::read_dir(shared.join(dir)).map(|d| d.count()).unwrap_or(0);
    let listed = |store: &Path| num(&stats(store), "packs");
    let (objects_before, listed_before) = (objects("packs"), listed(&a));
    let gc = |env: &[(&str, &str)]| serde_json::from_slice::<serde_json::Value>(&{
        let r = run_env(&["gc", &s(&a), "--json"], env);
        assert!(r.ok(), "{}", r.describe());
        r.stdout
    })
    .unwrap();
    let first = gc(&[]);
    let gone = num(&first, "packs_deleted") + num(&first, "packs_rewritten");
    assert!(gone > 0, "{first}");
    // Out of every listing at once, their objects still there, each marked in trash/.
    assert_eq!(objects("trash") as u64, gone);
    assert!(objects("packs") >= objects_before, "gc deleted objects at once");
    assert!(listed(&a) < listed_before);
    // A node made now builds its index without the trashed packs, and reads everything.
    ok(&["init", &s(&b), "--backend", &url]);
    let kept = format!("/{}", files[2].file_name().unwrap().to_str().unwrap());
    assert_cat_eq(&b, &kept, &files[2]);
    // Within the grace period a gc leaves them (and trashes what it no longer uses itself:
    // the log packs its new checkpoint supersedes); after it, deletes them and their marks.
    let gone_now = |rep: &serde_json::Value| num(rep, "packs_deleted") + num(rep, "packs_rewritten");
    let second = gc(&[]);
    assert_eq!(num(&second, "packs_purged"), 0, "{second}");
    let marked = gone + gone_now(&second);
    assert_eq!(objects("trash") as u64, marked);
    let purged = gc(&[("WARCFS_FAILPOINTS", "trash_no_grace=1")]);
    assert_eq!(num(&purged, "packs_purged"), marked, "{purged}");
    assert_eq!(objects("trash") as u64, gone_now(&purged));
    assert_eq!(objects("packs") as u64, listed(&a) + gone_now(&purged), "an object left behind");
    for node in [&a, &b] {
        assert_cat_eq(node, &kept, &files[2]);
        let deep = run(&["fsck", "--deep", &s(node)]);
        assert_clean(&deep);
    }
}
