//! The `warcfs` binary: parses the command line and reports errors as one line each, with
//! the exit statuses of `warcfs::cli::exit`.

use clap::Parser;

fn main() {
    // The daemon allocates and frees large buffers at a high rate: decoded header blocks and
    // partly read chunks (up to 4 MiB) in the read cache, rebuilt gzip members, zlib's
    // ~256 KiB of state per member rebuilt, the 32 MiB windows of an ingest. glibc would hand
    // big ones back to the kernel on free, and every 4 KiB of the next one would cost a page
    // fault and a zeroed page (measured: a third of a 6.5 KB member's deflate went to faults
    // on zlib's fresh state): keep them in the heap for reuse instead.
    // SAFETY: mallopt only tunes the allocator; it is called before any thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
    }
    use warcfs::cli::{exit, Cli};
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // --help and --version print to stdout and are no error; a usage error goes to stderr.
        Err(e) => {
            let _ = e.print();
            std::process::exit(if e.use_stderr() { exit::USAGE } else { exit::OK });
        }
    };
    match warcfs::cli::run(cli) {
        Ok(code) => {
            warcfs::disk::exited();
            std::process::exit(code)
        }
        Err(e) => {
            eprintln!("warcfs: {e:#}");
            std::process::exit(exit::ERROR);
        }
    }
}
