//! The writer of a bucket's store: it publishes what it writes (its open packs sealed every
//! `PUBLISH_INTERVAL`, so that followers see it), and when it stops, once its packs are up,
//! notes in its index the bucket listing it leaves (`SIGNATURE`): its next open then knows
//! whether another node wrote meanwhile. The one writer of a store one node writes at a
//! time is `Writer`; a writer of a store several nodes write (`shared`) does the same.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::join::{holder, lock_bucket, next_pack, start_uploads};
use crate::store::{Opening, Peers, Result, Store};
use crate::LockExt;

/// How often a mounted writer publishes its open packs.
pub(super) const PUBLISH_INTERVAL: Duration = Duration::from_secs(4);

/// A writer's publishing: when it last published.
pub(super) struct Publishing {
    last: Mutex<Instant>,
}

impl Publishing {
    pub(super) fn new() -> Publishing {
        Publishing { last: Mutex::new(Instant::now()) }
    }

    /// Seals the open packs if they hold anything, so that they go up (`Store::publish`).
    /// Skipped, and not counted as done, while an ingest holds the writer (the mount's
    /// ingest worker publishes between two files).
    pub(super) fn publish(&self, store: &Store) -> Result<()> {
        if store.seal_for_upload()? {
            *self.last.locked() = Instant::now();
        }
        Ok(())
    }

    /// `publish`, if the last one is PUBLISH_INTERVAL old.
    pub(super) fn publish_if_due(&self, store: &Store) -> Result<()> {
        if !store.uploading() || self.last.locked().elapsed() < PUBLISH_INTERVAL {
            return Ok(());
        }
        self.publish(store)
    }
}

/// A writer's close: waits (at most `timeout`) for the sealed packs to go up, then, if
/// they are, notes the bucket's listing (`note`; failing that, none: the next open then
/// rebuilds its index from the bucket), and stops uploading, which gives up the bucket's
/// lock if nothing is left (what is left keeps it: see `bucket::upload`).
pub(super) fn close(store: &Store, timeout: Duration, note: impl FnOnce() -> Result<()>) -> Result<()> {
    let r = store.wait_uploaded(timeout);
    if r.is_ok() {
        // Not noting it only costs the next open a rebuild: the uploads stop anyway.
        if let Err(e) = note() {
            log::warn!("{}: noting the bucket's packs at close: {e} (the next open rebuilds the index from the bucket)", store.root().display());
            let _ = store.note_listing(0);
        }
    }
    store.stop_uploads();
    r
}

/// The one writer of a store one node writes at a time (its lock object in the bucket).
pub(super) struct Writer {
    publishing: Publishing,
}

impl Writer {
    /// Opens `o` as the bucket's one writer: its lock taken, its index brought in line with
    /// the bucket (`join::sync_index`), its packs going up.
    pub(super) fn open(mut o: Opening) -> Result<Store> {
        let owner = crate::bucket::lock::writer_lock(o.config.node.unwrap_or(0));
        let r = lock_bucket(&o, &owner, holder(&o.root))?;
        let synced = super::join::sync_index(&mut o, &r, Some(&owner), |_, _| None)?;
        let next = next_pack(&o, &synced.listed);
        start_uploads(&mut o, owner)?;
        let store = o.into_store(next, Arc::new(Writer { publishing: Publishing::new() }))?;
        store.finish_open()?;
        Ok(store)
    }
}

impl Peers for Writer {
    fn publish(&self, store: &Store) -> Result<()> {
        self.publishing.publish(store)
    }

    fn publish_if_due(&self, store: &Store) -> Result<()> {
        self.publishing.publish_if_due(store)
    }

    fn in_step_every(&self) -> Option<(Duration, &'static str)> {
        Some((PUBLISH_INTERVAL, "publishing to the bucket"))
    }

    fn keep_in_step(&self, store: &Store, _changed: &mut dyn FnMut(&[u64])) -> Result<()> {
        self.publishing.publish(store)
    }

    fn close(&self, store: &Store, timeout: Duration) -> Result<()> {
        if !store.uploading() {
            return Ok(());
        }
        close(store, timeout, || store.note_listing(store.bucket_listing()?.0))
    }
}
