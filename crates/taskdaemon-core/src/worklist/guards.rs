//! What a work-list loop (`implement`, `stories`) gets from the engine's rules, without
//! copies: the run id and agent contract of every invocation, BLOCKED and DECIDE (spec 2
//! §1: `.ralph/blocked.txt` / `.ralph/decide.txt`, exit 2 / 3; a person's answer goes
//! into the next prompt), stuck detection (`--max-stuck` rejected attempts without a
//! commit, exit 4), the cost, runtime and iteration limits (`guards::limit_reached`), one
//! `summary.csv` row per agent invocation with its mode, and the final summary.
//!
//! The work source (the coordinator, the stories loop) says what to prompt, what counts
//! as a claim and which extra gates run; these guards decide the rest the way the engine
//! does ([`crate::engine::decide`]).

use std::path::Path;
use std::time::{Duration, Instant};

use super::WorklistError;
use super::agent::{AgentRun, JobContract};
use super::loop_prompt::{LoopPrompts, PromptVars};
use crate::clock;
use crate::engine::decide::{self, Claim};
use crate::engine::{Outcome, RunState};
use crate::guards::{self, Limit};
use crate::signals::{self, Signal};
use crate::telemetry::{RunSummary, SummaryRow, count_stories, write_row};
use crate::workspace::{StoppedLoop, Workspace};

/// The limits a person sets (`--max-stuck`, `--max-cost`, `--max-runtime`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Rejected attempts in a row without a commit before the loop is stuck (0: never).
    pub max_stuck: u32,
    /// Agents in a row with the same tool calls before the loop fails as stalled (0: never).
    pub max_stall: u32,
    pub max_cost: Option<f64>,
    pub max_runtime: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_stuck: crate::engine::DEFAULT_MAX_STUCK,
            max_stall: crate::engine::DEFAULT_MAX_STALL,
            max_cost: None,
            max_runtime: None,
        }
    }
}

/// One agent invocation's row, as the work source knows it.
#[derive(Debug, Clone)]
pub struct Row<'a> {
    /// The agent invocation's number in this run (its contract's iteration).
    pub invocation: u32,
    /// implement, qa, review, review-fix.
    pub mode: &'a str,
    pub started_at: String,
    pub duration: Duration,
    pub run: &'a AgentRun,
    pub outcome: decide::IterationOutcome,
    pub validation: decide::ValidationResult,
    pub commit: Option<String>,
}

#[derive(Debug)]
pub struct Guards {
    pub run_id: String,
    kind: StoppedLoop,
    ws: Workspace,
    repo: std::path::PathBuf,
    limits: Limits,
    max_iterations: u32,
    started: Instant,
    invocations: u32,
    cost: f64,
    cost_reported: bool,
    tokens_in: u64,
    tokens_out: u64,
    stuck: u32,
    stuck_iterations: u32,
    decision: Option<String>,
    prompts: LoopPrompts,
    stall: u32,
    last_signature: Option<String>,
}

impl Guards {
    /// Start a loop of `kind` in `repo`. A loop that is blocked, or waits for an answer,
    /// does not start (a person acts first).
    pub fn start(
        repo: &Path,
        kind: StoppedLoop,
        limits: Limits,
        max_iterations: u32,
    ) -> Result<Guards, WorklistError> {
        let ws = Workspace::new(repo);
        let name = kind.name();
        let ws_err = |e: crate::workspace::WorkspaceError| WorklistError::Invalid(e.to_string());
        if let Some(text) = ws.read_blocked().map_err(ws_err)? {
            return Err(WorklistError::Invalid(format!(
                "not starting: the {name} loop is blocked ({}):\n{}\n  hint: resolve it, then `taskdaemon unblock` and run `taskdaemon {name}` again",
                ws.blocked_file().display(),
                text.trim_end()
            )));
        }
        let decision = match ws.read_decide().map_err(ws_err)? {
            Some(d) => match &d.answer {
                Some(a) => Some(format!("Question: {}\nAnswer: {a}", d.question)),
                None => {
                    return Err(WorklistError::Invalid(format!(
                        "not starting: the agent asked a question that has no answer yet ({}):\n{}\n  hint: `taskdaemon answer \"…\"`, then run `taskdaemon {name}` again",
                        ws.decide_file().display(),
                        d.question
                    )));
                }
            },
            None => None,
        };
        let prompts = LoopPrompts::load(repo)?;
        Ok(Guards {
            prompts,
            stall: 0,
            last_signature: None,
            run_id: RunState::new_id(clock::now()),
            kind,
            ws,
            repo: repo.to_path_buf(),
            limits,
            max_iterations,
            started: Instant::now(),
            invocations: 0,
            cost: 0.0,
            cost_reported: false,
            tokens_in: 0,
            tokens_out: 0,
            stuck: 0,
            stuck_iterations: 0,
            decision,
        })
    }

    /// A person's answer to the last DECIDE, for the next prompts.
    pub fn decision(&self) -> Option<&str> {
        self.decision.as_deref()
    }

    /// The prompt of an invocation: the work source's `task` text through the loop type
    /// the contract names (with the person's answer, when there is one).
    pub fn prompt(&self, contract: &JobContract, task: &str) -> Result<String, WorklistError> {
        self.prompts.render(
            &contract.loop_name,
            &PromptVars {
                task,
                decision: self.decision.as_deref(),
                iteration: contract.iteration,
                max_iterations: contract.max_iterations,
                workdir: &self.repo,
            },
        )
    }

    /// The loop's limits before the next iteration (`done` iterations so far).
    pub fn limit(&self, done: u32) -> Option<Outcome> {
        guards::limit_reached(
            done,
            self.max_iterations,
            self.started.elapsed(),
            self.limits.max_runtime,
            self.cost,
            self.limits.max_cost,
        )
        .map(|limit| Outcome::LimitReached { limit })
    }

    /// The contract of the next agent invocation, of loop type `loop_name`.
    pub fn contract(&mut self, loop_name: &str) -> JobContract {
        self.invocations += 1;
        JobContract {
            run_id: self.run_id.clone(),
            loop_name: loop_name.to_string(),
            iteration: self.invocations,
            max_iterations: self.max_iterations,
        }
    }

    /// After an agent: its cost and tokens; an answered question is archived once an
    /// agent has seen it.
    pub fn account(&mut self, run: &AgentRun) -> Result<(), WorklistError> {
        if let Some(c) = run.cost_usd {
            self.cost += c;
            self.cost_reported = true;
        }
        self.tokens_in = self.tokens_in.saturating_add(run.tokens_in);
        self.tokens_out = self.tokens_out.saturating_add(run.tokens_out);
        if self.decision.is_some() && !run.interrupted {
            self.ws
                .archive_decide(&clock::now().as_second().to_string())
                .map_err(|e| WorklistError::Invalid(e.to_string()))?;
            self.decision = None;
        }
        Ok(())
    }

    /// The agent's BLOCKED or DECIDE (written for the person), or a stall (the same tool
    /// calls `--max-stall` agents in a row): the loop's outcome.
    pub fn signal(
        &mut self,
        run: &AgentRun,
        iteration: u32,
    ) -> Result<Option<Outcome>, WorklistError> {
        self.stall = guards::next_stall_count(
            self.last_signature.as_deref(),
            self.stall,
            run.tool_signature.as_deref(),
        );
        self.last_signature = run.tool_signature.clone();
        let scan = signals::scan(&run.words, "COMPLETE");
        let at = clock::now_rfc3339();
        let ws_err = |e: crate::workspace::WorkspaceError| WorklistError::Invalid(e.to_string());
        Ok(match scan.signal {
            Some(Signal::Blocked(reason)) => {
                self.ws
                    .write_blocked(self.kind, &reason, iteration, &at)
                    .map_err(ws_err)?;
                Some(Outcome::Blocked { reason })
            }
            Some(Signal::Decide(question)) => {
                self.ws
                    .write_decide(self.kind, &question, iteration, &at)
                    .map_err(ws_err)?;
                Some(Outcome::Decide { question })
            }
            _ if self.limits.max_stall > 0 && self.stall >= self.limits.max_stall => {
                Some(Outcome::Failed {
                    reason: format!(
                        "stalled: the agents made the same tool calls {} times in a row (--max-stall)\n  hint: read the last logs; change the task or the prompt (a loop type in .taskdaemon/loops/), then run `taskdaemon {}` again",
                        self.stall,
                        self.kind.name()
                    ),
                })
            }
            _ => None,
        })
    }

    /// After the work source judged an attempt: the stuck rule of the engine.
    pub fn after_attempt(
        &mut self,
        claim: Claim,
        head_before: Option<&str>,
        head_after: Option<&str>,
        timed_out: bool,
    ) -> Option<Outcome> {
        let (count, outcome) = decide::stuck_rule(
            claim,
            self.stuck,
            head_before,
            head_after,
            timed_out,
            self.limits.max_stuck,
        );
        if count > self.stuck {
            self.stuck_iterations += 1;
        }
        self.stuck = count;
        outcome
    }

    pub fn stuck_count(&self) -> u32 {
        self.stuck
    }

    /// One row of `.ralph/summary.csv` (the invocation number is its iteration).
    pub fn record(&self, row: &Row<'_>) -> Result<(), WorklistError> {
        let (stories_complete, stories_total) = count_stories(&self.repo).unwrap_or((0, 0));
        let r = SummaryRow {
            iteration: row.invocation,
            mode: row.mode.to_string(),
            duration_seconds: format!("{:.3}", row.duration.as_secs_f64()),
            commit_hash: row
                .commit
                .as_deref()
                .map(|c| c[..c.len().min(12)].to_string())
                .unwrap_or_default(),
            stories_complete,
            stories_total,
            stuck_count: self.stuck,
            timestamp: row.started_at.clone(),
            run_id: self.run_id.clone(),
            outcome: row.outcome,
            agent_exit_code: row.run.exit_code,
            validation_passed: row.validation,
            tokens_in: row.run.tokens_in,
            tokens_out: row.run.tokens_out,
            cost_usd: format!("{:.6}", row.run.cost_usd.unwrap_or(0.0)),
            waited_seconds: "0.000".into(),
        };
        let csv = self.ws.summary_csv();
        write_row(&csv, &r).map_err(WorklistError::io(&csv))
    }

    /// The final summary block's data.
    pub fn summary(&self, outcome: &Outcome, detail: String) -> RunSummary {
        let ms = self.started.elapsed().as_millis() as u64;
        RunSummary {
            run_id: self.run_id.clone(),
            exit_label: outcome.label().to_string(),
            exit_code: outcome.exit_code(),
            detail,
            iterations: self.invocations,
            max_iterations: self.max_iterations,
            duration_ms: ms,
            avg_iteration_ms: ms.checked_div(u64::from(self.invocations)).unwrap_or(0),
            stuck_iterations: self.stuck_iterations,
            stuck_count: self.stuck,
            stories: count_stories(&self.repo),
            cost_usd: self.cost_reported.then_some(self.cost),
            tokens_in: self.tokens_in,
            tokens_out: self.tokens_out,
            summary_csv: self.ws.summary_csv(),
            logs_dir: self.ws.logs_dir(),
        }
    }

    pub fn kind(&self) -> &'static str {
        self.kind.name()
    }

    /// Whether the cost limit could ever trigger (the agent reports no cost in text).
    pub fn cost_limit_blind(&self, format: crate::agent::OutputFormat) -> bool {
        self.limits.max_cost.is_some() && format == crate::agent::OutputFormat::Text
    }
}

/// The final line of a work list's BLOCKED, DECIDE or stuck end, naming the command that
/// continues it; `None` for the other outcomes.
pub fn stop_detail(outcome: &Outcome, kind: &str) -> Option<String> {
    Some(match outcome {
        Outcome::Blocked { reason } => format!(
            "blocked: {reason}. See .ralph/blocked.txt; resolve it, `taskdaemon unblock`, then `taskdaemon {kind}` again (it resumes)"
        ),
        Outcome::Decide { question } => format!(
            "decision needed: {question}. Answer with `taskdaemon answer \"…\"`, then `taskdaemon {kind}` again: the answer goes into the next prompt"
        ),
        Outcome::Stuck { iterations } => format!(
            "stuck: {iterations} rejected attempts in a row without a new commit (--max-stuck)\n  hint: read the last prompts' rejection reasons and the logs, fix the work list or the agent, then `taskdaemon {kind}` again"
        ),
        _ => return None,
    })
}

/// The limit's words for a work list's final line.
pub fn limit_detail(limit: Limit, kind: &str) -> String {
    format!(
        "{} reached\n  hint: run `taskdaemon {kind}` again to continue (it resumes), or raise the limit",
        limit.describe()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(words: &str, signature: Option<&str>) -> AgentRun {
        AgentRun {
            words: words.into(),
            exit_code: 0,
            timed_out: false,
            interrupted: false,
            duration: Duration::from_millis(5),
            cost_usd: Some(0.25),
            tokens_in: 10,
            tokens_out: 2,
            tool_signature: signature.map(str::to_string),
        }
    }

    #[test]
    fn promises_stalls_cost_and_a_blocked_loop_that_does_not_start() {
        let d = tempfile::tempdir().unwrap();
        let limits = Limits {
            max_cost: Some(0.5),
            ..Limits::default()
        };
        let mut g = Guards::start(d.path(), StoppedLoop::Stories, limits, 10).unwrap();
        for i in 1..=2 {
            g.account(&run("working", Some("sig"))).unwrap();
            assert_eq!(g.signal(&run("working", Some("sig")), i).unwrap(), None);
        }
        let third = g.signal(&run("working", Some("sig")), 3).unwrap();
        assert!(
            matches!(&third, Some(Outcome::Failed { reason }) if reason.contains("stalled")),
            "{third:?}"
        );
        assert_eq!(
            g.limit(1).map(|o| o.label()),
            Some("LIMIT"),
            "0.5 USD spent"
        );
        let o = g
            .signal(&run("<promise>BLOCKED: no key</promise>", None), 4)
            .unwrap();
        assert_eq!(o.map(|o| o.exit_code()), Some(2));
        let e = Guards::start(d.path(), StoppedLoop::Stories, limits, 10).unwrap_err();
        assert!(e.to_string().contains("taskdaemon unblock"), "{e}");
    }
}
