//! `taskdaemon implement`'s work source (spec 5 Component 3): each iteration, the next
//! unchecked task of `tasks.md` (or its `[P]` group, each member in a worktree of its
//! own), handed to fresh agents by the engine's one loop; every claim checked by the
//! verification layers (`verify.rs`, the evidence's layer 6); accepted work lands in task
//! order, rejected work is put back with its reason in the task's next prompt. The state
//! of the list is `<spec>/.ralph-state.json` (spec 5's shape); the engine's is the run's.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::evidence::{TaskEvidence, VerifyRun};
use super::loop_prompt::{LoopPrompts, PromptVars};
use super::prompt::{ParallelPaths, TaskPrompt, task_prompt};
use super::state::{ImplementState, ParallelGroup, TaskStatus};
use super::tasks_md::{self, Task};
use super::verify::{self, Evidence, Failure};
use super::{WorklistError, lock, progress};
use crate::engine::decide::{Claim, Decision};
use crate::engine::events::WorkEvent;
use crate::engine::source::{Ending, Finished, Judged, Member, Next, Unit};
use crate::engine::{EngineContext, EngineError, Outcome, RunState, WorkSource};
use crate::fsutil::write_atomic;
use crate::git::Git;
use crate::git::worktree::Worktrees;
use crate::guards::Limit;
use crate::signals::{self, Signal};
use crate::telemetry::{WorkTally, WorkUnit};
use crate::workspace::Workspace;

pub const TASKS_FILE: &str = "tasks.md";
/// Runtime files in the spec directory that git must not see (layer 2 ignores them).
pub const IGNORED: &[&str] = &[
    super::state::STATE_FILE,
    lock::RUN_LOCK,
    lock::TASKS_LOCK,
    lock::CANCEL_MARK,
    ".progress-task-*.md",
    ".ralph-logs/",
];
const PROGRESS_BUDGET: usize = 6 * 1024;
/// Attempts per task before the loop stops, by default.
pub const DEFAULT_MAX_TASK_ITERATIONS: u32 = 5;

mod judge;

/// A task's member in the running iteration.
struct Slot {
    /// The task as tasks.md had it before the agents (what it is judged as).
    task: Task,
    /// The worktree of a `[P]` member (its name), removed after the iteration.
    tree: Option<(String, PathBuf)>,
}

/// A `[P]` member that finished while an earlier member of its group waited (a usage
/// limit): judged and landed after that one, so the group lands in task order.
struct Parked {
    task: Task,
    tree: (String, PathBuf),
    /// The commit its worktree started from.
    base: String,
    words: String,
    timed_out: bool,
    no_work: Option<String>,
    /// It checked its box (put back while it waits).
    checked: bool,
}

/// A task's verdict: its commits when accepted, else why not.
type TaskVerdict = (usize, Result<Vec<String>, Vec<Failure>>);

/// A member's claim, with what it is judged against.
struct Claimed<'a> {
    task: &'a Task,
    words: &'a str,
    timed_out: bool,
    no_work: Option<&'a str>,
    /// Where it worked (the repository, or its worktree).
    tree: &'a Path,
    tasks_after: &'a [Task],
    /// The other tasks of its group.
    group: &'a [usize],
}

/// The iteration running.
#[derive(Default)]
struct Current {
    slots: Vec<Slot>,
    checked_before: BTreeSet<usize>,
    /// The commit the group's worktrees started from.
    base: Option<String>,
    /// The rejected tasks and why: their next attempts (in `settle`).
    failed: Vec<(usize, String)>,
    /// The members that wait (abandoned for a retry), by their place in the unit.
    waiting: BTreeSet<usize>,
}

pub struct TasksSource {
    spec_dir: PathBuf,
    repo: PathBuf,
    spec_rel: String,
    spec_name: String,
    git: Git,
    ws: Workspace,
    state: ImplementState,
    resumed: bool,
    verify_timeout: Option<Duration>,
    grace: Duration,
    sandbox: crate::sandbox::SandboxPlan,
    evidence: TaskEvidence,
    prompts: LoopPrompts,
    now: Current,
    /// Every box checked when the run ended (its state is removed then).
    done: bool,
    /// The spec directory's run lock, from the start on (one loop per spec directory,
    /// wherever it was started from).
    lock: Option<lock::RunLock>,
    parked: Vec<Parked>,
    /// The harness's guidance for the next prompts, until an agent has seen it.
    note: Option<String>,
}

/// Check what `implement` needs before anything changes: tasks.md exists and git tracks it.
pub fn preflight(spec_dir: &Path, repo: &Path) -> Result<(), WorklistError> {
    let tasks = spec_dir.join(TASKS_FILE);
    if !tasks.is_file() {
        return Err(WorklistError::Invalid(format!(
            "{} does not exist\n  hint: pass the spec directory that holds tasks.md (`taskdaemon implement specs/NAME`), or write specs/.current-spec",
            tasks.display()
        )));
    }
    let rel = tasks.strip_prefix(repo).unwrap_or(&tasks);
    let out = Git::new(repo)
        .call(&[
            "ls-files".as_ref(),
            "--error-unmatch".as_ref(),
            rel.as_os_str(),
        ])
        .output()?;
    if !out.status.success() {
        return Err(WorklistError::Invalid(format!(
            "{} is not committed: the harness checks the agents' work by commits\n  hint: `git add {} && git commit -m \"spec\"` first",
            rel.display(),
            rel.parent().unwrap_or(rel).display()
        )));
    }
    Ok(())
}

/// The iteration limit of a tasks.md run: tasks × attempts × 2.
pub fn max_iterations(tasks: usize, max_task_iterations: u32) -> u32 {
    (tasks as u32)
        .saturating_mul(max_task_iterations)
        .saturating_mul(2)
        .max(1)
}

impl TasksSource {
    /// The source of the run `st` (its config names the spec directory), with the list's
    /// saved state when there is one. Warnings go to `warn`.
    pub fn open(st: &RunState, warn: &dyn Fn(String)) -> Result<TasksSource, WorklistError> {
        let cfg = &st.config;
        let crate::engine::SourceSpec::Tasks {
            spec_dir,
            max_task_iterations,
            verify_timeout_ms,
        } = &cfg.source
        else {
            return Err(WorklistError::Invalid(
                "the run's config names no tasks.md".into(),
            ));
        };
        let repo = cfg.workdir.clone();
        let tasks = read_tasks_of(spec_dir)?;
        let (state, resumed) = load_state(spec_dir, *max_task_iterations, tasks.len(), warn)?;
        let spec_name = spec_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "spec".into());
        let spec_rel = spec_dir
            .strip_prefix(&repo)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let in_progress = resumed
            .then(|| tasks.get(state.task_index).map(|t| t.id.clone()))
            .flatten();
        Ok(TasksSource {
            evidence: TaskEvidence::new(
                &repo,
                &format!("implement-{spec_name}"),
                cfg.allow_test_changes,
                in_progress,
            )?,
            prompts: LoopPrompts::load(&repo)?,
            spec_rel: if spec_rel.is_empty() {
                ".".into()
            } else {
                spec_rel
            },
            spec_name,
            git: Git::new(&repo),
            ws: Workspace::new(&repo),
            spec_dir: spec_dir.clone(),
            repo,
            state,
            resumed,
            verify_timeout: verify_timeout_ms.map(Duration::from_millis),
            grace: cfg.kill_grace(),
            sandbox: cfg.sandbox.clone(),
            now: Current::default(),
            done: false,
            lock: None,
            parked: Vec::new(),
            note: None,
        })
    }

    fn tasks_file(&self) -> PathBuf {
        self.spec_dir.join(TASKS_FILE)
    }

    fn read_tasks(&self) -> Result<Vec<Task>, WorklistError> {
        read_tasks_of(&self.spec_dir)
    }
}

fn read_tasks_of(spec_dir: &Path) -> Result<Vec<Task>, WorklistError> {
    let p = spec_dir.join(TASKS_FILE);
    let text = std::fs::read(&p).map_err(WorklistError::io(&p))?;
    Ok(tasks_md::parse(&String::from_utf8_lossy(&text)))
}

/// The saved state (fresh when there is none or it is corrupt), brought in line with the
/// config and the task count; `true` when resumed.
fn load_state(
    spec_dir: &Path,
    max_task_iterations: u32,
    task_count: usize,
    warn: &dyn Fn(String),
) -> Result<(ImplementState, bool), WorklistError> {
    let fresh = || ImplementState::new(spec_dir, task_count, max_task_iterations);
    let (mut st, resumed) = match ImplementState::load(spec_dir) {
        Ok(Some(s)) => (s, true),
        Ok(None) => (fresh(), false),
        Err(e @ WorklistError::CorruptState { .. }) => {
            warn(format!(
                "{e}; state reset to defaults, resuming from the first unchecked task"
            ));
            (fresh(), false)
        }
        Err(e) => return Err(e),
    };
    st.total_tasks = task_count;
    st.max_task_iterations = max_task_iterations;
    st.base_path = spec_dir.display().to_string();
    if st.task_iteration == 0 || st.task_iteration > st.max_task_iterations {
        st.task_iteration = 1;
    }
    // A state written before each task kept its own attempt: its task's is taskIteration.
    let current = st.task_index.to_string();
    if st.task_iteration > 1
        && st
            .task_results
            .get(&current)
            .is_none_or(|r| r.attempt.is_none())
    {
        let r = st
            .task_results
            .entry(current)
            .or_insert(super::state::TaskResult {
                status: TaskStatus::Pending,
                error: None,
                attempt: None,
            });
        r.attempt = Some(st.task_iteration);
    }
    Ok((st, resumed))
}

/// The tasks that run in this iteration, recorded in the state as the current group and
/// pending.
fn begin_group(st: &mut ImplementState, tasks: &[Task], next: usize) -> Vec<usize> {
    let group = group_at(tasks, next);
    st.parallel_group = Some(ParallelGroup {
        start_index: group[0],
        end_index: group[group.len() - 1],
        task_indices: group.clone(),
        is_parallel: group.len() > 1,
    });
    for i in &group {
        st.record(
            *i,
            TaskStatus::Pending,
            st.last_error(*i).map(str::to_string),
        );
    }
    group
}

/// The tasks that run next: a group of consecutive unchecked `[P]` tasks (a `[VERIFY]`
/// task or a sequential one ends it), else the single task at `next`.
pub fn group_at(tasks: &[Task], next: usize) -> Vec<usize> {
    let mut group = vec![next];
    if !tasks[next].runs_in_parallel() {
        return group;
    }
    for t in &tasks[next + 1..] {
        if t.done || !t.runs_in_parallel() {
            break;
        }
        group.push(t.index);
    }
    group
}

impl WorkSource for TasksSource {
    async fn start(
        &mut self,
        _st: &mut RunState,
        _resumed: bool,
        ctx: &EngineContext,
        _cancel: &CancellationToken,
    ) -> Result<Option<Outcome>, EngineError> {
        self.lock = Some(lock::acquire(&self.spec_dir)?);
        Git::new(&self.spec_dir).ensure_excluded(IGNORED)?;
        if self.evidence.allow {
            ctx.events.warn("--allow-test-changes: the evidence protection is OFF for this run: changed Verify scripts, deleted or skipped tests and fewer tests run are only warned about");
        }
        let tasks = self.read_tasks()?;
        if tasks.is_empty() {
            ctx.events.warn(format!(
                "{} has no tasks (no `- [ ]` items): nothing to do",
                self.tasks_file().display()
            ));
            return Ok(Some(Outcome::Complete { verified: true }));
        }
        if tasks.iter().any(|t| !t.done) && progress::ensure(&self.spec_dir)? {
            self.commit_spec_files(&[progress::PROGRESS_FILE], "taskdaemon: start .progress.md")?;
        }
        Ok(None)
    }

    async fn next(
        &mut self,
        st: &mut RunState,
        n: u32,
        ctx: &EngineContext,
        cancel: &CancellationToken,
    ) -> Result<Next, EngineError> {
        let tasks = self.read_tasks()?;
        if tasks.len() != self.state.total_tasks {
            ctx.events.warn(format!(
                "tasks.md now has {} tasks (was {})",
                tasks.len(),
                self.state.total_tasks
            ));
            self.state.total_tasks = tasks.len();
        }
        let Some(next) = tasks.iter().position(|t| !t.done) else {
            return Ok(Next::Done(Outcome::Complete { verified: true }));
        };
        self.state.task_index = next;
        self.state.task_iteration = self.state.attempt(next);
        // A member parked after an earlier one of its group waited is judged after it.
        let parked: Vec<usize> = self.parked.iter().map(|p| p.task.index).collect();
        let mut group = begin_group(&mut self.state, &tasks, next);
        group.retain(|i| !parked.contains(i));
        self.state.global_iteration = n;
        self.state.save(&self.spec_dir)?;
        self.now = Current {
            checked_before: tasks.iter().filter(|t| t.done).map(|t| t.index).collect(),
            ..Current::default()
        };
        for &i in &group {
            let run = VerifyRun {
                timeout: self.verify_timeout,
                grace: self.grace,
                sandbox: &self.sandbox,
                cancel,
            };
            if let Some(note) = self.evidence.before(&tasks[i], &run).await? {
                ctx.events.warn(note);
            }
        }
        let parallel = (group.len() > 1 || !self.parked.is_empty()) && self.git.head()?.is_some();
        let group = if parallel { group } else { vec![next] };
        let decision = super::answered(&self.ws)?;
        // The harness's guidance is kept until an agent has seen it (a member that waits
        // sees it again).
        if self.note.is_none() {
            self.note = super::take_feedback(&self.ws)?;
        }
        let (members, announce) =
            self.members(st, n, &tasks, &group, parallel, decision.as_deref())?;
        Ok(Next::Work(Unit {
            members,
            answered: decision.is_some(),
            announce,
        }))
    }

    async fn judge(
        &mut self,
        st: &mut RunState,
        done: &mut [Finished],
        head: Option<String>,
        ctx: &EngineContext,
        cancel: &CancellationToken,
    ) -> Result<Judged, EngineError> {
        self.note = None;
        Ok(self.judge_unit(st, done, head, ctx, cancel).await?)
    }

    fn note_for_next(&mut self, note: &str) {
        self.note = Some(format!("\n\n## A note from the harness\n\n{note}\n"));
    }

    fn abandon(
        &mut self,
        _unit: &Unit,
        members: &[usize],
        ctx: &EngineContext,
    ) -> Result<(), EngineError> {
        Ok(self.abandon_members(members, ctx)?)
    }

    fn settle(
        &mut self,
        _st: &mut RunState,
        d: &Decision,
        _ctx: &EngineContext,
    ) -> Result<Option<Outcome>, EngineError> {
        let failed = std::mem::take(&mut self.now.failed);
        // BLOCKED, DECIDE, stuck, a stop: the attempts are not counted; a rerun resumes
        // here. A limit counts them: they happened.
        let counted = matches!(d.run_outcome, None | Some(Outcome::LimitReached { .. }));
        let mut ended = None;
        for (index, reason) in failed.iter().filter(|_| counted) {
            let attempt = self.state.next_attempt(*index);
            if attempt > self.state.max_task_iterations && ended.is_none() {
                let id = self
                    .read_tasks()?
                    .get(*index)
                    .map(|t| t.id.clone())
                    .unwrap_or_default();
                ended = Some(Outcome::Failed {
                    reason: format!(
                        "task {id} was rejected {} times (--max-task-iterations); last reason:\n{reason}\n  hint: fix the task or tasks.md, then run `taskdaemon implement` again (it resumes at task {id}), or `taskdaemon cancel` to drop the state",
                        self.state.max_task_iterations
                    ),
                });
            }
        }
        if ended.is_some() {
            // Kept at the last attempt: a rerun after a fix tries it once more.
            if let Some((index, _)) = failed.first() {
                let max = self.state.max_task_iterations;
                if let Some(r) = self.state.task_results.get_mut(&index.to_string()) {
                    r.attempt = Some(max);
                }
            }
        }
        self.state.task_iteration = self.state.attempt(self.state.task_index);
        self.state.save(&self.spec_dir)?;
        Ok(ended)
    }

    fn finish(
        &mut self,
        st: &RunState,
        outcome: &Outcome,
        ctx: &EngineContext,
    ) -> Result<Ending, EngineError> {
        self.keep_parked(ctx);
        let tasks = self.read_tasks()?;
        self.done = tasks.iter().all(|t| t.done);
        let started = self.lock.is_some() && (st.iterations_done > 0 || self.resumed);
        if matches!(outcome, Outcome::Complete { .. }) {
            ImplementState::remove(&self.spec_dir)?;
        } else if started && !lock::cancel_requested(&self.spec_dir) {
            self.state.save(&self.spec_dir)?;
        }
        let done = tasks_md::checked(&tasks);
        Ok(Ending {
            detail: Some(self.detail(outcome, done, tasks.len())),
        })
    }

    fn tally(&self) -> Option<WorkTally> {
        let tasks = self.read_tasks().ok()?;
        Some(WorkTally {
            unit: WorkUnit::Tasks,
            done: tasks_md::checked(&tasks) as u32,
            total: tasks.len() as u32,
        })
    }

    fn describe(&self, resumed: bool) -> Option<String> {
        let t = self.tally()?;
        Some(format!(
            "implement {} · {} · {} of {} tasks done · at most {} attempts per task",
            self.spec_dir.display(),
            if resumed || self.resumed {
                "resuming from .ralph-state.json"
            } else {
                "starting"
            },
            t.done,
            t.total,
            self.state.max_task_iterations
        ))
    }

    fn finished(&mut self, outcome: &Outcome, detail: &str, ctx: &EngineContext) {
        let tasks = self.read_tasks().unwrap_or_default();
        let stopped_at = tasks.iter().find(|t| !t.done).map(|t| t.id.clone());
        ctx.events.work(WorkEvent::ImplementFinished {
            outcome: outcome.label().to_string(),
            exit_code: outcome.exit_code(),
            detail: detail.to_string(),
            done_tasks: tasks_md::checked(&tasks),
            total_tasks: tasks.len(),
            stopped_at: if matches!(outcome, Outcome::Complete { .. }) {
                None
            } else {
                stopped_at
            },
        });
    }
}

/// The agent's BLOCKED or DECIDE.
fn signal_of(words: &str) -> Option<Signal> {
    match signals::scan(words, "COMPLETE").signal {
        s @ Some(Signal::Blocked(_) | Signal::Decide(_)) => s,
        _ => None,
    }
}

/// Record each task's verdict; the first failure (task index and reason), if any.
fn record_verdicts(st: &mut ImplementState, verdicts: &[TaskVerdict]) -> Vec<(usize, String)> {
    let mut failed = Vec::new();
    for (index, result) in verdicts {
        match result {
            Ok(_) => st.record(*index, TaskStatus::Success, None),
            Err(f) => {
                let reason = verify::reason(f);
                st.record(*index, TaskStatus::Failed, Some(reason.clone()));
                failed.push((*index, reason));
            }
        }
    }
    failed
}

/// How an attempt's verification layers judged it: a failure of the evidence's layer makes
/// it `Tampered` (counts toward stuck though it committed).
fn claim_of(failures: &[Failure]) -> Claim {
    if failures.is_empty() {
        Claim::Accepted
    } else if failures.iter().any(|f| f.layer == super::evidence::LAYER) {
        Claim::Tampered
    } else {
        Claim::Rejected
    }
}

impl TasksSource {
    /// A detached worktree for a `[P]` member, at the group's base commit.
    fn worktree(&mut self, task: &Task) -> Result<(String, PathBuf), WorklistError> {
        let base = match &self.now.base {
            Some(b) => b.clone(),
            None => {
                let b = self.git.head()?.unwrap_or_default();
                self.now.base = Some(b.clone());
                b
            }
        };
        // One worktree manager: the loops' (`git::worktree`), with the work lists' own
        // base inside the git directory.
        let wts = Worktrees::open(&self.repo, &worklist_worktrees(&self.git)?)?;
        let name = tree_name(&self.spec_name, &task.id);
        let path = wts.detached(&name, &base)?;
        Ok((name, path))
    }

    /// The member that works on `task` (in `tree`, a `[P]` member's worktree).
    fn member(
        &self,
        st: &RunState,
        n: u32,
        task: &Task,
        tree: Option<PathBuf>,
        decision: Option<&str>,
    ) -> Result<Member, WorklistError> {
        let parallel = tree.is_some();
        let progress_text = progress::read_for_prompt(&self.spec_dir, PROGRESS_BUDGET);
        let tasks_file = self.tasks_file();
        let lock = lock::tasks_lock_path(&self.spec_dir);
        let progress_file = if parallel {
            progress::task_file(&self.spec_dir, &task.id)
        } else {
            progress::path(&self.spec_dir)
        };
        let attempt = self.state.task_iteration;
        let mut text = task_prompt(&TaskPrompt {
            task,
            spec_name: &self.spec_name,
            spec_rel: &self.spec_rel,
            spec_dir: &self.spec_dir,
            attempt,
            max_attempts: self.state.max_task_iterations,
            previous_error: if attempt > 1 {
                self.state.last_error(task.index)
            } else {
                None
            },
            progress: &progress_text,
            parallel: parallel.then_some(ParallelPaths {
                tasks_file: &tasks_file,
                lock: &lock,
                progress_file: &progress_file,
            }),
        });
        let rules = self.evidence.rules(&task.id);
        if !rules.is_empty() {
            text.push_str(&format!("\n\n{rules}\n"));
        }
        let mode = role(task);
        let prompt = self.prompts.render(
            mode,
            &PromptVars {
                task: &text,
                decision,
                iteration: n,
                max_iterations: st.config.max_iterations,
                workdir: &self.repo,
            },
        )?;
        let logs = self.ws.logs_dir();
        let (log, prompt_file) = if parallel {
            let base = format!("iteration-{n:03}-task-{}", file_part(&task.id));
            (
                logs.join(format!("{base}.log")),
                logs.join(format!("{base}.prompt.md")),
            )
        } else {
            (self.ws.iteration_log(n), self.ws.prompt_file(n))
        };
        Ok(Member {
            label: Some(task.id.clone()),
            mode: mode.to_string(),
            cwd: tree.unwrap_or_else(|| self.repo.clone()),
            prompt,
            prompt_file,
            log,
            env: self.env(task, &progress_file),
            system_prompt: None,
            notes: vec![format!(
                "task {} ({}), attempt {attempt} of {}",
                task.id, task.title, self.state.max_task_iterations
            )],
        })
    }

    fn env(&self, task: &Task, progress_file: &Path) -> Vec<(OsString, OsString)> {
        vec![
            ("TASKDAEMON_TASK_ID".into(), task.id.clone().into()),
            (
                "TASKDAEMON_TASK_INDEX".into(),
                task.index.to_string().into(),
            ),
            (
                "TASKDAEMON_TASK_ITERATION".into(),
                self.state.task_iteration.to_string().into(),
            ),
            ("TASKDAEMON_SPEC_DIR".into(), self.spec_dir.clone().into()),
            ("TASKDAEMON_TASKS_FILE".into(), self.tasks_file().into()),
            (
                "TASKDAEMON_TASKS_LOCK".into(),
                lock::tasks_lock_path(&self.spec_dir).into(),
            ),
            ("TASKDAEMON_PROGRESS_FILE".into(), progress_file.into()),
            (
                "TASKDAEMON_TASK_ROLE".into(),
                if task.verify_task { "qa" } else { "executor" }.into(),
            ),
        ]
    }

    fn started(&self, task: &Task, n: u32, m: &Member, parallel: bool) -> WorkEvent {
        WorkEvent::TaskStarted {
            iteration: n,
            task_id: task.id.clone(),
            task_index: task.index,
            title: task.title.clone(),
            role: if task.verify_task { "qa" } else { "executor" }.into(),
            attempt: self.state.task_iteration,
            max_attempts: self.state.max_task_iterations,
            parallel,
            prompt_file: m.prompt_file.display().to_string(),
        }
    }

    /// `git status` lines of the spec directory inside `tree`.
    fn uncommitted_spec(&self, tree: &Path) -> Result<Vec<String>, WorklistError> {
        let out = Git::new(tree)
            .call(&[
                "status",
                "--porcelain",
                "--untracked-files=all",
                "--",
                self.spec_rel.as_str(),
            ])
            .text()?;
        Ok(out
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect())
    }

    fn commits_since(&self, tree: &Path, base: Option<&str>) -> Result<Vec<String>, WorklistError> {
        let git = Git::new(tree);
        let Some(head) = git.head()? else {
            return Ok(Vec::new());
        };
        let range = match base {
            Some(b) if b == head => return Ok(Vec::new()),
            Some(b) => format!("{b}..{head}"),
            None => head,
        };
        Ok(git
            .call(&["rev-list", "--reverse", range.as_str()])
            .text()?
            .lines()
            .map(str::to_string)
            .collect())
    }

    /// Layers 1–4, then layer 5: its failure rejects; when 1–4 already failed, its result is
    /// named too (so a rejection for the checkbox alone says whether the work is there).
    async fn verdict(
        &self,
        c: &Claimed<'_>,
        ctx: &EngineContext,
        cancel: &CancellationToken,
    ) -> Result<Option<Vec<Failure>>, WorklistError> {
        let (task, tree, timed_out) = (c.task, c.tree, c.timed_out);
        let (tasks_after, group) = (c.tasks_after, c.group);
        let uncommitted = self.uncommitted_spec(tree)?;
        let mut failures = verify::check(&Evidence {
            task,
            words: c.words,
            uncommitted_spec: &uncommitted,
            checked_before: &self.now.checked_before,
            tasks_after,
            group,
        });
        if let Some(reason) = c.no_work {
            failures.push(Failure {
                layer: 4,
                message: reason.to_string(),
            });
        }
        if timed_out {
            failures.push(Failure {
                layer: 4,
                message: "the agent was stopped at the iteration timeout before it finished; take smaller steps".into(),
            });
            return Ok(Some(failures));
        }
        let verified = verify::run_verify_command(
            task,
            tree,
            self.verify_timeout,
            self.grace,
            &self.sandbox,
            cancel,
        )
        .await
        .map_err(WorklistError::io(tree))?;
        if verified.as_ref().is_some_and(|(_, r)| r.interrupted) {
            // Stopped by the run's stop: no verdict, neither passed nor failed.
            return Ok(None);
        }
        let ran = verified
            .as_ref()
            .map(|(cmd, r)| (cmd.as_str(), r.output.as_str()));
        let (changed, warnings) = self.evidence.check(&task.id, tree, ran);
        for w in warnings {
            ctx.events.warn(w);
        }
        failures.extend(changed);
        if let Some((cmd, r)) = verified {
            ctx.events.work(WorkEvent::VerifyCommand {
                task_id: task.id.clone(),
                command: cmd.clone(),
                passed: r.passed,
                exit_code: r.exit_code,
            });
            if !r.passed {
                failures.push(verify::verify_failure(task, &cmd, &r));
            } else if r.passed
                && let Some(first) = failures.first_mut()
            {
                first.message.push_str(&format!(
                    " (The task's Verify command `{cmd}` passes now; the attempt is rejected for the reasons above.)"
                ));
            }
        }
        Ok(Some(failures))
    }

    fn reject(&self, task: &Task, failures: &[Failure], ctx: &EngineContext) {
        ctx.events.work(WorkEvent::TaskRejected {
            task_id: task.id.clone(),
            task_index: task.index,
            attempt: self.state.task_iteration,
            layers: failures.iter().map(|f| f.layer).collect(),
            reason: verify::reason(failures),
        });
    }

    /// After the verdicts: the boxes that must not be checked go back — for one task, every
    /// box it changed when it was not accepted; for a group, the failed members' boxes
    /// and any outside the group.
    fn put_back(
        &self,
        after: &[Task],
        group: &[usize],
        failed: &[usize],
        parallel: bool,
        ctx: &EngineContext,
    ) -> Result<(), WorklistError> {
        let before = &self.now.checked_before;
        if !parallel {
            if !failed.is_empty() {
                let all: Vec<usize> = after.iter().map(|t| t.index).collect();
                self.restore_boxes(&all, before)?;
            }
            return Ok(());
        }
        let outside: Vec<usize> = after
            .iter()
            .filter(|t| !group.contains(&t.index) && t.done != before.contains(&t.index))
            .map(|t| t.index)
            .collect();
        if !outside.is_empty() {
            ctx.events.warn(format!(
                "the parallel group changed the checkboxes of other tasks ({}); they were put back",
                outside
                    .iter()
                    .filter_map(|i| after.get(*i).map(|t| t.id.clone()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let restore: Vec<usize> = outside.into_iter().chain(failed.iter().copied()).collect();
        self.restore_boxes(&restore, before)
    }

    /// A group's progress files merged and the spec files committed (`done`: the tasks
    /// accepted, `rejected`: the others).
    fn land_group(
        &self,
        group: &[String],
        done: &[String],
        rejected: &[String],
        ctx: &EngineContext,
    ) -> Result<(), WorklistError> {
        let merged = progress::merge(&self.spec_dir, group, rejected)?;
        if !merged.is_empty() {
            ctx.events
                .work(WorkEvent::ProgressMerged { task_ids: merged });
        }
        let msg = if done.is_empty() {
            "taskdaemon: progress of a parallel group".to_string()
        } else {
            format!(
                "taskdaemon: tasks {} done (parallel group)",
                done.join(", ")
            )
        };
        self.commit_spec_files(&[TASKS_FILE, progress::PROGRESS_FILE], &msg)
    }

    fn remove_trees(&mut self, ctx: &EngineContext) {
        for slot in &mut self.now.slots {
            if let Some((name, path)) = slot.tree.take() {
                remove_tree(&self.repo, &name, &path, ctx);
            }
        }
    }

    /// Check (or clear) the box of task `index`.
    fn set_box(&self, index: usize, done: bool) -> Result<(), WorklistError> {
        let want: BTreeSet<usize> = if done {
            BTreeSet::from([index])
        } else {
            BTreeSet::new()
        };
        self.restore_boxes(&[index], &want)
    }

    /// Put the checkboxes of `indices` back to how they were before the iteration.
    fn restore_boxes(
        &self,
        indices: &[usize],
        checked_before: &BTreeSet<usize>,
    ) -> Result<(), WorklistError> {
        if indices.is_empty() {
            return Ok(());
        }
        let path = self.tasks_file();
        lock::with_tasks_lock(&self.spec_dir, || {
            let mut text =
                String::from_utf8_lossy(&std::fs::read(&path).map_err(WorklistError::io(&path))?)
                    .into_owned();
            let tasks = tasks_md::parse(&text);
            let mut changed = false;
            for i in indices {
                let Some(t) = tasks.get(*i) else { continue };
                let want = checked_before.contains(i);
                if t.done != want
                    && let Some(new) = tasks_md::set_done(&text, t.line, want)
                {
                    text = new;
                    changed = true;
                }
            }
            if changed {
                write_atomic(&path, text.as_bytes()).map_err(WorklistError::io(&path))?;
            }
            Ok(())
        })
    }

    /// Cherry-pick `commits` onto HEAD of the main work tree, in order; on a conflict the
    /// cherry-pick is aborted and HEAD is where it was.
    fn cherry_pick(&self, commits: &[String]) -> Result<(), String> {
        if commits.is_empty() {
            return Ok(());
        }
        let head = self.git.head().map_err(|e| e.to_string())?;
        let mut args = vec![
            "cherry-pick".to_string(),
            "--allow-empty".into(),
            "--keep-redundant-commits".into(),
        ];
        args.extend(commits.iter().cloned());
        // A commit of the user's history: their hooks see it (README, "Git hooks").
        let hooked = self.git.clone().with_user_hooks();
        let out = hooked.call(&args).output().map_err(|e| e.to_string())?;
        if out.status.success() {
            return Ok(());
        }
        let _ = self.git.call(&["cherry-pick", "--abort"]).output();
        if let Some(h) = head {
            let _ = self.git.call(&["reset", "--keep", h.as_str()]).output();
        }
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }

    /// Commit spec files the harness wrote (only those paths), when they changed.
    fn commit_spec_files(&self, names: &[&str], msg: &str) -> Result<(), WorklistError> {
        let paths: Vec<String> = names
            .iter()
            .map(|n| {
                Path::new(&self.spec_rel)
                    .join(n)
                    .to_string_lossy()
                    .into_owned()
            })
            .filter(|p| self.repo.join(p).exists())
            .collect();
        if paths.is_empty() {
            return Ok(());
        }
        let mut add = vec!["add".to_string(), "--".into()];
        add.extend(paths.iter().cloned());
        self.git.call(&add).text()?;
        let mut diff = vec![
            "diff".to_string(),
            "--cached".into(),
            "--quiet".into(),
            "--".into(),
        ];
        diff.extend(paths.iter().cloned());
        if self.git.call(&diff).output()?.status.success() {
            return Ok(());
        }
        let mut commit = vec![
            "commit".to_string(),
            "-q".into(),
            "--no-verify".into(),
            "-m".into(),
            msg.to_string(),
            "--only".into(),
            "--".into(),
        ];
        commit.extend(paths);
        self.git.clone().with_user_hooks().call(&commit).text()?;
        Ok(())
    }

    /// The summary's last line for `outcome`.
    fn detail(&self, outcome: &Outcome, done: usize, total: usize) -> String {
        match outcome {
            Outcome::Complete { .. } => format!("ALL_TASKS_COMPLETE: {done} of {total} tasks"),
            Outcome::LimitReached {
                limit: Limit::MaxIterations,
            } => "max iterations reached (totalTasks × maxTaskIterations × 2); state kept\n  hint: run `taskdaemon implement` again to continue, or `taskdaemon cancel` to clean up".to_string(),
            Outcome::LimitReached { limit } => super::limit_detail(*limit, "implement"),
            o @ (Outcome::Blocked { .. } | Outcome::Decide { .. } | Outcome::Stuck { .. }) => {
                super::stop_detail(o, "implement").unwrap_or_default()
            }
            Outcome::Interrupted if lock::cancel_requested(&self.spec_dir) => {
                "cancelled by `taskdaemon cancel`: .ralph-state.json is deleted, .progress.md kept\n  hint: `taskdaemon implement` starts again at the first unchecked task".into()
            }
            Outcome::Interrupted => {
                "interrupted; state kept. Continue with `taskdaemon implement`".into()
            }
            other => other.detail(),
        }
    }
}

impl TasksSource {
    /// The run ends while members are parked (an earlier member of their group still
    /// waits): their commits are kept under `refs/taskdaemon/parked/`, and said, so nothing
    /// is lost; the tasks run again on the next `implement`.
    fn keep_parked(&mut self, ctx: &EngineContext) {
        for p in std::mem::take(&mut self.parked) {
            ctx.events.warn(match self.pin(&p) {
                Some(name) => format!(
                    "task {} finished while an earlier task of its group waited, and the run ended before it was judged: its commits are kept as {name}; it runs again on the next `taskdaemon implement`",
                    p.task.id
                ),
                None => format!(
                    "task {} finished while an earlier task of its group waited, and the run ended before it was judged; its work is in {}",
                    p.task.id,
                    p.tree.1.display()
                ),
            });
        }
    }

    /// Keep a parked member's commits reachable (`refs/taskdaemon/parked/<worktree>`) while
    /// it waits, so that not even a kill of the harness loses them; its name.
    fn pin(&self, p: &Parked) -> Option<String> {
        let head = Git::new(&p.tree.1).head().ok().flatten()?;
        let name = format!("refs/taskdaemon/parked/{}", p.tree.0);
        self.git
            .call(&["update-ref", name.as_str(), head.as_str()])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|_| name)
    }

    /// A parked member was judged: its commits landed or were rejected; the ref goes.
    fn unpin(&self, p: &Parked) {
        let name = format!("refs/taskdaemon/parked/{}", p.tree.0);
        let _ = self.git.call(&["update-ref", "-d", name.as_str()]).output();
    }
}

/// Remove a `[P]` member's worktree (a failure is only warned about).
fn remove_tree(repo: &Path, name: &str, path: &Path, ctx: &EngineContext) {
    let removed = Git::new(repo)
        .common_dir()
        .map_err(WorklistError::from)
        .map(|d| d.join("taskdaemon").join("worklist-worktrees"))
        .and_then(|base| Ok(Worktrees::open(repo, &base)?))
        .and_then(|wts| Ok(wts.remove(name, true, false)?));
    if let Err(e) = removed {
        ctx.events
            .warn(format!("could not remove worktree {}: {e}", path.display()));
    }
}

/// A task id as part of a file name.
fn file_part(id: &str) -> String {
    id.replace(
        |c: char| !c.is_ascii_alphanumeric() && c != '.' && c != '-',
        "_",
    )
}

/// Where the work lists' task worktrees live: `<git-common-dir>/taskdaemon/worklist-worktrees/`.
fn worklist_worktrees(git: &Git) -> Result<PathBuf, WorklistError> {
    Ok(git
        .common_dir()?
        .join("taskdaemon")
        .join("worklist-worktrees"))
}

/// A task worktree's name: `<spec>-task-<id>`, in the characters worktree names allow.
fn tree_name(spec: &str, id: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '-' | '.') {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let name = format!("{}-task-{}", clean(spec), clean(id));
    if name.starts_with(['.', '-']) {
        format!("_{name}")
    } else {
        name
    }
}

/// The loop type of a task's agent: `implement` (executor) or `qa` ([VERIFY]).
fn role(task: &Task) -> &'static str {
    if task.verify_task { "qa" } else { "implement" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_stop_at_verify_and_sequential_tasks() {
        let t = tasks_md::parse(
            "- [ ] 1.1 [P] a\n- [ ] 1.2 [P] b\n- [ ] 1.3 [P] [VERIFY] c\n- [ ] 1.4 [P] d\n- [ ] 1.5 e\n- [x] 1.6 [P] f\n- [ ] 1.7 [P] g\n- [ ] 1.8 [P] h\n",
        );
        assert_eq!(group_at(&t, 0), [0, 1]);
        assert_eq!(group_at(&t, 1), [1]);
        assert_eq!(group_at(&t, 2), [2]);
        assert_eq!(group_at(&t, 3), [3]);
        assert_eq!(group_at(&t, 4), [4]);
        assert_eq!(group_at(&t, 6), [6, 7]);
    }
}
