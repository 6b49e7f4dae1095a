//! The bucket's writer lock: one process writes to a bucket at a time. A lock is an object,
//! `locks/<owner>`, whose age says whether its owner lives (restic's scheme; Garage does not
//! honour conditional PUT, so nothing here may rely on it). Ages are the object store's own
//! times. Layout and rules: docs/FORMAT.md, "Object store".

use std::io;
use std::time::{Duration, SystemTime};

use super::client::Remote;

/// How often a writer rewrites its lock object, and after how long without that another
/// process may take the lock over (restic's scheme: Garage does not honour conditional
/// PUT, so a lock is an object whose age says whether its owner lives).
pub const LOCK_REFRESH: Duration = Duration::from_secs(60);
pub const LOCK_STALE: Duration = Duration::from_secs(600);

/// How long a pack gc put in the bucket's trash stays readable before a later gc deletes it
/// (`RemotePacks::purge_trash`): twice the time after which a lock is stale, so a node that
/// could still be reading it (a follower that has not followed gc's new packs) has long
/// moved on.
pub const TRASH_GRACE: Duration = Duration::from_secs(2 * LOCK_STALE.as_secs());

/// The first line of a lock object whose owner stopped with packs still to upload: such a
/// lock is never taken over by age (those packs hold changes a new writer would not see).
pub const PENDING: &str = "pending-uploads";

/// The lock names of a store several nodes write (format version 6 or 8): each writing node
/// holds a lease, `lease-NNNN`, which other leases do not exclude; gc holds `gc-NNNN`,
/// which excludes every other node's lock (restic's shared and exclusive locks). A store
/// written by one node at a time names its writer's lock `node-NNNN`, which excludes all.
pub const LEASE: &str = "lease-";
pub const GC: &str = "gc-";

/// The lock of node `node`, the one writer of a store one node writes at a time.
pub fn writer_lock(node: u16) -> String {
    format!("node-{node:04x}")
}

/// The lease of node `node`, one of the writers of a store several nodes write.
pub fn lease(node: u16) -> String {
    format!("{LEASE}{node:04x}")
}

/// The lock a gc on node `node` of a store several nodes write holds.
pub fn gc_lock(node: u16) -> String {
    format!("{GC}{node:04x}")
}

/// The node a lock name is for (`node-NNNN`, `lease-NNNN`, `gc-NNNN`), if it says.
fn node_of(name: &str) -> Option<&str> {
    name.rsplit_once('-').map(|(_, n)| n)
}

/// Whether a live lock `other` keeps the holder of `mine` from going on.
fn excludes(mine: &str, other: &str) -> bool {
    if node_of(mine).is_some() && node_of(mine) == node_of(other) {
        // A node's own lease and its own gc: the same process.
        return false;
    }
    if mine.starts_with(LEASE) {
        return other.starts_with(GC);
    }
    true
}

/// Other nodes' live locks that exclude `owner`, as (name, age): ages measured against our
/// own lock's time as the object store gave it (a node's clock does not decide). A stale
/// lock whose body says its owner left packs to upload stays live.
fn live_locks(remote: &Remote, owner: &str) -> io::Result<Vec<(String, Duration)>> {
    let list = remote.list("locks")?;
    let now = list.iter().find(|l| l.0 == owner).map(|l| l.2).unwrap_or_else(SystemTime::now);
    let mut out = Vec::new();
    for (name, _, modified) in list {
        if name == owner || !excludes(owner, &name) {
            continue;
        }
        let age = now.duration_since(modified).unwrap_or_default();
        // A stale lock's body that cannot be read is not taken for "nothing pending": that
        // node may have left records that name chunks only its packs hold (a gc that went
        // on would take them), so the caller fails instead and tries again later.
        let pending = || -> io::Result<bool> { Ok(remote.get(&format!("locks/{name}"))?.is_some_and(|b| b.starts_with(PENDING.as_bytes()))) };
        if age < LOCK_STALE || pending()? {
            out.push((name, age));
        }
    }
    Ok(out)
}

/// Takes the bucket's writer lock as `owner` (a name unique to this node): writes
/// `locks/<owner>`, then lists the locks; if another that is live is there, ours is removed
/// again and the call fails naming the other. Two processes racing both back off. Ages are
/// the object store's times (our lock's against theirs), not this node's clock.
pub fn take_lock(remote: &Remote, owner: &str, what: &str) -> io::Result<()> {
    let name = format!("locks/{owner}");
    remote.put(&name, what.as_bytes().to_vec())?;
    let live = match live_locks(remote, owner) {
        Ok(l) => l,
        Err(e) => {
            let _ = remote.delete(&name);
            return Err(e);
        }
    };
    if let Some((other, age)) = live.first() {
        let _ = remote.delete(&name);
        return Err(io::Error::new(
            io::ErrorKind::WouldBlock,
            format!("{other}, whose lock in the bucket was renewed {} s ago (one not renewed for {} s is taken over, unless its node left packs to upload)", age.as_secs(), LOCK_STALE.as_secs()),
        ));
    }
    Ok(())
}

/// Renews the lock; fails with `PermissionDenied` if another node holds a live lock now (ours
/// lapsed while the object store was out of reach, and it took over): this process must
/// stop writing to the bucket.
pub fn refresh_lock(remote: &Remote, owner: &str) -> io::Result<()> {
    let name = format!("locks/{owner}");
    // Gone: deleted by hand (the remedy for a node that is dead) or by whoever took over.
    // Written again empty, it would lose its "pending" mark and let a gc in over this node's
    // unpublished records later: this node stops writing instead.
    let Some(body) = remote.get(&name)? else {
        return Err(io::Error::new(io::ErrorKind::PermissionDenied, format!("{name} is gone from the bucket (deleted, or taken over): this node writes no more to it")));
    };
    remote.put(&name, body)?;
    let mut live = live_locks(remote, owner)?;
    if !live.is_empty() && owner.starts_with(LEASE) {
        // A gc lock met while it is being taken: that gc sees this lease and backs off at
        // once. Only one still there a moment later means this lease had lapsed.
        std::thread::sleep(Duration::from_secs(3));
        live = live_locks(remote, owner)?;
    }
    if let Some((other, _)) = live.into_iter().next() {
        return Err(io::Error::new(io::ErrorKind::PermissionDenied, format!("{other} took over the bucket's lock: this node writes no more to it")));
    }
    Ok(())
}

/// Marks the lock as that of a node that stopped with packs to upload (see `PENDING`).
pub fn mark_pending(remote: &Remote, owner: &str, packs: usize) -> io::Result<()> {
    remote.put(&format!("locks/{owner}"), format!("{PENDING}: {packs} packs\n").into_bytes())
}

pub fn unlock(remote: &Remote, owner: &str) -> io::Result<()> {
    remote.delete(&format!("locks/{owner}"))
}
