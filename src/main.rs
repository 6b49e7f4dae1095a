//! The `warcfs` binary: parses the command line and reports errors as one line each.

use clap::Parser;

fn main() {
    // Reads allocate and free chunk-sized buffers (up to 4 MiB) at a high rate. glibc would
    // hand big ones back to the kernel on free, and every 4 KiB of the next one would cost a
    // page fault and a zeroed page: keep them in the heap for reuse instead.
    // SAFETY: mallopt only tunes the allocator; it is called before any thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
    }
    let cli = warcfs::cli::Cli::parse();
    match warcfs::cli::run(cli) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("warcfs: {e:#}");
            std::process::exit(1);
        }
    }
}
