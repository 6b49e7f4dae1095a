//! Progress on stderr for the commands that can run for more than a second: a bar where the
//! amount of work is known up front (import's bytes), otherwise a spinner that says what is
//! being done and for how long (gc, fsck, snapshot and repair cannot tell how far they are;
//! index counts its records). Drawn only when stderr is a terminal and `--quiet` is not
//! given, and cleared when the command ends, error or not, before its report is printed.

use std::borrow::Cow;
use std::io::{self, IsTerminal};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressFinish, ProgressStyle};

fn shown(quiet: bool) -> bool {
    !quiet && io::stderr().is_terminal()
}

fn styled(bar: ProgressBar, template: &str) -> ProgressBar {
    bar.with_style(ProgressStyle::with_template(template).expect("valid template")).with_finish(ProgressFinish::AndClear)
}

/// A bar of `total` bytes (import).
pub fn bytes(quiet: bool, total: u64) -> ProgressBar {
    if !shown(quiet) {
        return ProgressBar::hidden();
    }
    styled(ProgressBar::new(total), "{spinner} [{elapsed_precise}] {bar:30} {bytes}/{total_bytes} {bytes_per_sec} {wide_msg}")
}

/// A spinner showing `msg` and the time spent, drawn at once and then ten times a second.
pub fn spinner(quiet: bool, msg: impl Into<Cow<'static, str>>) -> ProgressBar {
    ticking(quiet, "{spinner} [{elapsed_precise}] {wide_msg}", msg)
}

/// A spinner that also shows a count (`inc` it): "`msg` N `unit`".
pub fn counter(quiet: bool, msg: impl Into<Cow<'static, str>>, unit: &str) -> ProgressBar {
    ticking(quiet, &format!("{{spinner}} [{{elapsed_precise}}] {{msg}} {{human_pos}} {unit}"), msg)
}

fn ticking(quiet: bool, template: &str, msg: impl Into<Cow<'static, str>>) -> ProgressBar {
    if !shown(quiet) {
        return ProgressBar::hidden();
    }
    let bar = styled(ProgressBar::new_spinner(), template);
    bar.set_message(msg);
    bar.tick();
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}
