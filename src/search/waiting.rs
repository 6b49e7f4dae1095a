//! Revisits waiting for their original's text: a revisit whose payload digest names no text
//! the index holds yet (its original is in a file not stored or not indexed yet, or is no
//! text). Each is found by its place (when its file is removed or renamed) and by its digest
//! (when a response of that digest gets a text), each by a key prefix: no update, `rm` or
//! move reads every waiting revisit, however many a store of deduplicated WARCs whose
//! originals are elsewhere holds.
//!
//! | tag | key | value |
//! |---|---|---|
//! | `A` | path, offset (its place) | the digest string, NUL, its capture row (postcard) |
//! | `W` | digest string, NUL, path, offset | empty |
//! | `M` | `waiting` | how many wait (u64) |

use rocksdb::WriteBatch;

use super::catalog::{key, path_part, Catalog, CaptureRow, RowMoves};
use super::Result;

const COUNT: &[u8] = b"Mwaiting";

/// A place as keys hold it: the path, NUL, the offset (big-endian).
fn place(path: &str, offset: u64) -> Vec<u8> {
    [&path_part(path)[..], &offset.to_be_bytes()].concat()
}

/// The path and offset of a place.
fn split_place(p: &[u8]) -> Option<(String, u64)> {
    let nul = p.iter().position(|&b| b == 0)?;
    let offset = u64::from_be_bytes(p.get(nul + 1..nul + 9)?.try_into().ok()?);
    Some((String::from_utf8_lossy(&p[..nul]).into_owned(), offset))
}

/// Records that the revisit at `path`, `offset` waits for a text of `digest` (which holds
/// no NUL: the caller leaves such revisits out).
pub(super) fn put(batch: &mut WriteBatch, digest: &str, path: &str, offset: u64, row: &CaptureRow) {
    let p = place(path, offset);
    let value = [digest.as_bytes(), &[0], &postcard::to_allocvec(row).unwrap_or_default()].concat();
    batch.put(key(b'A', &[&p]), value);
    batch.put(key(b'W', &[digest.as_bytes(), &[0], &p]), []);
}

/// The revisits waiting for `digest`, as (path, offset, row); their rows deleted in `batch`.
pub(super) fn take_of_digest(cat: &Catalog, batch: &mut WriteBatch, digest: &str) -> Result<Vec<(String, u64, CaptureRow)>> {
    let prefix = key(b'W', &[digest.as_bytes(), &[0]]);
    let mut places = Vec::new();
    cat.scan(&prefix, &mut |k, _| {
        places.push(k[prefix.len()..].to_vec());
        Ok(true)
    })?;
    let mut out = Vec::new();
    for p in places {
        batch.delete(key(b'W', &[digest.as_bytes(), &[0], &p]));
        let a = key(b'A', &[&p]);
        let row = cat.get(&a)?.and_then(|v| postcard::from_bytes::<CaptureRow>(&v[v.iter().position(|&b| b == 0)? + 1..]).ok());
        batch.delete(a);
        if let (Some(row), Some((path, offset))) = (row, split_place(&p)) {
            out.push((path, offset, row));
        }
    }
    Ok(out)
}

/// A waiting revisit as its `A` row holds it: its place, its digest string, the row's value.
type Waiting = (Vec<u8>, Vec<u8>, Vec<u8>);

/// The waiting revisits whose place begins with `prefix` (a file's, as `places_of` gives
/// them).
fn under(cat: &Catalog, prefix: &[u8]) -> Result<Vec<Waiting>> {
    let a = key(b'A', &[prefix]);
    let mut rows = Vec::new();
    cat.scan(&a, &mut |k, v| {
        if let Some(nul) = v.iter().position(|&b| b == 0) {
            rows.push((k[1..].to_vec(), v[..nul].to_vec(), v.to_vec()));
        }
        Ok(true)
    })?;
    Ok(rows)
}

/// Deletes the waiting revisits under `prefix` in `batch`; returns how many.
pub(super) fn remove_under(cat: &Catalog, batch: &mut WriteBatch, prefix: &[u8]) -> Result<u64> {
    let rows = under(cat, prefix)?;
    for (p, digest, _) in &rows {
        batch.delete(key(b'A', &[p]));
        batch.delete(key(b'W', &[digest, &[0], p]));
    }
    Ok(rows.len() as u64)
}

/// Moves the waiting revisits under `old` to the same places under `new`, in `moves`.
pub(super) fn move_under(cat: &Catalog, moves: &mut RowMoves, old: &[u8], new: &[u8]) -> Result<()> {
    for (p, digest, value) in under(cat, old)? {
        let np = [new, &p[old.len()..]].concat();
        moves.dels.push(key(b'A', &[&p]));
        moves.dels.push(key(b'W', &[&digest, &[0], &p]));
        moves.puts.push((key(b'A', &[&np]), value));
        moves.puts.push((key(b'W', &[&digest, &[0], &np]), Vec::new()));
    }
    Ok(())
}

/// How many revisits wait.
pub(super) fn count(cat: &Catalog) -> Result<u64> {
    Ok(cat.get(COUNT)?.and_then(|v| v.get(..8)?.try_into().ok()).map(u64::from_be_bytes).unwrap_or(0))
}

/// Sets the count, in `batch`, to what it was changed by `delta`.
pub(super) fn count_by(cat: &Catalog, batch: &mut WriteBatch, delta: i64) -> Result<()> {
    if delta != 0 {
        let now = (count(cat)? as i64 + delta).max(0) as u64;
        batch.put(COUNT, now.to_be_bytes());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(url: &str) -> CaptureRow {
        CaptureRow { url: url.into(), timestamp: "20240101000000".into(), status: "200".into(), mime: "text/html".into(), digest: "sha1:X".into(), length: 10, revisit: true }
    }

    fn rows(cat: &Catalog, tag: u8) -> usize {
        let mut n = 0;
        cat.scan(&[tag], &mut |_, _| {
            n += 1;
            Ok(true)
        })
        .unwrap();
        n
    }

    #[test]
    fn waiting_revisits_are_found_by_digest_and_by_place_and_counted() {
        let tmp = tempfile::TempDir::new().unwrap();
        let cat = Catalog::open(tmp.path(), false).unwrap();
        let mut b = WriteBatch::default();
        put(&mut b, "sha1:AAA", "/a.warc.gz", 7, &row("http://a/"));
        put(&mut b, "sha1:AAA", "/b.warc.gz", 9, &row("http://b/"));
        put(&mut b, "sha1:BBB", "/a.warc.gz", 70, &row("http://c/"));
        put(&mut b, "sha1:CCC", "/a.warc.gz.old", 1, &row("http://d/"));
        count_by(&cat, &mut b, 4).unwrap();
        cat.write(b).unwrap();
        assert_eq!(count(&cat).unwrap(), 4);

        // By digest: exactly that digest's revisits, with their places and rows.
        let mut b = WriteBatch::default();
        let mut got = take_of_digest(&cat, &mut b, "sha1:AAA").unwrap();
        got.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(got, vec![("/a.warc.gz".to_string(), 7, row("http://a/")), ("/b.warc.gz".to_string(), 9, row("http://b/"))]);
        count_by(&cat, &mut b, -2).unwrap();
        cat.write(b).unwrap();
        assert_eq!((rows(&cat, b'A'), rows(&cat, b'W'), count(&cat).unwrap()), (2, 2, 2));

        // By place: a file's own (not those of a file whose name it begins), moved, removed.
        let (mut moves, mut b) = (RowMoves::default(), WriteBatch::default());
        move_under(&cat, &mut moves, &path_part("/a.warc.gz"), &path_part("/z.warc.gz")).unwrap();
        moves.apply(&mut b);
        cat.write(b).unwrap();
        let mut b = WriteBatch::default();
        let moved = take_of_digest(&cat, &mut b, "sha1:BBB").unwrap();
        assert_eq!(moved, vec![("/z.warc.gz".to_string(), 70, row("http://c/"))]);
        let mut b = WriteBatch::default();
        assert_eq!(remove_under(&cat, &mut b, &path_part("/z.warc.gz")).unwrap(), 1);
        assert_eq!(remove_under(&cat, &mut b, &path_part("/a.warc.gz")).unwrap(), 0);
        cat.write(b).unwrap();
        assert_eq!((rows(&cat, b'A'), rows(&cat, b'W')), (1, 1), "only /a.warc.gz.old's is left");
    }
}
