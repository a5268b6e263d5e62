//! `taskdaemon watch [--once]`: the live view of the loops of this repository.

use clap::Args;
use taskdaemon_core::daemon::DaemonPaths;
use taskdaemon_core::store::Records;

use super::{Ctx, store_err};
use crate::cli::user;
use crate::tui::{self, App, Source};

#[derive(Debug, Args)]
#[command(
    after_help = "With a daemon: its plans, specs and runs, live. Without one: the loop running in this directory (`taskdaemon run`/`task`).\n\n\
Keys: ↑/↓ select a run, g/G (Home/End) the first/last, Enter its iterations (Esc back), ? the keys, p pause when the iteration ends (p again: now), r resume, c cancel, s start, a answer a DECIDE, u unblock, o report, / search the log, n next match, e export the log to .ralph/exports/, q or Ctrl-C quit.\n\n\
Examples:\n  taskdaemon watch\n  taskdaemon watch --once --width 100 --height 30"
)]
pub struct WatchArgs {
    /// Print one frame as text and exit (for scripts).
    #[arg(long)]
    pub once: bool,
    /// The frame's width with --once [default: the terminal's, else 100].
    #[arg(long, value_name = "COLUMNS", requires = "once")]
    pub width: Option<u16>,
    /// The frame's height with --once [default: the terminal's, else 30].
    #[arg(long, value_name = "LINES", requires = "once")]
    pub height: Option<u16>,
}

/// The daemon of this repository when one runs, else the loop in this directory.
fn source(ctx: &Ctx, follow: bool) -> anyhow::Result<Source> {
    let dir = ctx.workdir()?;
    let now = std::time::Instant::now();
    if let Ok(repo) = ctx.repo_dir()
        && let Ok(paths) = DaemonPaths::for_repo(&repo)
    {
        let local = taskdaemon_core::workspace::Workspace::new(&dir)
            .run_state()
            .is_file();
        if paths.is_running() || !local {
            let records = Box::new(Records::open(&paths.project).map_err(store_err)?);
            return Ok(Source::Daemon {
                paths,
                records,
                feed: None,
                follow,
                last: now,
            });
        }
    }
    Ok(Source::Local { dir, last: now })
}

pub fn run(args: WatchArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let app = App::new(source(ctx, !args.once)?)?;
    if args.once {
        let (w, h) = crossterm::terminal::size().unwrap_or((100, 30));
        let (w, h) = (args.width.unwrap_or(w), args.height.unwrap_or(h));
        if w < 20 || h < 8 {
            return Err(user(format!(
                "a frame of {w}×{h} is too small\n  hint: --width 20 or more, --height 8 or more"
            )));
        }
        print!("{}", tui::once(app, w, h)?);
        return Ok(0);
    }
    if !std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        return Err(user(
            "`taskdaemon watch` needs a terminal\n  hint: `taskdaemon watch --once` prints one frame as text; `taskdaemon status --json` gives the state to scripts",
        ));
    }
    tui::run(app)?;
    Ok(0)
}
