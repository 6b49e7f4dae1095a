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
