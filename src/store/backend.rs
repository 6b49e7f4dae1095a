//! How a store reaches its bucket (`crate::bucket`): connecting to the back end its
//! settings name, this node's cache of pack ranges, the first id of this node's range, and
//! the index key that says which bucket listing the index reflects.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use super::{io_at, Config, Result, StoreError};
use crate::bucket::client::{Remote, RemotePacks, DEFAULT_CACHE};

/// Index meta key: a digest of the bucket's packs (ids and sizes, with the packs waiting
/// here) as of this node's last write. If the bucket holds other packs when the node opens
/// the store to write, another node wrote (or gc'ed) since, and this node's index is
/// rebuilt from the bucket first: a writer must never work from a stale index (its gc would
/// take chunks the other node's files use).
pub(super) const SIGNATURE: &str = "bucket_signature";

pub(super) fn remote_err(url: &str) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |err| StoreError::Remote { url: url.to_string(), err }
}

/// The first pack id of this node's range.
pub(super) fn node_base(config: &Config) -> u64 {
    (config.node.unwrap_or(0) as u64) << 48
}

fn connect(config: &Config) -> Result<Option<Remote>> {
    let Some(url) = &config.backend else { return Ok(None) };
    Remote::connect(url).map(Some).map_err(remote_err(url))
}

/// The reader of this store's packs: those on this disk, and those in `bucket` if it has one.
pub(super) fn pack_reader(root: &Path, bucket: Option<&Arc<RemotePacks>>) -> crate::pack::PackReader {
    let elsewhere: Arc<dyn crate::pack::Elsewhere> = match bucket {
        Some(r) => r.clone(),
        None => Arc::new(crate::pack::Nowhere),
    };
    crate::pack::PackReader::with_remote(super::layout::packs(root), super::layout::packs_tmp(root), elsewhere)
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


