use super::*;
use crate::format::warc::{segment, SpanKind};
use proptest::prelude::*;

fn request(uuid: &str, target: &str) -> Vec<u8> {
    let block = format!("GET {target} HTTP/1.1\r\nHost: example.org\r\nUser-Agent: Wget/1.21.3\r\n\r\n");
    let digest = BASE32_NOPAD.encode(&sha1::Sha1::digest(block.as_bytes()));
    format!(
        "WARC/1.0\r\nWARC-Type: request\r\nWARC-Target-URI: <http://example.org{target}>\r\nWARC-Record-ID: <urn:uuid:{uuid}>\r\nWARC-Block-Digest: sha1:{digest}\r\nContent-Length: {}\r\n\r\n{block}\r\n\r\n",
        block.len()
    )
    .into_bytes()
}

/// A file's text: all of it that gunzips, or its bytes if it is not gzip.
fn gunzip_or_plain(path: &std::path::Path) -> Vec<u8> {
    use std::io::Read;
    let raw = std::fs::read(path).unwrap();
    if !raw.starts_with(&[0x1f, 0x8b]) {
        return raw;
    }
    let mut out = Vec::new();
    let _ = flate2::read::MultiGzDecoder::new(&raw[..]).read_to_end(&mut out);
    out
}

fn tokens(packed: &[u8], token: u8) -> usize {
    // Counts a token's first bytes, passing over what escapes and digests carry.
    let (mut i, mut n) = (0, 0);
    while i < packed.len() {
        match packed[i] {
            ESCAPE => i += 2,
            UUID => {
                n += (token == UUID) as usize;
                i += 17;
            }
            DIGEST => {
                n += (token == DIGEST) as usize;
                i += 2 + Encoding::from_u8(packed[i + 1]).unwrap().bytes();
            }
            DERIVED => {
                n += (token == DERIVED) as usize;
                i += 2;
                varint::get(packed, &mut i).unwrap();
            }
            _ => i += 1,
        }
    }
    n
}

fn round_trip(raw: &[u8]) -> Vec<u8> {
    let packed = pack(raw);
    assert_eq!(unpack(&packed, raw.len()).expect("unpacks"), raw);
    packed
}

#[test]
fn a_request_digest_is_derived_and_ids_become_bytes() {
    let mut raw = request("f5affc6d-6749-4bce-a198-2084576fa088", "/");
    raw.extend(request("0d3a9c1e-2b4f-4a6d-8e9f-0123456789ab", "/a.html"));
    let packed = round_trip(&raw);
    assert_eq!(tokens(&packed, DERIVED), 2);
    assert_eq!(tokens(&packed, UUID), 2);
    // A derived digest's 32 characters take 3 bytes, an id's 36 take 17.
    assert_eq!(packed.len() + 2 * 29 + 2 * 19, raw.len());
}

#[test]
fn a_digest_whose_block_is_elsewhere_is_kept_as_bytes() {
    // A response's block (its payload) is not in the header bytes: the digest is stored.
    let raw = b"WARC/1.0\r\nWARC-Type: response\r\nWARC-Block-Digest: sha1:BRMKMD4OZWJTGPQSYAVNNN3VUDKGEZNB\r\nWARC-Payload-Digest: sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\r\nContent-Length: 5000\r\n\r\nHTTP/1.1 200 OK\r\n\r\n";
    let packed = round_trip(raw);
    assert_eq!((tokens(&packed, DIGEST), tokens(&packed, DERIVED)), (2, 0));
    // A request whose digest is wrong keeps it as written.
    let mut bad = request("f5affc6d-6749-4bce-a198-2084576fa088", "/");
    let at = find(&bad, b"sha1:").unwrap() + 5;
    bad[at] = if bad[at] == b'A' { b'B' } else { b'A' };
    let packed = round_trip(&bad);
    assert_eq!((tokens(&packed, DIGEST), tokens(&packed, DERIVED)), (1, 0));
}

#[test]
fn what_is_not_canonical_stays_as_it_is() {
    for raw in [
        &b"urn:uuid:F5AFFC6D-6749-4BCE-A198-2084576FA088 uppercase"[..],
        b"urn:uuid:f5affc6d-6749-4bce-a198-2084576fa08 short",
        b"sha1:BRMKMD4OZWJTGPQSYAVNNN3VUDKGEZNBX one character too many",
        b"sha1:brmkmd4ozwjtgpqsyavnnn3vudkgeznb lowercase base32",
        b"sha256:9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08 uppercase hex",
        b"\x00\x01\x02\x03\x04\x05\x06\x07 bytes that are tokens, and a lone sha1: urn:uuid:",
    ] {
        let packed = round_trip(raw);
        assert_eq!(tokens(&packed, UUID) + tokens(&packed, DIGEST) + tokens(&packed, DERIVED), 0, "{}", String::from_utf8_lossy(raw));
    }
}

/// The real corpus's header bytes, cut into blocks as ingest cuts them, pack and unpack
/// exactly, and pack smaller: every writer's ids and digests are found.
#[test]
fn real_corpus_headers_round_trip_and_shrink() {
    let (mut raw_total, mut packed_total, mut derived) = (0usize, 0usize, 0usize);
    for path in crate::test_support::real_corpus_files() {
        let plain = gunzip_or_plain(&path);
        let seg = segment(&plain);
        let mut block = Vec::new();
        for s in seg.spans.iter().filter(|s| s.kind == SpanKind::Header) {
            block.extend_from_slice(&plain[s.start as usize..(s.start + s.len) as usize]);
            if block.len() > 64 << 10 {
                let packed = round_trip(&block);
                (raw_total, packed_total, derived) = (raw_total + block.len(), packed_total + packed.len(), derived + tokens(&packed, DERIVED));
                block.clear();
            }
        }
        let packed = round_trip(&block);
        (raw_total, packed_total, derived) = (raw_total + block.len(), packed_total + packed.len(), derived + tokens(&packed, DERIVED));
    }
    assert!(derived > 100, "request digests derived: {derived}");
    assert!(packed_total * 100 < raw_total * 95, "{packed_total} of {raw_total}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(crate::format::fuzz_cases(256)))]

    /// Fuzz: any bytes, and any made of the pieces tokens are read from, round-trip.
    #[test]
    fn fuzz_any_bytes_round_trip(parts in proptest::collection::vec(prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..24),
        Just(b"urn:uuid:f5affc6d-6749-4bce-a198-2084576fa088".to_vec()),
        Just(b"sha1:BRMKMD4OZWJTGPQSYAVNNN3VUDKGEZNB".to_vec()),
        Just(b"sha1:".to_vec()), Just(b"\r\n\r\n".to_vec()), Just(b"\nWARC/1.0\r\nContent-Length: 3\r\n".to_vec()),
        Just(request("f5affc6d-6749-4bce-a198-2084576fa088", "/x")),
    ], 0..40)) {
        round_trip(&parts.concat());
    }

    /// Fuzz: damaged packed bytes give an error or bytes of the stated length, never a panic.
    #[test]
    fn fuzz_damaged_packed_bytes_are_refused_or_bounded(flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6), cut in any::<usize>(), len in 0usize..2000) {
        let mut raw = request("f5affc6d-6749-4bce-a198-2084576fa088", "/");
        raw.extend(request("0d3a9c1e-2b4f-4a6d-8e9f-0123456789ab", "/b"));
        let mut packed = pack(&raw);
        for (i, b) in flips {
            let i = i % packed.len();
            packed[i] ^= b;
        }
        packed.truncate(cut % (packed.len() + 1));
        if let Ok(out) = unpack(&packed, len) {
            prop_assert_eq!(out.len(), len);
        }
    }
}
