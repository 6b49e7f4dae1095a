//! Sorting lines in bounded memory: runs of at most `run_bytes` are sorted in memory and
//! written to temporary files, then merged. What `warcfs index` and the mount's
//! `/.warcfs/index.cdxj` use, so that indexing an archive of any size holds one run.

use std::collections::BinaryHeap;
use std::cmp::Reverse;
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

pub struct LineSorter {
    dir: PathBuf,
    run_bytes: usize,
    buf: Vec<String>,
    buf_bytes: usize,
    runs: Vec<PathBuf>,
}

impl LineSorter {
    /// Sorts into runs of `run_bytes` kept in `dir` (created; its run files are removed as
    /// the sorter is dropped).
    pub fn new(dir: &Path, run_bytes: usize) -> io::Result<LineSorter> {
        std::fs::create_dir_all(dir)?;
        Ok(LineSorter { dir: dir.to_path_buf(), run_bytes: run_bytes.max(1), buf: Vec::new(), buf_bytes: 0, runs: Vec::new() })
    }

    pub fn push(&mut self, line: String) -> io::Result<()> {
        self.buf_bytes += line.len() + 1;
        self.buf.push(line);
        if self.buf_bytes >= self.run_bytes {
            self.spill()?;
        }
        Ok(())
    }

    fn spill(&mut self) -> io::Result<()> {
        self.buf.sort_unstable();
        let path = self.dir.join(format!("run-{}-{}", std::process::id(), self.runs.len()));
        let mut w = BufWriter::new(File::create(&path)?);
        for l in self.buf.drain(..) {
            w.write_all(l.as_bytes())?;
            w.write_all(b"\n")?;
        }
        w.flush()?;
        self.runs.push(path);
        self.buf_bytes = 0;
        Ok(())
    }

    /// Writes every line pushed, sorted, one per line, to `out`; returns the bytes written.
    pub fn finish(mut self, out: &mut dyn Write) -> io::Result<u64> {
        let mut written = 0u64;
        if self.runs.is_empty() {
            self.buf.sort_unstable();
            for l in self.buf.drain(..) {
                out.write_all(l.as_bytes())?;
                out.write_all(b"\n")?;
                written += l.len() as u64 + 1;
            }
            return Ok(written);
        }
        self.spill()?;
        let mut readers: Vec<std::io::Lines<BufReader<File>>> =
            self.runs.iter().map(|p| File::open(p).map(|f| BufReader::with_capacity(64 << 10, f).lines())).collect::<io::Result<_>>()?;
        let mut heap = BinaryHeap::new();
        for (i, r) in readers.iter_mut().enumerate() {
            if let Some(l) = r.next() {
                heap.push(Reverse((l?, i)));
            }
        }
        while let Some(Reverse((l, i))) = heap.pop() {
            out.write_all(l.as_bytes())?;
            out.write_all(b"\n")?;
            written += l.len() as u64 + 1;
            if let Some(next) = readers[i].next() {
                heap.push(Reverse((next?, i)));
            }
        }
        Ok(written)
    }
}

impl Drop for LineSorter {
    fn drop(&mut self) {
        for p in &self.runs {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_runs_into_one_sorted_stream() {
        let dir = tempfile::tempdir().unwrap();
        let lines: Vec<String> = (0..5000u32).map(|i| format!("{:08} line", (i * 7919) % 5003)).collect();
        for run_bytes in [2_000, 10_000, 1 << 30] {
            let mut s = LineSorter::new(&dir.path().join("runs"), run_bytes).unwrap();
            for l in &lines {
                s.push(l.clone()).unwrap();
            }
            let mut out = Vec::new();
            let n = s.finish(&mut out).unwrap();
            let mut want = lines.clone();
            want.sort();
            let want = want.iter().map(|l| format!("{l}\n")).collect::<String>();
            assert_eq!(String::from_utf8(out).unwrap(), want, "runs of {run_bytes} bytes");
            assert_eq!(n as usize, want.len());
        }
        assert_eq!(std::fs::read_dir(dir.path().join("runs")).unwrap().count(), 0, "run files are removed");
    }
}
