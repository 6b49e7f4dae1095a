//! Unit tests of `zip`: the layouts of py-wacz (CPython's `zipfile`) and client-zip
//! (browsertrix-crawler, ArchiveWeb.page), ZIP64 where writers put it, and damaged archives.

use super::*;
use proptest::prelude::*;

/// How a test archive is written.
#[derive(Clone, Copy, Default)]
pub(crate) struct Style {
    /// client-zip: flag bit 3, zero CRC and sizes in local headers, a data descriptor with
    /// its signature after each entry (24 bytes with `zip64`, else 16).
    pub descriptors: bool,
    /// Descriptors without their signature (12 or 20 bytes), as the spec allows.
    pub unsigned_descriptors: bool,
    /// Sizes and offsets in the central directory's ZIP64 extra field, and a ZIP64 end
    /// record and locator, as writers do past 4 GiB.
    pub zip64: bool,
    /// An extra field in each local header (CPython puts a ZIP64 one there for large files).
    pub local_extra: bool,
    /// A comment after the end record.
    pub comment: &'static [u8],
}

/// A ZIP of `(name, bytes, deflated)` entries, in that order, and each entry's data range.
pub(crate) fn write_zip(entries: &[(&str, &[u8], bool)], style: Style) -> (Vec<u8>, Vec<(u64, u64)>) {
    let mut out = Vec::new();
    let mut central = Vec::new();
    let mut ranges = Vec::new();
    for (name, data, deflated) in entries {
        let body = if *deflated {
            use std::io::Write;
            let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::new(6));
            e.write_all(data).unwrap();
            e.finish().unwrap()
        } else {
            data.to_vec()
        };
        let crc = crc32fast::hash(data);
        let at = out.len() as u64;
        let flags: u16 = if style.descriptors { 8 } else { 0 };
        let method: u16 = if *deflated { 8 } else { 0 };
        let local_extra: &[u8] = if style.local_extra { &[0x99, 0x99, 4, 0, 1, 2, 3, 4] } else { &[] };
        out.extend_from_slice(&LOCAL.to_le_bytes());
        out.extend_from_slice(&[45, 0]);
        out.extend_from_slice(&flags.to_le_bytes());
        out.extend_from_slice(&method.to_le_bytes());
        out.extend_from_slice(&[0, 0, 0x21, 0]);
        let (lcrc, lsize, lcomp) = if style.descriptors { (0, 0, 0) } else { (crc, data.len() as u32, body.len() as u32) };
        out.extend_from_slice(&lcrc.to_le_bytes());
        out.extend_from_slice(&lcomp.to_le_bytes());
        out.extend_from_slice(&lsize.to_le_bytes());
        out.extend_from_slice(&(name.len() as u16).to_le_bytes());
        out.extend_from_slice(&(local_extra.len() as u16).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(local_extra);
        let data_at = out.len() as u64;
        out.extend_from_slice(&body);
        ranges.push((data_at, body.len() as u64));
        if style.descriptors || style.unsigned_descriptors {
            if !style.unsigned_descriptors {
                out.extend_from_slice(&0x0807_4b50u32.to_le_bytes());
            }
            out.extend_from_slice(&crc.to_le_bytes());
            if style.zip64 {
                out.extend_from_slice(&(body.len() as u64).to_le_bytes());
                out.extend_from_slice(&(data.len() as u64).to_le_bytes());
            } else {
                out.extend_from_slice(&(body.len() as u32).to_le_bytes());
                out.extend_from_slice(&(data.len() as u32).to_le_bytes());
            }
        }
        central.extend_from_slice(&CENTRAL.to_le_bytes());
        central.extend_from_slice(&[45, 3, 45, 0]);
        central.extend_from_slice(&flags.to_le_bytes());
        central.extend_from_slice(&method.to_le_bytes());
        central.extend_from_slice(&[0, 0, 0x21, 0]);
        central.extend_from_slice(&crc.to_le_bytes());
        let extra: Vec<u8> = if style.zip64 {
            let mut x = vec![1, 0, 24, 0];
            x.extend_from_slice(&(data.len() as u64).to_le_bytes());
            x.extend_from_slice(&(body.len() as u64).to_le_bytes());
            x.extend_from_slice(&at.to_le_bytes());
            x
        } else {
            Vec::new()
        };
        let (csize, ccomp, cat) = if style.zip64 { (u32::MAX, u32::MAX, u32::MAX) } else { (data.len() as u32, body.len() as u32, at as u32) };
        central.extend_from_slice(&ccomp.to_le_bytes());
        central.extend_from_slice(&csize.to_le_bytes());
        central.extend_from_slice(&(name.len() as u16).to_le_bytes());
        central.extend_from_slice(&(extra.len() as u16).to_le_bytes());
        central.extend_from_slice(&[0; 6]);
        central.extend_from_slice(&[0, 0, 0xa4, 0x81]);
        central.extend_from_slice(&cat.to_le_bytes());
        central.extend_from_slice(name.as_bytes());
        central.extend_from_slice(&extra);
    }
    let cd_at = out.len() as u64;
    out.extend_from_slice(&central);
    let n = entries.len() as u64;
    if style.zip64 {
        let end64_at = out.len() as u64;
        out.extend_from_slice(&END64.to_le_bytes());
        out.extend_from_slice(&44u64.to_le_bytes());
        out.extend_from_slice(&[45, 3, 45, 0]);
        out.extend_from_slice(&[0; 8]);
        out.extend_from_slice(&n.to_le_bytes());
        out.extend_from_slice(&n.to_le_bytes());
        out.extend_from_slice(&(central.len() as u64).to_le_bytes());
        out.extend_from_slice(&cd_at.to_le_bytes());
        out.extend_from_slice(&LOCATOR64.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&end64_at.to_le_bytes());
        out.extend_from_slice(&1u32.to_le_bytes());
    }
    out.extend_from_slice(&END.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    let (n16, size32, at32) = if style.zip64 { (0xffff, u32::MAX, u32::MAX) } else { (n as u16, central.len() as u32, cd_at as u32) };
    out.extend_from_slice(&n16.to_le_bytes());
    out.extend_from_slice(&n16.to_le_bytes());
    out.extend_from_slice(&size32.to_le_bytes());
    out.extend_from_slice(&at32.to_le_bytes());
    out.extend_from_slice(&(style.comment.len() as u16).to_le_bytes());
    out.extend_from_slice(style.comment);
    (out, ranges)
}

fn layout_of(zip: &[u8]) -> Result<Layout> {
    layout(zip.len() as u64, &mut |at, len| {
        let from = (at as usize).min(zip.len());
        Ok(zip[from..from.saturating_add(len).min(zip.len())].to_vec())
    })
}

fn sample_entries() -> Vec<(&'static str, Vec<u8>, bool)> {
    vec![
        ("indexes/index.cdx.gz", b"\x1f\x8b\x08 not really".to_vec(), false),
        ("indexes/index.idx", b"!meta 0 {}\n".repeat(20), true),
        ("archive/data.warc.gz", (0..5000u32).map(|i| (i * 7 % 251) as u8).collect(), false),
        ("pages/pages.jsonl", Vec::new(), false),
        ("datapackage.json", b"{\"profile\": \"data-package\"}".to_vec(), true),
    ]
}

fn styles() -> Vec<Style> {
    let d = Style::default();
    vec![
        d,
        Style { descriptors: true, ..d },
        Style { descriptors: true, zip64: true, ..d },
        Style { zip64: true, local_extra: true, ..d },
        Style { unsigned_descriptors: true, comment: b"a comment", ..d },
    ]
}

/// Every layout places each entry's data where the writer put it, with its sizes, CRC and
/// method from the central directory.
#[test]
fn every_writers_layout_places_each_entry() {
    let entries = sample_entries();
    let refs: Vec<(&str, &[u8], bool)> = entries.iter().map(|(n, d, z)| (*n, d.as_slice(), *z)).collect();
    for style in styles() {
        let (zip, ranges) = write_zip(&refs, style);
        let l = layout_of(&zip).unwrap();
        assert_eq!(l.entries.len(), entries.len());
        assert_eq!(l.size, zip.len() as u64);
        for ((e, (name, data, deflated)), (at, len)) in l.entries.iter().zip(&entries).zip(&ranges) {
            assert_eq!(e.name, name.as_bytes());
            assert_eq!((e.data_at, e.comp_size), (*at, *len));
            assert_eq!(e.size, data.len() as u64);
            assert_eq!(e.crc, crc32fast::hash(data));
            assert_eq!(e.is_stored(), !deflated);
            if !deflated {
                assert_eq!(&zip[e.data_at as usize..e.data_end() as usize], &data[..]);
            }
        }
        assert!(l.entries.last().unwrap().data_end() <= l.central_at);
    }
}

/// Damage where a reader looks (the tail, the directory, the local headers) is an error
/// that says what is wrong, never a layout that places an entry wrongly.
#[test]
fn a_zip_that_is_not_one_is_refused_with_what_is_wrong() {
    let entries = sample_entries();
    let refs: Vec<(&str, &[u8], bool)> = entries.iter().map(|(n, d, z)| (*n, d.as_slice(), *z)).collect();
    let (zip, _) = write_zip(&refs, Style::default());
    let end = zip.len() - END_LEN;
    let err = |z: &[u8]| layout_of(z).unwrap_err().to_string();
    // Not a ZIP, or its tail cut off.
    assert!(err(b"WARC/1.0\r\n").contains("not a ZIP"));
    assert!(err(&zip[..zip.len() - 5]).contains("no end of central directory"));
    assert!(err(&zip[..zip.len() / 2]).contains("no end of central directory"));
    // A comment length that does not reach the end of the file.
    let mut z = zip.clone();
    z[end + 20] = 3;
    assert!(err(&z).contains("no end of central directory"));
    // The directory placed past its end record, or a count it cannot hold.
    let mut z = zip.clone();
    z[end + 16..end + 20].copy_from_slice(&(end as u32).to_le_bytes());
    assert!(err(&z).contains("outside the file"));
    let mut z = zip.clone();
    z[end + 10..end + 12].copy_from_slice(&60000u16.to_le_bytes());
    assert!(err(&z).contains("more entries"));
    // A central header that points where no local header is, or at another entry's.
    let cd_at = u32_at(&zip, end + 16) as usize;
    let mut z = zip.clone();
    z[cd_at + 42..cd_at + 46].copy_from_slice(&7u32.to_le_bytes());
    assert!(err(&z).starts_with("damaged ZIP archive"), "{}", err(&z));
    let second = zip.windows(4).rposition(|w| w == CENTRAL.to_le_bytes()).unwrap();
    let mut z = zip.clone();
    z[second + 42..second + 46].copy_from_slice(&0u32.to_le_bytes());
    assert!(err(&z).contains("overlap") || err(&z).contains("another entry"));
    // A size that runs an entry into the directory.
    let mut z = zip.clone();
    z[second + 20..second + 24].copy_from_slice(&(zip.len() as u32).to_le_bytes());
    assert!(err(&z).contains("runs into the central directory"));
    // ZIP64 values with no ZIP64 end record.
    let mut z = zip.clone();
    z[end + 16..end + 20].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(err(&z).contains("ZIP64"));
}

/// The largest directory read is bounded before anything is allocated for it.
#[test]
fn a_directory_larger_than_the_bound_is_not_read() {
    let (mut zip, _) = write_zip(&[("a", b"abc", false)], Style { zip64: true, ..Style::default() });
    let loc = zip.len() - END_LEN - LOCATOR64_LEN;
    let end64 = u64_at(&zip, loc + 8) as usize;
    zip[end64 + 40..end64 + 48].copy_from_slice(&(MAX_CENTRAL + 1).to_le_bytes());
    let mut asked = 0usize;
    let r = layout(zip.len() as u64, &mut |at, len| {
        asked = asked.max(len);
        Ok(zip[at as usize..(at as usize + len).min(zip.len())].to_vec())
    });
    assert!(r.unwrap_err().to_string().contains("64 MiB"));
    assert!(asked <= TAIL);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: crate::format::fuzz_cases(256), ..ProptestConfig::default() })]

    /// Fuzz: a ZIP with bytes changed anywhere is read or refused, never a panic, and what
    /// is read still places every entry inside the file, in order, without overlaps.
    #[test]
    fn fuzz_damaged_zips(style in 0usize..5, flips in proptest::collection::vec((any::<u16>(), any::<u8>()), 1..6)) {
        let entries = sample_entries();
        let refs: Vec<(&str, &[u8], bool)> = entries.iter().map(|(n, d, z)| (*n, d.as_slice(), *z)).collect();
        let (mut zip, _) = write_zip(&refs, styles()[style]);
        let len = zip.len();
        for (at, b) in flips {
            // Mostly in the framing, where the parser looks.
            let i = if at % 2 == 0 { len - 1 - (at as usize / 2) % 600.min(len) } else { at as usize % len };
            zip[i] = b;
        }
        if let Ok(l) = layout_of(&zip) {
            let mut prev = 0;
            for e in &l.entries {
                prop_assert!(e.header_at >= prev && e.data_at >= e.header_at && e.data_end() <= l.central_at);
                prev = e.data_end();
            }
            prop_assert!(l.central_at <= zip.len() as u64);
        }
    }
}
