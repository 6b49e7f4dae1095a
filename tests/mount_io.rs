//! Reads and writes through a mount: a record lookup rebuilds only its own gzip member,
//! writers and readers at once, a reader of a file rewritten under it, and a large directory
//! listed.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use common::*;

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

    let fx = MountFixture::new();
    ok(&["import", &s(&fx.store), &s(&src)]);
    let m = fx.mount();
    if !gzip_files_direct(&fx.store) {
        eprintln!("skipped: this kernel reads gzip files through the page cache");
        return m.unmount_clean();
    }
    let before = members_rebuilt(&fx.store);
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
    let rebuilt = members_rebuilt(&fx.store) - before;
    // Five deflates of 8-256 KiB members take milliseconds: the stats must show where.
    let reads = stats(&fx.store)["reads_since_mount"].clone();
    // A second lookup in one MiB of the file (the first record again) has the daemon ask the
    // disk, in the background, for what reading that MiB takes: once for each MiB the
    // records lie in, at most.
    let mut buf = vec![0u8; 4096];
    File::open(m.path(name)).unwrap().read_at(&mut buf, picked[0].0).unwrap();
    let warmed = || num(&stats(&fx.store)["reads_since_mount"], "lookup_read_aheads");
    let t = std::time::Instant::now();
    while warmed() == 0 && t.elapsed() < std::time::Duration::from_secs(30) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let warmed = warmed();
    m.unmount_clean();
    assert!((1..=picked.len() as u64).contains(&warmed), "lookups were read ahead for in {warmed} MiB");
    assert_eq!(rebuilt, picked.len() as u64, "looking up {} records rebuilt {rebuilt} members: neighbours were rebuilt too", picked.len());
    assert!(num(&reads, "member_deflate_us") > 100 && num(&reads, "member_gather_us") > 0, "rebuild times missing from the read counters: {reads}");
}

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
    let fx = MountFixture::new();
    let m = fx.mount();

    // Ingested files for the readers.
    cp_r(&[&real], &m.mnt);
    wait_stored(&fx.store);
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
    wait_stored(&fx.store);
    assert_model(&m.mnt, &model, "after ingest");
    m.unmount_clean();

    let m = fx.mount();
    assert_model(&m.mnt, &model, "after remount");
    let st = stats(&fx.store);
    assert_eq!(num(&st, "files"), model.len() as u64, "{st}");
    m.unmount_clean();
    assert_fsck_clean(&fx.store, false);
}

/// A reader opened before a writer rewrites the file, or while it does, must read what the
/// file holds once the rewrite is ingested, not the recipe it had when the reader opened:
/// that one's pieces may still sit in the daemon's cache, and serving them is silent
/// (regressions: open used to give every read-only handle the recipe the inode held at open;
/// a handle opened before the writer kept it after the ingest, found by a review).
#[test]
fn a_reader_of_a_rewritten_file_reads_the_new_content() {
    let fx = MountFixture::new();
    let m = fx.mount();
    let old = real_file("webrecorder-pywb/iana.warc.gz");
    let new = real_file("webrecorder-warcio/example.warc.gz");
    for opened in ["before the writer", "while it writes"] {
        fs::write(m.path("f.warc.gz"), &old).unwrap();
        wait_stored(&fx.store);
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
        wait_stored(&fx.store);
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

#[test]
fn a_large_directory_lists_every_entry_once() {
    // Thousands of entries take many readdir replies; each reply used to read the whole
    // directory again (O(n^2)). The listing, now read once per open directory, must still
    // hold every name exactly once, and a rewind must see a file created since.
    let fx = MountFixture::new();
    let src = fx.path("big");
    fs::create_dir(&src).unwrap();
    let names: BTreeSet<String> = (0..3000).map(|i| format!("r{i:05}.warc")).collect();
    for n in &names {
        File::create(src.join(n)).unwrap();
    }
    ok(&["import", &s(&fx.store), &s(&src)]);
    let m = fx.mount();
    let listed: Vec<String> = fs::read_dir(m.path("big")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(listed.len(), names.len(), "no name twice");
    assert_eq!(listed.into_iter().collect::<BTreeSet<_>>(), names);
    fs::write(m.path("big/zz-new.warc"), b"").unwrap();
    let again: BTreeSet<String> = fs::read_dir(m.path("big")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(again.contains("zz-new.warc") && again.len() == names.len() + 1);
    m.unmount_clean();
}
