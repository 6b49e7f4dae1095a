//! `fsck`: does every reference resolve to intact bytes, does every refcount equal the
//! references the recipes hold, and does every pack footer list what the index says the
//! pack holds.
//!
//! Memory does not grow with the number of chunks: the references and the blob places are
//! sorted on disk (`extsort`) and merged with the index's chunk table, which RocksDB walks in
//! key order. What stays in memory is one sort run (`ScanLimits::run_bytes`), one file's
//! recipe, one pack's footer, a number per pack, and the first `MAX_PROBLEMS` problems (with
//! the namespace's paths, built only to name the files of problems found).

use std::collections::HashSet;


use crate::store::maint::gc::RefGroups;
use crate::store::namespace::Inode;
use crate::store::{io_at, Result, Store};
use crate::LockExt;
use crate::digest::ChunkKey;
use crate::extsort::Sorter;
use crate::pack::ChunkKind;

/// Problems listed one by one; beyond this many only their number is reported.
pub const MAX_PROBLEMS: usize = 10_000;
/// Files named per problem; the rest are counted.
const NAMED_FILES: usize = 3;

#[derive(Clone, Debug, Default)]
pub struct FsckReport {
    pub files: u64,
    pub chunks_checked: u64,
    pub packs_checked: u64,
    /// One line per problem, naming the files it touches (the first `MAX_PROBLEMS`).
    pub problems: Vec<String>,
    /// Problems found beyond those listed.
    pub more_problems: u64,
}

impl FsckReport {
    pub fn problem_count(&self) -> u64 {
        self.problems.len() as u64 + self.more_problems
    }
}

/// A problem before its files are named: the text, the first files it touches and how many
/// more there are.
struct Problem {
    text: String,
    inos: Vec<u64>,
    others: u64,
}

#[derive(Default)]
struct Problems {
    list: Vec<Problem>,
    more: u64,
}

impl Problems {
    fn push(&mut self, text: String, inos: &[u64], others: u64) {
        if self.list.len() < MAX_PROBLEMS {
            self.list.push(Problem { text, inos: inos.to_vec(), others });
        } else {
            self.more += 1;
        }
    }
}

/// Pack id ‖ offset ‖ chunk key ‖ one inode using it (0: none), big-endian: sorted, the
/// places of a pack come together.
type PlaceRecord = [u8; 60];

fn place_record(pack: u64, offset: u64, key: &ChunkKey, ino: u64) -> PlaceRecord {
    let mut r = [0u8; 60];
    r[..8].copy_from_slice(&pack.to_be_bytes());
    r[8..16].copy_from_slice(&offset.to_be_bytes());
    r[16..52].copy_from_slice(&key.to_bytes());
    r[52..].copy_from_slice(&ino.to_be_bytes());
    r
}

fn split_place(r: &PlaceRecord) -> (u64, u64, ChunkKey, u64) {
    let pack = u64::from_be_bytes(r[..8].try_into().expect("8 bytes"));
    let offset = u64::from_be_bytes(r[8..16].try_into().expect("8 bytes"));
    let key = ChunkKey::from_bytes(&r[16..52]).expect("36 bytes");
    let ino = u64::from_be_bytes(r[52..].try_into().expect("8 bytes"));
    (pack, offset, key, ino)
}

impl Store {
    /// Checks every reference, refcount, blob and pack footer; `deep` also re-hashes chunks.
    pub fn fsck(&self, deep: bool) -> Result<FsckReport> {
        let _ns = self.ns.locked();
        let mut w = self.writer.locked();
        self.seal_open(&mut w)?;
        self.seal_journal(&mut self.journal.locked())?;
        let mut rep = FsckReport::default();
        let mut problems = Problems::default();
        let runs = self.runs_dir()?;

        // Every reference every recipe holds, sorted by chunk; sizes checked on the way.
        let refs = self.sorted_references(|ino, inode: &Inode, described| {
            rep.files += 1;
            match described {
                Ok(total) => {
                    let head_size = inode.recipe.as_ref().map_or(0, |h| h.size);
                    // A staged file's size is that of its staged bytes; its recipe is the
                    // last content committed, which the next ingest replaces.
                    if total != head_size || (!inode.staged && total != inode.size) {
                        problems.push(format!("recipe describes {total} bytes, file size is {}", inode.size), &[ino], 0);
                    }
                }
                Err(e) => problems.push(e.to_string(), &[ino], 0),
            }
            Ok(())
        })?;

        // Every chunk against its references, its pack and its bytes.
        let mut groups = RefGroups::new(refs, NAMED_FILES);
        let mut places: Sorter<PlaceRecord> = Sorter::new(&runs, self.limits.run_bytes).map_err(io_at(&runs))?;
        let missing = |g: &crate::store::maint::gc::RefGroup, problems: &mut Problems| {
            problems.push(format!("chunk {}: missing from the index, {} references", g.key.short(), g.count), &g.inos, g.count.saturating_sub(g.inos.len() as u64));
        };
        for item in self.index.chunk_iter() {
            let (k, e) = item?;
            while let Some(g) = groups.below(&k)? {
                missing(&g, &mut problems);
            }
            let g = groups.take(&k)?;
            let (count, inos) = (g.as_ref().map_or(0, |g| g.count), g.as_ref().map_or(Vec::new(), |g| g.inos.clone()));
            let others = count.saturating_sub(inos.len() as u64);
            // A metadata log record is live (1) until a checkpoint supersedes it (0, for gc).
            // A dictionary is live for good (1; more if two ingests committed it).
            let want = match ChunkKind::from_u8(e.kind) {
                ChunkKind::Meta => e.refs.min(1),
                ChunkKind::Dict => e.refs.max(1),
                _ => count,
            };
            if e.refs != want {
                problems.push(format!("chunk {}: refcount {} but {want} references", k.short(), e.refs), &inos, others);
            }
            rep.chunks_checked += 1;
            match self.packs.read(e.pack, e.offset, &k, e.stored_len) {
                Ok(bytes) => {
                    if bytes.len() != e.raw_len as usize {
                        problems.push(format!("chunk {}: {} bytes, index says {}", k.short(), bytes.len(), e.raw_len), &inos, others);
                    } else if deep && (self.digest)(&bytes) != k.digest {
                        problems.push(format!("chunk {}: content does not match its digest", k.short()), &inos, others);
                    }
                }
                Err(err) => problems.push(format!("chunk {}: {err}", k.short()), &inos, others),
            }
            places.push(place_record(e.pack, e.offset, &k, inos.first().copied().unwrap_or(0))).map_err(io_at(&runs))?;
        }
        while let Some(g) = groups.next_group()? {
            missing(&g, &mut problems);
        }

        // Pack footers agree with the index: packs in id order, merged with the places.
        let packs_dir = crate::store::layout::packs(&self.root);
        // Local packs and, on an object store, the bucket's (a listing that fails is an
        // error: fsck never reports on part of the store as if it were all of it).
        let ids: Vec<u64> = self.packs.sealed_packs().map_err(io_at(&packs_dir))?.into_iter().map(|p| p.0).collect();
        let mut places = places.finish().map_err(io_at(&runs))?.peekable();
        for id in ids {
            rep.packs_checked += 1;
            // Places in packs that are not there were reported when their blob was read.
            while let Some(Ok(r)) = places.peek() {
                if split_place(r).0 >= id {
                    break;
                }
                places.next();
            }
            let footer = self.packs.footer(id);
            // A pack may hold a chunk twice (two ingests stored it before either committed):
            // the index names one copy.
            let listed: std::result::Result<HashSet<(ChunkKey, u64)>, String> = footer.map(|blobs| blobs.iter().map(|b| (b.key, b.offset)).collect()).map_err(|e| e.to_string());
            let mut unreadable_users: Vec<u64> = Vec::new();
            let mut unreadable_others = 0u64;
            while let Some(r) = places.next_if(|r| r.as_ref().map_or(true, |r| split_place(r).0 == id)) {
                let (_, offset, k, ino) = split_place(&r.map_err(io_at(&runs))?);
                let inos: &[u64] = if ino == 0 { &[] } else { std::slice::from_ref(&ino) };
                match &listed {
                    Ok(set) if !set.contains(&(k, offset)) => problems.push(format!("pack {id:016x}: footer does not list chunk {} at {offset}", k.short()), inos, 0),
                    Ok(_) => {}
                    Err(_) if ino != 0 && unreadable_users.len() < NAMED_FILES && !unreadable_users.contains(&ino) => unreadable_users.push(ino),
                    Err(_) if ino != 0 => unreadable_others += 1,
                    Err(_) => {}
                }
            }
            if let Err(e) = listed {
                problems.push(e, &unreadable_users, unreadable_others);
            }
        }
        if let Some(Err(e)) = places.peek() {
            return Err(crate::store::StoreError::Io { path: runs, err: std::io::Error::new(e.kind(), e.to_string()) });
        }

        // Name the files of the problems found (a walk of the namespace: only now, and
        // holding the paths of those files only).
        if !problems.list.is_empty() {
            let wanted: std::collections::HashSet<u64> = problems.list.iter().flat_map(|p| p.inos.iter().copied()).collect();
            let paths = self.paths_of(&wanted)?;
            let name_of = |ino: u64| paths.get(&ino).cloned().unwrap_or_else(|| format!("<inode {ino}>"));
            for p in problems.list {
                let mut files: Vec<String> = p.inos.iter().map(|i| name_of(*i)).collect();
                if p.others > 0 {
                    files.push(format!("{} more", p.others));
                }
                let files = if files.is_empty() { "no file".to_string() } else { files.join(", ") };
                rep.problems.push(format!("{} (files: {files})", p.text));
            }
        }
        rep.more_problems = problems.more;
        Ok(rep)
    }
}
