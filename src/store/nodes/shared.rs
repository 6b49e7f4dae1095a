//! A store several nodes write at once (format version 6 or 8, `init --backend URL --writers
//! several`): what each node owns, and how a node takes in the others' changes.
//!
//! Each node writes only under its own directory at the root, `/NAME/` (`init --node-name`):
//! its inode and recipe ids are in its own range (`node << 48`), and every index key it
//! writes is its own: its inodes, the entries of its directories (and its directory's entry
//! at the root), its recipes, its counters. So no two nodes ever write one key, and a node
//! reaches the same namespace as every other by applying each node's metadata log in that
//! node's order, whatever the order between nodes. Two nodes cannot write the same path:
//! each has its own directory, and every node reads all of them. The root directory itself
//! is made once, by the node that created the store, and changed by no one after.
//!
//! Reference counts are each node's own: applying another node's record that adds a recipe
//! adds a reference to every chunk it uses (`recipe::references`), one that removes a recipe
//! takes them away; the record's own chunk changes (the writer's counts) are left out, as are
//! its counters. The chunks themselves come from the packs' footers (`follow`).

use crate::store::namespace::{Inode, InodeKind, ROOT_INO};
use crate::bucket::node_of;
use crate::store::journal::{applied_key, checkpoint_key};
use crate::store::{Result, Store, StoreError};
use crate::digest::ChunkKey;
use crate::LockExt;
use crate::index::{Batch, LogOp, CF_CHUNK, CF_DIRENT, CF_INODE, CF_META, CF_RECIPE};
use crate::recipe::{self, RefDelta};

/// The id (inode or recipe) a namespace key or value starts with.
fn id_of(k: &[u8]) -> Option<u64> {
    k.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes)
}

/// The inodes a log record's ops change (put or delete): what a mount must tell the kernel
/// to forget when it applies another node's record.
pub(in crate::store) fn inodes_changed(ops: &[LogOp]) -> impl Iterator<Item = u64> + '_ {
    ops.iter().filter_map(|op| match op {
        LogOp::Put(CF_INODE, k, _) | LogOp::Delete(CF_INODE, k) => id_of(k),
        _ => None,
    })
}

/// Where a command writes when not told: the root, or on a store several nodes write, the
/// node's own directory. (The root for a store that does not exist yet, or whose settings
/// cannot be read: opening it says why.)
pub fn default_dir(root: &std::path::Path) -> String {
    match crate::store::read_config(&crate::store::layout::config(root)) {
        Ok(c) if crate::store::several_writers(c.version) => format!("/{}", c.node_name.unwrap_or_default()),
        _ => "/".into(),
    }
}

impl Store {
    /// What this store is, decided at open.
    pub fn mode(&self) -> crate::store::Mode {
        self.mode
    }

    /// Whether this node writes a store several nodes write (it also follows the others).
    pub fn is_shared_writer(&self) -> bool {
        self.mode == crate::store::Mode::SharedWriter
    }

    /// This node's number (0 on a local store).
    pub(in crate::store) fn node(&self) -> u16 {
        self.config.node.unwrap_or(0)
    }

    /// The first id of this node's range of inode and recipe ids: 0 (one counter) unless
    /// several nodes write the store.
    pub(in crate::store) fn id_base(&self) -> u64 {
        if self.mode.shared() {
            (self.node() as u64) << 48
        } else {
            0
        }
    }

    /// Whether this node may change inode `ino` (see `check_owns`).
    pub fn owns(&self, ino: u64) -> bool {
        !self.mode.shared() || node_of(ino) == self.node() && ino != ROOT_INO
    }

    /// Fails (`StoreError::NotOwned`, naming `what`) unless this node may change inode `ino` (or add and remove entries in it, for a
    /// directory): always on a store one node writes; on a shared store, only its own.
    pub fn check_owns(&self, ino: u64, what: &[u8]) -> Result<()> {
        if self.owns(ino) {
            return Ok(());
        }
        let name = self.config.node_name.clone().unwrap_or_default();
        Err(StoreError::NotOwned {
            what: String::from_utf8_lossy(what).into_owned(),
            node: name,
            owner: if ino == ROOT_INO { "the store's root, which no node changes".into() } else { format!("node {:04x}", node_of(ino)) },
        })
    }

    /// `check_owns` for an inode known by its number only (FUSE opens and attribute
    /// changes): nothing is formatted unless it fails.
    pub fn check_owns_inode(&self, ino: u64) -> Result<()> {
        if self.owns(ino) {
            return Ok(());
        }
        self.check_owns(ino, format!("<inode {ino}>").as_bytes())
    }

    /// This node's directory at the root of a shared store, made on the node's first open.
    pub(in crate::store) fn ensure_node_dir(&self) -> Result<()> {
        if self.mode != crate::store::Mode::SharedWriter {
            return Ok(());
        }
        let name = self.config.node_name.clone().unwrap_or_default();
        let ino = self.id_base() | 1;
        match self.index.lookup(ROOT_INO, name.as_bytes())? {
            Some(found) if found == ino => Ok(()),
            Some(found) => Err(StoreError::NodeNameTaken { name, theirs: node_of(found), ours: self.node() }),
            None => {
                let mut b = Batch::new();
                let mut d = Inode::new(InodeKind::Dir, 0o755);
                d.parent = ROOT_INO;
                b.put_inode(&self.index, ino, &d);
                b.put_dirent(&self.index, ROOT_INO, name.as_bytes(), ino);
                // Counters start in this node's range (`alloc` keeps them there).
                b.put_meta_u64(&self.index, "next_ino", ino + 1);
                b.put_meta_u64(&self.index, "next_recipe", ino + 1);
                self.write_batch(&mut self.ns.locked(), b)
            }
        }
    }

    /// Whether a namespace record belongs in this node's checkpoint: on a shared store, only
    /// the keys this node writes (and the root's inode, which no one changes), so that a
    /// checkpoint never carries another node's keys back over that node's later changes.
    pub(in crate::store) fn checkpoints(&self, op: &LogOp) -> bool {
        if !self.mode.shared() {
            return true;
        }
        let LogOp::Put(cf, key, value) = op else { return true };
        let mine = |ino: Option<u64>| ino.is_some_and(|i| node_of(i) == self.node());
        match *cf {
            CF_INODE => id_of(key) == Some(ROOT_INO) || mine(id_of(key)),
            CF_DIRENT if id_of(key) == Some(ROOT_INO) => mine(id_of(value)),
            CF_DIRENT | CF_RECIPE => mine(id_of(key)),
            _ => true,
        }
    }

    /// The references recipe `rid` holds as this index has it, if it has it.
    fn held_references(&self, rid: u64) -> Result<Option<Vec<ChunkKey>>> {
        let mut keys = Vec::new();
        while let Some(k) = self.index.recipe_piece(rid, keys.len() as u32)? {
            keys.push(k);
        }
        if keys.is_empty() {
            return Ok(None);
        }
        let mut pieces = Vec::with_capacity(keys.len());
        for (i, k) in keys.iter().enumerate() {
            let piece = i as u32;
            pieces.push(self.piece_in(rid, piece, k)?.ok_or_else(|| StoreError::Recipe { rid, piece, what: format!("its chunk {} is missing", k.short()) })?);
        }
        Ok(Some(recipe::references(&pieces, &keys)))
    }

    /// Applies record `seq` of node `node`'s log (`ops`) to this node's index: its inode,
    /// entry and recipe changes as they are, and the reference changes its recipes make
    /// here. Returns the chunks it needs that are not in this index yet (their pack not
    /// uploaded or not seen yet), with nothing applied; the caller tries again later.
    /// `checkpoint`: where the checkpoint this record completes begins, if it does.
    pub(in crate::store) fn apply_foreign(&self, node: u16, seq: u64, ops: &[LogOp], checkpoint: Option<u64>) -> Result<Vec<ChunkKey>> {
        let mut delta = RefDelta::default();
        // Recipes it removes: what they held goes (read before they are gone).
        for op in ops {
            if let LogOp::DeleteRange(CF_RECIPE, a, _) | LogOp::Delete(CF_RECIPE, a) = op {
                if let Some(refs) = id_of(a).map(|rid| self.held_references(rid)).transpose()?.flatten() {
                    delta.add(refs, -1);
                }
            }
        }
        // Recipes it adds (not already here: a checkpoint repeats what its node has).
        let mut added: std::collections::BTreeMap<u64, Vec<(u32, ChunkKey)>> = Default::default();
        for op in ops {
            if let LogOp::Put(CF_RECIPE, k, v) = op {
                let (Some(rid), Some(piece), Some(key)) = (id_of(k), k.get(8..12).and_then(|b| b.try_into().ok()).map(u32::from_be_bytes), ChunkKey::from_bytes(v)) else {
                    return Err(StoreError::BadLogRecord { at: format!("node {node:04x} record {seq}"), what: "undecodable recipe entry".into() });
                };
                added.entry(rid).or_default().push((piece, key));
            }
        }
        for (rid, mut pieces) in added {
            if self.index.recipe_piece(rid, 0)?.is_some() {
                continue;
            }
            pieces.sort_by_key(|p| p.0);
            let keys: Vec<ChunkKey> = pieces.iter().map(|p| p.1).collect();
            let mut decoded = Vec::with_capacity(keys.len());
            for (i, k) in keys.iter().enumerate() {
                let Some(piece) = self.piece_in(rid, i as u32, k)? else { return Ok(vec![*k]) };
                decoded.push(piece);
            }
            delta.add(recipe::references(&decoded, &keys), 1);
        }
        // Counts are read and written under the namespace lock, as commits change them.
        let _ns = self.ns.locked();
        let mut extra = Batch::new();
        let mut missing = Vec::new();
        for (key, d) in delta.0 {
            let Some(mut e) = self.index.chunk(&key)? else {
                if d > 0 {
                    missing.push(key);
                }
                continue;
            };
            let refs = e.refs as i64 + d;
            if refs < 0 {
                // This index lacked references the other node's recipe held: fsck names it.
                log::error!("node {node:04x} record {seq}: refcount of chunk {} would drop below zero ({refs}); set to 0", key.short());
            }
            e.refs = refs.max(0) as u64;
            extra.put_chunk_unlogged(&self.index, &key, &e);
        }
        extra.put_meta_u64_unlogged(&self.index, &applied_key(node), seq);
        if let Some(first) = checkpoint {
            extra.put_meta_u64_unlogged(&self.index, &checkpoint_key(node), first);
        }
        if !missing.is_empty() {
            return Ok(missing);
        }
        let kept: Vec<LogOp> = ops.iter().filter(|op| !matches!(op.cf(), CF_CHUNK | CF_META)).cloned().collect();
        self.index.apply(&kept, false, extra)?;
        Ok(missing)
    }
}

/// The bucket's gc lock, held while a gc of a shared store runs: renewed by a thread of its
/// own (a gc can outlast the lock's staleness), given back when dropped.
pub(in crate::store) struct GcLock {
    remote: std::sync::Arc<crate::bucket::client::RemotePacks>,
    owner: String,
    stop: std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
    renewer: Option<std::thread::JoinHandle<()>>,
}

impl GcLock {
    fn start(remote: std::sync::Arc<crate::bucket::client::RemotePacks>, owner: String) -> std::io::Result<GcLock> {
        let stop = std::sync::Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
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

    /// Before gc deletes anything: fails if another node holds a live lock now (this one
    /// lapsed, and a node took its lease meanwhile).
    pub(in crate::store) fn still_exclusive(&self) -> Result<()> {
        let check = || crate::bucket::lock::refresh_lock(&self.remote.remote, &self.owner);
        // A node that writes its lease just now (to open the store) sees this lock and backs
        // off at once: look again a moment later before giving up the work done.
        check()
            .or_else(|_| {
                std::thread::sleep(std::time::Duration::from_secs(3));
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

impl Store {
    /// Before a gc of a shared store: takes the bucket's gc lock, which no other node's live
    /// lease allows (restic's exclusive lock: no other node has an upload in flight that
    /// relies on a chunk this gc could take), then takes in everything the other nodes
    /// published, so that every reference any node holds counts. None on other stores.
    pub(in crate::store) fn gc_prepare(&self) -> Result<Option<GcLock>> {
        if !self.mode.shared() {
            return Ok(None);
        }
        let r = self.bucket.as_ref().ok_or_else(|| StoreError::Bug("a shared store without its bucket".into()))?;
        let owner = format!("{}{:04x}", crate::bucket::lock::GC, self.node());
        let what = format!("gc on {} pid {} {}", crate::bucket::hostname(), std::process::id(), self.root.display());
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
        self.follow()?;
        let (busy, waiting) = {
            let st = self.follow.locked();
            (st.busy, st.waiting.len())
        };
        if busy {
            return Err(StoreError::GcRefused("this node is taking in the other nodes' changes at the moment; run gc again".into()));
        }
        if waiting > 0 {
            return Err(StoreError::GcRefused(format!(
                "{waiting} metadata log records of other nodes wait for packs not in the bucket yet (a node stopped with packs to upload?); gc would not see every reference"
            )));
        }
        Ok(Some(lock))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Config, FileMeta, Timestamp, SHARED_FORMAT_VERSION};

    fn shared_store(dir: &std::path::Path, node: u16, name: &str) -> Store {
        let config = Config {
            version: SHARED_FORMAT_VERSION,
            backend: Some(format!("file://{}", dir.join("bucket").display())),
            node: Some(node),
            node_name: Some(name.into()),
            ..Config::default()
        };
        Store::init(&dir.join(name), config).unwrap()
    }

    /// Nodes 3 ("three") and 5 ("five") of one bucket in `dir`, and a file's attributes.
    fn two_nodes(dir: &std::path::Path) -> (Store, Store, FileMeta) {
        (shared_store(dir, 3, "three"), shared_store(dir, 5, "five"), FileMeta { mode: 0o644, mtime: Timestamp::now() })
    }

    /// A node writes under its own directory only, with ids in its range, and its
    /// checkpoint carries only its own keys.
    #[test]
    fn a_node_of_a_shared_store_writes_and_checkpoints_only_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let st = shared_store(dir.path(), 3, "three");
        let own = st.resolve("/three").unwrap();
        assert_eq!(own, 3 << 48 | 1);
        let meta = FileMeta { mode: 0o644, mtime: Timestamp::now() };
        let put = st.put_file(own, b"a.warc", b"WARC/1.0\r\n\r\n", meta).unwrap();
        assert_eq!(node_of(put.ino), 3);
        let refused = st.put_file(ROOT_INO, b"b.warc", b"x", meta).unwrap_err();
        assert!(matches!(refused, StoreError::NotOwned { .. }), "{refused}");
        assert!(refused.to_string().contains("writes only under /three/"), "{refused}");
        assert!(st.mkdir_p("/elsewhere").is_err());
        st.mkdir_p("/three/sub").unwrap();
        // Another node's keys: its inode, its directory's entries, its recipes.
        let theirs = 5u64 << 48 | 9;
        let put = |cf: u8, k: Vec<u8>, v: Vec<u8>| LogOp::Put(cf, k, v);
        assert!(!st.checkpoints(&put(CF_INODE, theirs.to_be_bytes().to_vec(), vec![])));
        assert!(!st.checkpoints(&put(CF_DIRENT, crate::index::dirent_key(theirs, b"x"), vec![0; 8])));
        assert!(!st.checkpoints(&put(CF_DIRENT, crate::index::dirent_key(ROOT_INO, b"five"), (5u64 << 48 | 1).to_be_bytes().to_vec())));
        assert!(!st.checkpoints(&put(CF_RECIPE, crate::index::recipe_key(theirs, 0).to_vec(), vec![])));
        // Its own, and the root's inode, which no one changes.
        assert!(st.checkpoints(&put(CF_INODE, own.to_be_bytes().to_vec(), vec![])));
        assert!(st.checkpoints(&put(CF_INODE, ROOT_INO.to_be_bytes().to_vec(), vec![])));
        assert!(st.checkpoints(&put(CF_DIRENT, crate::index::dirent_key(ROOT_INO, b"three"), own.to_be_bytes().to_vec())));
        assert!(st.checkpoints(&put(CF_DIRENT, crate::index::dirent_key(own, b"a.warc"), vec![0; 8])));
        let mut n = 0;
        st.index
            .for_each_namespace_record(|op| {
                n += st.checkpoints(&op) as usize;
                Ok(true)
            })
            .unwrap();
        assert!(n >= 6, "{n} of its own records");
    }

    /// Node B takes in A's records: A's file (and the references its recipe holds) appears
    /// on B; A's file left open after its removal (an orphan) stays A's to drop, and B's
    /// mount start neither drops nor counts it.
    #[test]
    fn a_node_takes_in_another_nodes_records_and_leaves_its_orphans_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, meta) = two_nodes(dir.path());
        let data: Vec<u8> = (0..200_000u32).flat_map(|i| (i % 251).to_le_bytes()).collect();
        let own = a.resolve("/three").unwrap();
        let kept = a.put_file(own, b"kept.warc", &data, meta).unwrap();
        let open = a.put_file(own, b"open.warc", &data[..5000], meta).unwrap();
        a.unlink_entry(own, b"open.warc", false, &|_| true).unwrap();
        a.publish().unwrap();
        a.wait_uploaded(std::time::Duration::from_secs(30)).unwrap();
        assert!(b.follow().unwrap().records > 0);
        let mut buf = vec![0u8; data.len()];
        let head = b.head(kept.ino).unwrap().unwrap();
        assert_eq!(b.read_at(&head, 0, &mut buf).unwrap(), data.len());
        assert!(buf == data, "A's file reads differently on B");
        // B's counts hold A's references: fsck on B finds them right.
        let rep = b.fsck(false).unwrap();
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
        let (orphans, staged) = b.orphans_and_staged().unwrap();
        assert!(!orphans.contains(&open.ino) && staged.is_empty(), "{orphans:?} {staged:?}");
        assert!(matches!(b.drop_orphan(open.ino).unwrap_err(), StoreError::NotOwned { .. }));
        assert_eq!(a.orphans_and_staged().unwrap().0, vec![open.ino]);
    }

    /// A follow round that fails part-way (here a recipe piece of the other node's that does
    /// not read back from the bucket) keeps the records it did not apply: once the piece
    /// reads again, the next round applies them (found by a review: they were dropped, their
    /// packs counted as taken in, so the file never appeared here, and a gc here would have
    /// taken its chunks for garbage).
    #[test]
    fn a_follow_round_that_fails_keeps_the_records_it_did_not_apply() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, meta) = two_nodes(dir.path());
        let data: Vec<u8> = (0..100_000u32).flat_map(|i| (i % 241).to_le_bytes()).collect();
        let own = a.resolve("/three").unwrap();
        let put = a.put_file(own, b"f.warc", &data, meta).unwrap();
        a.publish().unwrap();
        a.wait_uploaded(std::time::Duration::from_secs(30)).unwrap();
        // The file's recipe piece, damaged in the bucket (its last stored byte).
        let rid = a.head(put.ino).unwrap().unwrap().id;
        let key = a.index.recipe_piece(rid, 0).unwrap().unwrap();
        let e = a.index.chunk(&key).unwrap().unwrap();
        let mend = crate::test_support::rot_last_stored_byte(&dir.path().join("bucket").join("packs").join(crate::pack::pack_name(e.pack)), &e);
        assert!(b.follow().is_err(), "the damaged piece must stop the round");
        assert!(b.head(put.ino).unwrap().is_none());
        mend();
        assert!(b.follow().unwrap().records > 0, "the record waited");
        let head = b.head(put.ino).unwrap().expect("A's file, on B");
        let mut buf = vec![0u8; data.len()];
        assert_eq!(b.read_at(&head, 0, &mut buf).unwrap(), data.len());
        assert!(buf == data);
        assert!(b.fsck(false).unwrap().problems.is_empty());
    }

    /// gc keeps the entry of an unused chunk whose pack stays: node B, whose rebuilt index
    /// holds it (it is in a listed pack), may dedup against it, and A must be able to take
    /// in B's record that names it.
    #[test]
    fn an_unused_chunk_in_a_pack_gc_keeps_stays_usable_by_every_node() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, meta) = two_nodes(dir.path());
        drop(b);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut noise = |n: usize| -> Vec<u8> {
            (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect()
        };
        let (small, big) = (noise(20_000), noise(1_000_000));
        let own = a.resolve("/three").unwrap();
        a.put_file(own, b"small", &small, meta).unwrap();
        a.put_file(own, b"big", &big, meta).unwrap();
        // A crawl, whose recipe pieces (a record's extents each) compress well.
        let crawl: Vec<u8> = (0..300u32).flat_map(|r| crate::store::tests::warc_record(r, &crate::store::tests::site_page(r))).collect();
        a.put_file(own, b"crawl.warc", &crawl, meta).unwrap();
        a.remove("/three/small", false).unwrap();
        let rep = a.gc().unwrap();
        assert_eq!(rep.packs_settled, 0, "a store several nodes write is not settled: {rep:?}");
        // So its recipe pieces are written at the archival level from the start.
        let pieces: Vec<_> = a.index.chunk_iter().map(|i| i.unwrap()).filter(|(_, e)| e.kind == crate::pack::ChunkKind::Recipe as u8 && e.codec == crate::pack::Codec::Zstd as u8).collect();
        assert!(!pieces.is_empty());
        for (k, e) in &pieces {
            let raw = a.chunk_bytes(k, e).unwrap();
            assert_eq!(e.stored_len as usize, zstd::bulk::compress(&raw, crate::store::maint::settle::LEVEL as i32).unwrap().len(), "recipe piece {k}");
        }
        a.publish().unwrap();
        a.wait_uploaded(std::time::Duration::from_secs(30)).unwrap();
        // B opens after the gc (its index rebuilt from the bucket) and stores the same bytes.
        let b = Store::open(&dir.path().join("five"), false).unwrap();
        let theirs = b.resolve("/five").unwrap();
        let put = b.put_file(theirs, b"again", &small, meta).unwrap();
        assert!(put.new_bytes < 1000, "B stored {} new bytes of bytes the bucket holds", put.new_bytes);
        b.publish().unwrap();
        b.wait_uploaded(std::time::Duration::from_secs(30)).unwrap();
        assert!(a.follow().unwrap().records > 0, "A could not take in B's record");
        let head = a.head(put.ino).unwrap().expect("B's file on A");
        let mut buf = vec![0u8; small.len()];
        assert_eq!(a.read_at(&head, 0, &mut buf).unwrap(), small.len());
        assert!(buf == small);
        assert!(a.fsck(false).unwrap().problems.is_empty());
    }

    /// A node that never runs gc still checkpoints its log; the node that runs gc takes the
    /// checkpoint in and collects the records it supersedes, and a node rebuilt from the
    /// bucket afterwards has everything.
    #[test]
    fn a_nodes_own_checkpoints_let_another_nodes_gc_collect_its_old_records() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, meta) = two_nodes(dir.path());
        let theirs = b.resolve("/five").unwrap();
        for i in 0..20u32 {
            b.put_file(theirs, format!("f{i}").as_bytes(), format!("record {i}").as_bytes(), meta).unwrap();
        }
        assert!(!b.checkpoint_if_due(1000).unwrap());
        assert!(b.checkpoint_if_due(10).unwrap());
        b.publish().unwrap();
        b.wait_uploaded(std::time::Duration::from_secs(30)).unwrap();
        drop(b);
        a.follow().unwrap();
        let first = a.index.meta_u64_opt(&checkpoint_key(5)).unwrap();
        assert!(first.is_some_and(|f| f >= 20), "{first:?}");
        let live_records = |s: &Store| s.stats().unwrap().log_records;
        let before = live_records(&a);
        let rep = a.gc().unwrap();
        assert!(live_records(&a) < before, "gc kept node 5's superseded records ({before}): {rep:?}");
        // Rebuilt from the bucket: every file of node 5 is there.
        let b = Store::open(&dir.path().join("five"), false).unwrap();
        let mut names: Vec<String> = b.list("/five").unwrap().into_iter().map(|e| String::from_utf8(e.name).unwrap()).collect();
        names.sort();
        assert_eq!(names.len(), 20, "{names:?}");
        assert!(b.fsck(false).unwrap().problems.is_empty());
    }
}
