//! Queries: texts found in the text index (tantivy's query language; words joined by AND,
//! phrases in quotes), then their captures from the catalog, filtered by time, URL prefix
//! and type. A snippet is cut from the text extracted again from a capture's payload: the
//! index keeps no text.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::Path;

use tantivy::collector::{DocSetCollector, TopDocs};
use tantivy::query::QueryParser;
use tantivy::schema::Value;
use tantivy::snippet::SnippetGenerator;
use tantivy::{Index, IndexReader, TantivyDocument};

use super::catalog::{Catalog, CaptureRow};
use super::extract::{http_fields, text_from};
use super::{db_dir, schema, text_dir, Fields, Result, SearchError};
use crate::store::Store;

/// The most captures of one text a search result lists (a boilerplate page captured
/// millions of times is one result, not millions of rows in memory).
pub const MAX_CAPTURES: usize = 10_000;

/// What is asked.
#[derive(Clone, Debug, Default)]
pub struct Query {
    pub q: String,
    /// Captures from and to these times (14-digit prefixes, inclusive).
    pub from: Option<String>,
    pub to: Option<String>,
    pub url_prefix: Option<String>,
    /// A MIME type (`text/html`), or its start (`text/`).
    pub mime: Option<String>,
    /// The most texts looked at, best first.
    pub texts: usize,
}

/// One capture of a text found.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Capture {
    /// The file (its path in the store) and the record's offset in it.
    pub file: String,
    pub offset: u64,
    #[serde(flatten)]
    pub row: CaptureRow,
}

/// A text found, with the captures of it the query's filters keep.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Hit {
    pub tid: u64,
    pub score: f32,
    pub title: String,
    pub captures: Vec<Capture>,
}

/// An open search index, for queries.
pub struct Searcher {
    index: Index,
    reader: IndexReader,
    cat: Catalog,
    fields: Fields,
    unit: super::Unit,
}

impl Query {
    fn keeps(&self, c: &CaptureRow) -> bool {
        let ts = &c.timestamp;
        self.from.as_ref().is_none_or(|f| ts.as_str() >= f.as_str())
            && self.to.as_ref().is_none_or(|t| ts[..t.len().min(ts.len())] <= *t.as_str())
            && self.url_prefix.as_ref().is_none_or(|p| c.url.starts_with(p.as_str()))
            && self.mime.as_ref().is_none_or(|m| c.mime.starts_with(m.as_str()))
    }
}

impl Searcher {
    /// Opens the search index in `dir` for reading (a writer may have it open).
    pub fn open(dir: &Path) -> Result<Searcher> {
        if !super::exists(dir) {
            return Err(SearchError::Missing(dir.to_path_buf()));
        }
        let unit = match super::made(dir)? {
            super::Made::As(_, found) if found != super::LAYOUT => {
                let what = if found < super::LAYOUT { "made by an earlier warcfs; `warcfs search update` makes it anew" } else { "made by a later warcfs" };
                return Err(SearchError::Layout { path: dir.to_path_buf(), found, what });
            }
            super::Made::As(unit, _) => unit,
            super::Made::Unknown(said) => return Err(SearchError::Unknown { path: dir.to_path_buf(), said }),
            super::Made::Nothing => return Err(SearchError::Missing(dir.to_path_buf())),
        };
        let tdir = text_dir(dir);
        let terr = |err: tantivy::TantivyError| SearchError::Text { path: tdir.clone(), err };
        let index = Index::open_in_dir(&tdir).map_err(terr)?;
        let reader = index.reader().map_err(terr)?;
        let cat = Catalog::open(&db_dir(dir), true)?;
        Ok(Searcher { index, reader, cat, fields: schema().1, unit })
    }

    fn parse(&self, q: &str) -> Result<Box<dyn tantivy::query::Query>> {
        let mut parser = QueryParser::for_index(&self.index, vec![self.fields.title, self.fields.body]);
        parser.set_conjunction_by_default();
        parser.parse_query(q).map_err(|e| SearchError::Query(format!("{q}: {e}")))
    }

    /// The texts `q` finds (at most `q.texts`, best first), each with its captures that pass
    /// the filters; texts with none left out.
    pub fn search(&self, q: &Query) -> Result<Vec<Hit>> {
        if self.unit == super::Unit::Fragments {
            return self.search_fragments(q);
        }
        let query = self.parse(&q.q)?;
        let searcher = self.reader.searcher();
        let top = searcher.search(&*query, &TopDocs::with_limit(q.texts.max(1)).order_by_score()).map_err(|err| SearchError::Text { path: "(search)".into(), err })?;
        let mut hits = Vec::new();
        let tids = super::Ids::new(&searcher, "tid");
        for (score, addr) in top {
            let doc: TantivyDocument = searcher.doc(addr).map_err(|err| SearchError::Text { path: "(doc)".into(), err })?;
            let Some(tid) = tids.of(addr) else { continue };
            let title = doc.get_first(self.fields.title).and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
            hits.extend(self.hit(q, tid, score, title)?);
        }
        Ok(hits)
    }

    /// Text `tid` as a result of `q`: its captures that pass the filters (at most
    /// `MAX_CAPTURES`), None if none does.
    fn hit(&self, q: &Query, tid: u64, score: f32, title: String) -> Result<Option<Hit>> {
        let mut captures = Vec::new();
        self.cat.captures(tid, &mut |file, offset, row| {
            if q.keeps(&row) {
                captures.push(Capture { file: file.to_string(), offset, row });
            }
            Ok(captures.len() < MAX_CAPTURES)
        })?;
        Ok((!captures.is_empty()).then_some(Hit { tid, score, title, captures }))
    }

    /// `search` of an index of fragments: the texts `fragments::matching` finds, best first.
    fn search_fragments(&self, q: &Query) -> Result<Vec<Hit>> {
        let searcher = self.reader.searcher();
        let mut texts: Vec<(u64, f32)> = super::fragments::matching(&self.index, &searcher, &self.cat, self.fields, &q.q)?.into_iter().collect();
        texts.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        texts.truncate(q.texts.max(1));
        let mut hits = Vec::new();
        for (tid, score) in texts {
            let title = searcher
                .search(&tantivy::query::TermQuery::new(tantivy::Term::from_field_u64(self.fields.tid, tid), tantivy::schema::IndexRecordOption::Basic), &TopDocs::with_limit(1).order_by_score())
                .map_err(|err| SearchError::Text { path: "(title)".into(), err })?
                .first()
                .and_then(|(_, a)| searcher.doc::<TantivyDocument>(*a).ok())
                .and_then(|d| d.get_first(self.fields.title).and_then(|v| v.as_str().map(str::to_string)))
                .unwrap_or_default();
            hits.extend(self.hit(q, tid, score, title)?);
        }
        Ok(hits)
    }

    /// Every capture `q` finds (file, offset), whatever its score: for comparing indexes.
    pub fn all_captures(&self, q: &Query) -> Result<BTreeSet<(String, u64)>> {
        if self.unit == super::Unit::Fragments {
            let searcher = self.reader.searcher();
            let mut out = BTreeSet::new();
            for tid in super::fragments::matching(&self.index, &searcher, &self.cat, self.fields, &q.q)?.into_keys() {
                self.cat.captures(tid, &mut |file, offset, row| {
                    if q.keeps(&row) {
                        out.insert((file.to_string(), offset));
                    }
                    Ok(true)
                })?;
            }
            return Ok(out);
        }
        let query = self.parse(&q.q)?;
        let searcher = self.reader.searcher();
        let docs = searcher.search(&*query, &DocSetCollector).map_err(|err| SearchError::Text { path: "(search)".into(), err })?;
        let mut out = BTreeSet::new();
        let tids = super::Ids::new(&searcher, "tid");
        for addr in docs {
            let Some(tid) = tids.of(addr) else { continue };
            self.cat.captures(tid, &mut |file, offset, row| {
                if q.keeps(&row) {
                    out.insert((file.to_string(), offset));
                }
                Ok(true)
            })?;
        }
        Ok(out)
    }

    /// Snippets made in a row until this time has passed, the rest left empty: each reads
    /// a payload and extracts its text again (a PDF's in a child process that may take up
    /// to its timeout), and an answer must not wait for a hundred of them.
    pub const SNIPPET_TIME: std::time::Duration = std::time::Duration::from_secs(2);

    /// A snippet of `c`'s text around what `q` finds in it (read from the store), plain
    /// text with the words found in `[` `]`; empty if the capture cannot be read.
    pub fn snippet(&self, store: &Store, q: &str, c: &Capture) -> Result<String> {
        let query = self.parse(q)?;
        let searcher = self.reader.searcher();
        let mut generator = SnippetGenerator::create(&searcher, &*query, self.fields.body).map_err(|err| SearchError::Text { path: "(snippet)".into(), err })?;
        generator.set_max_num_chars(200);
        let Some(text) = capture_text(store, c)? else { return Ok(String::new()) };
        let s = generator.snippet(&text);
        let (frag, mut out, mut at) = (s.fragment(), String::new(), 0);
        for r in s.highlighted() {
            out.push_str(&frag[at..r.start]);
            out.push('[');
            out.push_str(&frag[r.clone()]);
            out.push(']');
            at = r.end;
        }
        out.push_str(&frag[at..]);
        Ok(out)
    }

    /// The catalog (its tables' sizes for `warcfs search stats`).
    pub fn catalog(&self) -> &Catalog {
        &self.cat
    }

    /// The text index's documents and bytes on disk.
    pub fn text_usage(&self) -> Result<(u64, u64)> {
        let searcher = self.reader.searcher();
        let bytes = searcher.space_usage().map_err(|err| SearchError::Io { path: "(space usage)".into(), err })?.total().get_bytes();
        Ok((searcher.num_docs(), bytes))
    }

    /// The text index's bytes by part: term dictionary, postings, positions, fast fields,
    /// field norms, stored fields, deletes; and its segments.
    pub fn text_parts(&self) -> Result<(Vec<(&'static str, u64)>, usize)> {
        let searcher = self.reader.searcher();
        let usage = searcher.space_usage().map_err(|err| SearchError::Io { path: "(space usage)".into(), err })?;
        let mut parts = vec![("termdict", 0u64), ("postings", 0), ("positions", 0), ("fast_fields", 0), ("fieldnorms", 0), ("store", 0), ("deletes", 0)];
        for seg in usage.segments() {
            let sizes = [seg.termdict().total(), seg.postings().total(), seg.positions().total(), seg.fast_fields().total(), seg.fieldnorms().total(), seg.store().total(), seg.deletes()];
            for (p, b) in parts.iter_mut().zip(sizes) {
                p.1 += b.get_bytes();
            }
        }
        Ok((parts, usage.segments().len()))
    }
}

/// The body text of the capture `c` (a response's or resource's; for a revisit, nothing).
pub fn capture_text(store: &Store, c: &Capture) -> Result<Option<String>> {
    if c.row.revisit || c.row.length > super::build::MAX_BLOCK {
        return Ok(None);
    }
    // A WARC inside a stored WACZ is named by its path in `/.warcfs/wacz/`.
    let (head, at) = match store.wacz_warc_of(&c.file)? {
        Some((head, w)) => (head, w.start),
        None => {
            let Ok(ino) = store.resolve(&c.file) else { return Ok(None) };
            let Some(head) = store.inode(ino)?.and_then(|i| i.recipe) else { return Ok(None) };
            (head, 0)
        }
    };
    let mut raw = vec![0u8; c.row.length as usize];
    let n = store.read_at(&head, at + c.offset, &mut raw)?;
    raw.truncate(n);
    // (A gzip member by its magic, not by the name: a file may be renamed.)
    let record = if raw.starts_with(&[0x1f, 0x8b]) {
        let mut t = Vec::new();
        let _ = flate2::read::MultiGzDecoder::new(&raw[..]).take(super::build::MAX_BLOCK).read_to_end(&mut t);
        t
    } else {
        raw
    };
    let find = crate::format::warc::header_end;
    let Some(warc_end) = find(&record) else { return Ok(None) };
    let block = &record[warc_end..];
    let warc = crate::format::warc::revisit::Header::parse(&record[..warc_end]);
    let is_resource = warc.as_ref().is_some_and(|h| h.is("resource"));
    let (http, payload) = if is_resource {
        (Vec::new(), block)
    } else {
        let Some(e) = find(block) else { return Ok(None) };
        (http_fields(&block[..e]), &block[e..])
    };
    let field = |n: &str| http.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str()).unwrap_or("");
    // (A resource's type as it was indexed: its WARC Content-Type, charset and all.)
    let resource_type = warc.as_ref().and_then(|h| h.get("Content-Type")).map(|v| String::from_utf8_lossy(v).into_owned()).unwrap_or_default();
    let mime = if is_resource { resource_type.as_str() } else { field("content-type") };
    let from = format!("{} ({} at {})", c.row.url, c.file, c.offset);
    Ok(text_from(&from, mime, field("transfer-encoding"), field("content-encoding"), payload).map(|t| t.body))
}
