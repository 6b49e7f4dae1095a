//! The command line's definitions: every subcommand with its arguments and options, each
//! described. `--help` and its examples come from here.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum, ValueHint};

use crate::store::{Compression, Verify};

/// What `--help` of `warcfs` itself ends with.
const AFTER_HELP: &str = "\
Examples:
  warcfs import /srv/warc-store crawl-2024/ --to /crawls
  warcfs mount /srv/warc-store /srv/archive
  warcfs fsck /srv/warc-store

Exit status:
  0  done (fsck: the store is clean)
  1  problems found in the store (by fsck, or by repair index)
  2  usage error: unknown command or option, bad or missing argument
  3  any other error, told in one line on stderr naming the path

Set RUST_LOG=info for more detail.";

#[derive(Parser)]
#[command(name = "warcfs", version, about = "A deduplicating, byte-exact store for web archives")]
#[command(
    long_about = "A deduplicating, byte-exact store for web archives. Files copied in (`import`, or \
                  written through a `mount`) are stored once per payload and read back exactly as \
                  they were written, `.warc.gz` included.",
    after_help = AFTER_HELP
)]
pub struct Cli {
    /// Show no progress bar or spinner (they are drawn on stderr only when it is a terminal).
    /// Results, warnings and errors are printed all the same.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    #[command(subcommand)]
    pub cmd: Cmd,
}

/// The formats `warcfs index` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum IndexFormat {
    /// CDXJ as cdxj-indexer 1.5 writes it (pywb's format): SURT, timestamp, JSON.
    Cdxj,
}

/// The index `search update` and `rebuild` make.
#[derive(clap::Args)]
pub struct SearchIndex {
    /// The store whose search index this is (not mounted).
    #[arg(value_hint = ValueHint::DirPath)]
    pub store: PathBuf,
    /// One document per capture, as archives index records (for measurements).
    #[arg(long, hide = true)]
    pub per_capture: bool,
    /// One document per unique text, whole (for measurements).
    #[arg(long, hide = true)]
    pub whole_texts: bool,
    /// Where the index is (default STORE/search; for measurements).
    #[arg(long, hide = true, value_name = "DIR")]
    pub index_dir: Option<PathBuf>,
}

/// `warcfs search update | rebuild | stats`.
#[derive(Subcommand)]
pub enum SearchCmd {
    /// Make the search index, or bring it up to date with the store (not mounted; a mount
    /// keeps it up to date once it exists).
    Update(SearchIndex),
    /// Make the search index again from the stored files.
    Rebuild(SearchIndex),
    /// What the search index holds: texts, captures, bytes.
    Stats {
        /// The store whose search index this is (may be mounted).
        #[arg(value_hint = ValueHint::DirPath)]
        store: PathBuf,
        /// One JSON object: documents, captures, texts, bytes of each part.
        #[arg(long)]
        json: bool,
        /// Where the index is (default STORE/search; for measurements).
        #[arg(long, hide = true, value_name = "DIR")]
        index_dir: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
pub enum Repair {
    /// Rebuild the index from the packs alone, when STORE/index is missing or unreadable.
    ///
    /// Rebuilds names, directories, attributes, recipes and refcounts. An unreadable index is
    /// kept aside as index.unreadable.N; an index that opens is never replaced. Run
    /// `warcfs fsck STORE` afterwards.
    #[command(after_help = "Example:\n  warcfs repair index /srv/warc-store && warcfs fsck /srv/warc-store")]
    Index {
        /// The store whose index is rebuilt (not mounted).
        #[arg(value_hint = ValueHint::DirPath)]
        store: PathBuf,
    },
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Create a new, empty store.
    ///
    /// `import` and `mount` create a missing store with the defaults; `init` chooses other
    /// settings, which are fixed for the store's life.
    #[command(after_help = "Example:\n  warcfs init /srv/warc-store --verify size --pack-size 67108864")]
    Init {
        /// The directory to create the store in (made if missing; a store already there is
        /// refused).
        #[arg(value_hint = ValueHint::DirPath)]
        store: PathBuf,
        /// How a digest match is proven before two chunks become one.
        #[arg(long, value_enum, default_value = "bytes")]
        verify: Verify,
        /// How chunks are compressed in the packs: zstd, or none (stored as they are).
        #[arg(long, value_enum, default_value = "zstd")]
        compression: Compression,
        /// How gzip members' deflate parses are kept: fast to rebuild, or compact (zlib's
        /// own search replayed and corrected: a fifth of the bytes, rebuilt at a third of the
        /// speed, imported at about half; gc settles at zstd level 15 instead of 9, about 6
        /// times its time; for stores written once and read seldom), or compact-at-gc (fast
        /// imports and fresh reads, compact once gc has rewritten them: gc takes the time).
        #[arg(long, value_enum, default_value = "fast")]
        parses: crate::store::Parses,
        /// Size a sealed pack grows to, in bytes (default 32 MiB, at least 16 KiB). Small
        /// packs make more files; object stores and rsync prefer the default.
        #[arg(long, value_name = "BYTES", default_value_t = crate::store::PACK_TARGET, value_parser = clap::value_parser!(u64).range(crate::store::MIN_PACK_SIZE..))]
        pack_size: u64,
        /// Keep the sealed packs in an S3-compatible object store, s3://BUCKET/PREFIX, or in a
        /// directory several machines share, file:///DIR. Endpoint, region and credentials
        /// come from AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID and
        /// AWS_SECRET_ACCESS_KEY (or ~/.aws/credentials). If the bucket already holds a store,
        /// this directory joins it as one more node (its settings are the bucket's, and the
        /// index is rebuilt from the bucket); STORE then holds this node's index, staging
        /// and cache.
        #[arg(long, value_name = "URL")]
        backend: Option<String>,
        /// With --backend: bytes of pack ranges this node caches on its disk (default 1 GiB,
        /// at least 64 MiB).
        #[arg(long, value_name = "BYTES", requires = "backend", value_parser = clap::value_parser!(u64).range(crate::bucket::client::MIN_CACHE..))]
        cache_size: Option<u64>,
        /// With --backend, for a new store: whether one node writes at a time (the others
        /// mount it read-only and follow it), or several at once, each under its own
        /// directory at the root (/NAME/, see --node-name), all reading everything. A node
        /// joining a store takes the bucket's choice.
        #[arg(long, value_enum, requires = "backend")]
        writers: Option<crate::store::Writers>,
        /// With --backend, on a store several nodes write: this node's name, the directory
        /// at the store's root it writes under (default: the host's name; each node needs its
        /// own).
        #[arg(long, value_name = "NAME", requires = "backend")]
        node_name: Option<String>,
    },
    /// Copy files and directories into the store, as `cp -r SRC... DIR` would.
    ///
    /// Creates STORE with the default settings if it is missing. Shows a progress bar on a
    /// terminal and ends with a summary line. The store must not be mounted (copy into the
    /// mount instead).
    #[command(after_help = "Examples:\n  warcfs import /srv/warc-store crawl-1.warc.gz crawl-2.warc.gz\n  warcfs import /srv/warc-store /data/crawls --to /2024   # as /2024/crawls/")]
    Import {
        /// The store to copy into (created if missing).
        #[arg(value_hint = ValueHint::DirPath)]
        store: PathBuf,
        /// Files and directories to copy; a directory is copied with everything under it, as
        /// DIR/basename(SRC). Symbolic links are copied as links.
        #[arg(required = true, value_hint = ValueHint::AnyPath)]
        src: Vec<PathBuf>,
        /// Directory in the store to copy into (made if missing). Default: the root, or on a
        /// store several nodes write, this node's own directory (/NAME).
        #[arg(long, value_name = "DIR")]
        to: Option<String>,
    },
    /// Write a stored file's exact bytes to stdout.
    Cat {
        /// The store to read from (may be mounted).
        #[arg(value_hint = ValueHint::DirPath)]
        store: PathBuf,
        /// The file's path inside the store, such as /crawls/crawl-1.warc.gz.
        path: String,
    },
    /// List a directory (or one file) of the store.
    ///
    /// One line per entry: type and permissions, size in bytes, name (and a link's target).
    Ls {
        /// The store to list (may be mounted).
        #[arg(value_hint = ValueHint::DirPath)]
        store: PathBuf,
        /// The directory or file inside the store to list.
        #[arg(default_value = "/")]
        path: String,
    },
    /// Remove files (and, with -r, directories) from the store.
    ///
    /// Their chunks lose a reference; `warcfs gc` reclaims the space of chunks no file uses.
    Rm {
        /// The store to remove from (not mounted).
        #[arg(value_hint = ValueHint::DirPath)]
        store: PathBuf,
        /// Paths inside the store to remove.
        #[arg(required = true, value_name = "PATH")]
        paths: Vec<String>,
        /// Remove directories and everything under them.
        #[arg(short, long)]
        recursive: bool,
    },
    /// Show what is stored and how well it deduplicates.
    ///
    /// On a mounted store, also what its reads have cost since it was mounted and the
    /// ingests still queued or waiting to be tried again.
    Stats {
        /// The store to describe (may be mounted).
        #[arg(value_hint = ValueHint::DirPath)]
        store: PathBuf,
        /// Print one JSON object (files, logical_bytes, stored_bytes, chunks, ...) instead of
        /// the table, for scripts.
        #[arg(long)]
        json: bool,
        /// Also say where the bytes go: every byte under STORE (as `du -sb` counts it) in
        /// one category: payloads, headers, parse prefixes and tails, recipes, the metadata
        /// log, pack overhead, the index... Reads every recipe piece (with --json: the
        /// object's "bytes").
        #[arg(long)]
        bytes: bool,
    },
    /// Check that every file's bytes can be rebuilt and every refcount is right.
    ///
    /// Exit status 0 when clean, 1 with one line per problem naming the files it touches.
    Fsck {
        /// The store to check (not mounted).
        #[arg(value_hint = ValueHint::DirPath)]
        store: PathBuf,
        /// Also re-hash every chunk (reads every pack; slower).
        #[arg(long)]
        deep: bool,
        /// Print one JSON object instead (clean, files, chunks_checked, packs_checked,
        /// problem_count, problems: the first 10,000 lines, more_problems); the exit status
        /// is the same.
        #[arg(long)]
        json: bool,
    },
    /// Reclaim space held by chunks that no file references, and settle new packs.
    ///
    /// Drops unreferenced chunks, deletes packs that hold nothing else and rewrites packs
    /// more than 10 % dead. It also settles the packs written since the last gc: rewrites
    /// each once with its chunks recompressed at zstd level 9, 15 in a `--parses compact`
    /// store (ingest writes level 1 to keep up with a crawl; level 9 stores the crawl corpus
    /// 8 % smaller and reads as fast), as
    /// many as fit in half of the disk's free room, 4 GiB at most on an object store (a
    /// later gc goes on). Reports the bytes reclaimed; exits 1 if a chunk did not decode to
    /// its digest or its dictionary is missing (copied as it was: run fsck).
    Gc {
        /// The store to collect (not mounted).
        #[arg(value_hint = ValueHint::DirPath)]
        store: PathBuf,
        /// Leave the packs written since the last gc as they are (a later gc settles them),
        /// and in a `--parses compact-at-gc` store the parses of the files stored since too.
        #[arg(long)]
        no_settle: bool,
        /// Print one JSON object instead (reclaimed_bytes, bytes_before, bytes_after,
        /// chunks_dropped, packs_deleted, packs_rewritten, packs_settled: those of them
        /// rewritten only to settle them, packs_left_unsettled, chunks_damaged, packs_purged).
        /// On an object store
        /// a pack gc no longer uses goes to the bucket's trash, out of every listing, and a
        /// gc at least 20 minutes later deletes its object (packs_purged): a node still
        /// reading it meanwhile is not cut off.
        #[arg(long)]
        json: bool,
    },
    /// Print a sorted CDXJ index of the stored WARCs under PATHs, for pywb and other replay
    /// tools.
    ///
    /// Built from the stored header chunks alone; its lines are those cdxj-indexer 1.5 prints
    /// for the same files.
    #[command(after_help = "Example:\n  warcfs index /srv/warc-store /collections/web/archive > index.cdxj")]
    Index {
        /// The store to index (may be mounted).
        #[arg(value_hint = ValueHint::DirPath)]
        store: PathBuf,
        /// Directories or files inside the store to index (default: all of it). Lines name
        /// each file by its path below the PATH it was found under, as cdxj-indexer does for
        /// a directory.
        #[arg(value_name = "PATH")]
        paths: Vec<String>,
        /// The index format.
        #[arg(long, value_enum, default_value = "cdxj")]
        format: IndexFormat,
    },
    /// Write copies of the stored WARCs under PATHs into DIR, their repeated payloads written
    /// as revisit records (--revisits) or their revisit records as whole responses
    /// (--resolved).
    ///
    /// --revisits: every response whose payload an earlier exported response holds, byte for
    /// byte, is an identical-payload-digest revisit (the profile of its file's WARC version)
    /// naming its original's payload digest, target URI, date and record id verbatim, so that
    /// pywb and OpenWayback find it. The original of a payload is its first capture in the
    /// order files are exported (PATHs in the order given, the files under each by path):
    /// export oldest first. --resolved: every revisit whose original is among the exported
    /// files is written as the response it stands for, so that each file stands alone.
    /// Everything else is copied as stored. DIR/export.json lists, for each file, the files
    /// it names: index them in one collection.
    #[command(
        group(clap::ArgGroup::new("kind").required(true).args(["revisits", "resolved"])),
        after_help = "Examples:\n  warcfs export --revisits /srv/warc-store /crawls/2024 --to /srv/exchange/2024\n  warcfs export --resolved /srv/warc-store /received --to /srv/whole"
    )]
    Export {
        /// The store to export from (may be mounted).
        #[arg(value_hint = ValueHint::DirPath)]
        store: PathBuf,
        /// Directories or files inside the store to export; each file lands at its path below
        /// the PATH it was found under.
        #[arg(value_name = "PATH", required = true)]
        paths: Vec<String>,
        /// Write repeated payloads as revisit records.
        #[arg(long)]
        revisits: bool,
        /// Write revisit records as the responses they stand for.
        #[arg(long)]
        resolved: bool,
        /// The directory to write into (made if missing).
        #[arg(long, value_name = "DIR", value_hint = ValueHint::DirPath)]
        to: PathBuf,
        /// With --revisits: payloads shorter than this stay whole (an empty one always does).
        #[arg(long, value_name = "BYTES", default_value_t = 1)]
        min_size: u64,
    },
    /// Search the text of the stored WARCs: pages found, with every capture of each.
    ///
    /// Each unique text (an HTML or plain-text payload's words) is indexed once, and each
    /// capture of it (revisits too) is a row pointing at it, in STORE/search. Words must all
    /// be there; "a phrase" in quotes; title:word; -word leaves out. Results are grouped by
    /// URL (first and last capture, how many), best first; --captures gives one line per
    /// capture. On a store that is not mounted the index is brought up to date first; a
    /// mount keeps it up to date itself once it exists (`warcfs search update STORE`).
    #[command(
        args_conflicts_with_subcommands = true,
        subcommand_negates_reqs = true,
        after_help = "Examples:\n  warcfs search update /srv/warc-store\n  warcfs search /srv/warc-store '\"climate report\"' --from 2024 --url https://example.org/\n  warcfs search /srv/warc-store budget --captures --json"
    )]
    Search {
        #[command(subcommand)]
        cmd: Option<SearchCmd>,
        /// The store to search (may be mounted).
        #[arg(value_hint = ValueHint::DirPath, required = true)]
        store: Option<PathBuf>,
        /// The query (its words joined).
        #[arg(value_name = "QUERY", required = true)]
        query: Vec<String>,
        /// Captures from this time on (a timestamp or its start: 2024, 20240315).
        #[arg(long, value_name = "TIMESTAMP")]
        from: Option<String>,
        /// Captures up to this time (inclusive, a timestamp or its start).
        #[arg(long, value_name = "TIMESTAMP")]
        to: Option<String>,
        /// Captures of URLs that begin with this.
        #[arg(long, value_name = "PREFIX")]
        url: Option<String>,
        /// Captures of this MIME type (or type prefix: text/).
        #[arg(long)]
        mime: Option<String>,
        /// The most results (URLs, or captures with --captures).
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// One result per capture instead of per URL.
        #[arg(long)]
        captures: bool,
        /// JSON lines: pywb's CDXJ fields (urlkey, timestamp, url, mime, status, digest,
        /// length, offset, filename) with score, title and snippet.
        #[arg(long)]
        json: bool,
        /// Where the index is (default STORE/search; for measurements).
        #[arg(long, hide = true, value_name = "DIR")]
        index_dir: Option<PathBuf>,
    },
    /// Serve the search over HTTP: a search page at / and pywb-style queries at /search.
    ///
    /// /search takes pywb's CDX server parameters (url, matchType, from, to, limit,
    /// filter=mime:TYPE or status:CODE, output=json) and q, and gives a capture a line with
    /// warcfs's CDXJ fields, score, title and snippet. Result links replay in pywb at
    /// --replay. Runs until stopped (Ctrl-C, SIGTERM).
    #[command(after_help = "Example:\n  warcfs serve /srv/warc-store --replay http://127.0.0.1:8080/my-web-archive")]
    Serve {
        /// The store whose search index is served (may be mounted).
        #[arg(value_hint = ValueHint::DirPath)]
        store: PathBuf,
        /// The address to listen on (port 0: any free port, printed).
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8090")]
        listen: String,
        /// pywb's URL of the collection the results replay in.
        #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:8080/archive")]
        replay: String,
    },
    /// Make DEST a complete, consistent copy of the store as of now, for backups.
    ///
    /// Packs are hard-linked where DEST is on the same filesystem (copied otherwise); run
    /// again on the same DEST to update it. Works while the store is mounted.
    #[command(after_help = "Example:\n  warcfs snapshot /srv/warc-store /srv/warc-snap && rsync -a --delete /srv/warc-snap/ backup:/srv/warc-copy/")]
    Snapshot {
        /// The store to copy (may be mounted).
        #[arg(value_hint = ValueHint::DirPath)]
        store: PathBuf,
        /// The directory to make or update as a copy of the store.
        #[arg(value_hint = ValueHint::DirPath)]
        dest: PathBuf,
    },
    /// Mount a store as a directory (creates the store if missing).
    ///
    /// Returns once the mount is live; `warcfs umount MOUNTPOINT`, `fusermount3 -u`, `umount`
    /// or SIGTERM end it. Logs to STORE/warcfs.log.
    #[command(after_help = "Examples:\n  warcfs mount /srv/warc-store /srv/archive\n  warcfs mount /srv/warc-store /srv/archive -o allow_other,min_free=1G")]
    Mount {
        /// The store to serve (created if missing).
        #[arg(value_hint = ValueHint::DirPath)]
        store: PathBuf,
        /// An existing directory to mount it on.
        #[arg(value_hint = ValueHint::DirPath)]
        mountpoint: PathBuf,
        /// Stay in the foreground and log to stderr as well.
        #[arg(short, long)]
        foreground: bool,
        /// Mount options, comma-separated or repeated: allow_other, allow_root, ro,
        /// min_free=SIZE (free space that written data must leave on the store's disk,
        /// default 256M, so its metadata always finds room), cache_size=SIZE (on an object
        /// store: this node's cache of pack ranges, default the store's, 1G), and the generic
        /// fstab ones.
        #[arg(short = 'o', value_name = "OPTIONS")]
        options: Vec<String>,
    },
    /// Unmount a warcfs mount, and return once every file written through it is stored.
    ///
    /// `fusermount3 -u` returns before that; this waits until the daemon has exited.
    Umount {
        /// Where the store is mounted.
        #[arg(value_hint = ValueHint::DirPath)]
        mountpoint: PathBuf,
    },
    /// Rebuild a part of the store from the packs, which hold everything.
    #[command(subcommand)]
    Repair(Repair),
    /// Print the shell completion script for warcfs.
    ///
    /// Generated from the same definitions as --help; install it where the shell looks.
    #[command(after_help = "Examples:\n  warcfs completions bash > /etc/bash_completion.d/warcfs\n  warcfs completions zsh > /usr/local/share/zsh/site-functions/_warcfs\n  warcfs completions fish > ~/.config/fish/completions/warcfs.fish")]
    Completions {
        /// The shell to complete for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the warcfs(1) man page (roff), or write every command's page to a directory.
    ///
    /// Generated from the same definitions as --help.
    #[command(after_help = "Examples:\n  warcfs man | man -l -\n  warcfs man --dir /usr/local/share/man/man1   # warcfs.1, warcfs-gc.1, ...")]
    Man {
        /// Write warcfs.1 and a warcfs-COMMAND.1 for every command into DIR (made if
        /// missing) instead of printing warcfs.1.
        #[arg(long, value_name = "DIR", value_hint = ValueHint::DirPath)]
        dir: Option<PathBuf>,
    },
    /// Print the text of the PDF on stdin, for the search: the child process it runs each
    /// PDF's parsing in, under limits (`search::pdf`); not for people, so hidden.
    #[cfg(feature = "pdf")]
    #[command(name = "pdf-text", hide = true)]
    PdfText,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every command, with the chain of names that leads to it.
    fn commands() -> Vec<(String, clap::Command)> {
        let mut out = Vec::new();
        let mut todo = vec![("warcfs".to_string(), Cli::command())];
        while let Some((name, cmd)) = todo.pop() {
            for sub in cmd.get_subcommands() {
                todo.push((format!("{name} {}", sub.get_name()), sub.clone()));
            }
            out.push((name, cmd));
        }
        out
    }

    #[test]
    fn the_definitions_are_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_command_and_argument_is_described() {
        let mut missing = Vec::new();
        for (name, cmd) in commands() {
            if cmd.get_about().is_none() {
                missing.push(format!("{name}: the command"));
            }
            for arg in cmd.get_arguments() {
                if arg.get_help().is_none() {
                    missing.push(format!("{name}: {}", arg.get_id()));
                }
            }
        }
        assert!(missing.is_empty(), "no --help text for: {missing:?}");
        assert!(commands().len() > 12, "the walk should reach every subcommand");
    }
}
