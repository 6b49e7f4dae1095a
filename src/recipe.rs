//! File recipes: how a file's exact bytes are rebuilt from chunks.
//!
//! A file is a sequence of segments. A `Data` segment is bytes that appear verbatim: slices of
//! chunks. A `Member` segment is one gzip member: its header bytes kept verbatim, its plain
//! text as slices of chunks, the recorded deflate parse that turns that plain text back into
//! the member's exact compressed bytes (`format::deflate`: a member-specific prefix kept here,
//! and, for larger members, a tail stored as a chunk that dedups with the payload), its
//! trailer when it is not the one the plain text implies, and a CRC-32 of the member's
//! original compressed bytes, against which every rebuild is checked before it is served.
//!
//! Recipes are stored in pieces of a bounded number of extents, so a read at offset N loads
//! one piece (found by binary search over the pieces' start offsets), not the whole recipe.
//! Each piece names its chunks once in a key table and extents refer to them by position,
//! because header slices of one literal block recur many times in a row.

use serde::{Deserialize, Serialize};

use crate::digest::ChunkKey;

/// The most plain text a member segment holds: ingest keeps a member with more raw (a read
/// inside it would rebuild it from its start), so a piece that says more is damaged.
pub const MAX_MEMBER_TEXT: u64 = 64 << 20;

/// A slice of one chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extent {
    /// Position of the chunk in the piece's key table.
    pub chunk: u32,
    pub offset: u32,
    pub len: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Segment {
    Data { extents: Vec<Extent> },
    Member {
        #[serde(with = "serde_bytes")]
        header: Vec<u8>,
        plain: Vec<Extent>,
        /// The member-specific part of its deflate parse (`format::deflate::Stored::prefix`).
        #[serde(with = "serde_bytes")]
        parse: Vec<u8>,
        /// Position in the piece's key table of the chunk holding the parse's tail, if any.
        parse_tail: Option<u32>,
        /// The stored trailer, only when it differs from CRC32/ISIZE of the plain text.
        trailer: Option<[u8; 8]>,
        /// The member's whole compressed length (header + deflate + trailer).
        comp_len: u64,
        /// CRC-32 of the member's original compressed bytes (header + deflate + trailer).
        crc: u32,
    },
}

impl Segment {
    pub fn len(&self) -> u64 {
        match self {
            Segment::Data { extents } => extents.iter().map(|e| e.len as u64).sum(),
            Segment::Member { comp_len, .. } => *comp_len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes a member keeps in the recipe itself (its gzip header and parse prefix).
    pub fn inline_bytes(&self) -> usize {
        match self {
            Segment::Data { .. } => 0,
            Segment::Member { header, parse, .. } => header.len() + parse.len(),
        }
    }

    pub fn extent_count(&self) -> usize {
        match self {
            Segment::Data { extents } => extents.len(),
            Segment::Member { plain, parse_tail, .. } => plain.len() + 1 + parse_tail.is_some() as usize,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Piece {
    pub keys: Vec<ChunkKey>,
    pub segments: Vec<Segment>,
}

impl Piece {
    pub fn encode(&self) -> Vec<u8> {
        postcard::to_allocvec(self).expect("in-memory serialisation cannot fail")
    }

    /// Decodes a stored piece. A piece that `fits` refuses is refused here, so that readers
    /// can index the key table, size buffers from extents and add lengths up without
    /// checking each time.
    pub fn decode(b: &[u8]) -> Result<Piece, postcard::Error> {
        let p: Piece = postcard::from_bytes(b)?;
        if p.fits() {
            Ok(p)
        } else {
            Err(postcard::Error::DeserializeBadEncoding)
        }
    }

    /// Whether every extent names a chunk of the key table and lies within the largest
    /// chunk there can be, every member's text is at most `MAX_MEMBER_TEXT`, and the
    /// segments' lengths add up without overflow.
    fn fits(&self) -> bool {
        let extent_fits = |e: &Extent| (e.chunk as usize) < self.keys.len() && e.offset.checked_add(e.len).is_some_and(|end| end <= crate::pack::MAX_RAW);
        let mut total = 0u64;
        self.segments.iter().all(|s| {
            let fits = match s {
                Segment::Data { extents } => extents.iter().all(extent_fits),
                Segment::Member { plain, parse_tail, .. } => {
                    plain.iter().all(extent_fits) && plain.iter().map(|e| e.len as u64).sum::<u64>() <= MAX_MEMBER_TEXT && parse_tail.is_none_or(|t| (t as usize) < self.keys.len())
                }
            };
            fits && total.checked_add(s.len()).map(|t| total = t).is_some()
        })
    }

    pub fn len(&self) -> u64 {
        self.segments.iter().map(Segment::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.segments.iter().all(Segment::is_empty)
    }
}

/// What a file's inode records about its recipe.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecipeHead {
    pub id: u64,
    pub size: u64,
    /// Logical start offset of each piece; piece i covers [starts[i], starts[i+1]).
    pub piece_starts: Vec<u64>,
}

impl RecipeHead {
    pub fn pieces(&self) -> u32 {
        self.piece_starts.len() as u32
    }

    /// The piece holding byte `offset`.
    pub fn piece_at(&self, offset: u64) -> Option<u32> {
        if offset >= self.size || self.piece_starts.is_empty() {
            return None;
        }
        // (None, not a wrapped index, if the first piece does not start at 0: damage.)
        Some(self.piece_starts.partition_point(|&s| s <= offset).checked_sub(1)? as u32)
    }
}

/// What ingest learned about a file; kept in its inode and summed by `stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileStats {
    pub records: u64,
    pub payloads: u64,
    pub payload_bytes: u64,
    pub gzip_members: u64,
    pub gzip_members_raw: u64,
    /// Bytes of the members' deflate parses (prefix and tail, before dedup and compression).
    pub parse_bytes: u64,
}

impl std::ops::AddAssign for FileStats {
    fn add_assign(&mut self, o: FileStats) {
        self.records += o.records;
        self.payloads += o.payloads;
        self.payload_bytes += o.payload_bytes;
        self.gzip_members += o.gzip_members;
        self.gzip_members_raw += o.gzip_members_raw;
        self.parse_bytes += o.parse_bytes;
    }
}

/// Upper bound of extents per piece: about 100 KiB encoded.
pub const PIECE_EXTENTS: usize = 2048;
/// Upper bound of the bytes members keep inline in a piece (headers and parse prefixes), so
/// that a lookup loads a piece of about the same size whatever the members hold.
pub const PIECE_INLINE_BYTES: usize = 128 << 10;

/// What a member segment holds besides its plain text, as ingest hands it over.
pub struct MemberParts {
    pub header: Vec<u8>,
    pub parse: Vec<u8>,
    pub parse_tail: Option<ChunkKey>,
    pub trailer: Option<[u8; 8]>,
    pub comp_len: u64,
    pub crc: u32,
}

/// A slice of a chunk: (chunk, offset in the chunk, length).
pub type Slice = (ChunkKey, u32, u32);

/// Builds recipe pieces from segments as ingest produces them.
#[derive(Default)]
pub struct RecipeBuilder {
    pub pieces: Vec<Piece>,
    keys: std::collections::HashMap<ChunkKey, u32, crate::digest::DigestState>,
    cur: Piece,
    cur_extents: usize,
    cur_inline: usize,
    size: u64,
    starts: Vec<u64>,
}

impl RecipeBuilder {
    pub fn new() -> RecipeBuilder {
        RecipeBuilder::default()
    }

    /// The table position of `key` in the current piece.
    fn key_index(&mut self, key: ChunkKey) -> u32 {
        let cur = &mut self.cur;
        *self.keys.entry(key).or_insert_with(|| {
            cur.keys.push(key);
            (cur.keys.len() - 1) as u32
        })
    }

    fn maybe_cut(&mut self, adding: usize, inline: usize) {
        if !self.cur.segments.is_empty() && (self.cur_extents + adding > PIECE_EXTENTS || self.cur_inline + inline > PIECE_INLINE_BYTES) {
            self.finish_piece();
        }
    }

    fn finish_piece(&mut self) {
        if self.cur.segments.is_empty() {
            return;
        }
        let piece = std::mem::take(&mut self.cur);
        self.starts.push(self.size);
        self.size += piece.len();
        self.pieces.push(piece);
        self.keys.clear();
        self.cur_extents = 0;
        self.cur_inline = 0;
    }

    /// Ends the current piece here: what follows starts a piece of its own. A ZIP entry's
    /// bytes so make the same pieces as the same bytes stored as a file, which share their
    /// chunks (a piece is stored under the digest of its bytes, and holds no file offset).
    pub fn cut(&mut self) {
        self.finish_piece();
    }

    /// Appends verbatim bytes given as (chunk, offset, len) slices; splits long runs across
    /// pieces and merges with a preceding Data segment.
    pub fn push_data(&mut self, slices: &[Slice]) {
        for &(key, offset, len) in slices {
            if len == 0 {
                continue;
            }
            self.maybe_cut(1, 0);
            let chunk = self.key_index(key);
            let ext = Extent { chunk, offset, len };
            match self.cur.segments.last_mut() {
                Some(Segment::Data { extents }) => {
                    // Contiguous slices of one chunk become one extent.
                    match extents.last_mut() {
                        Some(last) if last.chunk == chunk && last.offset + last.len == offset => last.len += len,
                        _ => extents.push(ext),
                    }
                }
                _ => self.cur.segments.push(Segment::Data { extents: vec![ext] }),
            }
            self.cur_extents += 1;
        }
    }

    pub fn push_member(&mut self, m: MemberParts, plain: &[Slice]) {
        let inline = m.header.len() + m.parse.len();
        self.maybe_cut(plain.len() + 2, inline);
        self.cur_inline += inline;
        let mut exts: Vec<Extent> = Vec::with_capacity(plain.len());
        for &(key, offset, len) in plain {
            if len == 0 {
                continue;
            }
            let chunk = self.key_index(key);
            match exts.last_mut() {
                Some(last) if last.chunk == chunk && last.offset + last.len == offset => last.len += len,
                _ => exts.push(Extent { chunk, offset, len }),
            }
        }
        let parse_tail = m.parse_tail.map(|k| self.key_index(k));
        self.cur_extents += exts.len() + 1 + parse_tail.is_some() as usize;
        let MemberParts { header, parse, trailer, comp_len, crc, .. } = m;
        self.cur.segments.push(Segment::Member { header, plain: exts, parse, parse_tail, trailer, comp_len, crc });
    }

    /// Returns the pieces and their start offsets; `size` is their total length.
    pub fn finish(mut self) -> (Vec<Piece>, Vec<u64>, u64) {
        self.finish_piece();
        (self.pieces, self.starts, self.size)
    }
}

/// Reference count changes of one commit, by `references`' rule.
#[derive(Default)]
pub struct RefDelta(pub std::collections::HashMap<ChunkKey, i64>);

impl RefDelta {
    pub fn add(&mut self, keys: impl IntoIterator<Item = ChunkKey>, by: i64) {
        for k in keys {
            *self.0.entry(k).or_default() += by;
        }
    }
}

/// Every distinct chunk a set of pieces references (each counts once per file).
/// The references a recipe holds, the refcount rule of the store: each piece's chunk once
/// per piece (`piece_keys`, repeats included), and each distinct data chunk of its pieces
/// once. Commits, fsck, gc and `repair index` all count by it.
pub fn references(pieces: &[Piece], piece_keys: &[ChunkKey]) -> Vec<ChunkKey> {
    piece_keys.iter().copied().chain(distinct_keys(pieces)).collect()
}

pub fn distinct_keys<'a>(pieces: impl IntoIterator<Item = &'a Piece>) -> std::collections::BTreeSet<ChunkKey> {
    let mut set = std::collections::BTreeSet::new();
    for p in pieces {
        set.extend(p.keys.iter().copied());
    }
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(n: u8) -> ChunkKey {
        ChunkKey { digest: [n; 32], seq: 0 }
    }

    #[test]
    fn a_piece_that_could_size_a_buffer_beyond_any_chunk_is_refused() {
        let member = |plain: Vec<Extent>, comp_len: u64| Segment::Member { header: vec![], plain, parse: vec![], parse_tail: None, trailer: None, comp_len, crc: 0 };
        let e = |len: u32| Extent { chunk: 0, offset: 0, len };
        let piece = |segments: Vec<Segment>| Piece { keys: vec![k(1)], segments }.encode();
        assert!(Piece::decode(&piece(vec![Segment::Data { extents: vec![e(10)] }, member(vec![e(1 << 20); 64], 100)])).is_ok());
        // An extent longer than any chunk, or one past a chunk's end.
        assert!(Piece::decode(&piece(vec![Segment::Data { extents: vec![e(u32::MAX)] }])).is_err());
        assert!(Piece::decode(&piece(vec![Segment::Data { extents: vec![Extent { chunk: 0, offset: u32::MAX - 1, len: 2 }] }])).is_err());
        // A member with more text than ingest keeps in one, and lengths that overflow.
        assert!(Piece::decode(&piece(vec![member(vec![e(1 << 20); 65], 100)])).is_err());
        assert!(Piece::decode(&piece(vec![Segment::Data { extents: vec![e(10)] }, member(vec![], u64::MAX - 5)])).is_err());
        // A key table index out of range, as before.
        assert!(Piece::decode(&piece(vec![Segment::Data { extents: vec![Extent { chunk: 1, offset: 0, len: 1 }] }])).is_err());
        // A head whose first piece does not start at 0 places no offset.
        assert_eq!(RecipeHead { id: 1, size: 10, piece_starts: vec![5] }.piece_at(2), None);
    }

    #[test]
    fn builder_merges_contiguous_slices_and_cuts_pieces() {
        let mut b = RecipeBuilder::new();
        b.push_data(&[(k(1), 0, 10), (k(1), 10, 5), (k(2), 0, 100)]);
        let (pieces, starts, size) = b.finish();
        assert_eq!(size, 115);
        assert_eq!(starts, vec![0]);
        assert_eq!(pieces[0].segments, vec![Segment::Data { extents: vec![Extent { chunk: 0, offset: 0, len: 15 }, Extent { chunk: 1, offset: 0, len: 100 }] }]);

        let mut b = RecipeBuilder::new();
        for i in 0..(PIECE_EXTENTS * 2 + 3) {
            b.push_data(&[(k((i % 200) as u8), 0, 1)]);
        }
        let (pieces, starts, size) = b.finish();
        assert_eq!(pieces.len(), 3);
        assert_eq!(size as usize, PIECE_EXTENTS * 2 + 3);
        assert_eq!(starts, vec![0, PIECE_EXTENTS as u64, 2 * PIECE_EXTENTS as u64]);
        let head = RecipeHead { id: 1, size, piece_starts: starts };
        assert_eq!(head.piece_at(0), Some(0));
        assert_eq!(head.piece_at(PIECE_EXTENTS as u64), Some(1));
        assert_eq!(head.piece_at(size - 1), Some(2));
        assert_eq!(head.piece_at(size), None);
        let p = &pieces[1];
        assert_eq!(Piece::decode(&p.encode()).unwrap(), *p);
    }

    #[test]
    fn a_piece_naming_chunks_it_does_not_list_is_refused() {
        let extent = |chunk| Extent { chunk, offset: 0, len: 1 };
        let good = Piece { keys: vec![k(1), k(2)], segments: vec![Segment::Data { extents: vec![extent(0), extent(1)] }] };
        assert_eq!(Piece::decode(&good.encode()).unwrap(), good);
        let bad = Piece { keys: vec![k(1)], segments: vec![Segment::Data { extents: vec![extent(0), extent(1)] }] };
        assert!(Piece::decode(&bad.encode()).is_err());
    }

    /// A member's header and parse prefix are read as byte strings (`serde_bytes`), which in
    /// postcard are the same bytes as the byte sequences pieces were written as before: the
    /// pieces of every earlier store read as they are, and an unchanged file's pieces keep
    /// their keys (a piece is stored under the digest of its bytes).
    #[test]
    fn byte_fields_are_the_same_bytes_as_before() {
        #[derive(Serialize, Deserialize, PartialEq, Debug)]
        enum OldSegment {
            Data { extents: Vec<Extent> },
            Member { header: Vec<u8>, plain: Vec<Extent>, parse: Vec<u8>, parse_tail: Option<u32>, trailer: Option<[u8; 8]>, comp_len: u64, crc: u32 },
        }
        #[derive(Serialize, Deserialize, PartialEq, Debug)]
        struct OldPiece {
            keys: Vec<ChunkKey>,
            segments: Vec<OldSegment>,
        }
        let extent = |chunk, len| Extent { chunk, offset: 7, len };
        let (header, parse): (Vec<u8>, Vec<u8>) = ((0..10).collect(), (0..=255).cycle().take(700).collect());
        let new = Piece {
            keys: vec![k(1), k(2)],
            segments: vec![
                Segment::Data { extents: vec![extent(0, 3)] },
                Segment::Member { header: header.clone(), plain: vec![extent(1, 900)], parse: parse.clone(), parse_tail: Some(0), trailer: Some([9; 8]), comp_len: 1234, crc: 0xdead_beef },
                Segment::Member { header: vec![], plain: vec![], parse: vec![], parse_tail: None, trailer: None, comp_len: 20, crc: 1 },
            ],
        };
        let old = OldPiece {
            keys: vec![k(1), k(2)],
            segments: vec![
                OldSegment::Data { extents: vec![extent(0, 3)] },
                OldSegment::Member { header, plain: vec![extent(1, 900)], parse, parse_tail: Some(0), trailer: Some([9; 8]), comp_len: 1234, crc: 0xdead_beef },
                OldSegment::Member { header: vec![], plain: vec![], parse: vec![], parse_tail: None, trailer: None, comp_len: 20, crc: 1 },
            ],
        };
        let old_bytes = postcard::to_allocvec(&old).unwrap();
        assert_eq!(new.encode(), old_bytes);
        assert_eq!(Piece::decode(&old_bytes).unwrap(), new);
    }
}
