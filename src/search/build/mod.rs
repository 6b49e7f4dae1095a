//! Bringing a search index to the store as it is (`update`): every stored WARC new or changed
//! since is indexed, every one gone has its captures removed. A file's records are walked
//! from their stored headers; a text record's payload is read and hashed (SHA-256), and only
//! a payload never seen is extracted (`extract`), and only a text never seen becomes a
//! document. Revisits are captures of their original's text, found by the payload digest
//! string (as replay tools find it); one whose original is not indexed yet waits (`waiting`)
//! until it is. Work is committed in rounds: the text index first, then the catalog rows.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Bound;
use std::path::Path;

use rocksdb::WriteBatch;
use sha2::Digest as _;
use tantivy::{IndexWriter, Term};

mod commit;
mod documents;

use super::catalog::{key, path_part, places_of, sha_of, Catalog, CaptureRow, Counters, RowMoves, Sha};
use super::extract::{http_fields, kind_of, text_from, Text};
use super::{db_dir, schema, text_dir, Fields, Result, SearchError};
use crate::format::warc::revisit::{bare_uri, Header};
use crate::recipe::RecipeHead;
use crate::store::{RecordHead, Store, StoreError};

/// What one document stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// A unique text, one document each.
    Text,
    /// A unique text as its fragments, each distinct fragment one document (`fragments`):
    /// warcfs's index.
    Fragments,
    /// A capture: one document per capture, revisits included, as an archive indexing each
    /// record does (SolrWayback's way): the baseline the text index is measured against.
    Capture,
}

impl Unit {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Unit::Text => "text",
            Unit::Fragments => "fragments",
            Unit::Capture => "capture",
        }
    }
}

/// What an update did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Updated {
    pub files_indexed: u64,
    pub files_removed: u64,
    /// Files renamed since: their captures moved, nothing read (`moves`).
    pub files_moved: u64,
    /// Files whose recipe is new but not their bytes (gc rewrote their parses: `init
    /// --parses compact-at-gc`): their rows kept, nothing read.
    pub files_reparsed: u64,
    pub captures_moved: u64,
    /// Files that could not be read whole (their errors logged).
    pub files_failed: u64,
    pub captures: u64,
    /// Captures that are revisits.
    pub revisits: u64,
    /// Revisits whose original's text is not indexed (yet).
    pub revisits_waiting: u64,
    pub payloads_read: u64,
    pub payload_bytes: u64,
    pub texts_extracted: u64,
    pub documents_added: u64,
    pub documents_deleted: u64,
}

/// What says a stored file still holds the bytes it was indexed with when its recipe id
/// has changed: its inode number, change time and size, which gc's rewrite of its parses
/// (`store::maint::reparse`) keeps and any write changes. `F` rows hold it after the recipe
/// id (rows of 8 bytes, written before, have none: such a file is indexed again once).
type Stamp = [u8; 28];

fn stamp_of(ino: u64, inode: &crate::store::Inode) -> Stamp {
    let mut st = [0u8; 28];
    st[..8].copy_from_slice(&ino.to_be_bytes());
    st[8..16].copy_from_slice(&inode.ctime.secs.to_be_bytes());
    st[16..20].copy_from_slice(&inode.ctime.nanos.to_be_bytes());
    st[20..].copy_from_slice(&inode.size.to_be_bytes());
    st
}

/// An `F` row's value: the recipe id the file was indexed under, and its stamp if known.
fn f_row(id: u64, stamp: Option<&Stamp>) -> Vec<u8> {
    let mut v = id.to_be_bytes().to_vec();
    v.extend_from_slice(stamp.map_or(&[][..], |s| &s[..]));
    v
}

/// The largest record block read for its text.
pub(crate) const MAX_BLOCK: u64 = 64 << 20;
/// A round ends after this many captures (or files).
const ROUND_CAPTURES: u64 = 20_000;
const ROUND_FILES: usize = 64;

/// One update's state: what this round changes, not yet committed.
struct Round<'a> {
    store: &'a Store,
    cat: &'a Catalog,
    writer: &'a mut IndexWriter,
    fields: Fields,
    unit: Unit,
    batch: WriteBatch,
    /// The counters as committed, and as this round leaves them.
    committed: Counters,
    ids: Counters,
    /// Changes of each text's count of captures, and the texts new this round.
    refs: HashMap<u64, i64>,
    new_texts: HashMap<u64, Sha>,
    by_sha: HashMap<[u8; 32], u64>,
    payloads: HashMap<[u8; 32], u64>,
    /// Payloads met in this update that gave no text (not a kind read, empty, or a PDF its
    /// parser could not read): not extracted again for each capture of them.
    no_text: HashSet<[u8; 32]>,
    digests: HashMap<String, u64>,
    /// Revisits of this round whose original's text was not known when they were met: each
    /// a capture at the round's commit if a response of the round gave that text, else
    /// waiting (`waiting`).
    round_waits: Vec<(String, String, u64, CaptureRow)>,
    /// `Unit::Fragments`: changes of each fragment's count of texts, the fragments new this
    /// round, and the fragments of the texts new this round.
    frag_refs: HashMap<u64, i64>,
    new_frags: HashMap<u64, Sha>,
    frag_by_sha: HashMap<[u8; 32], u64>,
    text_frags: HashMap<u64, Vec<u64>>,
    analyzer: Option<tantivy::tokenizer::TextAnalyzer>,
    /// `Unit::Capture`: the texts of payloads and digests met in this update.
    texts: HashMap<[u8; 32], Text>,
    digest_texts: HashMap<String, Text>,
    captures: u64,
    done: Updated,
}

/// The time of a WARC-Date as CDXJ gives it: its first 14 digits.
fn timestamp(date: &[u8]) -> String {
    let d: String = date.iter().filter(|b| b.is_ascii_digit()).take(14).map(|&b| b as char).collect();
    format!("{d:0<14}")
}

fn sha(b: &[u8]) -> [u8; 32] {
    sha2::Sha256::digest(b).into()
}

/// Brings the search index in `dir` to the store as it is; `stop` is asked between files (a
/// mount going down): what is done by then is committed.
pub fn update(store: &Store, dir: &Path, unit: Option<Unit>, stop: &dyn Fn() -> bool) -> Result<Updated> {
    let unit = super::prepare(dir, unit)?;
    let tdir = text_dir(dir);
    let terr = |err: tantivy::TantivyError| SearchError::Text { path: tdir.clone(), err };
    let (schema, fields) = schema();
    let index = match tantivy::Index::open_in_dir(&tdir) {
        Ok(i) => i,
        Err(tantivy::TantivyError::OpenReadError(_)) => tantivy::Index::create_in_dir(&tdir, schema).map_err(terr)?,
        Err(e) => return Err(terr(e)),
    };
    let mut writer: IndexWriter = index.writer_with_num_threads(1, 64 << 20).map_err(terr)?;
    let mut policy = tantivy::indexer::LogMergePolicy::default();
    policy.set_del_docs_ratio_before_merge(0.04);
    writer.set_merge_policy(Box::new(policy));
    let cat = Catalog::open(&db_dir(dir), false)?;
    let tables_before = cat.table_bytes();

    // The store's WARCs and WACZs, and what the catalog says was indexed.
    let mut stored: BTreeMap<String, RecipeHead> = BTreeMap::new();
    let mut stamps: HashMap<String, Stamp> = HashMap::new();
    store.each_file_under("/", &mut |name, ino, inode| {
        let n = name.as_bytes();
        if let Some(h) = inode.recipe.as_ref().filter(|_| (crate::store::is_warc_name(n) || crate::store::is_wacz_name(n)) && !inode.staged) {
            stored.insert(format!("/{name}"), h.clone());
            stamps.insert(format!("/{name}"), stamp_of(ino, inode));
        }
        Ok(())
    })?;
    let mut indexed: BTreeMap<String, u64> = BTreeMap::new();
    // Files of a new recipe with the stamp they were indexed with: the same bytes.
    let mut reparsed: Vec<(String, u64)> = Vec::new();
    cat.scan(b"F", &mut |k, v| {
        if let Some(id) = v.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes) {
            let path = String::from_utf8_lossy(&k[1..k.len() - 1]).into_owned();
            let same_bytes = v.get(8..).is_some_and(|st| stamps.get(&path).is_some_and(|s| st == &s[..]));
            let id = match stored.get(&path).map(|h| h.id) {
                Some(now) if now != id && same_bytes => {
                    reparsed.push((path.clone(), now));
                    now
                }
                _ => id,
            };
            indexed.insert(path, id);
        }
        Ok(true)
    })?;
    let mut gone: Vec<String> = indexed.iter().filter(|(p, id)| stored.get(*p).is_none_or(|h| h.id != **id)).map(|(p, _)| p.clone()).collect();
    let mut new: Vec<(String, RecipeHead)> = stored.into_iter().filter(|(p, h)| indexed.get(p) != Some(&h.id)).collect();
    // (One document per capture names its documents by path: moves are indexed anew.)
    let moves = if unit == Unit::Capture { Vec::new() } else { super::moves::renamed(&mut gone, &mut new, &indexed) };

    let analyzer = index.tokenizer_for_field(fields.body).map_err(terr)?;
    let ids = cat.counters()?;
    // The documents of ids not given yet are a killed update's, whose rows did not commit:
    // deleted before anything is added (this update may not give those ids again).
    for (field, from) in [(fields.tid, ids.next_tid), (fields.fid, ids.next_fid)] {
        let orphans = tantivy::query::RangeQuery::new(Bound::Included(Term::from_field_u64(field, from)), Bound::Unbounded);
        writer.delete_query(Box::new(orphans)).map_err(terr)?;
    }
    let mut r = Round::new(store, &cat, &mut writer, fields, unit, ids);
    r.analyzer = Some(analyzer);
    for (path, id) in &reparsed {
        r.batch.put(key(b'F', &[&path_part(path)]), f_row(*id, stamps.get(path)));
        r.done.files_reparsed += 1;
    }
    // The waiting revisits of the files gone or moved are written apart, before anything is
    // indexed: one that waited must not be found at its old place by the digest a new file
    // brings. (Their other rows go with the round: a file re-indexed under a new recipe keeps
    // its texts, found by their payloads, rather than extracting them again.)
    let mut early = WriteBatch::default();
    let mut early_delta = 0i64;
    for path in &gone {
        early_delta -= r.remove_file(path, &mut early)? as i64;
        r.done.files_removed += 1;
    }
    // After the removals: a file moved over another one takes its place.
    let (mut rows, mut waiting_moves) = (RowMoves::default(), RowMoves::default());
    for (from, to, id) in &moves {
        r.done.captures_moved += super::moves::move_file(r.cat, &mut rows, &mut waiting_moves, from, to, f_row(*id, stamps.get(to)))?;
        r.done.files_moved += 1;
    }
    rows.apply(&mut r.batch);
    waiting_moves.apply(&mut early);
    if !early.is_empty() {
        super::waiting::count_by(&cat, &mut early, early_delta)?;
        cat.write(early)?;
    }
    let mut in_round = 0usize;
    for (path, head) in &new {
        if stop() {
            break;
        }
        match r.index_file(path, head, stamps.get(path)) {
            Ok(()) => r.done.files_indexed += 1,
            // A file that cannot be read is indexed as far as it was read, and said so; it is
            // tried again once it changes (its `F` row names this recipe).
            Err(SearchError::Store(e)) => {
                log::warn!("search index: {path}: {e}; indexed as far as it could be read");
                r.batch.put(key(b'F', &[&path_part(path)]), f_row(head.id, stamps.get(path)));
                r.done.files_failed += 1;
            }
            Err(e) => return Err(e),
        }
        in_round += 1;
        if in_round >= ROUND_FILES || r.captures >= ROUND_CAPTURES {
            r.commit()?;
            in_round = 0;
        }
    }
    r.commit()?;
    let mut done = std::mem::take(&mut r.done);
    done.revisits_waiting = super::waiting::count(&cat)?;
    drop(r);
    writer.wait_merging_threads().map_err(terr)?;
    commit::sweep(&cat, stop)?;
    // The rows into sorted, compressed tables (not left in the write-ahead log).
    cat.db.flush().map_err(|e| cat.err(e))?;
    // An update that wrote at least as much as the catalog held (a first build, a large
    // import) has its tables compacted: rows overwritten in later rounds are dropped, and the
    // sequence numbers every key carries become zeros that compress (a tenth of the catalog
    // on the corpus). Its cost is at most about twice what the update wrote, so rare.
    let tables_after = cat.table_bytes();
    if tables_after > 0 && tables_after >= 2 * tables_before {
        cat.compact();
    }
    Ok(done)
}

impl<'a> Round<'a> {
    fn new(store: &'a Store, cat: &'a Catalog, writer: &'a mut IndexWriter, fields: Fields, unit: Unit, ids: Counters) -> Round<'a> {
        Round {
            store,
            cat,
            writer,
            fields,
            unit,
            batch: WriteBatch::default(),
            committed: ids,
            ids,
            refs: HashMap::new(),
            new_texts: HashMap::new(),
            by_sha: HashMap::new(),
            payloads: HashMap::new(),
            no_text: HashSet::new(),
            digests: HashMap::new(),
            round_waits: Vec::new(),
            texts: HashMap::new(),
            digest_texts: HashMap::new(),
            frag_refs: HashMap::new(),
            new_frags: HashMap::new(),
            frag_by_sha: HashMap::new(),
            text_frags: HashMap::new(),
            analyzer: None,
            captures: 0,
            done: Updated::default(),
        }
    }

    /// Removes the captures of the file indexed at `path` (a WACZ's: those of its WARCs,
    /// which captures name by their paths in `/.warcfs/wacz/`).
    /// (Its waiting revisits are deleted in `waiting`; returns how many.)
    fn remove_file(&mut self, path: &str, waiting: &mut WriteBatch) -> Result<u64> {
        let mut rows = Vec::new();
        for prefix in places_of(path) {
            self.cat.scan(&key(b'G', &[&prefix]), &mut |k, v| {
                rows.push((k.to_vec(), v.to_vec()));
                Ok(true)
            })?;
        }
        for (k, v) in rows {
            let Some(tid) = v.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes) else { continue };
            self.batch.delete(&k);
            self.batch.delete(key(b'C', &[&tid.to_be_bytes(), &k[1..]]));
            *self.refs.entry(tid).or_default() -= 1;
        }
        let mut waited = 0;
        for prefix in places_of(path) {
            waited += super::waiting::remove_under(self.cat, waiting, &prefix)?;
        }
        self.batch.delete(key(b'F', &[&path_part(path)]));
        Ok(waited)
    }

    /// Indexes the records of the stored WARC `path`.
    fn index_file(&mut self, path: &str, head: &RecipeHead, stamp: Option<&Stamp>) -> Result<()> {
        // (A file indexed before under another recipe had its captures removed first: it is
        // among `update`'s gone ones.)
        // A WACZ's records are captures of the WARCs inside it, each named by its path in
        // `/.warcfs/wacz/` and its offset there, as `warcfs index` gives them.
        let warcs = match crate::store::is_wacz_name(path.as_bytes()) {
            true => match self.store.wacz_warcs(path.trim_start_matches('/'), head)? {
                Some(w) => Some(w),
                None => {
                    self.batch.put(key(b'F', &[&path_part(path)]), f_row(head.id, stamp));
                    return Ok(());
                }
            },
            false => None,
        };
        let mut failed = None;
        self.store.each_warc_record(head, &mut |r| {
            let at = match &warcs {
                None => (path.to_string(), r.offset),
                Some(w) => match crate::store::warc_holding(w, &r) {
                    Some(inner) => (format!("/{}", inner.view_path), r.offset - inner.start),
                    None => return Ok(()),
                },
            };
            if let Err(e) = self.record((&at.0, at.1), head, &r) {
                failed = Some(e);
                return Err(StoreError::Resolve("(stopped)".into()));
            }
            Ok(())
        }).or_else(|e| if failed.is_some() { Ok(()) } else { Err(e) })?;
        if let Some(e) = failed {
            return Err(e);
        }
        self.batch.put(key(b'F', &[&path_part(path)]), f_row(head.id, stamp));
        Ok(())
    }

    /// One record of `head`'s file: a capture of a text at `(path, offset)`, or nothing.
    fn record(&mut self, (path, offset): (&str, u64), head: &RecipeHead, r: &RecordHead) -> Result<()> {
        let Some(h) = Header::parse(&r.warc_header) else { return Ok(()) };
        let (response, resource, revisit) = (h.is("response"), h.is("resource"), h.is("revisit"));
        if !(response || resource || revisit) {
            return Ok(());
        }
        let http = r.http_header.as_deref().map(|b| &b[..crate::format::warc::header_end(b).unwrap_or(b.len())]);
        let fields = http.map(http_fields).unwrap_or_default();
        let field = |n: &str| fields.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone()).unwrap_or_default();
        let status = http.and_then(|b| String::from_utf8_lossy(b).split_whitespace().nth(1).map(str::to_string)).unwrap_or_else(|| "-".into());
        let mime = if resource { String::from_utf8_lossy(h.get("Content-Type").unwrap_or_default()).into_owned() } else { field("content-type") };
        let digest = String::from_utf8_lossy(h.get("WARC-Payload-Digest").unwrap_or_default()).into_owned();
        let row = CaptureRow {
            url: String::from_utf8_lossy(bare_uri(h.get("WARC-Target-URI").unwrap_or_default())).into_owned(),
            timestamp: timestamp(h.get("WARC-Date").unwrap_or_default()),
            status: status.clone(),
            mime: mime.split(';').next().unwrap_or("").trim().to_string(),
            digest: digest.clone(),
            length: r.length,
            revisit,
        };
        if revisit {
            // Only a revisit of a text type can be a capture of a text (a server-not-modified
            // one without a type is left out).
            if digest.is_empty() || digest.contains('\0') || kind_of(&mime).is_none() {
                return Ok(());
            }
            let tid = match self.digests.get(&digest) {
                Some(&t) => Some(t),
                None => self.cat.live_tid(&key(b'D', &[digest.as_bytes()]))?,
            };
            match tid {
                Some(tid) => self.capture(tid, path, offset, &row)?,
                None => {
                    self.round_waits.push((digest, path.to_string(), offset, row));
                    self.captures += 1;
                }
            }
            return Ok(());
        }
        if (response && status != "200") || kind_of(&mime).is_none() {
            return Ok(());
        }
        let Some(block) = self.store.block_of(head, r, MAX_BLOCK)? else { return Ok(()) };
        let payload = if response { &block[http.map_or(0, <[u8]>::len).min(block.len())..] } else { &block[..] };
        self.done.payloads_read += 1;
        self.done.payload_bytes += payload.len() as u64;
        // A payload is one text as it is read: the same bytes as another type, charset or
        // encoding may be another text.
        let psha = sha(&[payload, &[0], mime.as_bytes(), &[0], field("transfer-encoding").as_bytes(), &[0], field("content-encoding").as_bytes()].concat());
        let known = match self.payloads.get(&psha) {
            Some(&t) => Some(t),
            None if self.unit != Unit::Capture => self.cat.live_tid(&key(b'P', &[&sha_of(&psha)]))?,
            None => None,
        };
        let text = match (known, self.unit) {
            (Some(_), Unit::Text | Unit::Fragments) => None,
            _ => match self.texts.get(&psha) {
                Some(t) => Some(t.clone()),
                None if self.no_text.contains(&psha) => return Ok(()),
                None => {
                    self.done.texts_extracted += 1;
                    let from = format!("{} ({path} at {offset})", row.url);
                    let text = text_from(&from, &mime, &field("transfer-encoding"), &field("content-encoding"), payload);
                    let Some(t) = text.filter(|t| !(t.body.is_empty() && t.title.is_empty())) else {
                        self.no_text.insert(psha);
                        return Ok(());
                    };
                    if self.unit == Unit::Capture {
                        self.texts.insert(psha, t.clone());
                    }
                    Some(t)
                }
            },
        };
        let tid = match (known, self.unit) {
            (Some(t), Unit::Text | Unit::Fragments) => t,
            _ => {
                let text = text.expect("extracted above");
                let tsha = sha(&[text.title.as_bytes(), &[0], text.body.as_bytes()].concat());
                let tid = match self.unit {
                    Unit::Text | Unit::Fragments => self.text_id(&tsha)?,
                    Unit::Capture => self.new_tid(),
                };
                if self.unit == Unit::Capture && !digest.is_empty() {
                    self.digest_texts.insert(digest.clone(), text.clone());
                }
                if !self.new_texts.contains_key(&tid) && self.cat.text(tid)?.is_none() {
                    self.add_document(tid, sha_of(&tsha), &text)?;
                }
                tid
            }
        };
        self.payloads.insert(psha, tid);
        if self.unit != Unit::Capture {
            self.batch.put(key(b'P', &[&sha_of(&psha)]), tid.to_be_bytes());
        }
        if response && !digest.is_empty() {
            self.digests.insert(digest.clone(), tid);
            self.batch.put(key(b'D', &[digest.as_bytes()]), tid.to_be_bytes());
        }
        self.capture(tid, path, offset, &row)
    }

    /// A capture of text `tid` (in `Unit::Capture`, a revisit's is a document of its own, of
    /// its original's text).
    fn capture(&mut self, tid: u64, path: &str, offset: u64, row: &CaptureRow) -> Result<()> {
        let tid = if self.unit == Unit::Capture && row.revisit {
            let Some(text) = self.digest_texts.get(&row.digest).cloned() else { return Ok(()) };
            let own = self.new_tid();
            let tsha = sha(&[text.title.as_bytes(), &[0], text.body.as_bytes()].concat());
            self.add_document(own, sha_of(&tsha), &text)?;
            own
        } else {
            tid
        };
        let (p, o) = (path_part(path), offset.to_be_bytes());
        self.batch.put(key(b'C', &[&tid.to_be_bytes(), &p, &o]), postcard::to_allocvec(row).unwrap_or_default());
        self.batch.put(key(b'G', &[&p, &o]), tid.to_be_bytes());
        *self.refs.entry(tid).or_default() += 1;
        self.captures += 1;
        self.done.captures += 1;
        self.done.revisits += row.revisit as u64;
        Ok(())
    }
}
