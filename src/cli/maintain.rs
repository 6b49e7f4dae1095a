//! The commands that keep a store: `fsck`, `gc`, `snapshot` and `repair index`.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use super::{exit, human, progress};
use crate::store::{GcOptions, Store};

pub fn fsck(store: PathBuf, deep: bool, json: bool, quiet: bool) -> Result<i32> {
    let what = if deep { ", re-hashing every chunk" } else { "" };
    let bar = progress::spinner(quiet, format!("fsck {}: checking files, refcounts and packs{what}", store.display()));
    let s = Store::open(&store, false)?;
    let rep = s.fsck(deep)?;
    bar.finish_and_clear();
    if json {
        let v = serde_json::json!({
            "store": store.display().to_string(),
            "clean": rep.problem_count() == 0,
            "deep": deep,
            "files": rep.files,
            "chunks_checked": rep.chunks_checked,
            "packs_checked": rep.packs_checked,
            "problem_count": rep.problem_count(),
            "problems": rep.problems,
            "more_problems": rep.more_problems,
        });
        println!("{v}");
    } else {
        for p in &rep.problems {
            println!("{p}");
        }
        if rep.more_problems > 0 {
            println!("... and {} more problems (the first {} are listed)", rep.more_problems, crate::store::MAX_PROBLEMS);
        }
    }
    if rep.problem_count() == 0 {
        if !json {
            println!("{}: clean ({} files, {} chunks, {} packs checked{})", store.display(), rep.files, rep.chunks_checked, rep.packs_checked, if deep { ", re-hashed" } else { "" });
        }
        Ok(exit::OK)
    } else {
        eprintln!("{}: {} problems", store.display(), rep.problem_count());
        Ok(exit::PROBLEMS)
    }
}

pub fn gc(store: PathBuf, settle: bool, json: bool, quiet: bool) -> Result<i32> {
    let bar = progress::spinner(quiet, format!("gc {}: dropping unreferenced chunks, settling new packs", store.display()));
    let s = Store::open(&store, false)?;
    let rep = s.gc_with(GcOptions { settle })?;
    bar.finish_and_clear();
    let reclaimed = rep.bytes_before.saturating_sub(rep.bytes_after);
    if json {
        let v = serde_json::json!({
            "store": store.display().to_string(),
            "reclaimed_bytes": reclaimed,
            "bytes_before": rep.bytes_before,
            "bytes_after": rep.bytes_after,
            "chunks_dropped": rep.chunks_dropped,
            "packs_deleted": rep.packs_deleted,
            "packs_rewritten": rep.packs_rewritten,
            "packs_settled": rep.packs_settled,
            "packs_left_unsettled": rep.packs_left_unsettled,
            "chunks_damaged": rep.chunks_damaged,
            "packs_purged": rep.packs_purged,
            "deltas_made": rep.deltas_made,
            "files_reparsed": rep.files_reparsed,
            "files_not_reparsed": rep.files_not_reparsed,
            "reparse_stopped": rep.reparse_stopped,
        });
        println!("{v}");
    } else {
        // On an object store, packs leave every listing at once and their objects go with a
        // later gc (`bucket::client::TRASH_GRACE`), and a gc settles at most so much.
        let bucket = s.config().backend.is_some();
        let trash = if bucket {
            format!("; {} trashed packs of an earlier gc deleted from the bucket", rep.packs_purged)
        } else {
            String::new()
        };
        println!(
            "reclaimed {reclaimed} bytes ({}): {} chunks dropped, {} packs deleted, {} rewritten ({} to settle them at zstd level {}, {} pages stored against an earlier capture){trash}",
            human(reclaimed),
            rep.chunks_dropped,
            rep.packs_deleted,
            rep.packs_rewritten,
            rep.packs_settled,
            s.settle_level(),
            rep.deltas_made
        );
        if s.config().compact_at_gc && settle {
            println!("{} files' gzip parses rewritten compact", rep.files_reparsed);
        }
        if rep.packs_left_unsettled > 0 {
            let cap = if bucket { format!(", and at most {} on an object store", human(crate::store::SETTLE_REMOTE_BUDGET)) } else { String::new() };
            println!("up to {} packs left to settle by a later gc (one settles at most half of the disk's free room{cap})", rep.packs_left_unsettled);
        }
    }
    // Damage is said on stderr and in the exit status, with --json too.
    if rep.chunks_damaged > 0 {
        eprintln!(
            "{}: {} chunks (or packs, by their first blob) are damaged: they do not read back intact, do not decode to their digests, or their zstd dictionary is missing or damaged; gc left or copied them as they were and went on with the rest. Run `warcfs fsck {}`",
            store.display(),
            rep.chunks_damaged,
            store.display()
        );
        return Ok(exit::PROBLEMS);
    }
    if rep.files_not_reparsed > 0 {
        eprintln!(
            "{}: {} files could not be read back to rewrite their parses (damage or a bug, named in the log above); gc left them as they were. Run `warcfs fsck {}`",
            store.display(),
            rep.files_not_reparsed,
            store.display()
        );
        return Ok(exit::PROBLEMS);
    }
    if let Some(why) = &rep.reparse_stopped {
        eprintln!("{}: rewriting parses stopped ({why}); gc collected and settled all the same, and the next gc rewrites the files left", store.display());
        return Ok(exit::PROBLEMS);
    }
    Ok(exit::OK)
}

pub fn snapshot(store: PathBuf, dest: PathBuf, quiet: bool) -> Result<i32> {
    let dest = std::path::absolute(&dest).with_context(|| format!("{}: bad path", dest.display()))?;
    let bar = progress::spinner(quiet, format!("snapshot {}: linking packs, copying the index", dest.display()));
    match Store::open(&store, false) {
        Ok(s) => {
            let r = s.snapshot(&dest)?;
            bar.finish_and_clear();
            println!(
                "snapshot {}: {} packs linked, {} copied, {} kept, {} removed, {} staged files copied",
                dest.display(),
                r.packs_linked,
                r.packs_copied,
                r.packs_kept,
                r.packs_removed,
                r.staged_files
            );
            Ok(exit::OK)
        }
        Err(crate::store::StoreError::Busy { pid, .. }) => {
            // Mounted: the daemon owns the index, so it takes the snapshot.
            bar.set_message(format!("snapshot {}: taken by the daemon of the mounted store", dest.display()));
            let answer = crate::fuse::control::request(&store, &format!("snapshot {}", dest.display()))
                .with_context(|| format!("{}: in use by process {pid}, and its control socket does not answer", store.display()))?;
            bar.finish_and_clear();
            match answer.strip_prefix("ok ") {
                Some(rest) => {
                    println!("snapshot {}: {rest}", dest.display());
                    Ok(exit::OK)
                }
                None => bail!("{}: {}", dest.display(), answer.strip_prefix("error ").unwrap_or(&answer)),
            }
        }
        Err(e) => Err(e.into()),
    }
}

pub fn repair_index(store: PathBuf, quiet: bool) -> Result<i32> {
    let bar = progress::spinner(quiet, format!("repair {}: rebuilding the index from the packs", store.display()));
    let rep = crate::nodes::repair_index(&store)?;
    bar.finish_and_clear();
    if let Some(kept) = &rep.kept_broken_index {
        println!("the unreadable index was kept as {kept}");
    }
    if rep.wrote_default_config {
        let version = match rep.config_version {
            Some((v, true)) => format!("format version {v}, as the packs say"),
            Some((v, false)) => format!("format version {v} (packs written before 2026-11-27 do not say theirs)"),
            None => "the default format version".to_string(),
        };
        println!("warcfs.json was missing: written for {version}, with the default settings (verify bytes, compression zstd, 32 MiB packs); edit it if the store used others");
    }
    println!(
        "rebuilt the index of {} from {} packs: {} chunks ({} duplicate copies left by gc), {} metadata log records, {} recipes",
        store.display(),
        rep.packs,
        rep.chunks,
        rep.duplicate_chunks,
        rep.log_records,
        rep.recipes
    );
    for p in &rep.problems {
        eprintln!("warcfs: {}: {p}", store.display());
    }
    if !rep.problems.is_empty() {
        // The repair is done; what it found is the store's problem, as fsck's are.
        eprintln!("warcfs: {}: the index is rebuilt, but {} problems above mean some files cannot be read whole; run `warcfs fsck {}`", store.display(), rep.problems.len(), store.display());
        return Ok(exit::PROBLEMS);
    }
    Ok(exit::OK)
}
