//! The archive formats warcfs understands: gzip members (and how to rebuild them byte for
//! byte) and WARC/ARC records (where headers end and payloads begin). Parsing here only
//! decides how well a file dedups; it never decides whether bytes are stored.

pub mod cdx;
pub mod deflate;
pub mod gzip;
pub mod warc;
