//! A round's commit, in the order that makes an update safe to kill at any point (docs/
//! FORMAT.md, "Search index"): the rows of texts and fragments gone, then the text index,
//! then every other row; and the sweep of the rows nothing finds from an id.

use rocksdb::WriteBatch;
use tantivy::Term;

use super::{Round, Unit};
use crate::index::id_of;
use crate::search::catalog::{key, Catalog};
use crate::search::waiting;
use crate::search::{Result, SearchError};

impl Round<'_> {
    /// Commits the round: the text index, then the catalog (each text's count, rows).
    pub(super) fn commit(&mut self) -> Result<()> {
        self.settle_waiting()?;
        // The rows of texts and fragments whose last capture went are deleted first, and
        // durably, and then their documents: a killed update leaves a document no row names
        // (found by no query), never a row a query reads whose document is gone (a removed
        // text's `V` row stays with the last batch: the update that finishes the removal
        // reads it).
        let mut early = WriteBatch::default();
        // (The deletions' batch carries the counters as committed, but for what it deletes:
        // the ids this round gives are not given yet until its last batch commits, and the
        // documents of such ids a killed update left are deleted when the next one starts.)
        let mut early_ids = self.committed;
        for (&tid, &delta) in &self.refs {
            let k = key(b'T', &[&tid.to_be_bytes()]);
            let (now, sha, new) = match (self.cat.text(tid)?, self.new_texts.get(&tid)) {
                (Some((n, sha)), _) => (n as i64, Some(sha), false),
                (None, Some(sha)) => (0, Some(*sha), true),
                // Captures removed of a text whose row is gone already: an update killed
                // after its deletions' batch, done again. What did not commit with it is
                // done again: its document's deletion, its fragments' counts.
                (None, None) if delta < 0 => (0, None, false),
                (None, None) => continue,
            };
            if let (true, Some(sha)) = (now + delta > 0, sha) {
                self.batch.put(&k, [&((now + delta) as u64).to_be_bytes()[..], &sha].concat());
                // (One document per capture finds no text by its identity.)
                if new && self.unit != Unit::Capture {
                    self.batch.put(key(b'S', &[&sha]), tid.to_be_bytes());
                }
                self.ids.held += new as u64;
                continue;
            }
            if let Some(sha) = sha {
                early.delete(&k);
                if self.unit != Unit::Capture {
                    early.delete(key(b'S', &[&sha]));
                }
                // (Its `P` and `D` rows are left, naming a text gone: nothing finds them
                // from it.)
                if !new {
                    early_ids.lose_one();
                    self.ids.lose_one();
                }
                self.done.documents_deleted += 1;
            }
            self.writer.delete_term(Term::from_field_u64(self.fields.tid, tid));
            if self.unit == Unit::Fragments {
                for fid in self.fragments_of(tid)? {
                    let r = key(b'R', &[&fid.to_be_bytes(), &tid.to_be_bytes()]);
                    early.delete(&r);
                    // (A text new this round has its rows in the round's batch.)
                    if new {
                        self.batch.delete(&r);
                    }
                    *self.frag_refs.entry(fid).or_default() -= 1;
                }
                // With the counts it takes from its fragments: until they commit, the list
                // is there for an update that does this again.
                self.batch.delete(key(b'V', &[&tid.to_be_bytes()]));
            }
        }
        for (&fid, &delta) in &self.frag_refs {
            let k = key(b'Q', &[&fid.to_be_bytes()]);
            let (now, new) = match (self.cat.get(&k)?, self.new_frags.get(&fid)) {
                (Some(v), _) => (id_of(&v).unwrap_or(0) as i64, None),
                (None, Some(sha)) => (0, Some(*sha)),
                // A fragment whose row is gone already (a killed update's deletions, done
                // again): its document's deletion may not have committed.
                (None, None) if delta < 0 => {
                    self.writer.delete_term(Term::from_field_u64(self.fields.fid, fid));
                    continue;
                }
                _ => continue,
            };
            if now + delta <= 0 {
                early.delete(&k);
                self.writer.delete_term(Term::from_field_u64(self.fields.fid, fid));
                self.done.documents_deleted += 1;
                // Its `H` row is left, naming a fragment gone (read as absent): a fragment's
                // identity is kept once, and only that row holds it.
                if new.is_none() {
                    early_ids.lose_one();
                    self.ids.lose_one();
                }
            } else {
                self.batch.put(&k, ((now + delta) as u64).to_be_bytes());
                if let Some(sha) = new {
                    self.batch.put(key(b'H', &[&sha]), fid.to_be_bytes());
                    self.ids.held += 1;
                }
            }
        }
        self.ids.put(&mut self.batch);
        if !early.is_empty() {
            early_ids.put(&mut early);
            self.cat.write(early)?;
            crate::failpoint::crash_at("search_deletions_committed");
        }
        self.writer.commit().map_err(|err| SearchError::Text { path: "(commit)".into(), err })?;
        crate::failpoint::crash_at("search_text_committed");
        self.cat.write(std::mem::take(&mut self.batch))?;
        crate::failpoint::crash_at("search_round_committed");
        self.committed = self.ids;
        self.refs.clear();
        self.new_texts.clear();
        self.frag_refs.clear();
        self.new_frags.clear();
        self.frag_by_sha.clear();
        self.text_frags.clear();
        self.by_sha.clear();
        self.payloads.clear();
        self.digests.clear();
        self.captures = 0;
        Ok(())
    }

    /// Before a commit: this round's revisits whose original's text the round found become
    /// its captures, the others wait; and those waiting from before for a digest this round
    /// gave a text become its captures. (A revisit met after its original's text finds it
    /// itself.)
    pub(super) fn settle_waiting(&mut self) -> Result<()> {
        // The change to how many revisits wait.
        let mut delta = 0i64;
        for (digest, path, offset, row) in std::mem::take(&mut self.round_waits) {
            match self.digests.get(&digest) {
                Some(&tid) => self.capture(tid, &path, offset, &row)?,
                None => {
                    waiting::put(&mut self.batch, &digest, &path, offset, &row);
                    delta += 1;
                }
            }
        }
        // (Only rows written before can wait for these: the round's own are settled above.)
        let found: Vec<(String, u64)> = match waiting::count(self.cat)? {
            0 => Vec::new(),
            _ => self.digests.iter().map(|(d, &t)| (d.clone(), t)).collect(),
        };
        for (digest, tid) in found {
            for (path, offset, row) in waiting::take_of_digest(self.cat, &mut self.batch, &digest)? {
                delta -= 1;
                self.capture(tid, &path, offset, &row)?;
            }
        }
        waiting::count_by(self.cat, &mut self.batch, delta)
    }
}

/// Deletes the rows left naming a text or fragment gone (`H` rows whose `Q` row is gone,
/// `P` and `D` rows whose `T` row is), once the texts and fragments gone since the last sweep
/// are an eighth of those held: nothing finds those rows from an id (a fragment's identity
/// is kept in its `H` row alone; several payloads and digests may name one text), so the
/// sweep reads every one of them, and waits until what it deletes pays for that.
pub(super) fn sweep(cat: &Catalog, stop: &dyn Fn() -> bool) -> Result<()> {
    let mut ids = cat.counters()?;
    if ids.gone == 0 || ids.gone * 8 < ids.held {
        return Ok(());
    }
    let mut batch = WriteBatch::default();
    let (mut stopped, mut read) = (stop(), 0u64);
    for (table, of) in [(b'H', b'Q'), (b'P', b'T'), (b'D', b'T')] {
        if stopped {
            break;
        }
        cat.scan(&[table], &mut |k, v| {
            let held = match id_of(v) {
                Some(id) => cat.get(&key(of, &[&id.to_be_bytes()]))?.is_some(),
                None => false,
            };
            if !held {
                batch.delete(k);
                // (Written as it goes: the batch is bounded, and a sweep cut short is done
                // again.)
                if batch.len() >= 100_000 {
                    cat.write(std::mem::take(&mut batch))?;
                }
            }
            read += 1;
            stopped = read % 10_000 == 0 && stop();
            Ok(!stopped)
        })?;
    }
    if !stopped {
        ids.gone = 0;
        ids.put(&mut batch);
    }
    // (A sweep stopped with nothing left to delete writes nothing: a synced write costs.)
    if batch.is_empty() {
        return Ok(());
    }
    cat.write(batch)
}
