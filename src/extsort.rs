//! Sorting in bounded memory: runs of at most `run_bytes` are sorted in memory and written
//! to temporary files, then merged. `warcfs index` and the mount's `/.warcfs/index.cdxj`
//! sort lines with it; `fsck` and `gc` sort fixed-size records (chunk references, blob
//! places), so that a pass over a store of any size holds one run.
//!
//! Kept by hand: the crates that do this (`extsort`) want a serde codec per item and a
//! thread pool; this is the one merge loop both of our item kinds need.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

/// Something a `Sorter` can spill to a run file and read back.
pub trait Item: Ord + Sized {
    /// Bytes it takes in memory and on disk (for the run budget).
    fn size(&self) -> usize;
    fn write_to(&self, w: &mut impl Write) -> io::Result<()>;
    /// The next item of a run, `None` at its end.
    fn read_from(r: &mut impl BufRead) -> io::Result<Option<Self>>;
}

/// Lines without their newline.
impl Item for String {
    fn size(&self) -> usize {
        self.len() + 1
    }
    fn write_to(&self, w: &mut impl Write) -> io::Result<()> {
        w.write_all(self.as_bytes())?;
        w.write_all(b"\n")
    }
    fn read_from(r: &mut impl BufRead) -> io::Result<Option<Self>> {
        let mut l = String::new();
        if r.read_line(&mut l)? == 0 {
            return Ok(None);
        }
        if l.ends_with('\n') {
            l.pop();
        }
        Ok(Some(l))
    }
}

/// Fixed-size records, ordered by their bytes.
impl<const N: usize> Item for [u8; N] {
    fn size(&self) -> usize {
        N
    }
    fn write_to(&self, w: &mut impl Write) -> io::Result<()> {
        w.write_all(self)
    }
    fn read_from(r: &mut impl BufRead) -> io::Result<Option<Self>> {
        let mut b = [0u8; N];
        if r.fill_buf()?.is_empty() {
            return Ok(None);
        }
        r.read_exact(&mut b)?;
        Ok(Some(b))
    }
}

/// Bytes of index lines sorted in memory at once (`warcfs index`, `/.warcfs/index.cdxj`).
pub const INDEX_RUN_BYTES: usize = 64 << 20;

pub struct Sorter<T: Item> {
    dir: PathBuf,
    run_bytes: usize,
    buf: Vec<T>,
    buf_bytes: usize,
    runs: Runs,
}

/// Lines, as `warcfs index` sorts them.
pub type LineSorter = Sorter<String>;

/// Run files, removed when dropped.
#[derive(Default)]
struct Runs(Vec<PathBuf>);

impl Drop for Runs {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

impl<T: Item> Sorter<T> {
    /// Sorts into runs of `run_bytes` kept in `dir` (created; its run files are removed when
    /// the sorter or its sorted stream is dropped).
    pub fn new(dir: &Path, run_bytes: usize) -> io::Result<Sorter<T>> {
        std::fs::create_dir_all(dir)?;
        Ok(Sorter { dir: dir.to_path_buf(), run_bytes: run_bytes.max(1), buf: Vec::new(), buf_bytes: 0, runs: Runs::default() })
    }

    pub fn push(&mut self, item: T) -> io::Result<()> {
        if self.buf.capacity() == 0 {
            // One allocation of about a run (a Vec left to double could take twice that).
            self.buf.reserve_exact(self.run_bytes / item.size().max(1) + 1);
        }
        self.buf_bytes += item.size();
        self.buf.push(item);
        if self.buf_bytes >= self.run_bytes {
            self.spill()?;
        }
        Ok(())
    }

    fn spill(&mut self) -> io::Result<()> {
        self.buf.sort_unstable();
        // Unique across the sorters of this process (a mount sorts for several readers).
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = self.dir.join(format!("run-{}-{n}", std::process::id()));
        self.runs.0.push(path.clone());
        let mut w = BufWriter::new(File::create(&path)?);
        for item in self.buf.drain(..) {
            item.write_to(&mut w)?;
        }
        w.flush()?;
        self.buf_bytes = 0;
        Ok(())
    }

    /// Everything pushed, in order.
    pub fn finish(mut self) -> io::Result<Sorted<T>> {
        if self.runs.0.is_empty() {
            self.buf.sort_unstable();
            return Ok(Sorted { mem: std::mem::take(&mut self.buf).into_iter(), readers: Vec::new(), heap: BinaryHeap::new(), _runs: Runs::default() });
        }
        self.spill()?;
        let mut readers = Vec::new();
        let mut heap = BinaryHeap::new();
        for (i, p) in self.runs.0.iter().enumerate() {
            let mut r = BufReader::with_capacity(64 << 10, File::open(p)?);
            if let Some(item) = T::read_from(&mut r)? {
                heap.push(Reverse((item, i)));
            }
            readers.push(r);
        }
        Ok(Sorted { mem: Vec::new().into_iter(), readers, heap, _runs: std::mem::take(&mut self.runs) })
    }
}

impl LineSorter {
    /// Writes every line pushed, sorted, one per line, to `out`; returns the bytes written.
    pub fn finish_into(self, out: &mut dyn Write) -> io::Result<u64> {
        let mut written = 0u64;
        for l in self.finish()? {
            let l = l?;
            out.write_all(l.as_bytes())?;
            out.write_all(b"\n")?;
            written += l.len() as u64 + 1;
        }
        Ok(written)
    }
}

/// The merged, sorted stream of a `Sorter`.
pub struct Sorted<T: Item> {
    mem: std::vec::IntoIter<T>,
    readers: Vec<BufReader<File>>,
    heap: BinaryHeap<Reverse<(T, usize)>>,
    _runs: Runs,
}

impl<T: Item> Iterator for Sorted<T> {
    type Item = io::Result<T>;

    fn next(&mut self) -> Option<io::Result<T>> {
        if let Some(item) = self.mem.next() {
            return Some(Ok(item));
        }
        let Reverse((item, i)) = self.heap.pop()?;
        match T::read_from(&mut self.readers[i]) {
            Ok(Some(next)) => self.heap.push(Reverse((next, i))),
            Ok(None) => {}
            Err(e) => return Some(Err(e)),
        }
        Some(Ok(item))
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
            let n = s.finish_into(&mut out).unwrap();
            let mut want = lines.clone();
            want.sort();
            let want = want.iter().map(|l| format!("{l}\n")).collect::<String>();
            assert_eq!(String::from_utf8(out).unwrap(), want, "runs of {run_bytes} bytes");
            assert_eq!(n as usize, want.len());
        }
        assert_eq!(std::fs::read_dir(dir.path().join("runs")).unwrap().count(), 0, "run files are removed");
    }

    #[test]
    fn sorts_fixed_records_across_runs() {
        let dir = tempfile::tempdir().unwrap();
        let recs: Vec<[u8; 12]> = (0..3000u32).map(|i| {
            let mut r = [0u8; 12];
            r[..4].copy_from_slice(&((i * 7919) % 3001).to_be_bytes());
            r[4..8].copy_from_slice(&i.to_le_bytes());
            r
        }).collect();
        let mut s = Sorter::new(&dir.path().join("runs"), 1000).unwrap();
        for r in &recs {
            s.push(*r).unwrap();
        }
        let sorted = s.finish().unwrap();
        assert!(std::fs::read_dir(dir.path().join("runs")).unwrap().count() > 10, "spilled into runs");
        let got: Vec<[u8; 12]> = sorted.collect::<io::Result<_>>().unwrap();
        let mut want = recs.clone();
        want.sort();
        assert_eq!(got, want);
        assert_eq!(std::fs::read_dir(dir.path().join("runs")).unwrap().count(), 0, "run files are removed");
    }
}
