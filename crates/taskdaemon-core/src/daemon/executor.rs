//! Runs one LoopRun for the daemon: its worktree (made, or reused as it is), its run state
//! (resumed when the worktree holds this run's state: iteration, progress and stuck count go
//! on, never from 1), the engine, and reports to the dispatcher.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use super::DaemonPaths;
use super::events::{
    AGENT_LINE_MAX, AgentStream, DaemonEvent, RunFacts, Subject, WaitReason, bounded,
};
use crate::agent::{Activity, FailureClass};
use crate::config::{self, Settings};
use crate::engine::{Begin, EngineContext, EngineEvent, EventSink, Outcome, RunConfig, RunState};
use crate::git::Git;
use crate::git::worktree::Worktrees;
use crate::loops::Registry;
use crate::scheduler::context::{self, branch_for};
use crate::store::{LoopKind, LoopRun};
use crate::workspace::Workspace;

/// What every run of one daemon shares.
#[derive(Debug)]
pub struct Shared {
    pub paths: DaemonPaths,
    pub worktrees: Worktrees,
    /// The taskdaemon executable (plays `script:` agents, leads the agent's PATH).
    pub script_runner: PathBuf,
    /// The agent of runs that name none (the daemon's `--agent`), over the config files.
    pub default_agent: Option<String>,
    /// The sandbox of runs that name none (the daemon's `--sandbox`), over the config files.
    pub default_sandbox: Option<crate::sandbox::SandboxKind>,
    /// The settings file used instead of the project's (`--config`).
    pub config: Option<PathBuf>,
    /// Where runs publish what their engine does.
    pub events: super::Publisher,
    /// The shared git remote (shared queue only): a run's branch is taken from it first.
    pub remote: Option<crate::git::remote::Remote>,
}

/// A run to start, with what the dispatcher worked out from the records.
#[derive(Debug, Clone)]
pub struct Launch {
    pub run: LoopRun,
    /// The worktree it works in (a spec's phases share the spec's).
    pub worktree: String,
    /// The branch a new worktree starts from.
    pub start: String,
    /// A person queued it again (resume, start): an ended run goes on past its outcome.
    pub requeued: bool,
    /// Who its events are about.
    pub subject: Subject,
    /// It ran elsewhere until its lease expired (shared queue): it goes on at the record's
    /// counters, whatever this machine's copy of its state says.
    pub from_elsewhere: bool,
    /// Shared queue, a plan, spec or phase run: its plan's documents to take from the
    /// remote before it starts.
    pub documents: Option<Documents>,
}

/// A plan's documents to take from the shared remote: every file (`overwrite`: a plan or
/// spec run, which writes them), or only those missing here (a phase run reads them).
#[derive(Debug, Clone)]
pub struct Documents {
    pub plan_id: String,
    pub overwrite: bool,
}

/// What a run tells the dispatcher.
#[derive(Debug)]
pub enum Report {
    Started {
        run_id: String,
        worktree: PathBuf,
        first_iteration: u32,
        resumed: bool,
        /// Let go (sent or dropped) once the dispatcher has sent `run-started` for it, or
        /// decided not to: the run's own events wait for it, so a subscriber never sees an
        /// iteration of a run before the run's start.
        announced: tokio::sync::oneshot::Sender<()>,
    },
    Iteration {
        run_id: String,
        iteration: u32,
        /// Set when the iteration finished: its outcome label, the run's cost so far.
        finished: Option<(String, f64)>,
        elapsed_ms: u64,
    },
    Finished {
        run_id: String,
        result: Result<Outcome, String>,
        /// Its figures at the end, when the engine ran.
        facts: Option<RunFacts>,
    },
}

/// Run `l` to an outcome; every step is reported on `tx`. `cancel` stops it at once (the
/// iteration under way is done again when it goes on), `pause` between two iterations.
pub async fn execute(
    shared: Arc<Shared>,
    l: Launch,
    cancel: CancellationToken,
    pause: CancellationToken,
    tx: UnboundedSender<Report>,
) {
    let run_id = l.run.id.clone();
    let (result, facts) = match execute_inner(shared, l, (&cancel, pause), &tx).await {
        Ok((o, facts)) => (Ok(o), facts),
        Err(e) => (Err(e), None),
    };
    let _ = tx.send(Report::Finished {
        run_id,
        result,
        facts,
    });
}

async fn execute_inner(
    shared: Arc<Shared>,
    l: Launch,
    (cancel, pause): (&CancellationToken, CancellationToken),
    tx: &UnboundedSender<Report>,
) -> Result<(Outcome, Option<RunFacts>), String> {
    let prep = {
        let shared = shared.clone();
        let l = l.clone();
        tokio::task::spawn_blocking(move || prepare(&shared, &l))
            .await
            .map_err(|e| format!("preparing the run: {e}"))??
    };
    let Prepared {
        ws,
        worktree,
        state,
        begin,
        _lock,
    } = prep;
    let resumed = begin.is_resumed();
    let run_id = l.run.id.clone();
    let mut facts = RunFacts {
        iterations: state.iterations_done,
        duration_ms: state.elapsed_ms,
        cost_usd: state.cost_reported.then_some(state.cost_usd),
        commit: state.last_head.clone(),
        worktree: Some(worktree.clone()),
    };
    if let Some(done) = state.outcome.clone().filter(|o| !o.resumable()) {
        // The engine finished before the daemon could record it (a crash in between).
        return Ok((done, Some(facts)));
    }
    let (announced, run_started) = tokio::sync::oneshot::channel();
    let _ = tx.send(Report::Started {
        run_id: run_id.clone(),
        worktree: worktree.clone(),
        first_iteration: state.iterations_done + 1,
        resumed,
        announced,
    });
    let (etx, mut erx) = tokio::sync::mpsc::unbounded_channel();
    let ctx = EngineContext {
        script_runner: shared.script_runner.clone(),
        events: EventSink::new(etx),
        pause,
    };
    let earlier = state.elapsed_ms;
    let started = std::time::Instant::now();
    let forward = {
        let tx = tx.clone();
        let run_id = run_id.clone();
        let subject = l.subject.clone();
        let events = shared.events.clone();
        tokio::spawn(async move {
            // After `run-started` (the engine runs on meanwhile; its events wait here).
            let _ = run_started.await;
            while let Some(e) = erx.recv().await {
                let elapsed_ms = earlier + started.elapsed().as_millis() as u64;
                let report = match &e {
                    EngineEvent::IterationStarted { iteration, .. } => Some(Report::Iteration {
                        run_id: run_id.clone(),
                        iteration: *iteration,
                        finished: None,
                        elapsed_ms,
                    }),
                    EngineEvent::IterationFinished {
                        iteration,
                        outcome,
                        cost_total_usd,
                        ..
                    } => Some(Report::Iteration {
                        run_id: run_id.clone(),
                        iteration: *iteration,
                        finished: Some((outcome.clone(), *cost_total_usd)),
                        elapsed_ms,
                    }),
                    _ => None,
                };
                if let Some(report) = report {
                    let _ = tx.send(report);
                }
                track(&mut facts, &e, elapsed_ms);
                for mut d in daemon_events(&subject, e) {
                    if let DaemonEvent::Waiting { facts: f, .. } = &mut d {
                        *f = facts.clone();
                    }
                    events.emit(d);
                }
            }
            facts
        })
    };
    let result = crate::runs::run(state, &ws, &ctx, cancel, begin).await;
    drop(ctx);
    let facts = forward.await.ok();
    result.map(|(o, _)| (o, facts)).map_err(|e| e.to_string())
}

/// A run's figures after engine event `e` (`elapsed_ms`: its time so far).
fn track(facts: &mut RunFacts, e: &EngineEvent, elapsed_ms: u64) {
    match e {
        EngineEvent::IterationFinished {
            iteration,
            commit,
            cost_total_usd,
            ..
        } => {
            facts.iterations = *iteration;
            facts.duration_ms = elapsed_ms;
            if *cost_total_usd > 0.0 {
                facts.cost_usd = Some(*cost_total_usd);
            }
            if commit.is_some() {
                facts.commit = commit.clone();
            }
        }
        EngineEvent::RunFinished { summary } => {
            facts.iterations = summary.iterations;
            facts.duration_ms = summary.duration_ms;
            facts.cost_usd = summary.cost_usd;
        }
        _ => {}
    }
}

struct Prepared {
    ws: Workspace,
    worktree: PathBuf,
    state: RunState,
    begin: Begin,
    _lock: crate::workspace::RunLock,
}

fn prepare(shared: &Shared, l: &Launch) -> Result<Prepared, String> {
    // Work that depends on merges held for a checked-out target starts from them.
    let mut start = crate::git::integrate::start_point(&shared.worktrees, &l.start);
    if let Some(remote) = &shared.remote {
        // Shared queue: new work starts from the remote's target (other machines merge there).
        start = super::shared_queue::start_point(remote, &l.start);
        // Shared queue: the branch as the remote has it (earlier phases or iterations may
        // have run on another machine).
        if let Some(line) = super::shared_queue::adopt(remote, &shared.worktrees, &l.worktree)? {
            note(shared, false, line);
        }
        if let Some(d) = &l.documents {
            let project = &shared.paths.project;
            match super::shared_queue::fetch_documents(remote, project, &d.plan_id, d.overwrite) {
                Ok(Some(line)) => note(shared, false, line),
                Ok(None) => {}
                Err(e) => note(shared, true, e),
            }
        }
    }
    // Taken over: how far the remote's branch got by its iteration mark.
    let marked = shared
        .remote
        .as_ref()
        .filter(|_| l.from_elsewhere)
        .and_then(|r| super::shared_queue::marked_iterations(r, &l.worktree, &l.run.id));
    let path = shared
        .worktrees
        .ensure(&l.worktree, &branch_for(&l.worktree), &start)
        .map_err(|e| e.to_string())?;
    let ws = Workspace::new(&path);
    let lock = ws.lock().map_err(|e| e.to_string())?;
    if let Some(mut st) = RunState::load(&ws).map_err(|e| e.to_string())?
        && st.run_id == l.run.id
    {
        if l.from_elsewhere {
            super::shared_queue::continue_at_record(&mut st, &l.run);
            if let Some(line) = super::shared_queue::continue_at_mark(&mut st, marked) {
                note(shared, false, line);
            }
        }
        if matches!(st.outcome, Some(Outcome::Stuck { .. })) {
            st.stuck_count = 0;
        }
        let ended = st.outcome.as_ref();
        if ended.is_some_and(Outcome::resumable)
            || (l.requeued && ended.is_some_and(|o| !matches!(o, Outcome::Complete { .. })))
        {
            // Paused, blocked, a limit, or failed and resumed by a person: go on from where
            // it stopped, at its next iteration.
            st.outcome = None;
        }
        if l.requeued {
            // Limits a person raised since apply (never lowered below what was saved).
            let s = config::load_layers(&shared.paths.project, shared.config.as_deref())
                .map_err(|e| e.to_string())?
                .settings;
            if let Some(n) = s.max_iterations {
                st.config.max_iterations = st.config.max_iterations.max(n);
            }
            if let Some(d) = s.max_runtime {
                let ms = d.0.as_millis() as u64;
                st.config.max_runtime_ms = st.config.max_runtime_ms.map(|m| m.max(ms));
            }
            if let Some(c) = s.max_cost {
                st.config.max_cost = st.config.max_cost.map(|m| m.max(c));
            }
        }
        return Ok(Prepared {
            ws,
            worktree: path,
            state: st,
            begin: Begin::Resumed { temps_removed: 0 },
            _lock: lock,
        });
    }
    // A new run in this worktree: the logs of the one before move aside.
    // (Listing `logs/` once: the temporary files a killed write left there go with it.)
    let temps_removed = match RunState::load(&ws).ok().flatten() {
        Some(old) if crate::workspace::is_plain_name(&old.run_id) => {
            ws.set_aside_logs(&old.run_id)
                .map_err(|e| format!("moving the logs of run {} aside: {e}", old.run_id))?
                .removed_temps
        }
        _ => ws.remove_log_temps(),
    };
    let cfg = config_for(
        &shared.paths.project,
        shared.config.as_deref(),
        &path,
        &l.run,
        shared.default_agent.as_deref(),
        shared.default_sandbox,
    )?;
    let head = Git::new(&path).head().map_err(|e| e.to_string())?;
    let now = crate::clock::now();
    if let Some(d) = context::RunContext::get(&l.run.context.specs_dir) {
        std::fs::create_dir_all(d).map_err(|e| format!("creating {d}: {e}"))?;
    }
    if let Some(parent) =
        context::RunContext::get(&l.run.context.plan_file).and_then(|f| Path::new(f).parent())
    {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("creating {}: {e}", parent.display()))?;
    }
    let mut state = RunState::new(cfg, l.run.id.clone(), head, crate::clock::rfc3339(now));
    if l.from_elsewhere {
        super::shared_queue::continue_at_record(&mut state, &l.run);
        if let Some(line) = super::shared_queue::continue_at_mark(&mut state, marked) {
            note(shared, false, line);
        }
    }
    Ok(Prepared {
        ws,
        worktree: path,
        // Going on from another machine's record: resumed.
        begin: if l.from_elsewhere && state.iterations_done > 0 {
            Begin::Resumed { temps_removed }
        } else {
            Begin::New { temps_removed }
        },
        state,
        _lock: lock,
    })
}

/// The run's configuration: the project's settings layers, the run's loop type and its
/// spawned context (agent, validation).
pub fn config_for(
    project: &Path,
    config_file: Option<&Path>,
    workdir: &Path,
    run: &LoopRun,
    default_agent: Option<&str>,
    default_sandbox: Option<crate::sandbox::SandboxKind>,
) -> Result<RunConfig, String> {
    let mut s: Settings = config::load_layers(project, config_file)
        .map_err(|e| e.to_string())?
        .settings;
    s.loop_type = Some(run.loop_type.to_string());
    if let Some(a) = context::RunContext::get(&run.context.agent).or(default_agent) {
        s.agent = Some(a.to_string());
    }
    // The run's own sandbox (`submit --sandbox`), else the daemon's, else the config's.
    match context::RunContext::get(&run.context.sandbox) {
        Some(k) => s.sandbox = Some(crate::sandbox::SandboxKind::parse(k)?),
        None => s.sandbox = default_sandbox.or(s.sandbox),
    }
    match run.loop_type {
        // Their validation checks their documents; the project's test command does not apply,
        // and they make no commits, so "no new commit" is no sign of being stuck.
        LoopKind::Plan | LoopKind::Spec => {
            s.validate = None;
            s.max_stuck = Some(0);
        }
        _ => {
            if let Some(v) = context::RunContext::get(&run.context.validate) {
                s.validate = Some(v.to_string());
            }
        }
    }
    let task = match run.loop_type {
        LoopKind::Plan => format!(
            "Plan: {}",
            context::RunContext::get(&run.context.user_request).unwrap_or("(no idea given)")
        ),
        LoopKind::Spec => format!(
            "Split the plan {} into specs",
            context::RunContext::get(&run.context.plan_file).unwrap_or("")
        ),
        LoopKind::Phase => format!(
            "Phase {} of {}",
            context::RunContext::get(&run.context.phase_number).unwrap_or("?"),
            context::RunContext::get(&run.context.spec_id).unwrap_or("?")
        ),
        _ => context::RunContext::get(&run.context.task)
            .unwrap_or("")
            .to_string(),
    };
    let registry = Registry::for_repo(project).map_err(|e| e.to_string())?;
    if run.loop_type == LoopKind::Implement {
        return implement_config(workdir, run, &s, &registry);
    }
    if run.loop_type == LoopKind::Stories {
        return stories_config(workdir, run, &s, &registry);
    }
    let mut cfg = RunConfig::resolve(workdir, task, &s, &registry).map_err(|e| e.to_string())?;
    if run.loop_type == LoopKind::Plan {
        // The Rule of Five needs its five passes, whatever the project's max-iterations.
        cfg.max_iterations = cfg.max_iterations.max(crate::docs::REVIEW_PASSES);
    }
    cfg.context = run.context.to_map();
    Ok(cfg)
}

/// The context key of an implement run: its spec directory, relative to the repository.
pub const SPEC_DIR: &str = "spec-dir";

/// An implement run: the spec directory inside the run's worktree, through the work
/// lists' one resolution (`worklist::config`).
fn implement_config(
    workdir: &Path,
    run: &LoopRun,
    s: &Settings,
    registry: &Registry,
) -> Result<RunConfig, String> {
    let rel = context::RunContext::get(&run.context.spec_dir)
        .ok_or_else(|| format!("run {} names no {SPEC_DIR}", run.id))?;
    crate::store::paths::inside(rel, workdir).map_err(|why| format!("{SPEC_DIR} {rel}: {why}"))?;
    let spec_dir = workdir.join(rel);
    let text = std::fs::read_to_string(spec_dir.join(crate::worklist::coordinator::TASKS_FILE))
        .map_err(|e| format!("reading the tasks of {}: {e}", spec_dir.display()))?;
    let t = crate::worklist::config::TasksRun {
        spec_dir,
        max_task_iterations: crate::worklist::coordinator::DEFAULT_MAX_TASK_ITERATIONS,
        verify_timeout: Some(std::time::Duration::from_secs(10 * 60)),
        tasks: crate::worklist::tasks_md::parse(&text).len(),
    };
    let mut cfg = crate::worklist::config::tasks_config(workdir, &t, s, registry)
        .map_err(|e| e.to_string())?;
    cfg.context = run.context.to_map();
    Ok(cfg)
}

/// A stories run: the stories file inside the run's worktree, through the work lists' one
/// resolution.
fn stories_config(
    workdir: &Path,
    run: &LoopRun,
    s: &Settings,
    registry: &Registry,
) -> Result<RunConfig, String> {
    let rel = context::RunContext::get(&run.context.stories_file)
        .ok_or_else(|| format!("run {} names no stories-file", run.id))?;
    crate::store::paths::inside(rel, workdir)
        .map_err(|why| format!("stories-file {rel}: {why}"))?;
    let file = workdir.join(rel);
    let (_, stories) = crate::worklist::stories::load(&file).map_err(|e| e.to_string())?;
    let r = crate::worklist::config::StoriesRun {
        file,
        review: context::RunContext::get(&run.context.stories_review) != Some("no"),
        max_reviews: 3,
        max_iterations: None,
        stories: stories.len(),
    };
    let mut cfg = crate::worklist::config::stories_config(workdir, &r, s, registry)
        .map_err(|e| e.to_string())?;
    cfg.context = run.context.to_map();
    Ok(cfg)
}

/// At most this many lines of one agent message become `agent-line` events.
const LINES_PER_MESSAGE: usize = 200;

/// What an engine event tells the daemon's subscribers.
pub fn daemon_events(subject: &Subject, e: EngineEvent) -> Vec<DaemonEvent> {
    let subject = subject.clone();
    match e {
        EngineEvent::IterationStarted {
            iteration,
            max_iterations,
            log,
            ..
        } => vec![DaemonEvent::IterationStarted {
            subject,
            iteration,
            max_iterations,
            log,
        }],
        EngineEvent::IterationFinished {
            iteration,
            outcome,
            duration_ms,
            commit,
            stuck_count,
            cost_total_usd,
            ..
        } => vec![DaemonEvent::IterationFinished {
            subject,
            iteration,
            outcome,
            duration_ms: duration_ms.max(0.0) as u64,
            commit,
            stuck_count,
            cost_total_usd,
        }],
        EngineEvent::Agent {
            iteration,
            activity,
            ..
        } => agent_events(subject, iteration, activity),
        EngineEvent::Gate {
            iteration,
            gate,
            passed,
            severity,
            message,
        } => vec![DaemonEvent::GateResult {
            subject,
            iteration,
            gate,
            passed,
            hard: severity == crate::gates::scope::Severity::Hard,
            message,
        }],
        EngineEvent::ValidationFinished {
            iteration,
            passed,
            exit_code,
            timed_out,
            interrupted,
            ..
        } => vec![DaemonEvent::GateResult {
            subject,
            iteration,
            gate: "validate".into(),
            passed,
            hard: true,
            message: if interrupted {
                "interrupted by the stop: no verdict".into()
            } else if timed_out {
                "timed out".into()
            } else {
                format!("exit {exit_code}")
            },
        }],
        EngineEvent::Waiting {
            class,
            until,
            message,
            line,
            ..
        } => vec![DaemonEvent::Waiting {
            subject,
            reason: wait_reason(class),
            until: Some(until),
            message,
            action: None,
            line,
            facts: RunFacts::default(),
        }],
        EngineEvent::WaitOver { class, .. } => vec![DaemonEvent::WaitOver {
            subject,
            reason: wait_reason(class),
        }],
        // A work list's tasks and stories: a note each, as the CLI shows them.
        EngineEvent::Work(w) => w
            .describe()
            .map(|text| DaemonEvent::Note {
                repo: subject.repo.clone(),
                warning: false,
                message: format!("run {}: {text}", subject.run),
            })
            .into_iter()
            .collect(),
        _ => Vec::new(),
    }
}

fn wait_reason(class: FailureClass) -> WaitReason {
    if class == FailureClass::UsageLimit {
        WaitReason::UsageLimit
    } else {
        WaitReason::Backoff
    }
}

fn agent_events(subject: Subject, iteration: u32, activity: Activity) -> Vec<DaemonEvent> {
    let (stream, text) = match activity {
        Activity::ToolCall { name, detail } => {
            return vec![DaemonEvent::AgentActivity {
                subject,
                iteration,
                tool: name,
                detail: bounded(&detail, AGENT_LINE_MAX),
            }];
        }
        Activity::Text { text } => (AgentStream::Text, text),
        Activity::Other { text } => (AgentStream::Other, text),
    };
    text.lines()
        .take(LINES_PER_MESSAGE)
        .map(|line| DaemonEvent::AgentLine {
            subject: subject.clone(),
            iteration,
            stream,
            line: bounded(line, AGENT_LINE_MAX),
        })
        .collect()
}

fn note(shared: &Shared, warning: bool, message: String) {
    shared.events.emit(super::DaemonEvent::Note {
        repo: shared.paths.project.clone(),
        warning,
        message,
    });
}
