//! Where sealed packs live besides this disk's `packs/`: the seam between the pack reader
//! and a bucket (`crate::bucket` implements it). The reader asks these traits, so `pack`
//! knows nothing of object stores; a store without a bucket has `Nowhere`, which holds no
//! pack, so the reader never asks which kind of store it serves.

use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The reader's open pack files, shared with the uploads (which drop a pack's handle once
/// its file leaves `packs/`).
pub type OpenFiles = Arc<Mutex<lru::LruCache<u64, Arc<File>>>>;

/// Sealed packs kept elsewhere (an object store), read through a local cache of ranges.
pub trait Elsewhere: Send + Sync {
    /// Every sealed pack there: (id, size), in id order.
    fn list(&self) -> io::Result<Vec<(u64, u64)>>;
    /// The size of sealed pack `id`; None if packs are never kept there.
    fn size(&self, id: u64) -> io::Result<Option<u64>>;
    /// A local file holding `[offset, offset + len)` of pack `id` (fetched if need be); None
    /// if packs are never kept there.
    fn file_for(&self, id: u64, offset: u64, len: u64) -> io::Result<Option<Arc<File>>>;
    /// Fetches `ranges` (offset, len) of pack `id` in the background.
    fn prefetch(self: Arc<Self>, id: u64, ranges: &[(u64, u64)]);
    /// Drops a cached range whose bytes failed their check: the next read fetches it again.
    /// False if there was no such cache (so a second read would find the same bytes).
    fn forget_range(&self, id: u64, offset: u64, len: u64) -> bool;
    /// Takes pack `id` out of every listing (gc); its bytes stay readable for a while.
    /// False if packs are never kept there.
    fn trash(&self, id: u64) -> io::Result<bool>;
    /// Deletes the packs trashed at least `grace` ago; returns how many.
    fn purge_trash(&self, grace: Duration) -> io::Result<u64>;
    /// Starts uploading the sealed packs `ids` of `packs_dir` (and those pushed later),
    /// renewing the lock object `lock` while it runs; None if packs never go there.
    fn start_uploads(self: Arc<Self>, packs_dir: PathBuf, files: OpenFiles, ids: Vec<u64>, lock: String) -> io::Result<Option<Box<dyn UploadQueue>>>;
}

/// The elsewhere of a store without a bucket: no pack is ever there.
pub struct Nowhere;

impl Elsewhere for Nowhere {
    fn list(&self) -> io::Result<Vec<(u64, u64)>> {
        Ok(Vec::new())
    }
    fn size(&self, _id: u64) -> io::Result<Option<u64>> {
        Ok(None)
    }
    fn file_for(&self, _id: u64, _offset: u64, _len: u64) -> io::Result<Option<Arc<File>>> {
        Ok(None)
    }
    fn prefetch(self: Arc<Self>, _id: u64, _ranges: &[(u64, u64)]) {}
    fn forget_range(&self, _id: u64, _offset: u64, _len: u64) -> bool {
        false
    }
    fn trash(&self, _id: u64) -> io::Result<bool> {
        Ok(false)
    }
    fn purge_trash(&self, _grace: Duration) -> io::Result<u64> {
        Ok(0)
    }
    fn start_uploads(self: Arc<Self>, _: PathBuf, _: OpenFiles, _: Vec<u64>, _: String) -> io::Result<Option<Box<dyn UploadQueue>>> {
        Ok(None)
    }
}

/// Sealed packs on their way to where they live (see `Elsewhere::start_uploads`).
pub trait UploadQueue: Send + Sync {
    /// Hands a pack just sealed into `packs/` to the uploads.
    fn push(&self, id: u64);
    /// Whether another node took the lock over from this process.
    fn fenced(&self) -> bool;
    /// Packs waiting for their upload, and the last upload error.
    fn state(&self) -> (u64, Option<String>);
    /// Waits until every pack is uploaded, for at most `timeout`; returns those left.
    fn wait_idle(&self, timeout: Duration) -> Vec<u64>;
    /// Stops the uploads (what is left goes up with the next process).
    fn stop(&self);
}
