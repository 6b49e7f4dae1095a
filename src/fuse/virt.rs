//! `/.warcfs/`: read-only files that tell what the store knows. Today `index.cdxj`, the CDXJ
//! index of every WARC in the store, built (sorted on disk) when the store has changed and
//! kept in an unlinked file under `STORE/cache/`.

use super::*;

impl Inner {
    /// The current `/.warcfs/index.cdxj`.
    pub(super) fn index_file(&self) -> Result<(Arc<File>, u64), Errno> {
        let mut cache = self.index_file.locked();
        let gen = self.store.generation();
        if let Some((g, at, file, len)) = cache.as_ref() {
            if *g == gen || at.elapsed() < Duration::from_secs(1) {
                return Ok((file.clone(), *len));
            }
        }
        let (file, len) = self.build_index_file().map_err(|e| {
            log::error!("building /.warcfs/index.cdxj: {e}");
            Errno::EIO
        })?;
        let file = Arc::new(file);
        *cache = Some((gen, std::time::Instant::now(), file.clone(), len));
        Ok((file, len))
    }

    /// Writes the sorted CDXJ of every stored WARC (files still being written are left out
    /// until stored) into an unlinked file, sorting in bounded memory.
    pub(super) fn build_index_file(&self) -> std::io::Result<(File, u64)> {
        let dir = self.store.root().join("cache");
        fs::create_dir_all(&dir)?;
        let mut sorter = crate::extsort::LineSorter::new(&dir.join("runs"), crate::extsort::INDEX_RUN_BYTES)?;
        self.store.cdxj_each("/", crate::store::StagedFiles::Skip, &mut |l| sorter.push(l)).map_err(std::io::Error::other)?;
        let path = dir.join("index.cdxj.building");
        let mut w = BufWriter::new(File::create(&path)?);
        let len = sorter.finish_into(&mut w)?;
        w.flush()?;
        drop(w);
        let file = File::open(&path)?;
        fs::remove_file(&path)?;
        Ok((file, len))
    }

    pub(super) fn virtual_attr(&self, ino: u64) -> Result<FileAttr, Errno> {
        let root = self.inode(crate::store::ROOT_INO)?;
        let mut attr = self.attr(ino, &root);
        attr.ino = INodeNo(ino);
        if ino == INDEX_INO {
            attr.kind = FileType::RegularFile;
            attr.perm = 0o444;
            attr.nlink = 1;
            attr.size = self.index_file()?.1;
            attr.blocks = attr.size.div_ceil(512);
        } else {
            attr.perm = 0o555;
            attr.nlink = 2;
            attr.size = 0;
        }
        Ok(attr)
    }
}
