//! Snapshots: a complete, consistent copy of a store as of now, for backups.
//!
//! DEST gets a RocksDB checkpoint of the index and the sealed packs, hard-linked where DEST is
//! on the same filesystem (sealed packs never change, so sharing their inodes is safe and
//! `gc` deleting a pack in STORE cannot touch DEST's link). Staged files (written through a
//! mount, not yet ingested) are copied; the copy ingests them when it is first opened by a
//! mount. Run again on the same DEST, a snapshot updates it: new packs are linked, packs the
//! new index no longer needs are removed, the index is replaced atomically. So `rsync -a
//! --delete DEST/ elsewhere` after each snapshot moves only new packs and the index.

use std::fs;
use std::io;
use std::path::Path;

use crate::store::{io_at, read_config, Result, Store, StoreError};
use crate::LockExt;
use crate::pack;

#[derive(Clone, Debug, Default)]
pub struct SnapshotReport {
    pub packs_linked: u64,
    pub packs_copied: u64,
    pub packs_kept: u64,
    pub packs_removed: u64,
    pub staged_files: u64,
}

/// Hard-links `src` to `dst`, or copies it when they are on different filesystems.
fn link_or_copy(src: &Path, dst: &Path) -> io::Result<bool> {
    match crate::disk::hard_link(src, dst) {
        Ok(()) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) || e.kind() == io::ErrorKind::PermissionDenied => {
            let tmp = dst.with_extension("part");
            crate::disk::copy(src, &tmp)?;
            crate::disk::sync_all(&fs::File::open(&tmp)?)?;
            crate::disk::rename(&tmp, dst)?;
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

impl Store {
    /// Makes `dest` a complete store as of now (see the module documentation).
    pub fn snapshot(&self, dest: &Path) -> Result<SnapshotReport> {
        if let Some(url) = &self.config.backend {
            // The bucket is the copy that counts; a node is rebuilt from it (`init --backend`).
            return Err(StoreError::Remote {
                url: url.clone(),
                err: std::io::Error::other("snapshot copies a local store; this store's packs are in the object store: back up the bucket (its packs and warcfs.json) instead, and make a node from it again with `warcfs init STORE --backend URL`"),
            });
        }
        if crate::store::layout::config(dest).exists() {
            let theirs = read_config(&crate::store::layout::config(dest))?;
            if theirs != self.config {
                return Err(StoreError::Format { path: dest.to_path_buf(), found: "a store with other settings".into() });
            }
        } else if dest.exists() && fs::read_dir(dest).map_err(io_at(dest))?.next().is_some() {
            return Err(StoreError::NotAStore(dest.to_path_buf()));
        } else {
            // The config first: from now on DEST is a store that the next snapshot completes.
            crate::disk::create_dir_all(dest).map_err(io_at(dest))?;
            crate::disk::sync_parent(dest).map_err(io_at(dest))?;
            let cfg = serde_json::to_vec_pretty(&self.config).expect("config serialises");
            pack::write_file_atomic(&crate::store::layout::config(dest), &cfg).map_err(io_at(dest))?;
        }
        for d in crate::store::layout::DIRS {
            crate::disk::create_dir_all(&dest.join(d)).map_err(io_at(dest))?;
        }
        // Index copies a killed snapshot left behind (by any process id).
        for e in fs::read_dir(dest).map_err(io_at(dest))?.flatten() {
            if e.file_name().to_str().is_some_and(|n| n.starts_with("index.new-")) {
                fs::remove_dir_all(e.path()).map_err(io_at(&e.path()))?;
            }
        }
        let mut rep = SnapshotReport::default();
        // Holding the writer lock: nothing commits while the index and packs are captured.
        let _ns = self.ns.locked();
        let mut w = self.writer.locked();
        self.seal_open(&mut w)?;
        // The metadata log's records too: the copy's index points at them.
        self.seal_journal(&mut self.journal.locked())?;
        let new_index = dest.join(format!("index.new-{}", std::process::id()));
        if new_index.exists() {
            fs::remove_dir_all(&new_index).map_err(io_at(&new_index))?;
        }
        self.index.checkpoint(&new_index)?;
        let src_packs = crate::store::layout::packs(&self.root);
        let dst_packs = crate::store::layout::packs(dest);
        let mut live = std::collections::HashSet::new();
        for e in fs::read_dir(&src_packs).map_err(io_at(&src_packs))? {
            let e = e.map_err(io_at(&src_packs))?;
            let name = e.file_name();
            if name.to_str().and_then(pack::parse_pack_name).is_none() {
                continue;
            }
            live.insert(name.clone());
            let target = dst_packs.join(&name);
            if target.exists() {
                rep.packs_kept += 1;
            } else if link_or_copy(&e.path(), &target).map_err(io_at(&target))? {
                rep.packs_linked += 1;
            } else {
                rep.packs_copied += 1;
            }
        }
        // The new links must survive a power loss before an index points at them.
        pack::sync_dir(&dst_packs).map_err(io_at(&dst_packs))?;
        // Staged bytes can still change; copy them as they are now.
        let dst_staging = crate::store::layout::staging(dest);
        for e in fs::read_dir(&dst_staging).map_err(io_at(&dst_staging))?.flatten() {
            let _ = crate::disk::remove_file(&e.path());
        }
        let src_staging = crate::store::layout::staging(&self.root);
        if let Ok(rd) = fs::read_dir(&src_staging) {
            for e in rd.flatten() {
                let target = dst_staging.join(e.file_name());
                crate::disk::copy(&e.path(), &target).and_then(|_| crate::disk::sync_all(&fs::File::open(&target)?)).map_err(io_at(&target))?;
                rep.staged_files += 1;
            }
        }
        pack::sync_dir(&dst_staging).map_err(io_at(&dst_staging))?;
        drop(w);
        // Swap the index in, in one step (a crash leaves the old index or the new one, never
        // none), then drop packs the new index cannot reference.
        let index = crate::store::layout::index(dest);
        let old = dest.join("index.old");
        if old.exists() {
            fs::remove_dir_all(&old).map_err(io_at(&old))?;
        }
        crate::failpoint::crash_at("snapshot_index_copied");
        if index.exists() {
            match exchange(&new_index, &index) {
                Ok(()) => {
                    pack::sync_dir(dest).map_err(io_at(dest))?;
                    crate::failpoint::crash_at("snapshot_swapped");
                    fs::remove_dir_all(&new_index).map_err(io_at(&new_index))?;
                }
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) || e.raw_os_error() == Some(libc::ENOSYS) => {
                    // No atomic exchange on this filesystem: aside, then in. A crash between
                    // leaves no index, which every command refuses and `repair index`
                    // rebuilds from DEST's packs.
                    crate::disk::rename(&index, &old).map_err(io_at(&index))?;
                    crate::disk::rename(&new_index, &index).map_err(io_at(&index))?;
                    pack::sync_dir(dest).map_err(io_at(dest))?;
                    fs::remove_dir_all(&old).map_err(io_at(&old))?;
                }
                Err(e) => return Err(StoreError::Io { path: index, err: e }),
            }
        } else {
            crate::disk::rename(&new_index, &index).map_err(io_at(&index))?;
            pack::sync_dir(dest).map_err(io_at(dest))?;
        }
        for e in fs::read_dir(&dst_packs).map_err(io_at(&dst_packs))?.flatten() {
            if !live.contains(&e.file_name()) {
                crate::disk::remove_file(&e.path()).map_err(io_at(&dst_packs))?;
                rep.packs_removed += 1;
            }
        }
        pack::sync_dir(dest).map_err(io_at(dest))?;
        Ok(rep)
    }
}

/// Swaps two paths atomically (`renameat2` with `RENAME_EXCHANGE`: Linux 3.15, on ext4,
/// xfs, btrfs, tmpfs and most others).
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    crate::disk::exchange(a, b)
}
