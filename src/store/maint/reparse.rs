//! Reparsing: in a store made with `init --parses compact-at-gc`, gc rewrites the gzip
//! members' parses that ingest kept in the fast (ranked) form in the compact (predicted)
//! form, so that imports and reads of new files run at the fast form's speed and the store
//! after gc is as small as a compact store.
//!
//! A file is ingested again from its own bytes, rebuilt from its recipe (`Rebuilt`), its
//! members' parses in the forms of the store's format (`Store::ingest_reparsing`). Its
//! payload chunks and header blocks come out as the same chunks (their keys name their raw
//! bytes); only its recipe pieces, which hold the parses' prefixes, and the parses' tails
//! are new. The new recipe replaces the old one in one batch with every reference change
//! (`swap_recipe`), made after the packs holding the new chunks are durable, as any
//! ingest's commit is; the old tails and pieces fall to no reference and the same gc
//! collects them. The inode keeps its number, times, mode and attributes (the file's bytes
//! are the same); its counts (`FileStats`) are the new recipe's. A file whose pieces come out the same (already compact, or written by no
//! writer the predicted form knows) is left as it was.
//!
//! Each file is tried once: the index meta record `reparsed_below`, logged like any change
//! (so a rebuilt index has it too), says every recipe id below it has been, the reparsed
//! ones' new ids included (gc holds the store alone, so no other recipe is made meanwhile).
//! A file that cannot be read back (damage, for fsck to name), or that meets a bug, is left
//! as it is, logged and counted, and not tried again unless it is stored anew. Anything else
//! (the disk full or failing, the index) stops the pass where it is, without the mark: gc
//! goes on collecting, which a full disk needs most, and the next gc tries the rest.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Mutex;

use crate::index::Batch;
use crate::recipe::{RecipeHead, RefDelta, Segment};
use crate::store::ingest::source::Source;
use crate::store::ingest::Ingested;
use crate::store::namespace::{Inode, InodeKind};
use crate::store::{Result, Store, StoreError};
use crate::LockExt;

/// The index meta record below whose recipe ids every file has been reparsed.
const REPARSED_BELOW: &str = "reparsed_below";

/// Files gathered from the inode table at a time: memory stays bounded whatever the number
/// of files.
const BATCH: usize = 4096;

/// What one reparse pass did.
#[derive(Clone, Debug, Default)]
pub(in crate::store) struct Reparsed {
    /// Files read back and ingested again.
    pub tried: u64,
    /// Files whose recipes were replaced.
    pub files: u64,
    /// Files that could not be read back (damaged) or met a bug: left as they were.
    pub damaged: u64,
    /// Why the pass stopped before its end, if it did.
    pub stopped: Option<String>,
}

/// What became of one file.
enum Outcome {
    Swapped,
    /// Nothing to rewrite: no gzip member, the same pieces again, or changed meanwhile.
    Left,
    /// Damage met reading it back, or a bug: what it was.
    Failed(String),
}

/// A stored file's bytes, rebuilt from its recipe, as ingest reads a source. The first
/// store error met is kept: the ingest sees only an I/O error.
struct Rebuilt<'a> {
    store: &'a Store,
    head: &'a RecipeHead,
    failed: Mutex<Option<StoreError>>,
}

impl Source for Rebuilt<'_> {
    fn size(&self) -> std::io::Result<u64> {
        Ok(self.head.size)
    }

    fn window(&self, offset: u64, len: usize) -> std::io::Result<Cow<'_, [u8]>> {
        let len = (self.head.size.saturating_sub(offset)).min(len as u64) as usize;
        let mut buf = vec![0u8; len];
        let mut done = 0;
        while done < len {
            // Streaming: each member leaves the cache once read to its end.
            match self.store.read_streaming(self.head, offset + done as u64, &mut buf[done..]) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) => {
                    let what = e.to_string();
                    self.failed.locked().get_or_insert(e);
                    return Err(std::io::Error::other(what));
                }
            }
        }
        buf.truncate(done);
        Ok(Cow::Owned(buf))
    }
}

/// Whether `e`, met reading a file back, is damage to that file (the pass goes on without
/// it) rather than a failure of the disk or the index (the pass stops).
fn is_damage(e: &StoreError) -> bool {
    use crate::pack::PackError;
    matches!(e, StoreError::Pack(PackError::Corrupt { .. } | PackError::Missing(_)) | StoreError::Recipe { .. } | StoreError::Member { .. } | StoreError::MissingChunk(_))
}

/// `e`, met reading a file back, as `reparse_file` gives it: damage is that file's
/// failure, anything else the pass's.
fn read_failure(e: StoreError) -> Result<Outcome> {
    if is_damage(&e) {
        Ok(Outcome::Failed(e.to_string()))
    } else {
        Err(e)
    }
}

impl Store {
    /// Reparses every file not reparsed yet whose recipe holds a gzip member (a staged
    /// file's too: its recipe is what the mount commits over), then moves the mark past
    /// them, unless the pass stopped.
    pub(in crate::store) fn reparse(&self) -> Result<Reparsed> {
        let below = self.index.meta_u64_opt(REPARSED_BELOW)?.unwrap_or(0);
        let mut done = Reparsed::default();
        let mut failed: Vec<(u64, String)> = Vec::new();
        let mut from = 0u64;
        'pass: loop {
            let mut files: Vec<(u64, RecipeHead)> = Vec::new();
            for item in self.index.inodes_from::<Inode>(from) {
                let (ino, inode) = item?;
                from = ino + 1;
                if let Some(head) = inode.recipe.filter(|h| inode.kind == InodeKind::File && h.id >= below) {
                    files.push((ino, head));
                    if files.len() == BATCH {
                        break;
                    }
                }
            }
            let last = files.len() < BATCH;
            for (ino, head) in files {
                match self.reparse_file(ino, &head, &mut done) {
                    Ok(Outcome::Swapped) => done.files += 1,
                    Ok(Outcome::Left) => {}
                    Ok(Outcome::Failed(what)) => failed.push((ino, what)),
                    Err(e) => {
                        log::warn!("gc: rewriting parses stopped: {e}; the next gc tries the files left");
                        done.stopped = Some(e.to_string());
                        break 'pass;
                    }
                }
            }
            if last {
                break;
            }
        }
        done.damaged = failed.len() as u64;
        if !failed.is_empty() {
            let mut paths = self.paths_of(&failed.iter().map(|f| f.0).collect::<HashSet<u64>>())?;
            for (ino, what) in failed {
                let path = paths.remove(&ino).unwrap_or_else(|| format!("inode {ino}"));
                log::warn!("gc: {path} left as it was, its parses not rewritten: {what} (run `warcfs fsck`)");
            }
        }
        if done.stopped.is_none() {
            // Every recipe made so far, the reparsed files' new ones included, has been tried.
            let mut ns = self.ns.locked();
            let next = self.index.meta_u64_opt("next_recipe")?.unwrap_or(0).max(below);
            if next > below {
                let mut b = Batch::new();
                b.put_meta_u64(&self.index, REPARSED_BELOW, next);
                self.write_batch(&mut ns, b)?;
                crate::failpoint::crash_at("reparse_marked");
            }
        }
        Ok(done)
    }

    /// Reparses file `ino` of recipe `head` (counted in `done.tried` if it holds a member).
    fn reparse_file(&self, ino: u64, head: &RecipeHead, done: &mut Reparsed) -> Result<Outcome> {
        let mut has_members = false;
        for i in 0..head.pieces() {
            let piece = match self.piece(head, i) {
                Ok(p) => p,
                Err(e) => return read_failure(e),
            };
            if piece.segments.iter().any(|s| matches!(s, Segment::Member { .. })) {
                has_members = true;
                break;
            }
        }
        if !has_members {
            return Ok(Outcome::Left);
        }
        done.tried += 1;
        let src = Rebuilt { store: self, head, failed: Mutex::new(None) };
        let ing = self.ingest_reparsing(&src);
        if let Some(e) = src.failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
            return read_failure(e);
        }
        let ing = match ing {
            Ok(ing) => ing,
            // (`bug_as_error` caught a panic: that file's, not the pass's.)
            Err(StoreError::Bug(what)) => return Ok(Outcome::Failed(format!("internal error (a bug in warcfs; please report it): {what}"))),
            Err(e) => return Err(e),
        };
        if ing.size != head.size {
            return Ok(Outcome::Failed(format!("internal error (a bug in warcfs; please report it): ingested again it is {} bytes, not {}", ing.size, head.size)));
        }
        let old: Vec<_> = (0..head.pieces()).map(|i| self.index.recipe_piece(head.id, i).map_err(StoreError::from)).collect::<Result<_>>()?;
        if old.iter().map(Option::as_ref).eq(ing.piece_keys.iter().map(Some)) && ing.starts == head.piece_starts {
            return Ok(Outcome::Left);
        }
        Ok(if self.swap_recipe(ino, head, ing)? { Outcome::Swapped } else { Outcome::Left })
    }

    /// Replaces file `ino`'s recipe `old` with `ing`'s (the same bytes, stored otherwise),
    /// keeping the rest of its inode, in one batch with the references both hold; false if
    /// the file no longer has recipe `old`.
    fn swap_recipe(&self, ino: u64, old: &RecipeHead, ing: Ingested) -> Result<bool> {
        // What the old recipe references, read before the lock (a recipe never changes
        // under its id, which is checked under the lock).
        let released = self.recipe_references(old)?.1;
        let mut ns = self.ns.locked();
        let Some(mut inode) = self.index.inode::<Inode>(ino)? else { return Ok(false) };
        if inode.recipe.as_ref().map(|h| h.id) != Some(old.id) {
            return Ok(false);
        }
        let mut b = Batch::new();
        let mut delta = RefDelta::default();
        self.release_recipe(&mut b, &mut delta, old, released);
        let rid = self.alloc(&mut ns, &mut b, "recipe")?;
        self.add_recipe(&mut b, &mut delta, rid, &ing.pieces, &ing.piece_keys);
        inode.recipe = Some(RecipeHead { id: rid, size: ing.size, piece_starts: ing.starts });
        // (What it holds is counted again: its parses' bytes are the new ones.)
        inode.stats = ing.stats;
        b.put_inode(&self.index, ino, &inode);
        self.commit_with(&mut ns, b, delta, &ing.pending, ing.collisions, ing.dict)?;
        Ok(true)
    }
}
