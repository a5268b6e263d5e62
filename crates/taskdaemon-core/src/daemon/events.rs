//! What the daemon tells its observers: the foreground log, `logs --follow`,
//! `status --watch`, the TUI and the notifications. One JSON object per event, tagged by
//! `"event"` (snake_case, as every key: docs/json.md), on the daemon's socket to every
//! subscriber (`{"op":"subscribe"}`), each line stamped with `schema` and `at` as it is sent.
//!
//! Every event about a run or record carries a [`Subject`]: the record's id, its title (the
//! plan's, the spec's or the run's task), the plan and spec it belongs to and the
//! repository. A subscriber needs nothing else to say what happened; events that need a
//! person also carry the exact command that acts (`action`).

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::status::StatusSnapshot;

/// The longest agent line an event carries; longer ones are cut (with `…`).
pub const AGENT_LINE_MAX: usize = 2000;

/// Which record an event is about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Subject {
    /// The run's id (for a merge of a spec: the spec's id).
    pub run: String,
    /// Its title: the run's task, the spec's or the plan's title.
    pub title: String,
    /// The loop kind of the run (`ralph`, `phase`, `plan`, …); empty for a spec.
    #[serde(default)]
    pub loop_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<String>,
    /// The repository the daemon serves.
    pub repo: PathBuf,
}

/// A run's figures when an event about it was sent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct RunFacts {
    /// Iterations done.
    pub iterations: u32,
    /// Time in its iterations, all sessions.
    pub duration_ms: u64,
    /// What the agent reported it cost; `None` when it reports none.
    #[serde(default)]
    pub cost_usd: Option<f64>,
    /// The head of the run's branch.
    #[serde(default)]
    pub commit: Option<String>,
    /// The run's worktree.
    #[serde(default)]
    pub worktree: Option<PathBuf>,
}

/// Which kind of agent output a line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AgentStream {
    /// What the agent said (assistant text, its final result).
    Text,
    /// Anything else it printed: tool results, diagnostics, stderr.
    Other,
}

/// What a run waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WaitReason {
    /// The agent's usage limit: the run retries at `until`.
    UsageLimit,
    /// A transient failure of the model API: a backoff.
    Backoff,
    /// Finished work is held on an integration branch: the target is checked out elsewhere.
    MergeHeld,
}

/// A daemon event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "event",
    rename_all = "snake_case",
    rename_all_fields = "snake_case"
)]
pub enum DaemonEvent {
    /// The first line a subscriber gets (and again after `lagged`): exactly what
    /// `taskdaemon status --json` holds.
    Snapshot(StatusSnapshot),
    /// The subscriber read too slowly and missed `missed` events; a fresh snapshot follows.
    Lagged {
        missed: u64,
    },
    DaemonStarted {
        repo: PathBuf,
        pid: u32,
        max_loops: usize,
        socket: PathBuf,
    },
    /// The daemon stops; `interrupted` runs resume on its next start.
    DaemonStopping {
        repo: PathBuf,
        reason: String,
        interrupted: usize,
    },
    DaemonStopped {
        repo: PathBuf,
    },
    RunStarted {
        #[serde(flatten)]
        subject: Subject,
        iteration: u32,
        worktree: PathBuf,
        /// It goes on from saved state (after a stop, a pause, a block).
        resumed: bool,
    },
    IterationStarted {
        #[serde(flatten)]
        subject: Subject,
        iteration: u32,
        max_iterations: u32,
        /// The iteration's log file.
        log: String,
    },
    IterationFinished {
        #[serde(flatten)]
        subject: Subject,
        iteration: u32,
        /// The iteration's outcome label, as in `summary.csv` (`continue`, `complete`, …).
        outcome: String,
        duration_ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        commit: Option<String>,
        stuck_count: u32,
        cost_total_usd: f64,
    },
    /// A line the agent printed (cut at [`AGENT_LINE_MAX`]).
    AgentLine {
        #[serde(flatten)]
        subject: Subject,
        iteration: u32,
        stream: AgentStream,
        line: String,
    },
    /// The agent called a tool.
    AgentActivity {
        #[serde(flatten)]
        subject: Subject,
        iteration: u32,
        tool: String,
        detail: String,
    },
    /// A gate's verdict (`validate` is the project's test command).
    GateResult {
        #[serde(flatten)]
        subject: Subject,
        iteration: u32,
        gate: String,
        passed: bool,
        /// A hard gate's failure rejects the iteration; a soft one only warns.
        hard: bool,
        message: String,
    },
    Waiting {
        #[serde(flatten)]
        subject: Subject,
        reason: WaitReason,
        /// When the wait ends (RFC 3339), when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        until: Option<String>,
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        action: Option<String>,
        /// The agent's own line that said so, when there is one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        line: Option<String>,
        #[serde(default)]
        facts: RunFacts,
    },
    WaitOver {
        #[serde(flatten)]
        subject: Subject,
        reason: WaitReason,
    },
    /// The agent said BLOCKED (or the daemon refused the run): a person must act.
    Blocked {
        #[serde(flatten)]
        subject: Subject,
        reason: String,
        action: String,
        #[serde(default)]
        facts: RunFacts,
    },
    /// The agent asks a question (DECIDE).
    Decide {
        #[serde(flatten)]
        subject: Subject,
        question: String,
        action: String,
        #[serde(default)]
        facts: RunFacts,
    },
    Complete {
        #[serde(flatten)]
        subject: Subject,
        /// Why it counts as complete (`validation passed`).
        #[serde(default)]
        reason: String,
        #[serde(default)]
        facts: RunFacts,
        /// Its branch is merged next (a standalone run): `merged`, `merge-held`,
        /// `merge-conflict` or `failed` of the same run follows.
        #[serde(default)]
        merge_follows: bool,
    },
    Failed {
        #[serde(flatten)]
        subject: Subject,
        reason: String,
        action: String,
        #[serde(default)]
        facts: RunFacts,
    },
    Stuck {
        #[serde(flatten)]
        subject: Subject,
        iterations: u32,
        action: String,
        #[serde(default)]
        facts: RunFacts,
    },
    Merged {
        #[serde(flatten)]
        subject: Subject,
        branch: String,
        target: String,
        /// The target is checked out: the work waits on this integration branch for a
        /// person to take it (`git merge --ff-only BRANCH` there).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        held_on: Option<String>,
    },
    /// The merge is held instead of made: `target` is checked out in `checkout`, so the
    /// work waits on `integration-branch`; `action` takes it (sent after `merged`).
    MergeHeld {
        #[serde(flatten)]
        subject: Subject,
        branch: String,
        target: String,
        integration_branch: String,
        checkout: PathBuf,
        message: String,
        action: String,
    },
    MergeConflict {
        #[serde(flatten)]
        subject: Subject,
        target: String,
        message: String,
        action: String,
    },
    Paused {
        #[serde(flatten)]
        subject: Subject,
    },
    Resumed {
        #[serde(flatten)]
        subject: Subject,
    },
    Cancelled {
        #[serde(flatten)]
        subject: Subject,
    },
    /// The run stopped with the daemon; it resumes on the next start.
    Interrupted {
        #[serde(flatten)]
        subject: Subject,
    },
    /// Anything else the daemon has to say (a record changed, a worktree removed, an
    /// error it recovered from).
    Note {
        repo: PathBuf,
        #[serde(default)]
        warning: bool,
        message: String,
    },
}

/// Cut `s` to at most `max` bytes on a character boundary, marking the cut with `…`.
pub fn bounded(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

impl DaemonEvent {
    /// The record the event is about, if any.
    pub fn subject(&self) -> Option<&Subject> {
        use DaemonEvent::*;
        match self {
            RunStarted { subject, .. }
            | IterationStarted { subject, .. }
            | IterationFinished { subject, .. }
            | AgentLine { subject, .. }
            | AgentActivity { subject, .. }
            | GateResult { subject, .. }
            | Waiting { subject, .. }
            | WaitOver { subject, .. }
            | Blocked { subject, .. }
            | Decide { subject, .. }
            | Complete { subject, .. }
            | Failed { subject, .. }
            | Stuck { subject, .. }
            | Merged { subject, .. }
            | MergeHeld { subject, .. }
            | MergeConflict { subject, .. }
            | Paused { subject }
            | Resumed { subject }
            | Cancelled { subject }
            | Interrupted { subject } => Some(subject),
            Snapshot(_)
            | Lagged { .. }
            | DaemonStarted { .. }
            | DaemonStopping { .. }
            | DaemonStopped { .. }
            | Note { .. } => None,
        }
    }

    /// The event's name, as in its JSON `event` field.
    pub fn name(&self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.get("event").and_then(|e| e.as_str()).map(String::from))
            .unwrap_or_default()
    }

    /// Whether the event ends the run it is about (no more events of it follow until a
    /// person or the cascade starts it again).
    pub fn ends_run(&self) -> bool {
        use DaemonEvent::*;
        matches!(
            self,
            Blocked { .. }
                | Decide { .. }
                | Complete { .. }
                | Failed { .. }
                | Stuck { .. }
                | Paused { .. }
                | Cancelled { .. }
                | Interrupted { .. }
        )
    }

    /// Whether the foreground log shows it (agent lines and tool calls are for watchers).
    pub fn logged(&self) -> bool {
        !matches!(
            self,
            DaemonEvent::AgentLine { .. }
                | DaemonEvent::AgentActivity { .. }
                | DaemonEvent::Snapshot(_)
                | DaemonEvent::IterationStarted { .. }
        )
    }
}

/// The daemon log's line for an event.
impl fmt::Display for DaemonEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use DaemonEvent::*;
        let run = |s: &Subject| format!("run {} ({})", s.run, s.loop_type);
        match self {
            Snapshot(s) => write!(
                f,
                "snapshot: {} plan(s), {} run(s)",
                s.plans.len(),
                s.runs.len()
            ),
            Lagged { missed } => write!(f, "lagged: {missed} event(s) missed"),
            DaemonStarted {
                repo,
                pid,
                max_loops,
                socket,
            } => write!(
                f,
                "daemon {pid} started for {} (max {max_loops} loops; socket {})",
                repo.display(),
                socket.display()
            ),
            DaemonStopping {
                reason,
                interrupted,
                ..
            } => write!(
                f,
                "stopping ({reason}): {interrupted} run(s) interrupted; they resume on the next start"
            ),
            DaemonStopped { .. } => f.write_str("daemon stopped"),
            RunStarted {
                subject,
                iteration,
                worktree,
                resumed,
            } => write!(
                f,
                "run {} {} at iteration {iteration} in {}",
                subject.run,
                if *resumed { "resumed" } else { "started" },
                worktree.display()
            ),
            IterationStarted {
                subject,
                iteration,
                max_iterations,
                ..
            } => write!(
                f,
                "{}: iteration {iteration}/{max_iterations}",
                run(subject)
            ),
            IterationFinished {
                subject,
                iteration,
                outcome,
                ..
            } => write!(f, "{}: iteration {iteration}: {outcome}", run(subject)),
            AgentLine { subject, line, .. } => write!(f, "{}: {line}", run(subject)),
            AgentActivity {
                subject,
                tool,
                detail,
                ..
            } => write!(f, "{}: {tool} {detail}", run(subject)),
            GateResult {
                subject,
                iteration,
                gate,
                passed,
                message,
                ..
            } => write!(
                f,
                "{}: iteration {iteration}: gate {gate} {}{}",
                run(subject),
                if *passed { "passed" } else { "failed" },
                if message.is_empty() {
                    String::new()
                } else {
                    format!(": {message}")
                }
            ),
            Waiting {
                subject, message, ..
            } => write!(f, "{}: waiting: {message}", run(subject)),
            WaitOver { subject, .. } => write!(f, "{}: wait over", run(subject)),
            Blocked {
                subject, reason, ..
            } => write!(f, "{} -> blocked: BLOCKED: {reason}", run(subject)),
            Decide {
                subject,
                question,
                action,
                ..
            } => write!(
                f,
                "{} -> blocked: DECIDE: {question} ({action})",
                run(subject)
            ),
            Complete { subject, .. } => write!(f, "{} -> complete", run(subject)),
            Failed {
                subject,
                reason,
                action,
                ..
            } => write!(f, "{} -> failed: {reason}; {action}", run(subject)),
            Stuck {
                subject,
                iterations,
                action,
                ..
            } => write!(
                f,
                "{} -> failed: STUCK: no new commit in {iterations} consecutive iterations; {action}",
                run(subject)
            ),
            Merged {
                subject,
                branch,
                target,
                held_on,
            } => match held_on {
                Some(h) => write!(f, "merged {branch} for {target} onto {h} ({})", subject.run),
                None => write!(f, "merged {branch} into {target} ({})", subject.run),
            },
            MergeHeld {
                subject, message, ..
            } => write!(f, "{}: merge {message}", subject.run),
            MergeConflict {
                subject, message, ..
            } => write!(f, "{}: {message}", subject.run),
            Paused { subject } => write!(f, "{} -> paused", run(subject)),
            Resumed { subject } => write!(f, "{} -> resumed", run(subject)),
            Cancelled { subject } => {
                write!(f, "{} -> stopped: cancelled by a person", run(subject))
            }
            Interrupted { subject } => write!(
                f,
                "{} -> running: interrupted by a daemon stop; resumes on the next start",
                run(subject)
            ),
            Note { message, .. } => f.write_str(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject() -> Subject {
        Subject {
            run: "1a2b3c-run-fix".into(),
            title: "fix the parser".into(),
            loop_type: "ralph".into(),
            plan: None,
            spec: None,
            repo: PathBuf::from("/repo"),
        }
    }

    #[test]
    fn events_are_tagged_snake_case_and_round_trip() {
        let e = DaemonEvent::Decide {
            subject: subject(),
            question: "which database?".into(),
            action: "taskdaemon answer 1a2b3c \"…\"".into(),
            facts: RunFacts::default(),
        };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["event"], "decide");
        assert_eq!(v["run"], "1a2b3c-run-fix");
        assert_eq!(v["loop_type"], "ralph");
        assert_eq!(v["repo"], "/repo");
        assert!(v.get("plan").is_none());
        let back: DaemonEvent = serde_json::from_value(v).unwrap();
        assert_eq!(back, e);
        assert!(back.ends_run());
        assert_eq!(back.name(), "decide");

        let e = DaemonEvent::IterationFinished {
            subject: subject(),
            iteration: 2,
            outcome: "continue".into(),
            duration_ms: 10,
            commit: None,
            stuck_count: 1,
            cost_total_usd: 0.5,
        };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["event"], "iteration_finished");
        assert_eq!(v["stuck_count"], 1);
        assert_eq!(serde_json::from_value::<DaemonEvent>(v).unwrap(), e);
    }

    #[test]
    fn long_lines_are_cut_on_a_char_boundary() {
        assert_eq!(bounded("abc", 5), "abc");
        assert_eq!(bounded("ééé", 3), "é…");
        assert_eq!(
            bounded(&"x".repeat(3000), AGENT_LINE_MAX).len(),
            AGENT_LINE_MAX + 3
        );
    }
}
