//! `taskdaemon watch`: the terminal UI over the model of `taskdaemon_core::watch`.
//!
//! The terminal is put back (raw mode off, main screen, cursor shown) on every way out:
//! `q`, Ctrl-C, an error, and a panic (a hook restores it before the message prints).

mod actions;
mod app;
mod draw;
mod logpane;
mod source;

use std::io::Write;
use std::time::Duration;

use anyhow::Context as _;
use crossterm::event::{self, Event};
use crossterm::{execute, terminal};
use ratatui::Terminal;
use ratatui::backend::{CrosstermBackend, TestBackend};

pub use app::App;
pub use source::Source;

/// Whether colours are off (`NO_COLOR` set and not empty, or `TERM=dumb`).
pub fn no_color() -> bool {
    std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
        || std::env::var("TERM").is_ok_and(|t| t == "dumb")
}

fn restore() {
    let _ = terminal::disable_raw_mode();
    let _ = execute!(
        std::io::stdout(),
        terminal::LeaveAlternateScreen,
        crossterm::cursor::Show
    );
}

/// Restore the terminal before the default panic message prints.
fn install_panic_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore();
        previous(info);
    }));
}

/// Put the terminal back however the UI ends.
struct Guard;

impl Drop for Guard {
    fn drop(&mut self) {
        restore();
    }
}

/// Run the UI until the person quits.
pub fn run(mut app: App) -> anyhow::Result<()> {
    install_panic_hook();
    terminal::enable_raw_mode()
        .context("switching the terminal to raw mode (is stdin a terminal?)")?;
    let _guard = Guard;
    execute!(std::io::stdout(), terminal::EnterAlternateScreen)
        .context("entering the alternate screen")?;
    let mut term =
        Terminal::new(CrosstermBackend::new(std::io::stdout())).context("opening the terminal")?;
    term.clear()?;
    if std::env::var_os("TASKDAEMON_TEST_WATCH_PANIC").is_some() {
        panic!("test hook: a panic inside the UI");
    }
    while !app.quit {
        app.pull();
        term.draw(|f| draw::frame(f, &mut app))?;
        if event::poll(Duration::from_millis(150))? {
            match event::read()? {
                Event::Key(k) => app.on_key(k),
                Event::Resize(..) => term.autoresize()?,
                _ => {}
            }
        }
    }
    drop(term);
    Ok(())
}

/// One frame of `width`×`height`, as text (`watch --once`).
pub fn once(mut app: App, width: u16, height: u16) -> anyhow::Result<String> {
    app.pull();
    let mut term = Terminal::new(TestBackend::new(width, height))?;
    term.draw(|f| draw::frame(f, &mut app))?;
    let buf = term.backend().buffer().clone();
    let mut out = String::new();
    for y in 0..buf.area.height {
        let mut line = String::new();
        for x in 0..buf.area.width {
            line.push_str(buf[(x, y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    let _ = std::io::stdout().flush();
    Ok(out)
}
