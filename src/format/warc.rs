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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::path::PathBuf;

    use SpanKind::{Header as H, Payload as P, Raw as R};

    /// Checks the tiling contract and returns (kind, bytes) pairs for easy matching.
    fn check(plain: &[u8], seg: &Segmentation) -> Vec<(SpanKind, Vec<u8>)> {
        let mut pos = 0u64;
        let mut prev: Option<SpanKind> = None;
        let mut payloads = 0;
        for s in &seg.spans {
            assert_eq!(s.start, pos, "gap or overlap at {pos}: {:?}", seg.spans);
            assert!(s.len > 0, "empty span {s:?}");
            if s.kind == P {
                payloads += 1;
                assert!(s.len >= MIN_PAYLOAD as u64, "small payload {s:?}");
            } else {
                assert_ne!(prev, Some(s.kind), "unmerged neighbours at {}", s.start);
            }
            prev = Some(s.kind);
            pos += s.len;
        }
        assert_eq!(pos, plain.len() as u64, "spans do not reach the end");
        assert_eq!(payloads, seg.payloads);
        seg.spans
            .iter()
            .map(|s| {
                (
                    s.kind,
                    plain[s.start as usize..(s.start + s.len) as usize].to_vec(),
                )
            })
            .collect()
    }

    fn record(version: &str, typ: &str, content_type: &str, block: &[u8]) -> Vec<u8> {
        let mut r = format!(
            "{version}\r\nWARC-Type: {typ}\r\nWARC-Record-ID: <urn:uuid:1234>\r\n\
             Content-Type: {content_type}\r\ncontent-length :  {} \r\n\r\n",
            block.len()
        )
        .into_bytes();
        r.extend_from_slice(block);
        r
    }

    fn cat(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    const SEP: &[u8] = b"\r\n\r\n";

    #[test]
    fn hand_written_warc_exact_spans() {
        let info =
            b"software: warcfs-test/1.0\r\nformat: WARC File Format 1.1\r\nconformsTo: spec\r\n";
        let req = b"GET /index.html HTTP/1.1\r\nHost: example.com\r\nUser-Agent: t\r\n\r\n";
        let resp_h = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 120\r\n\r\n";
        let body = [b'x'; 120];
        let meta = b"outlink: http://example.com/a.css E link/@href\r\noutlink: http://example.com/b.js E script/@src\r\n";
        let rev = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n";

        let r1 = record("WARC/1.1", "warcinfo", "application/warc-fields", info);
        let r2 = record(
            "WARC/1.1",
            "request",
            "application/http; msgtype=request",
            req,
        );
        let r3 = record(
            "WARC/1.0",
            "response",
            "application/http; msgtype=response",
            &cat(&[resp_h, &body]),
        );
        let r4 = record("WARC/1.1", "metadata", "application/warc-fields", meta);
        let r5 = record("WARC/1.1", "revisit", "message/http", rev);
        let plain = cat(&[&r1, SEP, &r2, SEP, &r3, SEP, &r4, SEP, &r5, SEP]);
        let seg = segment(&plain);
        let got = check(&plain, &seg);

        let h1 = &r1[..r1.len() - info.len()];
        let h3 = &r3[..r3.len() - resp_h.len() - body.len()];
        let h4 = &r4[..r4.len() - meta.len()];
        let want: Vec<(SpanKind, Vec<u8>)> = vec![
            (H, h1.to_vec()),
            (P, info.to_vec()),
            (H, cat(&[SEP, &r2, SEP, h3, resp_h])),
            (P, body.to_vec()),
            (H, cat(&[SEP, h4])),
            (P, meta.to_vec()),
            (H, cat(&[SEP, &r5, SEP])),
        ];
        assert_eq!(got, want);
        assert_eq!(seg.records, 5);
        assert_eq!(seg.payloads, 3);
    }

    #[test]
    fn small_payloads_and_tolerant_separators() {
        let resp = cat(&[b"HTTP/1.0 404 Not Found\n\n", b"gone"]);
        let r1 = record("WARC/1.0", "response", "application/http", &resp);
        let big = [b'y'; 100];
        let r2 = record("WARC/1.0", "resource", "text/plain", &big);
        let r3 = record("WARC/1.0", "resource", "text/plain", &big);
        // Separators: only CRLF, then LF LF, then none at all at the end.
        let plain = cat(&[&r1, b"\r\n", &r2, b"\n\n", &r3]);
        let seg = segment(&plain);
        let got = check(&plain, &seg);
        let h2 = &r2[..r2.len() - big.len()];
        let h3 = &r3[..r3.len() - big.len()];
        assert_eq!(
            got,
            vec![
                (H, cat(&[&r1, b"\r\n", h2])),
                (P, big.to_vec()),
                (H, cat(&[b"\n\n", h3])),
                (P, big.to_vec()),
            ]
        );
        assert_eq!((seg.records, seg.payloads), (3, 2));
    }

    #[test]
    fn adjacent_payloads_stay_separate() {
        // No separator between records: still one payload per record.
        let a = [b'a'; 70];
        let r = record("WARC/1.0", "resource", "text/plain", &a);
        let plain = cat(&[&r, &r]);
        let seg = segment(&plain);
        check(&plain, &seg);
        assert_eq!((seg.records, seg.payloads), (2, 2));
    }

    #[test]
    fn truncated_records() {
        let body = [b'z'; 500];
        let resp_h = b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n";
        let r = record(
            "WARC/1.1",
            "response",
            "application/http; msgtype=response",
            &cat(&[resp_h, &body]),
        );
        let head_len = r.len() - body.len() - resp_h.len();

        // Cut inside the body: the available body bytes are the payload.
        let plain = &r[..r.len() - 200];
        let seg = segment(plain);
        let got = check(plain, &seg);
        assert_eq!(
            got,
            vec![
                (H, r[..head_len + resp_h.len()].to_vec()),
                (P, body[..300].to_vec())
            ]
        );
        assert_eq!((seg.records, seg.payloads), (1, 1));

        // Cut inside the HTTP header: all header.
        let plain = &r[..head_len + 10];
        let seg = segment(plain);
        assert_eq!(check(plain, &seg), vec![(H, plain.to_vec())]);
        assert_eq!(seg.records, 1);

        // Cut inside the WARC header: not a record.
        let plain = &r[..head_len - 3];
        let seg = segment(plain);
        assert_eq!(check(plain, &seg), vec![(R, plain.to_vec())]);
        assert_eq!(seg.records, 0);

        // Every cut point tiles.
        for cut in 0..=r.len() {
            check(&r[..cut], &segment(&r[..cut]));
        }
    }

    #[test]
    fn garbage_before_between_and_after() {
        let big = [b'q'; 80];
        let r = record("WARC/1.0", "resource", "text/plain", &big);
        let hdr = &r[..r.len() - big.len()];
        let no_len = b"WARC/1.0\r\nWARC-Type: resource\r\n\r\nsome block\r\n\r\n".to_vec();
        let plain = cat(&[
            b"junk before\nWARC/ nope\n",
            &r,
            SEP,
            b"garbage in between WARC/1.0 not at line start\n",
            &r,
            b"\r\n",
            &no_len,
            &r,
            b"\r\n\r\ntrailing garbage without newline",
        ]);
        let seg = segment(&plain);
        let got = check(&plain, &seg);
        assert_eq!(
            got,
            vec![
                (R, b"junk before\nWARC/ nope\n".to_vec()),
                (H, hdr.to_vec()),
                (P, big.to_vec()),
                (H, SEP.to_vec()),
                (
                    R,
                    b"garbage in between WARC/1.0 not at line start\n".to_vec()
                ),
                (H, hdr.to_vec()),
                (P, big.to_vec()),
                (H, b"\r\n".to_vec()),
                // Missing Content-Length: raw up to the next version line at a line start.
                (R, no_len.clone()),
                (H, hdr.to_vec()),
                (P, big.to_vec()),
                (H, SEP.to_vec()),
                (R, b"trailing garbage without newline".to_vec()),
            ]
        );
        assert_eq!((seg.records, seg.payloads), (3, 3));
    }

    #[test]
    fn pathological_inputs_stay_linear() {
        let many_versions = b"WARC/1.0\r\n".repeat(300_000);
        let no_blank = b"WARC/1.0\r\nContent-Length: 5\r\n".repeat(100_000);
        let newlines = vec![b'\n'; 3_000_000];
        let mut arc_lines = b"filedesc://x 0.0.0.0 20000101000000 text/plain 0\n".to_vec();
        arc_lines.extend(b"x\nhttp://a 1 20000101000000 t/p 99999999999\n".to_vec());
        arc_lines.extend(b"ftp://a b 20000101000000 c\n".repeat(100_000));
        let long_line = [
            b"filedesc://x 0.0.0.0 20000101000000 text/plain 0\n".as_slice(),
            &vec![b'a'; 3_000_000],
        ]
        .concat();
        for input in [&many_versions, &no_blank, &newlines, &arc_lines, &long_line] {
            let t = std::time::Instant::now();
            let seg = segment(input);
            check(input, &seg);
            assert!(
                t.elapsed().as_secs_f64() < 5.0,
                "too slow: {:?}",
                t.elapsed()
            );
        }
    }

    use crate::test_support::real_corpus as corpus_dir;

    /// All of the file that gunzips; a broken tail is ignored.
    fn gunzip(path: &std::path::Path) -> Vec<u8> {
        let raw = std::fs::read(path).unwrap();
        let mut out = Vec::new();
        let _ = flate2::read::MultiGzDecoder::new(&raw[..]).read_to_end(&mut out);
        out
    }

    /// The gunzipped members one by one (until the first that fails).
    fn gunzip_members(path: &std::path::Path) -> Vec<Vec<u8>> {
        let raw = std::fs::read(path).unwrap();
        let mut rest = &raw[..];
        let mut members = Vec::new();
        while !rest.is_empty() {
            let mut out = Vec::new();
            let mut dec = flate2::bufread::GzDecoder::new(rest);
            if dec.read_to_end(&mut out).is_err() {
                break;
            }
            rest = dec.into_inner();
            members.push(out);
        }
        members
    }

    fn corpus_files() -> Vec<PathBuf> {
        let mut files = Vec::new();
        for dir in std::fs::read_dir(corpus_dir()).expect("corpus") {
            let dir = dir.unwrap().path();
            if dir.is_dir() {
                for f in std::fs::read_dir(dir).unwrap() {
                    let f = f.unwrap().path();
                    let name = f.file_name().unwrap().to_string_lossy().into_owned();
                    if name.contains(".warc.gz") || name.contains(".arc.gz") {
                        files.push(f);
                    }
                }
            }
        }
        files.sort();
        files
    }

    #[test]
    fn arc_files() {
        let dir = corpus_dir();
        let plain = gunzip(&dir.join("webrecorder-pywb/example.arc.gz"));
        let seg = segment(&plain);
        let got = check(&plain, &seg);
        assert_eq!((seg.records, seg.payloads), (2, 2));
        let kinds: Vec<SpanKind> = got.iter().map(|g| g.0).collect();
        assert_eq!(kinds, vec![H, P, H, P, H]);
        assert!(got[0].1.starts_with(b"filedesc://") && got[0].1.ends_with(b" 75\n"));
        assert_eq!(got[1].1.len(), 75);
        assert!(
            got[2].1.starts_with(b"\n\nhttp://example.com/ ") && got[2].1.ends_with(b"\r\n\r\n")
        );
        assert!(got[3].1.starts_with(b"<!doctype html>"));
        assert_eq!(got[3].1.len(), 1270);
        assert_eq!(got[4].1, b"\n");

        let plain =
            gunzip(&dir.join(
                "ukwa-webarchive-discovery/IAH-20080430204825-00000-blackbook-truncated.arc.gz",
            ));
        let seg = segment(&plain);
        let got = check(&plain, &seg);
        assert_eq!(seg.records, 9);
        assert!(!got.iter().any(|g| g.0 == R), "{:?}", seg.spans);
        // filedesc, robots.txt, /, index.php, logoc.jpg, go-button.gif, star.png, rss
        // (dns: is 56 bytes with its header line, below the payload minimum).
        assert_eq!(seg.payloads, 8);
    }

    /// Independent, deliberately naive reading of a member holding exactly one WARC
    /// record: (is a record, payload bytes counted as Payload).
    fn naive_member(m: &[u8]) -> (bool, u64) {
        let find = |h: &[u8], n: &[u8]| h.windows(n.len()).position(|w| w == n);
        let Some(he) = find(m, b"\r\n\r\n") else {
            return (false, 0);
        };
        let head = String::from_utf8_lossy(&m[..he]).to_ascii_lowercase();
        let cl: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map(|v| v.trim().parse().unwrap())
            .unwrap();
        let block = &m[he + 4..(he + 4 + cl).min(m.len())];
        let http = head.contains("warc-type: response")
            || head.contains("warc-type: request")
            || head.contains("warc-type: revisit")
            || head.contains("content-type: application/http");
        let looks = block.starts_with(b"HTTP/")
            || block.starts_with(b"GET ")
            || block.starts_with(b"POST ");
        let payload = if http && looks {
            let crlf = find(block, b"\r\n\r\n").map(|i| i + 4);
            let lf = find(block, b"\n\n").map(|i| i + 2);
            match (crlf, lf) {
                (Some(a), Some(b)) => block.len() - a.min(b),
                (Some(a), None) | (None, Some(a)) => block.len() - a,
                (None, None) => 0,
            }
        } else {
            block.len()
        };
        (
            true,
            if payload >= MIN_PAYLOAD {
                payload as u64
            } else {
                0
            },
        )
    }

    #[test]
    fn real_corpus_tiles_and_cross_checks() {
        let files = corpus_files();
        assert!(files.len() >= 20, "corpus missing: {:?}", corpus_dir());
        let one_per_member = [
            "iana.warc.gz",
            "IAH-20080430204825-00000-blackbook.warc.gz",
            "sample-1.warc.gz",
            "BL-20140325121225068-00000-32090~opera~8443.warc.gz",
            "dupes.warc.gz",
            "parseMe.warc.gz",
            "flashfrozen-jwat-recompressed.warc.gz",
            "warcfile.warc.gz",
            "clueweb-quirk.warc.gz",
            "IAH-urls-wget.warc.gz",
            "froggie.warc.gz",
            "example.warc.gz",
        ];
        for f in &files {
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            let plain = gunzip(f);
            let seg = segment(&plain);
            check(&plain, &seg);
            let raw: u64 = seg
                .spans
                .iter()
                .filter(|s| s.kind == R)
                .map(|s| s.len)
                .sum();
            let payload: u64 = seg
                .spans
                .iter()
                .filter(|s| s.kind == P)
                .map(|s| s.len)
                .sum();
            eprintln!(
                "{name:55} {:>9} bytes {:>5} records {:>5} payloads {:>9} payload bytes {raw:>6} raw",
                plain.len(),
                seg.records,
                seg.payloads,
                payload
            );
            if name.contains(".warc") {
                assert!(seg.records > 0, "{name}: no records");
            }
            if one_per_member.contains(&name.as_str()) {
                let members = gunzip_members(f);
                let mut want_records = 0;
                let mut want_payload = 0;
                for m in &members {
                    let (rec, p) = naive_member(m);
                    want_records += rec as u64;
                    want_payload += p;
                }
                assert_eq!(
                    seg.records,
                    members.len() as u64,
                    "{name}: records vs members"
                );
                assert_eq!(seg.records, want_records, "{name}");
                assert_eq!(payload, want_payload, "{name}: payload bytes");
                assert_eq!(raw, 0, "{name}: raw bytes");
            }
        }
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn sample() -> &'static [u8] {
            static S: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
            S.get_or_init(|| {
                let d = corpus_dir();
                let mut v = gunzip(&d.join("webrecorder-warcio/example.warc.gz"));
                v.extend(gunzip(&d.join("webrecorder-pywb/example.arc.gz")));
                v.extend(gunzip(&d.join("webrecorder-pywb/post-test.warc.gz")));
                v
            })
        }

        #[derive(Debug, Clone)]
        enum Edit {
            Flip(usize, u8),
            Insert(usize, Vec<u8>),
            Delete(usize, usize),
        }

        fn edit() -> impl Strategy<Value = Edit> {
            let token = prop_oneof![
                Just(b"\r\n\r\n".to_vec()),
                Just(b"\nWARC/1.0\r\n".to_vec()),
                Just(b"Content-Length: 99999\r\n".to_vec()),
                Just(b"\nfiledesc://a 1 20000101000000 t 10\n".to_vec()),
                Just(b"HTTP/1.1 200 OK\r\n".to_vec()),
                proptest::collection::vec(any::<u8>(), 0..16),
            ];
            prop_oneof![
                (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Edit::Flip(i, b)),
                (any::<usize>(), token).prop_map(|(i, t)| Edit::Insert(i, t)),
                (any::<usize>(), 0usize..300).prop_map(|(i, n)| Edit::Delete(i, n)),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(crate::format::fuzz_cases(256)))]

            /// Fuzz (these three): WARC and ARC segmentation of any bytes tiles them.
            #[test]
            fn fuzz_arbitrary_bytes_tile(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
                let seg = segment(&bytes);
                check(&bytes, &seg);
            }

            #[test]
            fn fuzz_arbitrary_warcish_tokens_tile(parts in proptest::collection::vec(prop_oneof![
                Just(&b"WARC/1.0\r\n"[..]), Just(&b"\r\n"[..]), Just(&b"\n"[..]),
                Just(&b"Content-Length: 3\r\n"[..]), Just(&b"WARC-Type: response\r\n"[..]),
                Just(&b"HTTP/1.1 200 OK\r\n"[..]), Just(&b"filedesc://x 1 20000101000000 t 5\n"[..]),
                Just(&b"http://y 1 20000101000000 t 70\n"[..]), Just(&b"abc"[..]),
            ], 0..60)) {
                let bytes = parts.concat();
                let seg = segment(&bytes);
                check(&bytes, &seg);
            }

            #[test]
            fn fuzz_mutated_real_warc_tiles(cut in any::<usize>(), edits in proptest::collection::vec(edit(), 0..8)) {
                let mut v = sample().to_vec();
                for e in edits {
                    match e {
                        Edit::Flip(i, b) => { let i = i % v.len(); v[i] ^= b; }
                        Edit::Insert(i, t) => { let i = i % (v.len() + 1); v.splice(i..i, t); }
                        Edit::Delete(i, n) => { let i = i % (v.len() + 1); let e = (i + n).min(v.len()); v.drain(i..e); }
                    }
                }
                let cut = cut % (v.len() + 1);
                let seg = segment(&v[..cut]);
                check(&v[..cut], &seg);
            }
        }
    }

    /// Segments `plain` the way ingest does, `bytes` at a time (growing a window that holds
    /// no whole record), and returns the spans with absolute offsets and the record count.
    fn windowed(plain: &[u8], bytes: usize) -> (Vec<Span>, u64) {
        let (mut spans, mut records, mut off, mut want, mut arc) = (Vec::new(), 0, 0usize, bytes, false);
        while off < plain.len() {
            let end = (off + want).min(plain.len());
            let (seg, consumed) = segment_window(&plain[off..end], off == 0, end == plain.len(), &mut arc);
            if consumed == 0 {
                want *= 2;
                continue;
            }
            let tiled: u64 = seg.spans.iter().map(|s| s.len).sum();
            assert_eq!(tiled, consumed as u64, "spans must tile what the window consumed");
            spans.extend(seg.spans.iter().map(|s| Span { start: s.start + off as u64, ..*s }));
            records += seg.records;
            off += consumed;
            want = bytes;
        }
        (spans, records)
    }

    /// Neighbouring spans of one kind merged (payloads stay apart), as `segment` emits them.
    fn merged(spans: &[Span]) -> Vec<Span> {
        let mut out: Vec<Span> = Vec::new();
        for s in spans {
            match out.last_mut() {
                Some(l) if l.kind == s.kind && s.kind != P => l.len += s.len,
                _ => out.push(*s),
            }
        }
        out
    }

    #[test]
    fn windows_find_the_records_the_whole_stream_has() {
        for name in ["webrecorder-pywb/iana.warc.gz", "webrecorder-warcio/example.warc.gz"] {
            let mut plain = Vec::new();
            flate2::read::MultiGzDecoder::new(&std::fs::read(corpus_dir().join(name)).unwrap()[..]).read_to_end(&mut plain).unwrap();
            let whole = segment(&plain);
            for bytes in [1, 100, 4096, 65536] {
                let (spans, records) = windowed(&plain, bytes);
                assert_eq!(records, whole.records, "{name} in windows of {bytes}");
                assert_eq!(merged(&spans), whole.spans, "{name} in windows of {bytes}");
            }
        }
    }

    #[test]
    fn a_record_cut_by_the_window_is_left_for_the_next() {
        let r1 = record("WARC/1.1", "resource", "text/plain", &[b'a'; 300]);
        let r2 = record("WARC/1.1", "resource", "text/plain", &[b'b'; 300]);
        let plain = cat(&[&r1, SEP, &r2, SEP]);
        // Cut in the second record's header, then in its block.
        for cut in [r1.len() + SEP.len() + 100, r1.len() + SEP.len() + r2.len() - 50] {
            let (seg, consumed) = segment_window(&plain[..cut], true, false, &mut false);
            assert_eq!((seg.records, consumed), (1, r1.len() + SEP.len()));
        }
        // Ending right after a block: its separator may go on, so it starts the next window.
        let (seg, consumed) = segment_window(&plain[..r1.len() + 2], true, false, &mut false);
        assert_eq!((seg.records, consumed), (1, r1.len()));
        let (seg, consumed) = segment_window(&plain[r1.len()..], false, true, &mut false);
        assert_eq!((seg.records, consumed), (1, plain.len() - r1.len()));
        assert_eq!(seg.spans[0].kind, H);
        // The end of the stream: the cut record is what there is of it.
        let cut = r1.len() + SEP.len() + r2.len() - 50;
        let (seg, consumed) = segment_window(&plain[..cut], true, true, &mut false);
        assert_eq!((seg.records, consumed), (2, cut));
    }
}
