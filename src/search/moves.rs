//! Files renamed in the store: their catalog rows move to the new path, and nothing is read
//! again. The index knows files by path (`F` rows name the recipe each path was indexed
//! under); a path gone whose recipe now stands at a new path is the same file moved (a
//! recipe is its bytes), so its captures are the same but for their path. Without this, `mv`
//! of a crawl into another directory read and hashed every payload of it again.

use std::collections::{BTreeMap, HashMap};

use super::catalog::{key, places_of, Catalog, RowMoves};
use super::Result;
use crate::recipe::RecipeHead;

/// Pairs the files `gone` from the index with the `new` ones holding the same recipe: those
/// are moves, taken out of both lists and returned (from, to, recipe id). A WACZ pairs only
/// with a WACZ, a WARC with a WARC (their captures are named differently).
pub(super) fn renamed(gone: &mut Vec<String>, new: &mut Vec<(String, RecipeHead)>, indexed: &BTreeMap<String, u64>) -> Vec<(String, String, u64)> {
    let wacz = |p: &str| crate::store::is_wacz_name(p.as_bytes());
    let mut by_id: HashMap<(u64, bool), Vec<String>> = HashMap::new();
    for p in gone.iter() {
        if let Some(&id) = indexed.get(p) {
            by_id.entry((id, wacz(p))).or_default().push(p.clone());
        }
    }
    let mut moves = Vec::new();
    new.retain(|(to, head)| match by_id.get_mut(&(head.id, wacz(to))).and_then(Vec::pop) {
        Some(from) => {
            moves.push((from, to.clone(), head.id));
            false
        }
        None => true,
    });
    gone.retain(|p| !moves.iter().any(|(from, _, _)| from == p));
    moves
}

/// Moves the rows of the file indexed at `from` (recipe `id`) to `to`: its captures (`C`,
/// `G`) and its `F` row in `rows` (there `f_row`, the file's row at `to`), its revisits
/// waiting for their originals in `waiting` (written before the update indexes anything:
/// `waiting`). Returns how many captures moved.
pub(super) fn move_file(cat: &Catalog, rows: &mut RowMoves, waiting: &mut RowMoves, from: &str, to: &str, f_row: Vec<u8>) -> Result<u64> {
    let mut moved = 0;
    for (old, new) in places_of(from).into_iter().zip(places_of(to)) {
        let mut found = Vec::new();
        cat.scan(&key(b'G', &[&old]), &mut |k, v| {
            found.push((k.to_vec(), v.to_vec()));
            Ok(true)
        })?;
        for (k, tid) in found {
            // (path place, then for a WACZ the rest of its WARC's path; then the offset)
            let rest = &k[1 + old.len()..];
            let nk = key(b'G', &[&new, rest]);
            let (c_old, c_new) = (key(b'C', &[&tid, &k[1..]]), key(b'C', &[&tid, &nk[1..]]));
            if let Some(row) = cat.get(&c_old)? {
                rows.dels.push(c_old);
                rows.puts.push((c_new, row));
            }
            rows.dels.push(k);
            rows.puts.push((nk, tid));
            moved += 1;
        }
        super::waiting::move_under(cat, waiting, &old, &new)?;
    }
    rows.dels.push(key(b'F', &[&super::catalog::path_part(from)]));
    rows.puts.push((key(b'F', &[&super::catalog::path_part(to)]), f_row));
    Ok(moved)
}
