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
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}
