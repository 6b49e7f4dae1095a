//! What unit tests share: where the real sample corpus is (`../shared/corpus/real`).

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
