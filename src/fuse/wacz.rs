//! `/.warcfs/wacz/`: every stored WACZ as a read-only directory of its entries, at the
//! WACZ's own path (`/.warcfs/wacz/crawls/x.wacz/archive/data.warc.gz`). Nothing is stored
//! for it: a stored entry reads as its range of the WACZ (the same members, rebuilt the
//! same way), a deflated one (`datapackage.json`, `index.idx`) inflated at open. pywb can
//! then name the WARCs inside a WACZ in its `archive_paths`, and `warcfs index` (and
//! `/.warcfs/index.cdxj`) give their records at these paths (`Store::cdxj_each`).
//!
//! Inode numbers are handed out as nodes are met (`ViewInos`), from a range at the top that
//! no node of a store reaches (a node's inode numbers are `node << 48` and up, one by one),
//! below the other virtual inodes. Each stands for a store inode and a node: 0 the view of
//! a directory, or of a WACZ (its directory), others the nodes of its `EntryTree`.
//! Directories list their subdirectories and the files named `.wacz`; a name looked up is
//! shown only if its file is a ZIP `format::zip` reads.

use super::*;
use super::data::with_reply_buffer;
use super::resolved::{ResolvedRead, RESOLVED, RESOLVED_INO};
use crate::store::{is_wacz_name, EntryTree, MAX_INFLATED};

pub(super) const WACZ_NAME: &[u8] = b"wacz";
pub(super) const WACZ_INO: u64 = u64::MAX - 3;
/// The view's inode numbers: [FIRST, LAST]; `/.warcfs` and its files lie above.
const FIRST: u64 = u64::MAX - (1 << 40);
const LAST: u64 = u64::MAX - 16;
/// Numbers handed out at most before the table starts again (about 64 bytes each): a
/// number the kernel still holds then answers ENOENT, and a lookup by name gives a new one.
const MAX_INOS: usize = 1 << 18;

/// Whether `ino` is one of the views' (`/.warcfs/wacz/`'s or `/.warcfs/resolved/`'s),
/// their roots included.
pub(super) fn is_view(ino: u64) -> bool {
    (FIRST..=LAST).contains(&ino) || ino == WACZ_INO || ino == RESOLVED_INO
}

/// The view's inode numbers, each for a store inode and a node of it.
#[derive(Default)]
pub(super) struct ViewInos {
    of: HashMap<u64, (u64, usize)>,
    ino: HashMap<(u64, usize), u64>,
    next: u64,
}

/// How a view file's handle reads.
#[derive(Clone)]
pub(super) enum EntryRead {
    /// Bytes [at, at + len) of the stored file `head` is the recipe of.
    Range { head: Arc<RecipeHead>, at: u64, len: u64 },
    /// Inflated at open.
    Bytes(Arc<Vec<u8>>),
    /// A file of `/.warcfs/resolved/`.
    Resolved(Arc<ResolvedRead>),
}

/// The trees of the WACZs looked at, by inode, with the recipe each was read from.
pub(super) type Trees = Mutex<HashMap<u64, (u64, Arc<EntryTree>)>>;
/// Trees kept at most (a few KB each).
const TREES: usize = 256;

impl Inner {
    /// The store inode and node the view inode `ino` stands for.
    pub(super) fn view_of(&self, ino: u64) -> Option<(u64, usize)> {
        self.view_inos.locked().of.get(&ino).copied()
    }

    /// The view inode of `node` of the store inode `ino`.
    pub(super) fn view_ino(&self, ino: u64, node: usize) -> u64 {
        let mut t = self.view_inos.locked();
        if let Some(&v) = t.ino.get(&(ino, node)) {
            return v;
        }
        if t.of.len() >= MAX_INOS || t.next > LAST - FIRST {
            *t = ViewInos::default();
        }
        let v = FIRST + t.next;
        t.next += 1;
        t.of.insert(v, (ino, node));
        t.ino.insert((ino, node), v);
        v
    }

    /// The entry tree of the stored file `ino`, if it is a stored ZIP.
    fn tree(&self, ino: u64) -> Result<Option<(RecipeHead, Arc<EntryTree>)>, Errno> {
        let inode = self.inode(ino)?;
        let Some(head) = inode.recipe.filter(|_| inode.kind == InodeKind::File && !inode.staged && !self.staged.locked().contains_key(&ino)) else { return Ok(None) };
        if let Some((rid, t)) = self.wacz_trees.locked().get(&ino) {
            if *rid == head.id {
                return Ok(Some((head, t.clone())));
            }
        }
        let layout = self.store.zip_layout(&head).map_err(|e| {
            log::error!("reading the ZIP layout of inode {ino}: {e}");
            errno(&e)
        })?;
        let Some(layout) = layout else { return Ok(None) };
        let tree = Arc::new(EntryTree::new(layout));
        let mut trees = self.wacz_trees.locked();
        if trees.len() >= TREES {
            trees.clear();
        }
        trees.insert(ino, (head.id, tree.clone()));
        Ok(Some((head, tree)))
    }

    fn dir_attr(&self, ino: u64) -> Result<FileAttr, Errno> {
        let mut attr = self.virtual_attr(ino)?;
        attr.kind = FileType::Directory;
        Ok(attr)
    }

    /// The attributes of `/.warcfs/wacz` or of a view inode.
    pub(super) fn view_attr(&self, ino: u64) -> Result<FileAttr, Errno> {
        if ino == WACZ_INO || ino == RESOLVED_INO {
            return self.dir_attr(ino);
        }
        let (sino, node) = self.view_of(ino).ok_or(Errno::ENOENT)?;
        if node == RESOLVED {
            return self.resolved_attr(ino, sino);
        }
        let inode = self.inode(sino)?;
        if inode.kind == InodeKind::Dir && node == 0 {
            return self.dir_attr(ino);
        }
        let (_, tree) = self.tree(sino)?.ok_or(Errno::ENOENT)?;
        if node >= tree.nodes.len() {
            return Err(Errno::ENOENT);
        }
        let mut attr = self.attr(ino, &inode);
        attr.ino = INodeNo(ino);
        attr.perm = 0o444;
        attr.nlink = 1;
        match tree.entry(node) {
            Some(e) => {
                attr.kind = FileType::RegularFile;
                attr.size = e.size;
                attr.blocks = e.size.div_ceil(512);
            }
            None => {
                attr.kind = FileType::Directory;
                attr.perm = 0o555;
                attr.nlink = 2;
                attr.size = 0;
                attr.blocks = 0;
            }
        }
        Ok(attr)
    }

    /// `name` in the view directory `parent`.
    pub(super) fn view_lookup(&self, parent: u64, name: &[u8]) -> Result<FileAttr, Errno> {
        let (sino, node) = match parent {
            WACZ_INO => (crate::store::ROOT_INO, 0),
            RESOLVED_INO => (crate::store::ROOT_INO, RESOLVED),
            _ => self.view_of(parent).ok_or(Errno::ENOENT)?,
        };
        if node == RESOLVED {
            return self.resolved_lookup(sino, name);
        }
        let inode = self.inode(sino)?;
        if inode.kind == InodeKind::Dir {
            let child = self.store.lookup(sino, name).map_err(|e| errno(&e))?.ok_or(Errno::ENOENT)?;
            let c = self.inode(child)?;
            let shown = match c.kind {
                InodeKind::Dir => true,
                InodeKind::File => is_wacz_name(name) && self.tree(child)?.is_some(),
                _ => false,
            };
            if !shown {
                return Err(Errno::ENOENT);
            }
            return self.view_attr(self.view_ino(child, 0));
        }
        let (_, tree) = self.tree(sino)?.ok_or(Errno::ENOENT)?;
        let child = tree.child(node, name).ok_or(Errno::ENOENT)?;
        self.view_attr(self.view_ino(sino, child))
    }

    /// The listing of a view directory, "." and ".." first.
    pub(super) fn view_listing(&self, ino: u64) -> Result<Listing, Errno> {
        let (sino, node) = match ino {
            WACZ_INO => (crate::store::ROOT_INO, 0),
            RESOLVED_INO => (crate::store::ROOT_INO, RESOLVED),
            _ => self.view_of(ino).ok_or(Errno::ENOENT)?,
        };
        if node == RESOLVED {
            return self.resolved_listing(ino, sino);
        }
        let inode = self.inode(sino)?;
        let mut out: Listing = vec![(ino, FileType::Directory, b".".to_vec()), (WACZ_INO, FileType::Directory, b"..".to_vec())];
        if inode.kind == InodeKind::Dir {
            for e in self.store.read_dir(sino).map_err(|e| errno(&e))? {
                let shown = match e.inode.kind {
                    InodeKind::Dir => true,
                    InodeKind::File => is_wacz_name(&e.name),
                    _ => false,
                };
                if shown {
                    out.push((self.view_ino(e.ino, 0), FileType::Directory, e.name));
                }
            }
            return Ok(out);
        }
        let (_, tree) = self.tree(sino)?.ok_or(Errno::ENOENT)?;
        if tree.entry(node).is_some() {
            return Err(Errno::ENOTDIR);
        }
        for (i, n) in tree.children(node) {
            let kind = if n.entry.is_some() { FileType::RegularFile } else { FileType::Directory };
            out.push((self.view_ino(sino, i), kind, n.name.clone()));
        }
        Ok(out)
    }

    /// How a handle of the view file `ino` reads.
    pub(super) fn view_open(&self, ino: u64) -> Result<EntryRead, Errno> {
        let (sino, node) = self.view_of(ino).ok_or(Errno::EISDIR)?;
        if node == RESOLVED {
            return self.resolved_open(sino);
        }
        let (head, tree) = self.tree(sino)?.ok_or(Errno::ENOENT)?;
        let e = tree.entry(node).ok_or(Errno::EISDIR)?;
        if e.is_stored() {
            return Ok(EntryRead::Range { head: Arc::new(head), at: e.data_at, len: e.size });
        }
        if e.size > MAX_INFLATED {
            return Err(Errno::EFBIG);
        }
        let bytes = self.store.inflate_entry(&head, e).map_err(|err| {
            log::error!("/.warcfs/wacz: inode {sino}, entry {}: {err}", String::from_utf8_lossy(&e.name));
            Errno::EIO
        })?;
        Ok(EntryRead::Bytes(Arc::new(bytes)))
    }

    /// Up to `size` bytes at `offset` of an open view file.
    pub(super) fn view_read(&self, r: &EntryRead, offset: u64, size: u32, reply: ReplyData) {
        match r {
            EntryRead::Resolved(r) => self.resolved_read(r, offset, size, reply),
            EntryRead::Bytes(b) => {
                let from = (offset.min(b.len() as u64)) as usize;
                reply.data(&b[from..(from + size as usize).min(b.len())]);
            }
            EntryRead::Range { head, at, len } => {
                let n = len.saturating_sub(offset).min(size as u64) as usize;
                // (`read_at` fills the buffer, up to the end of the file.)
                with_reply_buffer(n, |buf| match self.store.read_at(head, at + offset, &mut buf[..n]) {
                    Ok(done) => reply.data(&buf[..done]),
                    Err(e) => {
                        log::error!("/.warcfs/wacz: reading {n} bytes at {} of a WACZ: {e}", at + offset);
                        reply.error(errno(&e))
                    }
                })
            }
        }
    }
}
