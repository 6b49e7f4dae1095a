//! `/.warcfs/wacz/`: every stored WACZ as a read-only directory of its entries, at the
//! WACZ's own path (`/.warcfs/wacz/crawls/x.wacz/archive/data.warc.gz`). Nothing is stored
//! for it: a stored entry reads as its range of the WACZ (the same members, rebuilt the
//! same way), a deflated one (`datapackage.json`, `index.idx`) inflated at open. pywb can
//! then name the WARCs inside a WACZ in its `archive_paths`, and `warcfs index` (and
//! `/.warcfs/index.cdxj`) give their records at these paths (`Store::cdxj_each`).
//!
//! Inode numbers: `VIEW | ino << 20 | node`, `ino` the store's inode of a directory (node 0:
//! its view) or of a WACZ (node 0: the WACZ's directory; others: the nodes of its
//! `EntryTree`). Directories list their subdirectories and the files named `.wacz`; a name
//! looked up is shown only if its file is a ZIP `format::zip` reads.

use super::*;
use super::data::with_reply_buffer;
use crate::store::{EntryTree, MAX_INFLATED};

pub(super) const WACZ_NAME: &[u8] = b"wacz";
pub(super) const WACZ_INO: u64 = u64::MAX - 3;
/// Bit 62 set, bit 63 clear: far above the store's inode numbers, below the other virtual
/// ones (`u64::MAX - k`).
const VIEW: u64 = 1 << 62;
const NODE_BITS: u32 = 20;

/// The store's inode and the node a view inode stands for.
pub(super) fn view_of(ino: u64) -> Option<(u64, usize)> {
    (ino >> 62 == 1).then_some(((ino & !VIEW) >> NODE_BITS, (ino & ((1 << NODE_BITS) - 1)) as usize))
}

/// The view inode of `node` of the store's inode `ino`, if both fit.
fn view_ino(ino: u64, node: usize) -> Option<u64> {
    if ino < 1 << (62 - NODE_BITS) && node < 1 << NODE_BITS {
        Some(VIEW | ino << NODE_BITS | node as u64)
    } else {
        None
    }
}

/// How a view file's handle reads.
pub(super) enum EntryRead {
    /// Bytes [at, at + len) of the stored file `head` is the recipe of.
    Range { head: Arc<RecipeHead>, at: u64, len: u64 },
    /// Inflated at open.
    Bytes(Arc<Vec<u8>>),
}

/// The trees of the WACZs looked at, by inode, with the recipe each was read from.
pub(super) type Trees = Mutex<HashMap<u64, (u64, Arc<EntryTree>)>>;
/// Trees kept at most (a few KB each).
const TREES: usize = 256;

fn is_wacz_name(name: &[u8]) -> bool {
    name.len() > 5 && name[name.len() - 5..].eq_ignore_ascii_case(b".wacz")
}

impl Inner {
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
        if ino == WACZ_INO {
            return self.dir_attr(ino);
        }
        let (sino, node) = view_of(ino).ok_or(Errno::ENOENT)?;
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
        let (sino, node) = if parent == WACZ_INO { (crate::store::ROOT_INO, 0) } else { view_of(parent).ok_or(Errno::ENOENT)? };
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
            return self.view_attr(view_ino(child, 0).ok_or(Errno::ENOENT)?);
        }
        let (_, tree) = self.tree(sino)?.ok_or(Errno::ENOENT)?;
        let child = tree.child(node, name).ok_or(Errno::ENOENT)?;
        self.view_attr(view_ino(sino, child).ok_or(Errno::ENOENT)?)
    }

    /// The listing of a view directory, "." and ".." first.
    pub(super) fn view_listing(&self, ino: u64) -> Result<Listing, Errno> {
        let (sino, node) = if ino == WACZ_INO { (crate::store::ROOT_INO, 0) } else { view_of(ino).ok_or(Errno::ENOENT)? };
        let inode = self.inode(sino)?;
        let mut out: Listing = vec![(ino, FileType::Directory, b".".to_vec()), (WACZ_INO, FileType::Directory, b"..".to_vec())];
        if inode.kind == InodeKind::Dir {
            for e in self.store.read_dir(sino).map_err(|e| errno(&e))? {
                let shown = match e.inode.kind {
                    InodeKind::Dir => true,
                    InodeKind::File => is_wacz_name(&e.name),
                    _ => false,
                };
                if let Some(v) = view_ino(e.ino, 0).filter(|_| shown) {
                    out.push((v, FileType::Directory, e.name));
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
            if let Some(v) = view_ino(sino, i) {
                out.push((v, kind, n.name.clone()));
            }
        }
        Ok(out)
    }

    /// How a handle of the view file `ino` reads.
    pub(super) fn view_open(&self, ino: u64) -> Result<EntryRead, Errno> {
        let (sino, node) = view_of(ino).ok_or(Errno::EISDIR)?;
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
            EntryRead::Bytes(b) => {
                let from = (offset.min(b.len() as u64)) as usize;
                reply.data(&b[from..(from + size as usize).min(b.len())]);
            }
            EntryRead::Range { head, at, len } => {
                let n = len.saturating_sub(offset).min(size as u64) as usize;
                with_reply_buffer(n, |buf| {
                    let mut done = 0;
                    while done < n {
                        match self.store.read_at(head, at + offset + done as u64, &mut buf[done..n]) {
                            Ok(0) => break,
                            Ok(k) => done += k,
                            Err(e) => {
                                log::error!("/.warcfs/wacz: reading {n} bytes at {} of a WACZ: {e}", at + offset);
                                return reply.error(errno(&e));
                            }
                        }
                    }
                    reply.data(&buf[..done])
                })
            }
        }
    }
}
