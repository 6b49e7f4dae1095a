//! gc's side of deltas: when it first settles a payload chunk that has a base hint, it tries
//! the chunk compressed against that base and keeps the delta if it is much smaller
//! (`KEEP_AT_MOST_QUARTERS`), raising the base's refcount in the batch that moves the delta's
//! entry into gc's new pack.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::digest::ChunkKey;
use crate::index::ChunkEntry;
use crate::pack::{self, ChunkKind, Codec};
use crate::store::delta::KEEP_AT_MOST_QUARTERS;
use crate::store::maint::settle::Blob;
use crate::store::{Result, Store, StoreError};

/// What gc's settling knows while it chooses bases.
#[derive(Default)]
pub(in crate::store) struct Choosing {
    /// Whether deltas are made at all (a store of format 9, settling).
    pub enabled: bool,
    /// Packs being rewritten whose chunks gc settles for the first time (level 0): only
    /// their chunks may become deltas.
    pub fresh: HashSet<u64>,
    /// The settled level of packs asked (`pack::settled_level`; None: no readable blob).
    pub levels: HashMap<u64, Option<u8>>,
    /// Chunks written whole into gc's open pack: settled, so final, though their index
    /// entries still name their old places until the pack is sealed.
    pub whole_in_open: HashSet<ChunkKey>,
    /// Chunks written into gc's open pack as deltas, with their bases.
    pub deltas_in_open: HashMap<ChunkKey, ChunkKey>,
    /// Deltas made.
    pub made: u64,
}

impl Choosing {
    /// gc's open pack is sealed: the index says where its chunks are, and what they are.
    pub fn sealed(&mut self) {
        self.whole_in_open.clear();
        self.deltas_in_open.clear();
    }
}

/// Whether a chunk of `kind` may be a base or a delta: content-defined chunks of bytes.
pub(in crate::store) fn data(kind: u8) -> bool {
    matches!(ChunkKind::from_u8(kind), ChunkKind::Raw | ChunkKind::Payload | ChunkKind::PayloadHead)
}

impl Store {
    /// Gives each of `blobs` that gc settles for the first time and that has a base hint its
    /// base to try (`Blob::base`); `moved` holds the entries gc's open pack will write. Returns
    /// the chunks whose hints are spent (deleted with the entries of the pack they go into).
    pub(in crate::store) fn choose_bases(&self, ch: &mut Choosing, moved: &HashMap<ChunkKey, ChunkEntry>, blobs: &mut [Blob]) -> Result<Vec<ChunkKey>> {
        let mut spent = Vec::new();
        if !ch.enabled || !self.index.has_hints() {
            return Ok(spent);
        }
        for b in blobs.iter_mut() {
            if !ch.fresh.contains(&b.entry.pack) || !data(b.entry.kind) || b.entry.codec == Codec::ZstdDelta as u8 {
                continue;
            }
            let Some(hint) = self.index.delta_base_hint(&b.key)? else { continue };
            spent.push(b.key);
            if let Some((key, e)) = self.final_base(ch, moved, &b.key, hint)? {
                // A base that cannot be read is no base: the chunk is settled whole.
                match self.packs.read(e.pack, e.offset, &key, e.stored_len) {
                    Ok(raw) if pack::may_be_base(&raw) => b.base = Some((key, Arc::new(raw))),
                    Ok(_) => {}
                    Err(err) => log::warn!("gc: chunk {}: its base {} cannot be read ({err}); settled whole", b.key.short(), key.short()),
                }
            }
        }
        Ok(spent)
    }

    /// The base `hint` names for chunk `of`, if it is one: live, of data, not a delta (a
    /// delta's own base is taken instead), and final, so never a delta later (one base per
    /// read): settled already, or with no hint of its own (only a chunk with a hint becomes
    /// a delta, and no hint is added while gc runs).
    fn final_base(&self, ch: &mut Choosing, moved: &HashMap<ChunkKey, ChunkEntry>, of: &ChunkKey, hint: ChunkKey) -> Result<Option<(ChunkKey, ChunkEntry)>> {
        let mut key = hint;
        for _ in 0..2 {
            if key == *of {
                return Ok(None);
            }
            if let Some(base) = ch.deltas_in_open.get(&key) {
                key = *base;
                continue;
            }
            // Where it is read from: the index's place, which stays readable until gc's end
            // (a chunk moving into gc's open pack is not there for readers yet).
            let Some(e) = self.index.chunk(&key)? else { return Ok(None) };
            // A chunk nothing uses may go with this gc (its pack with it).
            if self.current_refs(moved, &key, e.refs)? == 0 || !data(e.kind) {
                return Ok(None);
            }
            if e.codec == Codec::ZstdDelta as u8 {
                match self.packs.base_named(e.pack, e.offset, &key, e.stored_len) {
                    Ok(Some(base)) => {
                        key = base;
                        continue;
                    }
                    _ => return Ok(None),
                }
            }
            let settled = ch.whole_in_open.contains(&key) || self.index.delta_base_hint(&key)?.is_none() || {
                let pack = e.pack;
                let level = match ch.levels.get(&pack) {
                    Some(l) => *l,
                    None => {
                        let l = self.packs.first_settled(pack)?;
                        ch.levels.insert(pack, l);
                        l
                    }
                };
                level.is_some_and(|l| l != 0)
            };
            return Ok(settled.then_some((key, e)));
        }
        Ok(None)
    }

    /// Raises base `key`'s refcount by one for a delta gc wrote into its open pack: in
    /// `moved`, the entries that commit with that pack.
    pub(in crate::store) fn raise_base(&self, moved: &mut HashMap<ChunkKey, ChunkEntry>, key: &ChunkKey) -> Result<()> {
        let mut e = match moved.get(key) {
            Some(e) => e.clone(),
            None => self.index.chunk(key)?.ok_or_else(|| StoreError::MissingChunk(key.to_string()))?,
        };
        e.refs += 1;
        moved.insert(*key, e);
        Ok(())
    }

    /// The refcount an entry gc moves must carry: what the index (or the open pack's
    /// entries) says now, which counts the deltas this gc made on it since it read `scanned`.
    pub(in crate::store) fn current_refs(&self, moved: &HashMap<ChunkKey, ChunkEntry>, key: &ChunkKey, scanned: u64) -> Result<u64> {
        Ok(match moved.get(key) {
            Some(e) => e.refs,
            None => self.index.chunk(key)?.map_or(scanned, |e| e.refs),
        })
    }
}

/// `raw` compressed against `base` at `level` (the settling level), as a `ZstdDelta` blob stores it, if
/// that takes at most `KEEP_AT_MOST_QUARTERS` of `alone` (what the chunk takes otherwise)
/// and decodes back to `raw`.
pub(in crate::store) fn delta_of(cctx: &mut zstd::zstd_safe::CCtx<'_>, base_key: &ChunkKey, base: &[u8], raw: &[u8], alone: usize, level: u8) -> Option<Vec<u8>> {
    let d = pack::delta_compress(cctx, base_key, base, raw, level as i32)?;
    if d.len() * 4 > alone * KEEP_AT_MOST_QUARTERS {
        return None;
    }
    let back = pack::decode_stored(Codec::ZstdDelta as u8, &d, raw.len() as u32, pack::Against::Base(base)).ok()?;
    (back == raw).then_some(d)
}
