//! Namespace operations by inode number, as a POSIX filesystem needs them: create, link,
//! unlink (with orphans kept while open), rename, attribute changes, and replacing a file's
//! content with freshly ingested bytes. Each is one atomic index batch.

use super::ingest::Ingested;
use super::namespace::{Inode, InodeKind, PutReport, Timestamp, ROOT_INO};
use crate::recipe::RefDelta;
use super::{Result, Store, StoreError};
use crate::LockExt;
use crate::index::Batch;
use crate::recipe::RecipeHead;

/// A file's new content, ingested and ready to commit. Its chunks are in packs but not in
/// the index; dropping it abandons them (pack bytes that `gc` reclaims). Only one ingest
/// should be prepared at a time, or the two cannot dedup against each other.
pub struct Prepared<'a> {
    store: &'a Store,
    ing: Ingested,
}

fn name_str(name: &[u8]) -> String {
    String::from_utf8_lossy(name).to_string()
}

impl Store {
    fn get(&self, ino: u64) -> Result<Inode> {
        self.index.inode(ino)?.ok_or_else(|| StoreError::NotFound(format!("<inode {ino}>")))
    }

    /// Creates `name` in `parent`; `inode` gives kind, mode, owner and symlink target.
    pub fn create_node(&self, parent: u64, name: &[u8], mut inode: Inode) -> Result<(u64, Inode)> {
        self.check_new_name(parent, name)?;
        let mut w = self.ns.locked();
        let mut dir = self.get(parent)?;
        if dir.kind != InodeKind::Dir {
            return Err(StoreError::NotADirectory(name_str(name)));
        }
        if self.index.lookup(parent, name)?.is_some() {
            return Err(StoreError::Exists(name_str(name)));
        }
        let mut b = Batch::new();
        let ino = self.alloc(&mut w, &mut b, "ino")?;
        let now = Timestamp::now();
        inode.ctime = now;
        b.put_inode(&self.index, ino, &inode);
        b.put_dirent(&self.index, parent, name, ino);
        if inode.kind == InodeKind::Dir {
            dir.nlink += 1;
            inode.parent = parent;
        }
        dir.mtime = now;
        dir.ctime = now;
        b.put_inode(&self.index, parent, &dir);
        self.write_batch(&mut w, b)?;
        Ok((ino, inode))
    }

    /// Adds a hard link to `ino` as `name` in `parent`.
    pub fn link(&self, ino: u64, parent: u64, name: &[u8]) -> Result<Inode> {
        self.check_new_name(parent, name)?;
        self.check_owns(ino, name)?;
        let mut w = self.ns.locked();
        let mut inode = self.get(ino)?;
        if inode.kind == InodeKind::Dir {
            return Err(StoreError::IsADirectory(name_str(name)));
        }
        if self.index.lookup(parent, name)?.is_some() {
            return Err(StoreError::Exists(name_str(name)));
        }
        let mut dir = self.get(parent)?;
        let now = Timestamp::now();
        inode.nlink += 1;
        inode.ctime = now;
        dir.mtime = now;
        dir.ctime = now;
        let mut b = Batch::new();
        b.put_inode(&self.index, ino, &inode);
        b.put_inode(&self.index, parent, &dir);
        b.put_dirent(&self.index, parent, name, ino);
        self.write_batch(&mut w, b)?;
        Ok(inode)
    }

    /// Drops one link of `victim` inside batch `b`. When the last link goes, the inode and its
    /// recipe go too, unless `keep_open(ino)` says it is still open: then it stays as an
    /// orphan (nlink 0) until `drop_orphan`.
    fn drop_link(&self, b: &mut Batch, delta: &mut RefDelta, ino: u64, mut inode: Inode, keep_open: &dyn Fn(u64) -> bool) -> Result<()> {
        let now = Timestamp::now();
        inode.nlink = if inode.kind == InodeKind::Dir { 0 } else { inode.nlink.saturating_sub(1) };
        inode.ctime = now;
        if inode.nlink > 0 || keep_open(ino) {
            b.put_inode(&self.index, ino, &inode);
            return Ok(());
        }
        if let Some(head) = &inode.recipe {
            self.drop_recipe(b, delta, head)?;
        }
        b.delete_inode(&self.index, ino);
        Ok(())
    }

    /// Removes the entry `name` of `parent`: a file or symlink (`dir == false`) or an empty
    /// directory (`dir == true`). Returns the inode number removed.
    pub fn unlink_entry(&self, parent: u64, name: &[u8], dir: bool, keep_open: &dyn Fn(u64) -> bool) -> Result<u64> {
        self.check_owns(parent, name)?;
        let mut w = self.ns.locked();
        let ino = self.index.lookup(parent, name)?.ok_or_else(|| StoreError::NotFound(name_str(name)))?;
        let inode = self.get(ino)?;
        match (dir, inode.kind == InodeKind::Dir) {
            (false, true) => return Err(StoreError::IsADirectory(name_str(name))),
            (true, false) => return Err(StoreError::NotADirectory(name_str(name))),
            (true, true) if !self.index.dir_entries(ino)?.is_empty() => return Err(StoreError::NotEmpty(name_str(name))),
            _ => {}
        }
        let mut b = Batch::new();
        let mut delta = RefDelta::default();
        let mut pdir = self.get(parent)?;
        let now = Timestamp::now();
        if dir {
            pdir.nlink = pdir.nlink.saturating_sub(1);
        }
        pdir.mtime = now;
        pdir.ctime = now;
        b.put_inode(&self.index, parent, &pdir);
        b.delete_dirent(&self.index, parent, name);
        self.drop_link(&mut b, &mut delta, ino, inode, keep_open)?;
        self.commit(&mut w, b, delta)?;
        Ok(ino)
    }

    /// Deletes an orphan (unlinked while open) once its last handle closes.
    pub fn drop_orphan(&self, ino: u64) -> Result<()> {
        self.check_owns_inode(ino)?;
        let mut w = self.ns.locked();
        let Some(inode) = self.index.inode::<Inode>(ino)? else { return Ok(()) };
        if inode.nlink > 0 {
            return Ok(());
        }
        let mut b = Batch::new();
        let mut delta = RefDelta::default();
        if let Some(head) = &inode.recipe {
            self.drop_recipe(&mut b, &mut delta, head)?;
        }
        b.delete_inode(&self.index, ino);
        self.commit(&mut w, b, delta)
    }

    /// Every inode left with no links (a crash while it was open), and every staged inode.
    pub fn orphans_and_staged(&self) -> Result<(Vec<u64>, Vec<u64>)> {
        let (mut orphans, mut staged) = (Vec::new(), Vec::new());
        self.index.for_each_inode(|ino, inode: Inode| {
            // Another node's (a shared store): that node's to drop or to ingest.
            if !self.owns(ino) {
                return Ok(());
            }
            if ino != ROOT_INO && inode.nlink == 0 {
                orphans.push(ino);
            } else if inode.staged {
                staged.push(ino);
            }
            Ok(())
        })?;
        Ok((orphans, staged))
    }

    /// Moves `name` in `parent` to `newname` in `newparent`, replacing a compatible target
    /// unless `noreplace`.
    pub fn rename(&self, parent: u64, name: &[u8], newparent: u64, newname: &[u8], noreplace: bool, keep_open: &dyn Fn(u64) -> bool) -> Result<()> {
        self.check_owns(parent, name)?;
        self.check_new_name(newparent, newname)?;
        let mut w = self.ns.locked();
        let ino = self.index.lookup(parent, name)?.ok_or_else(|| StoreError::NotFound(name_str(name)))?;
        let mut inode = self.get(ino)?;
        let is_dir = inode.kind == InodeKind::Dir;
        if is_dir {
            // A directory cannot move below itself.
            let mut up = newparent;
            while up != ROOT_INO && up != 0 {
                if up == ino {
                    return Err(StoreError::InvalidPath(name_str(newname)));
                }
                up = self.get(up)?.parent;
            }
        }
        let mut b = Batch::new();
        let mut delta = RefDelta::default();
        let now = Timestamp::now();
        let mut target_was_dir = false;
        if let Some(target) = self.index.lookup(newparent, newname)? {
            if target == ino {
                return Ok(());
            }
            if noreplace {
                return Err(StoreError::Exists(name_str(newname)));
            }
            let t = self.get(target)?;
            target_was_dir = t.kind == InodeKind::Dir;
            match (is_dir, target_was_dir) {
                (true, false) => return Err(StoreError::NotADirectory(name_str(newname))),
                (false, true) => return Err(StoreError::IsADirectory(name_str(newname))),
                (true, true) if !self.index.dir_entries(target)?.is_empty() => return Err(StoreError::NotEmpty(name_str(newname))),
                _ => {}
            }
            self.drop_link(&mut b, &mut delta, target, t, keep_open)?;
        }
        b.delete_dirent(&self.index, parent, name);
        b.put_dirent(&self.index, newparent, newname, ino);
        let mut p = self.get(parent)?;
        p.mtime = now;
        p.ctime = now;
        if parent == newparent {
            if target_was_dir {
                p.nlink = p.nlink.saturating_sub(1);
            }
        } else {
            let mut np = self.get(newparent)?;
            if target_was_dir {
                np.nlink = np.nlink.saturating_sub(1);
            }
            if is_dir {
                p.nlink = p.nlink.saturating_sub(1);
                np.nlink += 1;
            }
            np.mtime = now;
            np.ctime = now;
            b.put_inode(&self.index, newparent, &np);
        }
        b.put_inode(&self.index, parent, &p);
        inode.ctime = now;
        if is_dir {
            inode.parent = newparent;
        }
        b.put_inode(&self.index, ino, &inode);
        self.commit(&mut w, b, delta)
    }

    /// Ingests `src` as the next content of a file; commit with `Prepared::commit_into`.
    pub fn prepare<S: super::Source + ?Sized + Sync>(&self, src: &S) -> Result<Prepared<'_>> {
        let ing = self.ingest(src)?;
        Ok(Prepared { store: self, ing })
    }

    /// The recipe of a file's committed content, if any.
    pub fn head(&self, ino: u64) -> Result<Option<RecipeHead>> {
        Ok(self.index.inode::<Inode>(ino)?.and_then(|i| i.recipe))
    }
}

impl Prepared<'_> {
    pub fn size(&self) -> u64 {
        self.ing.size
    }

    /// Makes the prepared bytes the content of inode `ino` and clears its staged flag, in one
    /// batch with the refcount changes. None if the inode no longer exists.
    pub fn commit_into(self, ino: u64) -> Result<Option<PutReport>> {
        let s = self.store;
        let mut w = s.ns.locked();
        let Some(mut inode) = s.index.inode::<Inode>(ino)? else { return Ok(None) };
        let mut b = Batch::new();
        let mut delta = RefDelta::default();
        if let Some(old) = inode.recipe.take() {
            s.drop_recipe(&mut b, &mut delta, &old)?;
        }
        let rid = s.alloc(&mut w, &mut b, "recipe")?;
        s.add_recipe(&mut b, &mut delta, rid, &self.ing.pieces, &self.ing.piece_keys);
        let ing = self.ing;
        inode.size = ing.size;
        inode.stats = ing.stats;
        inode.staged = false;
        inode.recipe = Some(RecipeHead { id: rid, size: ing.size, piece_starts: ing.starts });
        b.put_inode(&s.index, ino, &inode);
        s.note_captures(&mut b, &ing.captures)?;
        s.commit_with(&mut w, b, delta, &ing.pending, ing.collisions, ing.dict)?;
        Ok(Some(PutReport { ino, size: ing.size, new_bytes: ing.new_bytes, stats: ing.stats }))
    }
}

/// How much of one file's storage is its own.
#[derive(Clone, Copy, Debug, Default)]
pub struct FileUsage {
    pub logical_bytes: u64,
    /// Pack bytes of chunks no other file references.
    pub own_stored_bytes: u64,
    /// Share (0..1) of the file's chunk bytes that other files reference too.
    pub duplicate_share: f64,
    pub records: u64,
}

impl Store {
    /// Storage figures of one stored file (for `user.warcfs.*` attributes).
    pub fn file_usage(&self, ino: u64) -> Result<FileUsage> {
        let inode = self.get(ino)?;
        let mut u = FileUsage { logical_bytes: inode.size, records: inode.stats.records, ..FileUsage::default() };
        let Some(head) = &inode.recipe else { return Ok(u) };
        let (mut shared, mut total) = (0u64, 0u64);
        for k in crate::recipe::distinct_keys(&self.load_pieces(head)?) {
            let Some(e) = self.index.chunk(&k)? else { continue };
            total += e.raw_len as u64;
            if e.refs > 1 {
                shared += e.raw_len as u64;
            } else {
                u.own_stored_bytes += e.stored_len as u64 + crate::pack::BLOB_HEADER_LEN as u64;
            }
        }
        u.duplicate_share = if total > 0 { shared as f64 / total as f64 } else { 0.0 };
        Ok(u)
    }
}

impl Store {
    /// Changes some attributes of an inode atomically with respect to every other inode
    /// change (a background ingest committing new content included): `f` sees the current
    /// record and edits only what it means to change. An `Err` from `f` writes nothing.
    pub fn update_inode<E>(&self, ino: u64, f: impl FnOnce(&mut Inode) -> std::result::Result<(), E>) -> Result<std::result::Result<Inode, E>> {
        self.check_owns_inode(ino)?;
        let mut ns = self.ns.locked();
        let mut inode = self.get(ino)?;
        if let Err(e) = f(&mut inode) {
            return Ok(Err(e));
        }
        let mut b = Batch::new();
        b.put_inode(&self.index, ino, &inode);
        self.write_batch(&mut ns, b)?;
        Ok(Ok(inode))
    }
}
