//! Every path under STORE/, in one place (docs/FORMAT.md, "The store directory", says what
//! each holds). Code that needs a file of the store asks here instead of joining names.

use std::path::{Path, PathBuf};

/// The store's settings; a directory holding it is a store.
pub const CONFIG_FILE: &str = "warcfs.json";

/// The directories every store has (made at `init`, and by `repair` and `snapshot`).
pub const DIRS: [&str; 3] = ["packs", "packs-tmp", "staging"];

/// `warcfs.json`: the store's settings.
pub fn config(root: &Path) -> PathBuf {
    root.join(CONFIG_FILE)
}

/// `lock`: flock'ed by the owning process; holds its pid.
pub fn lock(root: &Path) -> PathBuf {
    root.join("lock")
}

/// `index/`: the RocksDB index, a cache of the packs.
pub fn index(root: &Path) -> PathBuf {
    root.join("index")
}

/// `index.rebuilding/`: where `repair index` builds before renaming it to `index/`.
pub fn index_rebuilding(root: &Path) -> PathBuf {
    root.join("index.rebuilding")
}

/// `index.stale/`: a node's index kept aside while it is rebuilt from the bucket (put back
/// if the rebuild fails).
pub fn index_stale(root: &Path) -> PathBuf {
    root.join("index.stale")
}

/// `bucket-packs`: on a writer of a store several nodes write, the packs its index had taken
/// in when it last closed, and the bucket's gc generation then (`nodes::join`).
pub fn bucket_packs(root: &Path) -> PathBuf {
    root.join("bucket-packs")
}

/// `packs/`: sealed packs (on a bucket store: those waiting for their upload).
pub fn packs(root: &Path) -> PathBuf {
    root.join("packs")
}

/// `packs-tmp/`: the open packs.
pub fn packs_tmp(root: &Path) -> PathBuf {
    root.join("packs-tmp")
}

/// `recovering`: the ids of the packs an open is sealing after a crash.
pub fn recovering(root: &Path) -> PathBuf {
    root.join("recovering")
}

/// `staging/`: files written through a mount, not yet ingested.
pub fn staging(root: &Path) -> PathBuf {
    root.join("staging")
}

/// `cache/`: scratch, safe to delete while the store is not in use.
pub fn cache(root: &Path) -> PathBuf {
    root.join("cache")
}

/// `cache/runs/`: sort runs of `warcfs index`, fsck and gc.
pub fn runs(root: &Path) -> PathBuf {
    cache(root).join("runs")
}

/// `search/`: the full-text search index (`search`), made by `warcfs search update`.
pub fn search(root: &Path) -> PathBuf {
    root.join("search")
}

/// `warcfs.log`: a mount's log.
pub fn log(root: &Path) -> PathBuf {
    root.join("warcfs.log")
}
