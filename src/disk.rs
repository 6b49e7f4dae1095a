//! The seam between the store and the disk for the store's own durable files: packs (the
//! data writer's and the metadata log's, open in `packs-tmp/` and sealed in `packs/`), the
//! mount's staging files, `warcfs.json`, `recovering`, a snapshot's packs, staged copies and
//! index swap, and the directories they live in. RocksDB (the index) is outside it: the
//! store writes it with synced batches, so its state at a power cut counts as durable.
//!
//! In normal operation every function here is the `std::fs` / `FileExt` call it names.
//! In a debug build run with `WARCFS_POWER_CUT=1` (tests only) the seam also keeps, in
//! memory, what a power cut would lose, as redb's crash-testing backend does:
//!
//! - per file (by inode) written since its last `sync_data`/`sync_all`: its durable length
//!   and the durable bytes that writes or truncations since have overwritten;
//! - per change of a directory entry (create, link, unlink, rename, exchange, mkdir) the
//!   directories whose fsync (`sync_dir`) it still waits for (both ends of a rename); an
//!   unlinked or replaced file is kept open to be put back.
//!
//! `power_cut` (called by `failpoint::crash_at` just before its SIGKILL) takes the seam's
//! lock for good, so no thread writes through it afterwards, and undoes on the real files
//! all that is not durable: file contents back to their durable bytes and length, then the
//! pending directory changes in reverse order. A file whose creation was not yet durable in
//! its directory is lost whole. What this models: a disk that keeps exactly what was synced
//! (a file's data by its fsync, a name by its directory's fsync), and any subset of nothing
//! else; a process's writes are tracked from its start, so what an earlier process left
//! unsynced counts as durable.

// A release build compiles the tracker (so it stays checked) but never runs it.
#![cfg_attr(not(debug_assertions), allow(dead_code, unused_mut))]

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

/// `OpenOptions` `create_new`, read and write: a new file of the store.
pub fn create_new(path: &Path) -> io::Result<File> {
    let f = OpenOptions::new().create_new(true).read(true).write(true).open(path)?;
    if let Some(mut st) = tracker() {
        st.created(path, &f)?;
    }
    Ok(f)
}

/// `OpenOptions` create and truncate, read and write: a file of the store made anew.
pub fn create(path: &Path) -> io::Result<File> {
    let Some(mut st) = tracker() else {
        return OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path);
    };
    match OpenOptions::new().read(true).write(true).open(path) {
        Ok(f) => {
            st.set_len(&f, 0)?;
            Ok(f)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let f = OpenOptions::new().create_new(true).read(true).write(true).open(path)?;
            st.created(path, &f)?;
            Ok(f)
        }
        Err(e) => Err(e),
    }
}

/// `FileExt::write_all_at`.
pub fn write_at(file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    match tracker() {
        Some(mut st) => st.write_at(file, buf, offset),
        None => file.write_all_at(buf, offset),
    }
}

/// `File::set_len`.
pub fn set_len(file: &File, len: u64) -> io::Result<()> {
    match tracker() {
        Some(mut st) => st.set_len(file, len),
        None => file.set_len(len),
    }
}

/// `File::sync_data`: the file's bytes and length are durable (not its name).
pub fn sync_data(file: &File) -> io::Result<()> {
    match tracker() {
        Some(mut st) => st.synced(file, File::sync_data),
        None => file.sync_data(),
    }
}

/// `File::sync_all`.
pub fn sync_all(file: &File) -> io::Result<()> {
    match tracker() {
        Some(mut st) => st.synced(file, File::sync_all),
        None => file.sync_all(),
    }
}

/// fsync of the directory `dir`: the changes of its entries are durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    match tracker() {
        Some(mut st) => st.sync_dir(dir),
        None => File::open(dir)?.sync_all(),
    }
}

/// `fs::rename`.
pub fn rename(from: &Path, to: &Path) -> io::Result<()> {
    match tracker() {
        Some(mut st) => st.rename(from, to),
        None => fs::rename(from, to),
    }
}

/// `renameat2(RENAME_EXCHANGE)`: swaps two paths atomically.
pub fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    match tracker() {
        Some(mut st) => {
            raw_exchange(a, b)?;
            st.pending(Op::Exchange(abs(a)?, abs(b)?), &[a, b])
        }
        None => raw_exchange(a, b),
    }
}

/// `fs::remove_file`.
pub fn remove_file(path: &Path) -> io::Result<()> {
    match tracker() {
        Some(mut st) => {
            let keep = File::open(path)?;
            fs::remove_file(path)?;
            st.pending(Op::Unlink(abs(path)?, keep), &[path])
        }
        None => fs::remove_file(path),
    }
}

/// `fs::hard_link`.
pub fn hard_link(src: &Path, dst: &Path) -> io::Result<()> {
    match tracker() {
        Some(mut st) => {
            fs::hard_link(src, dst)?;
            st.pending(Op::Create(abs(dst)?), &[dst])
        }
        None => fs::hard_link(src, dst),
    }
}

/// `fs::create_dir_all`.
pub fn create_dir_all(path: &Path) -> io::Result<()> {
    let Some(mut st) = tracker() else { return fs::create_dir_all(path) };
    // The directories that are new, outermost first.
    let mut new = Vec::new();
    let mut p = Some(path);
    while let Some(d) = p.filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        new.push(d.to_path_buf());
        p = d.parent();
    }
    fs::create_dir_all(path)?;
    for d in new.iter().rev() {
        st.pending(Op::Create(abs(d)?), &[d])?;
    }
    Ok(())
}

/// fsync of the directory holding `path`: a directory made for a store (its root, a
/// snapshot's DEST) survives a power loss only once its parent is synced.
pub fn sync_parent(path: &Path) -> io::Result<()> {
    let p = abs(path)?;
    sync_dir(p.parent().unwrap_or(Path::new("/")))
}

/// `fs::copy` into a new file `dst` (its bytes not synced).
pub fn copy(src: &Path, dst: &Path) -> io::Result<u64> {
    let Some(mut st) = tracker() else { return fs::copy(src, dst) };
    let bytes = fs::read(src)?;
    let f = OpenOptions::new().create_new(true).read(true).write(true).open(dst)?;
    st.created(dst, &f)?;
    st.write_at(&f, &bytes, 0)?;
    Ok(bytes.len() as u64)
}

/// A file written from `pos` on through `io::Write`, by `write_at`.
pub struct Writer<'a> {
    file: &'a File,
    pos: u64,
}

impl<'a> Writer<'a> {
    pub fn new(file: &'a File, pos: u64) -> Writer<'a> {
        Writer { file, pos }
    }
}

impl io::Write for Writer<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        write_at(self.file, buf, self.pos)?;
        self.pos += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Cuts the power (`WARCFS_POWER_CUT=1`, debug builds): freezes the seam for good and undoes
/// on the disk every write that was not durable. The caller then kills the process.
pub(crate) fn power_cut() {
    #[cfg(debug_assertions)]
    if enabled() {
        let mut st = STATE.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = st.revert() {
            eprintln!("warcfs: power cut: undoing what was not durable failed: {e}");
        }
        // Never unlocked: no write through the seam after the cut.
        std::mem::forget(st);
    }
}

/// Kills the process, as the power would, at a normal exit when `WARCFS_CRASH_AT=exited:1`:
/// with `WARCFS_POWER_CUT=1`, what a command that returned left unsynced is lost.
pub fn exited() {
    crate::failpoint::crash_at("exited");
}

fn raw_exchange(a: &Path, b: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let ca = std::ffi::CString::new(a.as_os_str().as_bytes()).map_err(io::Error::other)?;
    let cb = std::ffi::CString::new(b.as_os_str().as_bytes()).map_err(io::Error::other)?;
    // SAFETY: two valid NUL-terminated paths, relative to the current directory.
    let rc = unsafe { libc::renameat2(libc::AT_FDCWD, ca.as_ptr(), libc::AT_FDCWD, cb.as_ptr(), libc::RENAME_EXCHANGE) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

#[cfg(debug_assertions)]
fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("WARCFS_POWER_CUT").is_ok_and(|v| v == "1"))
}

#[cfg(debug_assertions)]
static STATE: std::sync::Mutex<State> = std::sync::Mutex::new(State { files: Vec::new(), ops: Vec::new() });

#[cfg(debug_assertions)]
fn tracker() -> Option<std::sync::MutexGuard<'static, State>> {
    enabled().then(|| STATE.lock().unwrap_or_else(|p| p.into_inner()))
}

#[cfg(not(debug_assertions))]
#[inline(always)]
fn tracker() -> Option<&'static mut State> {
    None
}

type Id = (u64, u64);

fn id_of(md: &fs::Metadata) -> Id {
    (md.dev(), md.ino())
}

/// `path` made absolute (against the current directory: the process does not change it).
fn abs(path: &Path) -> io::Result<PathBuf> {
    if path.is_absolute() { Ok(path.to_path_buf()) } else { Ok(std::env::current_dir()?.join(path)) }
}

/// The directory holding the entry `path`.
fn parent_of(path: &Path) -> io::Result<Id> {
    let p = abs(path)?;
    let dir = p.parent().ok_or_else(|| io::Error::other("the root has no parent"))?;
    Ok(id_of(&fs::metadata(dir)?))
}

/// A file written since its last sync.
struct Dirty {
    id: Id,
    file: File,
    durable_len: u64,
    /// Durable bytes overwritten since (offset, bytes), in the order they were overwritten.
    saved: Vec<(u64, Vec<u8>)>,
}

/// A change of directory entries not yet durable.
enum Op {
    /// A new name (a file, a link, a directory): undone by removing it.
    Create(PathBuf),
    /// A name removed; the file kept open to be put back.
    Unlink(PathBuf, File),
    /// `from` renamed to `to`, replacing the file kept open.
    Rename { from: PathBuf, to: PathBuf, replaced: Option<File> },
    Exchange(PathBuf, PathBuf),
}

struct Pending {
    op: Op,
    /// The directories whose fsync it still waits for.
    dirs: Vec<Id>,
}

/// What a power cut now would lose.
#[derive(Default)]
struct State {
    files: Vec<Dirty>,
    ops: Vec<Pending>,
}

impl State {
    fn dirty(&mut self, file: &File) -> io::Result<&mut Dirty> {
        let md = file.metadata()?;
        let id = id_of(&md);
        match self.files.iter().position(|d| d.id == id) {
            Some(i) => Ok(&mut self.files[i]),
            None => {
                self.files.push(Dirty { id, file: file.try_clone()?, durable_len: md.len(), saved: Vec::new() });
                Ok(self.files.last_mut().expect("just pushed"))
            }
        }
    }

    /// Keeps the durable bytes of `[start, end)` that a change is about to overwrite (those
    /// past the file's end now were kept by the truncation that cut them off).
    fn save(&mut self, file: &File, start: u64, end: u64) -> io::Result<()> {
        let now = file.metadata()?.len();
        let d = self.dirty(file)?;
        let end = end.min(d.durable_len).min(now);
        if start < end {
            let mut old = vec![0u8; (end - start) as usize];
            d.file.read_exact_at(&mut old, start)?;
            d.saved.push((start, old));
        }
        Ok(())
    }

    fn created(&mut self, path: &Path, file: &File) -> io::Result<()> {
        self.dirty(file)?.durable_len = 0;
        self.pending(Op::Create(abs(path)?), &[path])
    }

    fn write_at(&mut self, file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
        self.save(file, offset, offset + buf.len() as u64)?;
        file.write_all_at(buf, offset)
    }

    fn set_len(&mut self, file: &File, len: u64) -> io::Result<()> {
        self.save(file, len, u64::MAX)?;
        file.set_len(len)
    }

    fn synced(&mut self, file: &File, sync: fn(&File) -> io::Result<()>) -> io::Result<()> {
        sync(file)?;
        let id = id_of(&file.metadata()?);
        self.files.retain(|d| d.id != id);
        Ok(())
    }

    fn sync_dir(&mut self, dir: &Path) -> io::Result<()> {
        let f = File::open(dir)?;
        f.sync_all()?;
        let id = id_of(&f.metadata()?);
        for p in &mut self.ops {
            p.dirs.retain(|d| *d != id);
        }
        self.ops.retain(|p| !p.dirs.is_empty());
        Ok(())
    }

    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        let replaced = match File::open(to) {
            Ok(f) if f.metadata()?.is_file() => Some(f),
            _ => None,
        };
        let dirs = [from, to];
        fs::rename(from, to)?;
        self.pending(Op::Rename { from: abs(from)?, to: abs(to)?, replaced }, &dirs)
    }

    /// Notes a change of the entries `paths` name (their directories' ids are taken now: a
    /// removed entry's directory still exists).
    fn pending(&mut self, op: Op, paths: &[&Path]) -> io::Result<()> {
        let mut dirs = Vec::new();
        for p in paths {
            let d = parent_of(p)?;
            if !dirs.contains(&d) {
                dirs.push(d);
            }
        }
        self.ops.push(Pending { op, dirs });
        Ok(())
    }

    /// Undoes all that is not durable: contents first (through the descriptors kept, whatever
    /// their names now), then the entry changes, newest first.
    fn revert(&mut self) -> io::Result<()> {
        for d in self.files.drain(..) {
            d.file.set_len(d.durable_len)?;
            for (off, bytes) in d.saved.iter().rev() {
                d.file.write_all_at(bytes, *off)?;
            }
        }
        while let Some(p) = self.ops.pop() {
            match p.op {
                Op::Create(path) => match fs::symlink_metadata(&path) {
                    Ok(md) if md.is_dir() => fs::remove_dir_all(&path)?,
                    Ok(_) => fs::remove_file(&path)?,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                },
                Op::Unlink(path, keep) => put_back(&path, &keep)?,
                Op::Rename { from, to, replaced } => {
                    fs::rename(&to, &from)?;
                    if let Some(keep) = replaced {
                        put_back(&to, &keep)?;
                    }
                }
                Op::Exchange(a, b) => raw_exchange(&a, &b)?,
            }
        }
        Ok(())
    }
}

/// Makes `path` a file again holding the bytes of `keep` (an unlinked or replaced file).
fn put_back(path: &Path, keep: &File) -> io::Result<()> {
    let len = keep.metadata()?.len();
    let mut bytes = vec![0u8; len as usize];
    keep.read_exact_at(&mut bytes, 0)?;
    fs::write(path, bytes)?;
    fs::set_permissions(path, keep.metadata()?.permissions())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_keeps_only_what_was_synced() {
        let dir = tempfile::tempdir().unwrap();
        let mut st = State::default();
        // Durable before: a file in a synced directory, synced.
        let kept = dir.path().join("kept");
        let f = OpenOptions::new().create_new(true).read(true).write(true).open(&kept).unwrap();
        st.created(&kept, &f).unwrap();
        st.write_at(&f, b"hello world", 0).unwrap();
        st.synced(&f, File::sync_data).unwrap();
        st.sync_dir(dir.path()).unwrap();
        // Then overwritten, appended to and truncated, never synced.
        st.write_at(&f, b"HELLO", 0).unwrap();
        st.write_at(&f, b"!!!", 11).unwrap();
        st.set_len(&f, 3).unwrap();
        st.write_at(&f, b"xyz", 1).unwrap();
        st.set_len(&f, 0).unwrap();
        st.write_at(&f, b"truncated, then written again", 0).unwrap();
        // A file synced, in a directory entry not synced: lost whole.
        let lost = dir.path().join("lost");
        let g = OpenOptions::new().create_new(true).read(true).write(true).open(&lost).unwrap();
        st.created(&lost, &g).unwrap();
        st.write_at(&g, b"gone", 0).unwrap();
        st.synced(&g, File::sync_all).unwrap();
        // A rename replacing `kept`, and an unlink, neither synced.
        let other = dir.path().join("other");
        fs::write(&other, b"other").unwrap();
        st.rename(&other, &kept).unwrap();
        let removed = dir.path().join("removed");
        fs::write(&removed, b"removed").unwrap();
        remove_in(&mut st, &removed);
        st.revert().unwrap();
        assert_eq!(fs::read(&kept).unwrap(), b"hello world");
        assert!(!lost.exists());
        assert_eq!(fs::read(&other).unwrap(), b"other");
        assert_eq!(fs::read(&removed).unwrap(), b"removed");
    }

    fn remove_in(st: &mut State, path: &Path) {
        let keep = File::open(path).unwrap();
        fs::remove_file(path).unwrap();
        st.pending(Op::Unlink(abs(path).unwrap(), keep), &[path]).unwrap();
    }

    #[test]
    fn a_rename_waits_for_both_directories() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        fs::create_dir(&a).unwrap();
        fs::create_dir(&b).unwrap();
        fs::write(a.join("f"), b"f").unwrap();
        let mut st = State::default();
        st.rename(&a.join("f"), &b.join("f")).unwrap();
        st.sync_dir(&b).unwrap();
        st.revert().unwrap();
        assert!(a.join("f").exists() && !b.join("f").exists());
        let mut st = State::default();
        st.rename(&a.join("f"), &b.join("f")).unwrap();
        st.sync_dir(&b).unwrap();
        st.sync_dir(&a).unwrap();
        st.revert().unwrap();
        assert!(!a.join("f").exists() && b.join("f").exists());
    }
}
