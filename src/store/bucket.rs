//! A bucket-backed store's lower layer: connecting to its back end and this node's cache of
//! pack ranges, the node's number and lock name, and the digest of the bucket's packs that
//! tells a node whether its index still reflects the bucket. Used by `remote` (opening,
//! joining, closing) and `repair` (rebuilding from the bucket).

use std::fs;
use std::path::Path;
use std::sync::Arc;

use super::{io_at, Config, Result, StoreError};
use crate::pack::remote::{Remote, RemotePacks, DEFAULT_CACHE};

/// Index meta key: a digest of the bucket's packs (ids and sizes, with the packs waiting
/// here) as of this node's last write. If the bucket holds other packs when the node opens
/// the store to write, another node wrote (or gc'ed) since, and this node's index is
/// rebuilt from the bucket first: a writer must never work from a stale index (its gc would
/// take chunks the other node's files use).
pub(super) const SIGNATURE: &str = "bucket_signature";

/// Sealed packs: (id, size), in id order.
pub(super) type PackList = Vec<(u64, u64)>;

/// The digest of a list of sealed packs (id, size).
pub(super) fn signature_of(packs: &[(u64, u64)]) -> u64 {
    let mut bytes = Vec::with_capacity(packs.len() * 16);
    for (id, size) in packs {
        bytes.extend_from_slice(&id.to_le_bytes());
        bytes.extend_from_slice(&size.to_le_bytes());
    }
    let d = crate::digest::sha256(&bytes);
    u64::from_le_bytes(d[..8].try_into().expect("8 bytes"))
}

/// The sealed packs `packs` sees (local, then the bucket's) and their digest; None on a
/// local store.
pub(super) fn bucket_listing(packs: &crate::pack::PackReader) -> std::io::Result<Option<(u64, PackList)>> {
    if packs.remote().is_none() {
        return Ok(None);
    }
    let list = packs.sealed_packs()?;
    Ok(Some((signature_of(&list), list)))
}

pub(super) fn remote_err(url: &str) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |err| StoreError::Remote { url: url.to_string(), err }
}

pub(super) fn hostname() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_else(|_| "unknown".into())
}

/// The name of this node's lock object: a lease beside the other writers' on a store
/// several nodes write, the one writer's lock otherwise (`pack::lock`).
pub(super) fn lock_owner(config: &Config) -> String {
    let node = config.node.unwrap_or(0);
    if super::several_writers(config.version) {
        format!("{}{node:04x}", crate::pack::lock::LEASE)
    } else {
        format!("node-{node:04x}")
    }
}

/// The first pack id of this node's range.
pub(super) fn node_base(config: &Config) -> u64 {
    (config.node.unwrap_or(0) as u64) << 48
}

fn connect(config: &Config) -> Result<Option<Remote>> {
    let Some(url) = &config.backend else { return Ok(None) };
    Remote::connect(url).map(Some).map_err(remote_err(url))
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
    Ok(Some(Arc::new(RemotePacks::new(remote, dir.clone(), crate::pack::remote::MIN_CACHE).map_err(io_at(&dir))?)))
}


/// The node a range-allocated id (pack, and on a shared store inode and recipe) belongs to.
pub(super) fn node_of(id: u64) -> u16 {
    (id >> 48) as u16
}

/// The bucket's object counting the gc runs of a shared store (8 bytes, little-endian;
/// absent: none yet). Only gc writes it, under its exclusive lock.
const GC_GENERATION: &str = "gc/generation";

/// How many times gc ran on the shared store in this bucket.
pub(super) fn gc_generation(remote: &Remote) -> std::io::Result<u64> {
    Ok(remote.get(GC_GENERATION)?.and_then(|b| b.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes)).unwrap_or(0))
}

/// Counts one more gc run (its caller holds the gc lock): a node's next open then rebuilds
/// its index instead of catching up.
pub(super) fn bump_gc_generation(remote: &Remote) -> std::io::Result<()> {
    let next = gc_generation(remote)? + 1;
    remote.put(GC_GENERATION, next.to_le_bytes().to_vec())
}
