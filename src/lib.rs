//! warcfs: a deduplicating, byte-exact store for web archives.
//!
//! Data flows one way. Bytes come in (`store::Store::put_file`); `format` finds gzip members
//! and WARC/ARC records in them; payloads are hashed (`digest`) and stored once as chunks in
//! immutable `pack` files; a `recipe` saying how to rebuild the exact bytes commits
//! atomically with refcount changes in the `index`. A read walks the recipe back.

pub mod cli;
pub mod digest;
pub mod extsort;
mod failpoint;
pub mod format;
pub mod fuse;
pub mod index;
pub mod pack;
pub mod recipe;
pub mod store;

pub use store::{Config, Compression, Store, StoreError, Verify};

/// Locks that outlive a panic. A panic inside the mount is contained (its request gets EIO,
/// see `fuse::guard`) and the mutexes it held must stay usable: std would poison them, and
/// every later request touching one would panic in turn. What they guard is kept consistent
/// by short critical sections, not by poisoning.
pub(crate) trait LockExt<T> {
    fn locked(&self) -> std::sync::MutexGuard<'_, T>;
}

impl<T> LockExt<T> for std::sync::Mutex<T> {
    fn locked(&self) -> std::sync::MutexGuard<'_, T> {
        self.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// `Condvar::wait` that, like `LockExt::locked`, carries on past a poisoned lock.
pub(crate) fn wait_on<'a, T>(cv: &std::sync::Condvar, guard: std::sync::MutexGuard<'a, T>) -> std::sync::MutexGuard<'a, T> {
    cv.wait(guard).unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What unit tests share: where the real sample corpus is (`../shared/corpus/real`).
#[cfg(test)]
pub(crate) mod test_support {
    pub fn real_corpus() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus/real")
    }

    /// Every sample file of the real corpus (its READMEs left out), sorted.
    pub fn real_corpus_files() -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        let mut dirs = vec![real_corpus()];
        while let Some(dir) = dirs.pop() {
            for e in std::fs::read_dir(&dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    dirs.push(p);
                } else if p.file_name().unwrap() != "README.md" {
                    out.push(p);
                }
            }
        }
        out.sort();
        assert!(out.len() > 20, "the real corpus is missing ({} files)", out.len());
        out
    }
}
