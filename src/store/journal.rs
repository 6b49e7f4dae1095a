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

use super::{io_at, Ns, Result, Store, StoreError};
use crate::digest::ChunkKey;
use crate::index::{Batch, ChunkEntry, LogOp};
use crate::pack::{self, ChunkKind, Codec, OpenPack};
use crate::LockExt;

/// Version of `MetaRecord`'s layout; a record of another version is refused, not guessed at.
pub const LOG_VERSION: u32 = 1;
/// Index meta records (not themselves logged) naming the last record the index applied.
pub const APPLIED_SEQ: &str = "log_applied_seq";
pub const APPLIED_PACK: &str = "log_applied_pack";
/// A journal pack is sealed past this size (records are small; this bounds what an open
/// scans for unapplied records).
const JOURNAL_PACK_TARGET: u64 = 4 << 20;

/// The journal's own open pack and the next record's sequence number.
pub(super) struct Journal {
    pub open: Option<OpenPack>,
    pub next_seq: u64,
}

/// One record of the metadata log: the changes of one index batch.
#[derive(Debug, Serialize, Deserialize)]
pub struct MetaRecord {
    pub version: u32,
    pub seq: u64,
    pub ops: Vec<LogOp>,
}

impl MetaRecord {
    pub fn decode(raw: &[u8]) -> std::result::Result<MetaRecord, String> {
        let r: MetaRecord = postcard::from_bytes(raw).map_err(|e| format!("undecodable metadata log record: {e}"))?;
        if r.version != LOG_VERSION {
            return Err(format!("metadata log record of version {} (this warcfs reads {LOG_VERSION})", r.version));
        }
        Ok(r)
    }
}

impl Store {
    /// Writes `b`: first as a record of the metadata log, synced, then into the index. The
    /// caller holds the namespace lock (`ns`) and has made every chunk `b` references
    /// durable.
    pub(super) fn write_batch(&self, _ns: &mut Ns, mut b: Batch) -> Result<()> {
        let mut rec = MetaRecord { version: LOG_VERSION, seq: 0, ops: b.log().to_vec() };
        let (key, entry, seq) = {
            let mut j = self.journal.locked();
            rec.seq = j.next_seq;
            let raw = postcard::to_allocvec(&rec).expect("in-memory serialisation cannot fail");
            let stored = zstd::bulk::compress(&raw, 3).map_err(|err| StoreError::Io { path: self.root.join("packs-tmp"), err })?;
            let key = ChunkKey { digest: (self.digest)(&raw), seq: 0 };
            let dir = self.root.join("packs-tmp");
            if j.open.is_none() {
                let id = self.alloc_pack_id();
                j.open = Some(OpenPack::create(&dir, id).map_err(io_at(&dir))?);
            }
            let open = j.open.as_mut().expect("journal pack exists");
            let info = open.append(key, ChunkKind::Meta, Codec::Zstd, raw.len() as u32, &stored).map_err(io_at(&dir))?;
            open.sync().map_err(io_at(&dir))?;
            crate::failpoint::crash_at("log_synced");
            let entry = ChunkEntry { pack: open.id, offset: info.offset, stored_len: info.stored_len, raw_len: info.raw_len, codec: info.codec, kind: info.kind, refs: 1 };
            if open.len() >= JOURNAL_PACK_TARGET {
                self.seal_journal(&mut j)?;
            }
            j.next_seq += 1;
            (key, entry, rec.seq)
        };
        self.note_applied(&mut b, &key, &entry, seq);
        self.index.write(b)?;
        Ok(())
    }

    /// What the index notes beside a record's changes: the record's own chunk entry (so gc
    /// keeps it, refcount 1 for good) and that it is applied.
    fn note_applied(&self, b: &mut Batch, key: &ChunkKey, entry: &ChunkEntry, seq: u64) {
        b.put_chunk_unlogged(&self.index, key, entry);
        b.put_meta_u64_unlogged(&self.index, APPLIED_SEQ, seq);
        b.put_meta_u64_unlogged(&self.index, APPLIED_PACK, entry.pack);
    }

    pub(super) fn seal_journal(&self, j: &mut Journal) -> Result<()> {
        if let Some(open) = j.open.take() {
            self.seal_pack(open)?;
        }
        Ok(())
    }

    /// At open: applies the records that reached a pack but not the index (the last change
    /// before a crash), in sequence order, and sets the next sequence number.
    pub(super) fn roll_forward(&self) -> Result<()> {
        let applied = self.index.meta_u64_opt(APPLIED_SEQ)?;
        let from_pack = self.index.meta_u64(APPLIED_PACK)?;
        let mut pending: Vec<(MetaRecord, ChunkKey, ChunkEntry)> = Vec::new();
        for id in self.pack_ids()?.into_iter().filter(|&id| id >= from_pack) {
            self.each_record(id, |rec, key, entry| {
                if applied.is_none_or(|a| rec.seq > a) {
                    pending.push((rec, key, entry));
                }
                Ok(())
            })?;
        }
        pending.sort_by_key(|(r, ..)| r.seq);
        let mut last = applied;
        for (rec, key, entry) in pending {
            if last.is_some_and(|l| rec.seq != l + 1) {
                return Err(StoreError::Log(format!("metadata log record {} follows {} (a record is missing)", rec.seq, last.unwrap_or(0))));
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

    /// Every metadata log record in pack `id`, with its chunk key and entry.
    pub(super) fn each_record(&self, id: u64, mut f: impl FnMut(MetaRecord, ChunkKey, ChunkEntry) -> Result<()>) -> Result<()> {
        for blob in self.pack_blobs(id)? {
            if pack::ChunkKind::from_u8(blob.kind) != ChunkKind::Meta {
                continue;
            }
            let raw = self.packs.read(id, blob.offset, &blob.key, blob.stored_len)?;
            let rec = MetaRecord::decode(&raw).map_err(|e| StoreError::Log(format!("pack {id:016x} offset {}: {e}", blob.offset)))?;
            let entry = ChunkEntry { pack: id, offset: blob.offset, stored_len: blob.stored_len, raw_len: blob.raw_len, codec: blob.codec, kind: blob.kind, refs: 1 };
            f(rec, blob.key, entry)?;
        }
        Ok(())
    }
}
