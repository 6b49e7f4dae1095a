//! Whole-store passes: `stats` (what is stored and how well it dedups), `fsck` (does every
//! reference resolve to intact bytes, and does every refcount equal its references) and `gc`
//! (drop unreferenced chunks, rewrite packs that are mostly dead).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs::{self, File};

use serde::Serialize;

use super::namespace::{Inode, InodeKind};
use super::{io_at, Result, Store, StoreError};
use crate::LockExt;
use crate::digest::ChunkKey;
use crate::index::{Batch, ChunkEntry};
use crate::pack::{self, ChunkKind, OpenPack, BLOB_HEADER_LEN};
use crate::recipe::FileStats;

#[derive(Clone, Debug, Default, Serialize)]
pub struct Stats {
    pub files: u64,
    pub directories: u64,
    pub logical_bytes: u64,
    /// Bytes of pack files on disk (sealed and open).
    pub stored_bytes: u64,
    /// Bytes of the RocksDB index on disk.
    pub index_bytes: u64,
    pub records: u64,
    pub payloads: u64,
    pub payload_bytes: u64,
    pub unique_payloads: u64,
    pub chunks: u64,
    pub chunk_bytes: u64,
    pub unreferenced_chunks: u64,
    pub gzip_members: u64,
    pub gzip_members_raw: u64,
    /// Bytes of the gzip members' recorded deflate parses, as written by ingest, and the
    /// bytes their shared tails take in packs after dedup and compression.
    pub parse_bytes: u64,
    pub parse_tail_chunk_bytes: u64,
    /// Recipe pieces (chunks of their own) and the metadata log's records, in packs: what
    /// makes the index rebuildable from the packs. Not counted in `chunks`.
    pub recipe_chunks: u64,
    pub recipe_chunk_bytes: u64,
    pub log_records: u64,
    pub log_bytes: u64,
    pub collisions: u64,
    pub packs: u64,
    /// Files written through a mount whose bytes are staged, not yet ingested.
    pub staged_files: u64,
    pub staged_bytes: u64,
}

#[derive(Clone, Debug, Default)]
pub struct FsckReport {
    pub files: u64,
    pub chunks_checked: u64,
    pub packs_checked: u64,
    /// One line per problem, naming the files it touches.
    pub problems: Vec<String>,
}

#[derive(Clone, Debug, Default)]
pub struct GcReport {
    pub chunks_dropped: u64,
    pub packs_deleted: u64,
    pub packs_rewritten: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
}

/// Packs whose dead share is above this are rewritten by gc.
const GC_DEAD_SHARE: f64 = 0.10;

fn dir_bytes(path: &std::path::Path) -> u64 {
    walkdir::WalkDir::new(path)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

impl Store {
    pub fn stats(&self) -> Result<Stats> {
        let mut s = Stats::default();
        let mut fs_ = FileStats::default();
        self.index.for_each_inode(|_, inode: Inode| {
            match inode.kind {
                InodeKind::File => {
                    s.files += 1;
                    s.logical_bytes += inode.size;
                    fs_ += inode.stats;
                }
                InodeKind::Dir => s.directories += 1,
                _ => {}
            }
            Ok(())
        })?;
        s.records = fs_.records;
        s.payloads = fs_.payloads;
        s.payload_bytes = fs_.payload_bytes;
        s.gzip_members = fs_.gzip_members;
        s.gzip_members_raw = fs_.gzip_members_raw;
        s.parse_bytes = fs_.parse_bytes;
        self.index.for_each_chunk(|_, e| {
            if e.refs == 0 {
                s.unreferenced_chunks += 1;
                return Ok(());
            }
            let bytes = e.stored_len as u64 + BLOB_HEADER_LEN as u64;
            match ChunkKind::from_u8(e.kind) {
                ChunkKind::Meta => {
                    s.log_records += 1;
                    s.log_bytes += bytes;
                    return Ok(());
                }
                ChunkKind::Recipe => {
                    s.recipe_chunks += 1;
                    s.recipe_chunk_bytes += bytes;
                    return Ok(());
                }
                _ => {}
            }
            s.chunks += 1;
            s.chunk_bytes += bytes;
            match ChunkKind::from_u8(e.kind) {
                ChunkKind::PayloadHead => s.unique_payloads += 1,
                ChunkKind::Parse => s.parse_tail_chunk_bytes += bytes,
                _ => {}
            }
            Ok(())
        })?;
        s.collisions = self.index.meta_u64("collisions")?;
        s.stored_bytes = dir_bytes(&self.root.join("packs")) + dir_bytes(&self.root.join("packs-tmp"));
        s.index_bytes = dir_bytes(&self.root.join("index"));
        s.packs = fs::read_dir(self.root.join("packs")).map(|d| d.count() as u64).unwrap_or(0);
        s.staged_bytes = dir_bytes(&self.root.join("staging"));
        s.staged_files = fs::read_dir(self.root.join("staging")).map(|d| d.count() as u64).unwrap_or(0);
        Ok(s)
    }

    /// Checks every reference, refcount, blob and pack footer; `deep` also re-hashes chunks.
    pub fn fsck(&self, deep: bool) -> Result<FsckReport> {
        let _ns = self.ns.locked();
        let mut w = self.writer.locked();
        self.seal_open(&mut w)?;
        self.seal_journal(&mut self.journal.locked())?;
        let mut rep = FsckReport::default();
        let paths = self.paths()?;
        let name_of = |ino: u64| paths.get(&ino).and_then(|p| p.first().cloned()).unwrap_or_else(|| format!("<inode {ino}>"));
        // Expected references, and who holds them.
        let mut expected: BTreeMap<ChunkKey, u64> = BTreeMap::new();
        let mut users: HashMap<ChunkKey, BTreeSet<u64>> = HashMap::new();
        let mut inodes: Vec<(u64, Inode)> = Vec::new();
        self.index.for_each_inode(|ino, inode: Inode| {
            inodes.push((ino, inode));
            Ok(())
        })?;
        for (ino, inode) in &inodes {
            let Some(head) = &inode.recipe else { continue };
            rep.files += 1;
            match self.recipe_references(head) {
                Ok((pieces, refs)) => {
                    let total: u64 = pieces.iter().map(|p| p.len()).sum();
                    // A staged file's size is that of its staged bytes; its recipe is the last
                    // content committed, which the next ingest replaces.
                    if total != head.size || (!inode.staged && total != inode.size) {
                        rep.problems.push(format!("{}: recipe describes {total} bytes, file size is {}", name_of(*ino), inode.size));
                    }
                    for k in refs {
                        *expected.entry(k).or_default() += 1;
                        users.entry(k).or_default().insert(*ino);
                    }
                }
                Err(e) => rep.problems.push(format!("{}: {e}", name_of(*ino))),
            }
        }
        let files_of = |k: &ChunkKey| -> String {
            users.get(k).map(|s| s.iter().map(|i| name_of(*i)).collect::<Vec<_>>().join(", ")).unwrap_or_else(|| "no file".into())
        };
        // Every chunk: refcount, presence of its pack, intact bytes.
        let mut by_pack: HashMap<u64, Vec<(ChunkKey, ChunkEntry)>> = HashMap::new();
        let mut seen: BTreeSet<ChunkKey> = BTreeSet::new();
        let mut chunks: Vec<(ChunkKey, ChunkEntry)> = Vec::new();
        self.index.for_each_chunk(|k, e| {
            chunks.push((k, e));
            Ok(())
        })?;
        for (k, e) in chunks {
            seen.insert(k);
            // A metadata log record is live (1) until a checkpoint supersedes it (0, for gc).
            let want = if ChunkKind::from_u8(e.kind) == ChunkKind::Meta { e.refs.min(1) } else { expected.get(&k).copied().unwrap_or(0) };
            if e.refs != want {
                rep.problems.push(format!("chunk {}: refcount {} but {want} references (files: {})", k.short(), e.refs, files_of(&k)));
            }
            rep.chunks_checked += 1;
            match self.packs.read(e.pack, e.offset, &k, e.stored_len) {
                Ok(bytes) => {
                    if bytes.len() != e.raw_len as usize {
                        rep.problems.push(format!("chunk {}: {} bytes, index says {} (files: {})", k.short(), bytes.len(), e.raw_len, files_of(&k)));
                    } else if deep && (self.digest)(&bytes) != k.digest {
                        rep.problems.push(format!("chunk {}: content does not match its digest (files: {})", k.short(), files_of(&k)));
                    }
                }
                Err(err) => rep.problems.push(format!("chunk {}: {err} (files: {})", k.short(), files_of(&k))),
            }
            by_pack.entry(e.pack).or_default().push((k, e));
        }
        for (k, n) in &expected {
            if !seen.contains(k) {
                rep.problems.push(format!("chunk {}: missing from the index, {n} references (files: {})", k.short(), files_of(k)));
            }
        }
        // Pack footers agree with the index.
        let packs_dir = self.root.join("packs");
        for entry in fs::read_dir(&packs_dir).map_err(io_at(&packs_dir))? {
            let entry = entry.map_err(io_at(&packs_dir))?;
            let Some(id) = entry.file_name().to_str().and_then(pack::parse_pack_name) else { continue };
            rep.packs_checked += 1;
            let path = entry.path();
            let footer = File::open(&path).map_err(|e| pack::PackError::Io { pack: id, source: e }).and_then(|f| pack::read_footer(&f, id));
            match footer {
                Ok(blobs) => {
                    // A pack may hold a chunk twice (two ingests stored it before either
                    // committed): the index names one copy.
                    let listed: HashSet<(ChunkKey, u64)> = blobs.iter().map(|b| (b.key, b.offset)).collect();
                    for (k, e) in by_pack.get(&id).map(|v| v.as_slice()).unwrap_or(&[]) {
                        if !listed.contains(&(*k, e.offset)) {
                            rep.problems.push(format!("pack {id:016x}: footer does not list chunk {} at {} (files: {})", k.short(), e.offset, files_of(k)));
                        }
                    }
                }
                Err(err) => {
                    let files: BTreeSet<String> = by_pack.get(&id).into_iter().flatten().map(|(k, _)| files_of(k)).collect();
                    rep.problems.push(format!("{err} (files: {})", files.into_iter().collect::<Vec<_>>().join(", ")));
                }
            }
        }
        Ok(rep)
    }

    /// Before gc drops chunks whose refcount is 0, every recipe is read to prove none uses
    /// one: a refcount that went wrong must stop gc, not take bytes a file still needs.
    /// Memory: the dropped keys only.
    fn refuse_dropping_referenced(&self, dropped: &[ChunkKey]) -> Result<()> {
        if dropped.is_empty() {
            return Ok(());
        }
        let dropped: HashSet<ChunkKey> = dropped.iter().copied().collect();
        let mut heads = Vec::new();
        self.index.for_each_inode(|ino, inode: Inode| {
            if let Some(h) = inode.recipe {
                heads.push((ino, h));
            }
            Ok(())
        })?;
        for (ino, head) in heads {
            let (_, keys) = self.recipe_references(&head)?;
            if let Some(k) = keys.iter().find(|k| dropped.contains(k)) {
                log::error!("gc stopped: chunk {} has refcount 0 but inode {ino} uses it", k.short());
                return Err(StoreError::GcRefused(format!("chunk {} has refcount 0 but inode {ino} uses it; nothing was deleted. Run `warcfs fsck`", k.short())));
            }
        }
        Ok(())
    }

    /// Drops unreferenced chunks and reclaims their pack space.
    pub fn gc(&self) -> Result<GcReport> {
        let mut ns = self.ns.locked();
        let mut w = self.writer.locked();
        self.seal_open(&mut w)?;
        self.seal_journal(&mut self.journal.locked())?;
        let packs_dir = self.root.join("packs");
        let mut rep = GcReport { bytes_before: dir_bytes(&packs_dir), ..GcReport::default() };
        // A checkpoint of the namespace first: every earlier log record becomes garbage
        // that this pass collects, so the log stays the size of the namespace.
        self.checkpoint(&mut ns)?;
        let mut b = Batch::new();
        let mut live: HashMap<u64, Vec<(ChunkKey, ChunkEntry)>> = HashMap::new();
        let mut dropped = Vec::new();
        self.index.for_each_chunk(|k, e| {
            if e.refs == 0 {
                dropped.push(k);
            } else {
                live.entry(e.pack).or_default().push((k, e));
            }
            Ok(())
        })?;
        self.refuse_dropping_referenced(&dropped)?;
        for k in &dropped {
            b.delete_chunk(&self.index, k);
        }
        rep.chunks_dropped = dropped.len() as u64;
        let mut doomed: Vec<u64> = Vec::new();
        let mut rewrite: Vec<u64> = Vec::new();
        for entry in fs::read_dir(&packs_dir).map_err(io_at(&packs_dir))? {
            let entry = entry.map_err(io_at(&packs_dir))?;
            let Some(id) = entry.file_name().to_str().and_then(pack::parse_pack_name) else { continue };
            let size = entry.metadata().map_err(io_at(&packs_dir))?.len().max(1);
            let live_bytes: u64 = live.get(&id).map(|v| v.iter().map(|(_, e)| e.stored_len as u64 + BLOB_HEADER_LEN as u64).sum()).unwrap_or(0);
            if live_bytes == 0 {
                doomed.push(id);
            } else if 1.0 - live_bytes as f64 / size as f64 > GC_DEAD_SHARE {
                rewrite.push(id);
            }
        }
        // Copy live blobs of mostly-dead packs into new packs; the index moves to them in the
        // same batch that drops the dead chunks, after the new packs are sealed.
        let tmp_dir = self.root.join("packs-tmp");
        let mut open: Option<OpenPack> = None;
        for id in &rewrite {
            for (k, e) in live.get(id).map(|v| v.as_slice()).unwrap_or(&[]) {
                let (blob, stored) = self.packs.read_stored(e.pack, e.offset, k, e.stored_len)?;
                if open.as_ref().is_some_and(|o| o.len() >= self.config.pack_size) {
                    let o = open.take().expect("checked");
                    o.seal(&packs_dir).map_err(io_at(&packs_dir))?;
                }
                if open.is_none() {
                    let nid = self.alloc_pack_id();
                    open = Some(OpenPack::create(&tmp_dir, nid).map_err(io_at(&tmp_dir))?);
                }
                let o = open.as_mut().expect("created");
                let codec = pack::Codec::from_u8(blob.codec).unwrap_or(pack::Codec::None);
                let info = o.append(*k, ChunkKind::from_u8(e.kind), codec, e.raw_len, &stored).map_err(io_at(&tmp_dir))?;
                let mut ne = e.clone();
                ne.pack = o.id;
                ne.offset = info.offset;
                ne.stored_len = info.stored_len;
                b.put_chunk(&self.index, k, &ne);
            }
        }
        if let Some(o) = open.take() {
            o.seal(&packs_dir).map_err(io_at(&packs_dir))?;
        }
        crate::failpoint::crash_at("gc_before_index");
        self.write_batch(&mut ns, b)?;
        crate::failpoint::crash_at("gc_after_index");
        // Cached chunk places (and, after a dropped key is reused, chunk bytes) are stale now.
        self.cache.clear();
        for id in doomed.iter().chain(rewrite.iter()) {
            let path = packs_dir.join(pack::pack_name(*id));
            self.packs.forget(*id);
            fs::remove_file(&path).map_err(io_at(&path))?;
            crate::failpoint::crash_at("gc_pack_removed");
        }
        rep.packs_deleted = doomed.len() as u64;
        rep.packs_rewritten = rewrite.len() as u64;
        // The checkpoint's pack counts too: what gc reports is what the store shrank by.
        self.seal_journal(&mut self.journal.locked())?;
        rep.bytes_after = dir_bytes(&packs_dir);
        Ok(rep)
    }
}
