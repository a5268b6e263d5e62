//! Output that never panics. `println!`/`eprintln!` panic when the reader went away
//! (`taskdaemon loops X | head -c1`, `2>&1 | head`); main.rs shadows them with these, which
//! drop the text instead: a closed pipe is not an error, the command goes on (a run keeps
//! its logs and state) and later output is discarded.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Whether a write to stdout found the reader gone (for commands that print forever).
pub fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(Ordering::Relaxed)
}

/// Write to stdout; a reader that went away is remembered, not an error.
pub fn write_out(text: &str) -> std::io::Result<()> {
    if stdout_closed() {
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            STDOUT_CLOSED.store(true, Ordering::Relaxed);
            Ok(())
        }
        r => r,
    }
}

pub fn write_err(text: &str) {
    if quiet_drops(text) {
        return;
    }
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// How much the harness says on stderr: -1 quiet (`-q`: only warnings and errors), 0
/// normal, 1 verbose (`-v`: every cause of an error on its own line).
static LEVEL: std::sync::atomic::AtomicI8 = std::sync::atomic::AtomicI8::new(0);

pub fn set_level(level: i8) {
    LEVEL.store(level, Ordering::Relaxed);
}

pub fn level() -> i8 {
    LEVEL.load(Ordering::Relaxed)
}

/// Whether `-q` drops this stderr text: the harness's informational notes.
fn quiet_drops(text: &str) -> bool {
    level() < 0
        && text.starts_with("taskdaemon")
        && !text.contains("warning")
        && !text.contains("error")
}

/// `--color WHEN`: `always` and `never` decide for every stream; `auto` leaves it to
/// [`colour_on`]'s rules.
pub fn set_colour(when: &str) {
    let choice = match when {
        "always" => anstream::ColorChoice::Always,
        "never" => anstream::ColorChoice::Never,
        _ => return,
    };
    anstream::ColorChoice::write_global(choice);
}

/// Whether colour goes to this stream: `--color`, else a terminal, no NO_COLOR, not
/// TERM=dumb (anstream's rules, also CLICOLOR/CLICOLOR_FORCE).
pub fn colour_on(stderr: bool) -> bool {
    let choice = if stderr {
        anstream::AutoStream::choice(&std::io::stderr())
    } else {
        anstream::AutoStream::choice(&std::io::stdout())
    };
    !matches!(choice, anstream::ColorChoice::Never)
}

/// `text` in `style` when colour is on for that stream.
pub fn paint(text: &str, style: anstyle::Style, stderr: bool) -> String {
    if colour_on(stderr) {
        format!("{style}{text}{style:#}")
    } else {
        text.to_string()
    }
}

/// The colour of a record's or run's status.
pub fn status_style(status: &str) -> anstyle::Style {
    use anstyle::{AnsiColor, Style};
    let fg = |c: AnsiColor| Style::new().fg_color(Some(c.into()));
    match status {
        "complete" | "merged" | "done" | "passed" => fg(AnsiColor::Green),
        "running" | "in-progress" | "rebasing" | "ready" => fg(AnsiColor::Cyan),
        "failed" | "blocked" | "stuck" | "cancelled" => fg(AnsiColor::Red).bold(),
        "paused" | "pending" | "queued" | "draft" => fg(AnsiColor::Yellow),
        _ => Style::new(),
    }
}

/// A run's exit label (`COMPLETE`, `STUCK`, …) as the status of the same meaning.
pub fn outcome_style(label: &str) -> anstyle::Style {
    use anstyle::{AnsiColor, Style};
    match label {
        "COMPLETE" | "ALL_TASKS_COMPLETE" => status_style("complete"),
        "DECIDE" | "LIMIT" | "INTERRUPTED" => Style::new().fg_color(Some(AnsiColor::Yellow.into())),
        "BLOCKED" | "STUCK" | "FAILED" | "AGENT-FAILED" | "VALIDATION-MISSING" => {
            status_style("failed")
        }
        _ => Style::new(),
    }
}

pub fn error_style() -> anstyle::Style {
    anstyle::Style::new()
        .fg_color(Some(anstyle::AnsiColor::Red.into()))
        .bold()
}
