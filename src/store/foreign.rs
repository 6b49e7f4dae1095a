//! Other nodes' work taken into this node's index: the chunks of packs they wrote, where
//! they lie (`take_in_pack`, `move_to_copies`, `find_chunks`), and the records of their
//! metadata logs, applied as the index's own changes are: the one log of a store one node
//! writes at a time, as its writer wrote it (`apply_followed`), or on a store several nodes
//! write another node's record, with the references its recipes hold here (`apply_foreign`).
//! Which packs and records, and when, is the nodes wing's (`crate::nodes`).
//!
//! Reference counts are each node's own on a store several nodes write: applying another
//! node's record that adds a recipe adds a reference to every chunk it uses
//! (`recipe::references`), one that removes a recipe takes them away; the record's own chunk
//! changes (the writer's counts) are left out, as are its counters.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::journal::{applied_key, checkpoint_key, MetaRecord, APPLIED_SEQ};
use super::{io_at, Result, Store, StoreError};
use crate::bucket::PackList;
use crate::digest::ChunkKey;
use crate::index::{id_of, Batch, ChunkEntry, LogOp, CF_CHUNK, CF_META, CF_RECIPE};
use crate::pack::{BlobInfo, ChunkKind};
use crate::recipe::{self, RefDelta};
use crate::LockExt;

/// Which chunks the index knows keep their place when another node's pack holds them too.
pub(crate) enum Keep<'a> {
    /// Every one: a writer's index says where it put them (another node's copy of one is
    /// garbage for gc). Looked up and put under the namespace lock, as its commits put
    /// chunks too, so that a chunk a commit just put keeps its count.
    Known,
    /// Those in a pack of this listing: a follower keeps the copy it found first, as the
    /// writer does, until gc has trashed that pack (and written the copy read here).
    Listed(&'a HashSet<u64>),
}

/// A chunk entry of the blob `b` of pack `pack`, with `refs`.
fn entry(pack: u64, b: &BlobInfo, refs: u64) -> ChunkEntry {
    ChunkEntry { pack, offset: b.offset, stored_len: b.stored_len, raw_len: b.raw_len, codec: b.codec, kind: b.kind, refs }
}

impl Store {
    /// The sealed packs there are: (id, size), those on this disk and the bucket's.
    pub(crate) fn sealed_packs(&self) -> Result<PackList> {
        self.packs.sealed_packs().map_err(io_at(&self.root))
    }

    /// The blobs of sealed pack `id`: its footer, or if that is damaged, its blobs read one
    /// by one (they describe themselves, as a rebuild reads them: one bad pack must not stop
    /// a node following).
    pub(crate) fn blobs_of(&self, id: u64) -> Result<Vec<BlobInfo>> {
        match self.packs.footer(id) {
            Err(e @ crate::pack::PackError::Corrupt { .. }) => {
                log::warn!("{}: {e}; reading its blobs one by one instead", self.root.display());
                Ok(self.packs.scan(id)?)
            }
            r => Ok(r?),
        }
    }

    /// Puts the chunks of another node's pack `id` (its `blobs`) into the index where they
    /// lie, but those it knows that `keep` keeps where they are. Every blob is a chunk where
    /// it lies (a log record's and a dictionary's refs are 1 for good). Returns, of the
    /// chunks kept elsewhere, the copies met in this pack.
    pub(crate) fn take_in_pack(&self, id: u64, blobs: &[BlobInfo], keep: Keep) -> Result<Vec<(ChunkKey, ChunkEntry)>> {
        let _ns = matches!(keep, Keep::Known).then(|| self.ns.locked());
        let mut copies = Vec::new();
        let mut b = Batch::new();
        for blob in blobs {
            let known = self.index.chunk(&blob.key)?;
            if let Some(k) = known.as_ref().filter(|k| match keep {
                Keep::Known => true,
                Keep::Listed(live) => live.contains(&k.pack),
            }) {
                if k.pack != id {
                    copies.push((blob.key, entry(id, blob, 0)));
                }
                continue;
            }
            let refs = known.map(|e| e.refs).unwrap_or(matches!(ChunkKind::from_u8(blob.kind), ChunkKind::Meta | ChunkKind::Dict) as u64);
            b.put_chunk_unlogged(&self.index, &blob.key, &entry(id, blob, refs));
        }
        self.index.write(b)?;
        Ok(copies)
    }

    /// After packs left the listing (gc trashed them): a chunk kept in one of `departed`
    /// moves to its copy in `copies`, if it has one there (gc's new packs moved the others
    /// already). Then keeps in `copies` only those still `live` that are not where their chunk
    /// is kept now (gc moves every chunk of a pack it rewrites: they would pile up).
    pub(crate) fn move_to_copies(&self, copies: &mut HashMap<ChunkKey, ChunkEntry>, departed: &HashSet<u64>, live: &HashSet<u64>) -> Result<()> {
        let mut b = Batch::new();
        for (key, copy) in copies.iter() {
            if !live.contains(&copy.pack) {
                continue;
            }
            if let Some(e) = self.index.chunk(key)?.filter(|e| departed.contains(&e.pack)) {
                b.put_chunk_unlogged(&self.index, key, &ChunkEntry { refs: e.refs, ..copy.clone() });
            }
        }
        self.index.write(b)?;
        let mut kept = HashMap::new();
        for (key, copy) in std::mem::take(copies) {
            if live.contains(&copy.pack) && self.index.chunk(&key)?.is_some_and(|e| e.pack != copy.pack) {
                kept.insert(key, copy);
            }
        }
        *copies = kept;
        Ok(())
    }

    /// Looks for `keys` in the footers of every listed pack and puts each found into the
    /// index where it lies (unused here until a record counts it). Returns how many were
    /// found. Reads every footer: only for records that have waited for rounds.
    pub(crate) fn find_chunks(&self, keys: &[ChunkKey]) -> Result<usize> {
        let mut want: HashSet<ChunkKey> = keys.iter().copied().collect();
        let mut found = 0;
        for (id, _) in self.sealed_packs()? {
            if want.is_empty() {
                break;
            }
            let blobs = match self.packs.footer(id) {
                Ok(b) => b,
                Err(e) => {
                    log::warn!("{}: {e}", self.root.display());
                    continue;
                }
            };
            let hits: Vec<_> = blobs.into_iter().filter(|b| want.contains(&b.key)).collect();
            if hits.is_empty() {
                continue;
            }
            let _ns = self.ns.locked();
            let mut b = Batch::new();
            for blob in hits {
                want.remove(&blob.key);
                if self.index.chunk(&blob.key)?.is_none() {
                    b.put_chunk_unlogged(&self.index, &blob.key, &entry(id, &blob, 0));
                }
                found += 1;
            }
            self.index.write(b)?;
        }
        Ok(found)
    }

    /// The last record this index applied of node `node`'s log, or with None of the one
    /// log of a store one node writes at a time.
    pub(crate) fn applied_seq(&self, node: Option<u16>) -> Result<Option<u64>> {
        Ok(match node {
            Some(n) => self.index.meta_u64_opt(&applied_key(n))?,
            None => self.index.meta_u64_opt(APPLIED_SEQ)?,
        })
    }

    /// Applies `rec`, the next record of the one log of a store one node writes at a time,
    /// as its writer applied it, and notes it applied.
    pub(crate) fn apply_followed(&self, rec: &MetaRecord) -> Result<()> {
        let mut extra = Batch::new();
        extra.put_meta_u64_unlogged(&self.index, APPLIED_SEQ, rec.seq);
        Ok(self.index.apply(&rec.ops, false, extra)?)
    }

    /// Drops the chunk places and recipe pieces readers have cached: other nodes' changes
    /// may have moved them (a pack gc wrote moves chunks without a log record).
    pub(crate) fn forget_cached(&self) {
        self.cache.clear();
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
    pub(crate) fn apply_foreign(&self, node: u16, seq: u64, ops: &[LogOp], checkpoint: Option<u64>) -> Result<Vec<ChunkKey>> {
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
        let mut added: BTreeMap<u64, Vec<(u32, ChunkKey)>> = Default::default();
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
