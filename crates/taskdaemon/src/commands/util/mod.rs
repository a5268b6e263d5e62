//! What the CLI's loop commands share (`run`, `task`, `implement`, `stories`, `demo`):
//! the run flags, settings and configuration, the loop locks, driving the engine with its
//! renderer and signals, and the rendering of a task's end. No command depends on another;
//! they all use this.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Args;
use taskdaemon_core::agent;
use taskdaemon_core::agent::tracked::Leftover;
use taskdaemon_core::config::{self, Dur, Settings};
use taskdaemon_core::duration::parse_duration;
use taskdaemon_core::engine::{
    Begin, EngineContext, EventSink, Outcome, RunConfig, RunState, exit_code,
};
use taskdaemon_core::git::snapshot::Snapshots;
use taskdaemon_core::lifecycle::TaskEnd;
use taskdaemon_core::lifecycle::task_flow::{self, ReplacedRun, TaskFlowError};
use taskdaemon_core::lifecycle::waiting::{Waiting, waiting_for_a_human};
use taskdaemon_core::sandbox::SandboxKind;
use taskdaemon_core::telemetry::RunSummary;
use taskdaemon_core::workspace::Workspace;
use tokio_util::sync::CancellationToken;

pub mod merge_driver;
pub mod worklist;

use crate::cli::user;
use crate::render::Renderer;
/// The options of every loop (`run`, `task`, `implement`, `stories`): the agent, its
/// limits, what its failures do, the sandbox.
#[derive(Debug, Args)]
pub struct LoopFlags {
    /// claude, codex, gemini, opencode, amp, script:FILE, cmd:COMMAND or api:anthropic|openai:MODEL [default: config, else the first installed CLI].
    #[arg(
        help_heading = "Agent",
        long,
        value_name = "SPEC",
        env = "TASKDAEMON_AGENT"
    )]
    pub agent: Option<String>,
    /// How to read the agent's output: text, claude-stream-json, codex-json [default: per agent].
    #[arg(
        help_heading = "Agent",
        long,
        value_name = "FORMAT",
        env = "TASKDAEMON_AGENT_FORMAT"
    )]
    pub agent_format: Option<String>,
    /// Stop (exit 4) after N consecutive iterations without a new commit; 0 disables [default: 3].
    #[arg(
        help_heading = "Limits",
        long,
        value_name = "N",
        env = "TASKDAEMON_MAX_STUCK"
    )]
    pub max_stuck: Option<u32>,
    /// Stall recovery after N consecutive iterations with the same tool calls; a second stall fails the task (exit 5); 0 disables [default: 3].
    #[arg(
        help_heading = "Limits",
        long,
        value_name = "N",
        env = "TASKDAEMON_MAX_STALL"
    )]
    pub max_stall: Option<u32>,
    /// Stop an iteration's agent after DUR (90s, 15m, 2h) [default: 30m].
    #[arg(help_heading = "Limits", long, value_name = "DUR", env = "TASKDAEMON_ITERATION_TIMEOUT", value_parser = dur)]
    pub iteration_timeout: Option<Dur>,
    /// Stop (exit 1) once the run has taken DUR.
    #[arg(help_heading = "Limits", long, value_name = "DUR", env = "TASKDAEMON_MAX_RUNTIME", value_parser = dur)]
    pub max_runtime: Option<Dur>,
    /// Stop (exit 1) once the agent's reported cost reaches USD.
    #[arg(
        help_heading = "Limits",
        long,
        value_name = "USD",
        env = "TASKDAEMON_MAX_COST"
    )]
    pub max_cost: Option<f64>,
    /// Time between TERM and KILL when the agent is stopped [default: 5s].
    #[arg(help_heading = "Limits", long, value_name = "DUR", env = "TASKDAEMON_KILL_GRACE", value_parser = dur)]
    pub kill_grace: Option<Dur>,
    /// Cap of one iteration's log (50MB, 512KB, 1GB): past it the first and last part are kept, with a note of what was dropped [default: 50MB].
    #[arg(
        help_heading = "Limits",
        long,
        value_name = "SIZE",
        env = "TASKDAEMON_MAX_LOG_SIZE"
    )]
    pub max_log_size: Option<String>,
    /// At the agent's usage limit: wait for the reset, then retry the same iteration; or stop (exit 1) [default: wait].
    #[arg(help_heading = "Failure policy", long, value_name = "ACTION", env = "TASKDAEMON_ON_USAGE_LIMIT", value_parser = ["wait", "stop"])]
    pub on_usage_limit: Option<String>,
    /// Stop instead of waiting when the usage limit resets later than DUR [default: 12h].
    #[arg(help_heading = "Failure policy", long, value_name = "DUR", env = "TASKDAEMON_MAX_WAIT", value_parser = dur)]
    pub max_wait: Option<Dur>,
    /// First wait after a rate limit, overload or unreachable API; doubled each time [default: 30s].
    #[arg(help_heading = "Failure policy", long, value_name = "DUR", env = "TASKDAEMON_RETRY_BACKOFF", value_parser = dur)]
    pub retry_backoff: Option<Dur>,
    /// Such failures in a row before the run stops (exit 1) [default: 5].
    #[arg(
        help_heading = "Failure policy",
        long,
        value_name = "N",
        env = "TASKDAEMON_MAX_RETRIES"
    )]
    pub max_retries: Option<u32>,
    /// Say so when the agent prints nothing for DUR; 0s: never [default: 5m].
    #[arg(help_heading = "Failure policy", long, value_name = "DUR", env = "TASKDAEMON_QUIET_WARNING", value_parser = dur)]
    pub quiet_warning: Option<Dur>,
    /// Stop an agent that only retries, making no progress, after DUR; 0s: never [default: 10m].
    #[arg(help_heading = "Failure policy", long, value_name = "DUR", env = "TASKDAEMON_NO_PROGRESS_TIMEOUT", value_parser = dur)]
    pub no_progress_timeout: Option<Dur>,
    /// Pause when the agent reports PCT % of a usage window used (Claude with a subscription), until it resets.
    #[arg(
        help_heading = "Failure policy",
        long,
        value_name = "PCT",
        env = "TASKDAEMON_PAUSE_AT_USAGE"
    )]
    pub pause_at_usage: Option<u8>,
    /// Confine the agent and the validation command: none, bwrap, docker, podman (docs/sandbox.md) [default: none].
    #[arg(help_heading = "Sandbox", long, value_name = "KIND", env = "TASKDAEMON_SANDBOX", value_parser = sandbox_kind)]
    pub sandbox: Option<SandboxKind>,
    /// Turn off the evidence protection for this run: a changed validation script, deleted or skipped tests and fewer tests run are warnings (in the output, the log and the report), not rejections.
    #[arg(help_heading = "Evidence", long, env = "TASKDAEMON_ALLOW_TEST_CHANGES")]
    pub allow_test_changes: bool,
}

/// The options of a run, shared by `run` and `task`: the loop's, and the ralph loop's own.
#[derive(Debug, Args)]
pub struct RunFlags {
    /// Loop type (see `taskdaemon loops`) [default: ralph].
    #[arg(
        help_heading = "Agent",
        long = "loop",
        value_name = "TYPE",
        env = "TASKDAEMON_LOOP"
    )]
    pub loop_type: Option<String>,
    /// Validation command (sh -c) run after every iteration; its exit code decides completion.
    #[arg(
        help_heading = "Evidence",
        long,
        value_name = "CMD",
        env = "TASKDAEMON_VALIDATE"
    )]
    pub validate: Option<String>,
    /// The validation exit code that means done [default: 0].
    #[arg(
        help_heading = "Evidence",
        long,
        value_name = "N",
        env = "TASKDAEMON_SUCCESS_EXIT_CODE"
    )]
    pub success_exit_code: Option<i32>,
    /// Stop (exit 1) after N iterations [default: from the loop type, 20 for ralph].
    #[arg(
        help_heading = "Limits",
        long,
        value_name = "N",
        env = "TASKDAEMON_MAX_ITERATIONS"
    )]
    pub max_iterations: Option<u32>,
    /// Also require <promise>TEXT</promise> for completion (the agent says it; validation must pass too).
    #[arg(
        help_heading = "Evidence",
        long,
        value_name = "TEXT",
        env = "TASKDAEMON_COMPLETION_PROMISE"
    )]
    pub completion_promise: Option<String>,
    #[command(flatten)]
    pub common: LoopFlags,
}

pub(crate) fn sandbox_kind(s: &str) -> Result<SandboxKind, String> {
    SandboxKind::parse(s)
}

pub(crate) fn dur(s: &str) -> Result<Dur, String> {
    parse_duration(s).map(Dur)
}

impl LoopFlags {
    /// The options given on the command line or in TASKDAEMON_* variables, as a layer.
    pub fn settings(&self) -> Settings {
        Settings {
            agent: self.agent.clone(),
            agent_format: self.agent_format.clone(),
            max_stuck: self.max_stuck,
            max_stall: self.max_stall,
            iteration_timeout: self.iteration_timeout,
            max_runtime: self.max_runtime,
            max_cost: self.max_cost,
            kill_grace: self.kill_grace,
            max_log_size: self.max_log_size.clone(),
            on_usage_limit: self.on_usage_limit.clone(),
            max_wait: self.max_wait,
            retry_backoff: self.retry_backoff,
            max_retries: self.max_retries,
            quiet_warning: self.quiet_warning,
            no_progress_timeout: self.no_progress_timeout,
            pause_at_usage: self.pause_at_usage,
            sandbox: self.sandbox,
            allow_test_changes: self.allow_test_changes.then_some(true),
            ..Settings::default()
        }
    }
}

impl RunFlags {
    /// The options given on the command line or in TASKDAEMON_* variables, as a layer.
    pub fn settings(&self) -> Settings {
        let c = &self.common;
        Settings {
            loop_type: self.loop_type.clone(),
            validate: self.validate.clone(),
            success_exit_code: self.success_exit_code,
            max_iterations: self.max_iterations,
            completion_promise: self.completion_promise.clone(),
            ..c.settings()
        }
    }
}

/// While a loop runs, no rollback may change its work tree (wherever the loop's directory
/// is in it). A wait of more than a second for another holder of the snapshot lock (a save
/// or rollback of another loop) is told, with who holds it.
pub(crate) fn hold_for_loop(dir: &Path) -> anyhow::Result<std::fs::File> {
    let tell = |lock: &Path, pid: Option<i32>| {
        eprintln!(
            "taskdaemon: not started yet: {}",
            taskdaemon_core::git::snapshot::waiting_text(lock, pid)
        );
    };
    Snapshots::open(dir)
        .map(|s| s.telling_waits_to(std::sync::Arc::new(tell)))
        .and_then(|s| Ok((s.recover()?, s)))
        .and_then(|(notices, s)| {
            notices.iter().for_each(|n| eprintln!("taskdaemon: {n}"));
            s.hold_for_loop()
        })
        .map_err(user)
}

/// BLOCKED and an unanswered DECIDE stop a run from starting (the core's
/// `lifecycle::waiting`), rendered with what to do; the exit code to end with.
pub(crate) fn refuse_if_waiting_for_a_human(
    ws: &Workspace,
    for_task: bool,
) -> anyhow::Result<Option<i32>> {
    refuse_if_waiting(ws, for_task, "taskdaemon run --resume")
}

/// As [`refuse_if_waiting_for_a_human`], naming `next` as the command that continues.
pub(crate) fn refuse_if_waiting(
    ws: &Workspace,
    for_task: bool,
    next: &str,
) -> anyhow::Result<Option<i32>> {
    let Some(w) = waiting_for_a_human(ws, for_task).map_err(user)? else {
        return Ok(None);
    };
    match w {
        Waiting::Blocked { file, reason } => {
            eprintln!(
                "taskdaemon: not starting: the loop is blocked ({}):\n{}\n  hint: resolve it, then `taskdaemon unblock` and `{next}`",
                file.display(),
                indent(&reason)
            );
            return Ok(Some(exit_code::BLOCKED));
        }
        Waiting::ParserQuestion { file, question } => eprintln!(
            "taskdaemon: not starting: the task parser asked a question about the next task that has no answer yet ({}):\n{}\n  hint: `taskdaemon answer \"your decision\"`, then `taskdaemon task` (it takes the task's message from that file)",
            file.display(),
            indent(&question)
        ),
        Waiting::ParserAnswerPending { file } => eprintln!(
            "taskdaemon: not starting: {} holds an answered question of the task parser about a task that has not started\n  hint: start that task with `taskdaemon task`, or delete the file to drop it",
            file.display()
        ),
        Waiting::AgentQuestion { file, question } => eprintln!(
            "taskdaemon: not starting: the agent asked a question that has no answer yet ({}):\n{}\n  hint: `taskdaemon answer \"your decision\"`, then `{next}`",
            file.display(),
            indent(&question)
        ),
    }
    Ok(Some(exit_code::DECIDE))
}

pub(crate) fn indent(s: &str) -> String {
    s.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The settings layers (user file, project file or `--config`) under `flags`; what an
/// untrusted project config had that was left out is said (once).
pub(crate) fn settings(
    dir: &Path,
    flags: &Settings,
    explicit_config: Option<&Path>,
) -> anyhow::Result<Settings> {
    let files = config::load_layers(dir, explicit_config).map_err(user)?;
    warn_untrusted(files.untrusted.as_ref());
    // A loop file that does not load is refused where the loop types are used.
    if let Ok(registry) = taskdaemon_core::loops::Registry::for_repo(dir) {
        warn_untrusted_loops(&registry);
    }
    Ok(files.settings.merge(flags.clone()))
}

/// Say on stderr which of the repository's loop types wait for trust (once per process).
pub(crate) fn warn_untrusted_loops(registry: &taskdaemon_core::loops::Registry) {
    for u in registry.untrusted() {
        say_once(u.to_string());
    }
}

/// Say on stderr which keys of the repository's untrusted config were ignored: once per
/// process, however many times the layers are read.
pub(crate) fn warn_untrusted(untrusted: Option<&config::Untrusted>) {
    if let Some(u) = untrusted {
        say_once(u.to_string());
    }
}

/// Become the reaper of the agents' orphans, with a watchdog that ends their trees if this
/// process dies (`kill -9` included); say so when the watchdog cannot start.
pub(crate) fn guard_agents() {
    if let Err(e) = agent::become_subreaper() {
        say_once(format!(
            "the watchdog that ends the agents if taskdaemon is killed did not start ({e}); \
             a kill -9 may leave agent processes running until the next start"
        ));
    }
}

/// A warning on stderr, once per process however many times it comes up.
fn say_once(text: String) {
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !said.contains(&text) {
        eprintln!("taskdaemon: warning: {text}");
        said.push(text);
    }
}

/// The run's configuration, checked (loop type, agent, values) before anything changes.
pub(crate) fn resolve(dir: &Path, task: String, settings: &Settings) -> anyhow::Result<RunConfig> {
    task_flow::resolve_config(dir, task, settings).map_err(user)
}

/// A new run of `cfg`, and how it begins; the logs of an earlier run move aside.
pub(crate) fn new_state(
    dir: &Path,
    ws: &Workspace,
    cfg: RunConfig,
) -> anyhow::Result<(RunState, Begin)> {
    let new = task_flow::new_run_state(dir, ws, cfg).map_err(flow_err)?;
    if let Some(r) = &new.replaced {
        render_replaced(r);
    }
    Ok((new.state, new.begin))
}

/// "starting a new run; the unfinished run … is replaced".
pub(crate) fn render_replaced(r: &ReplacedRun) {
    eprintln!(
        "taskdaemon: starting a new run; the unfinished run {} is replaced{}",
        r.run_id,
        r.logs
            .as_ref()
            .map(|l| format!(" (its logs are in {})", l.display()))
            .unwrap_or_default()
    );
}

/// A task flow's error: the person's to fix (exit 64) or the harness's.
pub(crate) fn flow_err(e: TaskFlowError) -> anyhow::Error {
    if e.is_user_fault() {
        user(e)
    } else {
        anyhow::Error::new(e)
    }
}

/// Run the engine on a runtime, with Ctrl-C / SIGTERM handling and rendering.
pub fn drive(
    ws: &Workspace,
    state: RunState,
    begin: Begin,
    json: bool,
) -> anyhow::Result<(Outcome, RunSummary)> {
    take_over_processes(&state)?;
    with_signals(|cancel| async move {
        let (events, rendering) = render_loop_events(&state, json);
        let ctx = EngineContext {
            script_runner: std::env::current_exe().context("finding the taskdaemon executable")?,
            events,
            pause: tokio_util::sync::CancellationToken::new(),
        };
        let result = taskdaemon_core::runs::run(state, ws, &ctx, &cancel, begin).await;
        drop(ctx);
        rendering.finish().await;
        // A link the harness refuses to follow, bad state: the person's to fix (exit 64).
        result.map_err(|e| {
            if e.is_user_fault() {
                user(e)
            } else {
                anyhow::Error::new(e)
            }
        })
    })
}

/// Where a loop's events are rendered (and passed on to its notification sinks).
pub(crate) enum Rendering {
    /// On a thread of its own, with its own runtime: the events are shown even while the
    /// loop's thread is in a blocking step (a wait of up to minutes for another holder of
    /// a snapshot lock, whose warning says who holds it).
    Thread(std::thread::JoinHandle<()>),
    /// On the loop's runtime, where no thread could be started.
    Task(tokio::task::JoinHandle<()>),
}

impl Rendering {
    /// Once every sender of the events is dropped: wait until all are shown.
    pub(crate) async fn finish(self) {
        match self {
            Rendering::Thread(h) => {
                let _ = h.join();
            }
            Rendering::Task(t) => {
                let _ = t.await;
            }
        }
    }
}

/// The sink for the events of the loop of `state`, and their rendering (`json`: one JSON
/// object per line), on a thread of its own when one can be started.
pub(crate) fn render_loop_events(state: &RunState, json: bool) -> (EventSink, Rendering) {
    let channel = |state: RunState| {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let work = async move {
            let (rx, notices) = notify_local(rx, &state);
            Renderer::new(json).run(rx).await;
            let _ = notices.await;
        };
        (EventSink::new(tx), work)
    };
    let (events, work) = channel(state.clone());
    let thread = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()
        .and_then(|rt| {
            std::thread::Builder::new()
                .name("render".into())
                .spawn(move || rt.block_on(work))
                .ok()
        });
    match thread {
        Some(h) => (events, Rendering::Thread(h)),
        None => {
            let (events, work) = channel(state.clone());
            (events, Rendering::Task(tokio::spawn(work)))
        }
    }
}

/// Before the loop starts (its lock held): end every process a killed loop in this
/// directory left running, and record this loop's processes before each starts.
fn take_over_processes(state: &RunState) -> anyhow::Result<()> {
    let workdir = &state.config.workdir;
    let left = task_flow::take_over_loop(workdir, state.config.kill_grace()).map_err(flow_err)?;
    render_leftovers(&left, workdir);
    Ok(())
}

/// End what a killed loop recorded in `dir` (a loop in `workdir`), then record this loop's
/// processes there. The caller holds the lock that makes it the only user of `dir`.
pub(crate) fn take_over_in(
    dir: PathBuf,
    workdir: &Path,
    grace: std::time::Duration,
) -> anyhow::Result<()> {
    let left = task_flow::take_over_in(dir, grace).map_err(flow_err)?;
    render_leftovers(&left, workdir);
    Ok(())
}

/// One line per process tree a stopped loop left running and this one ended.
pub(crate) fn render_leftovers(left: &[Leftover], workdir: &Path) {
    for l in left {
        eprintln!(
            "taskdaemon: ended {} process(es) of run {} that a stopped loop left running in {}",
            l.processes,
            if l.run_id.is_empty() { "?" } else { &l.run_id },
            workdir.display(),
        );
    }
}

/// Run `body` on a runtime on this thread, as the reaper of orphaned descendants, with
/// SIGINT, SIGTERM and SIGHUP cancelling the token it gets. One loop waits on its agent
/// and validation: a thread of its own serves it best (no worker threads to start, no
/// hand-over between threads on each of the children's events). The signals are taken
/// on another thread ([`on_signals`]): a blocking step of the loop does not hold them up.
pub(crate) fn with_signals<T, F, Fut>(body: F) -> anyhow::Result<T>
where
    F: FnOnce(CancellationToken) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    guard_agents();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async {
        let cancel = CancellationToken::new();
        spawn_signal_handler(cancel.clone())?;
        body(cancel).await
    })
}

/// The first SIGINT, SIGTERM or SIGHUP cancels `cancel`; the next one forces the stop.
pub(crate) fn spawn_signal_handler(cancel: CancellationToken) -> anyhow::Result<()> {
    on_signals(
        move || {
            cancel.cancel();
            let _ = writeln!(
                std::io::stderr(),
                "taskdaemon: stopping: the agent gets its grace period to end (again to force)"
            );
        },
        || {
            let ended = agent::tracked::end_all_now().map_or(0, |l| l.len());
            let _ = writeln!(
                std::io::stderr(),
                "taskdaemon: forcing the stop: {ended} agent process tree(s) killed; `run --resume` goes on from the saved state"
            );
        },
    )
}

/// Set when a second signal forces the stop: the signal thread ends the process then.
static FORCING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether a second signal is forcing the stop: the signal thread ends the process (exit
/// 130) once `force` has run, and a main thread done meanwhile leaves the exit to it.
pub(crate) fn forcing_stop() -> bool {
    FORCING.load(std::sync::atomic::Ordering::SeqCst)
}

/// On a thread of its own, with its own runtime: `first` at the first SIGINT, SIGTERM or
/// SIGHUP; at the next one `force`, then exit 130. A signal is so acted on even while the
/// thread of the loop (or of every worker) is in a blocking step, such as a wait of up to
/// minutes for another holder of a snapshot lock. Returns once the handlers are installed.
pub(crate) fn on_signals(
    first: impl FnOnce() + Send + 'static,
    force: impl FnOnce() + Send + 'static,
) -> anyhow::Result<()> {
    use tokio::signal::unix::{Signal, SignalKind, signal};
    let (ready, installed) = std::sync::mpsc::channel::<anyhow::Result<()>>();
    let install = || -> anyhow::Result<[Signal; 3]> {
        Ok([
            signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
            signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            signal(SignalKind::hangup()).context("installing the SIGHUP handler")?,
        ])
    };
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("starting the signal thread's runtime");
            let rt = match rt {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = ready.send(Err(e));
                    return;
                }
            };
            rt.block_on(async move {
                let [mut int, mut term, mut hup] = match install() {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = ready.send(Err(e));
                        return;
                    }
                };
                let _ = ready.send(Ok(()));
                let mut first = Some(first);
                loop {
                    tokio::select! {
                        _ = int.recv() => {}
                        _ = term.recv() => {}
                        _ = hup.recv() => {}
                    }
                    match first.take() {
                        Some(f) => f(),
                        None => break,
                    }
                }
                FORCING.store(true, std::sync::atomic::Ordering::SeqCst);
                force();
                std::process::exit(130);
            })
        })
        .context("starting the signal thread")?;
    installed
        .recv()
        .context("the signal thread ended before installing its handlers")?
}

/// How a task ended, for a person (stderr) or as one JSON object.
pub(crate) fn render_task_end(end: &TaskEnd, outcome: &Outcome, json: bool) -> anyhow::Result<()> {
    let number = end.number;
    if json {
        return super::print_event(&serde_json::json!({
            "event": "task_finished",
            "task": number,
            "outcome": outcome.label(),
            "post_snapshot": end.post,
            "changed": !end.unchanged,
            "rollback": end.rollback_command(),
        }));
    }
    match (&end.post, &end.pre) {
        (Some(post), _) if end.unchanged => eprintln!(
            "taskdaemon: task {number} complete with no change to the project: the validation passed on it as it was, so nothing needed doing (saved as {post})"
        ),
        (Some(post), _) => eprintln!("taskdaemon: task {number} complete: saved as {post}"),
        (None, _) if matches!(outcome, Outcome::Failed { .. }) => {
            eprintln!("taskdaemon: task {number} failed: {}", outcome.detail())
        }
        (None, Some(pre)) => eprintln!(
            "taskdaemon: task {number} did not complete ({}); no post snapshot.\n  to undo it: taskdaemon snapshot rollback {pre}",
            outcome.label()
        ),
        (None, None) => eprintln!(
            "taskdaemon: task {number} did not complete ({}); it was the first task of an empty project, so there is nothing to roll back to",
            outcome.label()
        ),
    }
    Ok(())
}

/// End task `number` after its loop (also when `run --resume` finished it) and render it.
pub(crate) fn finish_task(
    dir: &Path,
    ws: &Workspace,
    number: u32,
    outcome: &Outcome,
    summary: &RunSummary,
    json: bool,
) -> anyhow::Result<()> {
    let end = taskdaemon_core::lifecycle::end_task(dir, ws, number, outcome, summary.iterations)
        .map_err(user)?;
    render_task_end(&end, outcome, json)
}

/// A foreground loop's events, passed on after the notices they call for went to the
/// sinks of `notify:` (nothing in between when there are none).
pub fn notify_local(
    rx: tokio::sync::mpsc::UnboundedReceiver<taskdaemon_core::engine::EngineEvent>,
    state: &taskdaemon_core::engine::RunState,
) -> (
    tokio::sync::mpsc::UnboundedReceiver<taskdaemon_core::engine::EngineEvent>,
    tokio::task::JoinHandle<()>,
) {
    use taskdaemon_core::notify;
    let dir = &state.config.workdir;
    let (sinks, untrusted) = notify::sinks_for(dir, None);
    warn_untrusted(untrusted.as_ref());
    if sinks.is_empty() {
        return (rx, tokio::spawn(async {}));
    }
    let title = state.config.task.lines().next().unwrap_or("").to_string();
    let local = notify::LocalNotices::new(dir.clone(), &state.run_id, &title);
    let log: notify::Log = std::sync::Arc::new(|line| eprintln!("taskdaemon: {line}"));
    notify::tee(rx, &sinks, local, log)
}
