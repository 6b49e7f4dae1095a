//! `warcfs stats`: what is stored and how well it dedups (`Store::stats`, from the index
//! alone), and where the bytes go (`Store::byte_use`, `stats --bytes`): every byte under
//! STORE, as `du -sb` counts it, in one category: a pack's by the index entries of its blobs,
//! a recipe piece's by what it holds.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path};

use serde::Serialize;

use crate::format::deflate;
use crate::index::ChunkEntry;
use crate::digest::ChunkKey;
use crate::pack::{self, ChunkKind, Codec, BLOB_HEADER_LEN, FOOTER_ENTRY_LEN, FOOTER_FIXED_LEN};
use crate::recipe::{FileStats, Piece, Segment};
use crate::store::namespace::{Inode, InodeKind};
use crate::store::{io_at, layout, Result, Store};

#[derive(Clone, Debug, Default, Serialize)]
pub struct Stats {
    pub files: u64,
    pub directories: u64,
    pub logical_bytes: u64,
    /// Bytes of pack files (sealed, here or in the object store, and open).
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
    /// zstd dictionaries (chunks of their own, not counted in `chunks`), and the chunks
    /// compressed with one.
    pub dictionaries: u64,
    pub dictionary_bytes: u64,
    pub dict_chunks: u64,
    /// Chunks stored as deltas against a base (format 9), and their bytes in packs (counted
    /// in `chunks` and `chunk_bytes` too).
    pub delta_chunks: u64,
    pub delta_bytes: u64,
    pub collisions: u64,
    pub packs: u64,
    /// Files written through a mount whose bytes are staged, not yet ingested.
    pub staged_files: u64,
    pub staged_bytes: u64,
    /// Sealed packs waiting for their upload to the object store.
    pub uploads_waiting: u64,
}

/// Bytes and files under `path` (none if it does not exist). A file removed during the walk
/// (a staged file being stored) is not counted; any other error is the caller's, so that
/// `stats` never gives part of an answer as the whole.
fn dir_usage(path: &std::path::Path) -> Result<(u64, u64)> {
    let gone = |e: &walkdir::Error| e.io_error().is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound);
    let (mut bytes, mut files) = (0u64, 0u64);
    for entry in walkdir::WalkDir::new(path) {
        let md = match entry.and_then(|e| e.metadata()) {
            Ok(md) => md,
            Err(e) if gone(&e) => continue,
            Err(e) => return Err(io_at(path)(e.into())),
        };
        if md.is_file() {
            bytes += md.len();
            files += 1;
        }
    }
    Ok((bytes, files))
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
                ChunkKind::Dict => {
                    s.dictionaries += 1;
                    s.dictionary_bytes += bytes;
                    return Ok(());
                }
                _ => {}
            }
            s.dict_chunks += (e.codec == crate::pack::Codec::ZstdDict as u8) as u64;
            if e.codec == crate::pack::Codec::ZstdDelta as u8 {
                s.delta_chunks += 1;
                s.delta_bytes += bytes;
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
        let sealed = self.packs.sealed_packs().map_err(io_at(&crate::store::layout::packs(&self.root)))?;
        s.stored_bytes = sealed.iter().map(|p| p.1).sum::<u64>() + dir_usage(&crate::store::layout::packs_tmp(&self.root))?.0;
        s.index_bytes = dir_usage(&crate::store::layout::index(&self.root))?.0;
        s.packs = sealed.len() as u64;
        s.uploads_waiting = self.uploads().0;
        (s.staged_bytes, s.staged_files) = dir_usage(&crate::store::layout::staging(&self.root))?;
        Ok(s)
    }
}

/// Where the bytes go (`warcfs stats --bytes`): the categories are disjoint and add up to
/// `total`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ByteUse {
    /// The sum of the categories.
    pub total: u64,
    /// What `du -sb STORE` counts, as the walk found it: the apparent size of every file,
    /// directory and symlink under STORE, STORE itself included, a file of several hard
    /// links once. Equal to `total` less `elsewhere`, unless the index places blobs past the
    /// end of their packs (`counts.overrun_bytes`: damage, see fsck).
    pub under_store: u64,
    /// Packs in the object store (a store with a back end) that are not under STORE.
    pub elsewhere: u64,
    pub categories: ByteCategories,
    pub counts: ByteCounts,
}

/// The bytes by what they are for. A blob's 60-byte header counts in `blob_headers`, its
/// stored bytes (as the index gives their length) in its kind's category.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ByteCategories {
    /// Chunks of kinds 0 (raw), 2 (payload) and 3 (payload head).
    pub payload: u64,
    /// Chunks stored as deltas against a base chunk (`Codec::ZstdDelta`, format 9),
    /// whatever their kind.
    pub deltas: u64,
    /// Literal blocks (kind 1): WARC and HTTP headers.
    pub headers: u64,
    /// Recipe pieces' share of the gzip members' parse prefixes (`Member.parse`), less the
    /// block headers in them.
    pub parse_prefixes: u64,
    /// Recipe pieces' share of the dynamic blocks' headers kept as bits (block kind 2).
    pub block_headers: u64,
    /// Parse tails (kind 4).
    pub parse_tails: u64,
    /// Recipe pieces (kind 5), less the two shares above.
    pub recipes: u64,
    /// zstd dictionaries (kind 7).
    pub dictionaries: u64,
    /// The metadata log's records (kind 6).
    pub log: u64,
    /// The headers of the blobs the index counts live (refcount above 0).
    pub blob_headers: u64,
    /// Sealed packs' footers: their fixed part and one entry per live blob.
    pub footers: u64,
    /// The rest of the packs: blobs of refcount 0 not collected yet, blobs no index entry
    /// names (a copy gc left, a crash's leftovers), their footer entries, an open pack's
    /// torn tail.
    pub dead: u64,
    /// The RocksDB index (`index/`).
    pub index: u64,
    /// Files written through a mount and not yet ingested (`staging/`).
    pub staging: u64,
    /// Everything else: the settings, the lock, `cache/`, the directories themselves.
    pub other: u64,
}

impl ByteCategories {
    /// Every category: its JSON name and its bytes, in the order they are shown.
    pub fn rows(&self) -> [(&'static str, u64); 15] {
        [
            ("payload", self.payload),
            ("deltas", self.deltas),
            ("headers", self.headers),
            ("parse_prefixes", self.parse_prefixes),
            ("block_headers", self.block_headers),
            ("parse_tails", self.parse_tails),
            ("recipes", self.recipes),
            ("dictionaries", self.dictionaries),
            ("log", self.log),
            ("blob_headers", self.blob_headers),
            ("footers", self.footers),
            ("dead", self.dead),
            ("index", self.index),
            ("staging", self.staging),
            ("other", self.other),
        ]
    }
}

/// What the categories hold, counted.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ByteCounts {
    pub payload_chunks: u64,
    /// Payload chunks compressed with a zstd dictionary (codec 2), and their stored bytes
    /// (part of `payload`).
    pub payload_dict_chunks: u64,
    pub payload_dict_bytes: u64,
    pub delta_chunks: u64,
    pub header_chunks: u64,
    pub recipe_pieces: u64,
    /// Gzip member segments in those pieces, the raw bytes of their parse prefixes (block
    /// headers included) and of the block headers in them, before the pieces' compression.
    pub members: u64,
    pub parse_prefix_raw: u64,
    pub block_header_raw: u64,
    pub parse_tails: u64,
    pub dictionaries: u64,
    pub log_records: u64,
    pub live_blobs: u64,
    /// Index entries of refcount 0, and their blobs' bytes (part of `dead`).
    pub dead_blobs: u64,
    pub dead_blob_bytes: u64,
    /// Sealed packs (under STORE or in the object store), and open ones (`packs-tmp/`).
    pub sealed_packs: u64,
    pub open_packs: u64,
    /// Of the sealed packs, those only in the object store.
    pub packs_elsewhere: u64,
    /// Recipe pieces that could not be read or decoded: counted whole in `recipes`.
    pub unreadable_pieces: u64,
    /// Index entries naming a pack that is not there (gc'ed while a mounted store was
    /// walked, or lost): left out.
    pub unplaced_entries: u64,
    /// Bytes the index places past the end of their packs (damage; fsck names them).
    pub overrun_bytes: u64,
}

/// A pack file and what the index places in it.
struct PackFile {
    size: u64,
    sealed: bool,
    live_bytes: u64,
    live_blobs: u64,
}

/// What the walk of STORE found: bytes by where they lie, and the pack files by id.
#[derive(Default)]
struct Walk {
    under_store: u64,
    index: u64,
    staging: u64,
    other: u64,
    /// Second copies of a pack (dead).
    spare_packs: u64,
    packs: HashMap<u64, PackFile>,
}

/// Walks STORE as `du -sb` does (apparent sizes of files, directories and symlinks, STORE
/// itself included, a file of several hard links once) and sorts what it finds by where it
/// lies. A file removed during the walk (a staged file being stored) is not counted.
fn walk(root: &Path) -> Result<Walk> {
    let gone = |e: &walkdir::Error| e.io_error().is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound);
    let mut w = Walk::default();
    let mut linked: HashSet<(u64, u64)> = HashSet::new();
    for entry in walkdir::WalkDir::new(root) {
        let (entry, md) = match entry.and_then(|e| e.metadata().map(|md| (e, md))) {
            Ok(found) => found,
            Err(e) if gone(&e) => continue,
            Err(e) => return Err(io_at(root)(e.into())),
        };
        if !md.is_dir() && md.nlink() > 1 && !linked.insert((md.dev(), md.ino())) {
            continue;
        }
        let size = md.len();
        w.under_store += size;
        let rel: Vec<Component> = entry.path().strip_prefix(root).map(|p| p.components().collect()).unwrap_or_default();
        let top = rel.first().and_then(|c| c.as_os_str().to_str());
        let pack_id = match (top, rel.len()) {
            (Some("packs" | "packs-tmp"), 2) if md.is_file() => rel[1].as_os_str().to_str().and_then(pack::parse_pack_name),
            _ => None,
        };
        match (top, pack_id) {
            (_, Some(id)) => match w.packs.entry(id) {
                Entry::Vacant(v) => {
                    v.insert(PackFile { size, sealed: top == Some("packs"), live_bytes: 0, live_blobs: 0 });
                }
                // A pack met twice, open and then sealed, as a mounted store's writer sealed
                // it during the walk: the index places its blobs in one copy.
                Entry::Occupied(_) => w.spare_packs += size,
            },
            (Some("index"), _) => w.index += size,
            (Some("staging"), _) => w.staging += size,
            _ => w.other += size,
        }
    }
    Ok(w)
}

impl Store {
    /// Where the bytes go: every byte under STORE in one category (`ByteCategories`), the
    /// packs' by the index entries of their blobs. Reads every live recipe piece, one at a
    /// time as the chunk table is walked (memory: a number per pack file, not per chunk).
    pub fn byte_use(&self) -> Result<ByteUse> {
        let w = walk(&self.root)?;
        let mut u = ByteUse { under_store: w.under_store, ..ByteUse::default() };
        let (c, n) = (&mut u.categories, &mut u.counts);
        (c.index, c.staging, c.other, c.dead) = (w.index, w.staging, w.other, w.spare_packs);
        let mut packs = w.packs;
        // Sealed packs not on this disk (in a bucket; on a local store, none).
        let listed = self.packs.sealed_packs().map_err(io_at(&layout::packs(&self.root)))?;
        for (id, size) in listed {
            if let Entry::Vacant(v) = packs.entry(id) {
                v.insert(PackFile { size, sealed: true, live_bytes: 0, live_blobs: 0 });
                u.elsewhere += size;
                n.packs_elsewhere += 1;
            }
        }
        for item in self.index.chunk_iter() {
            let (key, e) = item?;
            let Some(p) = packs.get_mut(&e.pack) else {
                n.unplaced_entries += 1;
                continue;
            };
            let blob = BLOB_HEADER_LEN as u64 + e.stored_len as u64;
            if e.refs == 0 {
                n.dead_blobs += 1;
                n.dead_blob_bytes += blob;
                continue;
            }
            p.live_bytes += blob;
            p.live_blobs += 1;
            n.live_blobs += 1;
            c.blob_headers += BLOB_HEADER_LEN as u64;
            let stored = e.stored_len as u64;
            if e.codec == Codec::ZstdDelta as u8 {
                c.deltas += stored;
                n.delta_chunks += 1;
                continue;
            }
            match ChunkKind::from_u8(e.kind) {
                ChunkKind::Raw | ChunkKind::Payload | ChunkKind::PayloadHead => {
                    c.payload += stored;
                    n.payload_chunks += 1;
                    if e.codec == Codec::ZstdDict as u8 {
                        n.payload_dict_chunks += 1;
                        n.payload_dict_bytes += stored;
                    }
                }
                ChunkKind::Literal => {
                    c.headers += stored;
                    n.header_chunks += 1;
                }
                ChunkKind::Parse => {
                    c.parse_tails += stored;
                    n.parse_tails += 1;
                }
                ChunkKind::Recipe => self.piece_use(&key, &e, c, n),
                ChunkKind::Meta => {
                    c.log += stored;
                    n.log_records += 1;
                }
                ChunkKind::Dict => {
                    c.dictionaries += stored;
                    n.dictionaries += 1;
                }
            }
        }
        for p in packs.values() {
            *(if p.sealed { &mut n.sealed_packs } else { &mut n.open_packs }) += 1;
            let footer = if p.sealed { (FOOTER_FIXED_LEN + FOOTER_ENTRY_LEN * p.live_blobs as usize) as u64 } else { 0 };
            c.footers += footer;
            let placed = p.live_bytes + footer;
            c.dead += p.size.saturating_sub(placed);
            n.overrun_bytes += placed.saturating_sub(p.size);
        }
        u.total = c.rows().iter().map(|r| r.1).sum();
        Ok(u)
    }

    /// Splits a live recipe piece's stored bytes between the parse prefixes it holds, the
    /// dynamic block headers inside them and the rest. A piece is compressed as a whole, so
    /// no byte of its blob belongs to one field: each gets the share of the stored bytes
    /// that its raw bytes have of the decoded piece (docs/OPERATIONS.md says so too). A
    /// piece that cannot be read counts whole as recipe.
    fn piece_use(&self, key: &ChunkKey, e: &ChunkEntry, c: &mut ByteCategories, n: &mut ByteCounts) {
        let stored = e.stored_len as u64;
        n.recipe_pieces += 1;
        let piece = self.packs.read(e.pack, e.offset, key, e.stored_len).ok().and_then(|raw| Some((raw.len() as u64, Piece::decode(&raw).ok()?)));
        let Some((raw_len, piece)) = piece else {
            n.unreadable_pieces += 1;
            c.recipes += stored;
            return;
        };
        let (mut prefix, mut headers) = (0u64, 0u64);
        for s in &piece.segments {
            if let Segment::Member { plain, parse, .. } = s {
                let text: u64 = plain.iter().map(|x| x.len as u64).sum();
                // (A prefix whose block list does not read counts whole as prefix: fsck and
                // the reads that rebuild its member say what is wrong with it.)
                headers += deflate::header_bytes(parse, text as usize).unwrap_or(0) as u64;
                prefix += parse.len() as u64;
                n.members += 1;
            }
        }
        n.parse_prefix_raw += prefix;
        n.block_header_raw += headers;
        let share = |part: u64| (stored as u128 * part as u128).checked_div(raw_len as u128).unwrap_or(0) as u64;
        let (p, h) = (share(prefix - headers), share(headers));
        c.parse_prefixes += p;
        c.block_headers += h;
        c.recipes += stored - p - h;
    }
}
