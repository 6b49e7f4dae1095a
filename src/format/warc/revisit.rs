//! Revisit records (WARC 1.1 §6.7, the IIPC identical-payload-digest profile): the record
//! that stands for a response whose payload another record holds, written so that pywb and
//! OpenWayback find that original again; and the response a revisit stands for, resolved.
//!
//! Resolvers compare strings, not payloads: pywb joins a revisit to the earlier capture of
//! its URL whose `digest` is the same string, or queries `WARC-Refers-To-Target-URI` at
//! `WARC-Refers-To-Date` with that digest; OpenWayback remembers digests seen for a URL. So
//! the revisit carries the original's `WARC-Payload-Digest`, `WARC-Target-URI` (without the
//! angle brackets of WARC/1.0's grammar) and `WARC-Date` verbatim, and its own identity (record id, date, URI, concurrent records),
//! HTTP header and every other field of its own.

/// A WARC header block: its version line and its fields, in order, as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub version: Vec<u8>,
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Header {
    /// Parses a WARC header block (version line through the blank line). None if it is not
    /// one: no `WARC/` version line, a line with no colon, no blank line. Folded lines are
    /// kept with the field they continue.
    pub fn parse(block: &[u8]) -> Option<Header> {
        let end = super::header_end(block)? - 4;
        let mut lines = block[..end].split(|&b| b == b'\n').map(|l| l.strip_suffix(b"\r").unwrap_or(l));
        let version = lines.next()?.to_vec();
        if !version.starts_with(b"WARC/") {
            return None;
        }
        let mut fields: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for line in lines {
            if line.first().is_some_and(|b| *b == b' ' || *b == b'\t') {
                let last = fields.last_mut()?;
                last.1.extend_from_slice(b"\r\n");
                last.1.extend_from_slice(line);
                continue;
            }
            let colon = line.iter().position(|&b| b == b':')?;
            fields.push((line[..colon].to_vec(), line[colon + 1..].trim_ascii().to_vec()));
        }
        Some(Header { version, fields })
    }

    /// The value of field `name` (case-insensitive), the first if it is repeated.
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.fields.iter().find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes())).map(|(_, v)| v.as_slice())
    }

    /// Whether the record is of WARC-Type `t`.
    pub fn is(&self, t: &str) -> bool {
        self.get("WARC-Type").is_some_and(|v| v.eq_ignore_ascii_case(t.as_bytes()))
    }
}

/// The URI a WARC field names, without the angle brackets of WARC/1.0's grammar (wget writes
/// them), which a reader looking the URI up would take for part of it.
pub fn bare_uri(v: &[u8]) -> &[u8] {
    v.strip_prefix(b"<").and_then(|u| u.strip_suffix(b">")).unwrap_or(v)
}

/// The profile URI of identical-payload-digest revisits for a record of `version`.
pub fn profile(version: &[u8]) -> &'static str {
    if version == b"WARC/1.1" {
        "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
    } else {
        "http://netpreserve.org/warc/1.0/revisit/identical-payload-digest"
    }
}

/// Fields of the duplicate that a revisit does not keep: it says what they said anew.
const REPLACED: [&str; 10] = [
    "WARC-Type",
    "WARC-Payload-Digest",
    "WARC-Block-Digest",
    "WARC-Profile",
    "WARC-Truncated",
    "WARC-Refers-To",
    "WARC-Refers-To-Target-URI",
    "WARC-Refers-To-Date",
    "Content-Type",
    "Content-Length",
];

/// The revisit record (header and block, without the record separator) that stands for
/// the response `dup` whose block begins with the HTTP header `http`, and whose payload is
/// byte for byte that of the response `orig`: `orig`'s `WARC-Payload-Digest`, target URI,
/// date and record id are named verbatim; the block is `http`, digested again.
pub fn revisit_record(dup: &Header, http: &[u8], orig: &Header) -> Option<Vec<u8>> {
    let digest = orig.get("WARC-Payload-Digest")?;
    let profile = profile(&dup.version).as_bytes();
    let mut last: Vec<(&[u8], &[u8])> = vec![(b"WARC-Profile", profile)];
    if let Some(id) = orig.get("WARC-Record-ID") {
        last.push((b"WARC-Refers-To", id));
    }
    if let Some(uri) = orig.get("WARC-Target-URI") {
        // The URI itself: pywb looks the original up by it.
        last.push((b"WARC-Refers-To-Target-URI", bare_uri(uri)));
    }
    if let Some(date) = orig.get("WARC-Date") {
        last.push((b"WARC-Refers-To-Date", date));
    }
    last.extend([(&b"WARC-Payload-Digest"[..], digest), (b"WARC-Truncated", b"length")]);
    Some(record(dup, b"revisit", &REPLACED, &last, http))
}

/// A record of type `kind`: `from`'s version line and its fields but those in `drop`, then
/// `last`, then the Content-Type of an HTTP response, the block's digest and length, and the
/// block.
fn record(from: &Header, kind: &[u8], drop: &[&str], last: &[(&[u8], &[u8])], block: &[u8]) -> Vec<u8> {
    let mut out = head(from, kind, drop, last, block.len() as u64, &crate::format::cdx::sha1_digest_string(block));
    out.extend_from_slice(block);
    out
}

/// The header block of `record`, for a block of `len` bytes whose digest string is `digest`.
fn head(from: &Header, kind: &[u8], drop: &[&str], last: &[(&[u8], &[u8])], len: u64, digest: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(1024);
    let line = |out: &mut Vec<u8>, name: &[u8], value: &[u8]| {
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    };
    out.extend_from_slice(&from.version);
    out.extend_from_slice(b"\r\n");
    line(&mut out, b"WARC-Type", kind);
    for (name, value) in &from.fields {
        if !drop.iter().any(|r| name.eq_ignore_ascii_case(r.as_bytes())) {
            line(&mut out, name, value);
        }
    }
    for (name, value) in last {
        line(&mut out, name, value);
    }
    line(&mut out, b"Content-Type", b"application/http; msgtype=response");
    line(&mut out, b"WARC-Block-Digest", digest.as_bytes());
    line(&mut out, b"Content-Length", len.to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    out
}

/// Fields of a revisit that its resolved record does not keep: they describe the revisit.
const RESOLVED_DROPS: [&str; 9] = [
    "WARC-Type",
    "WARC-Profile",
    "WARC-Truncated",
    "WARC-Refers-To",
    "WARC-Refers-To-Target-URI",
    "WARC-Refers-To-Date",
    "WARC-Block-Digest",
    "Content-Type",
    "Content-Length",
];

/// The response record (header and block, without the record separator) that the revisit
/// `rev` stands for, its block `block` (an HTTP header, then its original's payload): the
/// revisit's identity and fields, `WARC-Type: response`, the block digested again. What only
/// a revisit says (its profile, truncation, what it refers to) is left out: WARC 1.1 allows no
/// `WARC-Refers-To` on a response.
pub fn resolved_record(rev: &Header, block: &[u8]) -> Vec<u8> {
    record(rev, b"response", &RESOLVED_DROPS, &[], block)
}

/// The header block `resolved_record` gives `rev` with a block of `block_len` bytes, its
/// digest a placeholder: as long as the real one (a digest string is as long whatever it
/// digests), and what an index line of the resolved record reads.
pub fn resolved_head(rev: &Header, block_len: u64) -> Vec<u8> {
    head(rev, b"response", &RESOLVED_DROPS, &[], block_len, &crate::format::cdx::sha1_digest_string(b""))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DUP: &[u8] = b"WARC/1.0\r\nWARC-Type: response\r\nWARC-Record-ID: <urn:uuid:2>\r\nWARC-Date: 2026-12-02T00:00:00Z\r\nWARC-Target-URI: http://example.com/b\r\nWARC-Concurrent-To: <urn:uuid:3>\r\nWARC-Payload-Digest: sha1:OTHER\r\nWARC-Block-Digest: sha1:BLOCK\r\nContent-Type: application/http;msgtype=response\r\nContent-Length: 120\r\n\r\n";
    const ORIG: &[u8] = b"WARC/1.0\r\nWARC-Type: response\r\nWARC-Record-ID: <urn:uuid:1>\r\nWARC-Date: 2026-12-01T00:00:00Z\r\nWARC-Target-URI: <http://example.com/a>\r\nWARC-Payload-Digest: sha1:ORIGINAL\r\nContent-Length: 99\r\n\r\n";

    /// The revisit keeps the duplicate's identity and HTTP header, names the original's
    /// digest, URI, date and id verbatim, and digests its own block.
    #[test]
    fn a_revisit_names_its_original_verbatim() {
        let (dup, orig) = (Header::parse(DUP).unwrap(), Header::parse(ORIG).unwrap());
        let http = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
        let r = revisit_record(&dup, http, &orig).unwrap();
        let h = Header::parse(&r).unwrap();
        assert!(h.is("revisit"));
        assert_eq!(h.get("WARC-Record-ID").unwrap(), b"<urn:uuid:2>");
        assert_eq!(h.get("WARC-Target-URI").unwrap(), b"http://example.com/b");
        assert_eq!(h.get("WARC-Concurrent-To").unwrap(), b"<urn:uuid:3>");
        assert_eq!(h.get("WARC-Payload-Digest").unwrap(), b"sha1:ORIGINAL");
        assert_eq!(h.get("WARC-Refers-To").unwrap(), b"<urn:uuid:1>");
        assert_eq!(h.get("WARC-Refers-To-Target-URI").unwrap(), b"http://example.com/a");
        assert_eq!(h.get("WARC-Refers-To-Date").unwrap(), b"2026-12-01T00:00:00Z");
        assert_eq!(h.get("WARC-Profile").unwrap(), profile(b"WARC/1.0").as_bytes());
        assert_eq!(h.get("Content-Length").unwrap(), http.len().to_string().as_bytes());
        assert_eq!(h.fields.iter().filter(|(n, _)| n == b"WARC-Payload-Digest").count(), 1);
        assert!(r.ends_with(http));
        use sha1::Digest as _;
        assert_eq!(h.get("WARC-Block-Digest").unwrap(), crate::format::cdx::sha1_string(&sha1::Sha1::digest(http).into()).as_bytes());
        // An original that names no payload digest gives no revisit.
        let bare = Header::parse(b"WARC/1.1\r\nWARC-Type: response\r\n\r\n").unwrap();
        assert!(revisit_record(&dup, http, &bare).is_none());
        assert_eq!(profile(b"WARC/1.1"), "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest");
    }

    /// A revisit resolved is the response it stands for: its identity, the payload's block,
    /// nothing a revisit alone says.
    #[test]
    fn a_resolved_revisit_is_a_response_with_its_identity() {
        let (dup, orig) = (Header::parse(DUP).unwrap(), Header::parse(ORIG).unwrap());
        let http = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
        let rev = Header::parse(&revisit_record(&dup, http, &orig).unwrap()).unwrap();
        let block = [&http[..], b"hello"].concat();
        let r = resolved_record(&rev, &block);
        let h = Header::parse(&r).unwrap();
        assert!(h.is("response"));
        assert_eq!(h.get("WARC-Record-ID").unwrap(), b"<urn:uuid:2>");
        assert_eq!(h.get("WARC-Target-URI").unwrap(), b"http://example.com/b");
        assert_eq!(h.get("WARC-Payload-Digest").unwrap(), b"sha1:ORIGINAL");
        for gone in ["WARC-Profile", "WARC-Truncated", "WARC-Refers-To", "WARC-Refers-To-Target-URI", "WARC-Refers-To-Date"] {
            assert!(h.get(gone).is_none(), "{gone}");
        }
        assert_eq!(h.get("Content-Length").unwrap(), block.len().to_string().as_bytes());
        assert!(r.ends_with(&block));
        assert_eq!(resolved_head(&rev, block.len() as u64).len() + block.len(), r.len());
    }
}
