//! A text's and a fragment's documents, and their ids: numbered as they are met, an identity
//! (16 bytes of SHA-256) found again by its `S` or `H` row.

use tantivy::{TantivyDocument, Term};

use super::{sha, Round, Unit};
use crate::index::id_of;
use crate::search::catalog::{ids_bytes, ids_of, key, sha_of, Sha};
use crate::search::extract::Text;
use crate::search::{Result, SearchError};

impl Round<'_> {
    /// The id of the text whose SHA-256 is `tsha`: the one it has, else the next.
    pub(super) fn text_id(&mut self, tsha: &[u8; 32]) -> Result<u64> {
        if let Some(&t) = self.by_sha.get(tsha) {
            return Ok(t);
        }
        let tid = match self.cat.live_tid(&key(b'S', &[&sha_of(tsha)]))? {
            Some(t) => t,
            None => self.new_tid(),
        };
        self.by_sha.insert(*tsha, tid);
        Ok(tid)
    }

    pub(super) fn new_tid(&mut self) -> u64 {
        self.ids.next_tid += 1;
        self.ids.next_tid - 1
    }

    /// A new text: one document (its title, and its body unless it is cut into fragments,
    /// `add_fragments`). (A text added by a killed update whose rows did not commit: one
    /// document still, deleted by its id first.)
    pub(super) fn add_document(&mut self, tid: u64, tsha: Sha, text: &Text) -> Result<()> {
        let mut doc = TantivyDocument::default();
        doc.add_u64(self.fields.tid, tid);
        doc.add_text(self.fields.title, &text.title);
        if self.unit != Unit::Fragments {
            doc.add_text(self.fields.body, &text.body);
        }
        self.writer.delete_term(Term::from_field_u64(self.fields.tid, tid));
        self.writer.add_document(doc).map_err(|err| SearchError::Text { path: "(add)".into(), err })?;
        self.done.documents_added += 1;
        if self.unit == Unit::Fragments {
            self.add_fragments(tid, text)?;
        }
        self.new_texts.insert(tid, tsha);
        Ok(())
    }

    /// A new text's fragments: each one not indexed yet a document, and its list of
    /// fragments (`V`), each fragment's texts (`R`).
    fn add_fragments(&mut self, tid: u64, text: &Text) -> Result<()> {
        let analyzer = self.analyzer.as_mut().expect("an analyzer for fragments");
        let (cuts, tokens) = crate::search::fragments::cut(&text.body, analyzer);
        let mut fids: Vec<u64> = Vec::with_capacity(cuts.len());
        for (a, e) in cuts {
            let body = &text.body[a..e];
            let (fid, fresh) = self.fragment_id(&sha(body.as_bytes()))?;
            if fids.contains(&fid) {
                continue;
            }
            fids.push(fid);
            if fresh {
                let mut doc = TantivyDocument::default();
                doc.add_u64(self.fields.fid, fid);
                doc.add_text(self.fields.body, body);
                self.writer.delete_term(Term::from_field_u64(self.fields.fid, fid));
                self.writer.add_document(doc).map_err(|err| SearchError::Text { path: "(add)".into(), err })?;
                self.done.documents_added += 1;
            }
            *self.frag_refs.entry(fid).or_default() += 1;
            self.batch.put(key(b'R', &[&fid.to_be_bytes(), &tid.to_be_bytes()]), []);
        }
        let mut v = (tokens as u32).to_be_bytes().to_vec();
        ids_bytes(&fids, &mut v);
        self.batch.put(key(b'V', &[&tid.to_be_bytes()]), v);
        self.text_frags.insert(tid, fids);
        Ok(())
    }

    /// The id of the fragment whose SHA-256 is `fsha`: the one it has (its `H` row's, if that
    /// fragment is held: a `Q` row), else the next; and whether it is new (given now).
    pub(super) fn fragment_id(&mut self, fsha: &[u8; 32]) -> Result<(u64, bool)> {
        if let Some(&f) = self.frag_by_sha.get(fsha) {
            return Ok((f, false));
        }
        let sha = sha_of(fsha);
        let had = self.cat.get(&key(b'H', &[&sha]))?.as_deref().and_then(id_of);
        let held = match had {
            Some(f) => self.cat.get(&key(b'Q', &[&f.to_be_bytes()]))?.is_some(),
            None => false,
        };
        let fid = match had {
            Some(f) if held => f,
            _ => {
                self.ids.next_fid += 1;
                self.new_frags.insert(self.ids.next_fid - 1, sha);
                self.ids.next_fid - 1
            }
        };
        self.frag_by_sha.insert(*fsha, fid);
        Ok((fid, !held))
    }

    /// The fragments of text `tid`: this round's, else its `V` row's.
    pub(super) fn fragments_of(&self, tid: u64) -> Result<Vec<u64>> {
        if let Some(f) = self.text_frags.get(&tid) {
            return Ok(f.clone());
        }
        let v = self.cat.get(&key(b'V', &[&tid.to_be_bytes()]))?.unwrap_or_default();
        Ok(ids_of(v.get(4..).unwrap_or_default()))
    }
}
