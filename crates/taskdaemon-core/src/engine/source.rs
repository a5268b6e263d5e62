//! What a work source is: the part of a loop that differs by kind. The engine's one loop
//! (`engine::run_loop`) asks the source, for each iteration, which unit of work comes next
//! and with what prompts (one agent, or several for a `[P]` group), and how the agents'
//! claims are judged (the validation and completion gates, the five verification layers,
//! the story rules). Everything else is the engine's, the same for every kind: the agent
//! step, the failure classes and their waits, quiet and no-progress warnings, BLOCKED and
//! DECIDE, the stuck and stall guards, limits, logs, summary rows, events, state and resume.
//!
//! [`SourceSpec`] is what a run's saved config says about its source; the sources
//! themselves are the ralph loop ([`super::ralph::Ralph`]) and the work lists
//! (`worklist::TasksSource`, `worklist::StoriesSource`).

use std::ffi::OsString;
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

pub use super::decide::WorkVerdict;
use super::decide::{Claim, Decision, GateVerdict, ValidationEvidence};
use super::{AgentRun, EngineContext, EngineError, Outcome, RunState};
use crate::signals::Signal;
use crate::telemetry::{IterationLog, WorkTally};
use crate::workspace::StoppedLoop;

/// The source of a run's work, as saved with the run (`run.json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum SourceSpec {
    /// One task, one prompt template, a validation command (`run`, `task`, the daemon's
    /// plan/spec/phase runs).
    #[default]
    Ralph,
    /// A spec directory's `tasks.md` (spec 5), task by task, `[P]` groups in worktrees.
    Tasks {
        spec_dir: PathBuf,
        max_task_iterations: u32,
        verify_timeout_ms: Option<u64>,
    },
    /// A user-story file (`prd.json`, `tasks.json`) with its review cycle.
    Stories {
        file: PathBuf,
        review: bool,
        max_reviews: u64,
    },
}

impl SourceSpec {
    pub fn is_ralph(&self) -> bool {
        matches!(self, SourceSpec::Ralph)
    }

    /// The same list (spec directory or stories file), whatever its other settings: a run
    /// of it goes on from its saved state.
    pub fn same_list(&self, other: &SourceSpec) -> bool {
        match (self, other) {
            (SourceSpec::Ralph, SourceSpec::Ralph) => true,
            (SourceSpec::Tasks { spec_dir: a, .. }, SourceSpec::Tasks { spec_dir: b, .. }) => {
                a == b
            }
            (SourceSpec::Stories { file: a, .. }, SourceSpec::Stories { file: b, .. }) => a == b,
            _ => false,
        }
    }

    /// Whose BLOCKED / DECIDE a person answers, and which command continues it.
    pub fn kind(&self) -> StoppedLoop {
        match self {
            SourceSpec::Ralph => StoppedLoop::Run,
            SourceSpec::Tasks { .. } => StoppedLoop::Implement,
            SourceSpec::Stories { .. } => StoppedLoop::Stories,
        }
    }
}

/// One agent of an iteration: what it is told and where it works.
#[derive(Debug, Clone)]
pub struct Member {
    /// The task or story it works on (`None`: the run's one agent).
    pub label: Option<String>,
    /// The loop type its prompt went through (the contract's `TASKDAEMON_LOOP`) and the
    /// `mode` column of its summary row.
    pub mode: String,
    pub cwd: PathBuf,
    pub prompt: String,
    pub prompt_file: PathBuf,
    pub log: PathBuf,
    /// Added to the agent contract's environment (a value here replaces the contract's).
    pub env: Vec<(OsString, OsString)>,
    pub system_prompt: Option<String>,
    /// Notes for the top of its log.
    pub notes: Vec<String>,
}

/// The work of one iteration: one member, or a group that runs at the same time.
#[derive(Debug, Clone)]
pub struct Unit {
    pub members: Vec<Member>,
    /// The prompts carry a person's answer to an earlier DECIDE: archived once an agent has
    /// seen it.
    pub answered: bool,
    /// The source's own words about the unit (its tasks started, its group), said right
    /// after the iteration's start.
    pub announce: Vec<super::events::WorkEvent>,
}

/// What the source says comes next.
#[derive(Debug)]
pub enum Next {
    Work(Unit),
    /// No work is left, or none can start: the run ends so.
    Done(Outcome),
}

/// A member that ran to its end (not retried after a usage limit or a backoff, not stopped).
pub struct Finished {
    /// Its place in the unit's members.
    pub index: usize,
    pub run: AgentRun,
    /// The agent did no work (crashed at once): why.
    pub no_work: Option<String>,
    pub log: IterationLog,
}

/// How the source judged one member.
#[derive(Debug, Clone, Default)]
pub struct MemberVerdict {
    /// `None`: not judged (it said BLOCKED or DECIDE).
    pub claim: Option<Claim>,
    /// The commit its work landed as.
    pub commit: Option<String>,
}

/// The evidence the source gathered about the iteration's claims.
#[derive(Debug, Default)]
pub struct Judged {
    pub signal: Option<Signal>,
    pub validation: Option<ValidationEvidence>,
    pub gates: Option<GateVerdict>,
    pub work: Option<WorkVerdict>,
    pub validation_time: Duration,
    /// HEAD as the stuck rule sees it: after the agents' work landed, before the harness's
    /// own bookkeeping commits.
    pub head_after: Option<String>,
    /// One per finished member, in the order given.
    pub members: Vec<MemberVerdict>,
    /// The run's stop came while the source judged (a Verify command cut short): no
    /// verdict; the iteration is interrupted.
    pub interrupted: bool,
}

/// What a source says at the end of the run.
#[derive(Debug, Default)]
pub struct Ending {
    /// Replaces the outcome's own detail line in the summary.
    pub detail: Option<String>,
}

/// A kind of loop's work, driven by the engine's one loop.
pub trait WorkSource: Send {
    /// Before iteration 1 (after the preflight): what the source records or checks first.
    /// `Some` ends the run before it starts.
    fn start(
        &mut self,
        st: &mut RunState,
        resumed: bool,
        ctx: &EngineContext,
        cancel: &CancellationToken,
    ) -> impl Future<Output = Result<Option<Outcome>, EngineError>> + Send;

    /// The next unit of work and its prompts (written by the engine), or the run's end.
    fn next(
        &mut self,
        st: &mut RunState,
        n: u32,
        ctx: &EngineContext,
        cancel: &CancellationToken,
    ) -> impl Future<Output = Result<Next, EngineError>> + Send;

    /// Judge the members of the unit `next` gave that finished; `head` is HEAD after the
    /// agents.
    fn judge(
        &mut self,
        st: &mut RunState,
        done: &mut [Finished],
        head: Option<String>,
        ctx: &EngineContext,
        cancel: &CancellationToken,
    ) -> impl Future<Output = Result<Judged, EngineError>> + Send;

    /// What the engine found wrong with the iteration outside the source's judgement (the
    /// agents changed git's own files), for the source's next prompt. The engine's loop
    /// types carry it in `previous-errors` already: nothing to do by default.
    fn note_for_next(&mut self, _note: &str) {}

    /// Members that did not finish (a usage limit, a backoff, a stop, an agent that could
    /// not run): what they left is undone, and they run again as the same attempt.
    fn abandon(
        &mut self,
        unit: &Unit,
        members: &[usize],
        ctx: &EngineContext,
    ) -> Result<(), EngineError>;

    /// After the engine's decision on the iteration: the source's own bookkeeping (attempts,
    /// its state file). `Some` ends the run (a task that keeps failing).
    fn settle(
        &mut self,
        st: &mut RunState,
        d: &Decision,
        ctx: &EngineContext,
    ) -> Result<Option<Outcome>, EngineError>;

    /// The run ended with `outcome`.
    fn finish(
        &mut self,
        st: &RunState,
        outcome: &Outcome,
        ctx: &EngineContext,
    ) -> Result<Ending, EngineError>;

    /// Units done of all, for the summary (`None`: the source has no list).
    fn tally(&self) -> Option<WorkTally>;

    /// What the run works through, for its start line (`None`: the loop type says it).
    fn describe(&self, _resumed: bool) -> Option<String> {
        None
    }

    /// After the summary: the source's last event.
    fn finished(&mut self, _outcome: &Outcome, _detail: &str, _ctx: &EngineContext) {}
}
