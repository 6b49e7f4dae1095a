//! `/.warcfs/`: read-only files that tell what the store knows: `index.cdxj`, the CDXJ index
//! of every WARC in the store, and `resolved.cdxj`, that of `/.warcfs/resolved/`, each built
//! (sorted on disk) when the store has changed and kept in an unlinked file under
//! `STORE/cache/`. A build takes seconds on a large store, so it runs on a thread of its own,
//! one at a time per index, and the requests that need it are answered when it is done: the
//! mount's few request threads never wait for it.

use super::*;

/// A request's answer, given the index file once it is ready (or EIO if it could not be
/// built).
pub(super) type IndexReply = Box<dyn FnOnce(Result<(Arc<File>, u64), Errno>) + Send>;

/// The last `/.warcfs/index.cdxj` built (store generation, when, its bytes in an unlinked
/// file under `STORE/cache/`, on disk and gone with its last handle, and its length), and
/// the requests waiting for the next, each with the generation it asked at.
#[derive(Default)]
pub(super) struct IndexFile {
    last: Option<(u64, Instant, Arc<File>, u64)>,
    waiting: Vec<(u64, IndexReply)>,
    building: bool,
}

/// Which of `Inner::index_files` holds the index `ino`.
fn slot(ino: u64) -> usize {
    (ino == RESOLVED_INDEX_INO) as usize
}

/// The name of the index `ino` under `/.warcfs/`.
pub(super) fn name(ino: u64) -> &'static str {
    if ino == RESOLVED_INDEX_INO {
        "resolved.cdxj"
    } else {
        "index.cdxj"
    }
}

impl Inner {
    /// Hands `then` the current index `ino` (`/.warcfs/index.cdxj` or `resolved.cdxj`): at
    /// once if the one built last is of the store as it is (or under a second old, so that
    /// a busy store is not indexed again for every request), else once a build finishes.
    pub(super) fn with_index_file(self: &Arc<Self>, ino: u64, then: IndexReply) {
        let gen = self.store.generation();
        let mut st = self.index_files[slot(ino)].locked();
        if let Some((g, at, file, len)) = &st.last {
            if *g == gen || at.elapsed() < Duration::from_secs(1) {
                let current = (file.clone(), *len);
                drop(st);
                return then(Ok(current));
            }
        }
        st.waiting.push((gen, then));
        if st.building {
            return;
        }
        st.building = true;
        drop(st);
        let inner = self.clone();
        if let Err(e) = std::thread::Builder::new().name("index-cdxj".into()).spawn(move || inner.build_for_waiting(ino)) {
            log::error!("building /.warcfs/{}: no thread for it: {e}", name(ino));
            let waiting = {
                let mut st = self.index_files[slot(ino)].locked();
                st.building = false;
                std::mem::take(&mut st.waiting)
            };
            for (_, w) in waiting {
                w(Err(Errno::EIO));
            }
        }
    }

    /// Builds until every waiting request has an index of the store at least as new as the
    /// one it asked about, answering each as soon as it has. A failed build fails the
    /// requests waiting then (the next request tries again).
    fn build_for_waiting(&self, ino: u64) {
        loop {
            let gen = self.store.generation();
            let built = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.build_index_file(ino))) {
                Ok(Ok((file, len))) => Ok((Arc::new(file), len)),
                Ok(Err(e)) => {
                    log::error!("building /.warcfs/{}: {e}", name(ino));
                    Err(Errno::EIO)
                }
                Err(_) => {
                    log::error!("building /.warcfs/{}: a bug (a panic, above)", name(ino));
                    Err(Errno::EIO)
                }
            };
            let (ready, again) = {
                let mut st = self.index_files[slot(ino)].locked();
                if let Ok((file, len)) = &built {
                    st.last = Some((gen, Instant::now(), file.clone(), *len));
                }
                let (ready, later): (Vec<_>, Vec<_>) = std::mem::take(&mut st.waiting).into_iter().partition(|(g, _)| built.is_err() || *g <= gen);
                st.waiting = later;
                st.building = !st.waiting.is_empty();
                (ready, st.building)
            };
            for (_, w) in ready {
                // A bug in one answer must not leave the others (and every later request for
                // the index) waiting: `building` is already as it should be.
                let r = built.clone();
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || w(r))).is_err() {
                    log::error!("answering a request for /.warcfs/{}: a bug (a panic, above)", name(ino));
                }
            }
            if !again {
                return;
            }
        }
    }

    /// Writes the sorted CDXJ of every stored WARC (files still being written are left out
    /// until stored), or of every file of `/.warcfs/resolved/`, into an unlinked file,
    /// sorting in bounded memory. Only one runs at a time for each (`with_index_file`), so
    /// its scratch name is its own.
    fn build_index_file(&self, ino: u64) -> std::io::Result<(File, u64)> {
        crate::failpoint::hold("index_build");
        let dir = self.store.root().join("cache");
        fs::create_dir_all(&dir)?;
        let mut sorter = crate::extsort::LineSorter::new(&dir.join("runs"), crate::extsort::INDEX_RUN_BYTES)?;
        if ino == RESOLVED_INDEX_INO {
            let originals = self.originals().map_err(|e| std::io::Error::other(format!("the originals of revisits: {e:?} (logged above)")))?;
            self.store.resolved_cdxj_each(&originals, &mut |l| sorter.push(l)).map_err(std::io::Error::other)?;
        } else {
            self.store.cdxj_each("/", crate::store::StagedFiles::Skip, &mut |l| sorter.push(l)).map_err(std::io::Error::other)?;
        }
        let path = dir.join(format!("{}.building", name(ino)));
        let mut w = BufWriter::new(File::create(&path)?);
        let len = sorter.finish_into(&mut w)?;
        w.flush()?;
        drop(w);
        let file = File::open(&path)?;
        fs::remove_file(&path)?;
        Ok((file, len))
    }

    /// The attributes of the index `ino`, `len` bytes long.
    pub(super) fn index_attr(&self, ino: u64, len: u64) -> Result<FileAttr, Errno> {
        let mut attr = self.virtual_attr(ino)?;
        attr.kind = FileType::RegularFile;
        attr.perm = 0o444;
        attr.nlink = 1;
        attr.size = len;
        attr.blocks = len.div_ceil(512);
        Ok(attr)
    }

    /// The attributes of a virtual inode; for the index, all but its kind and size
    /// (`index_attr`).
    pub(super) fn virtual_attr(&self, ino: u64) -> Result<FileAttr, Errno> {
        let root = self.inode(crate::store::ROOT_INO)?;
        let mut attr = self.attr(ino, &root);
        attr.ino = INodeNo(ino);
        attr.perm = 0o555;
        attr.nlink = 2;
        attr.size = 0;
        Ok(attr)
    }
}

impl WarcFs {
    /// Hands `then` the attributes of the index `ino` once it is current.
    pub(super) fn with_index_attr(&self, ino: u64, then: impl FnOnce(Result<FileAttr, Errno>) + Send + 'static) {
        let inner = self.inner.clone();
        self.inner.with_index_file(ino, Box::new(move |r| then(r.and_then(|(_, len)| inner.index_attr(ino, len)))));
    }
}
