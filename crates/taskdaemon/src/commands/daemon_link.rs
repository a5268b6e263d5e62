//! What the daemon's client commands share: finding the repository's daemon and talking
//! to it.

use std::path::Path;
use std::time::Duration;

use taskdaemon_core::daemon::DaemonPaths;
use taskdaemon_core::daemon::ipc::{self, Request, Response};

use super::Ctx;
use crate::cli::user;

/// The daemon of the repository the command runs in.
pub fn paths(ctx: &Ctx) -> anyhow::Result<DaemonPaths> {
    let dir = ctx.repo_dir()?;
    DaemonPaths::for_repo(&dir).map_err(user)
}

/// Ask the daemon; `None` when none runs.
pub fn call(paths: &DaemonPaths, req: &Request) -> anyhow::Result<Option<Response>> {
    if !paths.is_running() {
        return Ok(None);
    }
    let socket = paths
        .read_info()
        .map(|i| i.socket)
        .unwrap_or_else(|| paths.socket());
    Ok(Some(
        ipc::call(&socket, req, Duration::from_secs(30)).map_err(anyhow::Error::new)?,
    ))
}

/// Tell a running daemon that new work is in the store; whether one runs.
pub fn wake(paths: &DaemonPaths) -> bool {
    matches!(call(paths, &Request::Wake), Ok(Some(_)))
}

/// The branch checked out in `dir` (the default merge target).
pub fn current_branch(dir: &Path) -> anyhow::Result<String> {
    taskdaemon_core::daemon::submit::current_branch(dir).map_err(user)
}

/// The line to print after queueing work.
pub fn queued_hint(paths: &DaemonPaths) -> String {
    if wake(paths) {
        "the daemon picks it up now".to_string()
    } else {
        "no daemon runs: start one with `taskdaemon daemon start`".to_string()
    }
}
