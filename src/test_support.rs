//! What tests share (unit tests, and the integration tests through `warcfs::test_support`):
//! where the real sample corpus is (`../shared/corpus/real`), a PDF made by hand.

pub fn real_corpus() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus/real")
}

/// Every sample file of the real corpus (its READMEs left out), sorted.
pub fn real_corpus_files() -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![real_corpus()];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.file_name().unwrap() != "README.md" {
                out.push(p);
            }
        }
    }
    out.sort();
    assert!(out.len() > 20, "the real corpus is missing ({} files)", out.len());
    out
}

/// Flips the last stored byte of the blob of chunk entry `e` in the pack file `pack` (its
/// checksum left as it was: bit rot), and returns a closure that mends it again.
pub fn rot_last_stored_byte(pack: &std::path::Path, e: &crate::index::ChunkEntry) -> impl Fn() {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().read(true).write(true).open(pack).unwrap();
    let at = e.offset + (crate::pack::BLOB_HEADER_LEN as u64) + e.stored_len as u64 - 1;
    let mut byte = [0u8];
    f.read_exact_at(&mut byte, at).unwrap();
    f.write_all_at(&[byte[0] ^ 0x55], at).unwrap();
    move || f.write_all_at(&byte, at).unwrap()
}

/// A one-page PDF showing `words` in Helvetica, with `title` (a PDF string: `(...)` or
/// `<FEFF...>`) as its Info Title if given; its xref table's offsets counted.
pub fn one_page_pdf(title: Option<&str>, words: &str) -> Vec<u8> {
    let content = format!("BT /F1 12 Tf 72 720 Td ({words}) Tj ET");
    let mut objects = vec![
        "<< /Type /Catalog /Pages 2 0 R >>".to_string(),
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>".into(),
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>".into(),
        format!("<< /Length {} >>\nstream\n{content}\nendstream", content.len()),
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".into(),
    ];
    if let Some(t) = title {
        objects.push(format!("<< /Title {t} >>"));
    }
    let mut out = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::new();
    for (i, o) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n{o}\nendobj\n", i + 1).as_bytes());
    }
    let xref = out.len();
    out.extend_from_slice(format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes());
    for o in offsets {
        out.extend_from_slice(format!("{o:010} 00000 n \n").as_bytes());
    }
    let info = title.map(|_| format!(" /Info {} 0 R", objects.len())).unwrap_or_default();
    out.extend_from_slice(format!("trailer\n<< /Size {} /Root 1 0 R{info} >>\nstartxref\n{xref}\n%%EOF\n", objects.len() + 1).as_bytes());
    out
}
