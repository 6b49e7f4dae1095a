//! A stored ZIP's entries (a WACZ's `archive/*.warc.gz`, its index, its pages): the layout
//! read through the file's recipe (`format::zip`), each entry's names checked, and an
//! entry's bytes as a reader of the ZIP would extract them: a stored entry is a range of
//! the file, a deflated one is inflated (bounded). Nothing is stored for any of it.

use std::io::Read;

use crate::format::zip::{self as zipfmt, Entry, Layout, ZipError};
use crate::recipe::RecipeHead;
use crate::store::{Result, Store, StoreError};

/// The largest deflated entry inflated for a reader: a WACZ's deflated entries are its
/// `datapackage.json`, `index.idx` and page lists (kilobytes to megabytes); its WARCs and
/// CDXJ are stored.
pub const MAX_INFLATED: u64 = 64 << 20;

/// A ZIP's entries as a tree of names: what `/.warcfs/wacz/` shows of a stored WACZ.
#[derive(Debug)]
pub struct EntryTree {
    pub layout: Layout,
    /// Node 0 is the ZIP itself; each other node a name in its directory, in entry order.
    pub nodes: Vec<Node>,
}

#[derive(Clone, Debug)]
pub struct Node {
    pub name: Vec<u8>,
    pub parent: usize,
    /// The entry a file node shows (its index in `layout.entries`); None for a directory.
    pub entry: Option<usize>,
}

impl EntryTree {
    /// The tree of `layout`'s entries. Names that cannot be paths here (empty or `.`/`..`
    /// components, NUL, longer than 255 bytes a component) and a name met a second time are
    /// left out: the ZIP is read as it is, only its view leaves them out.
    pub fn new(layout: Layout) -> EntryTree {
        let mut nodes = vec![Node { name: Vec::new(), parent: 0, entry: None }];
        let mut index: std::collections::HashMap<(usize, Vec<u8>), usize> = std::collections::HashMap::new();
        for (i, e) in layout.entries.iter().enumerate() {
            let (name, is_dir) = match e.name.strip_suffix(b"/") {
                Some(n) => (n, true),
                None => (&e.name[..], false),
            };
            let parts: Vec<&[u8]> = name.split(|&b| b == b'/').collect();
            if name.is_empty() || parts.iter().any(|p| p.is_empty() || *p == b"." || *p == b".." || p.len() > 255 || p.contains(&0)) {
                continue;
            }
            let mut parent = 0usize;
            for (k, part) in parts.iter().enumerate() {
                let last = k + 1 == parts.len();
                let key = (parent, part.to_vec());
                match index.get(&key) {
                    // A directory met again (never a file's name, nor a file as a directory).
                    Some(&n) if (is_dir || !last) && nodes[n].entry.is_none() => parent = n,
                    Some(_) => break,
                    None => {
                        let entry = (last && !is_dir).then_some(i);
                        nodes.push(Node { name: part.to_vec(), parent, entry });
                        index.insert(key, nodes.len() - 1);
                        parent = nodes.len() - 1;
                    }
                }
            }
        }
        EntryTree { layout, nodes }
    }

    pub fn children(&self, dir: usize) -> impl Iterator<Item = (usize, &Node)> + '_ {
        self.nodes.iter().enumerate().skip(1).filter(move |(_, n)| n.parent == dir)
    }

    pub fn child(&self, dir: usize, name: &[u8]) -> Option<usize> {
        self.children(dir).find(|(_, n)| n.name == name).map(|(i, _)| i)
    }

    pub fn entry(&self, node: usize) -> Option<&Entry> {
        self.nodes.get(node)?.entry.map(|e| &self.layout.entries[e])
    }
}

/// Where `/.warcfs/wacz/` shows the stored WACZs, from the mount's root.
pub const VIEW_PREFIX: &str = ".warcfs/wacz/";

/// A WARC entry of a stored WACZ: its bytes in the WACZ, [start, end), and its path in the
/// view (`Store::wacz_warcs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaczWarc {
    pub start: u64,
    pub end: u64,
    pub view_path: String,
}

/// Whether a file of this name is taken for a WACZ (`.wacz`, any case).
pub fn is_wacz_name(name: &[u8]) -> bool {
    name.len() > 5 && name[name.len() - 5..].eq_ignore_ascii_case(b".wacz")
}

/// Whether a file (or ZIP entry) of this name is taken for a WARC (`.warc`, `.warc.gz`).
pub fn is_warc_name(name: &[u8]) -> bool {
    name.ends_with(b".warc") || name.ends_with(b".warc.gz")
}

impl Store {
    /// The layout of the stored ZIP `head` is the recipe of, or None if it is not one that
    /// `format::zip` takes.
    pub fn zip_layout(&self, head: &RecipeHead) -> Result<Option<Layout>> {
        let r = zipfmt::layout(head.size, &mut |at, len| {
            let mut buf = vec![0u8; len];
            let n = self.read_at(head, at, &mut buf).map_err(std::io::Error::other)?;
            buf.truncate(n);
            Ok(buf)
        });
        match r {
            Ok(l) => Ok(Some(l)),
            Err(ZipError::Io(err)) => Err(StoreError::Io { path: "(a stored ZIP)".into(), err }),
            Err(_) => Ok(None),
        }
    }

    /// The stored WARC entries of the stored WACZ at `path` (its store path, no leading
    /// `/`), in file order: where each one's bytes start and end in the WACZ, and its path in
    /// the view (`.warcfs/wacz/{path}/{entry}`, from the mount's root), as index lines and
    /// search results name them. None if the file is not a ZIP `format::zip` takes, or holds
    /// no such entry. (Only the entries the view shows: `EntryTree` leaves out names that
    /// are no path.)
    pub fn wacz_warcs(&self, path: &str, head: &RecipeHead) -> Result<Option<Vec<WaczWarc>>> {
        let Some(layout) = self.zip_layout(head)? else { return Ok(None) };
        let tree = EntryTree::new(layout);
        let mut warcs: Vec<WaczWarc> = (0..tree.nodes.len())
            .filter_map(|i| {
                let e = tree.entry(i).filter(|e| e.is_stored())?;
                let inner = String::from_utf8(e.name.clone()).ok().filter(|n| is_warc_name(n.as_bytes()))?;
                Some(WaczWarc { start: e.data_at, end: e.data_end(), view_path: format!("{VIEW_PREFIX}{path}/{inner}") })
            })
            .collect();
        if warcs.is_empty() {
            return Ok(None);
        }
        warcs.sort_by_key(|w| w.start);
        Ok(Some(warcs))
    }

    /// The stored WACZ and where in it the WARC entry lies that `view_path` (as
    /// `wacz_warcs` names it, with or without a leading `/`) stands for; None if no stored
    /// WACZ holds it.
    pub fn wacz_warc_of(&self, view_path: &str) -> Result<Option<(RecipeHead, WaczWarc)>> {
        let view_path = view_path.trim_start_matches('/');
        let Some(rest) = view_path.strip_prefix(VIEW_PREFIX) else { return Ok(None) };
        // The WACZ is the shortest prefix ending in a `.wacz` component that is a stored file.
        let parts: Vec<&str> = rest.split('/').collect();
        for i in 0..parts.len().saturating_sub(1) {
            if !is_wacz_name(parts[i].as_bytes()) {
                continue;
            }
            let path = parts[..=i].join("/");
            let Ok(ino) = self.resolve(&format!("/{path}")) else { continue };
            let Some(head) = self.inode(ino)?.filter(|n| !n.staged).and_then(|n| n.recipe) else { continue };
            let found = self.wacz_warcs(&path, &head)?.and_then(|ws| ws.into_iter().find(|w| w.view_path == view_path));
            if let Some(w) = found {
                return Ok(Some((head, w)));
            }
        }
        Ok(None)
    }

    /// A deflated entry's bytes, inflated (at most `MAX_INFLATED`, and exactly the size its
    /// central directory gives, or an error); a stored one's are read as ranges of the file.
    pub fn inflate_entry(&self, head: &RecipeHead, e: &Entry) -> Result<Vec<u8>> {
        let bad = |what: &str| StoreError::Io { path: format!("(ZIP entry {})", String::from_utf8_lossy(&e.name)).into(), err: std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string()) };
        if e.method != 8 || e.flags & 1 != 0 {
            return Err(bad("not a deflated entry this reader takes"));
        }
        if e.size > MAX_INFLATED || e.comp_size > MAX_INFLATED {
            return Err(bad("a deflated entry over 64 MiB"));
        }
        let mut comp = vec![0u8; e.comp_size as usize];
        let n = self.read_at(head, e.data_at, &mut comp)?;
        if n != comp.len() {
            return Err(bad("the entry runs past the file"));
        }
        let mut out = Vec::with_capacity(e.size as usize);
        flate2::read::DeflateDecoder::new(&comp[..]).take(e.size + 1).read_to_end(&mut out).map_err(|err| bad(&err.to_string()))?;
        if out.len() as u64 != e.size || crc32fast::hash(&out) != e.crc {
            return Err(bad("its inflated bytes do not have the size and CRC-32 its central directory gives"));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str) -> Entry {
        Entry { name: name.as_bytes().to_vec(), method: 0, flags: 0, crc: 0, comp_size: 1, size: 1, header_at: 0, data_at: 0 }
    }

    /// Directories come from the names; names that are no path here, a second entry of one
    /// name, and a file where a directory is are left out of the view (never of the file).
    #[test]
    fn the_tree_shows_each_usable_name_once() {
        let names = ["archive/", "archive/a.warc.gz", "indexes/index.cdx.gz", "../escape", "a//b", "./x", "archive/a.warc.gz", "datapackage.json", "datapackage.json/inner", "/abs"];
        let layout = Layout { entries: names.iter().map(|n| entry(n)).collect(), central_at: 0, size: 0 };
        let t = EntryTree::new(layout);
        let path = |i: usize| {
            let mut parts = Vec::new();
            let mut n = i;
            while n != 0 {
                parts.push(String::from_utf8(t.nodes[n].name.clone()).unwrap());
                n = t.nodes[n].parent;
            }
            parts.reverse();
            parts.join("/")
        };
        let shown: Vec<(String, Option<usize>)> = (1..t.nodes.len()).map(|i| (path(i), t.nodes[i].entry)).collect();
        assert_eq!(shown, [("archive".into(), None), ("archive/a.warc.gz".into(), Some(1)), ("indexes".into(), None), ("indexes/index.cdx.gz".into(), Some(2)), ("datapackage.json".into(), Some(7))]);
        let archive = t.child(0, b"archive").unwrap();
        assert_eq!(t.entry(t.child(archive, b"a.warc.gz").unwrap()).unwrap().name, b"archive/a.warc.gz");
        assert!(t.child(0, b"..").is_none() && t.entry(archive).is_none());
    }
}
