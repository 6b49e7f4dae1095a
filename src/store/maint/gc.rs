//! `gc` (drop unreferenced chunks, rewrite packs that are mostly dead), and the sorted
//! reference stream that gc and `fsck` merge with the chunk table.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::PathBuf;

use crate::store::namespace::Inode;
use crate::store::maint::settle;
use crate::store::{io_at, Ns, Result, Store, StoreError};
use crate::LockExt;
use crate::digest::ChunkKey;
use crate::extsort::{Sorted, Sorter};
use crate::index::{Batch, ChunkEntry};
use crate::store::delta;
use crate::pack::{self, ChunkKind, OpenPack, BLOB_HEADER_LEN};

#[derive(Clone, Debug, Default)]
pub struct GcReport {
    pub chunks_dropped: u64,
    /// Packs no longer used: deleted, or on an object store put in its trash.
    pub packs_deleted: u64,
    pub packs_rewritten: u64,
    /// Of those, packs rewritten only to settle them (`settle`: as ingest wrote them, their
    /// chunks recompressed at the archival level).
    pub packs_settled: u64,
    /// Packs left for a later gc to settle: the first that did not fit in this one's room
    /// and those after it (not looked at, so an upper bound).
    pub packs_left_unsettled: u64,
    /// Chunks that did not decode to their digest, or whose dictionary is missing or
    /// damaged: copied as they were.
    pub chunks_damaged: u64,
    /// Objects of packs an earlier gc trashed, deleted now (object store only).
    pub packs_purged: u64,
    /// Chunks settled as deltas against a relative (format 9, `delta`).
    pub deltas_made: u64,
    /// Files whose gzip members' parses were rewritten compact (`reparse`: a store made with
    /// `--parses compact-at-gc`).
    pub files_reparsed: u64,
    /// Files that could not be read back to be reparsed (damage), or met a bug: left as
    /// they were.
    pub files_not_reparsed: u64,
    /// Why rewriting parses stopped before its end (the disk full or failing): gc went on,
    /// and the next tries the files left.
    pub reparse_stopped: Option<String>,
    pub bytes_before: u64,
    pub bytes_after: u64,
}

/// What gc does besides dropping what nothing uses.
#[derive(Clone, Copy, Debug)]
pub struct GcOptions {
    /// Settle the packs ingest wrote (`settle`): rewrite each once, its chunks recompressed
    /// at the archival zstd level. On by default; a store without compression has nothing
    /// to settle.
    pub settle: bool,
}

impl Default for GcOptions {
    fn default() -> GcOptions {
        GcOptions { settle: true }
    }
}

/// Raw bytes gc reads before it settles them (`settle`) and writes them out.
const SETTLE_BATCH: usize = 16 << 20;

/// gc's pack being written and the index entries that move into it (or, for a delta's base,
/// change with it) once it is sealed.
struct Rewritten {
    open: Option<OpenPack>,
    moved: HashMap<ChunkKey, ChunkEntry>,
    /// Chunks whose delta hints are spent, deleted with the entries.
    spent: Vec<ChunkKey>,
    bases: delta::make::Choosing,
    /// The settling dictionary (`train`) for the index's meta record to name, with the
    /// first pack's entries.
    settle_dict: Option<ChunkKey>,
}

/// Packs whose dead share is above this are rewritten by gc.
const GC_DEAD_SHARE: f64 = 0.10;
/// How long gc waits for the packs it wrote to reach the object store before it deletes the
/// ones they replace.
const GC_UPLOAD_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

impl Store {
    /// `gc_with` as `warcfs gc` runs it: settling packs too.
    pub fn gc(&self) -> Result<GcReport> {
        self.gc_with(GcOptions::default())
    }

    /// Drops unreferenced chunks and reclaims their pack space, and settles the packs ingest
    /// wrote (`settle`). Memory does not grow with the number of chunks (see `ScanLimits`):
    /// a number per pack, one sort run, one batch.
    pub fn gc_with(&self, opts: GcOptions) -> Result<GcReport> {
        let share = self.share();
        let settling = opts.settle && self.config.compression == crate::store::config::Compression::Zstd && share.settles();
        // What the other nodes of a bucket let this gc do (on a store several nodes write,
        // the bucket's gc lock, and every other node's changes taken in).
        let others = self.peers.before_gc(self)?;
        others.still_exclusive()?;
        // Packs an earlier gc put in the bucket's trash, once no node can still be reading
        // them. (A test shortens the wait with the `trash_no_grace` fail point.)
        let grace = if crate::failpoint::armed("trash_no_grace") { std::time::Duration::ZERO } else { crate::bucket::lock::TRASH_GRACE };
        let purged = self.packs.purge_trash(grace).map_err(io_at(&self.root))?;
        // Fast parses rewritten compact first (each file committed as an ingest is), so that
        // this pass collects the parses they replace and settles the packs they are in.
        // (Whatever the compression: the parses are what is rewritten.)
        let reparsed = if opts.settle && self.config.compact_at_gc && share.settles() { Some(self.reparse()?) } else { None };
        let mut ns = self.ns.locked();
        let mut w = self.writer.locked();
        // (It names chunks this pass may collect; ingests wait for the writer meanwhile.)
        self.tails.clear();
        self.seal_open(&mut w)?;
        self.seal_journal(&mut self.journal.locked())?;
        let packs_dir = crate::store::layout::packs(&self.root);
        let sealed = self.packs.sealed_packs().map_err(io_at(&packs_dir))?;
        let mut rep = GcReport { bytes_before: sealed.iter().map(|p| p.1).sum(), ..GcReport::default() };
        if let Some(r) = reparsed {
            (rep.files_reparsed, rep.files_not_reparsed, rep.reparse_stopped) = (r.files, r.damaged, r.stopped);
        }
        // A checkpoint of the namespace first: every earlier log record becomes garbage
        // that this pass collects, so the log stays the size of the namespace.
        self.checkpoint(&mut ns, true)?;
        // Deltas nothing uses go first, their bases' counts lowered with them: a base whose
        // last delta goes is garbage in this same pass.
        let dead_deltas = self.drop_dead_deltas(&mut ns)?;

        // Live bytes per pack, the packs that hold live chunks (not only log records), and
        // how many chunks nothing references.
        let mut live: HashMap<u64, u64> = HashMap::new();
        let mut chunky: HashSet<u64> = HashSet::new();
        for item in self.index.chunk_iter() {
            let (_, e) = item?;
            if e.refs == 0 {
                rep.chunks_dropped += 1;
            } else {
                if e.kind != ChunkKind::Meta as u8 {
                    chunky.insert(e.pack);
                }
                // A live blob's footer entry is live too: a pack of small blobs, all live, is
                // not rewritten for its footer (it was, with blobs under ~430 bytes).
                *live.entry(e.pack).or_default() += e.stored_len as u64 + (BLOB_HEADER_LEN + pack::FOOTER_ENTRY_LEN) as u64;
            }
        }
        let mut doomed: Vec<u64> = Vec::new();
        let mut rewrite: HashSet<u64> = HashSet::new();
        let (mut unsettled, mut rewrite_bytes) = (Vec::new(), 0u64);
        for (id, size) in sealed {
            let size = size.max(1);
            let live_bytes = live.get(&id).copied().unwrap_or(0);
            if live_bytes == 0 {
                doomed.push(id);
            } else if 1.0 - (live_bytes + pack::FOOTER_FIXED_LEN as u64) as f64 / size as f64 > GC_DEAD_SHARE {
                rewrite.insert(id);
                rewrite_bytes += live_bytes;
            } else if settling && chunky.contains(&id) {
                // (The metadata log's own packs are not settled: checkpoints replace them.)
                unsettled.push((id, size));
            }
        }
        drop((live, chunky));
        let plan = if settling { self.plan_settle(unsettled, rewrite_bytes)? } else { settle::Plan::default() };
        rep.packs_settled = plan.ids.len() as u64;
        rep.packs_left_unsettled = plan.left;
        rewrite.extend(&plan.ids);
        if rep.chunks_dropped > 0 {
            self.refuse_dropping_referenced()?;
        }
        let (damaged, kept, deltas_made) = self.rewrite_packs(&mut ns, &rewrite, settling)?;
        rep.deltas_made = deltas_made;
        rep.chunks_damaged = damaged + plan.damaged;
        // A pack with a live blob that could not be read stays, that blob's entry with it.
        rewrite.retain(|id| !kept.contains(id));
        rep.packs_settled = plan.ids.iter().filter(|id| !kept.contains(id)).count() as u64;
        // Cached chunk places (and, after a dropped key is reused, chunk bytes) are stale now.
        self.cache.clear();
        // On an object store, the packs that replace them must be in the bucket first (a
        // rebuild from the bucket must find every live chunk somewhere), and so must the
        // checkpoint, which replaces every log record in the doomed log packs.
        if !doomed.is_empty() || !rewrite.is_empty() {
            self.seal_journal(&mut self.journal.locked())?;
            self.wait_uploaded(GC_UPLOAD_WAIT)?;
        }
        others.still_exclusive()?;
        // Entries of chunks nothing uses go last, with their packs: a gc stopped before here
        // leaves the index whole (on a shared store, every node's index holds what its
        // listed packs hold).
        if rep.chunks_dropped > 0 {
            // Only those of the packs that go, where an unused chunk keeps its entry while its
            // pack stays (`Share::keeps_unused_entries`).
            let only_of: Option<HashSet<u64>> = share.keeps_unused_entries().then(|| doomed.iter().chain(rewrite.iter()).copied().collect());
            rep.chunks_dropped = 0;
            let mut b = Batch::new();
            // A delta dropped lowers its base's count (in the same batch).
            let mut lowered = delta::bases::Lowered::default();
            for item in self.index.chunk_iter() {
                let (k, e) = item?;
                if e.refs == 0 && only_of.as_ref().is_none_or(|gone| gone.contains(&e.pack)) {
                    b.delete_chunk(&self.index, &k);
                    b.delete_delta_base_hint(&self.index, &k);
                    lowered.lower(self, &k, &e)?;
                    rep.chunks_dropped += 1;
                    if b.log().len() >= self.limits.batch_ops {
                        lowered.put_into(&self.index, &mut b);
                        self.gc_write(&mut ns, std::mem::take(&mut b))?;
                    }
                }
            }
            lowered.put_into(&self.index, &mut b);
            self.gc_write(&mut ns, b)?;
            self.packs.forget_bases();
        }
        rep.chunks_dropped += dead_deltas;
        for id in doomed.iter().chain(rewrite.iter()) {
            self.packs.delete(*id)?;
            crate::failpoint::crash_at("gc_pack_removed");
        }
        rep.packs_deleted = doomed.len() as u64;
        rep.packs_purged = purged;
        rep.packs_rewritten = rewrite.len() as u64;
        // What is settled now, so that the next gc need not ask those packs again.
        let mut marks = Batch::new();
        plan.mark(self, &mut marks);
        if !marks.is_empty() {
            self.index.write(marks)?;
        }
        // The checkpoint's pack counts too: what gc reports is what the store shrank by.
        self.seal_journal(&mut self.journal.locked())?;
        drop((w, ns));
        // The index as small as it can be: what ingest wrote since the last flush out of the
        // write-ahead log, and the chunk entries gc moved or dropped (each there twice until
        // RocksDB merges them) merged.
        self.index.flush_tables()?;
        if rep.chunks_dropped > 0 || !rewrite.is_empty() {
            self.index.compact(crate::index::Index::CHUNKS);
        }
        if rep.files_reparsed > 0 {
            self.index.compact(crate::index::Index::RECIPES);
        }
        rep.bytes_after = self.packs.sealed_packs().map_err(io_at(&packs_dir))?.iter().map(|p| p.1).sum();
        Ok(rep)
    }

    /// One of gc's index batches (chunk entries only, so not logged: they follow from the
    /// packs). Packs are deleted only after the last one.
    pub(in crate::store) fn gc_write(&self, ns: &mut Ns, b: Batch) -> Result<()> {
        if b.is_empty() {
            return Ok(());
        }
        crate::failpoint::crash_at("gc_before_index");
        self.write_batch(ns, b)?;
        crate::failpoint::crash_at("gc_after_index");
        Ok(())
    }

    /// Copies the live blobs of the packs `ids` into new packs, in their old order (a file's
    /// chunks stay together), and moves their index entries there a sealed pack at a time.
    /// Returns how many chunks were found damaged: settling copies one whose bytes do not
    /// decode to its digest as it is; a blob that does not read back intact (its checksum)
    /// is not copied, and its pack, returned in the set, must stay (one damaged chunk must
    /// not stop every gc, nor be written anew under a checksum of its damage). And how many
    /// deltas it made.
    fn rewrite_packs(&self, ns: &mut Ns, ids: &HashSet<u64>, settling: bool) -> Result<(u64, HashSet<u64>, u64)> {
        let mut kept = HashSet::new();
        if ids.is_empty() {
            return Ok((0, kept, 0));
        }
        let runs = self.runs_dir()?;
        // Pack ‖ offset ‖ key ‖ the rest of the entry: sorted, the blobs in their old order.
        let mut places: Sorter<[u8; 70]> = Sorter::new(&runs, self.limits.run_bytes).map_err(io_at(&runs))?;
        for item in self.index.chunk_iter() {
            let (k, e) = item?;
            if e.refs > 0 && ids.contains(&e.pack) {
                let mut r = [0u8; 70];
                r[..8].copy_from_slice(&e.pack.to_be_bytes());
                r[8..16].copy_from_slice(&e.offset.to_be_bytes());
                r[16..52].copy_from_slice(&k.to_bytes());
                r[52..56].copy_from_slice(&e.stored_len.to_be_bytes());
                r[56..60].copy_from_slice(&e.raw_len.to_be_bytes());
                r[60] = e.codec;
                r[61] = e.kind;
                r[62..].copy_from_slice(&e.refs.to_be_bytes());
                places.push(r).map_err(io_at(&runs))?;
            }
        }
        // Deltas (format 9) are made of chunks settled for the first time: those of packs
        // whose first blob is at level 0.
        let mut fresh = HashSet::new();
        if settling {
            for &id in ids {
                if self.packs.first_settled(id)? == Some(0) {
                    fresh.insert(id);
                }
            }
        }
        let mut dicts = settle::Dicts::default();
        let target = if settling { self.settle_dictionary(&fresh)? } else { None };
        let mut bases = delta::make::Choosing { enabled: settling && crate::store::deltas(self.config.version), ..Default::default() };
        if bases.enabled {
            bases.fresh = fresh;
        }
        let mut out = Rewritten { open: None, moved: HashMap::new(), spent: Vec::new(), bases, settle_dict: None };
        if let Some(t) = target.filter(|t| dicts.target(t.key.digest, &t.bytes, self.settle_level())) {
            if t.new {
                // First in gc's first pack: its entry commits with that pack's, before or
                // with every chunk compressed with it.
                self.write_dictionary(&mut out, &t)?;
            }
            if !t.named {
                // With the first pack's entries too (`seal_rewritten`): the next gc goes on
                // with it even if this one stops after that.
                out.settle_dict = Some(t.key);
            }
        }
        // Blobs read and not yet written: settled a batch at a time, on two threads.
        let mut blobs: Vec<settle::Blob> = Vec::new();
        let (mut batch_bytes, mut damaged) = (0usize, 0u64);
        for r in places.finish().map_err(io_at(&runs))? {
            let r = r.map_err(io_at(&runs))?;
            let k = ChunkKey::from_bytes(&r[16..52]).expect("36 bytes");
            let be32 = |b: &[u8]| u32::from_be_bytes(b.try_into().expect("4 bytes"));
            let be64 = |b: &[u8]| u64::from_be_bytes(b.try_into().expect("8 bytes"));
            let e = crate::index::ChunkEntry { pack: be64(&r[..8]), offset: be64(&r[8..16]), stored_len: be32(&r[52..56]), raw_len: be32(&r[56..60]), codec: r[60], kind: r[61], refs: be64(&r[62..]) };
            let (blob, stored) = match self.packs.read_stored(e.pack, e.offset, &k, e.stored_len) {
                Ok(read) => read,
                Err(err @ pack::PackError::Corrupt { .. }) => {
                    log::warn!("gc: {err}; chunk {} left where it is, and its pack kept (run `warcfs fsck`)", k.short());
                    damaged += 1;
                    kept.insert(e.pack);
                    continue;
                }
                Err(err) => return Err(err.into()),
            };
            batch_bytes += e.raw_len as usize;
            // The blob's own codec (the header's, checked), as gc always copied it.
            blobs.push(settle::Blob { key: k, entry: crate::index::ChunkEntry { codec: blob.codec, ..e }, stored, base: None });
            if batch_bytes >= SETTLE_BATCH {
                damaged += self.write_rewritten(ns, &mut out, &mut dicts, std::mem::take(&mut blobs), settling)?;
                batch_bytes = 0;
            }
        }
        damaged += self.write_rewritten(ns, &mut out, &mut dicts, blobs, settling)?;
        self.seal_rewritten(ns, &mut out)?;
        Ok((damaged, kept, out.bases.made))
    }

    /// Appends the settling dictionary `t` (`train`) to gc's open pack as a `Dict` chunk,
    /// compressed, refcount 1 for good as ingest's dictionaries.
    fn write_dictionary(&self, out: &mut Rewritten, t: &crate::store::maint::train::Target) -> Result<()> {
        let tmp_dir = crate::store::layout::packs_tmp(&self.root);
        let level = self.settle_level();
        let (codec, stored) = match zstd::bulk::compress(&t.bytes, level as i32) {
            Ok(z) if z.len() < t.bytes.len() => (pack::Codec::Zstd, z),
            _ => (pack::Codec::None, t.bytes.clone()),
        };
        if out.open.is_none() {
            let nid = self.alloc_pack_id();
            out.open = Some(OpenPack::create(&tmp_dir, nid, self.config.version).map_err(io_at(&tmp_dir))?);
        }
        let o = out.open.as_mut().expect("created");
        let _taken = self.space.take((BLOB_HEADER_LEN + stored.len()) as u64).map_err(io_at(&tmp_dir))?;
        let raw_len = u32::try_from(t.bytes.len()).map_err(|_| StoreError::Bug("a dictionary over 4 GiB".into()))?;
        let info = o.append_settled(t.key, ChunkKind::Dict, codec, raw_len, &stored, level).map_err(io_at(&tmp_dir))?;
        out.moved.insert(t.key, ChunkEntry { pack: o.id, offset: info.offset, stored_len: info.stored_len, raw_len, codec: codec as u8, kind: ChunkKind::Dict as u8, refs: 1 });
        Ok(())
    }

    /// Seals gc's open pack, if any, and moves the index entries of its blobs there.
    fn seal_rewritten(&self, ns: &mut Ns, out: &mut Rewritten) -> Result<()> {
        let packs_dir = crate::store::layout::packs(&self.root);
        if let Some(o) = out.open.take() {
            let id = o.id;
            o.seal(&packs_dir).map_err(io_at(&packs_dir))?;
            self.packs.sealed(id);
        }
        let mut b = Batch::new();
        for (k, e) in out.moved.drain() {
            b.put_chunk(&self.index, &k, &e);
        }
        for k in out.spent.drain(..) {
            b.delete_delta_base_hint(&self.index, &k);
        }
        if let Some(k) = out.settle_dict.take() {
            b.put_meta_bytes_unlogged(&self.index, crate::store::maint::train::META_KEY, &k.to_bytes());
        }
        out.bases.sealed();
        self.gc_write(ns, b)
    }

    /// Appends `blobs` to gc's new packs in their order, settled first if `settling`, and
    /// moves their index entries there a sealed pack at a time. Returns how many chunks
    /// settling found damaged. Without `settling`, every blob is written at level 0, so a
    /// later gc settles it (again, if it was).
    fn write_rewritten(&self, ns: &mut Ns, out: &mut Rewritten, dicts: &mut settle::Dicts, mut blobs: Vec<settle::Blob>, settling: bool) -> Result<u64> {
        let tmp_dir = crate::store::layout::packs_tmp(&self.root);
        let spent = self.choose_bases(&mut out.bases, &out.moved, &mut blobs)?;
        out.spent.extend(spent);
        let damaged = if settling { self.settle(dicts, &mut blobs)? } else { 0 };
        for b in blobs {
            let e = &b.entry;
            if out.open.as_ref().is_some_and(|o| o.len() >= self.config.pack_size) {
                self.seal_rewritten(ns, out)?;
            }
            if out.open.is_none() {
                let nid = self.alloc_pack_id();
                out.open = Some(OpenPack::create(&tmp_dir, nid, self.config.version).map_err(io_at(&tmp_dir))?);
            }
            let o = out.open.as_mut().expect("created");
            let codec = pack::Codec::from_u8(e.codec).unwrap_or(pack::Codec::None);
            let _taken = self.space.take((BLOB_HEADER_LEN + b.stored.len()) as u64).map_err(io_at(&tmp_dir))?;
            let level = if settling { self.settle_level() } else { 0 };
            let info = o.append_settled(b.key, ChunkKind::from_u8(e.kind), codec, e.raw_len, &b.stored, level).map_err(io_at(&tmp_dir))?;
            let pack = o.id;
            // (Deltas made by this gc raise their bases' counts: an entry moved after that
            // carries the count as it is now, not as gc first read it.)
            let refs = if out.bases.made > 0 && delta::make::data(e.kind) { self.current_refs(&out.moved, &b.key, e.refs)? } else { e.refs };
            out.moved.insert(b.key, crate::index::ChunkEntry { pack, offset: info.offset, stored_len: info.stored_len, refs, ..e.clone() });
            match (&b.base, codec) {
                (Some((base, _)), pack::Codec::ZstdDelta) => {
                    self.raise_base(&mut out.moved, base)?;
                    out.bases.deltas_in_open.insert(b.key, *base);
                    out.bases.made += 1;
                }
                (_, pack::Codec::ZstdDelta) => {}
                _ if settling => {
                    out.bases.whole_in_open.insert(b.key);
                }
                _ => {}
            }
        }
        Ok(damaged)
    }

    /// Before gc drops chunks whose refcount is 0, every recipe is read to prove none uses
    /// one: a refcount that went wrong must stop gc, not take bytes a file still needs.
    pub(in crate::store) fn refuse_dropping_referenced(&self) -> Result<()> {
        let refs = self.sorted_references(|ino, _, described| match described {
            Ok(_) => Ok(()),
            Err(e) => {
                // (`repair index` counts the chunks of a piece it could not read as 0.)
                let path = self.paths_of(&HashSet::from([ino]))?.remove(&ino).unwrap_or_else(|| format!("inode {ino}"));
                log::error!("gc stopped: the recipe of {path} cannot be read: {e}");
                Err(StoreError::GcRefused(format!("the recipe of {path} cannot be read ({e}), so the chunks it uses cannot be told from garbage; nothing was deleted. Restore its pack from a backup, or see `warcfs fsck`")))
            }
        })?;
        let mut groups = RefGroups::new(refs, 1);
        for item in self.index.chunk_iter() {
            let (k, e) = item?;
            while groups.below(&k)?.is_some() {}
            if let Some(g) = groups.take(&k)? {
                if e.refs == 0 {
                    let ino = g.inos.first().copied().unwrap_or(0);
                    log::error!("gc stopped: chunk {} has refcount 0 but inode {ino} uses it", k.short());
                    return Err(StoreError::GcRefused(format!("chunk {} has refcount 0 but inode {ino} uses it; nothing was deleted. Run `warcfs fsck`", k.short())));
                }
            }
        }
        Ok(())
    }

    /// Where fsck and gc keep their sort runs (`STORE/cache/runs`; a run outlives its
    /// process only if the process was killed, and the next exclusive open removes it).
    pub(in crate::store) fn runs_dir(&self) -> Result<PathBuf> {
        let dir = crate::store::layout::cache(&self.root).join("runs");
        fs::create_dir_all(&dir).map_err(io_at(&dir))?;
        Ok(dir)
    }

    /// Every reference every file's recipe holds (`recipe::references`) and every delta's to
    /// its base (`delta::bases`), sorted by chunk key, with the file's inode. `visit` sees each file with the bytes its recipe
    /// describes, or why the recipe could not be read; an error from it stops the pass.
    pub(in crate::store) fn sorted_references(&self, mut visit: impl FnMut(u64, &Inode, Result<u64>) -> Result<()>) -> Result<Sorted<RefRecord>> {
        let runs = self.runs_dir()?;
        let mut sorter: Sorter<RefRecord> = Sorter::new(&runs, self.limits.run_bytes).map_err(io_at(&runs))?;
        for item in self.index.inode_iter::<Inode>() {
            let (ino, inode) = item?;
            let Some(head) = &inode.recipe else { continue };
            match self.recipe_references(head) {
                Ok((pieces, keys)) => {
                    for k in keys {
                        let mut r = [0u8; 44];
                        r[..36].copy_from_slice(&k.to_bytes());
                        r[36..].copy_from_slice(&ino.to_be_bytes());
                        sorter.push(r).map_err(io_at(&runs))?;
                    }
                    visit(ino, &inode, Ok(pieces.iter().map(|p| p.len()).sum()))?;
                }
                Err(e) => visit(ino, &inode, Err(e))?,
            }
        }
        // A delta's reference to its base, as a file's would be (no file's inode).
        self.delta_references(&mut sorter, &runs)?;
        sorter.finish().map_err(io_at(&runs))
    }
}

/// How much fsck and gc hold at once, whatever the store's size.
#[derive(Clone, Copy, Debug)]
pub struct ScanLimits {
    /// Bytes of one in-memory sort run (references, blob places).
    pub run_bytes: usize,
    /// Chunk entries changed per index batch.
    pub batch_ops: usize,
    /// The settling dictionary's sizes (`train`; its samples are the memory it holds).
    pub training: crate::store::maint::train::Training,
}

impl Default for ScanLimits {
    fn default() -> Self {
        ScanLimits { run_bytes: 32 << 20, batch_ops: 100_000, training: Default::default() }
    }
}

/// Chunk key ‖ inode holding the reference (big-endian): sorted, a chunk's references come
/// together, in the chunk table's order.
pub(in crate::store) type RefRecord = [u8; 44];

/// The references to one chunk: how many, and the first few distinct files holding them.
pub(in crate::store) struct RefGroup {
    pub key: ChunkKey,
    pub count: u64,
    pub inos: Vec<u64>,
}

/// A sorted reference stream, a chunk at a time, for merging with `Index::chunk_iter`.
pub(in crate::store) struct RefGroups {
    refs: std::iter::Peekable<Sorted<RefRecord>>,
    named: usize,
    next: Option<RefGroup>,
}

impl RefGroups {
    pub fn new(refs: Sorted<RefRecord>, named: usize) -> RefGroups {
        RefGroups { refs: refs.peekable(), named, next: None }
    }

    fn fill(&mut self) -> Result<()> {
        if self.next.is_some() {
            return Ok(());
        }
        let Some(first) = self.refs.next() else { return Ok(()) };
        let first = first.map_err(|err| StoreError::Io { path: "sort run".into(), err })?;
        let key = ChunkKey::from_bytes(&first[..36]).expect("36 bytes");
        let ino_of = |r: &RefRecord| u64::from_be_bytes(r[36..].try_into().expect("8 bytes"));
        // (A delta's reference names no file.)
        let first_ino = ino_of(&first);
        let mut g = RefGroup { key, count: 1, inos: if first_ino == delta::bases::DELTA_REFERENCE { Vec::new() } else { vec![first_ino] } };
        while let Some(r) = self.refs.next_if(|r| r.as_ref().map_or(true, |r| r[..36] == first[..36])) {
            let r = r.map_err(|err| StoreError::Io { path: "sort run".into(), err })?;
            g.count += 1;
            let ino = ino_of(&r);
            if ino != delta::bases::DELTA_REFERENCE && g.inos.len() < self.named && g.inos.last() != Some(&ino) {
                g.inos.push(ino);
            }
        }
        self.next = Some(g);
        Ok(())
    }

    /// The next chunk's references, if that chunk sorts before `key`.
    pub fn below(&mut self, key: &ChunkKey) -> Result<Option<RefGroup>> {
        self.fill()?;
        Ok(self.next.take_if(|g| g.key < *key))
    }

    /// The references to `key`, if it is the next chunk referenced.
    pub fn take(&mut self, key: &ChunkKey) -> Result<Option<RefGroup>> {
        self.fill()?;
        Ok(self.next.take_if(|g| g.key == *key))
    }

    pub fn next_group(&mut self) -> Result<Option<RefGroup>> {
        self.fill()?;
        Ok(self.next.take())
    }
}
