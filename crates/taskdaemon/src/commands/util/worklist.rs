//! What the work-list commands share (`implement`, `stories`, `cancel`): the spec
//! directory, the settings a list's run resolves from, the take-over of a killed loop's
//! processes, and running the list through the engine as `run` runs.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use taskdaemon_core::config::Settings;
use taskdaemon_core::engine::{Begin, Outcome, RunConfig, RunState, SourceSpec};
use taskdaemon_core::git::Git;
use taskdaemon_core::loops::Registry;
use taskdaemon_core::worklist::{self, WorklistError};
use taskdaemon_core::workspace::Workspace;

use super::super::Ctx;
use super::{LoopFlags, drive, hold_for_loop, new_state, refuse_if_waiting, settings};
use crate::cli::user;

/// The spec directory: the argument, else `specs/<name>` from `specs/.current-spec` at the
/// top of the repository, else the current directory when it has a tasks.md.
pub(crate) fn spec_dir(arg: Option<&Path>, ctx: &Ctx) -> anyhow::Result<PathBuf> {
    let cwd = ctx.workdir()?;
    if let Some(a) = arg {
        let p = cwd.join(a);
        if !p.is_dir() {
            return Err(user(format!(
                "{} is not a directory\n  hint: pass the spec directory that holds tasks.md, e.g. `specs/login`",
                p.display()
            )));
        }
        return std::fs::canonicalize(&p).with_context(|| format!("resolving {}", p.display()));
    }
    let top = Git::new(&cwd).toplevel().map_err(user)?;
    let current = worklist::current_spec::file(&top);
    if let Some(dir) = worklist::current_spec::resolve(&top).map_err(user)? {
        return Ok(dir);
    }
    if cwd.join(worklist::coordinator::TASKS_FILE).is_file() {
        return Ok(cwd);
    }
    Err(user(format!(
        "no spec given, no {} and no tasks.md in {}\n  hint: `taskdaemon implement specs/NAME`, or write NAME into specs/.current-spec",
        current.display(),
        cwd.display()
    )))
}

/// The git top level of `dir`, canonical.
pub(crate) fn repo_of(dir: &Path) -> anyhow::Result<PathBuf> {
    let top = Git::new(dir).toplevel().map_err(user)?;
    Ok(top.canonicalize().unwrap_or(top))
}

pub(crate) fn worklist_err(e: WorklistError) -> anyhow::Error {
    if e.is_user_fault() {
        user(e)
    } else {
        anyhow::Error::new(e)
    }
}

/// The warnings about the open tasks' Verify commands, printed.
pub(crate) fn verify_warnings(verify: &[String], dir: &Path) {
    for w in worklist::verify_warnings(verify, dir) {
        eprintln!("taskdaemon: warning: {w}");
    }
}

/// The settings layers, the loop types and the flags a work list's run resolves from.
pub(crate) fn layers(
    repo: &Path,
    flags: &LoopFlags,
    ctx: &Ctx,
) -> anyhow::Result<(Settings, Registry)> {
    let s = settings(repo, &flags.settings(), ctx.config.as_deref())?;
    let registry = Registry::for_repo(repo).map_err(user)?;
    Ok((s, registry))
}

/// Run the work list `cfg` in `repo` through the engine, as `run` runs: the same locks,
/// take-over, rendering, signals and notifications. A saved run of the same list that has
/// not ended goes on (its counters, its wait for a usage limit's reset); any other starts
/// anew. The exit code.
pub(crate) fn run_worklist(
    repo: &Path,
    target: &Path,
    cfg: RunConfig,
    json: bool,
) -> anyhow::Result<i32> {
    let ws = Workspace::new(repo);
    if let Some(code) = refuse_if_waiting(&ws, false, cfg.source.kind().continue_command())? {
        return Ok(code);
    }
    // No snapshot rollback may change the work tree under the loop.
    let _no_rollback = hold_for_loop(repo)?;
    let _lock = ws.lock().map_err(user)?;
    take_over_worklist(target, cfg.kill_grace())?;
    let (state, begin) = match RunState::load(&ws).ok().flatten() {
        Some(mut st)
            if st.config.source.same_list(&cfg.source)
                && st.outcome.as_ref().is_none_or(|o| o.resumable())
                && list_state_kept(&cfg.source) =>
        {
            if matches!(st.outcome, Some(Outcome::Stuck { .. })) {
                st.stuck_count = 0;
            }
            let done = st.iterations_done;
            st.config = cfg;
            if done >= st.config.max_iterations {
                // A run that used its iterations goes on with a fresh budget, as asked.
                eprintln!(
                    "taskdaemon: the saved run used all {} iterations; it goes on with {} more",
                    done, st.config.max_iterations
                );
                st.config.max_iterations = done.saturating_add(st.config.max_iterations);
            }
            (st, Begin::Resumed { temps_removed: 0 })
        }
        _ => new_state(repo, &ws, cfg)?,
    };
    let (_, summary) = drive(&ws, state, begin, json)?;
    Ok(summary.exit_code)
}

/// Whether the list's own state is still there to go on from: a tasks.md run's
/// `.ralph-state.json` (`cancel` deletes it: the next run starts anew, its counters too).
fn list_state_kept(source: &SourceSpec) -> bool {
    match source {
        SourceSpec::Tasks { spec_dir, .. } => worklist::ImplementState::path(spec_dir).exists(),
        _ => true,
    }
}

/// End every process a killed loop on `target` (spec directory or stories file) left
/// running, and record this loop's processes before each starts. Holds the records'
/// lock for the rest of the process, so two loops on one target never end each other's.
pub(crate) fn take_over_worklist(target: &Path, grace: std::time::Duration) -> anyhow::Result<()> {
    static HELD: std::sync::OnceLock<std::fs::File> = std::sync::OnceLock::new();
    let dir = taskdaemon_core::agent::tracked::worklist_records_dir(target).map_err(user)?;
    let mut lock_path = dir.clone().into_os_string();
    lock_path.push(".lock");
    let lock_path = PathBuf::from(lock_path);
    let f = taskdaemon_core::fsutil::open_lock_file(&lock_path)
        .with_context(|| format!("opening {}", lock_path.display()))?;
    match f.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            return Err(user(format!(
                "another loop is running on {} (it holds {})\n  hint: wait for it or stop it, then start again",
                target.display(),
                lock_path.display()
            )));
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(anyhow::Error::new(e).context(format!("locking {}", lock_path.display())));
        }
    }
    let _ = HELD.set(f);
    super::take_over_in(dir, target, grace)
}
