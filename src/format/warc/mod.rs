//! WARC 1.0/1.1 (and 0.x) and ARC v1/v2 records: where each record's headers end and its
//! payload begins, over a plain (already gunzipped) byte stream.
//!
//! This module owns the split of a stream into byte ranges: `Header` (WARC header lines,
//! ARC header line, HTTP header, record separators, and payloads too small to index),
//! `Payload` (one HTTP body, or the whole block of a non-HTTP record; the store hashes
//! each as a unit) and `Raw` (bytes that do not parse as a record). The store keeps every
//! byte whatever this returns, so parsing only decides dedup quality: the contract is that
//! spans tile the input exactly, that nothing panics or loops, and that it stays fast.
//! Speed comes from reading headers only and jumping over blocks by their declared length.

pub mod packed;
pub mod revisit;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpanKind {
    Header,
    Payload,
    Raw,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub kind: SpanKind,
    pub start: u64,
    pub len: u64,
}

#[derive(Default, Clone, Debug)]
pub struct Segmentation {
    pub spans: Vec<Span>,
    pub records: u64,
    pub payloads: u64,
}

/// Longest WARC or HTTP header we accept; anything longer is not treated as a header.
const MAX_HEADER: usize = 256 * 1024;
/// Longest ARC header line (URLs can be long, but a line this long is surely not a header).
const MAX_ARC_LINE: usize = 64 * 1024;
/// Payloads shorter than this are kept as header bytes: not worth an index entry.
const MIN_PAYLOAD: usize = 64;

/// Spans cover `plain` exactly, in order, no gaps, no empty spans.
pub fn segment(plain: &[u8]) -> Segmentation {
    segment_window(plain, true, true, &mut false).0
}

/// [`segment`] for one window of a larger stream, segmented a window at a time so that
/// memory stays bounded. `first`: the window starts the stream (otherwise it starts where
/// the previous window's consumed bytes ended: at a record, or at the separator after one).
/// `last`: it ends the stream. Unless `last`, a record that runs past the window's end, or
/// may (a header that does not parse close to the end), is left for the next window. Spans
/// tile `plain[..consumed]`; consumed is 0 only when the window's first record does not fit
/// (the caller reads a larger window). `arc_mode` carries over from window to window.
pub fn segment_window(plain: &[u8], first: bool, last: bool, arc_mode: &mut bool) -> (Segmentation, usize) {
    let mut out = Out::default();
    let n = plain.len();
    let mut pos = 0usize;
    if !first {
        // The end of the previous record's separator.
        pos = skip_separator(plain, 0);
        out.push(SpanKind::Header, 0, pos);
    }
    while pos < n {
        let mark = out.mark();
        let parsed = match parse_warc(plain, pos, &mut out) {
            Some(r) => Some(r),
            // ARC record lines are only trusted once the stream showed an ARC file header:
            // otherwise a stray text line in a damaged WARC could pass for a record.
            None if *arc_mode || plain[pos..].starts_with(b"filedesc:") => {
                parse_arc(plain, pos, &mut out).inspect(|_| *arc_mode = true)
            }
            None => None,
        };
        match parsed {
            Some((end, cut)) => {
                let sep_end = skip_separator(plain, end);
                if !last && cut {
                    // Its block goes on in the next window: so does the record.
                    out.reset(mark);
                    break;
                }
                out.records += 1;
                if !last && sep_end == n {
                    // So may its separator.
                    pos = end;
                    break;
                }
                out.push(SpanKind::Header, end, sep_end);
                pos = sep_end;
            }
            None if !last && n - pos < MAX_HEADER => break,
            None => {
                let mut next = resync(plain, pos, *arc_mode);
                if next == n && !last {
                    // A record may start in the part of a line that is cut off here.
                    if let Some(i) = plain[pos..].iter().rposition(|&b| b == b'\n') {
                        next = pos + i + 1;
                    }
                }
                out.push(SpanKind::Raw, pos, next);
                pos = next;
            }
        }
    }
    let seg = Segmentation {
        spans: out.spans,
        records: out.records,
        payloads: out.payloads,
    };
    (seg, pos)
}

#[derive(Default)]
struct Out {
    spans: Vec<Span>,
    records: u64,
    payloads: u64,
}

/// Where an [`Out`] stood, to take back what a record emitted.
struct Mark {
    spans: usize,
    last_len: u64,
    payloads: u64,
}

impl Out {
    fn mark(&self) -> Mark {
        Mark { spans: self.spans.len(), last_len: self.spans.last().map_or(0, |s| s.len), payloads: self.payloads }
    }

    fn reset(&mut self, m: Mark) {
        self.spans.truncate(m.spans);
        if let Some(last) = self.spans.last_mut() {
            last.len = m.last_len;
        }
        self.payloads = m.payloads;
    }

    /// Appends `start..end`, merging Header/Header and Raw/Raw; Payloads stay separate
    /// because each one is hashed and deduplicated on its own.
    fn push(&mut self, kind: SpanKind, start: usize, end: usize) {
        if end <= start {
            return;
        }
        let len = (end - start) as u64;
        if let Some(last) = self.spans.last_mut() {
            if last.kind == kind && kind != SpanKind::Payload {
                last.len += len;
                return;
            }
        }
        if kind == SpanKind::Payload {
            self.payloads += 1;
        }
        self.spans.push(Span {
            kind,
            start: start as u64,
            len,
        });
    }

    fn payload(&mut self, start: usize, end: usize) {
        if end.saturating_sub(start) < MIN_PAYLOAD {
            self.push(SpanKind::Header, start, end);
        } else {
            self.push(SpanKind::Payload, start, end);
        }
    }
}

/// Parses a WARC record at `pos`, emits its spans and returns where its block ends, and
/// whether the block is cut short by the end of `plain`. Emits nothing when it returns `None`.
fn parse_warc(plain: &[u8], pos: usize, out: &mut Out) -> Option<(usize, bool)> {
    if !plain[pos..].starts_with(b"WARC/") {
        return None;
    }
    let limit = plain.len().min(pos.saturating_add(MAX_HEADER));
    let mut content_length: Option<u64> = None;
    let mut http_type = false;
    let mut http_content_type = false;
    // Skip the version line; the first line is known to start with "WARC/".
    let mut line_start = find_byte(b'\n', &plain[pos..limit])? + pos + 1;
    let header_end = loop {
        let nl = find_byte(b'\n', &plain[line_start..limit])? + line_start;
        let line = trim_cr(&plain[line_start..nl]);
        if line.is_empty() {
            break nl + 1;
        }
        // A second version line means the header never ended; stopping here keeps a run
        // of broken records linear (each scan ends where the next candidate starts).
        if line.starts_with(b"WARC/") {
            return None;
        }
        if let Some((name, value)) = split_field(line) {
            if name.eq_ignore_ascii_case(b"Content-Length") {
                if content_length.is_none() {
                    content_length = Some(parse_decimal(value)?);
                }
            } else if name.eq_ignore_ascii_case(b"WARC-Type") {
                http_type = value.eq_ignore_ascii_case(b"response")
                    || value.eq_ignore_ascii_case(b"request")
                    || value.eq_ignore_ascii_case(b"revisit");
            } else if name.eq_ignore_ascii_case(b"Content-Type") {
                http_content_type = starts_with_ignore_case(value, b"application/http");
            }
        }
        line_start = nl + 1;
    };
    let (block_end, cut) = block_end(plain.len(), header_end, content_length?);
    out.push(SpanKind::Header, pos, header_end);
    emit_block(
        plain,
        header_end,
        block_end,
        http_type || http_content_type,
        out,
    );
    Some((block_end, cut))
}

/// Parses an ARC record at `pos`, like [`parse_warc`].
fn parse_arc(plain: &[u8], pos: usize, out: &mut Out) -> Option<(usize, bool)> {
    let (line_end, length) = parse_arc_line(plain, pos)?;
    let (block_end, cut) = block_end(plain.len(), line_end, length);
    out.push(SpanKind::Header, pos, line_end);
    emit_block(plain, line_end, block_end, true, out);
    Some((block_end, cut))
}

/// A truncated stream still gives the record whatever block bytes are there; the flag says
/// it was truncated.
fn block_end(n: usize, start: usize, length: u64) -> (usize, bool) {
    let avail = (n - start) as u64;
    (start + length.min(avail) as usize, length > avail)
}

/// Checks for an ARC header line at `pos`: `URL IP DATE ... LENGTH\n`, at least five
/// fields. Returns the end of the line (after `\n`) and the declared block length.
fn parse_arc_line(plain: &[u8], pos: usize) -> Option<(usize, u64)> {
    // Every URL scheme starts with a letter; checking first avoids scanning most garbage lines.
    if !plain.get(pos)?.is_ascii_alphabetic() {
        return None;
    }
    let limit = plain.len().min(pos.saturating_add(MAX_ARC_LINE));
    let nl = find_byte(b'\n', &plain[pos..limit])? + pos;
    let line = trim_cr(&plain[pos..nl]);
    // Binary bytes never appear in a header line; rejecting them early keeps resync over
    // payload-like garbage from finding false records.
    if line.iter().any(|&b| b < 0x20 && b != b'\t') {
        return None;
    }
    let mut fields = line.split(|&b| b == b' ').filter(|f| !f.is_empty());
    let url = fields.next()?;
    let _ip = fields.next()?;
    let date = fields.next()?;
    if !is_arc_url(url) || date.len() < 8 || date.len() > 17 || !all_digits(date) {
        return None;
    }
    let mut count = 3;
    let mut last = date;
    for f in fields {
        count += 1;
        last = f;
    }
    if count < 5 {
        return None;
    }
    Some((nl + 1, parse_decimal(last)?))
}

/// `://` covers http(s)/ftp; a bare `scheme:` also lets Heritrix's `dns:` records
/// (and `filedesc:`) through.
fn is_arc_url(url: &[u8]) -> bool {
    if find_sub(url, b"://").is_some() {
        return true;
    }
    match url.iter().position(|&b| b == b':') {
        Some(i) if i >= 2 && i + 1 < url.len() => {
            url[0].is_ascii_alphabetic()
                && url[..i]
                    .iter()
                    .all(|&b| b.is_ascii_alphanumeric() || b"+.-".contains(&b))
        }
        _ => false,
    }
}

/// Emits the block `start..end`: HTTP header as Header and body as Payload when the block
/// is an HTTP message, otherwise the whole block as one Payload.
fn emit_block(plain: &[u8], start: usize, end: usize, may_be_http: bool, out: &mut Out) {
    let block = &plain[start..end];
    if may_be_http && looks_like_http(block) {
        match http_header_len(block) {
            Some(h) => {
                out.push(SpanKind::Header, start, start + h);
                out.payload(start + h, end);
            }
            // Unterminated HTTP header in a small block (headers-only or cut short):
            // these bytes are header bytes, unique per capture.
            None if block.len() < MAX_HEADER => out.push(SpanKind::Header, start, end),
            None => out.payload(start, end),
        }
    } else {
        out.payload(start, end);
    }
}

/// Status line (`HTTP/`) or a request line (`METHOD target HTTP/x`).
fn looks_like_http(block: &[u8]) -> bool {
    if block.starts_with(b"HTTP/") {
        return true;
    }
    let m = block.iter().take(24).position(|&b| b == b' ');
    let m = match m {
        Some(m) if m > 0 => m,
        _ => return false,
    };
    if !block[..m]
        .iter()
        .all(|&b| b.is_ascii_uppercase() || b == b'-' || b == b'_')
    {
        return false;
    }
    let limit = block.len().min(MAX_HEADER);
    let line_end = find_byte(b'\n', &block[..limit]).unwrap_or(limit);
    find_sub(&block[m..line_end], b" HTTP/").is_some()
}

/// Length of the HTTP header including its blank line (`\r\n\r\n`, or a bare `\n\n` as
/// some writers emit), if it ends within the block and within `MAX_HEADER`.
fn http_header_len(block: &[u8]) -> Option<usize> {
    let limit = block.len().min(MAX_HEADER);
    let mut line_start = 0;
    loop {
        let nl = find_byte(b'\n', &block[line_start..limit])? + line_start;
        if trim_cr(&block[line_start..nl]).is_empty() && line_start > 0 {
            return Some(nl + 1);
        }
        line_start = nl + 1;
    }
}

/// Record separators are `\r\n\r\n` by the spec but writers vary (`\r\n`, `\n\n`, none,
/// or extra): any run of CR/LF after a block is taken as separator.
fn skip_separator(plain: &[u8], mut pos: usize) -> usize {
    while pos < plain.len() && (plain[pos] == b'\r' || plain[pos] == b'\n') {
        pos += 1;
    }
    pos
}

/// Where parsing should be tried again after unparseable bytes at `pos`: the next line
/// start (always > `pos`) holding a WARC version line, an ARC file header or, in an ARC
/// stream, an ARC record line. The end of input when there is none.
fn resync(plain: &[u8], pos: usize, arc_mode: bool) -> usize {
    let n = plain.len();
    let mut i = pos;
    while i < n {
        let nl = match find_byte(b'\n', &plain[i..]) {
            Some(k) => i + k,
            None => return n,
        };
        let s = nl + 1;
        let rest = &plain[s..];
        if rest.starts_with(b"WARC/1.")
            || rest.starts_with(b"WARC/0.")
            || (rest.starts_with(b"filedesc:") && parse_arc_line(plain, s).is_some())
            || (arc_mode && parse_arc_line(plain, s).is_some())
        {
            return s;
        }
        i = s;
    }
    n
}

/// Splits `Name: value`, trimming spaces and tabs around both.
fn split_field(line: &[u8]) -> Option<(&[u8], &[u8])> {
    let colon = line.iter().position(|&b| b == b':')?;
    Some((trim_ws(&line[..colon]), trim_ws(&line[colon + 1..])))
}

fn parse_decimal(s: &[u8]) -> Option<u64> {
    let s = trim_ws(s);
    if s.is_empty() || s.len() > 19 || !all_digits(s) {
        return None;
    }
    Some(
        s.iter()
            .fold(0u64, |acc, &b| acc * 10 + u64::from(b - b'0')),
    )
}

fn all_digits(s: &[u8]) -> bool {
    s.iter().all(u8::is_ascii_digit)
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn trim_ws(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

fn starts_with_ignore_case(s: &[u8], prefix: &[u8]) -> bool {
    s.len() >= prefix.len() && s[..prefix.len()].eq_ignore_ascii_case(prefix)
}

/// First index of `needle` in `hay`. Only used on short lines, so plain is fine.
fn find_sub(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// First index of `byte` in `hay`. Resync runs over arbitrary amounts of garbage, so this
/// checks 32-byte chunks without early exit, which the compiler turns into vector code.
fn find_byte(byte: u8, hay: &[u8]) -> Option<usize> {
    const CHUNK: usize = 32;
    let mut chunks = hay.chunks_exact(CHUNK);
    let mut base = 0;
    for chunk in &mut chunks {
        if chunk.iter().fold(false, |acc, &b| acc | (b == byte)) {
            return chunk.iter().position(|&b| b == byte).map(|i| base + i);
        }
        base += CHUNK;
    }
    chunks
        .remainder()
        .iter()
        .position(|&b| b == byte)
        .map(|i| base + i)
}

/// Where a header block (WARC's or HTTP's) ends: just after its blank line.
pub fn header_end(b: &[u8]) -> Option<usize> {
    memchr::memmem::find(b, b"\r\n\r\n").map(|i| i + 4)
}

#[cfg(test)]
mod tests;
