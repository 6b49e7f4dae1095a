//! Settling: gc rewrites each pack that ingest wrote once, its chunks recompressed at the
//! archival zstd level.
//!
//! Ingest compresses at zstd level 1 because it runs on the machine's cores while a crawl
//! arrives; the bytes then stay for years. gc has the time: on the crawl corpus level 9
//! stores the chunks 4.5 % smaller than level 3 (the store 4.2 %; docs/BENCHMARKS.md) and
//! 8 % smaller than level 1, and zstd decodes them as fast. A blob's header records the level gc settled its pack at
//! (`pack::settled_level`; 0 as ingest wrote it), so a pack is settled once and its first
//! blob says whether it was; an index meta record per pack-id range keeps gc from asking
//! again. The chunk keys do not change (they name the raw bytes), so no recipe does either.
//! A chunk whose bytes do not decode to its digest is copied as it is and counted: settling
//! never writes new bytes for damage, and one damaged chunk does not stop gc.

use std::collections::{BTreeMap, HashMap};

use crate::store::{io_at, Result, Store, StoreError};
use crate::digest::{ChunkKey, Digest};
use crate::index::{Batch, ChunkEntry};
use crate::store::ingest::chunks::Compressors;
use crate::store::ingest::dict;
use crate::pack::{self, ChunkKind, Codec, PackError};

/// The zstd level gc settles chunks at: about as much as level 12 for a third of its time
/// (levels 15-19 take 7-15 times as long for 2 % more).
pub(in crate::store) const LEVEL: u8 = crate::store::ingest::chunks::ARCHIVAL_ZSTD_LEVEL as u8;
/// The level of a store made for size (`init --parses compact`): on the gunzipped crawl
/// corpus, 1.2 % smaller than `LEVEL` (its pages 6 %), for about 6 times gc's time.
pub(in crate::store) const COMPACT_LEVEL: u8 = 15;

/// The level gc settles a store of `version` at, decided by its format.
pub(in crate::store) fn level(version: u32) -> u8 {
    if crate::store::predicted_parses(version) {
        COMPACT_LEVEL
    } else {
        LEVEL
    }
}

/// Index meta records `settled_below_NNNN` (one per node prefix of pack ids, the top 16 bits,
/// in hex): every pack of that prefix below the id is settled, holds no chunk, or was found
/// damaged (`Plan::damaged`). Not logged:
/// an index rebuilt without them makes the next gc ask every pack's first blob once more.
const SETTLED_BELOW: &str = "settled_below_";

fn settled_below_key(prefix: u16) -> String {
    format!("{SETTLED_BELOW}{prefix:04x}")
}

/// The packs one gc settles, and what it leaves for the next.
#[derive(Default)]
pub(in crate::store) struct Plan {
    pub ids: Vec<u64>,
    /// Candidates gc did not get to: the first that did not fit in its room, and those
    /// after it (not looked at, so some may be settled already).
    pub left: u64,
    /// Packs holding live chunks whose first blob's header is damaged: not settled, and
    /// not looked at again (fsck names them); gc reports them as damage.
    pub damaged: u64,
    /// The `settled_below` records to write once the packs are settled.
    below: BTreeMap<u16, u64>,
}

impl Plan {
    /// Records the new `settled_below` marks in `b` (with gc's last index batch).
    pub fn mark(&self, store: &Store, b: &mut Batch) {
        for (&prefix, &id) in &self.below {
            b.put_meta_u64_unlogged(&store.index, &settled_below_key(prefix), id);
        }
    }
}

/// One blob on its way to a new pack: its chunk, its index entry (where it was), and its
/// stored bytes.
pub(in crate::store) struct Blob {
    pub key: ChunkKey,
    pub entry: ChunkEntry,
    pub stored: Vec<u8>,
    /// The base to try it against (`delta::make`), with its raw bytes; after settling, a blob
    /// of codec `ZstdDelta` with a base is a delta made now.
    pub base: Option<(ChunkKey, std::sync::Arc<Vec<u8>>)>,
}

impl Blob {
    /// Whether settling recompresses it: zstd chunks and recipe pieces, but not the metadata
    /// log's records (replaced at every checkpoint) or dictionaries (kept as they were
    /// trained).
    fn recompressed(&self) -> bool {
        let (kind, codec) = (ChunkKind::from_u8(self.entry.kind), self.entry.codec);
        (codec == Codec::Zstd as u8 || codec == Codec::ZstdDict as u8) && !matches!(kind, ChunkKind::Meta | ChunkKind::Dict)
    }

    fn corrupt(&self, what: String) -> StoreError {
        StoreError::Pack(PackError::Corrupt { pack: self.entry.pack, offset: self.entry.offset, what: format!("chunk {}: {what}", self.key.short()) })
    }
}

/// What settling made of one blob.
enum Settled {
    /// Its bytes at the store's level (`level`; kept only if smaller).
    Smaller(Vec<u8>),
    /// Its bytes with the settling dictionary (`Dicts::target`), as a `ZstdDict` blob stores
    /// them (kept only if smaller).
    WithDict(Vec<u8>),
    /// Its bytes against its base (`Blob::base`), as a `ZstdDelta` blob stores them.
    Delta(Vec<u8>),
    /// Not recompressed.
    Kept,
    /// Its bytes do not decode to its digest, or its dictionary is missing or damaged:
    /// copied as it is.
    Damaged(StoreError),
}

/// The dictionaries a settling gc compresses with, by digest: prepared once each, for
/// compressing at the store's level and for decoding.
#[derive(Default)]
pub(in crate::store) struct Dicts {
    /// For decoding, and (without a `target`) for compressing again: a CDict of a 2 MiB
    /// dictionary takes about 66 MiB at level 15, so none is made where none is used.
    ready: HashMap<Digest, Option<(Option<zstd::zstd_safe::CDict<'static>>, pack::Dictionary)>>,
    /// The dictionary text chunks are compressed with instead of their own (`train`), at
    /// the store's level.
    target: Option<(Digest, zstd::zstd_safe::CDict<'static>)>,
}

impl Dicts {
    /// Compresses text chunks with dictionary `bytes` (`digest`) from now on, at `level`;
    /// false if zstd cannot prepare it.
    pub fn target(&mut self, digest: Digest, bytes: &[u8], level: u8) -> bool {
        self.target = zstd::zstd_safe::CDict::try_create(bytes, level as i32).map(|c| (digest, c));
        self.target.is_some()
    }
}

impl Store {
    /// Which of `candidates` (sealed packs, id and size, that hold live chunks and that gc
    /// does not rewrite anyway) to settle now: those whose first blob is at level 0, oldest
    /// first, as many as fit in half of the disk's room less `reserved` (what the packs
    /// rewritten for their garbage take; gc deletes the packs it replaces only at its end),
    /// on a bucket at most `SETTLE_REMOTE_BUDGET` (`settle_budget`). It stops at the
    /// first that does not fit: the rest are left unread, counted in `left`.
    pub(in crate::store) fn plan_settle(&self, mut candidates: Vec<(u64, u64)>, reserved: u64) -> Result<Plan> {
        let prefix = |id: u64| (id >> 48) as u16;
        let mut below: BTreeMap<u16, u64> = BTreeMap::new();
        for &(id, _) in &candidates {
            let p = prefix(id);
            if let std::collections::btree_map::Entry::Vacant(slot) = below.entry(p) {
                slot.insert(self.index.meta_u64_opt(&settled_below_key(p))?.unwrap_or(0));
            }
        }
        candidates.retain(|&(id, _)| id >= below[&prefix(id)]);
        candidates.sort_unstable();
        let mut budget = self.mode.settle_budget(self.space.room().map_err(io_at(&self.root))?.saturating_sub(reserved) / 2);
        let mut plan = Plan::default();
        let mut stop = false;
        for (id, size) in candidates {
            let p = prefix(id);
            let mark = plan.below.entry(p).or_insert(below[&p]);
            if stop {
                // Not looked at (on an object store each look is a range read): left, the
                // mark below the first pack left.
                plan.left += 1;
                continue;
            }
            match self.packs.first_settled(id)? {
                Some(0) if size > budget => {
                    plan.left += 1;
                    stop = true;
                    continue;
                }
                Some(0) => {
                    budget -= size;
                    plan.ids.push(id);
                }
                Some(_) => {}
                None => {
                    // Live chunks behind a first blob that does not read as one: left as it
                    // is, for fsck to name, and reported; the packs after it are settled
                    // (stopping here left every later pack unsettled for good).
                    log::warn!("gc: pack {id:016x} holds live chunks, but its first blob's header is damaged: not settled (run `warcfs fsck`)");
                    plan.damaged += 1;
                }
            }
            *mark = id + 1;
        }
        Ok(plan)
    }

    /// Recompresses `blobs` at the store's level in place, on two threads, each kept as it was where
    /// that is not smaller. A chunk whose bytes do not decode to its digest is kept as it
    /// is; returns how many were.
    pub(in crate::store) fn settle(&self, dicts: &mut Dicts, blobs: &mut [Blob]) -> Result<u64> {
        for b in blobs.iter().filter(|b| b.recompressed() && b.entry.codec == Codec::ZstdDict as u8) {
            let Some(d) = pack::dict_of(&b.stored) else { continue };
            if let std::collections::hash_map::Entry::Vacant(slot) = dicts.ready.entry(d) {
                // A dictionary missing or damaged is damage like a chunk's: the chunks naming
                // it are copied as they are. Any other failure (the disk, the bucket, the
                // index) stops gc.
                let prepared = match self.dictionary_bytes(&ChunkKey { digest: d, seq: 0 }) {
                    Ok(bytes) => {
                        let cdict = match dicts.target {
                            Some(_) => Some(None),
                            None => zstd::zstd_safe::CDict::try_create(&bytes, self.settle_level() as i32).map(Some),
                        };
                        cdict.zip(pack::prepare_dictionary(&bytes))
                    }
                    Err(StoreError::MissingChunk(_)) | Err(StoreError::Pack(PackError::Corrupt { .. })) => None,
                    Err(e) => return Err(e),
                };
                slot.insert(prepared);
            }
        }
        let dicts = &*dicts;
        let work: Vec<&Blob> = blobs.iter().collect();
        let done = crate::sync::on_two_threads(
            work.len(),
            Compressors::default,
            |z, i| -> Result<Settled> {
                let b = work[i];
                if !b.recompressed() && b.base.is_none() {
                    return Ok(Settled::Kept);
                }
                self.recompress(dicts, z, b)
            },
        );
        drop(work);
        let mut damaged = 0;
        for (b, r) in blobs.iter_mut().zip(done) {
            match r.ok_or_else(|| StoreError::Bug("a settling thread gave no result".into()))?? {
                Settled::Smaller(stored) if stored.len() < b.stored.len() => b.stored = stored,
                Settled::WithDict(stored) if stored.len() < b.stored.len() => {
                    b.stored = stored;
                    b.entry.codec = Codec::ZstdDict as u8;
                }
                Settled::Delta(stored) => {
                    b.stored = stored;
                    b.entry.codec = Codec::ZstdDelta as u8;
                }
                Settled::Smaller(_) | Settled::WithDict(_) | Settled::Kept => {}
                Settled::Damaged(e) => {
                    log::warn!("gc: {e}; copied as it is (run `warcfs fsck`)");
                    damaged += 1;
                }
            }
        }
        Ok(damaged)
    }

    /// `b`'s bytes at the store's level, in its codec (a dictionary blob keeps its dictionary),
    /// compressed as ingest compresses (`chunks::Compressors`, `dict::Shared`).
    fn recompress(&self, dicts: &Dicts, z: &mut Compressors, b: &Blob) -> Result<Settled> {
        let (codec, raw_len) = (b.entry.codec, b.entry.raw_len);
        let dict = match codec == Codec::ZstdDict as u8 {
            true => {
                let Some(named) = pack::dict_of(&b.stored) else {
                    return Ok(Settled::Damaged(b.corrupt("shorter than its dictionary's name".into())));
                };
                match dicts.ready.get_key_value(&named).and_then(|(d, p)| Some((d, p.as_ref()?))) {
                    Some(d) => Some(d),
                    None => return Ok(Settled::Damaged(b.corrupt(format!("its zstd dictionary {} is missing or damaged", ChunkKey { digest: named, seq: 0 }.short())))),
                }
            }
            false => None,
        };
        let packed_headers = crate::store::packed_headers(self.config.version);
        let raw = match pack::decode_chunk(packed_headers, b.entry.kind, codec, &b.stored, raw_len, dict.map_or(pack::Against::Nothing, |(_, (_, ddict))| pack::Against::Dict(ddict))) {
            Ok(raw) => raw,
            Err(e) => return Ok(Settled::Damaged(b.corrupt(format!("cannot decode it: {e}")))),
        };
        if (self.digest)(&raw) != b.key.digest {
            return Ok(Settled::Damaged(b.corrupt("its bytes do not match its digest".into())));
        }
        let no_context = || StoreError::Bug("zstd has no compression context".into());
        // A header block stays packed as it was (`pack::packed_frame`): it is recompressed
        // only if it packs again.
        let frame = pack::frame_of(packed_headers, ChunkKind::from_u8(b.entry.kind), &raw);
        // A text chunk goes to the settling dictionary, where there is one and that is
        // smaller than what is stored; else it is compressed again as it was (its own
        // dictionary's CDict is not made when there is a target: kept as it is then).
        let target = dicts.target.as_ref().filter(|_| b.recompressed() && super::train::dictable(b.entry.kind));
        let with_target = match (target, &frame) {
            (Some((digest, cdict)), Some(frame)) => dict::Shared::new(digest, cdict).compress(z.for_dictionary().ok_or_else(no_context)?, frame).filter(|s| s.len() < b.stored.len()),
            _ => None,
        };
        let settled = match (with_target, dict, &frame) {
            (Some(s), _, _) => Some((s, true)),
            (None, _, None) => None,
            _ if !b.recompressed() => None,
            (None, Some((digest, (Some(cdict), _))), Some(frame)) => dict::Shared::new(digest, cdict).compress(z.for_dictionary().ok_or_else(no_context)?, frame).map(|s| (s, false)),
            (None, Some((_, (None, _))), Some(_)) => None,
            (None, None, Some(frame)) => z.at(self.settle_level() as i32).ok_or_else(no_context)?.compress(frame).ok().map(|s| (s, false)),
        };
        if let Some((key, base)) = &b.base {
            let alone = settled.as_ref().map_or(b.stored.len(), |(s, _)| s.len().min(b.stored.len()));
            if let Some(d) = crate::store::delta::make::delta_of(z.for_delta().ok_or_else(no_context)?, key, base, &raw, alone, self.settle_level()) {
                return Ok(Settled::Delta(d));
            }
        }
        // What zstd would not do again is kept as it is: that changes nothing stored.
        Ok(match settled {
            None => Settled::Kept,
            Some((s, true)) => Settled::WithDict(s),
            Some((s, false)) => Settled::Smaller(s),
        })
    }

}
