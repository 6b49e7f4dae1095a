//! Texts as fragments (issue 46 part 2, Zhang and Suel's idea with global sharing): a text is
//! cut into content-defined fragments by winnowing over its tokens (`K`-token k-grams, a cut
//! before the least hash of every window of `W`), so that two versions of a page, or two
//! pages of one site, share the fragments they have in common; each distinct fragment is one
//! document, indexed once, whatever texts hold it. A fragment's document also holds the
//! `OVERLAP` tokens before it, so a phrase of up to `OVERLAP + 1` words over a cut lies in
//! one document. A text's title is a document of its own (`tid`, `title`).
//!
//! A query is evaluated per text (`matching`): each of its words or phrases is looked up in
//! the fragments, the fragments found give their texts (the catalog's `R` rows), and the
//! query's AND, OR and NOT are applied to those sets of texts; so a text matches exactly when
//! its whole text would (`tests/search.rs` compares every query with an index of whole
//! captures). A text's score is the sum of its fragments' scores (BM25 of each word or phrase
//! in each fragment, once per fragment).

use std::collections::{BTreeSet, HashMap};

use tantivy::collector::TopDocs;
use tantivy::query::{PhraseQuery, TermQuery};
use tantivy::query_grammar::{Occur, UserInputAst, UserInputLeaf};
use tantivy::schema::IndexRecordOption;
use tantivy::{Index, Searcher as TSearcher, Term};

use super::catalog::{key, Catalog};
use super::{Fields, Result, SearchError};

/// Tokens in a k-gram, the window of k-grams a cut is chosen in, the tokens before a
/// fragment its document repeats (measured: docs/BENCHMARKS.md, "Search").
pub const K: usize = 5;
pub const W: usize = 200;
pub const OVERLAP: usize = 8;
/// The most fragment matches one word's lookup scores (the rest still match, unscored).
const MAX_SCORED: usize = 200_000;

/// The fragments of `text` (tokenized by `analyzer`, the body field's): each one's bytes
/// of the text, its own tokens preceded by up to `OVERLAP` tokens before them. A text of
/// fewer than `K + W` tokens is one fragment.
pub fn cut(text: &str, analyzer: &mut tantivy::tokenizer::TextAnalyzer) -> (Vec<(usize, usize)>, usize) {
    let mut toks: Vec<(usize, usize, u64)> = Vec::new();
    let mut stream = analyzer.token_stream(text);
    while stream.advance() {
        let t = stream.token();
        toks.push((t.offset_from, t.offset_to, hash(t.text.as_bytes())));
    }
    let n = toks.len();
    if n == 0 {
        return (Vec::new(), 0);
    }
    let mut cuts = vec![0usize];
    if n > K + W {
        let grams: Vec<u64> = (0..=n - K).map(|i| toks[i..i + K].iter().fold(0u64, |h, t| h.rotate_left(5) ^ t.2).wrapping_mul(0x9E37_79B9_7F4A_7C15)).collect();
        let mut last = 0usize;
        for s in 0..=grams.len() - W {
            let (mut at, mut min) = (s, u64::MAX);
            for (i, &g) in grams[s..s + W].iter().enumerate() {
                if g <= min {
                    min = g;
                    at = s + i;
                }
            }
            if at > last {
                cuts.push(at);
                last = at;
            }
        }
    }
    let mut out = Vec::with_capacity(cuts.len());
    for (i, &a) in cuts.iter().enumerate() {
        let e = cuts.get(i + 1).copied().unwrap_or(n);
        let from = toks[a.saturating_sub(OVERLAP)].0;
        out.push((from, toks[e - 1].1));
    }
    (out, n)
}

/// FNV-1a of a token: fixed, so that the cuts fall where they fell when the index was made
/// whatever the build (std's hasher may change between Rust releases).
fn hash(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &c| (h ^ c as u64).wrapping_mul(0x0100_0000_01b3))
}

/// What a query's leaf is, per field: the fields it is looked up in, and its terms with
/// their positions (one: a word).
struct Leaf {
    fields: Vec<tantivy::schema::Field>,
    terms: Vec<(usize, String)>,
}

/// The texts `q` matches, with their scores.
pub(crate) fn matching(index: &Index, searcher: &TSearcher, cat: &Catalog, fields: Fields, q: &str) -> Result<HashMap<u64, f32>> {
    let ast = tantivy::query_grammar::parse_query(q).map_err(|_| SearchError::Query(format!("{q}: does not parse")))?;
    let mut scores: HashMap<u64, f32> = HashMap::new();
    let set = eval(index, searcher, cat, fields, &ast, &mut scores)?;
    Ok(set.into_iter().map(|t| (t, scores.get(&t).copied().unwrap_or(0.0))).collect())
}

fn eval(index: &Index, searcher: &TSearcher, cat: &Catalog, fields: Fields, ast: &UserInputAst, scores: &mut HashMap<u64, f32>) -> Result<BTreeSet<u64>> {
    match ast {
        UserInputAst::Boost(sub, _) => eval(index, searcher, cat, fields, sub, scores),
        UserInputAst::Leaf(leaf) => match &**leaf {
            UserInputLeaf::Literal(l) if !l.prefix && l.slop == 0 => {
                let fs = match l.field_name.as_deref() {
                    None => vec![fields.title, fields.body],
                    Some("title") => vec![fields.title],
                    Some("body") => vec![fields.body],
                    Some(f) => return Err(SearchError::Query(format!("{f}: no such field (title, body)"))),
                };
                let mut analyzer = index.tokenizer_for_field(fields.body).map_err(|err| SearchError::Text { path: "(tokenizer)".into(), err })?;
                let mut terms = Vec::new();
                let mut stream = analyzer.token_stream(&l.phrase);
                while stream.advance() {
                    terms.push((stream.token().position, stream.token().text.clone()));
                }
                if terms.len() > OVERLAP + 1 {
                    return Err(SearchError::Query(format!("\"{}\": a phrase of at most {} words", l.phrase, OVERLAP + 1)));
                }
                leaf_texts(searcher, cat, fields, &Leaf { fields: fs, terms }, scores)
            }
            _ => Err(SearchError::Query(format!("{leaf:?}: only words, \"phrases\", title: and body: are searched"))),
        },
        UserInputAst::Clause(clauses) => {
            let (mut must, mut should, mut not) = (None::<BTreeSet<u64>>, BTreeSet::new(), BTreeSet::new());
            let mut any_should = false;
            for (occur, sub) in clauses {
                let s = eval(index, searcher, cat, fields, sub, scores)?;
                match occur.unwrap_or(Occur::Must) {
                    Occur::Must => must = Some(match must {
                        None => s,
                        Some(m) => m.intersection(&s).copied().collect(),
                    }),
                    Occur::Should => {
                        any_should = true;
                        should.extend(s);
                    }
                    Occur::MustNot => not.extend(s),
                }
            }
            let base = match must {
                Some(m) => m,
                None if any_should => should,
                None => BTreeSet::new(),
            };
            Ok(base.difference(&not).copied().collect())
        }
    }
}

/// The texts holding `leaf` in one of its fields, their scores added to.
fn leaf_texts(searcher: &TSearcher, cat: &Catalog, fields: Fields, leaf: &Leaf, scores: &mut HashMap<u64, f32>) -> Result<BTreeSet<u64>> {
    let mut out = BTreeSet::new();
    if leaf.terms.is_empty() {
        return Ok(out);
    }
    let terr = |err: tantivy::TantivyError| SearchError::Text { path: "(fragments)".into(), err };
    let (tids, fids) = (super::Ids::new(searcher, "tid"), super::Ids::new(searcher, "fid"));
    for &field in &leaf.fields {
        let terms: Vec<(usize, Term)> = leaf.terms.iter().map(|(p, t)| (*p, Term::from_field_text(field, t))).collect();
        let query: Box<dyn tantivy::query::Query> = if terms.len() == 1 { Box::new(TermQuery::new(terms[0].1.clone(), IndexRecordOption::WithFreqs)) } else { Box::new(PhraseQuery::new_with_offset(terms)) };
        let docs = searcher.search(&*query, &tantivy::collector::DocSetCollector).map_err(terr)?;
        let scored: HashMap<tantivy::DocAddress, f32> = if docs.len() <= MAX_SCORED { searcher.search(&*query, &TopDocs::with_limit(docs.len().max(1)).order_by_score()).map_err(terr)?.into_iter().map(|(s, d)| (d, s)).collect() } else { HashMap::new() };
        for addr in docs {
            let score = scored.get(&addr).copied().unwrap_or(0.0);
            if field == fields.title {
                if let Some(tid) = tids.of(addr) {
                    out.insert(tid);
                    *scores.entry(tid).or_default() += score;
                }
                continue;
            }
            let Some(fid) = fids.of(addr) else { continue };
            let prefix = key(b'R', &[&fid.to_be_bytes()]);
            cat.scan(&prefix, &mut |k, _| {
                if let Some(tid) = k.get(9..17).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes) {
                    out.insert(tid);
                    *scores.entry(tid).or_default() += score;
                }
                Ok(true)
            })?;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn analyzer() -> tantivy::tokenizer::TextAnalyzer {
        tantivy::tokenizer::TextAnalyzer::builder(tantivy::tokenizer::SimpleTokenizer::default()).filter(tantivy::tokenizer::RemoveLongFilter::limit(40)).filter(tantivy::tokenizer::LowerCaser).build()
    }

    /// Words that differ from text to text (no repeats), as a page's are.
    fn words(from: usize, n: usize) -> Vec<String> {
        (from..from + n).map(|i| format!("w{:x}", (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40)).collect()
    }

    #[test]
    fn a_short_text_is_one_fragment_and_cuts_are_stable() {
        let mut a = analyzer();
        let short = words(0, K + W).join(" ");
        assert_eq!(cut(&short, &mut a).0, vec![(0, short.len())]);
        let long = words(0, 5_000).join(" ");
        let (c1, n) = cut(&long, &mut a);
        assert_eq!(n, 5_000);
        assert!(c1.len() > 10 && c1.len() < 200, "{} fragments", c1.len());
        assert_eq!(c1, cut(&long, &mut a).0, "the same cuts every time");
        // Each fragment ends where the next one's own tokens begin (after its overlap).
        assert_eq!(c1.last().unwrap().1, long.len());
    }

    /// A text edited in one place shares every fragment but those around the edit, and a
    /// phrase of OVERLAP + 1 words over a cut lies whole in a fragment.
    #[test]
    fn an_edit_changes_the_fragments_around_it_only() {
        let mut a = analyzer();
        let mut w = words(0, 5_000);
        let before = w.join(" ");
        w[2_500] = "edited".into();
        let after = w.join(" ");
        let frags = |t: &str, a: &mut tantivy::tokenizer::TextAnalyzer| cut(t, a).0.into_iter().map(|(x, y)| t[x..y].to_string()).collect::<Vec<_>>();
        let (f1, f2) = (frags(&before, &mut a), frags(&after, &mut a));
        let shared = f2.iter().filter(|f| f1.contains(f)).count();
        assert!(shared + 3 >= f2.len(), "{shared} of {} fragments shared", f2.len());
        let all = before.split(' ').collect::<Vec<_>>();
        for (x, _) in cut(&before, &mut a).0.into_iter().skip(1) {
            // The fragment starting at x begins OVERLAP tokens before its own first token.
            let start = before[..x].split(' ').filter(|s| !s.is_empty()).count();
            let phrase = all[start..start + OVERLAP + 1].join(" ");
            assert!(f1.iter().any(|f| f.contains(&phrase)), "{phrase}");
        }
    }
}
