//! Where sealed packs live besides this disk's `packs/`: the seam between the pack reader
//! and a bucket (`crate::bucket` implements it). The reader asks these traits, so `pack`
//! knows nothing of object stores, and a store without a bucket simply has none.

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
    /// The size of sealed pack `id`.
    fn size(&self, id: u64) -> io::Result<u64>;
    /// A local file holding `[offset, offset + len)` of pack `id` (fetched if need be).
    fn file_for(&self, id: u64, offset: u64, len: u64) -> io::Result<Arc<File>>;
    /// Fetches `ranges` (offset, len) of pack `id` in the background.
    fn prefetch(self: Arc<Self>, id: u64, ranges: &[(u64, u64)]);
    /// Drops a cached range whose bytes failed their check: the next read fetches it again.
    fn forget_range(&self, id: u64, offset: u64, len: u64);
    /// Takes pack `id` out of every listing (gc); its bytes stay readable for a while.
    fn trash(&self, id: u64) -> io::Result<()>;
    /// Deletes the packs trashed at least `grace` ago; returns how many.
    fn purge_trash(&self, grace: Duration) -> io::Result<u64>;
    /// Starts uploading the sealed packs `ids` of `packs_dir` (and those pushed later),
    /// renewing the lock object `lock` while it runs.
    fn start_uploads(self: Arc<Self>, packs_dir: PathBuf, files: OpenFiles, ids: Vec<u64>, lock: String) -> io::Result<Box<dyn UploadQueue>>;
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
