//! A PDF's text for the search (feature `pdf`): its Info dictionary's Title and the words of
//! its pages (pdf-extract over lopdf), whitespace squeezed as the other kinds' are.
//!
//! A PDF parser can panic, loop, or allocate without bound on a hostile or broken file, and a
//! thread cannot be stopped, so the parsing is done by a child process: `warcfs pdf-text`
//! (hidden), which reads the PDF on stdin and answers on stdout. The child first sets its own
//! limits (`MEMORY` of address space, `CPU_SECONDS` of CPU, no core file) and runs the parser
//! under `catch_unwind`; the parent (`text`) hands it at most `MAX_PDF` bytes, reads at most
//! `MAX_ANSWER` back, and kills it after `TIMEOUT` of wall-clock time. Whatever goes wrong
//! costs that PDF only: it is skipped with a log line naming it and why.
//!
//! The child is the running executable (`/proc/self/exe`, which runs even after an upgrade
//! replaced the file: the child is always the parent's own version), or `WARCFS_EXE` if set
//! (for a program linking the library). Its answer begins with `ANSWER_HEADER`, so an
//! executable that is not warcfs (a test binary, which would take `pdf-text` for a test
//! filter) gives no answer and the PDF is skipped: it never recurses into a search.

use std::io::{self, Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::extract::{squeeze, Text, MAX_TEXT};

/// The hidden subcommand the child runs.
pub const SUBCOMMAND: &str = "pdf-text";
/// The largest PDF read (as `build::MAX_BLOCK`, the largest record block read for its text):
/// a larger one is skipped.
pub const MAX_PDF: usize = 64 << 20;
/// The child's address space: room for a `MAX_PDF` file, lopdf's objects and streams decoded
/// from it, and the binary itself; an allocation past it fails (the child aborts).
const MEMORY: u64 = 1 << 30;
/// The child's CPU time: SIGXCPU at this, SIGKILL a second later.
const CPU_SECONDS: u64 = 20;
/// The child's wall-clock time, after which it is killed (a parser stuck waiting, or one
/// sharing a busy CPU).
const TIMEOUT: Duration = Duration::from_secs(30);
/// How the child's answer begins: `ANSWER_HEADER`, the title, `\n`, the body, `\n` (both
/// squeezed, so neither holds a `\n`).
const ANSWER_HEADER: &[u8] = b"warcfs pdf-text 1\n";
/// The longest answer: a header, a title and a body of at most `MAX_TEXT` bytes each, and
/// their two line ends.
const MAX_ANSWER: usize = ANSWER_HEADER.len() + 2 * MAX_TEXT + 2;
/// The most of the child's stderr kept, for the log line of a failure.
const MAX_STDERR: usize = 4 << 10;
/// The most bytes of raw page text taken from the parser (before squeezing): enough for
/// `MAX_TEXT` of words in widely spaced text, and the parser is stopped there.
const MAX_RAW: usize = 4 * MAX_TEXT;

/// The text of `pdf`, or None if it is skipped: then a `log::warn!` says which (`from`: its
/// URL and record, or "" if not known) and why, and the caller goes on without it.
pub fn text_or_skip(from: &str, pdf: &[u8]) -> Option<Text> {
    match text(pdf) {
        Ok(t) => Some(t),
        Err(why) => {
            log::warn!("{}: PDF text skipped: {why}", if from.is_empty() { "a PDF" } else { from });
            None
        }
    }
}

/// The text of `pdf`, extracted by a `warcfs pdf-text` child process; what went wrong if
/// none (too large, no warcfs to run, the child failed, was killed or timed out).
pub fn text(pdf: &[u8]) -> Result<Text, String> {
    if pdf.len() > MAX_PDF {
        return Err(format!("{} bytes, more than the {} MiB a PDF is read to", pdf.len(), MAX_PDF >> 20));
    }
    let exe = match std::env::var_os("WARCFS_EXE") {
        Some(p) => std::path::PathBuf::from(p),
        None if std::path::Path::new("/proc/self/exe").exists() => "/proc/self/exe".into(),
        None => std::env::current_exe().map_err(|e| format!("no executable to run `{SUBCOMMAND}`: {e}"))?,
    };
    let mut child = Command::new(&exe)
        .arg(SUBCOMMAND)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {} {SUBCOMMAND}: {e}", exe.display()))?;
    let (stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    let timeout = timeout();
    // The pipes are fed and drained by threads of their own while this one keeps the clock:
    // a child that stops reading or writing must not stop the parent.
    let (status, answer, errors) = std::thread::scope(|s| {
        let threads = (|| -> io::Result<_> {
            let b = || std::thread::Builder::new().name("pdf-text".into());
            let feed = b().spawn_scoped(s, move || {
                // A child that ends without reading it all closes the pipe: no error of ours.
                if let Some(mut i) = stdin {
                    let _ = i.write_all(pdf);
                }
            })?;
            let out = b().spawn_scoped(s, move || drain(stdout, MAX_ANSWER + 1))?;
            let err = b().spawn_scoped(s, move || drain(stderr, MAX_STDERR))?;
            Ok((feed, out, err))
        })();
        let status = match &threads {
            Ok(_) => wait(&mut child, timeout),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(format!("cannot start a thread to talk to it: {e}"))
            }
        };
        // (The threads end now that the child has: its ends of the pipes are closed.)
        let (answer, errors) = match threads {
            Ok((_, out, err)) => (out.join().unwrap_or_default(), err.join().unwrap_or_default()),
            Err(_) => (Vec::new(), Vec::new()),
        };
        (status, answer, errors)
    });
    let why = |what: String| {
        let last = String::from_utf8_lossy(&errors).lines().rev().find(|l| !l.trim().is_empty()).map(|l| l.trim().chars().take(300).collect::<String>());
        match last {
            Some(l) => format!("{what}: {l}"),
            None => what,
        }
    };
    let status = status.map_err(why)?;
    if !status.success() {
        return Err(why(ended(status)));
    }
    parse_answer(&answer).map_err(why)
}

/// The time the child is given: `TIMEOUT`, or in a debug build `WARCFS_PDF_TIMEOUT_MS` (for
/// tests of a child that hangs).
fn timeout() -> Duration {
    #[cfg(debug_assertions)]
    if let Some(ms) = std::env::var("WARCFS_PDF_TIMEOUT_MS").ok().and_then(|v| v.trim().parse().ok()) {
        return Duration::from_millis(ms);
    }
    TIMEOUT
}

/// Waits for `child` to end, for at most `timeout`; kills it (SIGKILL) then.
fn wait(child: &mut Child, timeout: Duration) -> Result<ExitStatus, String> {
    let start = Instant::now();
    let mut nap = Duration::from_millis(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) if start.elapsed() < timeout => {
                std::thread::sleep(nap);
                nap = (nap * 2).min(Duration::from_millis(50));
            }
            res => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(match res {
                    Err(e) => format!("waiting for it: {e}"),
                    _ => format!("no answer in {:.1} s: killed", timeout.as_secs_f64()),
                });
            }
        }
    }
}

/// How a child that failed ended, in words.
fn ended(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status.signal() {
        Some(sig @ (libc::SIGXCPU | libc::SIGKILL)) => format!("killed by signal {sig} (past its {CPU_SECONDS} s of CPU?)"),
        Some(libc::SIGABRT) => format!("aborted (past its {} MiB of memory?)", MEMORY >> 20),
        Some(sig) => format!("killed by signal {sig}"),
        None => format!("the child failed ({status})"),
    }
}

/// At most `keep` bytes of `pipe`, the rest read and dropped (so that its writer never waits).
fn drain(pipe: Option<impl Read>, keep: usize) -> Vec<u8> {
    let mut out = Vec::new();
    if let Some(mut p) = pipe {
        let _ = (&mut p).take(keep as u64).read_to_end(&mut out);
        let _ = io::copy(&mut p, &mut io::sink());
    }
    out
}

/// The child's answer for `t`.
fn answer(t: &Text) -> Vec<u8> {
    [ANSWER_HEADER, t.title.as_bytes(), b"\n", t.body.as_bytes(), b"\n"].concat()
}

/// The text in a child's answer; an error if it is not one (not warcfs's, cut short, too long).
fn parse_answer(a: &[u8]) -> Result<Text, String> {
    if a.len() > MAX_ANSWER {
        return Err(format!("an answer of more than {MAX_ANSWER} bytes"));
    }
    let Some(rest) = a.strip_prefix(ANSWER_HEADER) else {
        return Err(format!("no answer of warcfs's (is the executable, or WARCFS_EXE, warcfs? it printed {} bytes)", a.len()));
    };
    let rest = rest.strip_suffix(b"\n").ok_or("an answer cut short")?;
    let nl = rest.iter().position(|&b| b == b'\n').ok_or("an answer without its title")?;
    let (title, body) = (&rest[..nl], &rest[nl + 1..]);
    if title.len() > MAX_TEXT || body.len() > MAX_TEXT || body.contains(&b'\n') {
        return Err("an answer out of its bounds".into());
    }
    let utf8 = |b: &[u8]| String::from_utf8(b.to_vec()).map_err(|_| "an answer that is not UTF-8".to_string());
    Ok(Text { title: utf8(title)?, body: utf8(body)? })
}

/// `warcfs pdf-text`: the text of the PDF on stdin, as an answer on stdout. Returns the exit
/// status: 0 with an answer, 1 for a PDF without text or one the parser failed or panicked
/// on (why on stderr), 3 if the limits could not be set (nothing parsed without them).
pub fn child() -> i32 {
    if let Err(e) = limit() {
        eprintln!("warcfs {SUBCOMMAND}: cannot set its limits: {e}");
        return 3;
    }
    // The answer goes to the real stdout; fd 1 becomes stderr, so that anything a parser
    // prints cannot be taken for text.
    // SAFETY: dup and dup2 of this process's own standard descriptors; `out` owns the new one.
    let mut out = unsafe {
        use std::os::fd::FromRawFd;
        let fd = libc::dup(1);
        if fd < 0 || libc::dup2(2, 1) < 0 {
            eprintln!("warcfs {SUBCOMMAND}: cannot keep stdout apart: {}", io::Error::last_os_error());
            return 3;
        }
        std::fs::File::from_raw_fd(fd)
    };
    let mut pdf = Vec::new();
    if let Err(e) = io::stdin().lock().take(MAX_PDF as u64 + 1).read_to_end(&mut pdf) {
        eprintln!("warcfs {SUBCOMMAND}: reading stdin: {e}");
        return 1;
    }
    if pdf.len() > MAX_PDF {
        eprintln!("warcfs {SUBCOMMAND}: more than {} MiB", MAX_PDF >> 20);
        return 1;
    }
    // A parser stuck for ever, for the tests of the parent's timeout.
    while crate::failpoint::armed("pdf_hang") {
        std::thread::sleep(Duration::from_secs(3600));
    }
    let text = match std::panic::catch_unwind(|| extract(&pdf)) {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => {
            eprintln!("warcfs {SUBCOMMAND}: {e}");
            return 1;
        }
        // (The panic's message is on stderr already, from the panic hook.)
        Err(_) => {
            eprintln!("warcfs {SUBCOMMAND}: the PDF parser panicked");
            return 1;
        }
    };
    match out.write_all(&answer(&text)).and_then(|_| out.flush()) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("warcfs {SUBCOMMAND}: writing the answer: {e}");
            1
        }
    }
}

/// Sets this process's limits: `MEMORY` of address space, `CPU_SECONDS` of CPU, no core file
/// (each no higher than the hard limit it inherited: raising one is refused).
fn limit() -> io::Result<()> {
    let set = |what, soft: u64, hard: u64| {
        let mut have = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes the struct it is given, which lives through the call.
        if unsafe { libc::getrlimit(what, &mut have) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let cap = |v: u64| (v as libc::rlim_t).min(have.rlim_max);
        let l = libc::rlimit { rlim_cur: cap(soft), rlim_max: cap(hard) };
        // SAFETY: setrlimit reads the struct it is given; it only lowers this process's limits.
        if unsafe { libc::setrlimit(what, &l) } == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
    };
    set(libc::RLIMIT_CORE, 0, 0)?;
    set(libc::RLIMIT_CPU, CPU_SECONDS, CPU_SECONDS + 1)?;
    set(libc::RLIMIT_AS, MEMORY, MEMORY)
}

/// The text of `pdf`, extracted in this process (the child's work): its Info Title and its
/// pages' words, each squeezed. The text of the pages before one the parser fails on is kept;
/// an error if there is none and it failed.
pub(crate) fn extract(pdf: &[u8]) -> Result<Text, String> {
    let mut doc = pdf_extract::Document::load_mem(pdf).map_err(|e| format!("not a PDF it can read: {e}"))?;
    if doc.is_encrypted() {
        doc.decrypt("").map_err(|e| format!("encrypted, not with the empty password: {e}"))?;
    }
    let title = info_title(&doc).map(|t| squeeze(&text_string(&t))).unwrap_or_default();
    let mut raw = Capped { buf: Vec::new(), cap: MAX_RAW };
    let done = {
        let w: &mut dyn Write = &mut raw;
        pdf_extract::output_doc(&doc, &mut pdf_extract::PlainTextOutput::new(w))
    };
    let body = squeeze(&String::from_utf8_lossy(&raw.buf));
    // (A PDF without words, a scan, is an empty text, which is no error: it is not indexed.)
    match done {
        Err(e) if body.is_empty() && title.is_empty() && raw.buf.len() < raw.cap => Err(format!("its text: {e}")),
        _ => Ok(Text { title, body }),
    }
}

/// The Title string of `doc`'s Info dictionary, if it has one.
fn info_title(doc: &pdf_extract::Document) -> Option<Vec<u8>> {
    let (_, info) = doc.dereference(doc.trailer.get(b"Info").ok()?).ok()?;
    let (_, title) = doc.dereference(info.as_dict().ok()?.get(b"Title").ok()?).ok()?;
    title.as_str().ok().map(<[u8]>::to_vec)
}

/// A PDF text string as text: UTF-16BE after its BOM, UTF-8 after its BOM (PDF 2.0), else
/// PDFDocEncoding (Latin-1 but for 0x80..=0xA0, which `PDF_DOC_80` maps).
fn text_string(b: &[u8]) -> String {
    if let Some(u16s) = b.strip_prefix(&[0xfe, 0xff]) {
        let units = u16s.chunks_exact(2).map(|c| u16::from_be_bytes([c[0], c[1]]));
        return char::decode_utf16(units).map(|c| c.unwrap_or('\u{FFFD}')).collect();
    }
    if let Some(utf8) = b.strip_prefix(&[0xef, 0xbb, 0xbf]) {
        return String::from_utf8_lossy(utf8).into_owned();
    }
    b.iter().map(|&c| if (0x80..=0xa0).contains(&c) { PDF_DOC_80[usize::from(c - 0x80)] } else { char::from(c) }).collect()
}

/// PDFDocEncoding's characters for 0x80..=0xA0 (PDF 1.7, Annex D.2); 0x9F is undefined.
const PDF_DOC_80: [char; 33] = [
    '•', '†', '‡', '…', '—', '–', 'ƒ', '⁄', '‹', '›', '−', '‰', '„', '“', '”', '‘', '’', '‚', '™', 'ﬁ', 'ﬂ', 'Ł', 'Œ', 'Š', 'Ÿ', 'Ž', 'ı', 'ł', 'œ', 'š', 'ž', '\u{FFFD}', '€',
];

/// A writer that keeps the first `cap` bytes, then fails, which stops the parser: its text
/// is held to a bound whatever the PDF's size.
struct Capped {
    buf: Vec<u8>,
    cap: usize,
}

impl Write for Capped {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        let room = self.cap - self.buf.len();
        if room == 0 && !b.is_empty() {
            return Err(io::Error::other("the text's bound is reached"));
        }
        let n = b.len().min(room);
        self.buf.extend_from_slice(&b[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pdf(title: Option<&str>, words: &str) -> Vec<u8> {
        crate::test_support::one_page_pdf(title, words)
    }

    #[test]
    fn a_pdf_gives_its_words_and_its_info_title() {
        let t = extract(&pdf(Some("(Harvest   report\n2024)"), "Quarterly harvest of warcfs pdfword")).unwrap();
        assert_eq!(t.title, "Harvest report 2024", "squeezed");
        assert_eq!(t.body, "Quarterly harvest of warcfs pdfword");
        // UTF-16BE after its BOM, as most producers write a title with more than ASCII.
        let t = extract(&pdf(Some("<FEFF00430061006600650301002000E9007400E9>"), "x")).unwrap();
        assert_eq!(t.title, "Cafe\u{301} été");
        assert_eq!(extract(&pdf(None, "no title")).unwrap(), Text { title: String::new(), body: "no title".into() });
    }

    #[test]
    fn broken_pdfs_are_errors_not_panics() {
        let whole = pdf(Some("(T)"), "some words");
        for cut in [0, 8, 40, whole.len() / 2] {
            let r = std::panic::catch_unwind(|| extract(&whole[..cut]));
            assert!(matches!(r, Ok(Err(_))), "cut at {cut}: {r:?}");
        }
        assert!(extract(b"<html>not a pdf</html>").is_err());
    }

    #[test]
    fn text_strings_in_their_three_encodings() {
        assert_eq!(text_string(b"\xfe\xff\x00A\xd8\x3d\xde\x00\x00"), "A😀", "the odd byte dropped");
        // A lone surrogate: replaced, no failure.
        assert_eq!(text_string(b"\xfe\xff\x00A\xd8\x3d\x00B\x00"), "A\u{FFFD}B");
        assert_eq!(text_string("\u{feff}déjà".as_bytes()), "déjà");
        assert_eq!(text_string(b"\x93le caf\xe9 \xa0 \x84 \x9f"), "ﬁle café € — \u{FFFD}");
    }

    #[test]
    fn answers_are_read_back_and_anything_else_refused() {
        let t = Text { title: "A title".into(), body: "some words".into() };
        assert_eq!(parse_answer(&answer(&t)).unwrap(), t);
        assert_eq!(parse_answer(&answer(&Text::default())).unwrap(), Text::default());
        // What a test binary prints for `pdf-text` (a filter that matches no test).
        assert!(parse_answer(b"\nrunning 0 tests\n\ntest result: ok.\n").unwrap_err().contains("no answer of warcfs's"));
        let whole = answer(&t);
        assert!(parse_answer(&whole[..whole.len() - 1]).is_err(), "cut short");
        assert!(parse_answer(&whole[..ANSWER_HEADER.len() + 3]).is_err(), "cut in its title");
        let long = Text { title: String::new(), body: "x".repeat(MAX_TEXT + 1) };
        assert!(parse_answer(&answer(&long)).is_err(), "a body over MAX_TEXT");
        assert!(parse_answer(&[ANSWER_HEADER, b"t\n\xff\xfe\n"].concat()).is_err(), "not UTF-8");
        assert!(parse_answer(&[ANSWER_HEADER, b"t\nb\nc\n"].concat()).is_err(), "a line too many");
    }

    #[test]
    fn the_text_taken_from_the_parser_is_bounded() {
        let mut c = Capped { buf: Vec::new(), cap: 10 };
        assert_eq!(c.write(b"123456").unwrap(), 6);
        assert!(c.write_all(b"7890abc").is_err(), "past the bound");
        assert_eq!(c.buf, b"1234567890");
        // A PDF of more text than that: the parser is stopped at the bound, and what it gave
        // is the text (no error).
        let t = extract(&pdf(None, &"word ".repeat(MAX_RAW / 5 + 1000))).unwrap();
        assert!(t.body.len() <= MAX_TEXT && t.body.len() > MAX_TEXT - 10 && t.body.starts_with("word word"), "{}", t.body.len());
    }

    #[test]
    fn too_large_or_without_warcfs_the_pdf_is_skipped() {
        let big = vec![0u8; MAX_PDF + 1];
        assert!(text(&big).unwrap_err().contains("more than the 64 MiB"));
        // This test binary, run as `pdf-text`, runs no test and gives no answer: skipped,
        // not a recursion.
        let why = text(&pdf(None, "words")).unwrap_err();
        assert!(why.contains("no answer of warcfs's"), "{why}");
        assert!(text_or_skip("http://x/a.pdf", b"%PDF-").is_none());
    }
}
