//! End-to-end tests of the `warcfs` command line (real files, a real RocksDB index, real
//! pack files, and the binary run as a child process): the interface. Bad input gets one
//! line and the exit status of its kind; every subcommand's help describes every argument;
//! progress on a terminal; completions and man pages from the same definitions.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::io::Write;
use std::process::Stdio;

use tempfile::TempDir;

use common::*;

#[test]
fn bad_input_gets_one_line_and_nonzero_exit() {
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let st = s(&store);

    // A missing source: named, and nothing is created.
    let missing = tmp.path().join("no-such-source.warc.gz");
    fails_with(&["import", &st, &s(&missing)], &[&s(&missing)]);
    assert!(!store.exists(), "a failed import must not create the store");

    // No such store: named, and not created by a read-only command.
    let nostore = tmp.path().join("nostore");
    fails_with(&["cat", &s(&nostore), "/x"], &[&s(&nostore), "no such store"]);
    fails_with(&["ls", &s(&nostore)], &[&s(&nostore), "no such store"]);
    fails_with(&["stats", &s(&nostore)], &[&s(&nostore)]);
    assert!(!nostore.exists(), "cat/ls/stats must not create a store");
    // An empty directory is no store either, for commands that do not create one.
    let emptydir = tmp.path().join("emptydir");
    fs::create_dir(&emptydir).unwrap();
    fails_with(&["ls", &s(&emptydir)], &[&s(&emptydir), "no such store"]);
    assert_eq!(fs::read_dir(&emptydir).unwrap().count(), 0);

    // A store with a file; missing paths in it.
    let src = tmp.path().join("a.txt");
    fs::write(&src, b"hello\n").unwrap();
    ok(&["import", &st, &s(&src), "--to", "/d"]);
    fails_with(&["cat", &st, "/d/missing.warc"], &["/d/missing.warc"]);
    fails_with(&["cat", &st, "/d"], &["/d", "is a directory"]);
    fails_with(&["ls", &st, "/nowhere"], &["/nowhere"]);
    fails_with(&["rm", &st, "/d/missing"], &["/d/missing"]);
    assert_cat_eq(&store, "/d/a.txt", &src);

    // A non-empty directory that is not a store: refused and left alone.
    let notstore = tmp.path().join("notstore");
    fs::create_dir(&notstore).unwrap();
    fs::write(notstore.join("keep.txt"), b"mine").unwrap();
    fails_with(&["import", &s(&notstore), &s(&src)], &[&s(&notstore), "not a warcfs store"]);
    fails_with(&["stats", &s(&notstore)], &[&s(&notstore), "not a warcfs store"]);
    fails_with(&["init", &s(&notstore)], &[&s(&notstore), "not a warcfs store"]);
    let names: Vec<_> = fs::read_dir(&notstore).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, vec![std::ffi::OsString::from("keep.txt")], "nothing may be written into a foreign directory");
    // A plain file where the store should be.
    fails_with(&["stats", &s(&src)], &[&s(&src)]);

    // A store of a future format version.
    let future = tmp.path().join("future");
    ok(&["init", &s(&future)]);
    let cfg_path = future.join("warcfs.json");
    let mut cfg: serde_json::Value = serde_json::from_slice(&fs::read(&cfg_path).unwrap()).unwrap();
    assert_eq!(cfg["format"], "warcfs-store");
    assert_eq!(cfg["version"], 11);
    // And one of the version before (no metadata in the packs), which this warcfs refuses too.
    let old = tmp.path().join("old");
    ok(&["init", &s(&old)]);
    let mut old_cfg = cfg.clone();
    old_cfg["version"] = 2.into();
    fs::write(old.join("warcfs.json"), serde_json::to_vec(&old_cfg).unwrap()).unwrap();
    let line = fails_with(&["ls", &s(&old)], &[&s(&old), "unsupported store format", "version 2", "versions 3, 4"]);
    assert!(line.contains("import"), "should say what to do: {line}");
    cfg["version"] = 99.into();
    fs::write(&cfg_path, serde_json::to_vec(&cfg).unwrap()).unwrap();
    for cmd in [vec!["stats", &s(&future)], vec!["ls", &s(&future)], vec!["import", &s(&future), &s(&src)]] {
        let line = fails_with(&cmd, &[&s(&future), "unsupported store format"]);
        assert!(line.contains("99"), "should say which version it found: {line}");
    }

    // A busy store: another process holds the lock (and wrote its pid into it).
    let lock = FileLock::exclusive(&store.join("lock"));
    lock.file().set_len(0).unwrap();
    writeln!(lock.file(), "{}", std::process::id()).unwrap();
    let busy = format!("in use by process {}", std::process::id());
    fails_with(&["import", &st, &s(&src), "--to", "/e"], &[&st, &busy]);
    fails_with(&["rm", &st, "/d/a.txt"], &[&st, &busy]);
    fails_with(&["fsck", &st], &[&st, &busy]);
    fails_with(&["gc", &st], &[&st, &busy]);
    // Reading works on a store another process owns (a live mount): read-only.
    ok(&["stats", &st]);
    assert_cat_eq(&store, "/d/a.txt", &src);
    drop(lock);
    assert_cat_eq(&store, "/d/a.txt", &src);
    assert!(ls(&store, "/").iter().all(|(n, _)| n != "e"), "a refused import must not have written");

    // Bad arguments are refused by the parser with the usage exit status.
    let r = run(&["init", &s(&tmp.path().join("x")), "--verify", "sometimes"]);
    assert_eq!(r.code, Some(2), "{}", r.describe());
    assert!(!tmp.path().join("x").exists());
}

/// Every subcommand of the binary, as its `--help` is asked for.
const SUBCOMMANDS: &[&[&str]] = &[
    &["init"],
    &["import"],
    &["cat"],
    &["ls"],
    &["rm"],
    &["stats"],
    &["fsck"],
    &["gc"],
    &["index"],
    &["export"],
    &["search"],
    &["search", "update"],
    &["search", "rebuild"],
    &["search", "stats"],
    &["serve"],
    &["snapshot"],
    &["mount"],
    &["umount"],
    &["repair"],
    &["repair", "index"],
    &["completions"],
    &["man"],
];

/// The entries of a `--help` (`  <STORE>`, `  -r, --recursive`, ...) with the first line of
/// their description: on the same line after two spaces, or (long help) on the next.
fn help_entries(help: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = help.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let Some(e) = l.strip_prefix("  ").filter(|e| e.starts_with(['<', '[', '-'])) else { continue };
        let (entry, description) = match e.split_once("  ") {
            Some((entry, d)) => (entry, d.trim().to_string()),
            None => (e, lines.get(i + 1).map(|d| d.trim().to_string()).unwrap_or_default()),
        };
        out.push((entry.trim().to_string(), description));
    }
    out
}

/// What a user sees of each subcommand: its usage and, for every argument and option, a
/// description (the unit test in src/cli/args.rs checks the definitions themselves).
#[test]
fn every_subcommand_explains_every_argument_in_its_help() {
    for sub in SUBCOMMANDS {
        let args: Vec<&str> = sub.iter().copied().chain(["--help"]).collect();
        let r = ok(&args);
        let help = r.out();
        assert!(help.contains(&format!("Usage: warcfs {}", sub.join(" "))), "{}", r.describe());
        let entries = help_entries(&help);
        assert!(entries.iter().any(|(e, _)| e.starts_with("-h, --help")), "{}", r.describe());
        for (entry, description) in &entries {
            assert!(!description.is_empty() && !description.starts_with(['<', '[', '-']), "`warcfs {} --help`: {entry} is not described:\n{help}", sub.join(" "));
        }
        // The store-taking commands name it as a described argument.
        if !matches!(sub[..], ["umount"] | ["repair"] | ["completions"] | ["man"]) {
            assert!(entries.iter().any(|(e, _)| e == "<STORE>"), "{}", r.describe());
        }
    }
    let top = ok(&["--help"]).out();
    assert!(top.contains("Examples:") && top.contains("warcfs import"), "{top}");
    for sub in ["import", "mount", "index", "snapshot", "repair index"] {
        let args: Vec<&str> = sub.split(' ').chain(["--help"]).collect();
        let help = ok(&args).out();
        assert!(help.contains("Example") && help.contains(&format!("  warcfs {sub} /")), "`warcfs {sub} --help` has no example:\n{help}");
    }
}

#[test]
fn index_format_is_a_closed_list() {
    let tmp = TempDir::new().unwrap();
    let (store, _) = store_with_sample(tmp.path(), "webrecorder-warcio/example.warc.gz");
    // Refused by the parser, before the store is opened: clap's usage error, exit 2.
    let r = run(&["index", &s(&store), "--format", "cdx"]);
    assert_eq!(r.code, Some(2), "{}", r.describe());
    assert!(r.stderr.contains("invalid value 'cdx' for '--format <FORMAT>'") && r.stderr.contains("[possible values: cdxj]"), "{}", r.describe());
    assert!(r.stdout.is_empty(), "{}", r.describe());
    let named = ok(&["index", &s(&store), "--format", "cdxj"]);
    let default = ok(&["index", &s(&store)]);
    assert!(!named.stdout.is_empty() && named.stdout == default.stdout, "{}", named.describe());
}

/// Runs `warcfs ARGS...` on a terminal (util-linux `script` gives it one for stdin, stdout
/// and stderr), as at a shell; returns whether it exited 0 and all the terminal received.
fn on_a_terminal(args: &[&str]) -> (bool, String) {
    let quoted: Vec<String> = std::iter::once(BIN).chain(args.iter().copied()).map(|a| format!("'{}'", a.replace('\'', r"'\''"))).collect();
    let out = std::process::Command::new("script")
        .args(["-qec", &format!("stty cols 200 && exec {}", quoted.join(" ")), "/dev/null"])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("spawn script (util-linux)");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
}

/// On a terminal every long command shows what it is doing on stderr (import a bar, the
/// others a spinner) and clears it before its report; --quiet (before or after the command)
/// draws nothing and leaves the report as it was. Off a terminal nothing is drawn either.
#[test]
fn long_commands_show_progress_on_a_terminal_unless_quiet() {
    let tmp = TempDir::new().unwrap();
    let store = tmp.path().join("store");
    let (st, sample) = (s(&store), s(&real_corpus().join("webrecorder-warcio")));
    let snap = s(&tmp.path().join("snap"));
    let cases: &[(&[&str], &str, &str)] = &[
        (&["import", &st, &sample], "B/s ", "imported "),
        (&["fsck", &st], "checking files, refcounts and packs", ": clean ("),
        (&["index", &st], "reading record headers", "\"filename\": \"webrecorder-warcio/"),
        (&["snapshot", &st, &snap], "linking packs", "snapshot "),
        (&["gc", &st], "dropping unreferenced chunks", "reclaimed "),
    ];
    for (args, progress, report) in cases {
        let (ok, shown) = on_a_terminal(args);
        assert!(ok && shown.contains(progress) && shown.contains(report), "warcfs {args:?} on a terminal:\n{shown}");
        assert!(shown.contains("\u{1b}[2K"), "the progress line is cleared: {shown:?}");
        for quiet in [[&["--quiet"][..], args].concat(), [args, &["-q"][..]].concat()] {
            let (ok, quiet_out) = on_a_terminal(&quiet);
            assert!(ok && quiet_out.contains(report), "warcfs {quiet:?}:\n{quiet_out}");
            assert!(!quiet_out.contains(progress) && !quiet_out.contains('\u{1b}'), "warcfs {quiet:?} drew progress:\n{quiet_out}");
        }
        let piped = run(args);
        assert!(piped.ok() && piped.stderr.is_empty(), "no progress off a terminal:\n{}", piped.describe());
    }
    // repair index, on a store whose index is gone.
    fs::remove_dir_all(store.join("index")).unwrap();
    let (ok, shown) = on_a_terminal(&["repair", "index", &st]);
    assert!(ok && shown.contains("rebuilding the index from the packs") && shown.contains("rebuilt the index of"), "{shown}");
    fs::remove_dir_all(store.join("index")).unwrap();
    let (ok, quiet_out) = on_a_terminal(&["repair", "index", &st, "--quiet"]);
    assert!(ok && quiet_out.contains("rebuilt the index of") && !quiet_out.contains('\u{1b}'), "{quiet_out}");
    assert_fsck_clean(&store, false);
}

/// The exit statuses `warcfs --help` documents: 0 done, 1 problems found in the store, 2 a
/// usage error (clap's), 3 any other error, in one line on stderr.
#[test]
fn the_exit_status_says_what_happened() {
    for args in [&["--help"][..], &["--version"], &["help", "fsck"], &["fsck", "--help"], &["repair", "index", "-h"]] {
        let r = ok(args);
        assert!(!r.stdout.is_empty() && r.stderr.is_empty(), "{}", r.describe());
    }
    assert!(ok(&["--help"]).out().contains("Exit status:\n  0  done"), "--help documents the exit statuses");
    let tmp = TempDir::new().unwrap();
    let (store, _) = store_with_sample(tmp.path(), "webrecorder-warcio/example.warc.gz");
    let st = s(&store);
    for args in [&["frobnicate"][..], &["fsck"], &["gc", &st, "--bogus"], &["init", "x", "--verify", "maybe"], &["init", "x", "--pack-size", "12"], &[]] {
        let r = run(args);
        assert_eq!(r.code, Some(2), "a usage error: {}", r.describe());
        assert!(r.stdout.is_empty() && (r.stderr.starts_with("error: ") || r.stderr.contains("Usage: warcfs")), "{}", r.describe());
    }
    fails_with(&["fsck", &s(&tmp.path().join("nostore"))], &["no such store"]);
    fails_with(&["cat", &st, "/no-such-file"], &["/no-such-file"]);

    // Problems in the store: its data pack gone, fsck finds them, and a repair of its index
    // (from what packs are left) finishes, says so and exits 1 too.
    assert_fsck_clean(&store, false);
    let biggest = sealed_packs(&store).into_iter().max_by_key(|p| fs::metadata(p).unwrap().len()).unwrap();
    fs::remove_file(&biggest).unwrap();
    let r = run(&["fsck", &st]);
    assert_eq!(r.code, Some(1), "{}", r.describe());
    assert!(r.stderr.ends_with(" problems\n"), "{}", r.describe());
    fs::remove_dir_all(store.join("index")).unwrap();
    let r = run(&["repair", "index", &st]);
    assert_eq!(r.code, Some(1), "{}", r.describe());
    assert!(r.out().starts_with("rebuilt the index of "), "{}", r.describe());
    assert!(r.stderr.lines().last().is_some_and(|l| l.starts_with("warcfs: ") && l.contains("the index is rebuilt, but")), "{}", r.describe());
    assert_eq!(run(&["fsck", &st, "--json"]).code, Some(1));
}

/// Shell completions and man pages come from the same definitions as --help: bash completes
/// the commands and options with them, and there is a page for every command.
#[test]
fn completions_and_man_pages_are_generated_from_the_definitions() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let r = ok(&["completions", shell]);
        let text = r.out();
        assert!(text.contains("warcfs") && text.contains("snapshot") && text.contains("deep"), "{}", r.describe());
    }
    assert_eq!(run(&["completions", "tcsh"]).code, Some(2), "an unknown shell is a usage error");
    // What bash offers, with the script loaded as a user's shell would.
    let complete = |words: &str| -> String {
        let script = format!(
            "source <('{BIN}' completions bash) && COMP_WORDS=({words}) && COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)) && _warcfs warcfs \"${{COMP_WORDS[-1]}}\" \"${{COMP_WORDS[-2]}}\" && echo \"${{COMPREPLY[*]}}\""
        );
        let out = std::process::Command::new("bash").args(["-c", &script]).stdin(Stdio::null()).output().expect("spawn bash");
        assert!(out.status.success(), "bash: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let offered = complete("warcfs in");
    assert_eq!(offered.split(' ').collect::<BTreeSet<_>>(), BTreeSet::from(["init", "index"]), "{offered}");
    assert!(complete("warcfs fsck --").split(' ').any(|w| w == "--deep"), "{}", complete("warcfs fsck --"));
    assert_eq!(complete("warcfs index /s --format ''"), "cdxj");

    let page = ok(&["man"]).out();
    assert!(page.contains(".TH warcfs 1") && page.contains(".SH SYNOPSIS") && page.contains("warcfs\\-import(1)"), "{page}");
    assert!(page.contains("Exit status:"), "the man page documents the exit statuses:\n{page}");
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path().join("man1");
    ok(&["man", "--dir", &s(&dir)]);
    let mut want: BTreeSet<String> = SUBCOMMANDS.iter().map(|sub| format!("warcfs-{}.1", sub.join("-"))).collect();
    want.insert("warcfs.1".into());
    let got: BTreeSet<String> = fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(got, want);
    let fsck = fs::read_to_string(dir.join("warcfs-fsck.1")).unwrap();
    assert!(fsck.contains("\\-\\-json") && fsck.contains("re\\-hash every chunk"), "{fsck}");
}
