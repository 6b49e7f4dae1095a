//! The archive formats warcfs understands: gzip members (and how to rebuild them byte for
//! byte), WARC/ARC records (where headers end and payloads begin) and ZIP archives (where a
//! WACZ's entries lie). Parsing here only
//! decides how well a file dedups; it never decides whether bytes are stored.

pub mod cdx;
pub mod deflate;
pub mod gzip;
pub(crate) mod varint;
pub mod warc;
pub mod zip;

/// Cases for the parsers' fuzz properties (`fuzz_*`): `default` in the test suite, or
/// `WARCFS_FUZZ_CASES` (`scripts/fuzz-parsers` runs 100,000 of each).
#[cfg(test)]
pub(crate) fn fuzz_cases(default: u32) -> u32 {
    std::env::var("WARCFS_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}
