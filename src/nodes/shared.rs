//! A writer of a store several nodes write at once (format version 6 or 8, `init --backend
//! URL --writers several`): how it opens, keeps in step with the others, runs gc and stops.
//!
//! Each node writes only under its own directory at the root, `/NAME/` (`init --node-name`):
//! its inode and recipe ids are in its own range (`node << 48`), and every index key it
//! writes is its own: its inodes, the entries of its directories (and its directory's entry
//! at the root), its recipes, its counters (`store::Share`). So no two nodes ever write one
//! key, and a node reaches the same namespace as every other by applying each node's
//! metadata log in that node's order, whatever the order between nodes (`follow`,
//! `Store::apply_foreign`). Two nodes cannot write the same path: each has its own
//! directory, and every node reads all of them. The root directory itself is made once, by
//! the node that created the store, and changed by no one after.
//!
//! A writing node holds a lease in the bucket, which says "pending" for as long as it writes;
//! a gc holds the bucket's gc lock, which no other node's live lease allows (`GcLock`).

use std::sync::Arc;
use std::time::Duration;

use super::follow::{Following, Logs, FOLLOW_INTERVAL};
use super::join::{bucket_of, holder, lock_bucket, next_pack, start_uploads};
use super::writer::{close, Publishing};
use crate::bucket::client::RemotePacks;
use crate::bucket::{gc_generation, node_of};
use crate::store::{io_at, Followed, GcGuard, Opening, Peers, Result, Store, StoreError, Writers, CHECKPOINT_RECORDS, ROOT_INO};
use crate::LockExt;

/// Where a command writes when not told: the root, or on a store several nodes write, the
/// node's own directory. (The root for a store that does not exist yet, or whose settings
/// cannot be read: opening it says why.)
pub fn default_dir(root: &std::path::Path) -> String {
    match crate::store::read_config(&crate::store::layout::config(root)) {
        Ok(c) if Writers::of(c.version) == Writers::Several => format!("/{}", c.node_name.unwrap_or_default()),
        _ => "/".into(),
    }
}

/// A writer of a store several nodes write: it publishes what it writes, follows what the
/// others publish, and checkpoints its own log now and then.
pub(super) struct Shared {
    bucket: Arc<RemotePacks>,
    node: u16,
    publishing: Publishing,
    following: Following,
}

impl Shared {
    /// Opens `o` as one of the bucket's writers: its lease taken, its index brought in line
    /// with the bucket (catching up by following where it can: `join::sync_index`), its
    /// packs going up, what the others published since it last closed taken in, and its
    /// directory at the root made on its first open.
    pub(super) fn open(mut o: Opening) -> Result<Store> {
        let node = o.config.node.unwrap_or(0);
        let owner = crate::bucket::lock::lease(node);
        // A lease says "pending" for as long as its node writes: records not yet published
        // may rely on chunks a gc elsewhere would take, so a node killed at any moment keeps
        // gc off until it starts again (or its lease is deleted by hand). A clean stop with
        // nothing left to upload deletes it.
        let what = format!("{}: writing ({})", crate::bucket::lock::PENDING, holder(&o.root));
        let r = lock_bucket(&o, &owner, what)?;
        let synced = super::join::sync_index(&mut o, &r, Some(&owner), |o, listed| super::join::caught_up(o, &r, listed))?;
        // Its index is to take in the packs published since it last closed (if it was not
        // rebuilt from the bucket).
        let catch_up = synced.taken_in.len() != synced.listed.len();
        // Until this node closes cleanly (`note_bucket`), its index reflects no listing: a
        // node killed now rebuilds at its next open.
        o.note_listing(0)?;
        let next = next_pack(&o, &synced.listed);
        start_uploads(&mut o, owner)?;
        let created = o.created;
        // The packs its index reflects: its first `follow` takes in the others.
        let following = Following::new(Logs::PerNode { own: Some(node) }, synced.taken_in.into_iter());
        let shared = Arc::new(Shared { bucket: bucket_of(&o)?, node, publishing: Publishing::new(), following });
        let store = o.into_store(next, shared.clone())?;
        if catch_up {
            // Not fatal: the store is whole as it is; what is not taken in yet is by the next
            // follow (a mount's, or gc's, which needs it all), and this close notes no listing.
            if let Err(e) = shared.following.follow(&store) {
                log::warn!("{}: taking in the other nodes' changes: {e}", store.root().display());
            }
        }
        if !created && store.inode(ROOT_INO)?.is_none() {
            // Only the node that made the store makes the root (one key, one writer): its
            // first records are not in the bucket yet.
            return Err(StoreError::RootNotUploaded(store.root().to_path_buf()));
        }
        store.finish_open()?;
        store.ensure_node_dir()?;
        Ok(store)
    }

    /// Notes the bucket's packs as this node knows them now (see `SIGNATURE`), when it stops
    /// writing, its packs uploaded. The others write meanwhile: the packs this index has
    /// taken in are this node's and those `follow` applied, so it follows once more first,
    /// and notes the listing only if that left nothing out (else 0, no listing's signature:
    /// the next open rebuilds). With the listing, the packs it stands for and the bucket's gc
    /// generation, so that the next open can catch up (`join::caught_up`).
    fn note_bucket(&self, store: &Store) -> Result<()> {
        self.following.follow(store)?;
        // The gc generation before the listing: a gc between the two then shows as a newer
        // generation at the next open, never as an older listing under the newer number.
        let generation = gc_generation(&self.bucket.remote).map_err(io_at(store.root()))?;
        let (mut sig, list) = store.bucket_listing()?;
        self.following.look(|st| {
            if st.busy || !st.waiting.is_empty() || list.iter().any(|p| node_of(p.0) != self.node && !st.seen.contains(&p.0)) {
                sig = 0;
            }
        });
        if sig != 0 {
            super::join::write_taken_in(store.root(), generation, &list)?;
        }
        store.note_listing(sig)
    }
}

impl Peers for Shared {
    fn publish(&self, store: &Store) -> Result<()> {
        self.publishing.publish(store)
    }

    fn publish_if_due(&self, store: &Store) -> Result<()> {
        self.publishing.publish_if_due(store)
    }

    fn follow(&self, store: &Store) -> Result<Followed> {
        self.following.follow(store)
    }

    fn in_step_every(&self) -> Option<(Duration, &'static str)> {
        Some((FOLLOW_INTERVAL, "following the bucket"))
    }

    fn keep_in_step(&self, store: &Store, changed: &mut dyn FnMut(&[u64])) -> Result<()> {
        self.publishing.publish_if_due(store)?;
        // The kernel forgets what changed before anything else can fail.
        changed(&self.following.follow(store)?.inodes);
        store.checkpoint_if_due(CHECKPOINT_RECORDS)?;
        Ok(())
    }

    fn others_write(&self) -> bool {
        true
    }

    /// Takes the bucket's gc lock, which no other node's live lease allows (restic's
    /// exclusive lock: no other node has an upload in flight that relies on a chunk this gc
    /// could take), then takes in everything the other nodes published, so that every
    /// reference any node holds counts.
    fn before_gc(&self, store: &Store) -> Result<Box<dyn GcGuard>> {
        let r = &self.bucket;
        let owner = crate::bucket::lock::gc_lock(self.node);
        let what = format!("gc on {}", holder(store.root()));
        crate::bucket::lock::take_lock(&r.remote, &owner, &what).map_err(|err| {
            StoreError::GcRefused(format!(
                "another node holds a lock in the bucket: {err}. On a store several nodes write, gc runs while no other node writes: unmount the others (their leases go with them), then run gc again"
            ))
        })?;
        let lock = GcLock::start(r.clone(), owner.clone()).map_err(|err| {
            let _ = crate::bucket::lock::unlock(&r.remote, &owner);
            StoreError::Remote { url: r.remote.url().to_string(), err }
        })?;
        // Every node's next open rebuilds its index rather than catching up (this gc may
        // take packs it had taken in).
        crate::bucket::bump_gc_generation(&r.remote).map_err(|err| StoreError::Remote { url: r.remote.url().to_string(), err })?;
        self.following.follow(store)?;
        let (busy, waiting) = self.following.look(|st| (st.busy, st.waiting.len()));
        if busy {
            return Err(StoreError::GcRefused("this node is taking in the other nodes' changes at the moment; run gc again".into()));
        }
        if waiting > 0 {
            return Err(StoreError::GcRefused(format!(
                "{waiting} metadata log records of other nodes wait for packs not in the bucket yet (a node stopped with packs to upload?); gc would not see every reference"
            )));
        }
        Ok(Box::new(lock))
    }

    fn close(&self, store: &Store, timeout: Duration) -> Result<()> {
        if !store.uploading() {
            return Ok(());
        }
        // A writer that wrote many records since its last checkpoint writes one before it
        // goes (see `checkpoint_if_due`): its records go up with the rest.
        match store.checkpoint_if_due(CHECKPOINT_RECORDS) {
            Ok(true) => {
                if let Err(e) = store.seal_log() {
                    log::warn!("{}: sealing the checkpoint written at close: {e} (it goes up with the next open)", store.root().display());
                }
            }
            Ok(false) => {}
            Err(e) => log::warn!("{}: a checkpoint of this node's log at close: {e}", store.root().display()),
        }
        close(store, timeout, || self.note_bucket(store))
    }
}

/// The bucket's gc lock, held while a gc of a shared store runs: renewed by a thread of its
/// own (a gc can outlast the lock's staleness), given back when dropped.
struct GcLock {
    remote: Arc<RemotePacks>,
    owner: String,
    stop: Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
    renewer: Option<std::thread::JoinHandle<()>>,
}

impl GcLock {
    fn start(remote: Arc<RemotePacks>, owner: String) -> std::io::Result<GcLock> {
        let stop = Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
        let (r, o, st) = (remote.clone(), owner.clone(), stop.clone());
        let renewer = std::thread::Builder::new().name("warcfs-gc-lock".into()).spawn(move || loop {
            let (lock, cv) = &*st;
            let stopped = lock.locked();
            let (stopped, _) = cv.wait_timeout_while(stopped, crate::bucket::lock::LOCK_REFRESH, |s| !*s).unwrap_or_else(|p| p.into_inner());
            if *stopped {
                return;
            }
            drop(stopped);
            if let Err(e) = crate::bucket::lock::refresh_lock(&r.remote, &o) {
                log::warn!("renewing the bucket's gc lock {o}: {e}");
            }
        })?;
        Ok(GcLock { remote, owner, stop, renewer: Some(renewer) })
    }
}

impl GcGuard for GcLock {
    /// Before gc deletes anything: fails if another node holds a live lock now (this one
    /// lapsed, and a node took its lease meanwhile).
    fn still_exclusive(&self) -> Result<()> {
        let check = || crate::bucket::lock::refresh_lock(&self.remote.remote, &self.owner);
        // A node that writes its lease just now (to open the store) sees this lock and backs
        // off at once: look again a moment later before giving up the work done.
        check()
            .or_else(|_| {
                std::thread::sleep(Duration::from_secs(3));
                check()
            })
            .map_err(|e| StoreError::GcRefused(format!("the bucket's gc lock: {e}; nothing was deleted (run gc again)")))
    }
}

impl Drop for GcLock {
    fn drop(&mut self) {
        *self.stop.0.locked() = true;
        self.stop.1.notify_all();
        if let Some(t) = self.renewer.take() {
            let _ = t.join();
        }
        if let Err(e) = crate::bucket::lock::unlock(&self.remote.remote, &self.owner) {
            log::warn!("giving back the bucket's gc lock {}: {e}", self.owner);
        }
    }
}
