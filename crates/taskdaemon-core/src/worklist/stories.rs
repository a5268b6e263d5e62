//! `taskdaemon stories`: user stories with a review cycle. The harness picks each
//! iteration's mode, snapshots the file, runs a fresh agent, and checks the file's changes
//! against the mode's transition rules; a violation restores the snapshot and the reason
//! goes into the next prompt. A story at the review cap is approved by the harness.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::WorklistError;
use super::agent::{AgentJob, AgentRun, AgentSetup, JobContract, prompt_path, run_agent};
use super::events::{WorklistEvent, WorklistSink};
use super::evidence::TaskEvidence;
use super::guards::{Guards, Limits, Row, limit_detail, stop_detail};
use super::stories_rules::{self, APPROVED, CHANGES_REQUESTED, Mode, NEEDS_REVIEW, Story};
use crate::engine::Outcome;
use crate::engine::decide::{Claim, IterationOutcome, ValidationResult};
use crate::fsutil::write_atomic;
use crate::git::Git;
use crate::guards::Limit;
use crate::signals::{self, Signal};

const LOGS_DIR: &str = ".ralph/stories-logs";

#[derive(Debug, Clone)]
pub struct StoriesConfig {
    /// The stories file (absolute).
    pub file: PathBuf,
    /// The top of its git work tree; the agent works there.
    pub repo: PathBuf,
    pub setup: AgentSetup,
    /// `false` with `--skip-review`: an implement iteration completes a story itself.
    pub review: bool,
    /// Reviews of one story before the harness approves it.
    pub max_reviews: u64,
    pub max_iterations: u32,
    /// `--max-stuck`, `--max-cost`, `--max-runtime`.
    pub limits: Limits,
    /// `--allow-test-changes`: changes of the tests are warnings, not rejections.
    pub allow_test_changes: bool,
}

#[derive(Debug, Clone)]
pub struct StoriesResult {
    pub outcome: Outcome,
    pub passing: usize,
    pub stories: usize,
}

/// Read and check the stories file (before anything runs).
pub fn load(file: &Path) -> Result<(String, Vec<Story>), WorklistError> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        WorklistError::Invalid(format!(
            "cannot read {}: {e}\n  hint: pass the stories file (`taskdaemon stories prd.json`); the default is tasks.json",
            file.display()
        ))
    })?;
    let stories = stories_rules::parse(&text).map_err(|m| {
        WorklistError::Invalid(format!(
            "{}: {m}\n  hint: a stories file is JSON: {{\"userStories\": [{{\"id\": \"US-1\", \"title\": …, \"priority\": 1, \"passes\": false}}]}}",
            file.display()
        ))
    })?;
    if stories.is_empty() {
        return Err(WorklistError::Invalid(format!(
            "{} has no stories\n  hint: add at least one story with an `id`",
            file.display()
        )));
    }
    Ok((text, stories))
}

/// The default iteration limit: every story implemented, reviewed up to the cap and fixed,
/// with room for rejected iterations.
pub fn default_max_iterations(stories: usize, max_reviews: u64, review: bool) -> u32 {
    let per = if review { 2 * max_reviews + 2 } else { 1 };
    ((stories as u64 * per * 2).max(4)).min(u32::MAX as u64) as u32
}

pub async fn run_stories(
    cfg: &StoriesConfig,
    events: &WorklistSink,
    cancel: &CancellationToken,
) -> Result<StoriesResult, WorklistError> {
    let (_, initial) = load(&cfg.file)?;
    let mut g = Guards::start(
        &cfg.repo,
        crate::workspace::StoppedLoop::Stories,
        cfg.limits,
        cfg.max_iterations,
    )?;
    let git = Git::new(&cfg.repo);
    git.ensure_excluded(&[".ralph/stories-logs/"])?;
    git.ensure_excluded(crate::workspace::IGNORED)?;
    let rel = cfg
        .file
        .strip_prefix(&cfg.repo)
        .unwrap_or(&cfg.file)
        .to_path_buf();
    events.emit(WorklistEvent::StoriesStarted {
        file: cfg.file.display().to_string(),
        agent: cfg.setup.agent.label(),
        stories: initial.len(),
        passing: initial.iter().filter(|s| s.passes).count(),
        max_iterations: cfg.max_iterations,
        review: cfg.review,
        sandbox: cfg.setup.sandbox.label(),
    });
    if g.cost_limit_blind(cfg.setup.format) {
        events.warn("--max-cost is set but this agent's plain-text output reports no cost; the limit cannot trigger");
    }
    let evidence = TaskEvidence::new(&cfg.repo, EVIDENCE_ID, cfg.allow_test_changes, None)?;
    evidence.record(EVIDENCE_ID, "")?;
    if cfg.allow_test_changes {
        events.warn("--allow-test-changes: the evidence protection is OFF for this run: deleted or skipped tests are only warned about");
    }
    let mut previous_error: Option<String> = None;
    let mut iteration = 0u32;
    loop {
        let (snapshot, stories) = load(&cfg.file)?;
        if cancel.is_cancelled() {
            return Ok(finish(
                events,
                &g,
                Outcome::Interrupted,
                &stories,
                cfg.review,
            ));
        }
        if let Some(o) = g.limit(iteration) {
            return Ok(finish(events, &g, o, &stories, cfg.review));
        }
        let Some((mode, snapshot, stories)) =
            next_mode(cfg, &git, &rel, events, snapshot, stories)?
        else {
            let (_, stories) = load(&cfg.file)?;
            return Ok(finish(
                events,
                &g,
                no_story_can_start(cfg, &stories),
                &stories,
                cfg.review,
            ));
        };
        iteration += 1;
        let step = Step {
            iteration,
            mode: &mode,
            snapshot: &snapshot,
            stories: &stories,
            evidence: &evidence,
        };
        match one_iteration(
            cfg,
            &mut g,
            &git,
            &rel,
            &step,
            &mut previous_error,
            events,
            cancel,
        )
        .await?
        {
            Some(o) => {
                let (_, now) = load(&cfg.file)?;
                return Ok(finish(events, &g, o, &now, cfg.review));
            }
            None => continue,
        }
    }
}

/// The next iteration's mode (a story at the review cap approved by the harness first),
/// with the file as it is then. `None`: no story can start.
fn next_mode(
    cfg: &StoriesConfig,
    git: &Git,
    rel: &Path,
    events: &WorklistSink,
    mut snapshot: String,
    mut stories: Vec<Story>,
) -> Result<Option<(Mode, String, Vec<Story>)>, WorklistError> {
    loop {
        let Some(mode) = stories_rules::choose(&stories, cfg.review) else {
            return Ok(None);
        };
        // The review cap: the harness approves, with a note.
        if let Mode::Review(id) = &mode
            && let Some(s) = stories.iter().find(|s| &s.id == id)
            && s.review_count >= cfg.max_reviews
        {
            auto_approve(cfg, git, rel, id, s.review_count)?;
            events.emit(WorklistEvent::StoryAutoApproved {
                story_id: id.clone(),
                reviews: s.review_count as u32,
            });
            (snapshot, stories) = load(&cfg.file)?;
            continue;
        }
        return Ok(Some((mode, snapshot, stories)));
    }
}

/// One iteration's inputs.
struct Step<'a> {
    iteration: u32,
    mode: &'a Mode,
    snapshot: &'a str,
    stories: &'a [Story],
    /// The test files as they were when the run started.
    evidence: &'a TaskEvidence,
}

/// The key of a stories run's baseline.
const EVIDENCE_ID: &str = "stories";

/// Run one agent in `mode` and judge it: the loop's outcome when this iteration ends it.
#[allow(clippy::too_many_arguments)]
async fn one_iteration(
    cfg: &StoriesConfig,
    g: &mut Guards,
    git: &Git,
    rel: &Path,
    step: &Step<'_>,
    previous_error: &mut Option<String>,
    events: &WorklistSink,
    cancel: &CancellationToken,
) -> Result<Option<Outcome>, WorklistError> {
    let (iteration, mode) = (step.iteration, step.mode);
    let log = cfg
        .repo
        .join(LOGS_DIR)
        .join(format!("iteration-{iteration:03}-{}", mode.name()));
    let contract = g.contract(loop_type(mode));
    let prompt = g.prompt(
        &contract,
        &with_rules(
            story_prompt(cfg, rel, step.stories, mode, previous_error.as_deref()),
            &step.evidence.rules(EVIDENCE_ID),
        ),
    )?;
    events.emit(WorklistEvent::StoryIteration {
        iteration,
        mode: mode.name().into(),
        story_id: mode.story().map(str::to_string),
        prompt_file: prompt_path(&log).display().to_string(),
    });
    let started_at = crate::clock::now_rfc3339();
    let head_before = git.head()?;
    let job = story_job(cfg, contract, mode, iteration, prompt, log);
    let invocation = job.contract.iteration;
    let run = run_agent(job, events.clone(), cancel.clone()).await?;
    g.account(&run)?;
    let head_after = git.head()?;
    let mut row = Row {
        invocation,
        mode: mode.name(),
        started_at,
        duration: run.duration,
        run: &run,
        outcome: IterationOutcome::Continue,
        validation: ValidationResult::Skipped,
        commit: (head_after.is_some() && head_after != head_before)
            .then(|| head_after.clone().unwrap_or_default()),
    };
    if run.interrupted || cancel.is_cancelled() {
        row.outcome = IterationOutcome::Interrupted;
        g.record(&row)?;
        return Ok(Some(Outcome::Interrupted));
    }
    if let Some(o) = g.signal(&run, iteration)? {
        // The iteration did not happen for the file: a BLOCKED review keeps the story's
        // reviewStatus and reviewCount.
        if std::fs::read_to_string(&cfg.file).ok().as_deref() != Some(step.snapshot) {
            restore_snapshot(cfg, git, rel, step.snapshot, iteration)?;
        }
        row.outcome = match o {
            Outcome::Blocked { .. } => IterationOutcome::Blocked,
            Outcome::Decide { .. } => IterationOutcome::Decide,
            _ => IterationOutcome::Failed,
        };
        g.record(&row)?;
        return Ok(Some(o));
    }
    let (claim, done) = judge(cfg, git, rel, step, &run, previous_error, events)?;
    row.validation = match claim {
        Claim::Accepted => ValidationResult::Passed,
        Claim::Rejected | Claim::Tampered => ValidationResult::Failed,
    };
    let stuck = g.after_attempt(
        claim,
        head_before.as_deref(),
        head_after.as_deref(),
        run.timed_out,
    );
    row.outcome = match (&done, &stuck, claim) {
        (Some(_), _, _) => IterationOutcome::Complete,
        (None, Some(_), _) => IterationOutcome::Stuck,
        (None, None, Claim::Rejected | Claim::Tampered) => IterationOutcome::Rejected,
        (None, None, Claim::Accepted) => IterationOutcome::Continue,
    };
    g.record(&row)?;
    Ok(done.or(stuck))
}

/// Check the file's changes against the mode's rules (a violation restores it); the claim,
/// and the outcome when every story is done and the agent said so.
fn judge(
    cfg: &StoriesConfig,
    git: &Git,
    rel: &Path,
    step: &Step<'_>,
    run: &AgentRun,
    previous_error: &mut Option<String>,
    events: &WorklistSink,
) -> Result<(Claim, Option<Outcome>), WorklistError> {
    let (iteration, mode) = (step.iteration, step.mode);
    let after_text = std::fs::read_to_string(&cfg.file).unwrap_or_default();
    let verdict = stories_rules::parse(&after_text)
        .map_err(|m| format!("{} is broken after the iteration: {m}", rel.display()))
        .and_then(|after| {
            stories_rules::check(mode, step.stories, &after, cfg.review).map(|c| (after, c))
        })
        .map_err(|reason| (reason, Claim::Rejected))
        .and_then(|ok| {
            let (failures, warnings) = step.evidence.check(EVIDENCE_ID, &cfg.repo, None);
            warnings.into_iter().for_each(|w| events.warn(w));
            if failures.is_empty() {
                Ok(ok)
            } else {
                Err((super::verify::reason(&failures), Claim::Tampered))
            }
        });
    let said_complete = matches!(
        signals::scan(&run.words, "COMPLETE").signal,
        Some(Signal::Complete)
    );
    match verdict {
        Err((reason, claim)) => {
            restore_snapshot(cfg, git, rel, step.snapshot, iteration)?;
            events.emit(WorklistEvent::StoryRejected {
                iteration,
                mode: mode.name().into(),
                reason: reason.clone(),
            });
            *previous_error = Some(format!(
                "Iteration {iteration} ({}) was rejected and {} was restored to how it was before it: {reason}",
                mode.name(),
                rel.display()
            ));
            Ok((claim, None))
        }
        Ok((after, changes)) => {
            events.emit(WorklistEvent::StoryAccepted {
                iteration,
                mode: mode.name().into(),
                changes,
            });
            *previous_error = None;
            let all_done = after.iter().all(|s| s.done(cfg.review));
            if said_complete && all_done {
                return Ok((Claim::Accepted, Some(Outcome::Complete { verified: true })));
            }
            if said_complete {
                *previous_error = Some(reject_complete(events, cfg, iteration, &after));
            }
            Ok((Claim::Accepted, None))
        }
    }
}

/// The loop type of a mode's agent: a review is `story-review`; implementing a story and
/// fixing it after a review are `story-implement`.
fn loop_type(mode: &Mode) -> &'static str {
    match mode {
        Mode::Review(_) => "story-review",
        _ => "story-implement",
    }
}

/// The failure when stories remain but every one waits on a story that does not pass.
fn no_story_can_start(cfg: &StoriesConfig, stories: &[Story]) -> Outcome {
    let waiting: Vec<String> = stories
        .iter()
        .filter(|s| !s.done(cfg.review))
        .map(|s| format!("{} (depends on {})", s.id, s.depends_on.join(", ")))
        .collect();
    Outcome::Failed {
        reason: format!(
            "no story can start: {} wait on stories that do not pass\n  hint: fix `dependsOn` in {}",
            waiting.join("; "),
            cfg.file.display()
        ),
    }
}

/// The agent run of one iteration in `mode`.
fn story_job(
    cfg: &StoriesConfig,
    contract: JobContract,
    mode: &Mode,
    iteration: u32,
    prompt: String,
    log: PathBuf,
) -> AgentJob {
    AgentJob {
        setup: cfg.setup.clone(),
        label: mode.story().unwrap_or("stories").to_string(),
        cwd: cfg.repo.clone(),
        prompt,
        env: vec![
            ("TASKDAEMON_STORIES_FILE".into(), cfg.file.clone().into()),
            ("TASKDAEMON_STORY_MODE".into(), mode.name().into()),
            (
                "TASKDAEMON_STORY_ID".into(),
                mode.story().unwrap_or("").into(),
            ),
            ("TASKDAEMON_ITERATION".into(), iteration.to_string().into()),
        ],
        log,
        contract,
    }
}

/// Put the stories file back as it was before a rejected iteration, and commit it.
fn restore_snapshot(
    cfg: &StoriesConfig,
    git: &Git,
    rel: &Path,
    snapshot: &str,
    iteration: u32,
) -> Result<(), WorklistError> {
    write_atomic(&cfg.file, snapshot.as_bytes()).map_err(WorklistError::io(&cfg.file))?;
    commit_file(
        git,
        rel,
        &format!(
            "taskdaemon: restore {} (rejected iteration {iteration})",
            rel.display()
        ),
    )
}

/// COMPLETE said while stories remain open: warn, and the note for the next prompt.
fn reject_complete(
    events: &WorklistSink,
    cfg: &StoriesConfig,
    iteration: u32,
    after: &[Story],
) -> String {
    let open: Vec<&str> = after
        .iter()
        .filter(|s| !s.done(cfg.review))
        .map(|s| s.id.as_str())
        .collect();
    let note = format!(
        "COMPLETE was said, but these stories are not done yet: {}",
        open.join(", ")
    );
    events.warn(format!(
        "iteration {iteration}: COMPLETE rejected: not done: {}",
        open.join(", ")
    ));
    note
}

fn finish(
    events: &WorklistSink,
    g: &Guards,
    outcome: Outcome,
    stories: &[Story],
    review: bool,
) -> StoriesResult {
    let passing = stories.iter().filter(|s| s.done(review)).count();
    let detail = match &outcome {
        Outcome::Complete { .. } => format!("COMPLETE: all {} stories pass", stories.len()),
        Outcome::LimitReached {
            limit: Limit::MaxIterations,
        } => {
            "max iterations reached before every story passed\n  hint: run `taskdaemon stories` again (it continues from the file), or raise --max-iterations".into()
        }
        Outcome::LimitReached { limit } => limit_detail(*limit, "stories"),
            o @ (Outcome::Blocked { .. } | Outcome::Decide { .. } | Outcome::Stuck { .. }) => {
                stop_detail(o, "stories").unwrap_or_default()
            }
        Outcome::Interrupted => "interrupted; the file keeps every accepted change. Run `taskdaemon stories` again to continue".into(),
        other => other.detail(),
    };
    // The summary block first: the loop's own event stays the last one.
    events.emit(WorklistEvent::RunFinished {
        summary: g.summary(&outcome, detail.clone()),
    });
    events.emit(WorklistEvent::StoriesFinished {
        outcome: outcome.label().into(),
        exit_code: outcome.exit_code(),
        detail,
        passing,
        stories: stories.len(),
    });
    StoriesResult {
        outcome,
        passing,
        stories: stories.len(),
    }
}

/// Approve `id` in the file (keeping every other byte's meaning), with a note.
fn auto_approve(
    cfg: &StoriesConfig,
    git: &Git,
    rel: &Path,
    id: &str,
    reviews: u64,
) -> Result<(), WorklistError> {
    let text = std::fs::read_to_string(&cfg.file).map_err(WorklistError::io(&cfg.file))?;
    let mut doc: Value = serde_json::from_str(&text)
        .map_err(|e| WorklistError::Invalid(format!("{}: {e}", cfg.file.display())))?;
    let arr = stories_rules::stories_array_mut(&mut doc)
        .ok_or_else(|| WorklistError::Invalid(format!("{}: no stories", cfg.file.display())))?;
    for s in arr.iter_mut() {
        if s.get("id").and_then(Value::as_str) == Some(id)
            && let Some(o) = s.as_object_mut()
        {
            o.insert("passes".into(), true.into());
            o.insert("reviewStatus".into(), APPROVED.into());
            let note = format!("auto-approved by taskdaemon after {reviews} reviews (review cap)");
            let notes = match o.get("notes").and_then(Value::as_str) {
                Some(n) if !n.trim().is_empty() => format!("{n}\n{note}"),
                _ => note,
            };
            o.insert("notes".into(), notes.into());
        }
    }
    let mut out =
        serde_json::to_string_pretty(&doc).map_err(|e| WorklistError::Invalid(e.to_string()))?;
    out.push('\n');
    write_atomic(&cfg.file, out.as_bytes()).map_err(WorklistError::io(&cfg.file))?;
    commit_file(
        git,
        rel,
        &format!("taskdaemon: auto-approve {id} at the review cap"),
    )
}

/// Commit the stories file alone when git tracks it and it changed.
fn commit_file(git: &Git, rel: &Path, msg: &str) -> Result<(), WorklistError> {
    let tracked = git
        .call(&[
            "ls-files".as_ref(),
            "--error-unmatch".as_ref(),
            rel.as_os_str(),
        ])
        .output()?
        .status
        .success();
    if !tracked {
        return Ok(());
    }
    let unchanged = git
        .call(&[
            "diff".as_ref(),
            "--quiet".as_ref(),
            "HEAD".as_ref(),
            "--".as_ref(),
            rel.as_os_str(),
        ])
        .output()?
        .status
        .success();
    if unchanged {
        return Ok(());
    }
    git.call(&[
        "commit".as_ref(),
        "-q".as_ref(),
        "--no-verify".as_ref(),
        "-m".as_ref(),
        msg.as_ref(),
        "--only".as_ref(),
        "--".as_ref(),
        rel.as_os_str(),
    ])
    .text()?;
    Ok(())
}

fn story_block(s: &Story) -> String {
    let mut b = format!("### {}: {}\n", s.id, s.title);
    if !s.description.is_empty() {
        let _ = writeln!(b, "{}", s.description);
    }
    if !s.acceptance.is_empty() {
        let _ = writeln!(b, "Acceptance criteria:");
        for a in &s.acceptance {
            let _ = writeln!(b, "- {a}");
        }
    }
    if !s.depends_on.is_empty() {
        let _ = writeln!(b, "Depends on: {}", s.depends_on.join(", "));
    }
    if !s.notes.is_empty() {
        let _ = writeln!(b, "Notes: {}", s.notes);
    }
    b
}

/// The story's prompt with the evidence's rules (said once).
fn with_rules(prompt: String, rules: &str) -> String {
    if rules.is_empty() {
        prompt
    } else {
        format!("{prompt}\n\n{rules}\n")
    }
}

fn story_prompt(
    cfg: &StoriesConfig,
    rel: &Path,
    stories: &[Story],
    mode: &Mode,
    previous_error: Option<&str>,
) -> String {
    let file = rel.display();
    let mut p = String::new();
    let story = mode
        .story()
        .and_then(|id| stories.iter().find(|s| s.id == id));
    match (mode, story) {
        (Mode::Implement(_), Some(s)) => {
            let _ = writeln!(
                p,
                "You implement ONE user story of {file} (mode: implement). A fresh agent gets the next step.\n\n{}",
                story_block(s)
            );
            if cfg.review {
                let _ = writeln!(
                    p,
                    "When the acceptance criteria hold and your work is committed, set this story's \"reviewStatus\" to \"{NEEDS_REVIEW}\" in {file}. Do NOT set \"passes\": a reviewer decides that. Change no other story."
                );
            } else {
                let _ = writeln!(
                    p,
                    "When the acceptance criteria hold and your work is committed, set this story's \"passes\" to true in {file}. Change no other story."
                );
            }
        }
        (Mode::Review(_), Some(s)) => {
            let _ = writeln!(
                p,
                "You review ONE user story of {file} (mode: review; review {} of at most {}).\n\n{}",
                s.review_count + 1,
                cfg.max_reviews,
                story_block(s)
            );
            let _ = writeln!(
                p,
                "Check the acceptance criteria against the code and its tests. Then, in {file}, raise this story's \"reviewCount\" by exactly 1 (to {}) and either approve it (\"reviewStatus\": \"{APPROVED}\", \"passes\": true) or request changes (\"reviewStatus\": \"{CHANGES_REQUESTED}\", \"passes\": false, \"reviewFeedback\": what must change). Do not change code or other stories.",
                s.review_count + 1
            );
        }
        (Mode::ReviewFix(_), Some(s)) => {
            let _ = writeln!(
                p,
                "A reviewer requested changes to ONE user story of {file} (mode: review-fix).\n\n{}\nReview feedback:\n{}\n",
                story_block(s),
                s.review_feedback.as_deref().unwrap_or("(none given)")
            );
            let _ = writeln!(
                p,
                "Make exactly those changes and commit them, then set this story's \"reviewStatus\" back to \"{NEEDS_REVIEW}\". Do not change \"passes\" or \"reviewCount\"."
            );
        }
        _ => {
            let _ = writeln!(
                p,
                "Every story in {file} passes. Check the whole once more; change no story's status."
            );
        }
    }
    if let Some(e) = previous_error {
        let _ = writeln!(p, "\n## The previous iteration was rejected\n\n{e}\n");
    }
    let _ = writeln!(p, "\n## All stories\n");
    for s in stories {
        let _ = writeln!(
            p,
            "- {} (priority {}): passes {}, reviewStatus {}, reviewCount {}",
            s.id,
            if s.priority == i64::MAX {
                "-".to_string()
            } else {
                s.priority.to_string()
            },
            s.passes,
            s.review_status.as_deref().unwrap_or("none"),
            s.review_count
        );
    }
    let _ = writeln!(
        p,
        "\nWhen every story passes{}, end your reply with <promise>COMPLETE</promise>.",
        if cfg.review { " and is approved" } else { "" }
    );
    p
}
