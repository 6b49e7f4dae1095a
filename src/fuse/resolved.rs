//! `/.warcfs/resolved/`: every stored WARC at its own path, each revisit record whose
//! original the store holds shown as the response it stands for (`store::read::resolved`),
//! and `/.warcfs/resolved.cdxj`, the index of these files (`virt`). Nothing is stored for
//! it. pywb pointed at this tree replays every capture without its revisit logic, whatever
//! collection its original is in.
//!
//! The originals' tables are built when the view is first asked about, and again when the
//! store has changed (at most once a second, as `/.warcfs/index.cdxj`); a build reads the
//! headers of every stored WARC, on the thread that asked, one build at a time (seconds on
//! a large store; other requests of the view use the tables before it meanwhile). Each
//! file's layout is kept with the tables it was made from (at most `LAYOUTS`), and the
//! resolved records read, for all readers together, up to `MADE_RECORDS` bytes. Inode
//! numbers are the view's (`wacz::ViewInos`), node `RESOLVED` of a directory or file.

use super::*;
use super::data::with_reply_buffer;
use super::wacz::EntryRead;
use crate::store::{is_warc_name, MadeRecords, Originals, ResolvedFile};

pub(super) const RESOLVED_NAME: &[u8] = b"resolved";
pub(super) const RESOLVED_INO: u64 = u64::MAX - 4;
pub(super) const RESOLVED_INDEX_NAME: &[u8] = b"resolved.cdxj";
pub(super) const RESOLVED_INDEX_INO: u64 = u64::MAX - 5;
/// The node a view inode of `/.warcfs/resolved/` stands for, whatever its store inode.
pub(super) const RESOLVED: usize = usize::MAX;
/// Layouts kept at most (a few hundred bytes per resolved record).
const LAYOUTS: usize = 64;
/// Bytes of resolved records kept for readers, all of them together (and the last one
/// made, whatever its size): enough for the records a few readers are in.
pub(super) const MADE_RECORDS: u64 = 16 << 20;

/// The originals' tables (the store generation they were built at, when; whether a build
/// runs), and the layouts made with them.
pub(super) struct ResolvedState {
    originals: Option<(u64, Instant, Arc<Originals>)>,
    building: bool,
    /// By inode: the recipe and the tables a layout was made of, and the layout.
    layouts: lru::LruCache<u64, (u64, Arc<Originals>, Arc<ResolvedFile>)>,
    /// The resolved records readers read, made once while kept.
    made: Arc<MadeRecords>,
}

impl Default for ResolvedState {
    fn default() -> ResolvedState {
        ResolvedState { originals: None, building: false, layouts: lru::LruCache::new(std::num::NonZeroUsize::new(LAYOUTS).expect("nonzero")), made: Arc::new(MadeRecords::new(MADE_RECORDS)) }
    }
}

/// An open file of the view: its layout.
pub(super) struct ResolvedRead {
    file: Arc<ResolvedFile>,
}

impl Inner {
    /// The originals' tables of the store as it is (or as it was under a second ago). One
    /// build at a time: while one runs, others use the tables before it (or, at the first
    /// build, wait for it).
    pub(super) fn originals(&self) -> Result<Arc<Originals>, Errno> {
        let gen = self.store.generation();
        loop {
            let mut st = self.resolved.locked();
            let current = st.originals.as_ref().filter(|(g, at, _)| *g == gen || at.elapsed() < Duration::from_secs(1)).map(|(_, _, o)| o.clone());
            if let Some(o) = current {
                return Ok(o);
            }
            if !st.building {
                st.building = true;
                break;
            }
            if let Some((_, _, o)) = &st.originals {
                return Ok(o.clone());
            }
            drop(st);
            std::thread::sleep(Duration::from_millis(20));
        }
        let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut files = Vec::new();
            self.store.each_file_under("/", &mut |name, ino, inode| {
                if let Some(head) = inode.recipe.as_ref().filter(|_| is_warc_name(name.as_bytes()) && !inode.staged) {
                    files.push((ino, head.clone()));
                }
                Ok(())
            })?;
            Originals::build(&self.store, &files, &crate::store::layout::cache(self.store.root()).join("originals"))
        }));
        let mut st = self.resolved.locked();
        st.building = false;
        let o = match built {
            Ok(Ok(o)) => Arc::new(o),
            Ok(Err(e)) => {
                log::error!("/.warcfs/resolved: finding the originals of revisits: {e}");
                return Err(errno(&e));
            }
            Err(_) => {
                log::error!("/.warcfs/resolved: finding the originals of revisits: a bug (a panic, above)");
                return Err(Errno::EIO);
            }
        };
        st.originals = Some((gen, Instant::now(), o.clone()));
        st.layouts.clear();
        Ok(o)
    }

    /// The resolved layout of the stored WARC `ino`, if it is one: one made with the tables
    /// in use.
    fn layout(&self, ino: u64) -> Result<Option<Arc<ResolvedFile>>, Errno> {
        let inode = self.inode(ino)?;
        let Some(head) = inode.recipe.filter(|_| inode.kind == InodeKind::File && !inode.staged && !self.staged.locked().contains_key(&ino)) else { return Ok(None) };
        let originals = self.originals()?;
        if let Some((rid, with, f)) = self.resolved.locked().layouts.get(&ino) {
            if *rid == head.id && Arc::ptr_eq(with, &originals) {
                return Ok(Some(f.clone()));
            }
        }
        let f = self.store.resolve_file(ino, &head, &originals, &mut |_| Ok(())).map_err(|e| {
            log::error!("/.warcfs/resolved: inode {ino}: {e}");
            errno(&e)
        })?;
        if f.unresolved > 0 {
            log::info!("/.warcfs/resolved: inode {ino}: {} of its {} revisits left as they are (no original in the store, or larger than {} MiB resolved)", f.unresolved, f.unresolved + f.resolved, crate::store::MAX_RESOLVED >> 20);
        }
        let f = Arc::new(f);
        let mut st = self.resolved.locked();
        st.layouts.put(ino, (head.id, originals, f.clone()));
        Ok(Some(f))
    }

    /// The attributes of the view of the store inode `sino`, as inode `ino`.
    pub(super) fn resolved_attr(&self, ino: u64, sino: u64) -> Result<FileAttr, Errno> {
        let inode = self.inode(sino)?;
        if inode.kind == InodeKind::Dir {
            let mut attr = self.virtual_attr(ino)?;
            attr.kind = FileType::Directory;
            return Ok(attr);
        }
        let mut attr = self.attr(ino, &inode);
        attr.ino = INodeNo(ino);
        let f = self.layout(sino)?.ok_or(Errno::ENOENT)?;
        attr.perm = 0o444;
        attr.nlink = 1;
        attr.size = f.size;
        attr.blocks = f.size.div_ceil(512);
        Ok(attr)
    }

    /// `name` in the view of the store directory `sino`: its subdirectories and its stored
    /// WARCs.
    pub(super) fn resolved_lookup(&self, sino: u64, name: &[u8]) -> Result<FileAttr, Errno> {
        let child = self.store.lookup(sino, name).map_err(|e| errno(&e))?.ok_or(Errno::ENOENT)?;
        let c = self.inode(child)?;
        let shown = match c.kind {
            InodeKind::Dir => true,
            InodeKind::File => is_warc_name(name),
            _ => false,
        };
        if !shown {
            return Err(Errno::ENOENT);
        }
        self.resolved_attr(self.view_ino(child, RESOLVED), child)
    }

    /// The listing of the view of the store directory `sino` (as inode `ino`).
    pub(super) fn resolved_listing(&self, ino: u64, sino: u64) -> Result<Listing, Errno> {
        if self.inode(sino)?.kind != InodeKind::Dir {
            return Err(Errno::ENOTDIR);
        }
        let parent = if ino == RESOLVED_INO { CTL_INO } else { RESOLVED_INO };
        let mut out: Listing = vec![(ino, FileType::Directory, b".".to_vec()), (parent, FileType::Directory, b"..".to_vec())];
        for e in self.store.read_dir(sino).map_err(|e| errno(&e))? {
            let kind = match e.inode.kind {
                InodeKind::Dir => FileType::Directory,
                InodeKind::File if is_warc_name(&e.name) => FileType::RegularFile,
                _ => continue,
            };
            out.push((self.view_ino(e.ino, RESOLVED), kind, e.name));
        }
        Ok(out)
    }

    /// How a handle of the view of the stored WARC `sino` reads.
    pub(super) fn resolved_open(&self, sino: u64) -> Result<EntryRead, Errno> {
        let file = self.layout(sino)?.ok_or(Errno::EISDIR)?;
        Ok(EntryRead::Resolved(Arc::new(ResolvedRead { file })))
    }

    /// Up to `size` bytes at `offset` of an open file of the view.
    pub(super) fn resolved_read(&self, r: &ResolvedRead, offset: u64, size: u32, reply: ReplyData) {
        let n = r.file.size.saturating_sub(offset).min(size as u64) as usize;
        let made = self.resolved.locked().made.clone();
        with_reply_buffer(n, |buf| match r.file.read_at(&self.store, offset, &mut buf[..n], &made) {
            Ok(done) => reply.data(&buf[..done]),
            Err(e) => {
                log::error!("/.warcfs/resolved: reading {n} bytes at {offset} of the view of recipe {}: {e}", r.file.head.id);
                reply.error(errno(&e))
            }
        })
    }
}
