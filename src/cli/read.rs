//! The commands that only read a store, and so also work while it is mounted (they open it
//! read-only then): `cat`, `ls`, `stats`, `index`, `export`.

use std::fs;
use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use super::{exit, human, progress, IndexFormat, INDEX_RUN_BYTES};
use crate::store::{ByteUse, InodeKind, Store};

pub fn cat(store: PathBuf, path: String) -> Result<i32> {
    let s = Store::open_for_reading(&store)?;
    let ino = s.resolve(&path)?;
    let inode = s.inode(ino)?.with_context(|| format!("{path}: no such file"))?;
    match inode.kind {
        InodeKind::Dir => bail!("{path}: is a directory"),
        InodeKind::Symlink => bail!("{path}: is a symbolic link to {}", String::from_utf8_lossy(&inode.target)),
        InodeKind::File => {}
        _ => bail!("{path}: is a special file (fifo, socket or device)"),
    }
    if inode.staged {
        return Err(crate::store::StoreError::Staged(path).into());
    }
    let stdout = io::stdout();
    let mut out = BufWriter::with_capacity(1 << 20, stdout.lock());
    if let Some(head) = &inode.recipe {
        match s.copy_to(head, &mut out) {
            Err(crate::store::StoreError::Io { err, .. }) if err.kind() == io::ErrorKind::BrokenPipe => return Ok(exit::OK),
            r => {
                r.with_context(|| format!("{path}: reading from {}", store.display()))?;
            }
        }
    }
    match out.flush() {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(exit::OK),
        r => r.map(|_| exit::OK).context("writing to stdout"),
    }
}

pub fn ls(store: PathBuf, path: String) -> Result<i32> {
    let s = Store::open_for_reading(&store)?;
    let mut out = io::stdout().lock();
    for e in s.list(&path)? {
        let t = match e.inode.kind {
            InodeKind::Dir => 'd',
            InodeKind::File => '-',
            InodeKind::Symlink => 'l',
            InodeKind::Fifo => 'p',
            InodeKind::Socket => 's',
            InodeKind::CharDevice => 'c',
            InodeKind::BlockDevice => 'b',
        };
        let name = String::from_utf8_lossy(&e.name);
        let suffix = if e.inode.kind == InodeKind::Symlink { format!(" -> {}", String::from_utf8_lossy(&e.inode.target)) } else { String::new() };
        writeln!(out, "{t}{} {:>12} {}{suffix}", perms(e.inode.mode), e.inode.size, name)?;
    }
    Ok(exit::OK)
}

fn perms(mode: u32) -> String {
    let mut s = String::with_capacity(9);
    for shift in [6, 3, 0] {
        let b = (mode >> shift) & 7;
        s.push(if b & 4 != 0 { 'r' } else { '-' });
        s.push(if b & 2 != 0 { 'w' } else { '-' });
        s.push(if b & 1 != 0 { 'x' } else { '-' });
    }
    s
}

pub fn stats(store: PathBuf, json: bool, bytes: bool) -> Result<i32> {
    let s = Store::open_for_reading(&store)?;
    let st = s.stats()?;
    let byte_use = if bytes { Some(s.byte_use()?) } else { None };
    // A mounted store also tells what its reads have cost since it was mounted.
    let reads = crate::fuse::control::read_counters(&store);
    let ingests = crate::fuse::control::ingests(&store);
    if json {
        let mut v = serde_json::to_value(&st)?;
        if let (Some(r), Some(obj)) = (reads, v.as_object_mut()) {
            obj.insert("reads_since_mount".into(), serde_json::to_value(r)?);
        }
        if let (Some(i), Some(obj)) = (&ingests, v.as_object_mut()) {
            obj.insert("ingests".into(), serde_json::to_value(i)?);
        }
        if let (Some(u), Some(obj)) = (&byte_use, v.as_object_mut()) {
            obj.insert("bytes".into(), serde_json::to_value(u)?);
        }
        println!("{v}");
    } else {
        let ratio = if st.stored_bytes > 0 { st.logical_bytes as f64 / st.stored_bytes as f64 } else { 0.0 };
        println!("files            {}", st.files);
        println!("logical bytes    {} ({})", st.logical_bytes, human(st.logical_bytes));
        println!("stored bytes     {} ({}), {ratio:.2}x", st.stored_bytes, human(st.stored_bytes));
        println!("index bytes      {} ({})", st.index_bytes, human(st.index_bytes));
        println!("records          {}", st.records);
        println!("payloads         {} ({} unique)", st.payloads, st.unique_payloads);
        println!("chunks           {} ({} unreferenced)", st.chunks, st.unreferenced_chunks);
        println!("gzip members     {} ({} kept raw)", st.gzip_members, st.gzip_members_raw);
        println!("deflate parses   {} bytes recorded, shared tails {} bytes in packs", st.parse_bytes, st.parse_tail_chunk_bytes);
        if st.dictionaries > 0 {
            println!("dictionaries     {} zstd dictionaries ({} bytes), {} chunks compressed with one", st.dictionaries, st.dictionary_bytes, st.dict_chunks);
        }
        if st.delta_chunks > 0 {
            println!("deltas           {} chunks stored against a relative ({} bytes)", st.delta_chunks, st.delta_bytes);
        }
        println!("collisions       {}", st.collisions);
        println!("staged           {} files, {} bytes (written through a mount, not yet ingested)", st.staged_files, st.staged_bytes);
        if let Some(i) = &ingests {
            println!("ingests (mount)  {} queued, {} failed and waiting to be tried again ({} failed attempts since the mount)", i.queued, i.retrying, i.failed_attempts);
        }
        println!("packs            {}", st.packs);
        if st.uploads_waiting > 0 {
            println!("uploads          {} sealed packs waiting for the object store", st.uploads_waiting);
        }
        if let Some(r) = reads {
            let mean = |us: u64| us.checked_div(r.members_rebuilt).unwrap_or(0);
            println!(
                "reads (mounted)  {} gzip members rebuilt (mean {} us reading their text, {} us replaying its parse), {} served from cache, {} with their parse tail decoded for another; {} chunks read; {} recipe pieces loaded; {} read-aheads for lookups (a MiB of file each)",
                r.members_rebuilt,
                mean(r.member_gather_us),
                mean(r.member_deflate_us),
                r.member_hits,
                r.tail_hits,
                r.chunks_read,
                r.pieces_loaded,
                r.lookup_read_aheads
            );
        }
        if let Some(u) = &byte_use {
            print_byte_use(u);
        }
    }
    Ok(exit::OK)
}

/// `stats --bytes` as a table: each category's bytes, its share and what it holds.
fn print_byte_use(u: &ByteUse) {
    let n = &u.counts;
    println!();
    println!("where the bytes go: {} bytes ({})", u.total, human(u.total));
    for (key, bytes) in u.categories.rows() {
        let note = match key {
            "payload" => format!("{} chunks (raw, payload, payload head), {} of them with a dictionary ({})", n.payload_chunks, n.payload_dict_chunks, human(n.payload_dict_bytes)),
            "deltas" => format!("{} chunks stored against a base chunk (blob codec 3, made by gc)", n.delta_chunks),
            "headers" => format!("{} literal blocks of WARC and HTTP headers", n.header_chunks),
            "parse_prefixes" => format!("{} gzip members' parse prefixes in recipe pieces ({} before compression)", n.members, human(n.parse_prefix_raw - n.block_header_raw)),
            "block_headers" => format!("dynamic block headers kept as bits in those prefixes ({} before compression)", human(n.block_header_raw)),
            "parse_tails" => format!("{} shared parse tails", n.parse_tails),
            "recipes" => format!("{} recipe pieces, less the prefixes' share", n.recipe_pieces),
            "dictionaries" => format!("{} zstd dictionaries", n.dictionaries),
            "log" => format!("{} metadata log records", n.log_records),
            "blob_headers" => format!("{} live blobs, 60 bytes each", n.live_blobs),
            "footers" => format!("{} sealed packs' footers: their fixed part and their live blobs' entries ({} open packs have none yet)", n.sealed_packs, n.open_packs),
            "dead" => format!("{} blobs of refcount 0 ({}), blobs no index entry names, their footer entries", n.dead_blobs, human(n.dead_blob_bytes)),
            "index" => "the RocksDB index (index/)".to_string(),
            "staging" => "files written through a mount, not yet ingested".to_string(),
            _ => "settings, lock, cache/, the directories themselves".to_string(),
        };
        let share = if u.total > 0 { bytes as f64 * 100.0 / u.total as f64 } else { 0.0 };
        println!("  {:<15} {bytes:>14} {:>9} {share:>5.1} %  {note}", key.replace('_', " "), human(bytes));
    }
    // Recipe pieces are compressed whole: their parts' shares are by raw bytes.
    println!("(parse prefixes, block headers and recipes split each recipe piece's stored bytes by their share of its raw bytes)");
    if u.elsewhere > 0 {
        println!("{} bytes ({}) of it are packs in the object store; the other {} are under the store's directory", u.elsewhere, human(u.elsewhere), u.under_store);
    } else {
        println!("the total is what `du -sb` counts under the store's directory as this command found it (files, directories and symlinks; hard links once)");
    }
    if n.overrun_bytes > 0 {
        println!("the index places {} bytes past the ends of their packs (damage: run `warcfs fsck`)", n.overrun_bytes);
    }
    if n.unreadable_pieces > 0 {
        println!("{} recipe pieces could not be read, and count whole as recipes (run `warcfs fsck`)", n.unreadable_pieces);
    }
    if n.unplaced_entries > 0 {
        println!("{} index entries name packs that are not there (removed by gc during the walk, or lost), and are left out", n.unplaced_entries);
    }
}

pub fn index(store: PathBuf, paths: Vec<String>, format: IndexFormat, quiet: bool) -> Result<i32> {
    // The only format; clap refuses any other name.
    let IndexFormat::Cdxj = format;
    let bar = progress::counter(quiet, format!("index {}: reading record headers,", store.display()), "records");
    let s = Store::open_for_reading(&store)?;
    // Sorted in runs of 64 MiB spilled to a temporary directory: an archive's index
    // can be larger than memory.
    let runs = std::env::temp_dir().join(format!("warcfs-index-{}", std::process::id()));
    let mut sorter = crate::extsort::LineSorter::new(&runs, INDEX_RUN_BYTES).with_context(|| format!("{}: cannot create", runs.display()))?;
    let roots = if paths.is_empty() { vec!["/".to_string()] } else { paths };
    let result = (|| -> Result<()> {
        for root in &roots {
            let mut each = |l| {
                bar.inc(1);
                sorter.push(l)
            };
            s.cdxj_each(root, crate::store::StagedFiles::Refuse, &mut each).with_context(|| format!("{root}: cannot index"))?;
        }
        // The merge of the sorted runs goes with the writing: on a terminal the index is
        // shown, and no spinner may draw over it.
        if io::stdout().is_terminal() {
            bar.finish_and_clear();
        } else {
            bar.set_message(format!("index {}: merging and writing", store.display()));
        }
        let mut out = BufWriter::new(io::stdout().lock());
        sorter.finish_into(&mut out).context("writing the index")?;
        out.flush()?;
        Ok(())
    })();
    let _ = fs::remove_dir_all(&runs);
    bar.finish_and_clear();
    result?;
    Ok(exit::OK)
}

pub fn export(store: PathBuf, paths: Vec<String>, resolved: bool, to: PathBuf, min_size: u64) -> Result<i32> {
    let s = Store::open_for_reading(&store)?;
    fs::create_dir_all(&to).with_context(|| format!("{}: cannot create", to.display()))?;
    let files = if resolved { s.export_resolved(&paths, &to) } else { s.export_revisits(&paths, &to, min_size) };
    let files = files.with_context(|| format!("exporting into {}", to.display()))?;
    let what = if resolved { "revisits written as the responses they stand for" } else { "responses whose payload an earlier one holds written as identical-payload-digest revisits" };
    let manifest = serde_json::json!({ "export": what, "index_together": "each file's `requires`: pywb resolves revisits within one collection", "files": files });
    let path = to.join("export.json");
    let mut bytes = serde_json::to_vec_pretty(&manifest)?;
    bytes.push(b'\n');
    fs::write(&path, bytes).with_context(|| format!("{}: cannot write", path.display()))?;
    let sum = |g: fn(&crate::store::ExportedFile) -> u64| files.iter().map(g).sum::<u64>();
    let (records, bytes_in, bytes_out) = (sum(|f| f.records), sum(|f| f.bytes_in), sum(|f| f.bytes_out));
    let changed = if resolved {
        format!("{} revisits written whole, {} left as they are (their original not among them)", sum(|f| f.resolved), sum(|f| f.unresolved))
    } else {
        format!("{} of them as revisits", sum(|f| f.revisits))
    };
    println!("exported {} files, {records} records, {changed}: {bytes_in} bytes stored as {bytes_out} ({}); manifest {}", files.len(), human(bytes_out), path.display());
    Ok(exit::OK)
}
