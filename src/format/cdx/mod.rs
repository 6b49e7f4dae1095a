//! CDXJ index lines, byte for byte as webrecorder's `cdxj-indexer` prints them, so that pywb
//! (and anything else that reads that format) can use warcfs's index.
//!
//! Ported from, and checked against, these PyPI packages:
//! `cdxj-indexer` 1.5.0, `warcio` 1.8.1, `surt` 0.3.1 (on CPython 3.11).
//!
//! # What `cdxj-indexer` (default options) prints
//!
//! One line per record of type `response`, `revisit`, `resource` or `metadata` (the WARC-Type
//! value compared case-sensitively); `resource`/`metadata` records whose WARC `Content-Type` is
//! exactly `application/warc-fields` are skipped, as are `warcinfo`, `request`, `conversion`,
//! `continuation` and unknown types. The line is
//! `<surt(WARC-Target-URI)> <14-digit timestamp of WARC-Date> <json>` where the JSON object is
//! written by Python's `json.dumps` (separators `", "`/`": "`, `ensure_ascii`: every character
//! outside 0x20..0x7e becomes `\uXXXX` with lowercase hex and surrogate pairs, `/` not escaped)
//! with, in this order and only when present, all values strings:
//! `url` (WARC-Target-URI; `<...>` brackets removed and spaces replaced by `%20` like warcio does),
//! `mime` (`warc/revisit` for revisits; the HTTP `Content-Type` for responses, the WARC
//! `Content-Type` for resource/metadata; cut at the first `;` or whitespace, NOT lowercased),
//! `status` (response/revisit with HTTP headers: the first word after the protocol),
//! `digest` (WARC-Payload-Digest verbatim, `sha1:` prefix kept), `length`, `offset`, `filename`.
//!
//! # Known differences (documented limitations)
//!
//! * POST/PUT: only `cdxj-indexer -p/--post-append` appends `__wb_method=post&...` query data
//!   taken from the *request* record to the key; the default run does not, and neither do we
//!   (we only see the response's headers).
//! * Missing WARC-Payload-Digest (common: Heritrix `metadata` records, `dns:` responses,
//!   some gowarc responses): cdxj-indexer then hashes the payload itself. [`cdxj_line`] has
//!   no payload; when the record's HTTP headers were not parsed (non-HTTP record or URI) the
//!   payload is the whole block, so a `sha1:` WARC-Block-Digest (base32 or hex) gives the same
//!   value and is used; otherwise the `digest` field is left out. [`cdxj_line_from_block`]
//!   takes the block and is exact here.
//! * Records that make cdxj-indexer crash (unparseable WARC-Date, such as ClueWeb09's
//!   `2008-10-294T05:21:46-0700`; a response/revisit without WARC-Target-URI) give `None`;
//!   cdxj-indexer aborts the whole file there instead.
//! * ARC files: cdxj-indexer converts ARC headers to WARC ones on the fly (`arc2warc`, with a
//!   random record id and `application/http;msgtype=response`); this function only takes WARC
//!   headers, so ARC input is not supported.
//! * IDNA of non-ASCII hosts follows Python's IDNA 2003 codec (nameprep + punycode) with these
//!   simplifications: case folding is Rust's `to_lowercase` plus `ß`/`ẞ`→`ss` and `ς`→`σ`,
//!   NFKC is only applied to fullwidth ASCII forms and the `ﬀ`..`ﬆ` ligatures, and the bidi
//!   rules use table D.1 exactly but approximate D.2 (LCat) as "alphabetic, not RandAL, not a
//!   combining mark". Where Python's codec fails it keeps the raw host, which then gets
//!   %-escaped; so do we.
//! * Non-ASCII digits in WARC-Date (Python's `\d`/`int()` accept them) are not accepted.

use std::fmt::Write as _;

// ================================================================================================
// CDXJ line
// ================================================================================================

/// The CDXJ line (no trailing newline) cdxj-indexer prints for one record, or None for records
/// it does not index. `warc_header` = the WARC header block (from "WARC/1.x\r\n" through the
/// blank line), `http_header` = the HTTP header block of the record's block when it has one
/// (status line through the blank line; anything after the blank line is ignored, so passing
/// the whole block is fine), `offset`/`length` = the record's position in the file as
/// cdxj-indexer reports it (for .warc.gz: the gzip member(s); for .warc: the record from its
/// `WARC/` line to the end of its block, i.e. warcio does NOT count the trailing `\r\n\r\n`),
/// `filename` = as cdxj-indexer prints it (by default the basename; with `--dir-root` the path
/// relative to that dir).
///
/// `http_header` is only looked at where warcio parses HTTP headers: record types `response`
/// and `revisit` (and `request`), WARC-Target-URI starting with `http:`/`https:`, and a
/// Content-Length that is not 0.
///
/// Limitation: for non-GET requests cdxj-indexer *with `-p`* appends the method and request body
/// to the key using the request record; that needs data we do not get here and is not done
/// (cdxj-indexer's default, which this matches, does not do it either).
pub fn cdxj_line(
    warc_header: &[u8],
    http_header: Option<&[u8]>,
    offset: u64,
    length: u64,
    filename: &str,
) -> Option<String> {
    line_impl(warc_header, http_header, None, offset, length, filename)
}

/// Like [`cdxj_line`], but given the record's whole block (the Content-Length bytes after the
/// WARC header, or fewer if the file is truncated) instead of just its HTTP header. This finds
/// the HTTP header itself, exactly where warcio parses one, and when the record has no
/// WARC-Payload-Digest it computes the digest cdxj-indexer then prints (`sha1:` + base32 of
/// SHA-1 over the block after the HTTP header, not de-chunked), so the line is always exact.
pub fn cdxj_line_from_block(
    warc_header: &[u8],
    block: &[u8],
    offset: u64,
    length: u64,
    filename: &str,
) -> Option<String> {
    let mut digest = |from: usize| Some(sha1_digest_string(&block[from.min(block.len())..]));
    line_impl(warc_header, Some(block), Some(&mut digest), offset, length, filename)
}

/// Like [`cdxj_line_from_block`] for a block that need not be held whole: `head` is its first
/// bytes (the whole block, or at least as much as its HTTP header takes), and
/// `digest_from(n)` gives the `sha1:` digest of the block from byte `n` on, as
/// `sha1_digest_string` writes it (None if it cannot: the line then leaves the digest out,
/// and the caller says why).
pub fn cdxj_line_from_block_head(
    warc_header: &[u8],
    head: &[u8],
    digest_from: &mut dyn FnMut(usize) -> Option<String>,
    offset: u64,
    length: u64,
    filename: &str,
) -> Option<String> {
    line_impl(warc_header, Some(head), Some(digest_from), offset, length, filename)
}

/// `digest_from`: `http_header` is the block's start, and this gives the payload digest
/// from an offset in the block.
fn line_impl(
    warc_header: &[u8],
    http_header: Option<&[u8]>,
    digest_from: Option<&mut dyn FnMut(usize) -> Option<String>>,
    offset: u64,
    length: u64,
    filename: &str,
) -> Option<String> {
    let (_, mut rec, _) = parse_status_and_headers(warc_header)?;
    let rec_type = get_header(&rec, "WARC-Type")?.to_string();

    // warcio's _ensure_target_uri_format: fixes the value, replacing the *last* header of that
    // name; later lookups return the *first*.
    let mut uri = get_header(&rec, "WARC-Target-URI").map(str::to_string);
    if let Some(u) = uri.as_mut() {
        let mut changed = false;
        if u.starts_with('<') && u.ends_with('>') && u.len() >= 2 {
            *u = u[1..u.len() - 1].to_string();
            changed = true;
        }
        if u.contains(' ') {
            *u = u.replace(' ', "%20");
            changed = true;
        }
        if changed {
            if let Some(h) = rec
                .iter_mut()
                .rev()
                .find(|(n, _)| n.eq_ignore_ascii_case("WARC-Target-URI"))
            {
                h.1 = u.clone();
            }
        }
    }

    // ---- which records are indexed (CDXJIndexer.filter_record, DEFAULT_RECORDS)
    match rec_type.as_str() {
        "response" | "revisit" => {}
        "resource" | "metadata" => {
            if get_header(&rec, "Content-Type") == Some("application/warc-fields") {
                return None;
            }
        }
        _ => return None,
    }

    // ---- HTTP headers, exactly when warcio's ArcWarcRecordLoader.load_http_headers parses them
    let content_length = get_header(&rec, "Content-Length").map(py_int_or_err_zero);
    let mut payload_start = 0;
    let http = if content_length == Some(0) || !matches!(rec_type.as_str(), "response" | "revisit")
    {
        None
    } else {
        let u = uri.as_deref()?; // warcio crashes on a missing URI here
        if u.starts_with("http:") || u.starts_with("https:") {
            match http_header {
                Some(h) => match parse_status_and_headers(h) {
                    // empty revisit: EOFError, no headers; empty response: warcio stops the file
                    None if rec_type == "revisit" => None,
                    None => return None,
                    Some((sl, hs, used)) => {
                        payload_start = used;
                        Some((sl, hs))
                    }
                },
                None => None,
            }
        } else {
            None
        }
    };
    let http_parsed = http.is_some();
    // StatusAndHeaders.__bool__: statusline (after the protocol) or any header
    let http = http.and_then(|(status_line, headers)| {
        // verify_http=False: protocol_status = statusline.split(' ', 1)
        let sl = match status_line.split_once(' ') {
            Some((_, rest)) => py_strip(rest).to_string(),
            None => String::new(),
        };
        if sl.is_empty() && headers.is_empty() {
            None
        } else {
            Some((sl, headers))
        }
    });

    // ---- timestamp (crash in cdxj-indexer => None here)
    let ts = iso_date_to_timestamp(get_header(&rec, "WARC-Date")?)?;

    // ---- fields
    let mut fields: Vec<(&str, String)> = Vec::new();
    let url_field = get_header(&rec, "WARC-Target-URI").map(str::to_string);
    if let Some(u) = &url_field {
        fields.push(("url", u.clone()));
    }

    let mime = if rec_type == "revisit" {
        Some("warc/revisit".to_string())
    } else {
        let v = if rec_type == "response" {
            http.as_ref()
                .and_then(|(_, h)| get_header(h, "content-type"))
                .map(str::to_string)
        } else {
            get_header(&rec, "content-type").map(str::to_string)
        };
        v.map(|v| {
            if v.is_empty() {
                v
            } else {
                // RE_SPACE = [;\s]; split(value, 1)[0].strip()
                let cut = v
                    .find(|c: char| c == ';' || py_is_space(c))
                    .unwrap_or(v.len());
                py_strip(&v[..cut]).to_string()
            }
        })
    };
    if let Some(m) = mime {
        fields.push(("mime", m));
    }

    if let Some((sl, _)) = &http {
        let code = sl.split(' ').next().unwrap_or("").to_string();
        fields.push(("status", code));
    }

    let digest = match get_header(&rec, "WARC-Payload-Digest") {
        Some(d) => Some(d.to_string()),
        None if rec_type == "revisit" => None,
        None if digest_from.is_some() => digest_from.and_then(|f| f(payload_start)),
        None if !http_parsed => get_header(&rec, "WARC-Block-Digest").and_then(sha1_base32),
        None => None,
    };
    if let Some(d) = digest {
        fields.push(("digest", d));
    }
    fields.push(("length", length.to_string()));
    fields.push(("offset", offset.to_string()));
    fields.push(("filename", filename.to_string()));

    let key = match &url_field {
        Some(u) => surt_or_url(u),
        None => "-".to_string(),
    };

    let mut out = String::with_capacity(256);
    out.push_str(&key);
    out.push(' ');
    out.push_str(&ts);
    out.push_str(" {");
    for (i, (k, v)) in fields.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        json_str(&mut out, k);
        out.push_str(": ");
        json_str(&mut out, v);
    }
    out.push('}');
    Some(out)
}

/// `sha1:<base32>` from a WARC-Block-Digest value `sha1:` + base32 (any case) or base16.
fn sha1_base32(v: &str) -> Option<String> {
    let (alg, val) = v.split_once(':')?;
    if !alg.eq_ignore_ascii_case("sha1") {
        return None;
    }
    let val = val.trim();
    if val.len() == 32 && val.bytes().all(|b| b.is_ascii_alphabetic() || (b'2'..=b'7').contains(&b)) {
        return Some(format!("sha1:{}", val.to_ascii_uppercase()));
    }
    if val.len() == 40 {
        let bytes = data_encoding::HEXLOWER_PERMISSIVE.decode(val.as_bytes()).ok()?;
        return Some(format!("sha1:{}", data_encoding::BASE32.encode(&bytes)));
    }
    None
}

/// warcio's `Digester('sha1')`: `sha1:` + base32 of the SHA-1.
pub(crate) fn sha1_digest_string(data: &[u8]) -> String {
    use sha1::Digest as _;
    sha1_string(&sha1::Sha1::digest(data).into())
}

/// A SHA-1 as cdxj-indexer prints a digest it computed: `sha1:` and base32.
pub fn sha1_string(digest: &[u8; 20]) -> String {
    format!("sha1:{}", data_encoding::BASE32.encode(digest))
}

/// Python `int(s)` for a header value; on error or negative warcio uses length 0.
fn py_int_or_err_zero(s: &str) -> i128 {
    let t = py_strip(s);
    let (neg, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    if digits.is_empty()
        || digits.starts_with('_')
        || digits.ends_with('_')
        || digits.contains("__")
        || !digits.bytes().all(|b| b.is_ascii_digit() || b == b'_')
    {
        return 0;
    }
    let mut n: i128 = 0;
    for b in digits.bytes().filter(|b| *b != b'_') {
        n = n.saturating_mul(10).saturating_add((b - b'0') as i128);
    }
    if neg || n < 0 {
        0
    } else {
        n
    }
}

type Headers = Vec<(String, String)>;

fn get_header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.to_lowercase() == name.to_lowercase())
        .map(|(_, v)| v.as_str())
}

/// warcio's StatusAndHeadersParser.parse (no status-line verification): the raw first line
/// (rstripped), the headers and the number of bytes consumed. None where warcio raises
/// EOFError (no bytes at all).
fn parse_status_and_headers(block: &[u8]) -> Option<(String, Headers, usize)> {
    let mut lines = PyLines { rest: block };
    let first = lines.next()?;
    let status = py_rstrip(&first).to_string();
    let mut headers = Vec::new();
    if status.is_empty() {
        return Some((status, headers, block.len() - lines.rest.len()));
    }
    let mut line = lines
        .next()
        .map(|l| py_rstrip(&l).to_string())
        .unwrap_or_default();
    while !line.is_empty() {
        let (name, mut value) = match line.split_once(':') {
            Some((n, v)) => (
                n.trim_end_matches([' ', '\t']).to_string(),
                Some(py_lstrip(v).to_string()),
            ),
            None => (line.clone(), None),
        };
        let mut next = lines
            .next()
            .map(|l| py_rstrip(&l).to_string())
            .unwrap_or_default();
        while next.starts_with([' ', '\t']) {
            if let Some(v) = value.as_mut() {
                v.push_str(&next);
            }
            next = lines
                .next()
                .map(|l| py_rstrip(&l).to_string())
                .unwrap_or_default();
        }
        if let Some(v) = value {
            headers.push((name, v));
        }
        line = next;
    }
    Some((status, headers, block.len() - lines.rest.len()))
}

/// readline() over bytes, each line decoded as UTF-8, or ISO-8859-1 when that fails.
struct PyLines<'a> {
    rest: &'a [u8],
}

impl Iterator for PyLines<'_> {
    type Item = String;
    fn next(&mut self) -> Option<String> {
        if self.rest.is_empty() {
            return None;
        }
        let end = self
            .rest
            .iter()
            .position(|&b| b == b'\n')
            .map_or(self.rest.len(), |p| p + 1);
        let (line, rest) = self.rest.split_at(end);
        self.rest = rest;
        Some(match std::str::from_utf8(line) {
            Ok(s) => s.to_string(),
            Err(_) => line.iter().map(|&b| b as char).collect(),
        })
    }
}

/// Python `str.isspace()`.
fn py_is_space(c: char) -> bool {
    c.is_whitespace() || ('\x1c'..='\x1f').contains(&c)
}
fn py_strip(s: &str) -> &str {
    s.trim_matches(py_is_space)
}
fn py_lstrip(s: &str) -> &str {
    s.trim_start_matches(py_is_space)
}
fn py_rstrip(s: &str) -> &str {
    s.trim_end_matches(py_is_space)
}

/// `json.dumps` of a str (ensure_ascii=True).
fn json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut buf = [0u16; 2];
                for u in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{:04x}", u);
                }
            }
        }
    }
    out.push('"');
}

/// warcio `iso_date_to_timestamp`: split on non-digits, 3..=7 numbers (7th = fraction),
/// validated like `datetime(...)`, formatted `%Y%m%d%H%M%S` (year not zero-padded, as glibc).
fn iso_date_to_timestamp(s: &str) -> Option<String> {
    let mut nums: Vec<&str> = s.split(|c: char| !c.is_ascii_digit()).collect();
    if nums.last() == Some(&"") {
        nums.pop();
    }
    if !(3..=7).contains(&nums.len()) {
        return None;
    }
    if nums.iter().any(|n| n.is_empty()) {
        return None;
    }
    let num = |i: usize| -> Option<u64> {
        match nums.get(i) {
            None => Some(0),
            Some(n) => {
                let t = n.trim_start_matches('0');
                if t.len() > 18 {
                    Some(u64::MAX)
                } else {
                    Some(if t.is_empty() { 0 } else { t.parse().ok()? })
                }
            }
        }
    };
    let (y, mo, d, h, mi, se) = (num(0)?, num(1)?, num(2)?, num(3)?, num(4)?, num(5)?);
    if !(1..=9999).contains(&y) || !(1..=12).contains(&mo) || h > 23 || mi > 59 || se > 59 {
        return None;
    }
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let dim = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ][(mo - 1) as usize];
    if d < 1 || d > dim {
        return None;
    }
    Some(format!("{}{:02}{:02}{:02}{:02}{:02}", y, mo, d, h, mi, se))
}

mod idna;
mod surt;
#[cfg(test)]
mod tests;

use idna::*;
pub use surt::surt;
use surt::*;
