//! Chunks into the store: each is found (proven equal as the verify mode demands) or
//! compressed (zstd, with the store's dictionary where one helps) and appended to the open
//! pack; an ingest's new chunks become visible only with the commit that references them,
//! after the pack holding them is durable. A batch of chunks (`store_chunks`: a window's)
//! is hashed and compressed on two threads, found and appended in order on this one.

use std::collections::HashMap;

use crate::store::ingest::dict::InUse;
use crate::store::{Compression, Ns, Result, Store, StoreError, Verify, Writer};
use crate::sync::on_two_threads;
use crate::LockExt;
use crate::digest::{ChunkKey, Digest};
use crate::index::{Batch, ChunkEntry};
use crate::pack::{ChunkKind, Codec, OpenPack, BLOB_HEADER_LEN};
use crate::recipe::RefDelta;

/// Compressed chunks are kept only if they save at least 3 %.
const MIN_SAVING_PERCENT: usize = 3;
/// Chunks, and recipe pieces, on a store gc settles (`settle` recompresses both at its
/// level, so what ingest writes stays only until the next gc). On the crawl corpus level 1
/// instead of 3 took 5-7 % less of an import's CPU (zstd's share of it from 13 % to 7 %) for
/// packs 3 % larger before gc and 0.1 % after (a chunk level 1 shrinks by less than 3 % is
/// kept raw, and settling leaves raw chunks as they are); level -3 took 4-6 % less again for
/// packs 20 % larger before gc (measured: the history of docs/BENCHMARKS.md). Recipe pieces at
/// level 9 here took 5 % of an import's CPU for the same store after gc.
pub(in crate::store) const ZSTD_LEVEL: i32 = 1;
/// Chunks on a store several nodes write, which gc does not settle: what ingest writes is
/// what stays.
pub(in crate::store) const UNSETTLED_ZSTD_LEVEL: i32 = 3;
/// The level for bytes kept for years: gc settles chunks at it (`settle::LEVEL`), and ingest
/// writes recipe pieces at it on a store several nodes write, which gc does not settle
/// (small, bytes per file rather than per payload, and much smaller with the effort).
pub(in crate::store) const ARCHIVAL_ZSTD_LEVEL: i32 = 9;
/// The level for an optimal parser's parse (zopfli's, 7-Zip's: the longest form), in a parse
/// tail or in the recipe pieces of a file whose members hold one: new bytes no other file
/// shares, up to a sixth of the member's size, and rare in archives. On the bench's zopfli
/// crawl (its parses kept in the pieces) the store grows by 1.6 points of the file's size
/// less than at level 3, for about 1 s more of its import (2.9 s); settling keeps them (a
/// blob is recompressed only if that makes it smaller).
pub(in crate::store) const LONGEST_PARSE_ZSTD_LEVEL: i32 = 15;

/// The level ingest compresses a new chunk of `kind` at, unless told another: where gc
/// settles chunks later (`Share::settles`) the fast one, where it does not what stays.
pub(in crate::store) fn zstd_level(kind: ChunkKind, settled_later: bool) -> i32 {
    match (kind, settled_later) {
        (_, true) => ZSTD_LEVEL,
        (ChunkKind::Recipe, false) => ARCHIVAL_ZSTD_LEVEL,
        (_, false) => UNSETTLED_ZSTD_LEVEL,
    }
}

/// New bytes `store_chunks` plans before it compresses and appends them.
const BATCH_BYTES: usize = 8 << 20;
/// Chunk entries a commit looks up in one call.
const LOOKUP_BATCH: usize = 4096;
/// The largest buffer a thread keeps for reading chunks back (`read_back`): a payload chunk's
/// largest (FastCDC's maximum, 4 MiB) and some.
const READ_BACK_KEPT: usize = 8 << 20;

/// Chunks appended to packs but not yet in the index, by digest.
pub(in crate::store) type Pending = HashMap<Digest, Vec<(ChunkKey, ChunkEntry)>, crate::digest::DigestState>;

/// What an ingest added to the packs so far.
#[derive(Default)]
pub(in crate::store) struct Added {
    pub(in crate::store) new_bytes: u64,
    /// A dictionary this ingest trained and stored.
    pub(in crate::store) dict: Option<ChunkKey>,
}

/// Whether a chunk of kind `a` may stand for equal bytes of kind `b`. A chunk's
/// kind is kept in its index entry and read from there: `records` finds a file's headers by
/// their blocks' kind, a metadata log record's refcount is set to 0 when a checkpoint
/// supersedes it, a dictionary is live for good. So equal bytes of another kind are another
/// chunk, under the digest's next seq (as a collision's): a payload equal to a log record
/// would otherwise be collected with it, a header block equal to a payload would not be found
/// as headers. Payloads and unparsed bytes are one kind for this: content-defined chunks of
/// bytes, alike at a payload's start, in its middle or outside any record.
fn kinds_share(a: ChunkKind, b: ChunkKind) -> bool {
    let data = |k: ChunkKind| matches!(k, ChunkKind::Raw | ChunkKind::Payload | ChunkKind::PayloadHead);
    a == b || (data(a) && data(b))
}

/// `kinds_share` of a stored chunk and new bytes of kind `kind`.
fn same_kind(stored: &ChunkEntry, kind: ChunkKind) -> bool {
    kinds_share(ChunkKind::from_u8(stored.kind), kind)
}

/// What `find_chunk` found: the chunk, or the seq a new copy takes (and whether others of its
/// kind share its digest: a collision).
enum Lookup {
    Found(ChunkKey),
    New { seq: u32, collides: bool },
}

/// What `plan` decided for a chunk.
enum Plan {
    Found(ChunkKey),
    /// New: its key, and whether a dictionary helps its kind.
    New(ChunkKey, bool),
}

/// What `store_chunks` does with one of its chunks.
enum Batched {
    Found(ChunkKey),
    /// New: its key, and the dictionary to compress it with.
    New(ChunkKey, Option<InUse>),
    /// The same bytes as an earlier new chunk of the batch (by index).
    SameAs(usize),
    /// The digest of an earlier new chunk of the batch but other bytes (a collision, or a
    /// verify mode that cannot tell) or another kind: stored on its own once those before it
    /// are.
    Later,
}

/// One thread's zstd contexts: for the store's dictionary, and one for each level asked
/// (ingest's, and gc's settling).
#[derive(Default)]
pub(in crate::store) struct Compressors {
    cctx: Option<zstd::zstd_safe::CCtx<'static>>,
    /// gc's, for deltas (`delta::make`), apart from the dictionary's sticky parameters.
    delta: Option<zstd::zstd_safe::CCtx<'static>>,
    levels: Vec<(i32, zstd::bulk::Compressor<'static>)>,
}

impl Compressors {
    pub(in crate::store) fn for_dictionary(&mut self) -> Option<&mut zstd::zstd_safe::CCtx<'static>> {
        if self.cctx.is_none() {
            self.cctx = zstd::zstd_safe::CCtx::try_create();
        }
        self.cctx.as_mut()
    }

    pub(in crate::store) fn for_delta(&mut self) -> Option<&mut zstd::zstd_safe::CCtx<'static>> {
        if self.delta.is_none() {
            self.delta = zstd::zstd_safe::CCtx::try_create();
        }
        self.delta.as_mut()
    }

    pub(in crate::store) fn at(&mut self, level: i32) -> Option<&mut zstd::bulk::Compressor<'static>> {
        if !self.levels.iter().any(|(l, _)| *l == level) {
            self.levels.push((level, zstd::bulk::Compressor::new(level).ok()?));
        }
        self.levels.iter_mut().find(|(l, _)| *l == level).map(|(_, z)| z)
    }
}

/// Whether compressed bytes `z` are worth storing instead of `data`.
fn saves(z: &[u8], data: &[u8]) -> bool {
    z.len() * 100 <= data.len() * (100 - MIN_SAVING_PERCENT)
}

impl Store {
    /// Goes on compressing with the dictionary the index names as in use (`dict`), on a
    /// store whose format has them. One that cannot be read is logged and left: chunks are
    /// then compressed without, and a new one is trained.
    pub(in crate::store) fn resume_dictionary(&self) -> Result<()> {
        if !self.writer.locked().dicts.enabled() {
            return Ok(());
        }
        let Some(raw) = self.index.meta_bytes(crate::store::ingest::dict::META_KEY)? else { return Ok(()) };
        let Some(key) = ChunkKey::from_bytes(&raw) else {
            log::warn!("{}: the index names no readable zstd dictionary; a new one will be trained", self.root.display());
            return Ok(());
        };
        match self.dictionary_bytes(&key) {
            // The index failing is the store's trouble, not the dictionary's.
            Err(e @ StoreError::Index(_)) => return Err(e),
            Ok(bytes) => {
                if !self.writer.locked().dicts.use_dictionary(key.digest, &bytes) {
                    log::warn!("{}: the zstd dictionary in use ({}) cannot be prepared; a new one will be trained", self.root.display(), key.short());
                }
            }
            Err(e) => log::warn!("{}: the zstd dictionary in use cannot be read ({e}); a new one will be trained", self.root.display()),
        }
        Ok(())
    }

    /// The raw bytes of dictionary chunk `key` (MissingChunk if the index knows none):
    /// ingest resuming the dictionary in use, gc settling the chunks compressed with one.
    pub(in crate::store) fn dictionary_bytes(&self, key: &ChunkKey) -> Result<Vec<u8>> {
        let e = self.index.chunk(key)?.ok_or_else(|| StoreError::MissingChunk(key.short()))?;
        Ok(self.packs.read(e.pack, e.offset, key, e.stored_len)?)
    }

    /// Finds `data` in the store (proven equal as the verify mode demands) or appends it to
    /// the open pack as a new chunk: `store_chunks` of one.
    pub(in crate::store) fn store_chunk(&self, w: &mut Writer, added: &mut Added, data: &[u8], kind: ChunkKind) -> Result<ChunkKey> {
        Ok(self.store_chunks(w, added, &[(data, kind)])?[0])
    }

    /// Whether the store holds `data` (digest `digest`) already, as the verify mode proves it:
    /// among the chunks this ingest appended (`pending`, not in the index yet) and those the
    /// index holds. Needs no writer, so that `store_chunks` asks it of a batch's chunks on
    /// two threads.
    fn find_chunk(&self, pending: &[(ChunkKey, ChunkEntry)], data: &[u8], digest: Digest, kind: ChunkKind) -> Result<Lookup> {
        let mut candidates: Vec<(ChunkKey, ChunkEntry)> = pending.to_vec();
        // A point lookup of seq 0 answers most misses from the bloom filter; only a hit (or
        // a collision chain) needs the range scan.
        let first = ChunkKey { digest, seq: 0 };
        if candidates.is_empty() {
            if let Some(e) = self.index.chunk(&first)? {
                // (Without a verify, the first of the digest is taken if it is of the kind.)
                let scan = self.config.verify != Verify::Off || !same_kind(&e, kind);
                candidates.push((first, e));
                if scan {
                    candidates = self.index.chunks_with_digest(&digest)?;
                }
            }
        } else {
            for (k, e) in self.index.chunks_with_digest(&digest)? {
                if !candidates.iter().any(|(c, _)| *c == k) {
                    candidates.push((k, e));
                }
            }
        }
        for (key, entry) in candidates.iter().filter(|(_, e)| same_kind(e, kind)) {
            let same = match self.config.verify {
                Verify::Off => true,
                Verify::Size => entry.raw_len as usize == data.len(),
                Verify::Bytes => {
                    entry.raw_len as usize == data.len()
                        && match self.read_back(key, entry, |bytes| bytes == data) {
                            Ok(same) => same,
                            // A stored copy that cannot be read must not absorb new copies.
                            Err(e) => {
                                log::warn!("dedup candidate {} unreadable, storing a fresh copy: {e}", key.short());
                                false
                            }
                        }
                }
            };
            if same {
                return Ok(Lookup::Found(*key));
            }
        }
        let seq = candidates.iter().map(|(k, _)| k.seq + 1).max().unwrap_or(0);
        Ok(Lookup::New { seq, collides: candidates.iter().any(|(_, e)| same_kind(e, kind)) })
    }

    /// `check` of the bytes of a stored chunk, read back to join it (under verify = bytes):
    /// from the read cache if it holds them, else decoded into this thread's buffer and not
    /// kept. An ingest reads back every copy it dedups (a quarter of a crawl's bytes, or
    /// more): through the cache each was a new buffer of up to 4 MiB, faulted in page by page
    /// (a tenth of the CPU of importing a plain crawl), and pushed out what readers use.
    pub(in crate::store) fn read_back(&self, key: &ChunkKey, entry: &ChunkEntry, check: impl FnOnce(&[u8]) -> bool) -> Result<bool> {
        thread_local! {
            static READ_BACK: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
        }
        // (The cache's lock is let go before the comparison.)
        let cached = self.cache.chunks.locked().get(key);
        if let Some(bytes) = cached {
            return Ok(check(&bytes));
        }
        let n = entry.raw_len as usize;
        if n > crate::pack::MAX_RAW as usize {
            return Err(StoreError::MissingChunk(format!("{} (an entry of {n} bytes)", key.short())));
        }
        let r = crate::sync::with_thread_buffer(&READ_BACK, n, READ_BACK_KEPT, |buf| self.packs.read_into(entry.pack, entry.offset, key, entry.stored_len, buf).map(|()| check(buf)));
        Ok(r?)
    }

    /// The chunk `data` is in the store (`Plan::Found`), or the key it takes as a new one
    /// and whether a dictionary helps its kind (which then samples it for the next one).
    fn plan(&self, w: &mut Writer, data: &[u8], kind: ChunkKind, digest: Digest, found: Lookup) -> Result<Plan> {
        let seq = match found {
            Lookup::Found(key) => return Ok(Plan::Found(key)),
            Lookup::New { seq, collides } => {
                if collides {
                    w.collisions += 1;
                    log::warn!("digest collision on {}: stored as a separate chunk (seq {seq})", ChunkKey { digest, seq: 0 }.short());
                }
                seq
            }
        };
        // Payloads, headers and unparsed bytes are what a dictionary helps.
        let dictable = self.config.compression == Compression::Zstd && matches!(kind, ChunkKind::Raw | ChunkKind::Literal | ChunkKind::Payload | ChunkKind::PayloadHead);
        // Trained on a web archive's own text only: unparsed bytes (a WACZ's CDXJ index, a
        // member kept raw) compress with it but are not sampled, so that a store's first
        // file decides its dictionary by its WARC records (a WACZ alone, its index sampled
        // first, stored its crawl's payloads 0.3 % larger).
        if dictable && kind != ChunkKind::Raw && w.dicts.wants(data) {
            // What the chunk's frame will hold (a header block packed), which is what the
            // dictionary must match.
            match crate::pack::frame_of(crate::store::packed_headers(self.config.version), kind, data) {
                Some(frame) => w.dicts.sample(&frame),
                None => w.dicts.sample(data),
            }
        }
        Ok(Plan::New(ChunkKey { digest, seq }, dictable))
    }

    /// Once enough new chunks are sampled, trains a dictionary and stores it (before the
    /// chunks compressed with it; committed with this file). The caller has appended every
    /// chunk it planned: the dictionary must not take one of their keys.
    fn train_dictionary(&self, w: &mut Writer, added: &mut Added) -> Result<()> {
        let Some(bytes) = w.dicts.train() else { return Ok(()) };
        let key = self.store_chunk(w, added, &bytes, ChunkKind::Dict)?;
        // Blobs name a dictionary by digest, found at seq 0, as kind Dict: one that landed
        // otherwise (a collision) is not used.
        let is_dict = |e: &ChunkEntry| e.kind == ChunkKind::Dict as u8;
        let stored_as_dict = key.seq == 0 && self.stored_entry(w, &key)?.is_some_and(|e| is_dict(&e));
        // Its chunks may be read back (a verify) before it is in the index.
        if stored_as_dict && self.packs.pin_dictionary(key.digest, &bytes) {
            w.dicts.stored(key.digest, &bytes);
            added.dict = Some(key);
        }
        Ok(())
    }

    /// The entry of chunk `key`: among those this ingest appended (`w.pending`, not in the
    /// index yet), else in the index.
    pub(in crate::store) fn stored_entry(&self, w: &Writer, key: &ChunkKey) -> Result<Option<ChunkEntry>> {
        match w.pending.get(&key.digest).and_then(|v| v.iter().find(|(k, _)| k == key)) {
            Some((_, e)) => Ok(Some(e.clone())),
            None => Ok(self.index.chunk(key)?),
        }
    }

    /// Appends a new chunk (`compressed` as the codec and bytes to store, None to store it
    /// as it is) to the open pack, opening one first if need be.
    fn append_chunk(&self, w: &mut Writer, added: &mut Added, key: ChunkKey, kind: ChunkKind, data: &[u8], compressed: Option<(Codec, Vec<u8>)>) -> Result<()> {
        let (codec, stored) = match &compressed {
            Some((codec, z)) => (*codec, z.as_slice()),
            None => (Codec::None, data),
        };
        let tmp_dir = crate::store::layout::packs_tmp(&self.root);
        if w.open.is_none() {
            let id = self.alloc_pack_id();
            w.open = Some(OpenPack::create(&tmp_dir, id, self.config.version).map_err(|err| StoreError::Io { path: tmp_dir.clone(), err })?);
        }
        let open = w.open.as_mut().expect("open pack exists");
        let info = {
            let _taken = self.space.take((BLOB_HEADER_LEN + stored.len()) as u64).map_err(|err| StoreError::Io { path: tmp_dir.clone(), err })?;
            open.append(key, kind, codec, data.len() as u32, stored).map_err(|err| StoreError::Io { path: tmp_dir.clone(), err })?
        };
        added.new_bytes += (BLOB_HEADER_LEN + stored.len()) as u64;
        let entry = ChunkEntry {
            pack: open.id,
            offset: info.offset,
            stored_len: info.stored_len,
            raw_len: info.raw_len,
            codec: info.codec,
            kind: info.kind,
            refs: 0,
        };
        w.pending.entry(key.digest).or_default().push((key, entry));
        if open.len() >= self.config.pack_size {
            self.seal_open(w)?;
        }
        Ok(())
    }

    /// Finds each of `items` (bytes, kind) in the store or appends it as a new chunk, in
    /// order, and returns their keys. Digests, and the compression of the chunks the store
    /// lacks, are worked out on two threads.
    /// Ingest stores a window's chunks while the window's parses are proven on two other
    /// threads: compressed one at a time, they made this thread the window's longest, and a
    /// core idle once the proofs were done. New chunks are compressed and appended a few
    /// MiB at a time (`BATCH_BYTES`), so what waits compressed stays small whatever the
    /// window, and before a dictionary is trained.
    pub(in crate::store) fn store_chunks(&self, w: &mut Writer, added: &mut Added, items: &[(&[u8], ChunkKind)]) -> Result<Vec<ChunkKey>> {
        self.store_chunks_at(w, added, items, None)
    }

    /// `store_chunks`, the new chunks that take no dictionary compressed at `level` if one
    /// is given.
    pub(in crate::store) fn store_chunks_at(&self, w: &mut Writer, added: &mut Added, items: &[(&[u8], ChunkKind)], level: Option<i32>) -> Result<Vec<ChunkKey>> {
        // Digests, and where each chunk is in the index (reading a stored copy back, as the
        // verify mode asks, is most of it), on two threads. Ahead of its turn, but the
        // index's chunks change only by this writer's commits, by gc (which takes the writer
        // too) and on a store several nodes write by the others' chunks taken in, which a
        // lookup at its turn could miss just as well (their copy is then garbage for gc). A
        // chunk whose digest this ingest has appended by its turn (`w.pending`) is looked up
        // again then.
        let pending = &w.pending;
        let work = |_: &mut (), i: usize| {
            let digest = (self.digest)(items[i].0);
            let found = (!pending.contains_key(&digest)).then(|| self.find_chunk(&[], items[i].0, digest, items[i].1));
            (digest, found)
        };
        let (digests, mut found): (Vec<Digest>, Vec<Option<Result<Lookup>>>) = on_two_threads(items.len(), || (), work).into_iter().flatten().unzip();
        let mut keys: Vec<ChunkKey> = Vec::with_capacity(items.len());
        // Plans of `items[keys.len()..]`, and the new bytes among them.
        let mut plans: Vec<Batched> = Vec::new();
        let mut planned_bytes = 0usize;
        let mut first_new: HashMap<Digest, usize, crate::digest::DigestState> = HashMap::default();
        for (i, (&(data, kind), &digest)) in items.iter().zip(&digests).enumerate() {
            if let Some(&j) = first_new.get(&digest) {
                // Bytes of another kind wait too: they take the digest's next seq.
                let same = kinds_share(items[j].1, kind)
                    && match self.config.verify {
                        Verify::Off => true,
                        Verify::Size => items[j].0.len() == data.len(),
                        Verify::Bytes => items[j].0 == data,
                    };
                plans.push(if same { Batched::SameAs(j) } else { Batched::Later });
                continue;
            }
            let found = match (found[i].take(), w.pending.get(&digest)) {
                (Some(found), None) => found?,
                (_, pending) => self.find_chunk(pending.map_or(&[], |p| p.as_slice()), data, digest, kind)?,
            };
            let planned = match self.plan(w, data, kind, digest, found)? {
                Plan::Found(key) => Batched::Found(key),
                Plan::New(key, dictable) => {
                    if dictable && w.dicts.ready() {
                        // A dictionary comes next: the chunks planned before it are appended
                        // first, so that it cannot take one of their keys.
                        self.carry_out(w, added, items, &mut plans, &mut keys, level)?;
                        planned_bytes = 0;
                        self.train_dictionary(w, added)?;
                    }
                    first_new.insert(digest, i);
                    planned_bytes += data.len();
                    Batched::New(key, if dictable { w.dicts.in_use() } else { None })
                }
            };
            plans.push(planned);
            if planned_bytes >= BATCH_BYTES {
                self.carry_out(w, added, items, &mut plans, &mut keys, level)?;
                planned_bytes = 0;
            }
        }
        self.carry_out(w, added, items, &mut plans, &mut keys, level)?;
        Ok(keys)
    }

    /// Carries out `plans`, those of `items[keys.len()..]`: the new chunks compressed on two
    /// threads, then every chunk appended or named in order, its key pushed to `keys`.
    fn carry_out(&self, w: &mut Writer, added: &mut Added, items: &[(&[u8], ChunkKind)], plans: &mut Vec<Batched>, keys: &mut Vec<ChunkKey>, level: Option<i32>) -> Result<()> {
        let base = keys.len();
        let new: Vec<(usize, Option<InUse>)> = plans.iter().enumerate().filter_map(|(k, p)| if let Batched::New(_, d) = p { Some((base + k, *d)) } else { None }).collect();
        let mut compressed: Vec<Option<(Codec, Vec<u8>)>> = match self.config.compression {
            Compression::Zstd => {
                let dicts = &w.dicts;
                let settled_later = self.share().settles();
                let packed_headers = crate::store::packed_headers(self.config.version);
                let work = |z: &mut Compressors, n: usize| {
                    let (i, dict) = new[n];
                    let (data, kind) = items[i];
                    let data = &*crate::pack::frame_of(packed_headers, kind, data)?;
                    let with_dict = dict.and_then(|d| dicts.shared(d)).and_then(|shared| shared.compress(z.for_dictionary()?, data)).map(|z| (Codec::ZstdDict, z));
                    let level = level.unwrap_or(zstd_level(kind, settled_later));
                    with_dict.or_else(|| z.at(level)?.compress(data).ok().map(|z| (Codec::Zstd, z)))
                };
                on_two_threads(new.len(), Compressors::default, work).into_iter().map(Option::flatten).collect()
            }
            Compression::None => new.iter().map(|_| None).collect(),
        };
        // Counted towards the dictionary's renewal: whatever it compressed, saving or not.
        for (&(i, dict), z) in new.iter().zip(&mut compressed) {
            if let (Some(d), Some((Codec::ZstdDict, _))) = (dict, &*z) {
                w.dicts.count(d, items[i].0.len() as u64);
            }
            if z.as_ref().is_some_and(|(_, z)| !saves(z, items[i].0)) {
                *z = None;
            }
        }
        // Chunks sharing a digest with an earlier new one but not its bytes are stored last,
        // when nothing planned waits any more (storing one may train a dictionary).
        let mut later = Vec::new();
        let mut compressed = compressed.into_iter();
        for (k, plan) in plans.drain(..).enumerate() {
            let (data, kind) = items[base + k];
            keys.push(match plan {
                Batched::Found(key) => key,
                Batched::New(key, _) => {
                    self.append_chunk(w, added, key, kind, data, compressed.next().flatten())?;
                    key
                }
                Batched::SameAs(j) => keys[j],
                Batched::Later => {
                    later.push(base + k);
                    ChunkKey { digest: [0; 32], seq: 0 }
                }
            });
        }
        for i in later {
            keys[i] = self.store_chunk(w, added, items[i].0, items[i].1)?;
        }
        Ok(())
    }

    /// Whether two stored copies under one key hold the same chunk, as the verify mode
    /// proves it.
    fn same_chunk(&self, key: &ChunkKey, a: &ChunkEntry, b: &ChunkEntry) -> Result<bool> {
        Ok(match self.config.verify {
            Verify::Off => true,
            Verify::Size => a.raw_len == b.raw_len,
            Verify::Bytes => {
                a.raw_len == b.raw_len && *self.packs.read(a.pack, a.offset, key, a.stored_len)? == *self.packs.read(b.pack, b.offset, key, b.stored_len)?
            }
        })
    }

    /// Writes `b` with the refcount changes in one synced batch. The caller holds the
    /// namespace lock (`ns`), which makes the refcount read-modify-write atomic.
    pub(in crate::store) fn commit(&self, ns: &mut Ns, b: Batch, delta: RefDelta) -> Result<()> {
        self.commit_with(ns, b, delta, &Pending::default(), 0, None)
    }

    /// `commit` for a batch that references the chunks of an ingest (`pending`): the open
    /// pack is made durable first, so the index never points at bytes that are not on disk.
    /// `dict`: a dictionary the ingest stored, committed with it (one reference for good)
    /// and named in the index as the one in use; the writer compresses with it once this
    /// batch is durable.
    pub(in crate::store) fn commit_with(&self, ns: &mut Ns, mut b: Batch, mut delta: RefDelta, pending: &Pending, collisions: u64, dict: Option<ChunkKey>) -> Result<()> {
        if let Some(k) = dict {
            delta.add([k], 1);
            b.put_meta_bytes(&self.index, crate::store::ingest::dict::META_KEY, &k.to_bytes());
        }
        if !pending.is_empty() {
            let mut w = self.writer.locked();
            if let Some(open) = w.open.as_mut() {
                let dir = crate::store::layout::packs_tmp(&self.root);
                open.sync().map_err(|err| StoreError::Io { path: dir, err })?;
                crate::failpoint::crash_at("pack_synced");
            }
        }
        // In key order: RocksDB's memtable inserts a batch's keys in increasing order at a
        // fraction of the cost of random ones (its skip list keeps the last insert's place),
        // and a commit writes thousands (measured: the index write 40 % faster).
        let mut changes: Vec<(ChunkKey, i64)> = delta.0.into_iter().filter(|&(_, d)| d != 0).collect();
        changes.sort_unstable();
        // Batched lookups (a file references thousands of chunks), a bounded number at once
        // (each result pins its block in RocksDB's cache until it is read).
        let mut committed = Vec::with_capacity(changes.len());
        for part in changes.chunks(LOOKUP_BATCH) {
            let keys: Vec<ChunkKey> = part.iter().map(|(k, _)| *k).collect();
            committed.extend(self.index.chunks(&keys)?);
        }
        for ((key, d), committed) in changes.into_iter().zip(committed) {
            let new = pending.get(&key.digest).and_then(|v| v.iter().find(|(k, _)| *k == key)).map(|(_, e)| e.clone());
            let mut entry = match (committed, new) {
                // Another ingest committed the same new chunk after this one stored its own
                // copy (ingests run one at a time, but commit later): one entry, both
                // references; this copy is garbage in its pack. Unless the two differ
                // behind one digest, or are of kinds that do not share (`kinds_share`: the
                // other was not in the index when this one was planned): then nothing of
                // this commit may count, and storing the file again takes the next seq.
                (Some(committed), Some(ours)) => {
                    if !kinds_share(ChunkKind::from_u8(committed.kind), ChunkKind::from_u8(ours.kind)) || !self.same_chunk(&key, &committed, &ours)? {
                        return Err(StoreError::ConcurrentCollision(key.to_string()));
                    }
                    committed
                }
                (Some(committed), None) => committed,
                (None, Some(ours)) => ours,
                (None, None) => return Err(StoreError::MissingChunk(key.to_string())),
            };
            let refs = entry.refs as i64 + d;
            if refs < 0 {
                // The index contradicts itself: refuse the change rather than guess.
                log::error!("refcount of chunk {} would drop below zero ({refs}); change refused", key.short());
                return Err(StoreError::RefcountUnderflow { chunk: key.to_string(), refs });
            }
            entry.refs = refs as u64;
            b.put_chunk(&self.index, &key, &entry);
        }
        if collisions > 0 {
            let total = self.index.meta_u64("collisions")? + collisions;
            b.put_meta_u64(&self.index, "collisions", total);
        }
        crate::failpoint::crash_at("before_commit");
        self.write_batch(ns, b)?;
        crate::failpoint::crash_at("committed");
        if let Some(k) = dict {
            self.writer.locked().dicts.activate(&k.digest);
            self.packs.unpin_dictionary(&k.digest);
        }
        Ok(())
    }
}
