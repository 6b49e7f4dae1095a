//! The `warcfs` command line: the contract that scripts, tests and other tools use.
//! Each subcommand opens the store, does one thing, and reports problems with the path they
//! concern and a non-zero exit.
//!
//! `args` defines the commands; `import`, `read` (cat, ls, stats, index) and `maintain`
//! (fsck, gc, snapshot, repair) run them, with `progress` on stderr; `generate` writes
//! completions and man pages from the definitions; `run` dispatches.

mod args;
mod generate;
mod import;
mod maintain;
mod progress;
mod read;
mod search;

use anyhow::Result;

pub use args::{Cli, Cmd, IndexFormat, Repair, SearchCmd};

use crate::store::{Config, Store};

/// Exit statuses, as `warcfs --help` and README.md document them.
pub mod exit {
    /// Done (fsck: the store is clean).
    pub const OK: i32 = 0;
    /// The command ran to its end and found problems in the store: fsck's, or files that
    /// the index `repair index` rebuilt cannot read whole.
    pub const PROBLEMS: i32 = 1;
    /// A usage error found by clap (which exits itself): an unknown command or option, a
    /// bad or missing argument.
    pub const USAGE: i32 = 2;
    /// Any other error: the command could not do its work (`main` prints the one line).
    pub const ERROR: i32 = 3;
}

/// Runs a parsed command line; returns the exit status (`exit`), or the error that `main`
/// prints as one line and exits with `exit::ERROR`.
pub fn run(cli: Cli) -> Result<i32> {
    if !matches!(cli.cmd, Cmd::Mount { .. }) {
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    }
    let quiet = cli.quiet;
    match cli.cmd {
        Cmd::Init { store, verify, compression, parses, pack_size, backend: None, .. } => {
            let config = Config { verify, compression, pack_size, version: parses.version(), compact_at_gc: parses.compact_at_gc(), ..Config::default() };
            Store::init(&store, config)?;
            println!("initialised {} (verify {verify:?}, compression {compression:?}, parses {parses:?})", store.display());
            Ok(exit::OK)
        }
        Cmd::Init { store, verify, compression, parses, pack_size, backend: Some(url), cache_size, writers, node_name } => {
            if parses != crate::store::Parses::Fast && writers == Some(crate::store::Writers::Several) {
                let name = clap::ValueEnum::to_possible_value(&parses).map(|v| v.get_name().to_string()).unwrap_or_default();
                anyhow::bail!("--parses {name} is for a store one node writes: a store several nodes write keeps its parses in the fast form (format 8)");
            }
            let config = Config { verify, compression, pack_size, cache_size, version: parses.version(), compact_at_gc: parses.compact_at_gc(), ..Config::default() };
            match crate::nodes::init_remote(&store, &url, config, writers, node_name)? {
                crate::nodes::Joined::Created(s) => {
                    let writes = s.config().node_name.as_ref().map(|n| format!(", writing under /{n}/")).unwrap_or_default();
                    println!("initialised {} in {url} (verify {verify:?}, compression {compression:?}), node {:04x}{writes}", store.display(), s.config().node.unwrap_or(0));
                    Ok(exit::OK)
                }
                crate::nodes::Joined::Joined(rep) => {
                    let dir = crate::nodes::default_dir(&store);
                    let writes = if dir == "/" { String::new() } else { format!(", writing under {dir}/") };
                    println!(
                        "{} joined the store in {url}: index rebuilt from {} packs ({} chunks, {} recipes){writes}",
                        store.display(),
                        rep.packs,
                        rep.chunks,
                        rep.recipes
                    );
                    for p in &rep.problems {
                        eprintln!("warcfs: {p}");
                    }
                    Ok(if rep.problems.is_empty() { exit::OK } else { exit::PROBLEMS })
                }
            }
        }
        Cmd::Import { store, src, to } => {
            let to = to.unwrap_or_else(|| crate::nodes::default_dir(&store));
            import::import(&store, &src, &to, quiet)
        }
        Cmd::Cat { store, path } => read::cat(store, path),
        Cmd::Ls { store, path } => read::ls(store, path),
        Cmd::Rm { store, paths, recursive } => {
            let s = Store::open(&store, false)?;
            for p in &paths {
                s.remove(p, recursive)?;
            }
            Ok(exit::OK)
        }
        Cmd::Stats { store, json, bytes } => read::stats(store, json, bytes),
        Cmd::Fsck { store, deep, json } => maintain::fsck(store, deep, json, quiet),
        Cmd::Index { store, paths, format } => read::index(store, paths, format, quiet),
        Cmd::Export { store, paths, revisits: _, resolved, to, min_size } => read::export(store, paths, resolved, to, min_size),
        Cmd::Search { cmd: Some(cmd), .. } => search::command(cmd, quiet),
        Cmd::Search { cmd: None, store, query, from, to, url, mime, limit, captures, json, index_dir } => {
            let q = crate::search::Query { q: query.join(" "), from, to, url_prefix: url, mime, texts: 0 };
            search::search(store.expect("clap requires STORE"), index_dir, q, limit, captures, json)
        }
        Cmd::Serve { store, listen, replay } => search::serve(store, &listen, &replay),
        Cmd::Snapshot { store, dest } => maintain::snapshot(store, dest, quiet),
        Cmd::Umount { mountpoint } => crate::fuse::umount(&mountpoint),
        Cmd::Repair(Repair::Index { store }) => maintain::repair_index(store, quiet),
        Cmd::Mount { store, mountpoint, foreground, options } => {
            // In the foreground, a session that ended with an error (logged) returns 1.
            let code = crate::fuse::mount(crate::fuse::MountArgs { store, mountpoint, foreground, options })?;
            Ok(if code == exit::OK { exit::OK } else { exit::ERROR })
        }
        Cmd::Gc { store, no_settle, json } => maintain::gc(store, !no_settle, json, quiet),
        Cmd::Completions { shell } => generate::completions(shell),
        Cmd::Man { dir } => generate::man(dir.as_deref()),
        #[cfg(feature = "pdf")]
        Cmd::PdfText => Ok(crate::search::pdf::child()),
    }
}

pub use crate::extsort::INDEX_RUN_BYTES;

pub fn human(n: u64) -> String {
    let units = ["B", "KB", "MB", "GB", "TB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1000.0 && u + 1 < units.len() {
        v /= 1000.0;
        u += 1;
    }
    format!("{v:.1} {}", units[u])
}
