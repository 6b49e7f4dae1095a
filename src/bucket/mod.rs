//! The S3-compatible object store as warcfs uses it: the client (`client`: objects, and the
//! node's bounded cache of pack ranges), the uploads of sealed packs (`upload`), the locks
//! and leases that say who writes (`lock`), and the bucket's layout facts here (node
//! numbers in pack ids, the digest of a listing, gc's generation counter). It knows packs
//! (their names and footers) but not `Store`: the store opens, joins and follows a bucket
//! through this module (`store::open`, `nodes`).

pub mod client;
pub mod lock;
mod upload;

use std::fs;

use client::Remote;

/// Sealed packs: (id, size), in id order.
pub type PackList = Vec<(u64, u64)>;

/// The digest of a list of sealed packs (id, size).
pub fn signature_of(packs: &[(u64, u64)]) -> u64 {
    let mut bytes = Vec::with_capacity(packs.len() * 16);
    for (id, size) in packs {
        bytes.extend_from_slice(&id.to_le_bytes());
        bytes.extend_from_slice(&size.to_le_bytes());
    }
    let d = crate::digest::sha256(&bytes);
    u64::from_le_bytes(d[..8].try_into().expect("8 bytes"))
}

/// The sealed packs `packs`, a reader of a bucket's store, sees (those waiting here for
/// their upload, then the bucket's) and their digest.
pub fn bucket_listing(packs: &crate::pack::PackReader) -> std::io::Result<(u64, PackList)> {
    let list = packs.sealed_packs()?;
    Ok((signature_of(&list), list))
}

pub fn hostname() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_else(|_| "unknown".into())
}


/// The node a range-allocated id (pack, and on a shared store inode and recipe) belongs to.
pub fn node_of(id: u64) -> u16 {
    (id >> 48) as u16
}

/// The bucket's object counting the gc runs of a shared store (8 bytes, little-endian;
/// absent: none yet). Only gc writes it, under its exclusive lock.
const GC_GENERATION: &str = "gc/generation";

/// How many times gc ran on the shared store in this bucket.
pub fn gc_generation(remote: &Remote) -> std::io::Result<u64> {
    Ok(remote.get(GC_GENERATION)?.and_then(|b| b.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes)).unwrap_or(0))
}

/// Counts one more gc run (its caller holds the gc lock): a node's next open then rebuilds
/// its index instead of catching up.
pub fn bump_gc_generation(remote: &Remote) -> std::io::Result<()> {
    let next = gc_generation(remote)? + 1;
    remote.put(GC_GENERATION, next.to_le_bytes().to_vec())
}

impl crate::pack::Elsewhere for client::RemotePacks {
    fn list(&self) -> std::io::Result<Vec<(u64, u64)>> {
        client::RemotePacks::list(self)
    }
    fn size(&self, id: u64) -> std::io::Result<Option<u64>> {
        client::RemotePacks::size(self, id).map(Some)
    }
    fn file_for(&self, id: u64, offset: u64, len: u64) -> std::io::Result<Option<std::sync::Arc<std::fs::File>>> {
        client::RemotePacks::file_for(self, id, offset, len).map(Some)
    }
    fn prefetch(self: std::sync::Arc<Self>, id: u64, ranges: &[(u64, u64)]) {
        client::RemotePacks::prefetch(&self, id, ranges)
    }
    fn forget_range(&self, id: u64, offset: u64, len: u64) -> bool {
        client::RemotePacks::forget_range(self, id, offset, len);
        true
    }
    fn trash(&self, id: u64) -> std::io::Result<bool> {
        client::RemotePacks::trash(self, id).map(|()| true)
    }
    fn purge_trash(&self, grace: std::time::Duration) -> std::io::Result<u64> {
        client::RemotePacks::purge_trash(self, grace)
    }
    fn start_uploads(self: std::sync::Arc<Self>, packs_dir: std::path::PathBuf, files: crate::pack::OpenFiles, ids: Vec<u64>, lock: String) -> std::io::Result<Option<Box<dyn crate::pack::UploadQueue>>> {
        Ok(Some(Box::new(upload::Uploads::start(self, packs_dir, files, ids, lock)?)))
    }
}
