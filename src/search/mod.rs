//! Full-text search over the store's WARCs, each text indexed once (issue 46, after Zhang and
//! Suel: an archive of versions should not pay for a text again per capture).
//!
//! Two parts under `STORE/search/` (`store::layout::search`), both derived from the stored
//! files and rebuilt from them (`warcfs search rebuild`):
//! * `text/`: a tantivy index of one document per unique text (`extract`: the words of an
//!   HTML or plain-text payload, or of a PDF's in a child process (`pdf`, feature `pdf`),
//!   its title apart), keyed by a text id (`tid`, numbered from 1 in the order texts are
//!   met: small ids cost the index and the catalog little). No capture is in it, so a new
//!   capture of a known text costs no document.
//! * `db/`: a RocksDB of the captures (`catalog`): each one a row under its text id (URL,
//!   time, status, type, digest, where it is), revisits under their original's text; each
//!   text's count of captures, each payload's text, each indexed file's recipe.
//!
//! `update` (`build`) brings both to the store as it is: files new or changed since are
//! indexed, files gone have their captures removed (a file renamed has them moved: `moves`),
//! and a text whose last capture goes is deleted from the index. Its order makes it safe to
//! kill at any point (`build::commit`): the rows of what goes, then the text index, then the
//! rows that say which files are indexed, so a killed update is done again by the next
//! (which first deletes the documents of ids not given yet: a killed round's).
//! Queries (`query`) find texts, then their captures.

pub mod build;
pub mod catalog;
pub mod extract;
pub mod fragments;
pub mod http;
mod moves;
#[cfg(feature = "pdf")]
pub(crate) mod pdf;
pub mod query;
mod waiting;

use std::path::{Path, PathBuf};

use tantivy::schema::{Field, NumericOptions, Schema, STORED, TEXT};

pub use build::{Unit, Updated};
pub use query::{Capture, Hit, Query, Searcher};

/// What went wrong, naming the part of the search.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error("the search's text index ({path}): {err}")]
    Text { path: PathBuf, err: tantivy::TantivyError },
    #[error("the search's captures ({path}): {err}")]
    Db { path: PathBuf, err: rocksdb::Error },
    #[error("{0}")]
    Store(#[from] crate::store::StoreError),
    #[error("the query: {0}")]
    Query(String),
    #[error("{path}: {err}")]
    Io { path: PathBuf, err: std::io::Error },
    #[error("{0}: no search index here (make one with `warcfs search update STORE`)")]
    Missing(PathBuf),
    #[error("{path}: a search index of layout {found}, this warcfs reads layout {LAYOUT}: {what}")]
    Layout { path: PathBuf, found: u32, what: &'static str },
    #[error("{path}: a search index this warcfs does not know (its `unit` file says {said:?}): made by a later warcfs? `warcfs search rebuild` makes it anew")]
    Unknown { path: PathBuf, said: String },
}

/// The layout of `STORE/search/` this warcfs writes and reads (docs/FORMAT.md): 2, texts and
/// fragments numbered densely; 1 (a `unit` file without a number), ids from their hashes.
/// An update finding an earlier layout makes the index anew (it is derived data).
pub const LAYOUT: u32 = 2;

pub type Result<T> = std::result::Result<T, SearchError>;

/// The fields of a text's document.
#[derive(Clone, Copy)]
pub(crate) struct Fields {
    pub tid: Field,
    pub title: Field,
    pub body: Field,
    /// A fragment's id (`Unit::Fragments`).
    pub fid: Field,
}

/// The text index's schema: the text id (indexed, to delete by and find a title by; fast, to
/// read back; no field norms, which only words are scored by), the title (stored, for
/// results), the body with positions (for phrases), not stored (snippets come from the
/// payload, extracted again), and a fragment's id (`fragments`: a fragment's document has
/// `fid` and `body`, its text's title one of its own, `tid` and `title`).
pub(crate) fn schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    let id = || NumericOptions::default().set_indexed().set_fast();
    let tid = b.add_u64_field("tid", id());
    let title = b.add_text_field("title", TEXT | STORED);
    let body = b.add_text_field("body", TEXT);
    let fid = b.add_u64_field("fid", id());
    (b.build(), Fields { tid, title, body, fid })
}

/// The directories of a search index kept in `dir`.
pub(crate) fn text_dir(dir: &Path) -> PathBuf {
    dir.join("text")
}

pub(crate) fn db_dir(dir: &Path) -> PathBuf {
    dir.join("db")
}

/// What the index in `dir` was made as (its `unit` file: the unit's name, then the layout).
pub(crate) enum Made {
    /// Nothing yet: no `unit` file and no tables (a new index, or the directory `search
    /// update` makes for a mounted store's indexer).
    Nothing,
    /// A unit and a layout (no number: layout 1). Tables without a `unit` file are an index
    /// from before it: layout 1, made anew as warcfs's own.
    As(Unit, u32),
    /// A `unit` file this warcfs does not know: what it says.
    Unknown(String),
}

pub(crate) fn made(dir: &Path) -> Result<Made> {
    let path = dir.join("unit");
    let s = match std::fs::read(&path) {
        Ok(b) => match String::from_utf8(b) {
            Ok(s) => s,
            Err(e) => return Ok(Made::Unknown(String::from_utf8_lossy(e.as_bytes()).into_owned())),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let tables = [text_dir(dir), db_dir(dir)].iter().any(|d| std::fs::read_dir(d).is_ok_and(|mut e| e.next().is_some()));
            return Ok(if tables { Made::As(Unit::Fragments, 1) } else { Made::Nothing });
        }
        Err(err) => return Err(SearchError::Io { path, err }),
    };
    let mut words = s.split_whitespace();
    let unit = match words.next() {
        Some("text") => Unit::Text,
        Some("fragments") => Unit::Fragments,
        Some("capture") => Unit::Capture,
        _ => return Ok(Made::Unknown(s.trim().to_string())),
    };
    Ok(match (words.next().map(str::parse::<u32>), words.next()) {
        (None, _) => Made::As(unit, 1),
        (Some(Ok(n)), None) => Made::As(unit, n),
        _ => Made::Unknown(s.trim().to_string()),
    })
}

/// Makes ready the index in `dir` for an update as `unit` (None: the index's own, or
/// warcfs's for a new one): the unit an index is made with is its unit for good (`rebuild`
/// makes it anew); one of an earlier layout, derived data this warcfs cannot update, is
/// made anew; one of a later layout is refused.
pub(crate) fn prepare(dir: &Path, unit: Option<Unit>) -> Result<Unit> {
    let io = |err: std::io::Error| SearchError::Io { path: dir.to_path_buf(), err };
    let made = match made(dir)? {
        Made::Unknown(said) => return Err(SearchError::Unknown { path: dir.to_path_buf(), said }),
        // An index of an earlier layout is derived data this warcfs cannot update: made anew.
        Made::As(have, found) if found < LAYOUT => {
            log::warn!("search index {}: made by an earlier warcfs (layout {found}, this one writes {}): made anew", dir.display(), LAYOUT);
            for d in [text_dir(dir), db_dir(dir), dir.join("unit")] {
                let gone = if d.is_dir() { std::fs::remove_dir_all(&d) } else { std::fs::remove_file(&d) };
                gone.or_else(|e| if e.kind() == std::io::ErrorKind::NotFound { Ok(()) } else { Err(e) }).map_err(io)?;
            }
            crate::disk::sync_dir(dir).map_err(io)?;
            unit.or(Some(have)).map(|u| (u, false))
        }
        Made::As(_, found) if found > LAYOUT => return Err(SearchError::Layout { path: dir.to_path_buf(), found, what: "made by a later warcfs" }),
        Made::As(have, _) => Some((have, true)),
        Made::Nothing => unit.map(|u| (u, false)),
    };
    std::fs::create_dir_all(text_dir(dir)).map_err(io)?;
    let unit = match (made, unit) {
        (Some((have, true)), Some(want)) if have != want => return Err(SearchError::Query(format!("{}: made with one document per {}; `warcfs search rebuild` makes it anew", dir.display(), have.name()))),
        (Some((have, true)), _) => have,
        (want, _) => {
            let u = want.map_or(Unit::Fragments, |w| w.0);
            // Durable before anything is indexed: an index read as another unit, or in
            // another layout, is read wrong. Whole or not at all (written beside, then
            // renamed): a file cut short by a crash would read as a unit not known.
            let part = dir.join("unit.part");
            let mut f = std::fs::File::create(&part).map_err(io)?;
            std::io::Write::write_all(&mut f, format!("{} {}", u.name(), LAYOUT).as_bytes()).map_err(io)?;
            f.sync_all().map_err(io)?;
            std::fs::rename(&part, dir.join("unit")).map_err(io)?;
            crate::disk::sync_dir(dir).map_err(io)?;
            u
        }
    };
    Ok(unit)
}

/// Whether `dir` holds a search index (or the start of one).
pub fn exists(dir: &Path) -> bool {
    dir.is_dir()
}

/// The u64 fast field `name` of each segment of a searcher, each column opened once: opening
/// one reads its block headers (ids numbered in order are stored as lines per block), which
/// opened per document found made the queries that match many fragments a fifth slower.
pub(crate) struct Ids(Vec<Option<tantivy::columnar::Column<u64>>>);

impl Ids {
    pub(crate) fn new(searcher: &tantivy::Searcher, name: &str) -> Ids {
        Ids(searcher.segment_readers().iter().map(|r| r.fast_fields().u64(name).ok()).collect())
    }

    /// The value of the document `addr`.
    pub(crate) fn of(&self, addr: tantivy::DocAddress) -> Option<u64> {
        self.0.get(addr.segment_ord as usize)?.as_ref()?.first(addr.doc_id)
    }
}
