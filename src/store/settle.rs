//! Settling: gc rewrites each pack that ingest wrote once, its chunks recompressed at the
//! archival zstd level.
//!
//! Ingest compresses at zstd level 3 because it runs on the machine's cores while a crawl
//! arrives; the bytes then stay for years. gc has the time: on the crawl corpus level 9
//! stores the same chunks 4.5 % smaller (docs/BENCHMARKS.md), and zstd decodes them as fast.
//! A blob's header records the level gc settled it at (`pack::settled_level`; 0 as ingest
//! wrote it), so a pack is settled once and its first blob says whether it was. The chunk
//! keys do not change (they name the raw bytes), so no recipe does either; gc checks each
//! chunk's digest before it writes the new bytes, so settling never copies damage forward.

use std::collections::HashMap;

use super::{Result, Store, StoreError};
use crate::digest::{ChunkKey, Digest};
use crate::pack::{self, ChunkKind, Codec, PackError, DICT_REF_LEN};

/// The zstd level gc settles chunks at: about as much as level 12 for a third of its time
/// (levels 15-19 take 7-15 times as long for 2 % more).
pub(super) const LEVEL: u8 = 9;

/// One blob on its way to a new pack, and where it was.
pub(super) struct Blob {
    pub pack: u64,
    pub offset: u64,
    pub key: ChunkKey,
    pub kind: u8,
    pub codec: u8,
    pub raw_len: u32,
    pub stored: Vec<u8>,
}

impl Blob {
    /// Whether settling recompresses it: zstd chunks, but not the metadata log's records
    /// (replaced at every checkpoint) nor dictionaries (kept as they were trained).
    fn recompressed(&self) -> bool {
        let kind = ChunkKind::from_u8(self.kind);
        (self.codec == Codec::Zstd as u8 || self.codec == Codec::ZstdDict as u8) && kind != ChunkKind::Meta && kind != ChunkKind::Dict
    }

    fn corrupt(&self, what: String) -> StoreError {
        StoreError::Pack(PackError::Corrupt { pack: self.pack, offset: self.offset, what: format!("chunk {}: {what}", self.key.short()) })
    }
}

/// The dictionaries a settling gc compresses with, by digest: prepared once each, for
/// compressing at `LEVEL` and for decoding.
#[derive(Default)]
pub(super) struct Dicts {
    ready: HashMap<Digest, (zstd::zstd_safe::CDict<'static>, pack::Dictionary)>,
}

impl Store {
    /// Recompresses `blobs` at `LEVEL` in place, on two threads, each kept as it was where
    /// that is not smaller. A chunk whose bytes do not decode to its digest stops gc.
    pub(super) fn settle(&self, dicts: &mut Dicts, blobs: &mut [Blob]) -> Result<()> {
        for b in blobs.iter().filter(|b| b.recompressed() && b.codec == Codec::ZstdDict as u8) {
            let d = pack::dict_of(&b.stored).ok_or_else(|| b.corrupt("shorter than its dictionary's name".into()))?;
            if let std::collections::hash_map::Entry::Vacant(slot) = dicts.ready.entry(d) {
                let bytes = self.dictionary_bytes(&d)?;
                let bad = || b.corrupt(format!("zstd cannot prepare its dictionary {}", ChunkKey { digest: d, seq: 0 }.short()));
                let c = zstd::zstd_safe::CDict::try_create(&bytes, LEVEL as i32).ok_or_else(bad)?;
                let dd = pack::prepare_dictionary(&bytes).ok_or_else(bad)?;
                slot.insert((c, dd));
            }
        }
        let dicts = &*dicts;
        let work: Vec<&Blob> = blobs.iter().collect();
        let done = crate::sync::on_two_threads(
            work.len(),
            zstd::zstd_safe::CCtx::try_create,
            |cctx, i| -> Result<Option<Vec<u8>>> {
                let b = work[i];
                if !b.recompressed() {
                    return Ok(None);
                }
                let cctx = cctx.as_mut().ok_or_else(|| StoreError::Bug("zstd has no compression context".into()))?;
                self.recompress(dicts, cctx, b)
            },
        );
        drop(work);
        for (b, r) in blobs.iter_mut().zip(done) {
            if let Some(stored) = r.ok_or_else(|| StoreError::Bug("a settling thread gave no result".into()))?? {
                if stored.len() < b.stored.len() {
                    b.stored = stored;
                }
            }
        }
        Ok(())
    }

    /// `b`'s bytes at `LEVEL`, in its codec (a dictionary blob keeps its dictionary).
    fn recompress(&self, dicts: &Dicts, cctx: &mut zstd::zstd_safe::CCtx<'static>, b: &Blob) -> Result<Option<Vec<u8>>> {
        let dict = match b.codec == Codec::ZstdDict as u8 {
            true => Some(&dicts.ready[&pack::dict_of(&b.stored).expect("checked by settle")]),
            false => None,
        };
        let raw = pack::decode_stored(b.codec, &b.stored, b.raw_len, dict.map(|d| &d.1)).map_err(|e| b.corrupt(format!("cannot decode it: {e}")))?;
        if (self.digest)(&raw) != b.key.digest {
            return Err(b.corrupt("its bytes do not match its digest".into()));
        }
        use zstd::zstd_safe::{CParameter, ResetDirective};
        let mut frame = Vec::with_capacity(zstd::zstd_safe::compress_bound(raw.len()));
        let set = match dict {
            Some((cdict, _)) => cctx.ref_cdict(cdict),
            None => cctx.set_parameter(CParameter::CompressionLevel(LEVEL as i32)),
        };
        let done = set.and_then(|_| cctx.compress2(&mut frame, &raw));
        // As at ingest (`dict::Shared::compress`): the context must not keep pointing at a
        // dictionary it borrowed, whatever happened.
        cctx.reset(ResetDirective::SessionAndParameters).map_err(|_| StoreError::Bug("zstd cannot reset a context".into()))?;
        if done.is_err() {
            // Kept as it is: what zstd would not do again changes nothing stored.
            return Ok(None);
        }
        Ok(Some(match dict {
            Some(_) => [&b.stored[..DICT_REF_LEN], &frame].concat(),
            None => frame,
        }))
    }

    /// The raw bytes of dictionary chunk `d`.
    fn dictionary_bytes(&self, d: &Digest) -> Result<Vec<u8>> {
        let key = ChunkKey { digest: *d, seq: 0 };
        let e = self.index.chunk(&key)?.ok_or_else(|| StoreError::MissingChunk(key.short()))?;
        Ok(self.packs.read(e.pack, e.offset, &key, e.stored_len)?)
    }
}
