//! The dictionary gc trains when it settles packs, and compresses their text chunks with.
//!
//! Ingest trains its dictionary (`ingest::dict`) on the first 4 MiB of a store's chunks, at
//! 112 KiB: it must be ready before most of a crawl has arrived. gc sees every chunk it
//! settles, so it can sample them all, and it has the time for a larger dictionary: on the
//! pages of `crawl-1.warc.gz` a 1 MiB dictionary trained on a sample drawn from all of them
//! stores them 14 % smaller than ingest's (10.4 against 8.9 MB at zstd 15; a solid stream of
//! every page is 7.3 MB; a 2 MiB one, `Training`, smaller again), and each chunk still
//! decodes alone. A settled chunk is recompressed with it where that is smaller (the store
//! of crawl-1 after gc: 2.0 % smaller at level 9, 2.0 % at 15, `init --parses compact`);
//! the dictionary is an ordinary `Dict` chunk
//! (refcount 1 for good, as ingest's), so readers, `fsck` and `repair index` need nothing new
//! and the format does not change.
//!
//! One dictionary serves many gc runs: a new one is trained only when a run settles at least
//! `Training::renew_min` of text chunks (the first one once it settles `first_min`), so a
//! store that gc settles a little at a time does not pay a dictionary each time. The index meta record
//! `settle_dict` names the one in use (not logged: an index rebuilt without it trains anew).

use std::collections::{BinaryHeap, HashSet};

use crate::digest::{ChunkKey, Digest};
use crate::index::ChunkEntry;
use crate::pack::{ChunkKind, Codec};
use crate::store::{Result, Store, StoreError};

/// The index meta record naming the dictionary gc compresses with (a chunk key's bytes).
pub(in crate::store) const META_KEY: &str = "settle_dict";
/// How much text a gc settles before it trains a dictionary, and how large: `Training::default`
/// for stores, smaller in tests.
#[derive(Clone, Copy, Debug)]
pub struct Training {
    /// Text-chunk bytes (raw) a gc must settle to train a store's first dictionary: below it,
    /// the dictionary costs about what it saves.
    pub first_min: u64,
    /// The same for a new one once the store has one (an archive's content drifts over years).
    pub renew_min: u64,
    /// The dictionary's size: on crawl-1's pages, 112 KiB 9.72 MB, 512 KiB 9.29, 1 MiB 8.93
    /// (zstd 15); the store after gc 1 MiB: 67.34 MB, 2 MiB: 67.10. A reader prepares it once
    /// per process.
    pub dict_size: usize,
    /// Sample bytes at most (zstd wants 10-100 times the dictionary's size): the first
    /// `SAMPLE_MAX` of up to `SAMPLE_CHUNKS` chunks.
    pub samples: usize,
}

impl Default for Training {
    fn default() -> Training {
        Training { first_min: 64 << 20, renew_min: 1 << 30, dict_size: 2 << 20, samples: 64 << 20 }
    }
}

/// Chunks sampled at most, chosen by the smallest digests among the candidates (a fixed,
/// even draw, in bounded memory).
const SAMPLE_CHUNKS: usize = 4096;
/// The first bytes of a chunk that go into the samples.
const SAMPLE_MAX: usize = 128 << 10;

/// The dictionary a settling gc compresses text chunks with.
pub(in crate::store) struct Target {
    pub key: ChunkKey,
    pub bytes: Vec<u8>,
    /// Trained by this gc: its chunk is still to be written (first, in gc's first pack).
    pub new: bool,
    /// The index's meta record names it already.
    pub named: bool,
}

/// Whether a chunk of `kind` is compressed with the settling dictionary: what ingest
/// compresses with its own (`chunks::plan`).
pub(in crate::store) fn dictable(kind: u8) -> bool {
    matches!(ChunkKind::from_u8(kind), ChunkKind::Raw | ChunkKind::Literal | ChunkKind::Payload | ChunkKind::PayloadHead)
}

/// Whether a chunk of `kind` is sampled: the web archive's own text, as ingest samples it
/// (unparsed bytes compress with the dictionary but do not decide it).
fn sampled(kind: u8) -> bool {
    dictable(kind) && ChunkKind::from_u8(kind) != ChunkKind::Raw
}

impl Store {
    /// The dictionary gc settles the text chunks of packs `fresh` (settled for the first time)
    /// with: the one in use, or a new one trained on a sample of those chunks when there are
    /// enough (`Training`). None for a store of a format before dictionaries (5), or without
    /// either.
    pub(in crate::store) fn settle_dictionary(&self, fresh: &HashSet<u64>) -> Result<Option<Target>> {
        if self.config.version < crate::store::DICT_FORMAT_VERSION || fresh.is_empty() {
            return Ok(None);
        }
        let in_use = self.settle_dictionary_in_use()?;
        // The candidates: live text chunks of the fresh packs; the sample, those of the
        // smallest digests (a max-heap keeps them).
        let mut text_bytes = 0u64;
        let mut draw: BinaryHeap<(Digest, u64, u64, u32, [u8; 36], u32)> = BinaryHeap::new();
        for item in self.index.chunk_iter() {
            let (k, e) = item?;
            if e.refs == 0 || !fresh.contains(&e.pack) || !sampled(e.kind) || !compressed(&e) {
                continue;
            }
            text_bytes += e.raw_len as u64;
            draw.push((k.digest, e.pack, e.offset, e.stored_len, k.to_bytes(), e.raw_len));
            if draw.len() > SAMPLE_CHUNKS {
                draw.pop();
            }
        }
        let t = self.limits.training;
        let wanted = if in_use.is_some() { t.renew_min } else { t.first_min };
        if text_bytes < wanted {
            return Ok(in_use);
        }
        // Read in pack order.
        // The smallest digests that fit in the samples' room (an even draw over every pack),
        // then read in pack order.
        let mut chosen = draw.into_sorted_vec();
        let mut room = t.samples as u64;
        chosen.retain(|c| {
            let take = room > 0;
            room = room.saturating_sub((c.5 as u64).min(SAMPLE_MAX as u64));
            take
        });
        chosen.sort_unstable_by_key(|c| (c.1, c.2));
        let packed = crate::store::packed_headers(self.config.version);
        let (mut samples, mut sizes) = (Vec::new(), Vec::new());
        for (_, pack, offset, stored_len, key, _) in chosen {
            if samples.len() >= t.samples {
                break;
            }
            let key = ChunkKey::from_bytes(&key).expect("36 bytes");
            let Some(e) = self.index.chunk(&key)? else { continue };
            // A damaged chunk is for settling to count, not a reason to stop; any other
            // failure (the disk, the bucket) stops gc.
            let raw = match self.packs.read(pack, offset, &key, stored_len) {
                Ok(raw) => raw,
                Err(err @ crate::pack::PackError::Corrupt { .. }) => {
                    log::debug!("gc: chunk {} not sampled for the settling dictionary: {err}", key.short());
                    continue;
                }
                Err(err) => return Err(err.into()),
            };
            // What the chunk's frame holds (a header block packed): what the dictionary must
            // match.
            let Some(frame) = crate::pack::frame_of(packed, ChunkKind::from_u8(e.kind), &raw) else { continue };
            let s = &frame[..frame.len().min(SAMPLE_MAX).min(t.samples - samples.len())];
            if s.len() >= 64 && compressible(s) {
                samples.extend_from_slice(s);
                sizes.push(s.len());
            }
        }
        if samples.len() < t.dict_size * 8 {
            return Ok(in_use);
        }
        let bytes = match crate::store::ingest::dict::train_fast_cover(&samples, &sizes, t.dict_size) {
            Ok(b) => b,
            Err(err) => {
                log::warn!("gc: training a zstd dictionary on {} samples failed: {err}; settled with the one in use", sizes.len());
                return Ok(in_use);
            }
        };
        let key = ChunkKey { digest: (self.digest)(&bytes), seq: 0 };
        match self.index.chunk(&key)? {
            // Trained before (the same text again): in the store already.
            Some(e) if e.kind == ChunkKind::Dict as u8 => Ok(Some(Target { named: in_use.is_some_and(|u| u.key == key), key, bytes, new: false })),
            // Its digest names another chunk: not used (a dictionary is found at seq 0).
            Some(_) => Ok(in_use),
            None => Ok(Some(Target { key, bytes, new: true, named: false })),
        }
    }

    /// The dictionary the meta record names, if it reads and is a dictionary.
    fn settle_dictionary_in_use(&self) -> Result<Option<Target>> {
        let Some(raw) = self.index.meta_bytes(META_KEY)? else { return Ok(None) };
        let Some(key) = ChunkKey::from_bytes(&raw) else { return Ok(None) };
        match self.dictionary_bytes(&key) {
            Ok(bytes) => Ok(Some(Target { key, bytes, new: false, named: true })),
            // Missing or damaged: trained anew. Any other failure (the disk, the bucket, the
            // index) stops gc.
            Err(e @ (StoreError::MissingChunk(_) | StoreError::Pack(crate::pack::PackError::Corrupt { .. }))) => {
                log::warn!("gc: the settling dictionary {} cannot be read ({e}); a new one is trained when there is enough to settle", key.short());
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

/// Whether the chunk is stored zstd-compressed (settling recompresses only those).
fn compressed(e: &ChunkEntry) -> bool {
    e.codec == Codec::Zstd as u8 || e.codec == Codec::ZstdDict as u8
}

/// Whether `sample` is worth training on: zstd's fastest level takes a tenth off it (images
/// and fonts, compressed already, teach a dictionary nothing).
fn compressible(sample: &[u8]) -> bool {
    zstd::bulk::compress(sample, 1).is_ok_and(|z| z.len() * 10 < sample.len() * 9)
}
