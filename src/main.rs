//! The `warcfs` binary: parses the command line and reports errors as one line each.

use clap::Parser;

fn main() {
    let cli = warcfs::cli::Cli::parse();
    match warcfs::cli::run(cli) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("warcfs: {e:#}");
            std::process::exit(1);
        }
    }
}
