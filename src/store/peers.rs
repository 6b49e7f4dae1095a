//! The other nodes of a store's bucket, as the store meets them: `Peers`, a part the nodes
//! wing (`crate::nodes`) chooses by the store's `Mode` when it opens the store. The store
//! calls it where other nodes matter (before gc, at close), and a mount keeps this node and
//! the bucket in step through it; it never asks which kind of store it serves. A store
//! without a bucket has `Alone`, whose every call does nothing.

use std::time::Duration;

use super::{Result, Store};

/// How long closing a store waits for its sealed packs to go up.
pub const CLOSE_UPLOAD_WAIT: Duration = Duration::from_secs(60);

/// What one `follow` took in: how many log records, and the inodes they changed (a mount
/// tells the kernel to drop what it cached of them: a file another node rewrote may keep
/// its size and times, and the kernel's pages would go on showing the old bytes).
#[derive(Debug, Default)]
pub struct Followed {
    pub records: u64,
    pub inodes: Vec<u64>,
}

/// This node's part among the nodes of its store's bucket. Every call is given the store;
/// what is not said otherwise does nothing.
pub(crate) trait Peers: Send + Sync {
    /// A writer's side: seals its open packs, if they hold anything, so that they go up.
    fn publish(&self, _store: &Store) -> Result<()> {
        Ok(())
    }

    /// `publish`, if the last one is old enough.
    fn publish_if_due(&self, _store: &Store) -> Result<()> {
        Ok(())
    }

    /// Takes in what the other nodes published since the last call.
    fn follow(&self, _store: &Store) -> Result<Followed> {
        Ok(Followed::default())
    }

    /// How often a mount keeps this node and the bucket in step (`keep_in_step`), and what it
    /// calls that in its log; None where there is nothing to keep in step.
    fn in_step_every(&self) -> Option<(Duration, &'static str)> {
        None
    }

    /// One round of keeping in step: publishing, following, or both. `changed` is told the
    /// inodes other nodes' records changed before anything else in the round can fail.
    fn keep_in_step(&self, _store: &Store, _changed: &mut dyn FnMut(&[u64])) -> Result<()> {
        Ok(())
    }

    /// Whether other nodes write files here: they change without this process.
    fn others_write(&self) -> bool {
        false
    }

    /// Before a gc: what lets it run beside the other nodes (on a store several nodes write,
    /// the bucket's gc lock, with every other node's changes taken in), held until it ends.
    fn before_gc(&self, _store: &Store) -> Result<Box<dyn GcGuard>> {
        Ok(Box::new(Alone))
    }

    /// Closing: waits at most `timeout` for the sealed packs to go up, notes what this node
    /// leaves in the bucket, and gives its lock back.
    fn close(&self, _store: &Store, _timeout: Duration) -> Result<()> {
        Ok(())
    }
}

/// What a gc holds while it runs beside other nodes, asked again before gc deletes anything.
pub(crate) trait GcGuard {
    /// Fails if the other nodes no longer let this gc go on.
    fn still_exclusive(&self) -> Result<()>;
}

/// The part of a store without a bucket: no other node, nothing to do.
pub(crate) struct Alone;

impl Peers for Alone {}

impl GcGuard for Alone {
    fn still_exclusive(&self) -> Result<()> {
        Ok(())
    }
}

impl Store {
    /// The writer's side: seals the open data pack, then the log's, if they hold anything,
    /// so that the upload thread sends them to the bucket. Nothing to do on a local store
    /// or a follower's.
    pub fn publish(&self) -> Result<()> {
        self.peers.publish(self)
    }

    /// `publish`, if the last one is old enough (a mount's ingest worker between two files).
    pub fn publish_if_due(&self) -> Result<()> {
        self.peers.publish_if_due(self)
    }

    /// The follower's side: takes in what the other nodes published since the last call.
    /// Returns what was applied.
    pub fn follow(&self) -> Result<Followed> {
        self.peers.follow(self)
    }

    /// How often a mount keeps this node and its bucket in step, and what it calls that;
    /// None on a store without a bucket.
    pub fn in_step_every(&self) -> Option<(Duration, &'static str)> {
        self.peers.in_step_every()
    }

    /// One round of keeping this node and its bucket in step (see `Peers::keep_in_step`).
    pub fn keep_in_step(&self, changed: &mut dyn FnMut(&[u64])) -> Result<()> {
        self.peers.keep_in_step(self, changed)
    }

    /// Whether files here change without this process: another node writes them (this is
    /// a follower, or one of the nodes of a store several nodes write).
    pub fn changed_elsewhere(&self) -> bool {
        self.peers.others_write()
    }

    /// Closing a store on an object store: waits (at most `timeout`) for the sealed packs to
    /// go up, then stops uploading and gives up the bucket's lock if nothing is left (what
    /// is left keeps it: see `bucket::upload`). For a process that does not drop its `Store`
    /// (the mount's daemon).
    pub fn close_remote(&self, timeout: Duration) -> Result<()> {
        self.peers.close(self, timeout)
    }
}
