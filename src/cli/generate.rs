//! `warcfs completions` and `warcfs man`: shell completion scripts and man pages generated
//! from the same clap definitions as `--help`, so that none of them can fall behind.

use std::io::{self, Write};
use std::path::Path;

use anyhow::{Context, Result};
use clap::CommandFactory;
use clap_complete::Shell;

use super::{exit, Cli};

/// Prints the completion script for `shell`.
pub fn completions(shell: Shell) -> Result<i32> {
    let mut text = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "warcfs", &mut text);
    print(&text)
}

/// Prints warcfs(1), or writes it and a page per command (warcfs-import(1), ...) to `dir`.
pub fn man(dir: Option<&Path>) -> Result<i32> {
    match dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("{}: cannot create", dir.display()))?;
            clap_mangen::generate_to(Cli::command(), dir).with_context(|| format!("{}: cannot write the man pages", dir.display()))?;
            Ok(exit::OK)
        }
        None => {
            let mut page = Vec::new();
            // As generate_to does: the pages list the commands, not `help`.
            let cmd = Cli::command().disable_help_subcommand(true);
            clap_mangen::Man::new(cmd).render(&mut page).context("rendering the man page")?;
            print(&page)
        }
    }
}

/// Writes `bytes` to stdout; a reader that went away (`| head`) is no error.
fn print(bytes: &[u8]) -> Result<i32> {
    let mut out = io::stdout().lock();
    match out.write_all(bytes).and_then(|_| out.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(e).context("writing to stdout"),
        _ => Ok(exit::OK),
    }
}
