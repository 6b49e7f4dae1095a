//! The `warcfs` command line: the contract that scripts, tests and other tools use.
//! Each subcommand opens the store, does one thing, and reports problems with the path they
//! concern and a non-zero exit.

use std::fs;
use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use crate::store::{Compression, Config, FileMeta, InodeKind, Store, Timestamp, Verify};

#[derive(Parser)]
#[command(name = "warcfs", version, about = "A deduplicating, byte-exact store for web archives")]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand)]
pub enum Repair {
    /// Rebuild the index (names, directories, attributes, recipes, refcounts) from the
    /// packs alone, when STORE/index is missing or unreadable. An unreadable index is kept
    /// aside as index.unreadable.N; an index that opens is never replaced. Run
    /// `warcfs fsck STORE` afterwards.
    Index { store: PathBuf },
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Create a new, empty store.
    Init {
        store: PathBuf,
        /// How a digest match is proven before two chunks become one.
        #[arg(long, value_enum, default_value = "bytes")]
        verify: Verify,
        #[arg(long, value_enum, default_value = "zstd")]
        compression: Compression,
        /// Size a sealed pack grows to, in bytes (default 32 MiB). Small packs make more
        /// files; object stores and rsync prefer the default.
        #[arg(long, default_value_t = crate::store::PACK_TARGET, value_parser = clap::value_parser!(u64).range(crate::store::MIN_PACK_SIZE..))]
        pack_size: u64,
    },
    /// Copy files and directories into the store, as `cp -r SRC... DIR` would.
    Import {
        store: PathBuf,
        #[arg(required = true)]
        src: Vec<PathBuf>,
        /// Directory in the store to copy into.
        #[arg(long, default_value = "/")]
        to: String,
    },
    /// Write a stored file's exact bytes to stdout.
    Cat { store: PathBuf, path: String },
    /// List a directory (or one file) of the store.
    Ls {
        store: PathBuf,
        #[arg(default_value = "/")]
        path: String,
    },
    /// Remove files (and, with -r, directories) from the store.
    Rm {
        store: PathBuf,
        #[arg(required = true)]
        paths: Vec<String>,
        #[arg(short, long)]
        recursive: bool,
    },
    /// Show what is stored and how well it deduplicates.
    Stats {
        store: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Check that every file's bytes can be rebuilt and every refcount is right.
    Fsck {
        store: PathBuf,
        /// Also re-hash every chunk.
        #[arg(long)]
        deep: bool,
    },
    /// Reclaim space held by chunks that no file references.
    Gc { store: PathBuf },
    /// Print a CDXJ index of the stored WARCs under PATHs (default: all), built from their
    /// header chunks alone, sorted, for pywb and other replay tools.
    Index {
        store: PathBuf,
        paths: Vec<String>,
        #[arg(long, default_value = "cdxj")]
        format: String,
    },
    /// Make DEST a complete, consistent copy of the store as of now (hard links where
    /// possible); run again to update it. Works while the store is mounted.
    Snapshot { store: PathBuf, dest: PathBuf },
    /// Mount a store as a directory (creates the store if missing). Returns once the mount
    /// is live; `fusermount3 -u MOUNTPOINT`, `umount` or SIGTERM end it.
    Mount {
        store: PathBuf,
        mountpoint: PathBuf,
        /// Stay in the foreground and log to stderr as well.
        #[arg(short, long)]
        foreground: bool,
        /// Mount options: allow_other, allow_root, ro, min_free=SIZE (free space that written data must leave on the store's disk, default 256M, so its metadata always finds room), and the generic fstab ones.
        #[arg(short = 'o')]
        options: Vec<String>,
    },
    /// Unmount a warcfs mount and return once every file written through it is stored and
    /// its daemon has exited (`fusermount3 -u` returns before that).
    Umount { mountpoint: PathBuf },
    /// Rebuild a part of the store from the packs, which hold everything.
    #[command(subcommand)]
    Repair(Repair),
}

pub fn run(cli: Cli) -> Result<i32> {
    if !matches!(cli.cmd, Cmd::Mount { .. }) {
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    }
    match cli.cmd {
        Cmd::Init { store, verify, compression, pack_size } => {
            let config = Config { verify, compression, pack_size, ..Config::default() };
            Store::init(&store, config)?;
            println!("initialised {} (verify {verify:?}, compression {compression:?})", store.display());
            Ok(0)
        }
        Cmd::Import { store, src, to } => import(&store, &src, &to),
        Cmd::Cat { store, path } => {
            let s = Store::open_for_reading(&store)?;
            let ino = s.resolve(&path)?;
            let inode = s.inode(ino)?.with_context(|| format!("{path}: no such file"))?;
            match inode.kind {
                InodeKind::Dir => bail!("{path}: is a directory"),
                InodeKind::Symlink => bail!("{path}: is a symbolic link to {}", String::from_utf8_lossy(&inode.target)),
                InodeKind::File => {}
                _ => bail!("{path}: is a special file (fifo, socket or device)"),
            }
            if inode.staged {
                return Err(crate::StoreError::Staged(path).into());
            }
            let stdout = io::stdout();
            let mut out = BufWriter::with_capacity(1 << 20, stdout.lock());
            if let Some(head) = &inode.recipe {
                match s.copy_to(head, &mut out) {
                    Err(crate::StoreError::Io { err, .. }) if err.kind() == io::ErrorKind::BrokenPipe => return Ok(0),
                    r => {
                        r.with_context(|| format!("{path}: reading from {}", store.display()))?;
                    }
                }
            }
            match out.flush() {
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(0),
                r => r.map(|_| 0).context("writing to stdout"),
            }
        }
        Cmd::Ls { store, path } => {
            let s = Store::open_for_reading(&store)?;
            let mut out = io::stdout().lock();
            for e in s.list(&path)? {
                let t = match e.inode.kind {
                    InodeKind::Dir => 'd',
                    InodeKind::File => '-',
                    InodeKind::Symlink => 'l',
                    InodeKind::Fifo => 'p',
                    InodeKind::Socket => 's',
                    InodeKind::CharDevice => 'c',
                    InodeKind::BlockDevice => 'b',
                };
                let name = String::from_utf8_lossy(&e.name);
                let suffix = if e.inode.kind == InodeKind::Symlink { format!(" -> {}", String::from_utf8_lossy(&e.inode.target)) } else { String::new() };
                writeln!(out, "{t}{} {:>12} {}{suffix}", perms(e.inode.mode), e.inode.size, name)?;
            }
            Ok(0)
        }
        Cmd::Rm { store, paths, recursive } => {
            let s = Store::open(&store, false)?;
            for p in &paths {
                s.remove(p, recursive)?;
            }
            Ok(0)
        }
        Cmd::Stats { store, json } => {
            let s = Store::open_for_reading(&store)?;
            let st = s.stats()?;
            // A mounted store also tells what its reads have cost since it was mounted.
            let reads = crate::fuse::control::read_counters(&store);
            let ingests = crate::fuse::control::ingests(&store);
            if json {
                let mut v = serde_json::to_value(&st)?;
                if let (Some(r), Some(obj)) = (reads, v.as_object_mut()) {
                    obj.insert("reads_since_mount".into(), serde_json::to_value(r)?);
                }
                if let (Some(i), Some(obj)) = (&ingests, v.as_object_mut()) {
                    obj.insert("ingests".into(), serde_json::to_value(i)?);
                }
                println!("{v}");
            } else {
                let ratio = if st.stored_bytes > 0 { st.logical_bytes as f64 / st.stored_bytes as f64 } else { 0.0 };
                println!("files            {}", st.files);
                println!("logical bytes    {} ({})", st.logical_bytes, human(st.logical_bytes));
                println!("stored bytes     {} ({}), {ratio:.2}x", st.stored_bytes, human(st.stored_bytes));
                println!("index bytes      {} ({})", st.index_bytes, human(st.index_bytes));
                println!("records          {}", st.records);
                println!("payloads         {} ({} unique)", st.payloads, st.unique_payloads);
                println!("chunks           {} ({} unreferenced)", st.chunks, st.unreferenced_chunks);
                println!("gzip members     {} ({} kept raw)", st.gzip_members, st.gzip_members_raw);
                println!("deflate parses   {} bytes recorded, shared tails {} bytes in packs", st.parse_bytes, st.parse_tail_chunk_bytes);
                println!("collisions       {}", st.collisions);
                println!("staged           {} files, {} bytes (written through a mount, not yet ingested)", st.staged_files, st.staged_bytes);
                if let Some(i) = &ingests {
                    println!("ingests (mount)  {} queued, {} failed and waiting to be tried again ({} failed attempts since the mount)", i.queued, i.retrying, i.failed_attempts);
                }
                println!("packs            {}", st.packs);
                if let Some(r) = reads {
                    let mean = |us: u64| us.checked_div(r.members_rebuilt).unwrap_or(0);
                    println!(
                        "reads (mounted)  {} gzip members rebuilt (mean {} us reading their text, {} us replaying its parse), {} served from cache; {} chunks read; {} recipe pieces loaded",
                        r.members_rebuilt,
                        mean(r.member_gather_us),
                        mean(r.member_deflate_us),
                        r.member_hits,
                        r.chunks_read,
                        r.pieces_loaded
                    );
                }
            }
            Ok(0)
        }
        Cmd::Fsck { store, deep } => {
            let s = Store::open(&store, false)?;
            let rep = s.fsck(deep)?;
            for p in &rep.problems {
                println!("{p}");
            }
            if rep.more_problems > 0 {
                println!("... and {} more problems (the first {} are listed)", rep.more_problems, crate::store::MAX_PROBLEMS);
            }
            if rep.problem_count() == 0 {
                println!("{}: clean ({} files, {} chunks, {} packs checked{})", store.display(), rep.files, rep.chunks_checked, rep.packs_checked, if deep { ", re-hashed" } else { "" });
                Ok(0)
            } else {
                eprintln!("{}: {} problems", store.display(), rep.problem_count());
                Ok(1)
            }
        }
        Cmd::Index { store, paths, format } => {
            if format != "cdxj" {
                bail!("--format {format}: only cdxj is supported");
            }
            let s = Store::open_for_reading(&store)?;
            // Sorted in runs of 64 MiB spilled to a temporary directory: an archive's index
            // can be larger than memory.
            let runs = std::env::temp_dir().join(format!("warcfs-index-{}", std::process::id()));
            let mut sorter = crate::extsort::LineSorter::new(&runs, INDEX_RUN_BYTES).with_context(|| format!("{}: cannot create", runs.display()))?;
            let roots = if paths.is_empty() { vec!["/".to_string()] } else { paths };
            let result = (|| -> Result<()> {
                for root in &roots {
                    s.cdxj_each(root, crate::store::StagedFiles::Refuse, &mut |l| sorter.push(l)).with_context(|| format!("{root}: cannot index"))?;
                }
                let mut out = BufWriter::new(io::stdout().lock());
                sorter.finish_into(&mut out).context("writing the index")?;
                out.flush()?;
                Ok(())
            })();
            let _ = fs::remove_dir_all(&runs);
            result?;
            Ok(0)
        }
        Cmd::Snapshot { store, dest } => {
            let dest = std::path::absolute(&dest).with_context(|| format!("{}: bad path", dest.display()))?;
            match Store::open(&store, false) {
                Ok(s) => {
                    let r = s.snapshot(&dest)?;
                    println!(
                        "snapshot {}: {} packs linked, {} copied, {} kept, {} removed, {} staged files copied",
                        dest.display(),
                        r.packs_linked,
                        r.packs_copied,
                        r.packs_kept,
                        r.packs_removed,
                        r.staged_files
                    );
                    Ok(0)
                }
                Err(crate::StoreError::Busy { pid, .. }) => {
                    // Mounted: the daemon owns the index, so it takes the snapshot.
                    let answer = crate::fuse::control::request(&store, &format!("snapshot {}", dest.display()))
                        .with_context(|| format!("{}: in use by process {pid}, and its control socket does not answer", store.display()))?;
                    match answer.strip_prefix("ok ") {
                        Some(rest) => {
                            println!("snapshot {}: {rest}", dest.display());
                            Ok(0)
                        }
                        None => bail!("{}: {}", dest.display(), answer.strip_prefix("error ").unwrap_or(&answer)),
                    }
                }
                Err(e) => Err(e.into()),
            }
        }
        Cmd::Umount { mountpoint } => crate::fuse::umount(&mountpoint),
        Cmd::Repair(Repair::Index { store }) => {
            let rep = crate::store::repair_index(&store)?;
            if let Some(kept) = &rep.kept_broken_index {
                println!("the unreadable index was kept as {kept}");
            }
            if rep.wrote_default_config {
                println!("warcfs.json was missing: written with the defaults (verify bytes, compression zstd, 32 MiB packs); edit it if the store used others");
            }
            println!(
                "rebuilt the index of {} from {} packs: {} chunks ({} duplicate copies left by gc), {} metadata log records, {} recipes",
                store.display(),
                rep.packs,
                rep.chunks,
                rep.duplicate_chunks,
                rep.log_records,
                rep.recipes
            );
            for p in &rep.problems {
                eprintln!("warcfs: {}: {p}", store.display());
            }
            if !rep.problems.is_empty() {
                bail!("{}: the index is rebuilt, but {} problems above mean some files cannot be read whole; run `warcfs fsck {}`", store.display(), rep.problems.len(), store.display());
            }
            Ok(0)
        }
        Cmd::Mount { store, mountpoint, foreground, options } => crate::fuse::mount(crate::fuse::MountArgs { store, mountpoint, foreground, options }),
        Cmd::Gc { store } => {
            let s = Store::open(&store, false)?;
            let rep = s.gc()?;
            let reclaimed = rep.bytes_before.saturating_sub(rep.bytes_after);
            println!(
                "reclaimed {reclaimed} bytes ({}): {} chunks dropped, {} packs deleted, {} rewritten",
                human(reclaimed),
                rep.chunks_dropped,
                rep.packs_deleted,
                rep.packs_rewritten
            );
            Ok(0)
        }
    }
}

fn perms(mode: u32) -> String {
    let mut s = String::with_capacity(9);
    for shift in [6, 3, 0] {
        let b = (mode >> shift) & 7;
        s.push(if b & 4 != 0 { 'r' } else { '-' });
        s.push(if b & 2 != 0 { 'w' } else { '-' });
        s.push(if b & 1 != 0 { 'x' } else { '-' });
    }
    s
}

/// Bytes of index lines sorted in memory at once (`warcfs index`, `/.warcfs/index.cdxj`).
pub const INDEX_RUN_BYTES: usize = 64 << 20;

pub fn human(n: u64) -> String {
    let units = ["B", "KB", "MB", "GB", "TB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1000.0 && u + 1 < units.len() {
        v /= 1000.0;
        u += 1;
    }
    format!("{v:.1} {}", units[u])
}

/// A source file opened, with the gzip members of its first window already split. It is
/// read with `pread`, a window at a time: never mapped (a file truncated under a mapping is
/// a SIGBUS that kills the import) and never read whole (1 GB WARCs are common).
struct Loaded {
    file: fs::File,
    /// What the file looked like when it was opened; compared again before its commit.
    seen: Seen,
    split: crate::store::Presplit,
    meta: FileMeta,
}

/// Size, modification and change times: a writer still appending to a file, or replacing
/// its bytes, changes at least one of them.
#[derive(PartialEq, Eq, Debug)]
struct Seen(u64, i64, i64, i64, i64);

fn seen(md: &fs::Metadata) -> Seen {
    use std::os::unix::fs::MetadataExt;
    Seen(md.len(), md.mtime(), md.mtime_nsec(), md.ctime(), md.ctime_nsec())
}

fn load(src: &Path) -> Result<Loaded> {
    use crate::store::Source;
    use std::os::unix::fs::PermissionsExt;
    let file = fs::File::open(src).with_context(|| format!("{}: cannot open", src.display()))?;
    let md = file.metadata().with_context(|| format!("{}: cannot stat", src.display()))?;
    let first = file.window(0, crate::store::FIRST_WINDOW).with_context(|| format!("{}: cannot read", src.display()))?;
    let split = crate::store::Presplit::from_window(&first, md.len());
    let meta = FileMeta {
        mode: md.permissions().mode() & 0o7777,
        mtime: md.modified().map(Timestamp::from).unwrap_or_else(|_| Timestamp::now()),
    };
    Ok(Loaded { seen: seen(&md), file, split, meta })
}

/// One thing to copy: a source path and where it lands in the store.
enum Item {
    Dir(String),
    File { src: PathBuf, dir: String, name: String, size: u64 },
    Symlink { src: PathBuf, dir: String, name: String },
}

fn join(dir: &str, name: &str) -> String {
    format!("{}/{name}", dir.trim_end_matches('/'))
}

fn plan(src: &Path, dest_dir: &str, items: &mut Vec<Item>) -> Result<()> {
    let meta = fs::symlink_metadata(src).with_context(|| format!("{}: cannot read", src.display()))?;
    let name = src
        .file_name()
        .map(|n| n.to_owned())
        .or_else(|| src.canonicalize().ok().and_then(|p| p.file_name().map(|n| n.to_owned())))
        .map(|n| n.to_string_lossy().to_string())
        .with_context(|| format!("{}: has no file name", src.display()))?;
    if meta.is_dir() {
        let here = join(dest_dir, &name);
        items.push(Item::Dir(here.clone()));
        let mut children: Vec<_> = fs::read_dir(src)
            .with_context(|| format!("{}: cannot list", src.display()))?
            .collect::<io::Result<Vec<_>>>()
            .with_context(|| format!("{}: cannot list", src.display()))?;
        children.sort_by_key(|e| e.file_name());
        for c in children {
            plan(&c.path(), &here, items)?;
        }
    } else if meta.file_type().is_symlink() {
        items.push(Item::Symlink { src: src.to_path_buf(), dir: dest_dir.to_string(), name });
    } else if meta.is_file() {
        items.push(Item::File { src: src.to_path_buf(), dir: dest_dir.to_string(), name, size: meta.len() });
    } else {
        log::warn!("{}: not a regular file, directory or symlink; skipped", src.display());
    }
    Ok(())
}

fn import(store: &Path, srcs: &[PathBuf], to: &str) -> Result<i32> {
    let mut items: Vec<Item> = Vec::new();
    for src in srcs {
        plan(src, to, &mut items)?;
    }
    let s = Store::open(store, true)?;
    s.mkdir_p(to)?;
    let total: u64 = items.iter().map(|i| if let Item::File { size, .. } = i { *size } else { 0 }).sum();
    let bar = if io::stderr().is_terminal() {
        let b = ProgressBar::new(total);
        b.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {bytes}/{total_bytes} {bytes_per_sec} {wide_msg}")
                .expect("valid template"),
        );
        b
    } else {
        ProgressBar::hidden()
    };
    let started = std::time::Instant::now();
    let (mut files, mut bytes_in, mut new_bytes, mut members, mut raw_members) = (0u64, 0u64, 0u64, 0u64, 0u64);
    // Finding and inflating gzip members needs no store: a second thread does it for the
    // next file while this one ingests the current one.
    let (tx, rx) = crossbeam_channel::bounded::<Result<Loaded>>(1);
    std::thread::scope(|scope| -> Result<()> {
        // Owned here, so that an error below drops it and the loader's next send fails:
        // the loader stops instead of waiting forever for a reader (the scope joins it).
        let rx = rx;
        let items = &items;
        scope.spawn(move || {
            for item in items {
                if let Item::File { src, .. } = item {
                    if tx.send(load(src)).is_err() {
                        break;
                    }
                }
            }
        });
        for item in items {
            match item {
                Item::Dir(path) => {
                    s.mkdir_p(path)?;
                }
                Item::Symlink { src, dir, name } => {
                    let target = fs::read_link(src).with_context(|| format!("{}: cannot read link", src.display()))?;
                    let d = s.resolve(dir)?;
                    use std::os::unix::ffi::OsStrExt;
                    s.put_symlink(d, name.as_bytes(), target.as_os_str().as_bytes())?;
                }
                Item::File { src, dir, name, .. } => {
                    bar.set_message(name.clone());
                    let loaded = rx.recv().context("file loader stopped")??;
                    let d = s.resolve(dir)?;
                    let Loaded { file, seen: before, split, meta } = loaded;
                    let unchanged = || !crate::failpoint::armed("source_changed") && file.metadata().is_ok_and(|md| seen(&md) == before);
                    let rep = s
                        .put_file_from(d, name.as_bytes(), &file, split, meta, unchanged)
                        .with_context(|| format!("{}: import failed", src.display()))?;
                    files += 1;
                    bytes_in += rep.size;
                    new_bytes += rep.new_bytes;
                    members += rep.stats.gzip_members;
                    raw_members += rep.stats.gzip_members_raw;
                    bar.inc(rep.size);
                }
            }
        }
        Ok(())
    })?;
    s.flush()?;
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    println!(
        "imported {files} files, {bytes_in} bytes in ({}), {new_bytes} new bytes stored ({}); {members} gzip members, {raw_members} kept raw; {:.1} MB/s",
        human(bytes_in),
        human(new_bytes),
        if secs > 0.0 { bytes_in as f64 / 1e6 / secs } else { 0.0 }
    );
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_written_to_after_it_was_seen_is_seen_to_change() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("growing.warc");
        fs::write(&p, b"WARC/1.0\r\n").unwrap();
        let f = fs::File::open(&p).unwrap();
        let before = seen(&f.metadata().unwrap());
        assert_eq!(seen(&f.metadata().unwrap()), before, "nothing changed yet");
        // Same size, other bytes: the change time moves even where mtime's clock is coarse.
        std::thread::sleep(std::time::Duration::from_millis(10));
        fs::OpenOptions::new().write(true).open(&p).unwrap().write_all(b"WARC/1.1").unwrap();
        assert_ne!(seen(&f.metadata().unwrap()), before);
        let before = seen(&f.metadata().unwrap());
        fs::OpenOptions::new().append(true).open(&p).unwrap().write_all(b"more").unwrap();
        assert_ne!(seen(&f.metadata().unwrap()), before, "an append changes the size");
    }
}
