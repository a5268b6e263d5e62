//! The coordinator of `taskdaemon implement` (spec 5 Component 3): read the state, find the
//! next unchecked task (or parallel group), hand it to fresh agents, verify every claim,
//! advance. The harness does the orchestration; the agents only do tasks.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::agent::{AgentJob, AgentRun, AgentSetup, prompt_path, run_agent};
use super::events::{WorklistEvent, WorklistSink};
use super::evidence::{TaskEvidence, VerifyRun};
use super::guards::{Guards, Limits, Row, limit_detail, stop_detail};
use super::prompt::{ParallelPaths, TaskPrompt, task_prompt};
use super::state::{ImplementState, ParallelGroup, TaskStatus};
use super::tasks_md::{self, Task};
use super::verify::{self, Evidence, Failure};
use super::{WorklistError, lock, progress};
use crate::engine::Outcome;
use crate::engine::decide::{Claim, IterationOutcome, ValidationResult};
use crate::fsutil::write_atomic;
use crate::git::Git;
use crate::git::worktree::Worktrees;
use crate::guards::Limit;

pub const TASKS_FILE: &str = "tasks.md";
const LOGS_DIR: &str = ".ralph-logs";
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

#[derive(Debug, Clone)]
pub struct ImplementConfig {
    /// The spec directory (absolute).
    pub spec_dir: PathBuf,
    /// The top of its git work tree (absolute).
    pub repo: PathBuf,
    pub setup: AgentSetup,
    pub max_task_iterations: u32,
    /// Time limit of a task's Verify command.
    pub verify_timeout: Option<Duration>,
    /// `--max-stuck`, `--max-cost`, `--max-runtime`.
    pub limits: Limits,
    /// `--allow-test-changes`: changes of a task's evidence are warnings, not rejections.
    pub allow_test_changes: bool,
}

#[derive(Debug, Clone)]
pub struct ImplementResult {
    pub outcome: Outcome,
    pub done: usize,
    pub total: usize,
    /// The next unchecked task when the loop ended before all were done.
    pub stopped_at: Option<String>,
}

/// One task's verdict.
struct Verdict {
    index: usize,
    result: Result<Vec<String>, Vec<Failure>>,
}

enum Ran {
    /// The verdicts, and the loop's outcome when an agent's BLOCKED or DECIDE, or the
    /// stuck rule, ends it.
    Done(Vec<Verdict>, Option<Outcome>),
    Interrupted,
}

struct Coord<'a> {
    cfg: &'a ImplementConfig,
    git: Git,
    spec_rel: String,
    spec_name: String,
    events: &'a WorklistSink,
    cancel: &'a CancellationToken,
    guards: std::sync::Mutex<Guards>,
    /// Each task's evidence baseline (layer 6).
    evidence: TaskEvidence,
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

/// Run the spec's tasks until all are checked, a limit, a task that keeps failing, or
/// cancellation. The caller holds the spec's run lock.
pub async fn implement(
    cfg: &ImplementConfig,
    events: &WorklistSink,
    cancel: &CancellationToken,
) -> Result<ImplementResult, WorklistError> {
    preflight(&cfg.spec_dir, &cfg.repo)?;
    let tasks_now = read_tasks_of(&cfg.spec_dir)?;
    let (mut st, resumed) = load_state(cfg, events, tasks_now.len())?;
    let guards = Guards::start(
        &cfg.repo,
        crate::workspace::StoppedLoop::Implement,
        cfg.limits,
        st.max_iterations(),
    )?;
    if guards.cost_limit_blind(cfg.setup.format) {
        events.warn("--max-cost is set but this agent's plain-text output reports no cost; the limit cannot trigger");
    }
    let spec_name = cfg
        .spec_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let in_progress = resumed
        .then(|| tasks_now.get(st.task_index).map(|t| t.id.clone()))
        .flatten();
    let evidence = TaskEvidence::new(
        &cfg.repo,
        &format!("implement-{spec_name}"),
        cfg.allow_test_changes,
        in_progress,
    )?;
    if cfg.allow_test_changes {
        events.warn("--allow-test-changes: the evidence protection is OFF for this run: changed Verify scripts, deleted or skipped tests and fewer tests run are only warned about");
    }
    let c = Coord::new(cfg, events, cancel, guards, evidence);
    Git::new(&cfg.spec_dir).ensure_excluded(IGNORED)?;
    Git::new(&cfg.repo).ensure_excluded(crate::workspace::IGNORED)?;
    let mut tasks = tasks_now;

    let first_open = tasks.iter().position(|t| !t.done);
    events.emit(WorklistEvent::ImplementStarted {
        spec_dir: cfg.spec_dir.display().to_string(),
        agent: cfg.setup.agent.label(),
        total_tasks: tasks.len(),
        done_tasks: tasks_md::checked(&tasks),
        task_index: first_open.unwrap_or(tasks.len()),
        max_iterations: st.max_iterations(),
        max_task_iterations: st.max_task_iterations,
        resumed,
        sandbox: cfg.setup.sandbox.label(),
    });
    if tasks.is_empty() {
        events.warn(format!(
            "{} has no tasks (no `- [ ]` items): nothing to do",
            cfg.spec_dir.join(TASKS_FILE).display()
        ));
        ImplementState::remove(&cfg.spec_dir)?;
        return Ok(c.finish(Outcome::Complete { verified: true }, &tasks));
    }
    if first_open.is_some() && progress::ensure(&cfg.spec_dir)? {
        c.commit_spec_files(&[progress::PROGRESS_FILE], "taskdaemon: start .progress.md")?;
    }

    loop {
        tasks = c.read_tasks()?;
        if tasks.len() != st.total_tasks {
            events.warn(format!(
                "tasks.md now has {} tasks (was {})",
                tasks.len(),
                st.total_tasks
            ));
            st.total_tasks = tasks.len();
        }
        let Some(next) = tasks.iter().position(|t| !t.done) else {
            // Completion: every box checked, the count matches.
            ImplementState::remove(&cfg.spec_dir)?;
            return Ok(c.finish(Outcome::Complete { verified: true }, &tasks));
        };
        if c.cancel.is_cancelled() {
            st.save(&cfg.spec_dir)?;
            return Ok(c.finish(Outcome::Interrupted, &tasks));
        }
        let limit = c.guards().limit(st.global_iteration);
        if let Some(o) = limit {
            st.save(&cfg.spec_dir)?;
            return Ok(c.finish(o, &tasks));
        }
        if st.task_index != next {
            st.task_index = next;
            st.task_iteration = 1;
        }
        let group = begin_group(&mut st, &tasks, next);
        st.global_iteration += 1;
        st.save(&cfg.spec_dir)?;

        let ran = if group.len() > 1 {
            c.run_group(&tasks, &group, &st).await?
        } else {
            c.run_one(&tasks, next, &st).await?
        };
        let (verdicts, stop) = match ran {
            Ran::Interrupted => {
                st.save(&cfg.spec_dir)?;
                return Ok(c.finish(Outcome::Interrupted, &c.read_tasks()?));
            }
            Ran::Done(v, stop) => (v, stop),
        };
        let first_failed = record_verdicts(&mut st, &verdicts);
        st.parallel_group = None;
        if let Some(o) = stop {
            // BLOCKED, DECIDE or stuck: the attempt is not counted; a rerun resumes here.
            st.save(&cfg.spec_dir)?;
            return Ok(c.finish(o, &c.read_tasks()?));
        }
        if let Some((index, reason)) = first_failed {
            st.task_index = index;
            st.task_iteration += 1;
            if st.task_iteration > st.max_task_iterations {
                st.task_iteration = st.max_task_iterations;
                st.save(&cfg.spec_dir)?;
                let id = tasks.get(index).map(|t| t.id.clone()).unwrap_or_default();
                return Ok(c.finish(
                    Outcome::Failed {
                        reason: format!(
                            "task {id} was rejected {} times (--max-task-iterations); last reason:\n{reason}\n  hint: fix the task or tasks.md, then run `taskdaemon implement` again (it resumes at task {id}), or `taskdaemon cancel` to drop the state",
                            st.max_task_iterations
                        ),
                    },
                    &c.read_tasks()?,
                ));
            }
        }
        st.save(&cfg.spec_dir)?;
    }
}

impl<'a> Coord<'a> {
    fn new(
        cfg: &'a ImplementConfig,
        events: &'a WorklistSink,
        cancel: &'a CancellationToken,
        guards: Guards,
        evidence: TaskEvidence,
    ) -> Coord<'a> {
        let spec_rel = cfg
            .spec_dir
            .strip_prefix(&cfg.repo)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let spec_rel = if spec_rel.is_empty() {
            ".".into()
        } else {
            spec_rel
        };
        Coord {
            cfg,
            git: Git::new(&cfg.repo),
            spec_name: cfg
                .spec_dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "spec".into()),
            spec_rel,
            events,
            cancel,
            guards: std::sync::Mutex::new(guards),
            evidence,
        }
    }

    /// How a task's Verify command runs for its baseline.
    fn verify_run(&self) -> VerifyRun<'_> {
        VerifyRun {
            timeout: self.cfg.verify_timeout,
            grace: self.cfg.setup.grace,
            sandbox: &self.cfg.setup.sandbox,
            cancel: self.cancel,
        }
    }

    /// The engine's guards (never held across an await).
    fn guards(&self) -> std::sync::MutexGuard<'_, Guards> {
        self.guards.lock().unwrap_or_else(|e| e.into_inner())
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
    cfg: &ImplementConfig,
    events: &WorklistSink,
    task_count: usize,
) -> Result<(ImplementState, bool), WorklistError> {
    let (mut st, resumed) = match ImplementState::load(&cfg.spec_dir) {
        Ok(Some(s)) => (s, true),
        Ok(None) => (
            ImplementState::new(&cfg.spec_dir, task_count, cfg.max_task_iterations),
            false,
        ),
        Err(e @ WorklistError::CorruptState { .. }) => {
            events.warn(format!(
                "{e}; state reset to defaults, resuming from the first unchecked task"
            ));
            (
                ImplementState::new(&cfg.spec_dir, task_count, cfg.max_task_iterations),
                false,
            )
        }
        Err(e) => return Err(e),
    };
    st.total_tasks = task_count;
    st.max_task_iterations = cfg.max_task_iterations;
    st.base_path = cfg.spec_dir.display().to_string();
    if st.task_iteration == 0 || st.task_iteration > st.max_task_iterations {
        st.task_iteration = 1;
    }
    if st.global_iteration >= st.max_iterations() {
        events.warn(format!(
            "the saved state used all {} iterations; counting starts again",
            st.max_iterations()
        ));
        st.global_iteration = 0;
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

/// Record each task's verdict; the first failure (task index and reason), if any.
fn record_verdicts(st: &mut ImplementState, verdicts: &[Verdict]) -> Option<(usize, String)> {
    let mut first_failed: Option<(usize, String)> = None;
    for v in verdicts {
        match &v.result {
            Ok(_) => st.record(v.index, TaskStatus::Success, None),
            Err(f) => {
                let reason = verify::reason(f);
                st.record(v.index, TaskStatus::Failed, Some(reason.clone()));
                if first_failed.is_none() {
                    first_failed = Some((v.index, reason));
                }
            }
        }
    }
    first_failed
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

impl Coord<'_> {
    fn tasks_file(&self) -> PathBuf {
        self.cfg.spec_dir.join(TASKS_FILE)
    }

    fn read_tasks(&self) -> Result<Vec<Task>, WorklistError> {
        read_tasks_of(&self.cfg.spec_dir)
    }

    fn finish(&self, outcome: Outcome, tasks: &[Task]) -> ImplementResult {
        let done = tasks_md::checked(tasks);
        let stopped_at = tasks.iter().find(|t| !t.done).map(|t| t.id.clone());
        let detail = match &outcome {
            Outcome::Complete { .. } => {
                format!("ALL_TASKS_COMPLETE: {done} of {} tasks", tasks.len())
            }
            Outcome::LimitReached {
                limit: Limit::MaxIterations,
            } => (
                "max iterations reached (totalTasks × maxTaskIterations × 2); state kept\n  hint: run `taskdaemon implement` again to continue, or `taskdaemon cancel` to clean up"
            ).to_string(),
            Outcome::LimitReached { limit } => limit_detail(*limit, "implement"),
            o @ (Outcome::Blocked { .. } | Outcome::Decide { .. } | Outcome::Stuck { .. }) => {
                stop_detail(o, "implement").unwrap_or_default()
            }
            Outcome::Interrupted if lock::cancel_requested(&self.cfg.spec_dir) => {
                "cancelled by `taskdaemon cancel`: .ralph-state.json is deleted, .progress.md kept\n  hint: `taskdaemon implement` starts again at the first unchecked task".into()
            }
            Outcome::Interrupted => {
                "interrupted; state kept. Continue with `taskdaemon implement`".into()
            }
            other => other.detail(),
        };
        let summary = self.guards().summary(&outcome, detail.clone());
        // The summary block first: the loop's own event stays the last one.
        self.events.emit(WorklistEvent::RunFinished { summary });
        self.events.emit(WorklistEvent::ImplementFinished {
            outcome: outcome.label().to_string(),
            exit_code: outcome.exit_code(),
            detail,
            done_tasks: done,
            total_tasks: tasks.len(),
            stopped_at: if matches!(outcome, Outcome::Complete { .. }) {
                None
            } else {
                stopped_at.clone()
            },
        });
        ImplementResult {
            outcome,
            done,
            total: tasks.len(),
            stopped_at,
        }
    }

    fn log_base(&self, st: &ImplementState, task: &Task) -> PathBuf {
        self.cfg.spec_dir.join(LOGS_DIR).join(format!(
            "iteration-{:03}-task-{}-attempt-{}",
            st.global_iteration, task.id, st.task_iteration
        ))
    }

    fn env(
        &self,
        task: &Task,
        st: &ImplementState,
        progress_file: &Path,
    ) -> Vec<(OsString, OsString)> {
        let mut env: Vec<(OsString, OsString)> = vec![
            ("TASKDAEMON_TASK_ID".into(), task.id.clone().into()),
            (
                "TASKDAEMON_TASK_INDEX".into(),
                task.index.to_string().into(),
            ),
            (
                "TASKDAEMON_TASK_ITERATION".into(),
                st.task_iteration.to_string().into(),
            ),
            (
                "TASKDAEMON_ITERATION".into(),
                st.global_iteration.to_string().into(),
            ),
            (
                "TASKDAEMON_SPEC_DIR".into(),
                self.cfg.spec_dir.clone().into(),
            ),
            ("TASKDAEMON_TASKS_FILE".into(), self.tasks_file().into()),
            (
                "TASKDAEMON_TASKS_LOCK".into(),
                lock::tasks_lock_path(&self.cfg.spec_dir).into(),
            ),
            ("TASKDAEMON_PROGRESS_FILE".into(), progress_file.into()),
        ];
        if task.verify_task {
            env.push(("TASKDAEMON_TASK_ROLE".into(), "qa".into()));
        } else {
            env.push(("TASKDAEMON_TASK_ROLE".into(), "executor".into()));
        }
        env
    }

    fn job(
        &self,
        task: &Task,
        st: &ImplementState,
        cwd: &Path,
        parallel: bool,
    ) -> Result<AgentJob, WorklistError> {
        let progress_text = progress::read_for_prompt(&self.cfg.spec_dir, PROGRESS_BUDGET);
        let tasks_file = self.tasks_file();
        let lock = lock::tasks_lock_path(&self.cfg.spec_dir);
        let progress_file = if parallel {
            progress::task_file(&self.cfg.spec_dir, &task.id)
        } else {
            progress::path(&self.cfg.spec_dir)
        };
        let mut prompt = task_prompt(&TaskPrompt {
            task,
            spec_name: &self.spec_name,
            spec_rel: &self.spec_rel,
            spec_dir: &self.cfg.spec_dir,
            attempt: st.task_iteration,
            max_attempts: st.max_task_iterations,
            previous_error: if st.task_iteration > 1 {
                st.last_error(task.index)
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
            prompt.push_str(&format!("\n\n{rules}\n"));
        }
        let mut g = self.guards();
        let contract = g.contract(role(task));
        Ok(AgentJob {
            setup: self.cfg.setup.clone(),
            label: task.id.clone(),
            cwd: cwd.to_path_buf(),
            prompt: g.prompt(&contract, &prompt)?,
            env: self.env(task, st, &progress_file),
            log: self.log_base(st, task),
            contract,
        })
    }

    fn started(&self, task: &Task, st: &ImplementState, job: &AgentJob, parallel: bool) {
        self.events.emit(WorklistEvent::TaskStarted {
            iteration: st.global_iteration,
            task_id: task.id.clone(),
            task_index: task.index,
            title: task.title.clone(),
            role: if task.verify_task { "qa" } else { "executor" }.into(),
            attempt: st.task_iteration,
            max_attempts: st.max_task_iterations,
            parallel,
            prompt_file: prompt_path(&job.log).display().to_string(),
        });
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
        task: &Task,
        run: &AgentRun,
        tree: &Path,
        checked_before: &BTreeSet<usize>,
        tasks_after: &[Task],
        group: &[usize],
    ) -> Result<Vec<Failure>, WorklistError> {
        let uncommitted = self.uncommitted_spec(tree)?;
        let mut failures = verify::check(&Evidence {
            task,
            words: &run.words,
            uncommitted_spec: &uncommitted,
            checked_before,
            tasks_after,
            group,
        });
        if run.timed_out {
            failures.push(Failure {
                layer: 4,
                message: "the agent was stopped at the iteration timeout before it finished; take smaller steps".into(),
            });
        }
        if !run.timed_out {
            let grace = self.cfg.setup.grace;
            let sandbox = &self.cfg.setup.sandbox;
            let verified = verify::run_verify_command(
                task,
                tree,
                self.cfg.verify_timeout,
                grace,
                sandbox,
                self.cancel,
            )
            .await
            .map_err(WorklistError::io(tree))?;
            let ran = verified
                .as_ref()
                .map(|(cmd, r)| (cmd.as_str(), r.output.as_str()));
            let (changed, warnings) = self.evidence.check(&task.id, tree, ran);
            for w in warnings {
                self.events.warn(w);
            }
            failures.extend(changed);
            if let Some((cmd, r)) = verified {
                self.events.emit(WorklistEvent::VerifyCommand {
                    task_id: task.id.clone(),
                    command: cmd.clone(),
                    passed: r.passed,
                    exit_code: r.exit_code,
                });
                if !r.passed && !r.interrupted {
                    failures.push(verify::verify_failure(task, &cmd, &r));
                } else if r.passed
                    && let Some(first) = failures.first_mut()
                {
                    first.message.push_str(&format!(
                        " (The task's Verify command `{cmd}` passes now; the attempt is rejected for the reasons above.)"
                    ));
                }
            }
        }
        Ok(failures)
    }

    fn reject(&self, task: &Task, st: &ImplementState, failures: &[Failure]) {
        self.events.emit(WorklistEvent::TaskRejected {
            task_id: task.id.clone(),
            task_index: task.index,
            attempt: st.task_iteration,
            layers: failures.iter().map(|f| f.layer).collect(),
            reason: verify::reason(failures),
        });
    }

    /// Put the checkboxes of `indices` back to how they were before the iteration.
    fn restore_boxes(
        &self,
        indices: &[usize],
        checked_before: &BTreeSet<usize>,
    ) -> Result<(), WorklistError> {
        let path = self.tasks_file();
        lock::with_tasks_lock(&self.cfg.spec_dir, || {
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

    async fn run_one(
        &self,
        tasks: &[Task],
        index: usize,
        st: &ImplementState,
    ) -> Result<Ran, WorklistError> {
        let task = &tasks[index];
        let checked_before: BTreeSet<usize> =
            tasks.iter().filter(|t| t.done).map(|t| t.index).collect();
        let head_before = self.git.head()?;
        if let Some(note) = self.evidence.before(task, &self.verify_run()).await? {
            self.events.warn(note);
        }
        let job = self.job(task, st, &self.cfg.repo, false)?;
        self.started(task, st, &job, false);
        let started = Started::of(&job);
        let run = run_agent(job, self.events.clone(), self.cancel.clone()).await?;
        if run.interrupted || self.cancel.is_cancelled() {
            self.record(task, &started, &run, IterationOutcome::Interrupted, None)?;
            return Ok(Ran::Interrupted);
        }
        let after = self.read_tasks()?;
        if let Some(o) = self.after_agent(&run, st)? {
            self.record(task, &started, &run, signal_label(&o), None)?;
            let all: Vec<usize> = after.iter().map(|t| t.index).collect();
            self.restore_boxes(&all, &checked_before)?;
            return Ok(Ran::Done(Vec::new(), Some(o)));
        }
        let failures = self
            .verdict(task, &run, &self.cfg.repo, &checked_before, &after, &[])
            .await?;
        if self.cancel.is_cancelled() {
            return Ok(Ran::Interrupted);
        }
        let head_after = self.git.head()?;
        let claim = claim_of(&failures);
        let stuck = self.guards().after_attempt(
            claim,
            head_before.as_deref(),
            head_after.as_deref(),
            run.timed_out,
        );
        let commit = (head_after != head_before)
            .then(|| head_after.clone())
            .flatten();
        self.record(
            task,
            &started,
            &run,
            attempt_label(claim, &stuck),
            Some((claim, commit)),
        )?;
        let result = if failures.is_empty() {
            self.evidence.done(task);
            let commits = self.commits_since(&self.cfg.repo, head_before.as_deref())?;
            self.events.emit(WorklistEvent::TaskCompleted {
                task_id: task.id.clone(),
                task_index: index,
                commits: commits.clone(),
            });
            Ok(commits)
        } else {
            self.reject(task, st, &failures);
            let all: Vec<usize> = after.iter().map(|t| t.index).collect();
            self.restore_boxes(&all, &checked_before)?;
            Err(failures)
        };
        Ok(Ran::Done(vec![Verdict { index, result }], stuck))
    }

    async fn run_group(
        &self,
        tasks: &[Task],
        group: &[usize],
        st: &ImplementState,
    ) -> Result<Ran, WorklistError> {
        let Some(base) = self.git.head()? else {
            // No commit to branch worktrees from: one at a time.
            return self.run_one(tasks, group[0], st).await;
        };
        let checked_before: BTreeSet<usize> =
            tasks.iter().filter(|t| t.done).map(|t| t.index).collect();
        for &i in group {
            if let Some(note) = self.evidence.before(&tasks[i], &self.verify_run()).await? {
                self.events.warn(note);
            }
        }
        // One worktree manager: the loops' (`git::worktree`), with the work lists' own
        // base inside the git directory.
        let wts = Worktrees::open(&self.cfg.repo, &worklist_worktrees(&self.git)?)?;
        let mut trees: Vec<(usize, PathBuf)> = Vec::new();
        let mut names: Vec<String> = Vec::new();
        for &i in group {
            let name = tree_name(&self.spec_name, &tasks[i].id);
            trees.push((i, wts.detached(&name, &base)?));
            names.push(name);
        }
        self.events.emit(WorklistEvent::GroupStarted {
            iteration: st.global_iteration,
            task_ids: group.iter().map(|i| tasks[*i].id.clone()).collect(),
        });
        let mut set = JoinSet::new();
        let head_before = self.git.head()?;
        for (i, tree) in &trees {
            let task = &tasks[*i];
            let job = self.job(task, st, tree, true)?;
            self.started(task, st, &job, true);
            let started = Started::of(&job);
            let (events, cancel, i) = (self.events.clone(), self.cancel.clone(), *i);
            set.spawn(async move { (i, started, run_agent(job, events, cancel).await) });
        }
        let mut runs: Vec<(usize, AgentRun)> = Vec::new();
        let mut starts: Vec<(usize, Started, AgentRun)> = Vec::new();
        let mut error = None;
        while let Some(joined) = set.join_next().await {
            match joined {
                Ok((i, started, Ok(run))) => {
                    starts.push((i, started, run.clone()));
                    runs.push((i, run));
                }
                Ok((_, _, Err(e))) => error = Some(e),
                Err(e) => {
                    error = Some(WorklistError::Io {
                        path: self.cfg.repo.clone(),
                        message: format!("an agent of the parallel group failed: {e}"),
                    })
                }
            }
        }
        let outcome = self
            .finish_group(
                tasks,
                group,
                st,
                &base,
                &trees,
                runs,
                &checked_before,
                error,
            )
            .await;
        let outcome = match outcome {
            Ok(Ran::Done(v, stop)) => self
                .group_guards(tasks, &v, &starts, head_before.as_deref(), stop)
                .map(|stop| Ran::Done(v, stop)),
            other => other,
        };
        for name in &names {
            if let Err(e) = wts.remove(name, true, false) {
                self.events.warn(format!(
                    "could not remove worktree {}: {e}",
                    wts.path_for(name).display()
                ));
            }
        }
        outcome
    }

    #[allow(clippy::too_many_arguments)]
    async fn finish_group(
        &self,
        tasks: &[Task],
        group: &[usize],
        st: &ImplementState,
        base: &str,
        trees: &[(usize, PathBuf)],
        mut runs: Vec<(usize, AgentRun)>,
        checked_before: &BTreeSet<usize>,
        error: Option<WorklistError>,
    ) -> Result<Ran, WorklistError> {
        if let Some(e) = error {
            return Err(e);
        }
        if self.cancel.is_cancelled() || runs.iter().any(|(_, r)| r.interrupted) {
            return Ok(Ran::Interrupted);
        }
        runs.sort_by_key(|(i, _)| *i);
        let after = self.read_tasks()?;
        let mut verdicts = Vec::new();
        let mut failed = Vec::new();
        let mut stop = None;
        for (i, run) in &runs {
            let task = &tasks[*i];
            if let Some(o) = self.after_agent(run, st)? {
                // BLOCKED or DECIDE: this task's attempt does not count; its box goes back.
                failed.push(*i);
                stop.get_or_insert(o);
                continue;
            }
            let Some((_, tree)) = trees.iter().find(|(t, _)| t == i) else {
                continue;
            };
            let others: Vec<usize> = group.iter().copied().filter(|g| g != i).collect();
            let mut failures = self
                .verdict(task, run, tree, checked_before, &after, &others)
                .await?;
            let mut commits = Vec::new();
            if failures.is_empty() {
                commits = self.commits_since(tree, Some(base))?;
                if let Err(msg) = self.cherry_pick(&commits) {
                    failures.push(Failure {
                        layer: 2,
                        message: format!(
                            "the commits of task {} do not apply on top of the tasks before it: {msg}. Touch only the task's own files",
                            task.id
                        ),
                    });
                }
            }
            let result = if failures.is_empty() {
                self.evidence.done(task);
                self.events.emit(WorklistEvent::TaskCompleted {
                    task_id: task.id.clone(),
                    task_index: *i,
                    commits: commits.clone(),
                });
                Ok(commits)
            } else {
                self.reject(task, st, &failures);
                failed.push(*i);
                Err(failures)
            };
            verdicts.push(Verdict { index: *i, result });
        }
        // Boxes outside the group go back; so do the failed tasks' boxes.
        let outside: Vec<usize> = after
            .iter()
            .filter(|t| !group.contains(&t.index) && t.done != checked_before.contains(&t.index))
            .map(|t| t.index)
            .collect();
        if !outside.is_empty() {
            self.events.warn(format!(
                "the parallel group changed the checkboxes of other tasks ({}); they were put back",
                outside
                    .iter()
                    .filter_map(|i| after.get(*i).map(|t| t.id.clone()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let restore: Vec<usize> = outside.into_iter().chain(failed.iter().copied()).collect();
        self.restore_boxes(&restore, checked_before)?;
        let ids: Vec<String> = group.iter().map(|i| tasks[*i].id.clone()).collect();
        let rejected: Vec<String> = failed.iter().map(|i| tasks[*i].id.clone()).collect();
        let merged = progress::merge(&self.cfg.spec_dir, &ids, &rejected)?;
        if !merged.is_empty() {
            self.events
                .emit(WorklistEvent::ProgressMerged { task_ids: merged });
        }
        let done: Vec<String> = verdicts
            .iter()
            .filter(|v| v.result.is_ok())
            .map(|v| tasks[v.index].id.clone())
            .collect();
        let msg = if done.is_empty() {
            "taskdaemon: progress of a parallel group".to_string()
        } else {
            format!(
                "taskdaemon: tasks {} done (parallel group)",
                done.join(", ")
            )
        };
        self.commit_spec_files(&[TASKS_FILE, progress::PROGRESS_FILE], &msg)?;
        Ok(Ran::Done(verdicts, stop))
    }

    /// After an agent: its cost and tokens; its BLOCKED or DECIDE, written for a person.
    fn after_agent(
        &self,
        run: &AgentRun,
        st: &ImplementState,
    ) -> Result<Option<Outcome>, WorklistError> {
        let mut g = self.guards();
        g.account(run)?;
        g.signal(run, st.global_iteration)
    }

    /// The invocation's row in summary.csv; `judged`: the claim and the commit it made.
    fn record(
        &self,
        task: &Task,
        started: &Started,
        run: &AgentRun,
        outcome: IterationOutcome,
        judged: Option<(Claim, Option<String>)>,
    ) -> Result<(), WorklistError> {
        let (validation, commit) = match judged {
            Some((Claim::Accepted, c)) => (ValidationResult::Passed, c),
            Some((Claim::Rejected | Claim::Tampered, c)) => (ValidationResult::Failed, c),
            None => (ValidationResult::Skipped, None),
        };
        self.guards().record(&Row {
            invocation: started.invocation,
            mode: role(task),
            started_at: started.at.clone(),
            duration: run.duration,
            run,
            outcome,
            validation,
            commit,
        })
    }

    /// A parallel group's rows and its stuck rule: it made progress when any task was
    /// accepted or HEAD moved.
    fn group_guards(
        &self,
        tasks: &[Task],
        verdicts: &[Verdict],
        starts: &[(usize, Started, AgentRun)],
        head_before: Option<&str>,
        stop: Option<Outcome>,
    ) -> Result<Option<Outcome>, WorklistError> {
        let head_after = self.git.head()?;
        let claim = if verdicts.iter().any(|v| v.result.is_ok()) {
            Claim::Accepted
        } else if verdicts.iter().all(|v| {
            v.result
                .as_ref()
                .is_err_and(|f| claim_of(f) == Claim::Tampered)
        }) && !verdicts.is_empty()
        {
            Claim::Tampered
        } else {
            Claim::Rejected
        };
        let stuck = match &stop {
            Some(_) => None,
            None => self
                .guards()
                .after_attempt(claim, head_before, head_after.as_deref(), false),
        };
        for (i, started, run) in starts {
            let v = verdicts.iter().find(|v| v.index == *i);
            let (outcome, judged) = match v.map(|v| &v.result) {
                Some(Ok(c)) => (
                    attempt_label(Claim::Accepted, &stuck),
                    Some((Claim::Accepted, c.last().cloned())),
                ),
                Some(Err(_)) => (
                    attempt_label(Claim::Rejected, &stuck),
                    Some((Claim::Rejected, None)),
                ),
                None => (
                    stop.as_ref()
                        .map(signal_label)
                        .unwrap_or(IterationOutcome::Continue),
                    None,
                ),
            };
            self.record(&tasks[*i], started, run, outcome, judged)?;
        }
        Ok(stop.or(stuck))
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
        let out = self.git.call(&args).output().map_err(|e| e.to_string())?;
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
            .filter(|p| self.cfg.repo.join(p).exists())
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
        self.git.call(&commit).text()?;
        Ok(())
    }
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

/// When and as which invocation an agent started.
#[derive(Debug, Clone)]
struct Started {
    invocation: u32,
    at: String,
}

impl Started {
    fn of(job: &AgentJob) -> Started {
        Started {
            invocation: job.contract.iteration,
            at: crate::clock::now_rfc3339(),
        }
    }
}

fn signal_label(o: &Outcome) -> IterationOutcome {
    match o {
        Outcome::Blocked { .. } => IterationOutcome::Blocked,
        Outcome::Decide { .. } => IterationOutcome::Decide,
        _ => IterationOutcome::Failed,
    }
}

fn attempt_label(claim: Claim, stuck: &Option<Outcome>) -> IterationOutcome {
    match (claim, stuck) {
        (_, Some(_)) => IterationOutcome::Stuck,
        (Claim::Accepted, None) => IterationOutcome::Continue,
        (Claim::Rejected | Claim::Tampered, None) => IterationOutcome::Rejected,
    }
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
