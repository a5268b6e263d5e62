//! `task` as one flow (spec 1 §3, §5): the message (or the one an answered question of the
//! task parser holds) → parse → clarify (the question to `decide.txt`, exit 3, nothing
//! else changes) → `task-N-pre` → the loop → `task-N-post`. The caller holds the loop's
//! locks, runs this on a runtime with its signals and renders the [`TaskEvent`]s and the
//! [`TaskFlowEnd`]; nothing here prints.

use std::path::{Path, PathBuf};

use tokio_util::sync::CancellationToken;

use super::parser::{
    Clarification, ParseInput, ParseReport, ParserSetupError, TaskKind, choose_parser, parse_task,
    project_context,
};
use super::{LifecycleError, TaskEnd, TaskStart, begin_task, end_task};
use crate::agent::tracked::{self, Leftover};
use crate::clock;
use crate::config::{self, Settings};
use crate::engine::{Begin, StateError, run_loop};
use crate::engine::{EngineContext, EngineError, Outcome, ResolveError, RunConfig, RunState};
use crate::git::snapshot::{Snapshots, WaitTold};
use crate::git::{Git, GitError};
use crate::loops::{LoopError, Registry};
use crate::telemetry::RunSummary;
use crate::workspace::{DecideFile, IGNORED, Workspace, WorkspaceError};

/// What a task needs.
#[derive(Debug, Clone)]
pub struct TaskRequest {
    pub dir: PathBuf,
    /// The message given; none: the one of an answered question of the task parser.
    pub message: Option<String>,
    /// The settings in force (files, then flags).
    pub settings: Settings,
    /// The taskdaemon executable: plays `script:` agents, leads the agents' `PATH`.
    pub script_runner: PathBuf,
}

/// What happens on the way, for the host to show.
#[derive(Debug)]
pub enum TaskEvent<'a> {
    /// An answered parser question about another message was moved out of the way.
    OtherAnswerArchived { path: &'a Path },
    /// The task began: `task.md` written, `task-N-pre` saved (none for the first task of
    /// an empty project).
    Started {
        start: &'a TaskStart,
        report: &'a ParseReport,
    },
    /// An unfinished earlier run in this directory is replaced by this task's.
    RunReplaced { replaced: &'a ReplacedRun },
    /// Processes a killed loop here left running were ended.
    LeftoversEnded { left: &'a [Leftover] },
}

/// The host of a task: shows its events and gives its loop an engine context.
pub trait TaskHost {
    fn event(&mut self, event: TaskEvent<'_>);
    /// The engine's context for the loop of `state` (its renderer, its notifications);
    /// dropped when the loop ends.
    fn engine(&mut self, state: &RunState) -> EngineContext;
    /// Told when the task's start snapshot has waited a second for another holder of the
    /// snapshot lock (on the waiting thread: shown at once, the wait may last minutes).
    fn start_wait_told(&self) -> Option<WaitTold> {
        None
    }
}

/// How a task ended.
#[derive(Debug)]
pub enum TaskFlowEnd {
    /// Interrupted while its message was parsed: nothing changed.
    InterruptedWhileParsing,
    /// Interrupted while the task's start snapshot waited for another holder of the
    /// snapshot lock `lock`: no task was begun, nothing changed.
    InterruptedBeforeStart { lock: PathBuf },
    /// The scope is ambiguous: the question is in `decide_file`, nothing else changed.
    NeedsClarification(Box<Clarify>),
    /// The loop ran; the task's end is recorded.
    Finished(Box<TaskFinished>),
}

/// The task parser's question.
#[derive(Debug)]
pub struct Clarify {
    pub question: String,
    pub decide_file: PathBuf,
    pub report: ParseReport,
}

/// A task whose loop ran.
#[derive(Debug)]
pub struct TaskFinished {
    pub start: TaskStart,
    pub report: ParseReport,
    pub outcome: Outcome,
    pub summary: RunSummary,
    pub end: TaskEnd,
}

#[derive(Debug, thiserror::Error)]
pub enum TaskFlowError {
    #[error(
        "no task given\n  hint: `taskdaemon task \"what to do next\"` or `taskdaemon task -f request.md`"
    )]
    NoMessage,
    #[error("the task message is empty\n  hint: `taskdaemon task \"what to do next\"`")]
    EmptyMessage,
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error(transparent)]
    Loops(#[from] LoopError),
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    #[error(transparent)]
    Parser(#[from] ParserSetupError),
    #[error(transparent)]
    Lifecycle(#[from] LifecycleError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(
        "not starting: {reason}\n  the unfinished run {run_id} is kept\n  hint: fix that and start again, or go on with the unfinished run (`{next}`)"
    )]
    WouldReplace {
        run_id: String,
        reason: String,
        next: &'static str,
    },
    #[error("moving earlier logs to {}: {source}", path.display())]
    SetAsideLogs {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("recording the loop's processes in {}: {source}", path.display())]
    TakeOver {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "not starting: processes of run {run_id} (environment {var}={token}) survived KILL and would run beside this loop\n  hint: find them with `grep -l {token} /proc/*/environ`, end them, then start again",
        var = tracked::GROUP_VAR
    )]
    Survived { run_id: String, token: String },
}

impl TaskFlowError {
    /// Whether a person must fix something (exit 64), rather than the harness failing.
    pub fn is_user_fault(&self) -> bool {
        match self {
            // A link in the repository that would lead the move out of it: the repository's
            // to fix (the message says how).
            TaskFlowError::SetAsideLogs { source, .. } => crate::fsutil::is_refused_link(source),
            TaskFlowError::Engine(e) => e.is_user_fault(),
            TaskFlowError::TakeOver { source, .. } => crate::fsutil::is_refused_link(source),
            _ => true,
        }
    }
}

/// Run the task `req` asks for in `ws` (the caller holds its locks).
pub async fn run_task(
    req: &TaskRequest,
    ws: &Workspace,
    host: &mut impl TaskHost,
    cancel: &CancellationToken,
) -> Result<TaskFlowEnd, TaskFlowError> {
    let dir = req.dir.as_path();
    let (message, clarification) = message_and_answer(req, ws, host)?;
    let mut cfg = resolve_config(dir, message.clone(), &req.settings)?;
    // Leftovers of a killed loop are ended before anything of this task begins: a refusal
    // here leaves no task half begun.
    let left = take_over_loop(dir, cfg.kill_grace())?;
    host.event(TaskEvent::LeftoversEnded { left: &left });
    let (model, because) = choose_parser(
        &req.settings,
        dir,
        req.script_runner.clone(),
        Some(ws.logs_dir()),
    )?;
    let input = ParseInput {
        message: message.clone(),
        clarification: clarification.clone(),
        context: project_context(dir, ws),
    };
    let report = parse_task(&input, model.as_ref(), because, cancel).await;
    if cancel.is_cancelled() {
        return Ok(TaskFlowEnd::InterruptedWhileParsing);
    }
    if report.task.kind == TaskKind::NeedsClarification {
        let question = report
            .task
            .question
            .clone()
            .unwrap_or_else(|| "What exactly should this task change?".into());
        ws.write_parser_decide(&question, &message, &clock::now_rfc3339())?;
        return Ok(TaskFlowEnd::NeedsClarification(Box::new(Clarify {
            question,
            decide_file: ws.decide_file(),
            report,
        })));
    }
    // A stop ends the start snapshot's wait for another holder of the snapshot lock.
    let mut snaps = Snapshots::open(dir)
        .map_err(LifecycleError::from)?
        .stopped_by(cancel);
    if let Some(told) = host.start_wait_told() {
        snaps = snaps.telling_waits_to(told);
    }
    let start = match begin_task(&snaps, ws, &message, &report.task, clarification.as_ref()) {
        Ok(start) => start,
        Err(e) => match e.stopped_waiting_for() {
            Some(lock) => {
                let lock = lock.to_path_buf();
                return Ok(TaskFlowEnd::InterruptedBeforeStart { lock });
            }
            None => return Err(e.into()),
        },
    };
    if clarification.is_some() {
        // Answered and used: kept in .ralph/decisions/ and out of the loop's prompt.
        ws.archive_decide(&clock::now().as_second().to_string())?;
    }
    host.event(TaskEvent::Started {
        start: &start,
        report: &report,
    });
    cfg.task = start.task_text.clone();
    let NewRun {
        mut state,
        replaced,
        begin,
    } = new_run_state(dir, ws, cfg)?;
    if let Some(r) = &replaced {
        host.event(TaskEvent::RunReplaced { replaced: r });
    }
    state.task = Some(start.number);
    let ctx = host.engine(&state);
    let (outcome, summary) = run_loop(state, ws, &ctx, cancel, begin).await?;
    drop(ctx);
    let end = end_task(dir, ws, start.number, &outcome, summary.iterations)?;
    Ok(TaskFlowEnd::Finished(Box::new(TaskFinished {
        start,
        report,
        outcome,
        summary,
        end,
    })))
}

/// The message (given, or the one an answered parser question holds) and the answer that
/// goes with it. Runtime files are excluded from git first; an answered question about
/// another message is archived.
fn message_and_answer(
    req: &TaskRequest,
    ws: &Workspace,
    host: &mut impl TaskHost,
) -> Result<(String, Option<Clarification>), TaskFlowError> {
    let pending = ws.read_decide()?.filter(|d| d.task_message.is_some());
    let message = match &req.message {
        Some(m) => m.clone(),
        None => pending
            .as_ref()
            .and_then(|d| d.task_message.clone())
            .ok_or(TaskFlowError::NoMessage)?,
    };
    if message.trim().is_empty() {
        return Err(TaskFlowError::EmptyMessage);
    }
    let clarification = clarification_for(pending.as_ref(), &message);
    // Logs, the question file and runtime files are never committed, asked or not.
    Git::new(&req.dir).ensure_excluded(IGNORED)?;
    if pending.is_some() && clarification.is_none() {
        // The answer was about another message: keep it on record, out of the way.
        if let Some(p) = ws.archive_decide(&clock::now().as_second().to_string())? {
            host.event(TaskEvent::OtherAnswerArchived { path: &p });
        }
    }
    Ok((message, clarification))
}

/// The answered question of the task parser about this same message, if there is one.
pub fn clarification_for(pending: Option<&DecideFile>, message: &str) -> Option<Clarification> {
    let d = pending?;
    let asked_about = d.task_message.as_deref()?;
    let answer = d.answer.clone()?;
    (asked_about.trim() == message.trim()).then(|| Clarification {
        question: d.question.clone(),
        answer,
    })
}

/// The run's configuration in `dir` (loop types: built in, the user's, the project's),
/// checked before anything changes.
pub fn resolve_config(
    dir: &Path,
    task: String,
    settings: &Settings,
) -> Result<RunConfig, TaskFlowError> {
    let registry = Registry::for_repo(dir)?;
    Ok(RunConfig::resolve(dir, task, settings, &registry)?)
}

/// An unfinished earlier run that a new one replaces, and where its logs went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplacedRun {
    pub run_id: String,
    pub logs: Option<PathBuf>,
}

/// A new run, made by [`new_run_state`].
#[derive(Debug)]
pub struct NewRun {
    pub state: RunState,
    /// The unfinished earlier run it replaces, if any.
    pub replaced: Option<ReplacedRun>,
    /// How it begins: the temporary files of killed writes removed from `logs/` while the
    /// earlier run's logs were set aside, which the engine says with its other warnings.
    pub begin: Begin,
}

/// A new run of `cfg` in `dir`: the logs of an earlier run move under `logs/runs/<its id>/`
/// (or `logs/runs/previous-<time>/` when its state is gone); an unfinished one is returned
/// replaced.
pub fn new_run_state(dir: &Path, ws: &Workspace, cfg: RunConfig) -> Result<NewRun, TaskFlowError> {
    let head = Git::new(dir).head()?;
    let old = RunState::load(ws).ok().flatten();
    // An unfinished run is replaced only by one that can start.
    if let Some(o) = old
        .as_ref()
        .filter(|o| o.outcome.as_ref().is_none_or(Outcome::resumable))
        && let Some(refused) = crate::engine::preflight_refusal(&cfg)
    {
        return Err(TaskFlowError::WouldReplace {
            run_id: o.run_id.clone(),
            reason: refused.detail(),
            next: o.config.source.kind().continue_command(),
        });
    }
    // The id comes from a file in the repository: only a plain name names a directory.
    let old_name = old
        .as_ref()
        .map(|o| o.run_id.clone())
        .filter(|id| crate::workspace::is_plain_name(id))
        .unwrap_or_else(|| format!("previous-{}", clock::now().strftime("%Y%m%dT%H%M%S")));
    let logs = ws.earlier_runs_dir().join(&old_name);
    let aside = ws
        .set_aside_logs(&old_name)
        .map_err(|source| TaskFlowError::SetAsideLogs {
            path: logs.clone(),
            source,
        })?;
    let replaced = old
        .filter(|o| o.outcome.as_ref().is_none_or(Outcome::resumable))
        .map(|o| ReplacedRun {
            run_id: o.run_id,
            logs: aside.moved.then_some(logs),
        });
    let now = clock::now();
    Ok(NewRun {
        state: RunState::new(cfg, RunState::new_id(now), head, clock::rfc3339(now)),
        replaced,
        begin: Begin::New {
            temps_removed: aside.removed_temps,
        },
    })
}

/// End every process a killed foreground loop in `workdir` left running, and record this
/// loop's processes from now on. The caller holds the loop's lock.
pub fn take_over_loop(
    workdir: &Path,
    grace: std::time::Duration,
) -> Result<Vec<Leftover>, TaskFlowError> {
    let dir = tracked::loop_records_dir(workdir)?;
    take_over_in(dir, grace)
}

/// The same for the records in `dir` (a work list's records, a loop's).
pub fn take_over_in(
    dir: PathBuf,
    grace: std::time::Duration,
) -> Result<Vec<Leftover>, TaskFlowError> {
    let left = tracked::take_over(dir.clone(), grace)
        .map_err(|source| TaskFlowError::TakeOver { path: dir, source })?;
    if let Some(l) = left.iter().find(|l| l.survived) {
        return Err(TaskFlowError::Survived {
            run_id: l.run_id.clone(),
            token: l.token.clone(),
        });
    }
    Ok(left)
}
