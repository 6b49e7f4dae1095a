//! Records in gzip members the store keeps as their compressed bytes: a member cut short (a
//! crawl killed mid-write), a corrupt one, one of more text than a member stored as text may
//! hold (`MAX_MEMBER_TEXT`: a long video), or one whose deflate does not replay. The store
//! never parsed their text, so the index inflates them here to find their records, as
//! cdxj-indexer does when it reads the file. Only such raw runs are read, and each member's
//! text is kept only as far as its headers go.

use std::cell::Cell;

use flate2::{Decompress, FlushDecompress, Status};
use sha1::Digest as _;

use crate::store::read::records::{content_length, split_heads, BlockAt, RecordHead, BLOCK_HEAD};
use crate::store::{Result, Store};
use crate::format::gzip;
use crate::recipe::RecipeHead;

/// How much of a raw member's text is kept for its record's headers: its WARC header and
/// HTTP header must end within it, as they do in any real WARC. The rest is inflated only
/// to find where the member ends.
const HEAD_TEXT: usize = 256 << 10;

/// Compressed bytes read at a time: the first read of a member (enough for any real gzip
/// header), doubling to `READ` for a long one, so that a run of small members is not read
/// many times over.
const FIRST_READ: usize = 4 << 10;
const READ: usize = 1 << 20;

/// What a search of a raw run may read, in bytes: this many times the run, and a floor. A
/// corrupt member sends the search on from its next byte, so crafted bytes (gzip headers
/// every few bytes, members nested in stored blocks) could otherwise make it read the run
/// over and over; real runs take one to two times their length.
const BUDGET_TIMES: u64 = 8;
const BUDGET_FLOOR: u64 = 8 << 20;

/// Bytes a search may still read. Each read counts at least a page: most of a small read's
/// cost is finding its chunk.
struct Budget(Cell<u64>);

impl Budget {
    fn unlimited() -> Budget {
        Budget(Cell::new(u64::MAX))
    }

    fn take(&self, bytes: usize) -> bool {
        let cost = bytes.max(4096) as u64;
        let left = self.0.get();
        self.0.set(left.saturating_sub(cost));
        left >= cost
    }

    fn spent(&self) -> bool {
        self.0.get() < 4096
    }
}

/// How inflating a member kept raw ended.
#[derive(Debug, PartialEq, Eq)]
enum MemberEnd {
    /// Its deflate stream and trailer ended within the run: its compressed length. (The
    /// trailer is not checked: a lying ISIZE or CRC still ends the member where it ends.)
    Ended(u64),
    /// The run ended first.
    Cut,
    /// Its deflate stream is invalid.
    Corrupt,
    /// The caller had what it wanted.
    Stopped,
}

impl Store {
    /// `read_at` (which fills `buf` as far as the file goes), counted against `budget`:
    /// nothing once that is spent, as if the run ended there.
    fn read_full(&self, head: &RecipeHead, at: u64, buf: &mut [u8], budget: &Budget) -> Result<usize> {
        if !budget.take(buf.len()) {
            return Ok(0);
        }
        self.read_at(head, at, buf)
    }

    /// Inflates the gzip member at file offset `at`, reading no further than `end`, and hands
    /// its text to `text` piece by piece until that returns false. None: no gzip header here.
    fn inflate_raw_member(&self, head: &RecipeHead, at: u64, end: u64, budget: &Budget, text: &mut dyn FnMut(&[u8]) -> bool) -> Result<Option<MemberEnd>> {
        let room = |from: u64, most: usize| most.min(usize::try_from(end - from).unwrap_or(usize::MAX));
        let mut input = vec![0u8; room(at, FIRST_READ)];
        let mut filled = self.read_full(head, at, &mut input, budget)?;
        let mut header = gzip::header_len(&input[..filled]);
        if header.is_none() && filled == FIRST_READ {
            // A long FEXTRA, name or comment: one more look, at the most a read takes.
            input.resize(room(at, READ), 0);
            filled += self.read_full(head, at + filled as u64, &mut input[filled..], budget)?;
            header = gzip::header_len(&input[..filled]);
        }
        let Some(header_len) = header else { return Ok(None) };
        let (mut next, mut used) = (at + filled as u64, header_len);
        let mut inflater = Decompress::new(false);
        let mut out = vec![0u8; 64 << 10];
        loop {
            if used == filled {
                let want = room(next, (input.len() * 2).min(READ));
                input.resize(want.max(input.len()), 0);
                filled = self.read_full(head, next, &mut input[..want], budget)?;
                if filled == 0 {
                    return Ok(Some(MemberEnd::Cut));
                }
                next += filled as u64;
                used = 0;
            }
            let (was_in, was_out) = (inflater.total_in(), inflater.total_out());
            let status = inflater.decompress(&input[used..filled], &mut out, FlushDecompress::None);
            let (took, made) = ((inflater.total_in() - was_in) as usize, (inflater.total_out() - was_out) as usize);
            used += took;
            // The text before an invalid block is handed on too: a record's headers are
            // usually there.
            if made > 0 && !text(&out[..made]) {
                return Ok(Some(MemberEnd::Stopped));
            }
            let Ok(status) = status else { return Ok(Some(MemberEnd::Corrupt)) };
            if status == Status::StreamEnd {
                let len = header_len as u64 + inflater.total_in() + 8;
                return Ok(Some(if len <= end - at { MemberEnd::Ended(len) } else { MemberEnd::Cut }));
            }
            if took == 0 && made == 0 {
                // Input left and room for output, yet no progress: not a stream zlib takes.
                return Ok(Some(MemberEnd::Corrupt));
            }
        }
    }

    /// Whether `1f 8b 08` is at `at`, before `end`.
    fn member_magic_at(&self, head: &RecipeHead, at: u64, end: u64, budget: &Budget) -> Result<bool> {
        let mut magic = [0u8; 3];
        Ok(end.saturating_sub(at) >= 3 && self.read_full(head, at, &mut magic, budget)? == 3 && gzip::looks_gzip(&magic))
    }

    /// The first offset in `from..end` where a gzip member may start (`1f 8b 08`), or `end`.
    fn next_member_start(&self, head: &RecipeHead, from: u64, end: u64, budget: &Budget) -> Result<u64> {
        // Most often one starts right here: the run's start, or the end of the member before.
        if self.member_magic_at(head, from, end, budget)? {
            return Ok(from);
        }
        let mut buf = Vec::new();
        let mut at = from;
        while at < end {
            // Small reads first (the next member is usually near), larger ones over garbage.
            let want = (buf.len() * 2).clamp(FIRST_READ, READ).min(usize::try_from(end - at).unwrap_or(usize::MAX));
            buf.resize(want.max(buf.len()), 0);
            let n = self.read_full(head, at, &mut buf[..want], budget)?;
            if n == 0 {
                break;
            }
            if let Some(i) = buf[..n].windows(3).position(gzip::looks_gzip) {
                return Ok(at + i as u64);
            }
            // The last two bytes may start a magic the next read completes.
            at += n.saturating_sub(2).max(1) as u64;
            if at + 2 >= end {
                break;
            }
        }
        Ok(end)
    }

    /// Whether a file is a gzip file, as ingest decided it (by its first bytes): it is if a
    /// member was stored from its parse (`seen_member`), else if it starts `1f 8b 08`.
    /// Answered once a file (`known`).
    pub(in crate::store) fn is_gzip_file(&self, head: &RecipeHead, seen_member: bool, known: &mut Option<bool>) -> Result<bool> {
        if let Some(g) = *known {
            return Ok(g);
        }
        let g = seen_member || self.member_magic_at(head, 0, head.size, &Budget::unlimited())?;
        *known = Some(g);
        Ok(g)
    }

    /// The records of a run of raw bytes `[start, end)` of a gzip file, handed to `f` in
    /// order. Each member in the run whose text starts a WARC record gives one record, as a
    /// member stored from its parse does. One that ends cleanly is as long as it is; one cut
    /// short reaches the run's end (as cdxj-indexer counts a member cut by the end of its
    /// file: what follows it in the run is its bytes), a corrupt one the next record found.
    pub(in crate::store) fn raw_run_records(&self, head: &RecipeHead, (start, end): (u64, u64), f: &mut dyn FnMut(RecordHead) -> Result<()>) -> Result<()> {
        let budget = Budget(Cell::new((end - start).saturating_mul(BUDGET_TIMES).saturating_add(BUDGET_FLOOR)));
        let mut pending: Option<RecordHead> = None;
        let mut at = start;
        while at < end {
            at = self.next_member_start(head, at, end, &budget)?;
            if at >= end {
                break;
            }
            let mut text = Vec::new();
            let ended = self.inflate_raw_member(head, at, end, &budget, &mut |t| {
                let room = HEAD_TEXT - text.len();
                text.extend_from_slice(&t[..room.min(t.len())]);
                true
            })?;
            let len = match ended {
                Some(MemberEnd::Ended(len)) => Some(len),
                _ => None,
            };
            let heads = text.starts_with(b"WARC/").then(|| split_heads(&text)).flatten().or_else(|| {
                // A member cut inside its WARC header: its record is what the header got to,
                // as warcio reads it (cdxj-indexer prints a line of the fields it has).
                let cut_in_header = ended == Some(MemberEnd::Cut) && text.starts_with(b"WARC/") && text.len() < HEAD_TEXT && crate::store::read::records::find(&text, b"\r\n\r\n").is_none();
                cut_in_header.then(|| (text.clone(), None, 0))
            });
            if let Some((warc_header, mut http_header, _)) = heads {
                // Only the HTTP header is kept, as a member stored from its parse keeps it: a
                // file's records may all be held at once (`Store::records`).
                if let Some(h) = http_header.as_mut() {
                    if let Some(end) = crate::store::read::records::find(h, b"\r\n\r\n") {
                        h.truncate(end + 4);
                    }
                }
                if let Some(mut cut) = pending.take() {
                    cut.length = at - cut.offset;
                    f(cut)?;
                }
                let record = RecordHead { offset: at, length: len.unwrap_or(end - at), warc_header, http_header, block: BlockAt::RawMember, shift: 0, member_text: 0 };
                match len {
                    Some(_) => f(record)?,
                    None => pending = Some(record),
                }
            }
            at = match ended {
                // Past a member that ended, or to the end: a member cut short took every
                // byte up to it (a `.gz` file its record holds, stored as it is by deflate,
                // is not the archive's).
                Some(MemberEnd::Ended(len)) => at + len,
                Some(MemberEnd::Cut) => end,
                // A corrupt member (or none here): the next may start inside it.
                _ => at + 1,
            };
        }
        if budget.spent() {
            log::warn!("index: recipe {}: stopped looking for records in the raw bytes {start}..{end} after reading {}x of them (a corrupt region); records after it there are left out", head.id, BUDGET_TIMES);
        }
        if let Some(cut) = pending {
            f(cut)?;
        }
        Ok(())
    }

    /// The CDXJ line of a record in a raw member whose headers do not hold what its line
    /// needs: its block inflated again, `BLOCK_HEAD` of it kept, the rest hashed in a
    /// second pass if the line needs its digest.
    pub(in crate::store) fn raw_record_line(&self, head: &RecipeHead, r: &RecordHead, name: &str) -> Result<Option<String>> {
        let hlen = r.warc_header.len() as u64;
        let stated = content_length(&r.warc_header).unwrap_or(0);
        let end = r.offset + r.length;
        // The member's text from `from` (in its block) for at most `len` bytes, to `sink`.
        let block_bytes = |from: u64, len: u64, sink: &mut dyn FnMut(&[u8])| -> Result<()> {
            let (first, last) = (hlen.saturating_add(from), hlen.saturating_add(from).saturating_add(len));
            let mut seen = 0u64;
            self.inflate_raw_member(head, r.offset, end, &Budget::unlimited(), &mut |t| {
                let (s, e) = (seen, seen + t.len() as u64);
                seen = e;
                if e > first && s < last {
                    sink(&t[(first.max(s) - s) as usize..(last.min(e) - s) as usize]);
                }
                e < last
            })?;
            Ok(())
        };
        let mut block_head = Vec::new();
        block_bytes(0, stated.min(BLOCK_HEAD as u64), &mut |t| block_head.extend_from_slice(t))?;
        let whole = (block_head.len() as u64) < BLOCK_HEAD as u64 || stated == block_head.len() as u64;
        crate::store::read::records::line_from_block_head(r, &block_head, name, |from, h| {
            if whole {
                h.update(&block_head[from.min(block_head.len())..]);
                return Ok(());
            }
            block_bytes(from as u64, stated.saturating_sub(from as u64), &mut |t| h.update(t))
        })
    }
}
