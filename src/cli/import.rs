//! `warcfs import`: copies files and directories into a store, as `cp -r` would, with a
//! second thread finding the gzip members of the next file while this one is stored.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use super::{exit, human, progress};
use crate::store::{FileMeta, ImportFile, Spares, Store, Timestamp};

/// A source file opened, with the gzip members of its first window already split. It is
/// read a window at a time (`ImportFile`: with `pread`, or around the page cache when the
/// cache lacks it): never mapped (a file truncated under a mapping is a SIGBUS that kills
/// the import) and never read whole (1 GB WARCs are common).
struct Loaded {
    file: ImportFile,
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

fn load(src: &Path, spares: &Spares) -> Result<Loaded> {
    use std::os::unix::fs::PermissionsExt;
    let file = crate::failpoint::io_error("load").and_then(|()| fs::File::open(src)).with_context(|| format!("{}: cannot open", src.display()))?;
    let md = file.metadata().with_context(|| format!("{}: cannot stat", src.display()))?;
    let file = ImportFile::new(file);
    let want = crate::store::FIRST_WINDOW.min(md.len().min(usize::MAX as u64) as usize);
    let first = file.first_window(want, spares.for_window(want)).with_context(|| format!("{}: cannot read", src.display()))?;
    let split = crate::store::Presplit::from_window_in(&first, md.len(), spares);
    // (The ingest reads the window again, from the page cache or the blocks read ahead: the
    // split is what it takes.)
    if let std::borrow::Cow::Owned(buf) = first {
        spares.give_window(buf);
    }
    let meta = FileMeta {
        mode: md.permissions().mode() & 0o7777,
        mtime: md.modified().map(Timestamp::from).unwrap_or_else(|_| Timestamp::now()),
    };
    Ok(Loaded { seen: seen(&md), file, split, meta })
}

/// One thing to copy: a source path and where it lands in the store, as the names of the
/// directories below the destination and its own name. Names are the filesystem's bytes,
/// UTF-8 or not: a lossy conversion would turn two names into one, and one file would
/// replace the other.
enum Item {
    Dir(Vec<Vec<u8>>),
    File { src: PathBuf, dir: Vec<Vec<u8>>, name: Vec<u8>, size: u64 },
    Symlink { src: PathBuf, dir: Vec<Vec<u8>>, name: Vec<u8> },
}

fn plan(src: &Path, dest_dir: &[Vec<u8>], items: &mut Vec<Item>) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let meta = fs::symlink_metadata(src).with_context(|| format!("{}: cannot read", src.display()))?;
    let name = src
        .file_name()
        .map(|n| n.to_owned())
        .or_else(|| src.canonicalize().ok().and_then(|p| p.file_name().map(|n| n.to_owned())))
        .map(|n| n.as_bytes().to_vec())
        .with_context(|| format!("{}: has no file name", src.display()))?;
    if meta.is_dir() {
        let here = [dest_dir, std::slice::from_ref(&name)].concat();
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
        items.push(Item::Symlink { src: src.to_path_buf(), dir: dest_dir.to_vec(), name });
    } else if meta.is_file() {
        items.push(Item::File { src: src.to_path_buf(), dir: dest_dir.to_vec(), name, size: meta.len() });
    } else {
        log::warn!("{}: not a regular file, directory or symlink; skipped", src.display());
    }
    Ok(())
}

pub fn import(store: &Path, srcs: &[PathBuf], to: &str, quiet: bool) -> Result<i32> {
    let mut items: Vec<Item> = Vec::new();
    for src in srcs {
        plan(src, &[], &mut items)?;
    }
    let s = Store::open(store, true)?;
    let base = s.mkdir_p(to)?;
    fn names(dir: &[Vec<u8>]) -> Vec<&[u8]> {
        dir.iter().map(Vec::as_slice).collect()
    }
    let total: u64 = items.iter().map(|i| if let Item::File { size, .. } = i { *size } else { 0 }).sum();
    let bar = progress::bytes(quiet, total);
    let started = std::time::Instant::now();
    let (mut files, mut bytes_in, mut new_bytes, mut members, mut raw_members) = (0u64, 0u64, 0u64, 0u64, 0u64);
    // Finding and inflating gzip members needs no store: a second thread does it for the
    // next file while this one ingests the current one.
    let (tx, rx) = crossbeam_channel::bounded::<Result<Loaded>>(1);
    // The windows' buffers, from one file to the next and from the loader to the ingest:
    // fresh ones are fresh pages, each zeroed by the kernel as it is first touched.
    let spares = Spares::new();
    let spares = &spares;
    std::thread::scope(|scope| -> Result<()> {
        // Owned here, so that an error below drops it and the loader's next send fails:
        // the loader stops instead of waiting forever for a reader (the scope joins it).
        let rx = rx;
        let items = &items;
        scope.spawn(move || {
            for item in items {
                if let Item::File { src, .. } = item {
                    if tx.send(load(src, spares)).is_err() {
                        break;
                    }
                }
            }
        });
        // The file ingested last, its commit left to the next file's ingest (which makes it
        // while its first windows are proven: `Store::put_file_after`) or made before
        // anything else changes the namespace.
        let mut waiting: Option<(crate::store::Ingest, &Path)> = None;
        let mut counted = |rep: crate::store::PutReport| {
            files += 1;
            bytes_in += rep.size;
            new_bytes += rep.new_bytes;
            members += rep.stats.gzip_members;
            raw_members += rep.stats.gzip_members_raw;
            bar.inc(rep.size);
        };
        let commit = |w: Option<(crate::store::Ingest, &Path)>| -> Result<Option<crate::store::PutReport>> {
            w.map(|(ingest, src)| s.commit_put(ingest).with_context(|| format!("{}: import failed", src.display()))).transpose()
        };
        let mut each = || -> Result<()> {
            for item in items {
                if !matches!(item, Item::File { .. }) {
                    if let Some(rep) = commit(waiting.take())? {
                        counted(rep);
                    }
                }
                match item {
                    Item::Dir(path) => {
                        s.mkdir_in(base, &names(path))?;
                    }
                    Item::Symlink { src, dir, name } => {
                        let target = fs::read_link(src).with_context(|| format!("{}: cannot read link", src.display()))?;
                        let d = s.mkdir_in(base, &names(dir))?;
                        use std::os::unix::ffi::OsStrExt;
                        s.put_symlink(d, name, target.as_os_str().as_bytes())?;
                    }
                    Item::File { src, dir, name, .. } => {
                        bar.set_message(String::from_utf8_lossy(name).into_owned());
                        let loaded = rx.recv().context("file loader stopped")??;
                        let d = s.mkdir_in(base, &names(dir))?;
                        let Loaded { file, seen: before, split, meta } = loaded;
                        let unchanged = || !crate::failpoint::armed("source_changed") && file.file().metadata().is_ok_and(|md| seen(&md) == before);
                        let (earlier, earlier_src) = waiting.take().map_or((None, None), |(i, p)| (Some(i), Some(p)));
                        let (committed, this) = s.put_file_after(earlier, d, name, &file, split, meta, unchanged, spares);
                        if let (Some(r), Some(p)) = (committed, earlier_src) {
                            counted(r.with_context(|| format!("{}: import failed", p.display()))?);
                        }
                        waiting = Some((this.with_context(|| format!("{}: import failed", src.display()))?, src.as_path()));
                    }
                }
            }
            Ok(())
        };
        let r = each();
        // The file waiting is committed whatever stopped the loop (a file after it that
        // cannot be read): it was stored whole. Its own failure comes first, as it would
        // have one file after another.
        if let Some(rep) = commit(waiting.take())? {
            counted(rep);
        }
        r
    })?;
    s.flush()?;
    // On an object store the import is done when its packs are there (they are safe in
    // STORE/packs until then, and the error says so).
    s.wait_uploaded(UPLOAD_WAIT)?;
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    let (named, refused) = s.named_tails();
    log::debug!("{named} gzip members named the parse tail of an earlier copy of their payload ({refused} refused)");
    println!(
        "imported {files} files, {bytes_in} bytes in ({}), {new_bytes} new bytes stored ({}); {members} gzip members, {raw_members} kept raw; {:.1} MB/s",
        human(bytes_in),
        human(new_bytes),
        if secs > 0.0 { bytes_in as f64 / 1e6 / secs } else { 0.0 }
    );
    Ok(exit::OK)
}

/// How long an import waits for its packs to reach the object store (uploads retry with
/// backoff meanwhile).
const UPLOAD_WAIT: std::time::Duration = std::time::Duration::from_secs(300);

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

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

    /// Names that are not UTF-8 come in as the bytes they are: two that a lossy conversion
    /// makes one (both `a\u{FFFD}`) stay two files, and a directory so named holds its own.
    #[test]
    fn names_that_are_not_utf8_stay_apart() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        let sub = src.join(std::ffi::OsStr::from_bytes(b"d\xe9j\xe0"));
        fs::create_dir_all(&sub).unwrap();
        fs::write(src.join(std::ffi::OsStr::from_bytes(b"a\xff")), b"first").unwrap();
        fs::write(src.join(std::ffi::OsStr::from_bytes(b"a\xfe")), b"second").unwrap();
        fs::write(sub.join(std::ffi::OsStr::from_bytes(b"\xe9t\xe9")), b"third").unwrap();
        let store = dir.path().join("store");
        assert_eq!(import(&store, &[src], "/in", true).unwrap(), 0);
        let s = Store::open(&store, false).unwrap();
        let at = |parent: u64, name: &[u8]| s.lookup(parent, name).unwrap().unwrap_or_else(|| panic!("{} missing", String::from_utf8_lossy(name)));
        let top = at(s.resolve("/in").unwrap(), b"src");
        let read = |ino: u64| {
            let head = s.head(ino).unwrap().unwrap();
            let mut buf = vec![0u8; head.size as usize];
            s.read_at(&head, 0, &mut buf).unwrap();
            buf
        };
        assert_eq!(read(at(top, b"a\xff")), b"first");
        assert_eq!(read(at(top, b"a\xfe")), b"second");
        assert_eq!(read(at(at(top, b"d\xe9j\xe0"), b"\xe9t\xe9")), b"third");
    }
}
