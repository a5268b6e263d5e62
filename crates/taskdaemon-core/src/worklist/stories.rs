//! `taskdaemon stories`' work source: user stories with a review cycle. Each iteration the
//! source picks the mode (implement, review, review-fix; a story at the review cap is
//! approved by the harness first), keeps the file as it was, and has the engine run a fresh
//! agent; then it checks the file's changes against the mode's transition rules. A
//! violation restores the file and its reason goes into the next prompt; an accepted
//! transition is committed, so the engine's commit-based stuck rule sees it (spec 2 §2).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::WorklistError;
use super::evidence::TaskEvidence;
use super::loop_prompt::{LoopPrompts, PromptVars};
use super::stories_rules::{self, APPROVED, CHANGES_REQUESTED, Mode, NEEDS_REVIEW, Story};
use crate::engine::decide::{Claim, Decision, WorkVerdict};
use crate::engine::events::WorkEvent;
use crate::engine::source::{Ending, Finished, Judged, Member, MemberVerdict, Next, Unit};
use crate::engine::{EngineContext, EngineError, Outcome, RunState, SourceSpec, WorkSource};
use crate::fsutil::write_atomic;
use crate::git::Git;
use crate::guards::Limit;
use crate::signals::{self, Signal};
use crate::telemetry::{WorkTally, WorkUnit};
use crate::workspace::Workspace;

/// The key of a stories run's baseline.
const EVIDENCE_ID: &str = "stories";

pub struct StoriesSource {
    file: PathBuf,
    /// The file relative to the repository.
    rel: PathBuf,
    repo: PathBuf,
    review: bool,
    max_reviews: u64,
    git: Git,
    ws: Workspace,
    evidence: TaskEvidence,
    prompts: LoopPrompts,
    /// The iteration running: its mode, the file and its stories as they were before it.
    mode: Option<Mode>,
    snapshot: String,
    stories: Vec<Story>,
    previous_error: Option<String>,
    /// The harness's guidance for the next prompt, until an agent has seen it.
    note: Option<String>,
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

impl StoriesSource {
    /// The source of the run `st` (its config names the stories file).
    pub fn open(st: &RunState) -> Result<StoriesSource, WorklistError> {
        let cfg = &st.config;
        let SourceSpec::Stories {
            file,
            review,
            max_reviews,
        } = &cfg.source
        else {
            return Err(WorklistError::Invalid(
                "the run's config names no stories file".into(),
            ));
        };
        let repo = cfg.workdir.clone();
        let (snapshot, stories) = load(file)?;
        Ok(StoriesSource {
            rel: file.strip_prefix(&repo).unwrap_or(file).to_path_buf(),
            evidence: TaskEvidence::new(&repo, EVIDENCE_ID, cfg.allow_test_changes, None)?,
            prompts: LoopPrompts::load(&repo)?,
            git: Git::new(&repo),
            ws: Workspace::new(&repo),
            file: file.clone(),
            review: *review,
            max_reviews: *max_reviews,
            repo,
            mode: None,
            snapshot,
            stories,
            previous_error: None,
            note: None,
        })
    }

    /// The next iteration's mode (a story at the review cap approved by the harness first),
    /// with the file as it is then. `None`: no story can start.
    fn next_mode(&mut self, ctx: &EngineContext) -> Result<Option<Mode>, WorklistError> {
        loop {
            (self.snapshot, self.stories) = load(&self.file)?;
            let Some(mode) = stories_rules::choose(&self.stories, self.review) else {
                return Ok(None);
            };
            // The review cap: the harness approves, with a note.
            if let Mode::Review(id) = &mode
                && let Some(s) = self.stories.iter().find(|s| &s.id == id)
                && s.review_count >= self.max_reviews
            {
                let reviews = s.review_count;
                self.auto_approve(id, reviews)?;
                ctx.events.work(WorkEvent::StoryAutoApproved {
                    story_id: id.clone(),
                    reviews: reviews as u32,
                });
                continue;
            }
            return Ok(Some(mode));
        }
    }

    /// Check the file's changes against the mode's rules (a violation restores it); the
    /// claim, and whether the run is complete (every story done and the agent said so).
    fn judge_file(
        &mut self,
        n: u32,
        mode: &Mode,
        words: &str,
        ctx: &EngineContext,
    ) -> Result<(Claim, bool), WorklistError> {
        let after_text = std::fs::read_to_string(&self.file).unwrap_or_default();
        let verdict = stories_rules::parse(&after_text)
            .map_err(|m| format!("{} is broken after the iteration: {m}", self.rel.display()))
            .and_then(|after| {
                stories_rules::check(mode, &self.stories, &after, self.review).map(|c| (after, c))
            })
            .map_err(|reason| (reason, Claim::Rejected))
            .and_then(|ok| {
                let (failures, warnings) = self.evidence.check(EVIDENCE_ID, &self.repo, None);
                warnings.into_iter().for_each(|w| ctx.events.warn(w));
                if failures.is_empty() {
                    Ok(ok)
                } else {
                    Err((super::verify::reason(&failures), Claim::Tampered))
                }
            });
        let said_complete = matches!(
            signals::scan(words, "COMPLETE").signal,
            Some(Signal::Complete)
        );
        let (after, changes) = match verdict {
            Err((reason, claim)) => {
                self.restore(n)?;
                ctx.events.work(WorkEvent::StoryRejected {
                    iteration: n,
                    mode: mode.name().into(),
                    reason: reason.clone(),
                });
                self.previous_error = Some(format!(
                    "Iteration {n} ({}) was rejected and {} was restored to how it was before it: {reason}",
                    mode.name(),
                    self.rel.display()
                ));
                return Ok((claim, false));
            }
            Ok(ok) => ok,
        };
        ctx.events.work(WorkEvent::StoryAccepted {
            iteration: n,
            mode: mode.name().into(),
            changes,
        });
        self.previous_error = None;
        // The accepted transition is work: committed (when the agent did not), so HEAD
        // moves.
        commit_file(
            &self.git,
            &self.rel,
            &format!(
                "taskdaemon: {} {} (iteration {n})",
                mode.name(),
                mode.story().unwrap_or("stories")
            ),
        )?;
        let all_done = after.iter().all(|s| s.done(self.review));
        if said_complete && !all_done {
            self.previous_error = Some(self.reject_complete(n, &after, ctx));
        }
        Ok((Claim::Accepted, said_complete && all_done))
    }

    /// Put the stories file back as it was before a rejected iteration, and commit it.
    fn restore(&self, n: u32) -> Result<(), WorklistError> {
        if std::fs::read_to_string(&self.file).ok().as_deref() == Some(self.snapshot.as_str()) {
            return Ok(());
        }
        write_atomic(&self.file, self.snapshot.as_bytes())
            .map_err(WorklistError::io(&self.file))?;
        commit_file(
            &self.git,
            &self.rel,
            &format!(
                "taskdaemon: restore {} (rejected iteration {n})",
                self.rel.display()
            ),
        )
    }

    /// COMPLETE said while stories remain open: warn, and the note for the next prompt.
    fn reject_complete(&self, n: u32, after: &[Story], ctx: &EngineContext) -> String {
        let open: Vec<&str> = after
            .iter()
            .filter(|s| !s.done(self.review))
            .map(|s| s.id.as_str())
            .collect();
        ctx.events.warn(format!(
            "iteration {n}: COMPLETE rejected: not done: {}",
            open.join(", ")
        ));
        format!(
            "COMPLETE was said, but these stories are not done yet: {}",
            open.join(", ")
        )
    }

    /// The failure when stories remain but every one waits on a story that does not pass.
    fn no_story_can_start(&self) -> Outcome {
        let waiting: Vec<String> = self
            .stories
            .iter()
            .filter(|s| !s.done(self.review))
            .map(|s| format!("{} (depends on {})", s.id, s.depends_on.join(", ")))
            .collect();
        Outcome::Failed {
            reason: format!(
                "no story can start: {} wait on stories that do not pass\n  hint: fix `dependsOn` in {}",
                waiting.join("; "),
                self.file.display()
            ),
        }
    }

    fn auto_approve(&self, id: &str, reviews: u64) -> Result<(), WorklistError> {
        auto_approve(&self.file, &self.git, &self.rel, id, reviews)
    }

    fn story_prompt(&self, mode: &Mode) -> String {
        story_prompt(
            &PromptInput {
                rel: &self.rel,
                review: self.review,
                max_reviews: self.max_reviews,
            },
            &self.stories,
            mode,
            self.previous_error.as_deref(),
        )
    }

    fn passing(&self) -> (usize, usize) {
        let stories = load(&self.file).map(|(_, s)| s).unwrap_or_default();
        (
            stories.iter().filter(|s| s.done(self.review)).count(),
            stories.len(),
        )
    }
}

impl WorkSource for StoriesSource {
    async fn start(
        &mut self,
        _st: &mut RunState,
        _resumed: bool,
        ctx: &EngineContext,
        _cancel: &CancellationToken,
    ) -> Result<Option<Outcome>, EngineError> {
        self.git.ensure_excluded(&[".ralph/stories-logs/"])?;
        self.evidence.record(EVIDENCE_ID, "")?;
        if self.evidence.allow {
            ctx.events.warn("--allow-test-changes: the evidence protection is OFF for this run: deleted or skipped tests are only warned about");
        }
        Ok(None)
    }

    async fn next(
        &mut self,
        st: &mut RunState,
        n: u32,
        ctx: &EngineContext,
        _cancel: &CancellationToken,
    ) -> Result<Next, EngineError> {
        let Some(mode) = self.next_mode(ctx)? else {
            let (passing, total) = self.passing();
            return Ok(Next::Done(if passing == total {
                Outcome::Complete { verified: true }
            } else {
                self.no_story_can_start()
            }));
        };
        let decision = super::answered(&self.ws)?;
        let text = with_rules(self.story_prompt(&mode), &self.evidence.rules(EVIDENCE_ID));
        let loop_name = loop_type(&mode);
        let prompt = self.prompts.render(
            loop_name,
            &PromptVars {
                task: &text,
                decision: decision.as_deref(),
                iteration: n,
                max_iterations: st.config.max_iterations,
                workdir: &self.repo,
            },
        )?;
        let prompt_file = self.ws.prompt_file(n);
        let announce = vec![WorkEvent::StoryIteration {
            iteration: n,
            mode: mode.name().into(),
            story_id: mode.story().map(str::to_string),
            prompt_file: prompt_file.display().to_string(),
        }];
        let member = Member {
            label: Some(mode.story().unwrap_or("stories").to_string()),
            mode: mode.name().to_string(),
            cwd: self.repo.clone(),
            prompt,
            prompt_file,
            log: self.ws.iteration_log(n),
            env: vec![
                ("TASKDAEMON_STORIES_FILE".into(), self.file.clone().into()),
                ("TASKDAEMON_STORY_MODE".into(), mode.name().into()),
                (
                    "TASKDAEMON_STORY_ID".into(),
                    mode.story().unwrap_or("").into(),
                ),
            ],
            system_prompt: None,
            notes: vec![format!(
                "stories: {} {}",
                mode.name(),
                mode.story().unwrap_or("")
            )],
        };
        self.mode = Some(mode);
        Ok(Next::Work(Unit {
            members: vec![member],
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
        _cancel: &CancellationToken,
    ) -> Result<Judged, EngineError> {
        self.note = None;
        let (Some(mode), Some(f)) = (self.mode.clone(), done.first()) else {
            return Ok(Judged::default());
        };
        let words = f.run.parsed.words.clone();
        let n = st.iterations_done + 1;
        let mut j = Judged::default();
        match signals::scan(&words, "COMPLETE").signal {
            Some(s @ (Signal::Blocked(_) | Signal::Decide(_))) => {
                // The iteration did not happen for the file: a BLOCKED review keeps the
                // story's reviewStatus and reviewCount.
                self.restore(n)?;
                j.signal = Some(s);
                j.members = vec![MemberVerdict::default()];
            }
            _ => {
                let (claim, complete) = if f.run.agent.timed_out || f.no_work.is_some() {
                    self.restore(n)?;
                    self.previous_error = Some(format!(
                        "Iteration {n} ({}) did not finish: {}; {} was restored to how it was before it",
                        mode.name(),
                        f.no_work
                            .as_deref()
                            .unwrap_or("the agent was stopped at the iteration timeout"),
                        self.rel.display()
                    ));
                    (Claim::Rejected, false)
                } else {
                    self.judge_file(n, &mode, &words, ctx)?
                };
                j.work = Some(WorkVerdict { claim, complete });
                j.members = vec![MemberVerdict {
                    claim: Some(claim),
                    commit: None,
                }];
                // An accepted transition's commit is work; the harness's restore of a
                // rejected one is not (what the agent committed still counts).
                j.head_after = match claim {
                    Claim::Accepted => self.git.head()?,
                    _ => head,
                };
                return Ok(j);
            }
        }
        j.head_after = head;
        Ok(j)
    }

    fn note_for_next(&mut self, note: &str) {
        self.previous_error = Some(note.to_string());
    }

    fn abandon(&mut self, _: &Unit, _: &[usize], _: &EngineContext) -> Result<(), EngineError> {
        if let Some(mode) = &self.mode {
            let _ = mode;
            // A member that waits runs again on the file as it was.
            if std::fs::read_to_string(&self.file).ok().as_deref() != Some(self.snapshot.as_str()) {
                write_atomic(&self.file, self.snapshot.as_bytes())
                    .map_err(WorklistError::io(&self.file))?;
            }
        }
        Ok(())
    }

    fn settle(
        &mut self,
        _: &mut RunState,
        _: &Decision,
        _: &EngineContext,
    ) -> Result<Option<Outcome>, EngineError> {
        Ok(None)
    }

    fn finish(
        &mut self,
        _st: &RunState,
        outcome: &Outcome,
        _ctx: &EngineContext,
    ) -> Result<Ending, EngineError> {
        let (_, total) = self.passing();
        let detail = match outcome {
            Outcome::Complete { .. } => format!("COMPLETE: all {total} stories pass"),
            Outcome::LimitReached {
                limit: Limit::MaxIterations,
            } => "max iterations reached before every story passed\n  hint: run `taskdaemon stories` again (it continues from the file), or raise --max-iterations".into(),
            Outcome::LimitReached { limit } => super::limit_detail(*limit, "stories"),
            o @ (Outcome::Blocked { .. } | Outcome::Decide { .. } | Outcome::Stuck { .. }) => {
                super::stop_detail(o, "stories").unwrap_or_default()
            }
            Outcome::Interrupted => "interrupted; the file keeps every accepted change. Run `taskdaemon stories` again to continue".into(),
            other => other.detail(),
        };
        Ok(Ending {
            detail: Some(detail),
        })
    }

    fn tally(&self) -> Option<WorkTally> {
        let (done, total) = self.passing();
        Some(WorkTally {
            unit: WorkUnit::Stories,
            done: done as u32,
            total: total as u32,
        })
    }

    fn describe(&self, _resumed: bool) -> Option<String> {
        let (passing, total) = self.passing();
        Some(format!(
            "stories {} · {passing} of {total} pass · {}",
            self.file.display(),
            if self.review {
                format!(
                    "review cycle (at most {} reviews a story)",
                    self.max_reviews
                )
            } else {
                "no review".into()
            }
        ))
    }

    fn finished(&mut self, outcome: &Outcome, detail: &str, ctx: &EngineContext) {
        let (passing, stories) = self.passing();
        ctx.events.work(WorkEvent::StoriesFinished {
            outcome: outcome.label().into(),
            exit_code: outcome.exit_code(),
            detail: detail.to_string(),
            passing,
            stories,
        });
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

/// Approve `id` in the file (keeping every other byte's meaning), with a note.
fn auto_approve(
    file: &Path,
    git: &Git,
    rel: &Path,
    id: &str,
    reviews: u64,
) -> Result<(), WorklistError> {
    let text = std::fs::read_to_string(file).map_err(WorklistError::io(file))?;
    let mut doc: Value = serde_json::from_str(&text)
        .map_err(|e| WorklistError::Invalid(format!("{}: {e}", file.display())))?;
    let arr = stories_rules::stories_array_mut(&mut doc)
        .ok_or_else(|| WorklistError::Invalid(format!("{}: no stories", file.display())))?;
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
    write_atomic(file, out.as_bytes()).map_err(WorklistError::io(file))?;
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
    // The user's hooks see the commit (README, "Git hooks"), all but pre-commit/commit-msg.
    git.clone()
        .with_user_hooks()
        .call(&[
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

/// What the story prompt needs to know of the run.
struct PromptInput<'a> {
    rel: &'a Path,
    review: bool,
    max_reviews: u64,
}

fn story_prompt(
    cfg: &PromptInput<'_>,
    stories: &[Story],
    mode: &Mode,
    previous_error: Option<&str>,
) -> String {
    let rel = cfg.rel;
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
