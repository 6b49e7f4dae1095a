//! The metadata log: every index batch is also a record in the packs, durable before the
//! index applies it.
//!
//! A record (`MetaRecord`: a sequence number and the batch's changes, postcard, zstd) is a
//! blob of kind `Meta` in a pack of its own stream (the journal's open pack, next to the
//! data writer's, so a namespace change never waits for an ingest in progress). With the
//! recipe pieces stored as blobs too, the packs hold everything needed to read every file,
//! and the index is a cache of them: `repair index` rebuilds it from the packs alone, and an
//! open applies a record that reached a pack but not the index (a crash between the two).
//!
//! Order of one change: the chunks and recipe pieces it references are synced (by the data
//! writer), then its record is appended to the journal pack and synced, then the index
//! batch, which also notes the record's sequence number and pack, is written. Callers hold
//! the namespace lock, so records are applied in sequence order and at most the last one
//! can be missing from the index after a crash.

use serde::{Deserialize, Serialize};

use super::{io_at, Ns, Result, Share, Store, StoreError, ROOT_INO};
use crate::bucket::node_of;
use crate::digest::ChunkKey;
use crate::index::{id_of, Batch, ChunkEntry, LogOp, CF_CHUNK, CF_DIRENT, CF_INODE, CF_RECIPE};
use crate::pack::{self, ChunkKind, Codec, OpenPack};
use crate::LockExt;

/// Version of `MetaRecord`'s layout; a record of another version is refused, not guessed at.
/// Version 2 (stores several nodes write) adds the writing node's number after the rest.
pub const LOG_VERSION: u32 = 1;
pub const LOG_VERSION_SHARED: u32 = 2;
/// The index meta record (not itself logged) naming the last record the index applied.
pub const APPLIED_SEQ: &str = "log_applied_seq";
/// The index meta key holding the last record of node `node`'s log this index applied (a
/// store several nodes write: each node's log on its own; its own stay in `APPLIED_SEQ`).
pub(crate) fn applied_key(node: u16) -> String {
    format!("{APPLIED_SEQ}.{node:04x}")
}

/// The index meta key holding where node `node`'s latest complete checkpoint this index
/// applied begins: its records before that are garbage.
pub(crate) fn checkpoint_key(node: u16) -> String {
    format!("log_checkpoint.{node:04x}")
}

/// The index meta key holding how many changes this node's last checkpoint held.
fn checkpoint_size_key(node: u16) -> String {
    format!("log_checkpoint_size.{node:04x}")
}

/// How many records a shared store's writer writes between two checkpoints of its own
/// (`checkpoint_if_due`).
pub(crate) const CHECKPOINT_RECORDS: u64 = 10_000;

/// A journal pack is sealed past this size (records are small; this bounds what an open
/// scans for unapplied records).
const JOURNAL_PACK_TARGET: u64 = 4 << 20;

/// The journal's own open pack and the next record's sequence number.
pub(super) struct Journal {
    pub open: Option<OpenPack>,
    pub next_seq: u64,
    /// Set when a write failed after a record may have reached the disk: the log and the
    /// index may disagree until the store is reopened (which applies what reached the
    /// disk), so nothing more is written until then.
    pub poisoned: bool,
}

/// One record of the metadata log: the changes of one index batch, or one part of a
/// checkpoint.
#[derive(Debug, Serialize, Deserialize)]
pub struct MetaRecord {
    pub version: u32,
    pub seq: u64,
    pub ops: Vec<LogOp>,
    /// Set on the records of a checkpoint: a dump, as puts, of every namespace record
    /// (meta, inode, dirent, recipe) as of `first_seq`, over records `first_seq` up to the
    /// one marked `last`. A complete checkpoint supersedes every record before it.
    pub checkpoint: Option<CheckpointPart>,
    /// The node whose log the record is in (version 2, a shared store); None in version 1,
    /// where one node writes at a time and records are numbered across them.
    pub node: Option<u16>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointPart {
    pub first_seq: u64,
    pub last: bool,
}

/// Raw bytes of changes per checkpoint record (bounds what writing or reading one holds).
const CHECKPOINT_PART: usize = 4 << 20;

impl MetaRecord {
    pub fn decode(raw: &[u8]) -> std::result::Result<MetaRecord, String> {
        #[derive(Deserialize)]
        struct V1 {
            version: u32,
            seq: u64,
            ops: Vec<LogOp>,
            checkpoint: Option<CheckpointPart>,
        }
        let bad = |e: postcard::Error| format!("undecodable metadata log record: {e}");
        let (version, _) = postcard::take_from_bytes::<u32>(raw).map_err(bad)?;
        match version {
            LOG_VERSION => {
                let r: V1 = postcard::from_bytes(raw).map_err(bad)?;
                Ok(MetaRecord { version: r.version, seq: r.seq, ops: r.ops, checkpoint: r.checkpoint, node: None })
            }
            LOG_VERSION_SHARED => {
                #[derive(Deserialize)]
                struct V2 {
                    v1: V1,
                    node: u16,
                }
                let r: V2 = postcard::from_bytes(raw).map_err(bad)?;
                Ok(MetaRecord { version: r.v1.version, seq: r.v1.seq, ops: r.v1.ops, checkpoint: r.v1.checkpoint, node: Some(r.node) })
            }
            v => Err(format!("metadata log record of version {v} (this warcfs reads {LOG_VERSION} and {LOG_VERSION_SHARED})")),
        }
    }

    /// A record's bytes as `decode` reads them: version 1, or version 2 with `node` (the
    /// node whose log it is in, on a store several nodes write).
    fn encode(seq: u64, ops: &[LogOp], checkpoint: Option<CheckpointPart>, node: Option<u16>) -> Vec<u8> {
        /// `MetaRecord` as written: the same encoding, borrowing the batch's changes.
        #[derive(Serialize)]
        struct Out<'a> {
            version: u32,
            seq: u64,
            ops: &'a [LogOp],
            checkpoint: Option<CheckpointPart>,
        }
        /// Version 2: version 1's fields, then the node.
        #[derive(Serialize)]
        struct Out2<'a> {
            v1: Out<'a>,
            node: u16,
        }
        match node {
            Some(node) => postcard::to_allocvec(&Out2 { v1: Out { version: LOG_VERSION_SHARED, seq, ops, checkpoint }, node }),
            None => postcard::to_allocvec(&Out { version: LOG_VERSION, seq, ops, checkpoint }),
        }
        .expect("in-memory serialisation cannot fail")
    }
}

/// Whether namespace record `op` belongs in the checkpoint of a node of `share`: on a store
/// several nodes write, only the keys this node writes (and the root's inode, which no one
/// changes), so that a checkpoint never carries another node's keys back over that node's
/// later changes.
pub(super) fn in_checkpoint(share: Share, op: &LogOp) -> bool {
    let Some(node) = share.log_node() else { return true };
    let LogOp::Put(cf, key, value) = op else { return true };
    let mine = |ino: Option<u64>| ino.is_some_and(|i| node_of(i) == node);
    match *cf {
        CF_INODE => id_of(key) == Some(ROOT_INO) || mine(id_of(key)),
        CF_DIRENT if id_of(key) == Some(ROOT_INO) => mine(id_of(value)),
        CF_DIRENT | CF_RECIPE => mine(id_of(key)),
        _ => true,
    }
}

impl Store {
    /// Writes `b`: first as a record of the metadata log, synced, then into the index. The
    /// caller holds the namespace lock (`ns`) and has made every chunk `b` references
    /// durable.
    pub(super) fn write_batch(&self, _ns: &mut Ns, mut b: Batch) -> Result<()> {
        refuse_on_follower(self)?;
        if b.log().iter().all(|op| op.cf() == CF_CHUNK) {
            // Chunk entries alone (gc moving or dropping chunks) follow from the packs and
            // the recipes: nothing to log. A crash before the index write leaves the old
            // entries, whose packs gc deletes only after it.
            return Ok(self.index.write(b)?);
        }
        // On a bucket-backed store, a full log pack is about to be sealed (and uploaded): the
        // data pack its records' chunks may be in goes first. Only if the writer is free
        // (gc and snapshot hold it, and an ingest holds it for a whole file: waiting here,
        // under `ns`, would stall every namespace change); otherwise a follower may briefly
        // see a file before its chunks (EIO until the data pack is up), never lose one.
        if self.packs.uploads() && self.journal.locked().open.as_ref().is_some_and(|o| o.len() >= JOURNAL_PACK_TARGET) {
            if let Ok(mut w) = self.writer.try_lock() {
                if w.open.as_ref().is_some_and(|o| !o.is_empty()) {
                    self.seal_open(&mut w)?;
                }
            }
        }
        let (key, entry, seq) = self.append_record(b.log(), None)?;
        self.note_applied(&mut b, &key, &entry, seq);
        self.index.write(b).inspect_err(|_| self.journal.locked().poisoned = true)?;
        Ok(())
    }

    /// Appends one record to the log's open pack and syncs it; returns its chunk key, entry
    /// and sequence number. A change's record (not a checkpoint part) first seals a full
    /// log pack: every record in it is applied then, so a record the index may lack is
    /// always in the open pack, which the next open recovers and applies (`roll_forward`).
    fn append_record(&self, ops: &[LogOp], checkpoint: Option<CheckpointPart>) -> Result<(ChunkKey, ChunkEntry, u64)> {
        {
            let mut j = self.journal.locked();
            if j.poisoned {
                return Err(StoreError::LogPoisoned);
            }
            if checkpoint.is_none() && j.open.as_ref().is_some_and(|o| o.len() >= JOURNAL_PACK_TARGET) {
                self.seal_journal(&mut j)?;
            }
            let raw = MetaRecord::encode(j.next_seq, ops, checkpoint, self.share().log_node());
            // Compressed as the store's chunks are (`init --compression`).
            let (codec, stored) = match self.config.compression {
                super::Compression::Zstd => (Codec::Zstd, std::borrow::Cow::Owned(zstd::bulk::compress(&raw, 3).map_err(|err| StoreError::Io { path: crate::store::layout::packs_tmp(&self.root), err })?)),
                super::Compression::None => (Codec::None, std::borrow::Cow::Borrowed(&raw[..])),
            };
            if stored.len() > pack::MAX_STORED as usize || raw.len() > pack::MAX_RAW as usize {
                // Readers refuse blobs past MAX_STORED, or holding more than MAX_RAW: such a
                // record could never be applied.
                return Err(StoreError::ChangeTooLarge { bytes: raw.len(), ops: ops.len() });
            }
            let key = self.record_key(&raw)?;
            let dir = crate::store::layout::packs_tmp(&self.root);
            if j.open.is_none() {
                let id = self.alloc_pack_id();
                j.open = Some(OpenPack::create(&dir, id, self.config.version).map_err(io_at(&dir))?);
            }
            let seq = j.next_seq;
            let open = j.open.as_mut().expect("journal pack exists");
            // A write that fails (a full disk) leaves at most a torn record past the pack's
            // end, which the next record overwrites and recovery would cut off: nothing
            // counts, and the log goes on once there is room.
            let info = match open.append(key, ChunkKind::Meta, codec, raw.len() as u32, &stored) {
                Ok(info) => info,
                Err(err) => {
                    open.discard_tail();
                    return Err(StoreError::Io { path: dir, err });
                }
            };
            // From here on the record may be on the disk: its number is used, and a failed
            // sync poisons the log (Linux may have dropped the unwritten pages, and a later
            // sync would not say so).
            j.next_seq += 1;
            if let Err(err) = j.open.as_mut().expect("journal pack exists").sync() {
                j.poisoned = true;
                return Err(StoreError::Io { path: dir, err });
            }
            let open = j.open.as_ref().expect("journal pack exists");
            crate::failpoint::crash_at("log_synced");
            let entry = ChunkEntry { pack: open.id, offset: info.offset, stored_len: info.stored_len, raw_len: info.raw_len, codec: info.codec, kind: info.kind, refs: 1 };
            Ok((key, entry, seq))
        }
    }

    /// The key of a log record of bytes `raw`: their SHA-256 whatever the store's digest (tests
    /// weaken that one so that chunks collide), at seq 0 unless a chunk holds that digest
    /// already. Such a chunk (its bytes this very record's, sequence number and all: crafted)
    /// keeps its key, and the record takes the digest's next seq, as bytes of another kind do
    /// (`chunks::kinds_share`): superseding the record must never touch the chunk. (A chunk
    /// of those bytes still waiting for its commit is not seen here; both are written under
    /// the namespace lock, and that commit then finds the record's entry and refuses to join
    /// it, `commit_with`: the file is stored again under the next seq.)
    pub(super) fn record_key(&self, raw: &[u8]) -> Result<ChunkKey> {
        let digest = crate::digest::sha256(raw);
        let seq = match self.index.chunk(&ChunkKey { digest, seq: 0 })? {
            None => 0,
            Some(_) => self.index.chunks_with_digest(&digest)?.iter().map(|(k, _)| k.seq + 1).max().unwrap_or(1),
        };
        Ok(ChunkKey { digest, seq })
    }

    /// Writes a checkpoint of the namespace (under the namespace lock, so it is the state
    /// as of its first record) and marks every earlier record garbage for gc: what bounds
    /// the log by the size of the namespace rather than by its history.
    /// `collect`: also set the refcount of every record it supersedes to 0 (gc, which then
    /// collects them). A shared store's writer also checkpoints now and then without it
    /// (`checkpoint_if_due`): the gc that follows, on whichever node, collects them then.
    pub(super) fn checkpoint(&self, _ns: &mut Ns, collect: bool) -> Result<()> {
        let first_seq = self.journal.locked().next_seq;
        let mut parts: Vec<(ChunkKey, ChunkEntry, u64)> = Vec::new();
        let mut ops: Vec<LogOp> = Vec::new();
        let mut size = 0usize;
        let mut err = None;
        let mut written = 0u64;
        let share = self.share();
        self.index.for_each_namespace_record(|op| {
            if !in_checkpoint(share, &op) {
                return Ok(true);
            }
            written += 1;
            size += op.bytes();
            ops.push(op);
            if size >= CHECKPOINT_PART {
                match self.append_record(&std::mem::take(&mut ops), Some(CheckpointPart { first_seq, last: false })) {
                    Ok(p) => parts.push(p),
                    Err(e) => err = Some(e),
                }
                size = 0;
            }
            Ok(err.is_none())
        })?;
        if let Some(e) = err {
            return Err(e);
        }
        parts.push(self.append_record(&ops, Some(CheckpointPart { first_seq, last: true }))?);
        crate::failpoint::crash_at("checkpoint_synced");
        let mut b = Batch::new();
        for (k, e, seq) in &parts {
            self.note_applied(&mut b, k, e, *seq);
        }
        if let Some(node) = share.log_node() {
            b.put_meta_u64_unlogged(&self.index, &checkpoint_key(node), first_seq);
            b.put_meta_u64_unlogged(&self.index, &checkpoint_size_key(node), written);
        }
        self.index.write(b).inspect_err(|_| self.journal.locked().poisoned = true)?;
        if !collect {
            return Ok(());
        }
        // Every earlier record is garbage now: refcount 0, a batch at a time (memory does not
        // grow with the log). A crash part way leaves some at 1, which the next checkpoint
        // sets to 0; repair reads from the newest whole checkpoint whatever they say.
        let current: std::collections::HashSet<ChunkKey> = parts.iter().map(|p| p.0).collect();
        let mut b = Batch::new();
        let mut n = 0usize;
        for item in self.index.chunk_iter() {
            let (k, mut e) = item?;
            if ChunkKind::from_u8(e.kind) == ChunkKind::Meta && e.refs > 0 && !current.contains(&k) && self.superseded(&k, &e)? {
                e.refs = 0;
                b.put_chunk_unlogged(&self.index, &k, &e);
                n += 1;
                if n.is_multiple_of(self.limits.batch_ops) {
                    self.index.write(std::mem::take(&mut b))?;
                }
            }
        }
        if !b.is_empty() {
            self.index.write(b)?;
        }
        Ok(())
    }

    /// For a writer of a store several nodes write (`nodes`): a checkpoint of this node's
    /// keys once `every` records, and at least as many as the last checkpoint held changes,
    /// have been written since the last (so checkpoints cost at most about as much as the
    /// log they supersede). Other nodes take it in as they follow, and the gc of any node
    /// then collects the records it supersedes: so this node's log stays the size of its
    /// namespace even if gc runs only elsewhere. Returns whether it wrote one.
    pub(crate) fn checkpoint_if_due(&self, every: u64) -> Result<bool> {
        let mut ns = self.ns.locked();
        let next = self.journal.locked().next_seq;
        let last = self.index.meta_u64_opt(&checkpoint_key(self.node()))?.unwrap_or(0);
        let last_size = self.index.meta_u64_opt(&checkpoint_size_key(self.node()))?.unwrap_or(0);
        if next.saturating_sub(last) < every.max(last_size) {
            return Ok(false);
        }
        self.checkpoint(&mut ns, false)?;
        Ok(true)
    }

    /// Whether a log record (not of the checkpoint just written) is superseded: on a store
    /// one node writes, every one is; on a shared store, this node's own, and another node's
    /// only once that node's own complete checkpoint covers it (this node's checkpoint holds
    /// none of the other nodes' keys).
    fn superseded(&self, key: &ChunkKey, e: &ChunkEntry) -> Result<bool> {
        let Some(own) = self.share().log_node() else { return Ok(true) };
        let rec = self.read_record(e.pack, e.offset, key, e.stored_len)?;
        match rec.node {
            Some(n) if n != own => Ok(self.index.meta_u64_opt(&checkpoint_key(n))?.is_some_and(|first| rec.seq < first)),
            _ => Ok(true),
        }
    }

    /// What the index notes beside a record's changes: the record's own chunk entry (so gc
    /// keeps it, refcount 1 for good) and that it is applied.
    fn note_applied(&self, b: &mut Batch, key: &ChunkKey, entry: &ChunkEntry, seq: u64) {
        b.put_chunk_unlogged(&self.index, key, entry);
        b.put_meta_u64_unlogged(&self.index, APPLIED_SEQ, seq);
    }

    pub(super) fn seal_journal(&self, j: &mut Journal) -> Result<()> {
        if let Some(open) = j.open.take() {
            self.seal_pack(open)?;
        }
        Ok(())
    }

    /// At open: applies the records that reached a pack but not the index (the last change
    /// before a crash, or the parts of a checkpoint), in sequence order, and sets the next
    /// sequence number. Such records are only ever in the journal's open pack, so only the
    /// packs recovered from `packs-tmp/` are read (by this open, or by one cut short before
    /// it applied them: `open::recover_packs`): a copy of a store's sealed packs (a
    /// snapshot) never rolls forward past its own index.
    pub(super) fn roll_forward(&self, recovered: &[u64]) -> Result<()> {
        let applied = self.index.meta_u64_opt(APPLIED_SEQ)?;
        // This node's own records only: another node's, which a gc here copied into a pack
        // of this node's (a shared store's gc keeps every node's live records), are that
        // node's log, numbered on their own, and `follow` takes them in.
        let own = self.share().log_node();
        let mut pending: Vec<(MetaRecord, ChunkKey, ChunkEntry)> = Vec::new();
        for &id in recovered {
            self.each_record(id, |rec, key, entry| {
                if rec.node == own && applied.is_none_or(|a| rec.seq > a) {
                    pending.push((rec, key, entry));
                }
                Ok(())
            })?;
        }
        pending.sort_by_key(|(r, ..)| r.seq);
        let mut last = applied;
        for (rec, key, entry) in pending {
            if rec.seq != last.map_or(0, |l| l + 1) {
                // Not what a crash leaves: keep the index as it is, and say so.
                log::warn!("metadata log record {} found after {:?} at open: not applied (`warcfs fsck`, or `repair index` with the index moved aside, rebuild from the log)", rec.seq, last);
                break;
            }
            log::info!("applying metadata log record {} that a crash kept from the index", rec.seq);
            let mut extra = Batch::new();
            self.note_applied(&mut extra, &key, &entry, rec.seq);
            self.index.apply(&rec.ops, true, extra)?;
            last = Some(rec.seq);
        }
        self.journal.locked().next_seq = last.map_or(0, |l| l + 1);
        Ok(())
    }

    /// The metadata log record stored at `offset` of pack `pack` under `key`.
    pub(crate) fn read_record(&self, pack: u64, offset: u64, key: &ChunkKey, stored_len: u32) -> Result<MetaRecord> {
        let raw = self.packs.read(pack, offset, key, stored_len)?;
        MetaRecord::decode(&raw).map_err(|e| StoreError::BadLogRecord { at: format!("pack {pack:016x} offset {offset}"), what: e.to_string() })
    }

    /// Every metadata log record in pack `id`, with its chunk key and entry.
    pub(super) fn each_record(&self, id: u64, mut f: impl FnMut(MetaRecord, ChunkKey, ChunkEntry) -> Result<()>) -> Result<()> {
        for blob in self.pack_blobs(id)? {
            if pack::ChunkKind::from_u8(blob.kind) != ChunkKind::Meta {
                continue;
            }
            let rec = self.read_record(id, blob.offset, &blob.key, blob.stored_len)?;
            let entry = ChunkEntry { pack: id, offset: blob.offset, stored_len: blob.stored_len, raw_len: blob.raw_len, codec: blob.codec, kind: blob.kind, refs: 1 };
            f(rec, blob.key, entry)?;
        }
        Ok(())
    }
}

/// Refuses a change on a follower's store (its index follows the bucket's writer), and on
/// a writer that another node's lock has fenced off.
pub(super) fn refuse_on_follower(store: &Store) -> Result<()> {
    if store.mode.follows() {
        return Err(StoreError::Follower(store.root.display().to_string()));
    }
    if store.packs.fenced() {
        return Err(StoreError::Fenced(store.root.clone()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both layouts decode: version 1 (one sequence) and version 2 (a node's own log).
    #[test]
    fn records_of_both_versions_decode_and_others_are_refused() {
        let ops = vec![LogOp::Put(2, vec![1, 2], vec![3]), LogOp::Delete(3, vec![4])];
        #[derive(Serialize)]
        struct V1<'a>(u32, u64, &'a [LogOp], Option<CheckpointPart>);
        #[derive(Serialize)]
        struct V2<'a>(V1<'a>, u16);
        let one = postcard::to_allocvec(&V1(LOG_VERSION, 7, &ops, None)).unwrap();
        let r = MetaRecord::decode(&one).unwrap();
        assert_eq!((r.seq, r.node, r.ops.clone()), (7, None, ops.clone()));
        let cp = Some(CheckpointPart { first_seq: 5, last: true });
        let two = postcard::to_allocvec(&V2(V1(LOG_VERSION_SHARED, 9, &ops, cp), 0x7a1)).unwrap();
        let r = MetaRecord::decode(&two).unwrap();
        assert_eq!((r.seq, r.node, r.ops, r.checkpoint), (9, Some(0x7a1), ops.clone(), cp));
        let three = postcard::to_allocvec(&V1(3, 1, &ops, None)).unwrap();
        assert!(MetaRecord::decode(&three).unwrap_err().contains("version 3"));
        assert!(MetaRecord::decode(&two[..two.len() - 1]).is_err(), "a cut record is refused");
    }

    /// A node writes under its own directory only, with ids in its range, and its
    /// checkpoint carries only its own keys.
    #[test]
    fn a_node_of_a_shared_store_writes_and_checkpoints_only_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let st = crate::store::tests::shared_store(dir.path(), 3, "three");
        let own = st.resolve("/three").unwrap();
        assert_eq!(own, 3 << 48 | 1);
        let meta = crate::store::FileMeta { mode: 0o644, mtime: crate::store::Timestamp::now() };
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
        assert!(!in_checkpoint(st.share(), &put(CF_INODE, theirs.to_be_bytes().to_vec(), vec![])));
        assert!(!in_checkpoint(st.share(), &put(CF_DIRENT, crate::index::dirent_key(theirs, b"x"), vec![0; 8])));
        assert!(!in_checkpoint(st.share(), &put(CF_DIRENT, crate::index::dirent_key(ROOT_INO, b"five"), (5u64 << 48 | 1).to_be_bytes().to_vec())));
        assert!(!in_checkpoint(st.share(), &put(CF_RECIPE, crate::index::recipe_key(theirs, 0).to_vec(), vec![])));
        // Its own, and the root's inode, which no one changes.
        assert!(in_checkpoint(st.share(), &put(CF_INODE, own.to_be_bytes().to_vec(), vec![])));
        assert!(in_checkpoint(st.share(), &put(CF_INODE, ROOT_INO.to_be_bytes().to_vec(), vec![])));
        assert!(in_checkpoint(st.share(), &put(CF_DIRENT, crate::index::dirent_key(ROOT_INO, b"three"), own.to_be_bytes().to_vec())));
        assert!(in_checkpoint(st.share(), &put(CF_DIRENT, crate::index::dirent_key(own, b"a.warc"), vec![0; 8])));
        let mut n = 0;
        st.index
            .for_each_namespace_record(|op| {
                n += in_checkpoint(st.share(), &op) as usize;
                Ok(true)
            })
            .unwrap();
        assert!(n >= 6, "{n} of its own records");
    }
}
