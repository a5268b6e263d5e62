//! What happened in a run, as the report's cards and tables say it: a cost or tokens only
//! when the agent reported them, stalls only when there were stalls, a plan loop's
//! iterations as review passes, a title without its markdown heading. Each fact is a type,
//! so the page shows what there is and nothing for what there is not.

use super::{Excerpt, Iteration, Outcome, RunData, Validation};
use crate::docs::{REVIEW_PASSES, plan_doc};

/// A total the agent may or may not have reported (cost, tokens).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Amount<T> {
    /// Some was reported.
    Some(T),
    /// The agent reported it, and it was zero.
    Zero,
    /// The agent reported none.
    NotReported,
}

/// The stalls of a run (the same tool calls iteration after iteration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stalls {
    pub detected: u32,
    /// Given a fresh start (a snapshot and guidance); a second stall fails the run.
    pub recovered: u32,
}

/// A plan loop's iteration: review pass `pass` of `of` (the Rule of Five).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Review {
    pub pass: u32,
    pub of: u32,
    pub verdict: ReviewVerdict,
}

/// What the plan's check said after a review pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReviewVerdict {
    /// A pass before the last, the plan in shape: the next pass goes on.
    Done,
    /// The last pass, and the plan passed its check.
    Finished,
    /// The plan's check found these problems (title, sections, …).
    Problems(Vec<String>),
    /// The check did not pass and its log says nothing more.
    NotPassed,
    /// No check ran (the iteration ended before it).
    Unchecked,
}

impl Review {
    /// The review of iteration `n` of a plan loop (pass `n`, later iterations repeat the
    /// last, as the engine numbers them), from its validation and its log.
    pub fn of_iteration(n: u32, validation: Validation, log: Option<&Excerpt>) -> Review {
        let pass = n.clamp(1, REVIEW_PASSES);
        let verdict = match validation {
            Validation::Passed => ReviewVerdict::Finished,
            Validation::Skipped => ReviewVerdict::Unchecked,
            Validation::Failed => {
                let problems = log.map(|l| check_problems(&l.text)).unwrap_or_default();
                let to_go = plan_doc::passes_to_go(pass);
                let real: Vec<String> = problems
                    .iter()
                    .filter(|p| !p.ends_with(&to_go))
                    .cloned()
                    .collect();
                if !real.is_empty() {
                    ReviewVerdict::Problems(real)
                } else if problems.len() > real.len() {
                    ReviewVerdict::Done
                } else {
                    ReviewVerdict::NotPassed
                }
            }
        };
        Review {
            pass,
            of: REVIEW_PASSES,
            verdict,
        }
    }

    /// One line: `review pass 2 of 5: done`.
    pub fn text(&self) -> String {
        let verdict = match &self.verdict {
            ReviewVerdict::Done => "done, the plan in shape".to_string(),
            ReviewVerdict::Finished => "done, the plan passed its check".to_string(),
            ReviewVerdict::Problems(p) => format!("problems: {}", p.join("; ")),
            ReviewVerdict::NotPassed => "the plan did not pass its check".to_string(),
            ReviewVerdict::Unchecked => "the plan was not checked".to_string(),
        };
        format!("review pass {} of {}: {verdict}", self.pass, self.of)
    }

    pub fn passed(&self) -> bool {
        matches!(self.verdict, ReviewVerdict::Done | ReviewVerdict::Finished)
    }
}

/// The problem lines of a validation's output in an iteration log: the indented lines
/// between `[taskdaemon] validation: $ …` and `[taskdaemon] validation exited …`.
fn check_problems(log: &str) -> Vec<String> {
    let mut inside = false;
    let mut out = Vec::new();
    for line in log.lines() {
        if let Some(note) = line.strip_prefix("[taskdaemon] ") {
            if note.starts_with("validation: $") {
                inside = true;
                out.clear();
            } else if note.starts_with("validation exited") {
                inside = false;
            }
            continue;
        }
        if inside && line.starts_with("  ") && !line.trim().is_empty() {
            out.push(line.trim().chars().take(300).collect());
        }
    }
    out
}

/// A title from a task's first words: the first line with text, without a markdown
/// heading (`# Task: Add X` → `Add X`).
pub fn heading_text(task: &str) -> String {
    let line = task
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let bare = line.trim_start_matches('#').trim();
    let bare = match bare.get(..5) {
        Some(p) if p.eq_ignore_ascii_case("task:") => bare[5..].trim(),
        _ => bare,
    };
    bare.to_string()
}

impl RunData {
    /// Its cost: reported (`run.json`'s `cost_reported`, else any iteration's cost above
    /// zero) or not.
    pub fn cost(&self) -> Amount<f64> {
        let total = self.total_cost();
        if total > 0.0 {
            Amount::Some(total)
        } else if self.cost_reported == Some(true) {
            Amount::Zero
        } else {
            Amount::NotReported
        }
    }

    /// Its tokens in and out, when some iteration reported any.
    pub fn tokens(&self) -> Amount<(u64, u64)> {
        match self.total_tokens() {
            (0, 0) => Amount::NotReported,
            t => Amount::Some(t),
        }
    }

    pub fn stalls(&self) -> Stalls {
        let recovered = self
            .iterations
            .iter()
            .filter(|i| i.outcome == Outcome::StallRecovery)
            .count();
        let recovered = u32::try_from(recovered).unwrap_or(u32::MAX);
        Stalls {
            detected: self.stall_recoveries.max(recovered),
            recovered: recovered.max(self.stall_recoveries.min(1)),
        }
    }

    /// Completions the harness's evidence rejected.
    pub fn rejected_completions(&self) -> usize {
        self.iterations
            .iter()
            .filter(|i| i.outcome == Outcome::Rejected)
            .count()
    }

    /// Whether any iteration waited (a usage limit's reset, a backoff).
    pub fn waited(&self) -> bool {
        self.iterations.iter().any(|i| i.waited_s > 0.0)
    }

    /// Seconds in its iterations: its recorded elapsed time, else their sum.
    pub fn seconds(&self) -> f64 {
        self.elapsed_ms
            .map(|ms| ms as f64 / 1000.0)
            .unwrap_or_else(|| self.iterations.iter().map(|i| i.duration_s).sum())
    }

    /// The anchor of its section in the page.
    pub fn anchor(&self) -> String {
        let safe: String = self
            .run_id
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        format!("run-{safe}")
    }
}

impl Iteration {
    /// Whether the iteration's check passed: a review pass by its verdict, else the
    /// validation.
    pub fn check_passed(&self) -> Option<bool> {
        match (&self.review, self.validation) {
            (Some(r), _) => Some(r.passed()),
            (None, Validation::Passed) => Some(true),
            (None, Validation::Failed) => Some(false),
            (None, Validation::Skipped) => None,
        }
    }
}
