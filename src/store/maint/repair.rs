//! `repair index`: rebuilds the RocksDB index from the packs alone.
//!
//! The packs hold every chunk (with its key, kind and sizes in its blob header and the
//! pack's footer), every recipe piece (a chunk of kind `Recipe`) and every index batch ever
//! written (the metadata log, `journal`). A rebuild:
//! 1. seals what a crash left open, then reads every sealed pack's footer: each chunk goes
//!    into the new index where it lies (the first copy found, if gc left two);
//! 2. applies the log's records in sequence order, leaving out their chunk changes (chunks
//!    are where step 1 found them): directories, names, attributes, recipes, counters;
//! 3. counts every reference the recipes hold (each piece's chunk once per piece, each
//!    distinct data chunk once per recipe) and writes the refcounts. A piece it cannot read
//!    is reported with its file, and costs that file only (`name_recipes`).
//!
//! It builds into `index.rebuilding/` and renames that to `index/` only when it is whole;
//! an unreadable index is kept beside it (`index.unreadable.N`), never deleted. It refuses to
//! replace an index that opens.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs;
use std::path::Path;

use crate::store::journal::{CheckpointPart, MetaRecord, APPLIED_SEQ};
use crate::store::namespace::{paths_in, Inode};
use crate::store::{io_at, read_config, recover_packs, take_lock, Result, StoreError, DICT_FORMAT_VERSION, LOCAL_V3, LONGEST_V7, REMOTE_FORMAT_VERSION, SHARED_FORMAT_VERSION, SHARED_V6, VERSIONS};
use crate::digest::ChunkKey;
use crate::index::{Batch, ChunkEntry, Index};
use crate::pack::{self, ChunkKind, PackReader};
use crate::recipe::{self, Piece};

/// What a rebuild found.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RepairReport {
    pub packs: u64,
    pub chunks: u64,
    /// Copies of a chunk found in more than one pack (left by an interrupted gc).
    pub duplicate_chunks: u64,
    pub log_records: u64,
    pub recipes: u64,
    /// Where the broken index was moved, if there was one.
    pub kept_broken_index: Option<String>,
    /// References to chunks no pack holds: the files that use them cannot be read whole.
    pub problems: Vec<String>,
    /// `warcfs.json` was missing (packs restored alone) and was written with the defaults.
    pub wrote_default_config: bool,
    /// The format version it was written for, and whether the packs said it (packs written
    /// before 2026-11-27 do not: `packs_version`).
    pub config_version: Option<(u32, bool)>,
}

/// Writes pending index changes every this many chunks (a rebuild's batches are not
/// synced one by one; the index is flushed once at the end).
const BATCH_CHUNKS: usize = 10_000;

/// Rebuilds the index of the store at `root` from its packs (see the module doc). `repair
/// index` then opens the store once (`crate::nodes::repair_index`).
pub fn rebuild_index(root: &Path) -> Result<RepairReport> {
    let mut rep = RepairReport::default();
    let cfg_path = crate::store::layout::config(root);
    let mut lock = None;
    if !cfg_path.exists() {
        // Packs restored without the settings file: the settings only steer new writes
        // (the packs say how each blob is stored), and the defaults are the careful ones
        // (verify = bytes). The format version is the packs' own, so that the warcfs that
        // wrote them still opens the store. Said in the report, so the owner can set the
        // rest back.
        if !crate::store::layout::packs(root).is_dir() {
            return Err(if root.exists() { StoreError::NotAStore(root.to_path_buf()) } else { StoreError::NoStore(root.to_path_buf()) });
        }
        lock = Some(take_lock(root)?);
        let (version, said) = packs_version(root, &PackReader::new(crate::store::layout::packs(root), crate::store::layout::packs_tmp(root)))?;
        let json = serde_json::to_vec_pretty(&crate::store::Config { version, ..crate::store::Config::default() }).expect("config serialises");
        pack::write_file_atomic(&cfg_path, &json).map_err(io_at(&cfg_path))?;
        rep.wrote_default_config = true;
        rep.config_version = Some((version, said));
    }
    // A store of this format version (a foreign one is refused, as every command does).
    let config = read_config(&cfg_path)?;
    let lock = match lock {
        Some(l) => l,
        None => take_lock(root)?,
    };
    // Scratch directories a copy of the packs may lack (and a new node of a bucket-backed
    // store has no packs/ of its own yet).
    for d in crate::store::layout::DIRS {
        fs::create_dir_all(root.join(d)).map_err(io_at(root))?;
    }
    let index_dir = crate::store::layout::index(root);
    if index_dir.join("CURRENT").exists() && Index::open(&index_dir).is_ok() {
        return Err(StoreError::IndexOpens(root.to_path_buf()));
    }
    if index_dir.exists() {
        let mut n = 1;
        let kept = loop {
            let p = root.join(format!("index.unreadable.{n}"));
            if !p.exists() {
                break p;
            }
            n += 1;
        };
        fs::rename(&index_dir, &kept).map_err(io_at(&kept))?;
        rep.kept_broken_index = Some(kept.display().to_string());
    }
    build_index(root, &config, &mut rep, None, &mut || {})?;
    // Every log record is in the rebuilt index, those of packs an open cut short too.
    crate::store::open::recovered(root)?;
    drop(lock);
    Ok(rep)
}

/// The store format version the sealed packs at `root` were written for, and whether they
/// said so: the highest their first blobs name (`pack::written_for`), a bucket's version
/// taken as its local counterpart (the settings that named the bucket are lost with the
/// file: 4 as 3, 6 as 5, 8 as 7). Packs written before blobs named it (2026-11-27) are taken
/// as version 5: every warcfs since dictionaries (2026-11-26) reads it, and it keeps them on.
pub(in crate::store) fn packs_version(root: &Path, packs: &PackReader) -> Result<(u32, bool)> {
    let mut highest = 0u8;
    for (id, _) in packs.sealed_packs().map_err(io_at(&crate::store::layout::packs(root)))? {
        highest = highest.max(packs.first_written_for(id)?.unwrap_or(0));
    }
    let local = match highest as u32 {
        0 => return Ok((DICT_FORMAT_VERSION, false)),
        REMOTE_FORMAT_VERSION => LOCAL_V3,
        SHARED_V6 => DICT_FORMAT_VERSION,
        SHARED_FORMAT_VERSION => LONGEST_V7,
        v => v,
    };
    if !VERSIONS.contains(&local) {
        return Err(StoreError::Format { path: root.to_path_buf(), found: format!("its packs were written for version {local}") });
    }
    Ok((local, true))
}

/// Builds the index of the store at `root` from its packs into `index.rebuilding/` and
/// renames it to `index/` (which must not exist). The caller holds the store's lock. Also
/// used when a node of a bucket-backed store finds that the bucket changed since it last
/// wrote (`crate::nodes`).
/// `remote`: the cache of a store being opened (a second one on `cache/packs` would empty it
/// under the first).
/// `tick` is called after every pack read (a writer keeps its bucket lock fresh there: a
/// rebuild of many packs outlasts the lock's lifetime).
pub(crate) fn build_index(
    root: &Path,
    config: &crate::store::Config,
    rep: &mut RepairReport,
    remote: Option<std::sync::Arc<crate::bucket::client::RemotePacks>>,
    tick: &mut dyn FnMut(),
) -> Result<Vec<(u64, u64)>> {
    let index_dir = crate::store::layout::index(root);
    let cfg_path = crate::store::layout::config(root);
    recover_packs(root)?;
    let building = crate::store::layout::index_rebuilding(root);
    if building.exists() {
        // What an interrupted repair left: start again.
        fs::remove_dir_all(&building).map_err(io_at(&building))?;
    }
    let idx = Index::create(&building, config.version, crate::store::deltas(config.version))?;
    let remote = match remote {
        Some(r) => Some(r),
        None => crate::store::backend::remote_packs(root, config)?,
    };
    let packs = crate::store::backend::pack_reader(root, config, remote.as_ref());

    // 1. Chunks where they lie; the log's records, to apply in order.
    let mut seen: HashSet<ChunkKey> = HashSet::new();
    // seq, checkpoint part, pack, offset, key, stored_len, node (a shared store's)
    let mut records: Vec<Rec> = Vec::new();
    let mut b = Batch::new();
    let mut in_batch = 0usize;
    let packs_dir = crate::store::layout::packs(root);
    let listed = packs.sealed_packs().map_err(io_at(&packs_dir))?;
    let ids: Vec<u64> = listed.iter().map(|p| p.0).collect();
    for &id in &ids {
        tick();
        rep.packs += 1;
        // A damaged footer does not hide the blobs: they describe themselves (up to the
        // first damaged one).
        let blobs = match packs.footer(id) {
            Ok(b) => b,
            Err(e @ pack::PackError::Corrupt { .. }) => {
                let b = packs.scan(id)?;
                rep.problems.push(format!("{e}; read its {} blobs one by one instead", b.len()));
                b
            }
            Err(e) => return Err(e.into()),
        };
        for blob in blobs {
            if !seen.insert(blob.key) {
                rep.duplicate_chunks += 1;
                continue;
            }
            let kind = ChunkKind::from_u8(blob.kind);
            if kind == ChunkKind::Meta {
                // A record that cannot be read is reported (and its sequence number will be
                // a gap), not a reason to give up on the rest.
                match packs.read(id, blob.offset, &blob.key, blob.stored_len).map_err(|e| e.to_string()).and_then(|raw| MetaRecord::decode(&raw)) {
                    Ok(rec) => records.push((rec.seq, rec.checkpoint, id, blob.offset, blob.key, blob.stored_len, rec.node)),
                    Err(e) => {
                        rep.problems.push(format!("pack {id:016x} offset {}: metadata log record unreadable: {e}", blob.offset));
                        seen.remove(&blob.key);
                        continue;
                    }
                }
            }
            // Log records and dictionaries are live without a recipe naming them.
            let refs = matches!(kind, ChunkKind::Meta | ChunkKind::Dict) as u64;
            let e = ChunkEntry { pack: id, offset: blob.offset, stored_len: blob.stored_len, raw_len: blob.raw_len, codec: blob.codec, kind: blob.kind, refs };
            b.put_chunk_unlogged(&idx, &blob.key, &e);
            rep.chunks += 1;
            in_batch += 1;
            if in_batch >= BATCH_CHUNKS {
                idx.write_unsynced(std::mem::take(&mut b))?;
                in_batch = 0;
            }
        }
    }
    idx.write_unsynced(b)?;
    drop(seen);

    // 2. The log, in sequence order, from its latest complete checkpoint on (all of it if
    // there is none), without its chunk changes. Records are read again one at a time
    // rather than kept: the log can be large.
    if records.is_empty() && rep.chunks > 0 {
        // Chunks and no log: packs of an older format (or not all of a store's packs). An
        // index built from them would name no file, and gc would then take every chunk.
        drop(idx);
        let _ = fs::remove_dir_all(&building);
        if rep.wrote_default_config {
            let _ = fs::remove_file(&cfg_path);
        }
        return Err(StoreError::NoLogRecords { path: root.to_path_buf(), chunks: rep.chunks });
    }
    // Each node's log on its own (one log, numbered across nodes, on a store one node
    // writes at a time): this node's own changes all, the others' without their counters.
    let own = crate::store::Share::of(config).log_node();
    records.sort_by_key(|r| (r.6, r.0));
    let mut b = Batch::new();
    let mut from = 0;
    while from < records.len() {
        let node = records[from].6;
        let to = from + records[from..].iter().take_while(|r| r.6 == node).count();
        let mine = node.is_none() || node == own;
        let (last, start) = apply_log(&idx, &packs, &records[from..to], mine, rep)?;
        let whose = |n: u16| if mine { APPLIED_SEQ.to_string() } else { crate::store::journal::applied_key(n) };
        if let Some(last) = last {
            b.put_meta_u64_unlogged(&idx, &whose(node.unwrap_or(0)), last);
        }
        // (This node's own too: its next checkpoint is due from there, not from record 0.)
        if let (Some(n), Some(start)) = (node, start) {
            b.put_meta_u64_unlogged(&idx, &crate::store::journal::checkpoint_key(n), start);
        }
        from = to;
    }
    idx.write_unsynced(b)?;

    // 3. Refcounts from the recipes, by `recipe::references`' rule, a piece at a time (the
    // pieces of a large file are not held together).
    let mut refs: HashMap<ChunkKey, u64> = HashMap::new();
    let mut pieces_of: Vec<(u64, u32, ChunkKey)> = Vec::new();
    idx.for_each_recipe_piece(|rid, pno, key| {
        pieces_of.push((rid, pno, key));
        Ok(())
    })?;
    // A piece that cannot be read costs its file, not the index: the chunks only it named
    // are counted 0, which gc never acts on while the file is there (it reads every recipe
    // before it drops a chunk, and stops at one it cannot read).
    let mut unreadable: Vec<(u64, String)> = Vec::new();
    let mut i = 0;
    while i < pieces_of.len() {
        let rid = pieces_of[i].0;
        let mut data: BTreeSet<ChunkKey> = BTreeSet::new();
        while i < pieces_of.len() && pieces_of[i].0 == rid {
            let (_, pno, key) = pieces_of[i];
            *refs.entry(key).or_default() += 1;
            match idx.chunk(&key)? {
                Some(e) => {
                    let piece = packs.read(e.pack, e.offset, &key, e.stored_len).map_err(|err| err.to_string()).and_then(|raw| Piece::decode(&raw).map_err(|err| format!("undecodable: {err}")));
                    match piece {
                        Ok(piece) => data.extend(recipe::distinct_keys(std::slice::from_ref(&piece))),
                        Err(err) => unreadable.push((rid, format!("piece {pno} of its recipe (chunk {}) cannot be read: {err}", key.short()))),
                    }
                }
                None => rep.problems.push(format!("recipe {rid} piece {pno}: its chunk {} is in no pack", key.short())),
            }
            i += 1;
        }
        rep.recipes += 1;
        for k in data {
            *refs.entry(k).or_default() += 1;
        }
    }
    if !unreadable.is_empty() {
        rep.problems.extend(name_recipes(&idx, unreadable)?);
    }
    // And each delta's reference to its base.
    if crate::store::deltas(config.version) {
        crate::store::delta::bases::count_delta_references(&idx, &packs, &mut refs, &mut rep.problems)?;
    }
    let mut b = Batch::new();
    let mut in_batch = 0usize;
    for (key, n) in refs {
        match idx.chunk(&key)? {
            Some(mut e) => {
                e.refs = n;
                b.put_chunk_unlogged(&idx, &key, &e);
                in_batch += 1;
                if in_batch >= BATCH_CHUNKS {
                    idx.write_unsynced(std::mem::take(&mut b))?;
                    in_batch = 0;
                }
            }
            None => rep.problems.push(format!("chunk {} is referenced {n} times but is in no pack", key.short())),
        }
    }
    idx.write(b)?;
    // The signature of the packs read above, not of a new listing: a pack a writer added
    // meanwhile must make the next open rebuild again, not pass as known.
    if remote.is_some() {
        let mut b = Batch::new();
        b.put_meta_u64_unlogged(&idx, crate::store::backend::SIGNATURE, crate::bucket::signature_of(&listed));
        idx.write(b)?;
    }
    idx.flush_tables()?;
    drop(idx);
    crate::disk::rename(&building, &index_dir).map_err(io_at(&index_dir))?;
    pack::sync_dir(root).map_err(io_at(root))?;
    Ok(listed)
}

impl crate::store::Opening {
    /// Rebuilds the index from the packs, the bucket's with them (`build_index`): the old
    /// one kept aside until the new one is whole, and put back if the rebuild fails. `tick`
    /// is called after every pack read. Returns what the rebuild found, and the packs it
    /// read.
    pub(crate) fn rebuild_index(&mut self, tick: &mut dyn FnMut()) -> Result<(RepairReport, crate::bucket::PackList)> {
        drop(self.index.take());
        let (index_dir, aside) = (crate::store::layout::index(&self.root), crate::store::layout::index_stale(&self.root));
        if aside.exists() {
            fs::remove_dir_all(&aside).map_err(io_at(&aside))?;
        }
        fs::rename(&index_dir, &aside).map_err(io_at(&index_dir))?;
        let mut rep = RepairReport::default();
        let list = match build_index(&self.root, &self.config, &mut rep, self.bucket.clone(), tick) {
            Ok(list) => list,
            Err(e) => {
                let _ = fs::remove_dir_all(&index_dir);
                let _ = fs::rename(&aside, &index_dir);
                return Err(e);
            }
        };
        let _ = fs::remove_dir_all(&aside);
        self.index = Some(crate::store::open_index(&self.root, &index_dir, false, self.config.version)?);
        Ok((rep, list))
    }
}

/// Each of `problems` (recipe id, what is wrong with it) as a line naming the file whose
/// recipe it is, with what a reader and gc make of it and how to get the file back.
fn name_recipes(idx: &Index, problems: Vec<(u64, String)>) -> Result<Vec<String>> {
    let rids: HashSet<u64> = problems.iter().map(|p| p.0).collect();
    let mut ino_of: HashMap<u64, u64> = HashMap::new();
    for item in idx.inode_iter::<Inode>() {
        let (ino, inode) = item?;
        if let Some(head) = inode.recipe.filter(|h| rids.contains(&h.id)) {
            ino_of.insert(head.id, ino);
        }
    }
    let paths = paths_in(idx, &ino_of.values().copied().collect())?;
    Ok(problems
        .into_iter()
        .map(|(rid, what)| {
            let file = match ino_of.get(&rid) {
                Some(ino) => paths.get(ino).cloned().unwrap_or_else(|| format!("inode {ino}")),
                None => format!("recipe {rid} (no file)"),
            };
            format!("{file}: {what}; its bytes there read as an error, and gc deletes nothing while it is stored (restore the pack from a backup, then move STORE/index aside and run `repair index` again)")
        })
        .collect())
}

/// A metadata log record found in a pack: seq, checkpoint part, pack, offset, key,
/// stored_len, node.
type Rec = (u64, Option<CheckpointPart>, u64, u64, ChunkKey, u32, Option<u16>);

/// Applies one log (`records`, in sequence order) from its latest complete checkpoint on
/// (all of it if there is none), without its chunk changes, and without its counters unless
/// it is this node's (`mine`). Records are read again one at a time rather than kept: the
/// log can be large. Returns the last record applied and where the checkpoint began.
fn apply_log(idx: &Index, packs: &PackReader, records: &[Rec], mine: bool, rep: &mut RepairReport) -> Result<(Option<u64>, Option<u64>)> {
    let whose = records.first().and_then(|r| r.6).map(|n| format!("node {n:04x}'s ")).unwrap_or_default();
    let seqs: HashMap<u64, Option<CheckpointPart>> = records.iter().map(|r| (r.0, r.1)).collect();
    let checkpoint = records
        .iter()
        .filter_map(|r| match r.1 {
            Some(CheckpointPart { first_seq, last: true }) if (first_seq..=r.0).all(|s| seqs.get(&s).is_some_and(|c| c.is_some_and(|c| c.first_seq == first_seq))) => Some(first_seq),
            _ => None,
        })
        .max();
    let start = checkpoint.unwrap_or(0);
    drop(seqs);
    let mut b = Batch::new();
    for r in records.iter().filter(|r| r.0 < start) {
        // Superseded by the checkpoint: garbage for gc, as it was before the index was lost.
        let e = ChunkEntry { pack: r.2, offset: r.3, stored_len: r.5, raw_len: 0, codec: 0, kind: ChunkKind::Meta as u8, refs: 0 };
        let mut e2 = idx.chunk(&r.4)?.unwrap_or(e);
        e2.refs = 0;
        b.put_chunk_unlogged(idx, &r.4, &e2);
    }
    idx.write_unsynced(b)?;
    let records: Vec<&Rec> = records.iter().filter(|r| r.0 >= start).collect();
    if let Some(first) = records.first().filter(|r| r.0 != start) {
        rep.problems.push(format!("{whose}metadata log records {start} to {} are missing: changes made then are lost", first.0 - 1));
    }
    for w in records.windows(2) {
        if w[1].0 == w[0].0 {
            rep.problems.push(format!("two different {whose}metadata log records are numbered {}: both are applied, in pack order", w[0].0));
        } else if w[1].0 != w[0].0 + 1 {
            rep.problems.push(format!("{whose}metadata log records {} to {} are missing: changes made then are lost", w[0].0 + 1, w[1].0.saturating_sub(1)));
        }
    }
    for &&(seq, _, id, offset, key, stored_len, _) in &records {
        let raw = packs.read(id, offset, &key, stored_len)?;
        let rec = MetaRecord::decode(&raw).map_err(|e| StoreError::BadLogRecord { at: format!("pack {id:016x} offset {offset}"), what: e.to_string() })?;
        debug_assert_eq!(rec.seq, seq);
        if mine {
            idx.apply_unsynced(&rec.ops, false)?;
        } else {
            let kept: Vec<crate::index::LogOp> = rec.ops.into_iter().filter(|op| op.cf() != crate::index::CF_META).collect();
            idx.apply_unsynced(&kept, false)?;
        }
        rep.log_records += 1;
    }
    Ok((records.last().map(|r| r.0), checkpoint))
}
