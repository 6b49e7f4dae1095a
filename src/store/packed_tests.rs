//! Header blocks packed (format 11 and 12: `format::warc::packed`): smaller than a version 9
//! store's, and read back exactly through gc's settling, fsck and a rebuilt index.

use super::tests::{meta, open_config, read_all, site_page};
use super::*;
use crate::pack::ChunkKind;
use sha1::Digest as _;

/// A wget-like crawl: request and response records with record ids and SHA-1 digests.
fn crawl(pages: u32) -> Vec<u8> {
    let uuid = |n: u32| {
        let h = data_encoding::HEXLOWER.encode(&sha2::Sha256::digest(n.to_le_bytes()));
        format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
    };
    let b32 = |bytes: &[u8]| data_encoding::BASE32_NOPAD.encode(&sha1::Sha1::digest(bytes));
    let mut out = Vec::new();
    for i in 0..pages {
        let req = format!("GET /page-{i}.html HTTP/1.1\r\nHost: example.org\r\nUser-Agent: Wget/1.21.3\r\nAccept: */*\r\n\r\n");
        out.extend(format!(
            "WARC/1.0\r\nWARC-Type: request\r\nWARC-Target-URI: <http://example.org/page-{i}.html>\r\nWARC-Record-ID: <urn:uuid:{}>\r\nWARC-Block-Digest: sha1:{}\r\nContent-Length: {}\r\n\r\n{req}\r\n\r\n",
            uuid(2 * i), b32(req.as_bytes()), req.len()
        ).into_bytes());
        let body = site_page(i);
        let http = format!("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\r\n", body.len());
        let block = [http.as_bytes(), &body].concat();
        out.extend(format!(
            "WARC/1.0\r\nWARC-Type: response\r\nWARC-Record-ID: <urn:uuid:{}>\r\nWARC-Concurrent-To: <urn:uuid:{}>\r\nWARC-Block-Digest: sha1:{}\r\nWARC-Payload-Digest: sha1:{}\r\nContent-Length: {}\r\n\r\n",
            uuid(2 * i + 1), uuid(2 * i), b32(&block), b32(&body), block.len()
        ).into_bytes());
        out.extend(block);
        out.extend(b"\r\n\r\n");
    }
    out
}

fn header_block_bytes(s: &Store) -> u64 {
    s.index.chunk_iter().map(|r| r.unwrap().1).filter(|e| e.kind == ChunkKind::Literal as u8).map(|e| e.stored_len as u64).sum()
}

#[test]
fn header_blocks_are_packed_smaller_and_read_back_through_gc_and_repair() {
    let data = crawl(300);
    let (old_dir, dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let old = open_config(old_dir.path(), Config { version: DELTAS_V9, ..Config::default() }, crate::digest::sha256);
    let s = open_config(dir.path(), Config::default(), crate::digest::sha256);
    assert!(packed_headers(s.config().version) && !packed_headers(old.config().version));
    for st in [&old, &s] {
        st.put_file(ROOT_INO, b"crawl.warc", &data, meta()).unwrap();
        assert_eq!(read_all(st, "/crawl.warc"), data);
    }
    let (packed, plain) = (header_block_bytes(&s), header_block_bytes(&old));
    assert!(packed * 100 < plain * 85, "header blocks: {packed} packed, {plain} as they are");
    // gc settles the packs (unpacks, packs again at its level); fsck reads every chunk.
    s.gc().unwrap();
    assert_eq!(read_all(&s, "/crawl.warc"), data);
    assert!(s.fsck(true).unwrap().problems.is_empty());
    drop(s);
    std::fs::remove_dir_all(dir.path().join("index")).unwrap();
    crate::nodes::repair_index(dir.path()).unwrap();
    let s = open_config(dir.path(), Config::default(), crate::digest::sha256);
    assert_eq!(s.config().version, PACKED_V11);
    assert_eq!(read_all(&s, "/crawl.warc"), data);
}
