//! The store's namespace: inodes and directory entries, resolved by path for the CLI and by
//! inode number for the mount. Every change is one atomic index batch.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::ingest::{Ingested, Presplit, Windows};
use super::{Ns, Result, Share, Store, StoreError, RESERVED};
use crate::LockExt;
use crate::digest::ChunkKey;
use crate::index::{Batch, Index};
use crate::recipe::{self, FileStats, Piece, RecipeHead, RefDelta};

pub const ROOT_INO: u64 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum InodeKind {
    Dir,
    File,
    Symlink,
    /// Special files (made with mknod): they hold no bytes, only their type and `rdev`.
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Timestamp {
    pub secs: i64,
    pub nanos: u32,
}

impl Timestamp {
    pub fn now() -> Timestamp {
        Timestamp::from(SystemTime::now())
    }
}

impl From<SystemTime> for Timestamp {
    fn from(t: SystemTime) -> Timestamp {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => Timestamp { secs: d.as_secs() as i64, nanos: d.subsec_nanos() },
            Err(e) => {
                let d = e.duration();
                if d.subsec_nanos() == 0 {
                    Timestamp { secs: -(d.as_secs() as i64), nanos: 0 }
                } else {
                    Timestamp { secs: -(d.as_secs() as i64) - 1, nanos: 1_000_000_000 - d.subsec_nanos() }
                }
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inode {
    pub kind: InodeKind,
    /// Permission bits (and setuid/setgid/sticky); the type comes from `kind`.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub size: u64,
    pub atime: Timestamp,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
    pub recipe: Option<RecipeHead>,
    pub stats: FileStats,
    pub target: Vec<u8>,
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    /// The file's current bytes are in the mount's staging area, not (yet) in its recipe.
    pub staged: bool,
    /// For directories: the parent directory (for `..` and rename loop checks).
    pub parent: u64,
    /// Device number of a character or block device node.
    pub rdev: u32,
}

impl Inode {
    pub fn new(kind: InodeKind, mode: u32) -> Inode {
        let now = Timestamp::now();
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Inode {
            kind,
            mode,
            uid,
            gid,
            nlink: if kind == InodeKind::Dir { 2 } else { 1 },
            size: 0,
            atime: now,
            mtime: now,
            ctime: now,
            recipe: None,
            stats: FileStats::default(),
            target: Vec::new(),
            xattrs: BTreeMap::new(),
            staged: false,
            parent: 0,
            rdev: 0,
        }
    }
}

#[derive(Clone, Debug)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub ino: u64,
    pub inode: Inode,
}

/// The attributes a new file gets.
#[derive(Clone, Copy, Debug)]
pub struct FileMeta {
    pub mode: u32,
    pub mtime: Timestamp,
}

/// What committing one file added to the store.
#[derive(Clone, Copy, Debug, Default)]
pub struct PutReport {
    pub ino: u64,
    pub size: u64,
    /// Pack bytes written for this file's new chunks.
    pub new_bytes: u64,
    pub stats: FileStats,
}

/// A file ingested and not yet committed (`Store::put_file_after`): its chunks are in
/// packs, nothing names them until `Store::commit_put`.
pub struct Ingest {
    dir: u64,
    name: Vec<u8>,
    ingested: Ingested,
    meta: FileMeta,
}

/// Splits a store path into components; rejects `..`.
pub fn components(path: &str) -> Result<Vec<&str>> {
    let mut out = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => return Err(StoreError::InvalidPath(path.to_string())),
            c => out.push(c),
        }
    }
    Ok(out)
}

/// `/.warcfs` at the root is the mount's own view (`RESERVED`): an error there.
fn refuse_reserved(dir: u64, name: &[u8]) -> Result<()> {
    if dir == ROOT_INO && name == RESERVED.as_bytes() {
        return Err(StoreError::Reserved(RESERVED.into()));
    }
    Ok(())
}

impl Store {
    pub(super) fn ensure_root(&self) -> Result<()> {
        if self.index.inode::<Inode>(ROOT_INO)?.is_none() {
            let mut b = Batch::new();
            b.put_inode(&self.index, ROOT_INO, &Inode::new(InodeKind::Dir, 0o755));
            b.put_meta_u64(&self.index, "next_ino", ROOT_INO + 1);
            self.write_batch(&mut self.ns.locked(), b)?;
        }
        Ok(())
    }

    /// This node's directory at the root of a store several nodes write, `/NAME/`, made on
    /// its first open as a writer (`nodes`), with the counters it allocates ids from starting
    /// in its range. Fails if another node has that name.
    pub(crate) fn ensure_node_dir(&self) -> Result<()> {
        let Share::Node(node) = self.share() else { return Ok(()) };
        let name = self.config.node_name.clone().unwrap_or_default();
        let ino = self.share().id_base() | 1;
        match self.index.lookup(ROOT_INO, name.as_bytes())? {
            Some(found) if found == ino => Ok(()),
            Some(found) => Err(StoreError::NodeNameTaken { name, theirs: crate::bucket::node_of(found), ours: node }),
            None => {
                let mut b = Batch::new();
                let mut d = Inode::new(InodeKind::Dir, 0o755);
                d.parent = ROOT_INO;
                b.put_inode(&self.index, ino, &d);
                b.put_dirent(&self.index, ROOT_INO, name.as_bytes(), ino);
                b.put_meta_u64(&self.index, "next_ino", ino + 1);
                b.put_meta_u64(&self.index, "next_recipe", ino + 1);
                self.write_batch(&mut self.ns.locked(), b)
            }
        }
    }

    /// Whether this node may change inode `ino` (see `Share::owns`).
    pub fn owns(&self, ino: u64) -> bool {
        self.share().owns(ino)
    }

    /// Fails (`StoreError::NotOwned`, naming `what`) unless this node may change inode `ino`
    /// (or add and remove entries in it, for a directory): always on a store one node
    /// writes; on a store several nodes write, only its own.
    pub fn check_owns(&self, ino: u64, what: &[u8]) -> Result<()> {
        if self.owns(ino) {
            return Ok(());
        }
        let name = self.config.node_name.clone().unwrap_or_default();
        Err(StoreError::NotOwned {
            what: String::from_utf8_lossy(what).into_owned(),
            node: name,
            owner: if ino == ROOT_INO { "the store's root, which no node changes".into() } else { format!("node {:04x}", crate::bucket::node_of(ino)) },
        })
    }

    /// `check_owns` for a name about to be made in `dir` (a file, directory, link or a
    /// rename's target), which must not be the mount's own `/.warcfs` (`RESERVED`): a file
    /// stored there would be hidden by that view.
    pub fn check_new_name(&self, dir: u64, name: &[u8]) -> Result<()> {
        refuse_reserved(dir, name)?;
        self.check_owns(dir, name)
    }

    /// `check_owns` for an inode known by its number only (FUSE opens and attribute
    /// changes): nothing is formatted unless it fails.
    pub fn check_owns_inode(&self, ino: u64) -> Result<()> {
        if self.owns(ino) {
            return Ok(());
        }
        self.check_owns(ino, format!("<inode {ino}>").as_bytes())
    }

    pub fn inode(&self, ino: u64) -> Result<Option<Inode>> {
        Ok(self.index.inode(ino)?)
    }

    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<Option<u64>> {
        Ok(self.index.lookup(parent, name)?)
    }

    /// The inode number at `path` (absolute within the store).
    pub fn resolve(&self, path: &str) -> Result<u64> {
        let mut ino = ROOT_INO;
        for c in components(path)? {
            ino = self.index.lookup(ino, c.as_bytes())?.ok_or_else(|| StoreError::NotFound(path.to_string()))?;
        }
        Ok(ino)
    }

    fn inode_or_missing(&self, ino: u64, path: &str) -> Result<Inode> {
        self.index.inode(ino)?.ok_or_else(|| StoreError::NotFound(path.to_string()))
    }

    pub fn read_dir(&self, ino: u64) -> Result<Vec<DirEntry>> {
        let mut out = Vec::new();
        for (name, child) in self.index.dir_entries(ino)? {
            if let Some(inode) = self.index.inode(child)? {
                out.push(DirEntry { name, ino: child, inode });
            }
        }
        Ok(out)
    }

    /// The entries under `path`: a directory's children, or the file itself.
    pub fn list(&self, path: &str) -> Result<Vec<DirEntry>> {
        let ino = self.resolve(path)?;
        let inode = self.inode_or_missing(ino, path)?;
        if inode.kind == InodeKind::Dir {
            return self.read_dir(ino);
        }
        let name = components(path)?.last().map(|s| s.as_bytes().to_vec()).unwrap_or_default();
        Ok(vec![DirEntry { name, ino, inode }])
    }

    pub(super) fn alloc(&self, w: &mut Ns, b: &mut Batch, what: &'static str) -> Result<u64> {
        let counter = match what {
            "ino" => &mut w.next_ino,
            _ => &mut w.next_recipe,
        };
        if *counter == 0 {
            // On a store several nodes write, in this node's range (`Share::id_base`).
            *counter = self.index.meta_u64(if what == "ino" { "next_ino" } else { "next_recipe" })?.max(self.share().id_base() + ROOT_INO + 1);
        }
        let v = *counter;
        *counter += 1;
        b.put_meta_u64(&self.index, if what == "ino" { "next_ino" } else { "next_recipe" }, *counter);
        Ok(v)
    }

    /// Creates every missing directory along `path` and returns the last one's inode.
    pub fn mkdir_p(&self, path: &str) -> Result<u64> {
        let names: Vec<&[u8]> = components(path)?.into_iter().map(str::as_bytes).collect();
        self.mkdir_in(ROOT_INO, &names)
    }

    /// Creates every missing directory along `names` (names as bytes: any a filesystem
    /// holds, UTF-8 or not) below directory `from`, and returns the last one's inode.
    pub fn mkdir_in(&self, from: u64, names: &[&[u8]]) -> Result<u64> {
        // (For messages only: made when one is needed, not for every file an import puts.)
        let path = || names.iter().map(|n| String::from_utf8_lossy(n)).collect::<Vec<_>>().join("/");
        let mut w = self.ns.locked();
        let mut ino = from;
        for &c in names {
            if c.is_empty() || c.contains(&b'/') || c == b"." || c == b".." {
                return Err(StoreError::InvalidPath(path()));
            }
            // (Not even into one an older warcfs made: the mount would hide what goes there.)
            refuse_reserved(ino, c)?;
            match self.index.lookup(ino, c)? {
                Some(child) => {
                    let inode = self.index.inode::<Inode>(child)?.ok_or_else(|| StoreError::NotFound(path()))?;
                    if inode.kind != InodeKind::Dir {
                        return Err(StoreError::NotADirectory(path()));
                    }
                    ino = child;
                }
                None => {
                    self.check_owns(ino, c)?;
                    let mut b = Batch::new();
                    let child = self.alloc(&mut w, &mut b, "ino")?;
                    let mut d = Inode::new(InodeKind::Dir, 0o755);
                    d.parent = ino;
                    b.put_inode(&self.index, child, &d);
                    b.put_dirent(&self.index, ino, c, child);
                    let mut parent = self.index.inode::<Inode>(ino)?.ok_or_else(|| StoreError::NotFound(path()))?;
                    parent.nlink += 1;
                    parent.mtime = Timestamp::now();
                    parent.ctime = parent.mtime;
                    b.put_inode(&self.index, ino, &parent);
                    self.write_batch(&mut w, b)?;
                    ino = child;
                }
            }
        }
        Ok(ino)
    }

    /// Stores `data` as the file `name` in directory `dir`, replacing a file of that name.
    /// The file's recipe, its chunks' refcounts and the directory entry commit together.
    pub fn put_file(&self, dir: u64, name: &[u8], data: &[u8], meta: FileMeta) -> Result<PutReport> {
        self.put_file_presplit(dir, name, data, Presplit::new(data), meta)
    }

    /// `put_file` with the first gzip members already found (see `Presplit`).
    pub fn put_file_presplit(&self, dir: u64, name: &[u8], data: &[u8], split: Presplit, meta: FileMeta) -> Result<PutReport> {
        self.put_file_windows(dir, name, data, split, super::ingest::WINDOWS, meta)
    }

    /// `put_file` from any source read a window at a time (a file read with `pread`: memory
    /// stays bounded whatever its size, and a file truncated meanwhile is a short read, not
    /// a SIGBUS), but for the commit, which is left to the next call (`before`) or to
    /// `commit_put`: an importer's files one after another, each file's commit made while
    /// the next one's first windows are split and proven instead of before they start (its
    /// index work is a few percent of an import, on one core). `before` is committed before
    /// any chunk of this file is looked up, so what is stored is what one file after
    /// another would store. `unchanged` is asked after the ingest: if the source changed
    /// while it was read, the file is an error and nothing of it is committed. Gives
    /// `before`'s commit (None only without a `before`) and this file, ingested; if
    /// `before`'s commit failed, this file is not ingested. The windows' buffers come from
    /// `spares` and go back to it, for the next file's (fresh buffers are fresh pages, each
    /// zeroed by the kernel as it is first touched).
    #[allow(clippy::too_many_arguments)]
    pub fn put_file_after<S: super::Source + ?Sized + Sync>(
        &self,
        mut before: Option<Ingest>,
        dir: u64,
        name: &[u8],
        src: &S,
        split: Presplit,
        meta: FileMeta,
        unchanged: impl FnOnce() -> bool,
        spares: &super::Spares,
    ) -> (Option<Result<PutReport>>, Result<Ingest>) {
        let mut committed: Option<Result<PutReport>> = None;
        // Made once, by the ingest as it starts or here if it stopped before that. In its own
        // unwind: a bug met by that commit is that file's error, not this one's.
        let mut commit_before = || {
            let Some(b) = before.take() else { return Ok(()) };
            let r = super::bug_as_error("commit", || self.commit_put(b));
            let failed = r.as_ref().err().map(|e| e.to_string());
            committed = Some(r);
            failed.map_or(Ok(()), |e| Err(StoreError::EarlierFailed(e)))
        };
        // Before the ingest, which may take minutes, not only at the commit.
        let ingested = self.check_new_name(dir, name).and_then(|()| self.ingest_after(&mut commit_before, src, split, super::ingest::WINDOWS, spares));
        if let Err(e) = commit_before() {
            return (committed, Err(e));
        }
        let this = ingested.and_then(|ingested| {
            if !unchanged() {
                return Err(StoreError::SourceChanged(String::from_utf8_lossy(name).into_owned()));
            }
            Ok(Ingest { dir, name: name.to_vec(), ingested, meta })
        });
        (committed, this)
    }

    /// Commits a file `put_file_after` ingested.
    pub fn commit_put(&self, p: Ingest) -> Result<PutReport> {
        let mut ns = self.ns.locked();
        self.commit_file(&mut ns, p.dir, &p.name, p.ingested, p.meta)
    }

    /// `put_file` ingesting `win` at a time (tests use tiny windows).
    pub(super) fn put_file_windows(&self, dir: u64, name: &[u8], data: &[u8], split: Presplit, win: Windows, meta: FileMeta) -> Result<PutReport> {
        let ingested = self.ingest_windows(data, split, win)?;
        let mut ns = self.ns.locked();
        self.commit_file(&mut ns, dir, name, ingested, meta)
    }

    pub(super) fn commit_file(&self, w: &mut Ns, dir: u64, name: &[u8], ing: Ingested, meta: FileMeta) -> Result<PutReport> {
        crate::failpoint::panic_at("commit");
        self.check_new_name(dir, name)?;
        let display = String::from_utf8_lossy(name).to_string();
        let mut b = Batch::new();
        let mut delta = RefDelta::default();
        let existing = self.index.lookup(dir, name)?;
        let (ino, mut inode) = match existing {
            Some(ino) => {
                let old = self.inode_or_missing(ino, &display)?;
                if old.kind == InodeKind::Dir {
                    return Err(StoreError::IsADirectory(display));
                }
                (ino, old)
            }
            None => (self.alloc(w, &mut b, "ino")?, Inode::new(InodeKind::File, meta.mode)),
        };
        if let Some(old) = inode.recipe.take() {
            self.drop_recipe(&mut b, &mut delta, &old)?;
        }
        let rid = self.alloc(w, &mut b, "recipe")?;
        self.add_recipe(&mut b, &mut delta, rid, &ing.pieces, &ing.piece_keys);
        inode.kind = InodeKind::File;
        inode.mode = meta.mode;
        inode.size = ing.size;
        inode.mtime = meta.mtime;
        inode.ctime = Timestamp::now();
        inode.stats = ing.stats;
        inode.recipe = Some(RecipeHead { id: rid, size: ing.size, piece_starts: ing.starts });
        b.put_inode(&self.index, ino, &inode);
        if existing.is_none() {
            b.put_dirent(&self.index, dir, name, ino);
        }
        self.note_captures(&mut b, &ing.captures)?;
        self.commit_with(w, b, delta, &ing.pending, ing.collisions, ing.dict)?;
        for note in &ing.notes {
            log::warn!("{display}: {note}");
        }
        Ok(PutReport { ino, size: ing.size, new_bytes: ing.new_bytes, stats: ing.stats })
    }

    pub fn put_symlink(&self, dir: u64, name: &[u8], target: &[u8]) -> Result<u64> {
        self.check_new_name(dir, name)?;
        let mut w = self.ns.locked();
        let display = String::from_utf8_lossy(name).to_string();
        if self.index.lookup(dir, name)?.is_some() {
            self.remove_entry(&mut w, dir, name, false, &display)?;
        }
        let mut b = Batch::new();
        let ino = self.alloc(&mut w, &mut b, "ino")?;
        let mut inode = Inode::new(InodeKind::Symlink, 0o777);
        inode.target = target.to_vec();
        inode.size = target.len() as u64;
        b.put_inode(&self.index, ino, &inode);
        b.put_dirent(&self.index, dir, name, ino);
        self.write_batch(&mut w, b)?;
        Ok(ino)
    }

    /// Removes the entry at `path` (a directory only if `recursive`).
    pub fn remove(&self, path: &str, recursive: bool) -> Result<()> {
        let comps = components(path)?;
        let Some((last, parents)) = comps.split_last() else {
            return Err(StoreError::InvalidPath(path.to_string()));
        };
        let dir = self.resolve(&parents.join("/"))?;
        let mut w = self.ns.locked();
        self.remove_entry(&mut w, dir, last.as_bytes(), recursive, path)
    }

    fn remove_entry(&self, w: &mut Ns, dir: u64, name: &[u8], recursive: bool, path: &str) -> Result<()> {
        self.check_owns(dir, path.as_bytes())?;
        let ino = self.index.lookup(dir, name)?.ok_or_else(|| StoreError::NotFound(path.to_string()))?;
        let inode = self.inode_or_missing(ino, path)?;
        if inode.kind == InodeKind::Dir {
            let children = self.index.dir_entries(ino)?;
            if !children.is_empty() && !recursive {
                return Err(if recursive { StoreError::NotEmpty(path.to_string()) } else { StoreError::IsADirectory(path.to_string()) });
            }
            if children.is_empty() && !recursive {
                return Err(StoreError::IsADirectory(path.to_string()));
            }
            for (child, _) in children {
                let sub = format!("{path}/{}", String::from_utf8_lossy(&child));
                self.remove_entry(w, ino, &child, true, &sub)?;
            }
        }
        let mut b = Batch::new();
        let mut delta = RefDelta::default();
        b.delete_dirent(&self.index, dir, name);
        let now = Timestamp::now();
        if let Some(mut parent) = self.index.inode::<Inode>(dir)? {
            if inode.kind == InodeKind::Dir {
                parent.nlink = parent.nlink.saturating_sub(1);
            }
            parent.mtime = now;
            parent.ctime = now;
            b.put_inode(&self.index, dir, &parent);
        }
        let remaining = if inode.kind == InodeKind::Dir { 0 } else { inode.nlink.saturating_sub(1) };
        if remaining == 0 {
            if let Some(head) = &inode.recipe {
                self.drop_recipe(&mut b, &mut delta, head)?;
            }
            b.delete_inode(&self.index, ino);
        } else {
            let mut inode = inode;
            inode.nlink = remaining;
            inode.ctime = now;
            b.put_inode(&self.index, ino, &inode);
        }
        self.commit(w, b, delta)
    }

    /// Every piece of a recipe, decoded.
    pub(super) fn load_pieces(&self, head: &RecipeHead) -> Result<Vec<Piece>> {
        (0..head.pieces()).map(|i| self.load_piece(head.id, i)).collect()
    }

    /// Every reference recipe `head` holds (`recipe::references`), and its pieces.
    pub(super) fn recipe_references(&self, head: &RecipeHead) -> Result<(Vec<Piece>, Vec<ChunkKey>)> {
        let pieces = self.load_pieces(head)?;
        let keys = (0..head.pieces()).map(|i| self.piece_key(head.id, i)).collect::<Result<Vec<_>>>()?;
        let refs = recipe::references(&pieces, &keys);
        Ok((pieces, refs))
    }

    /// The key of the chunk that holds piece `piece` of recipe `rid`.
    fn piece_key(&self, rid: u64, piece: u32) -> Result<ChunkKey> {
        self.index.recipe_piece(rid, piece)?.ok_or_else(|| StoreError::Recipe { rid, piece, what: "missing".into() })
    }

    pub(super) fn load_piece(&self, rid: u64, piece: u32) -> Result<Piece> {
        let key = self.piece_key(rid, piece)?;
        self.piece_in(rid, piece, &key)?.ok_or_else(|| StoreError::Recipe { rid, piece, what: format!("its chunk {} is missing", key.short()) })
    }

    /// Piece `piece` of recipe `rid`, held by chunk `key`; None if the index has no such
    /// chunk.
    pub(super) fn piece_in(&self, rid: u64, piece: u32, key: &ChunkKey) -> Result<Option<Piece>> {
        let Some(entry) = self.index.chunk(key)? else { return Ok(None) };
        let bytes = self.chunk_bytes(key, &entry)?;
        Piece::decode(&bytes).map(Some).map_err(|e| StoreError::Recipe { rid, piece, what: format!("undecodable: {e}") })
    }

    /// Adds recipe `rid` to `b`: its pieces, stored as the chunks `keys`, and a reference
    /// to every chunk it uses (`recipe::references`).
    pub(super) fn add_recipe(&self, b: &mut Batch, delta: &mut RefDelta, rid: u64, pieces: &[Piece], keys: &[ChunkKey]) {
        for (i, k) in keys.iter().enumerate() {
            b.put_recipe_piece(&self.index, rid, i as u32, k);
        }
        delta.add(recipe::references(pieces, keys), 1);
    }

    /// Removes recipe `head` in `b`, releasing what `add_recipe` referenced.
    pub(super) fn drop_recipe(&self, b: &mut Batch, delta: &mut RefDelta, head: &RecipeHead) -> Result<()> {
        let references = self.recipe_references(head)?.1;
        self.release_recipe(b, delta, head, references);
        Ok(())
    }

    /// `drop_recipe` with what the recipe references (`recipe_references`) read already:
    /// by a caller that reads it before taking the namespace lock.
    pub(super) fn release_recipe(&self, b: &mut Batch, delta: &mut RefDelta, head: &RecipeHead, references: Vec<ChunkKey>) {
        delta.add(references, -1);
        b.delete_recipe(&self.index, head.id, head.pieces());
    }

    /// A path of each of the inodes `wanted` that the tree reaches (the first the walk from
    /// the root finds), holding only those and the directories still to walk: fsck names a
    /// few thousand files at most, on a store of millions.
    pub fn paths_of(&self, wanted: &HashSet<u64>) -> Result<HashMap<u64, String>> {
        paths_in(&self.index, wanted)
    }
}

/// `Store::paths_of` in `index` (repair names files in the index it is building).
pub(super) fn paths_in(index: &Index, wanted: &HashSet<u64>) -> Result<HashMap<u64, String>> {
    let mut out: HashMap<u64, String> = HashMap::new();
    let mut stack = vec![(ROOT_INO, String::new())];
    while let Some((dir, prefix)) = stack.pop() {
        if out.len() == wanted.len() {
            break;
        }
        for (name, child) in index.dir_entries(dir)? {
            let path = format!("{prefix}/{}", String::from_utf8_lossy(&name));
            if wanted.contains(&child) {
                out.entry(child).or_insert_with(|| path.clone());
            }
            if let Some(inode) = index.inode::<Inode>(child)? {
                if inode.kind == InodeKind::Dir {
                    stack.push((child, path));
                }
            }
        }
    }
    Ok(out)
}
