//! How a store reaches its bucket (`crate::bucket`): connecting to the back end its
//! settings name, this node's cache of pack ranges, the first id of this node's range, the
//! uploads of its sealed packs, and the index key that says which bucket listing the index
//! reflects.

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::{io_at, Config, Result, Store, StoreError};
use crate::bucket::client::{Remote, RemotePacks, DEFAULT_CACHE};
use crate::bucket::PackList;
use crate::LockExt;

/// Index meta key: a digest of the bucket's packs (ids and sizes, with the packs waiting
/// here) as of this node's last write. If the bucket holds other packs when the node opens
/// the store to write, another node wrote (or gc'ed) since, and this node's index is
/// rebuilt from the bucket first: a writer must never work from a stale index (its gc would
/// take chunks the other node's files use).
pub(crate) const SIGNATURE: &str = "bucket_signature";

pub(crate) fn remote_err(url: &str) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |err| StoreError::Remote { url: url.to_string(), err }
}

/// The first pack id of this node's range.
pub(crate) fn node_base(config: &Config) -> u64 {
    (config.node.unwrap_or(0) as u64) << 48
}

fn connect(config: &Config) -> Result<Option<Remote>> {
    let Some(url) = &config.backend else { return Ok(None) };
    Remote::connect(url).map(Some).map_err(remote_err(url))
}

/// The reader of this store's packs: those on this disk, and those in `bucket` if it has one.
/// `config` says how its blobs are shaped (`pack::packed_frame`).
pub(crate) fn pack_reader(root: &Path, config: &Config, bucket: Option<&Arc<RemotePacks>>) -> crate::pack::PackReader {
    let (packs, tmp) = (super::layout::packs(root), super::layout::packs_tmp(root));
    let reader = match bucket {
        Some(r) => crate::pack::PackReader::with_remote(packs, tmp, r.clone()),
        None => crate::pack::PackReader::new(packs, tmp),
    };
    reader.packing_headers(super::packed_headers(config.version))
}

/// The pack cache of a process that owns the store: `cache/packs/`, emptied.
pub(super) fn remote_packs(root: &Path, config: &Config) -> Result<Option<Arc<RemotePacks>>> {
    let Some(remote) = connect(config)? else { return Ok(None) };
    let dir = root.join("cache").join("packs");
    let cap = config.cache_size.unwrap_or(DEFAULT_CACHE);
    Ok(Some(Arc::new(RemotePacks::new(remote, dir.clone(), cap).map_err(io_at(&dir))?)))
}

/// The pack cache of a reader of a store another process owns (`cat` while mounted): a
/// directory of its own, as the owner's cache is the owner's to fill and evict.
pub(super) fn remote_packs_read_only(root: &Path, config: &Config) -> Result<Option<Arc<RemotePacks>>> {
    let Some(remote) = connect(config)? else { return Ok(None) };
    let cache = root.join("cache");
    // Those of readers that are gone.
    if let Ok(entries) = fs::read_dir(&cache) {
        for e in entries.flatten() {
            let pid = e.file_name().to_str().and_then(|n| n.strip_prefix("packs-reader-")).and_then(|p| p.parse::<u32>().ok());
            if pid.is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists()) {
                let _ = fs::remove_dir_all(e.path());
            }
        }
    }
    let dir = cache.join(format!("packs-reader-{}", std::process::id()));
    Ok(Some(Arc::new(RemotePacks::new(remote, dir.clone(), crate::bucket::client::MIN_CACHE).map_err(io_at(&dir))?)))
}

impl Store {
    /// Waits until every sealed pack is in the bucket (at most `timeout`); an error names
    /// how many are not, where they wait, and the last upload error. A local store has
    /// nothing to wait for.
    pub fn wait_uploaded(&self, timeout: Duration) -> Result<()> {
        let left = self.packs.wait_uploaded(timeout);
        if left.is_empty() {
            return Ok(());
        }
        let (_, err) = self.packs.upload_state();
        Err(StoreError::Remote {
            url: self.config.backend.clone().unwrap_or_default(),
            err: std::io::Error::other(format!(
                "{} sealed packs are not uploaded yet ({}); they are kept in {} and go up with the next warcfs that opens the store",
                left.len(),
                err.unwrap_or_else(|| "still uploading".into()),
                super::layout::packs(&self.root).display()
            )),
        })
    }

    /// Sets the size of this node's cache of pack ranges (object-store back end only).
    pub fn set_pack_cache(&self, bytes: u64) {
        if let Some(r) = self.bucket.as_ref() {
            r.set_capacity(bytes);
        }
    }

    /// Packs waiting for their upload, and the last upload error (0 on a local store).
    pub fn uploads(&self) -> (u64, Option<String>) {
        self.packs.upload_state()
    }

    /// Whether this process uploads sealed packs (it writes to a bucket, and has not closed).
    pub(crate) fn uploading(&self) -> bool {
        self.packs.uploads()
    }

    /// Stops the uploads: what is left goes up with the next process that opens the store.
    pub(crate) fn stop_uploads(&self) {
        self.packs.stop_uploads();
    }

    /// Seals the metadata log's open pack, so that it goes up with the rest.
    pub(crate) fn seal_log(&self) -> Result<()> {
        self.seal_journal(&mut self.journal.locked())
    }

    /// The sealed packs there are (those waiting here for their upload, then the bucket's)
    /// and their digest.
    pub(crate) fn bucket_listing(&self) -> Result<(u64, PackList)> {
        crate::bucket::bucket_listing(&self.packs).map_err(io_at(&self.root))
    }

    /// Notes in the index that it reflects the bucket listing of signature `sig`
    /// (`SIGNATURE`); 0, no listing's, has the next open rebuild it from the bucket.
    pub(crate) fn note_listing(&self, sig: u64) -> Result<()> {
        note_listing(&self.index, sig)
    }
}

/// Notes in `index` that it reflects the bucket listing of signature `sig` (`SIGNATURE`).
pub(super) fn note_listing(index: &crate::index::Index, sig: u64) -> Result<()> {
    let mut b = crate::index::Batch::new();
    b.put_meta_u64_unlogged(index, SIGNATURE, sig);
    Ok(index.write(b)?)
}
