//! The template variables of one iteration. Only variables the template names are computed:
//! `git status` and `git diff` cost tens of milliseconds on a large repository.

use serde_json::{Map, Value, json};

use super::state::RunState;
use crate::fsutil::bound_text;
use crate::git::{Git, GitError};
use crate::loops::PromptTemplate;
use crate::workspace::{Workspace, WorkspaceError};

/// Bounds on what goes into a prompt (bytes).
const MAX_ERRORS: usize = 8 * 1024;
const MAX_DIFF: usize = 16 * 1024;
const MAX_STATUS: usize = 8 * 1024;
const MAX_STATE: usize = 4 * 1024;
/// Harness notes of this many earlier iterations go into `progress`.
pub const PROGRESS_NOTES: usize = 10;

#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
}

/// Where the task stands with its plan, for [`plan_instructions`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanStage {
    /// No plan file.
    NoPlan,
    /// A plan exists; the phase is still `plan` (it does not cover this task yet).
    Planning,
    /// The plan was validated for this task: the phase is `build`.
    Building,
}

/// What the agent is told about the plan, by the task's type (spec 1 §5–§6) and where it
/// stands: a mutation updates the existing plan with markers (only while the phase is
/// `plan`: once it is `build` the block is one line), a fresh task writes one first, a
/// bugfix leaves it. Commands are written `"$TASKDAEMON_BIN" …`, which works in any shell.
pub fn plan_instructions(task_md: &str, stage: PlanStage) -> String {
    let field = |name: &str| {
        task_md
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_string())
            .unwrap_or_default()
    };
    let n = field("Counter:");
    let n = if n.is_empty() { "N".to_string() } else { n };
    let kind = field("Type:");
    if stage == PlanStage::Building && matches!(kind.as_str(), "mutation" | "fresh") {
        return format!(
            "## Build (the plan covers task {n})
Implement what the plan's `TASK-{n}` markers say, in the sections that carry them; leave sections marked `NO CHANGES for task-{n}` and the items marked PRESERVED as they are. At completion the harness checks the markers and task.md's \"Checks at completion\" against task-{n}-pre."
        );
    }
    match kind.as_str() {
        "mutation" if stage == PlanStage::NoPlan => format!(
            "## No plan yet (a mutation task)
There is no `.ralph/plan.md`; work from `.ralph/task.md`. Its \"Checks at completion\" are what the harness verifies against task-{n}-pre before a completion counts."
        ),
        "mutation" => format!(
            "## Plan update first (a mutation task: you are UPDATING the existing plan, not starting over)
The phase is PLAN until the plan covers task {n}; a completion claim before that does not count.
1. Read `.ralph/plan.md` (or `plan.tsx`), `.ralph/task.md` and `.ralph/task-history.md`.
2. For each requirement, find the section that lists the files it changes and add a marker comment there: `<!-- TASK-{n} [ADD|MODIFY|FIX|REMOVE]: description -->`. An ADD says how many new items: `<!-- TASK-{n} [ADD]: 2 nighttime flavors -->`. A FIX may name its proof: `… check: npm test -- toggle`.
3. The section an ADD extends gets `<!-- EXISTING 8 flavors PRESERVED -->`, with today's count.
4. Sections the task does not concern get `<!-- NO CHANGES for task-{n} -->` (never one that also has a TASK-{n} marker).
5. A new area gets a new `## section` with `Files: …` and an [ADD] marker. Never remove a section without a [REMOVE] requirement.
6. Every section names its files: `Files: src/data/flavors.ts`.
`\"$TASKDAEMON_BIN\" plan update` writes these markers from task.md for you (check what it wrote); `\"$TASKDAEMON_BIN\" plan validate` checks the plan. The harness switches to BUILD at the top of the next iteration once every requirement has its marker in a section with files."
        ),
        "fresh" => format!(
            "## Plan first (a fresh task)
Write `.ralph/plan.md` before building: one `## section` per part of the work, each with `Files: …` and a marker `<!-- TASK-{n} [ADD]: what it adds -->`. The harness validates the plan at the top of the next iteration and then switches to the build phase; a completion claim before that is ignored. `\"$TASKDAEMON_BIN\" plan validate` checks it."
        ),
        "bugfix" => "## A bug fix
Do not update the plan: reproduce the bug, fix it, prove it with the tests, commit.".to_string(),
        _ => String::new(),
    }
}

/// Where the work tree's task stands with its plan.
fn plan_stage(workdir: &std::path::Path) -> PlanStage {
    if crate::lifecycle::plan::Plan::locate(workdir).is_none() {
        return PlanStage::NoPlan;
    }
    match crate::gates::phase::read_phase(workdir) {
        Ok(crate::gates::phase::Phase::Build) => PlanStage::Building,
        _ => PlanStage::Planning,
    }
}

pub fn variables(
    t: &PromptTemplate,
    st: &RunState,
    iteration: u32,
    decision: Option<&str>,
    ws: &Workspace,
    git: &Git,
) -> Result<Value, PromptError> {
    let cfg = &st.config;
    let mut m = Map::new();
    let mut set = |k: &str, v: Value| {
        m.insert(k.to_string(), v);
    };
    set("iteration", json!(iteration));
    set("max-iterations", json!(cfg.max_iterations));
    set("task-description", json!(cfg.task));
    set(
        "working-directory",
        json!(cfg.workdir.display().to_string()),
    );
    set("completion-promise", json!(cfg.completion_text()));
    set("decision", json!(decision.unwrap_or_default()));
    set(
        "previous-errors",
        json!(
            st.previous_errors
                .as_deref()
                .map(|e| bound_text(e, MAX_ERRORS))
                .unwrap_or_default()
        ),
    );
    let progress = if t.uses("progress") {
        let skip = st.progress.len().saturating_sub(PROGRESS_NOTES);
        st.progress[skip..].join("\n")
    } else {
        String::new()
    };
    set("progress", json!(progress));
    let state = if t.uses("current-state") {
        ws.read_progress_notes()?
            .map(|s| bound_text(s.trim(), MAX_STATE))
            .unwrap_or_default()
    } else {
        String::new()
    };
    set("current-state", json!(state));
    let feedback = if t.uses("feedback") {
        ws.read_feedback()?
            .map(|s| bound_text(s.trim(), MAX_ERRORS))
            .unwrap_or_default()
    } else {
        String::new()
    };
    set("feedback", json!(feedback));
    let plan_instructions = if t.uses("plan-instructions") && st.task.is_some() {
        ws.read_task_md()?
            .map(|t| plan_instructions(&t, plan_stage(&cfg.workdir)))
            .unwrap_or_default()
    } else {
        String::new()
    };
    set("plan-instructions", json!(plan_instructions));
    let rules = st.evidence.as_ref().map(|b| b.rules()).unwrap_or_default();
    set("evidence-rules", json!(rules));
    let status = if t.uses("git-status") {
        bound_text(&git.status_porcelain()?, MAX_STATUS)
    } else {
        String::new()
    };
    set("git-status", json!(status));
    let diff = if t.uses("git-diff") {
        bound_text(&diff_since_start(st, git)?, MAX_DIFF)
    } else {
        String::new()
    };
    set("git-diff", json!(diff));
    for (k, v) in cascade_variables(t, st, iteration) {
        m.insert(k, v);
    }
    Ok(Value::Object(m))
}

/// The change since the run (a task's run: the task) started, committed or not: an agent
/// that commits every iteration still sees its work. Untracked files are not in it.
fn diff_since_start(st: &RunState, git: &Git) -> Result<String, GitError> {
    match &st.start_head {
        Some(start) if git.head()?.is_some() => {
            let diff = git.run(&[
                "diff",
                "--no-ext-diff",
                start.as_str(),
                "--stat",
                "--patch",
                "--",
            ])?;
            Ok(format!(
                "(changes since {} — the commit this run started from)\n{diff}",
                start.chars().take(12).collect::<String>()
            ))
        }
        _ => git.diff_head(),
    }
}

/// Documents put into a prompt whole are bounded to this many bytes.
const MAX_DOC: usize = 64 * 1024;

/// The review pass of iteration `n` of a plan loop (1…5; later iterations repeat pass 5).
pub fn review_pass(n: u32) -> u32 {
    n.clamp(1, crate::docs::REVIEW_PASSES)
}

/// The variables of the cascade's loops (spec 3 §4): the run's spawned context, and what is
/// read afresh each iteration from the files it names (the plan, the specs so far, the spec).
fn cascade_variables(t: &PromptTemplate, st: &RunState, n: u32) -> Vec<(String, Value)> {
    let ctx = &st.config.context;
    let text = |k: &str| -> String {
        match ctx.get(k) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        }
    };
    let read = |k: &str| -> String {
        let path = text(k);
        if path.is_empty() {
            return String::new();
        }
        // Never through a link (the path may come from a record made in another clone).
        crate::fsutil::read_optional(std::path::Path::new(&path))
            .ok()
            .flatten()
            .map(|s| bound_text(s.trim(), MAX_DOC))
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    for k in [
        "user-request",
        "plan-file",
        "specs-dir",
        "spec-file",
        "phase-name",
        "phase-number",
        "completed-phases",
    ] {
        out.push((k.to_string(), json!(text(k))));
    }
    out.push(("review-pass".into(), json!(review_pass(n))));
    let plan = if t.uses("current-plan") || t.uses("plan-content") || t.uses("coverage-gaps") {
        read("plan-file")
    } else {
        String::new()
    };
    out.push(("current-plan".into(), json!(plan)));
    out.push(("plan-content".into(), json!(plan)));
    let spec = if t.uses("spec-content") {
        read("spec-file")
    } else {
        String::new()
    };
    out.push(("spec-content".into(), json!(spec)));
    let (mut existing, mut gaps) = (String::new(), String::new());
    let dir = text("specs-dir");
    if !dir.is_empty() && (t.uses("existing-specs") || t.uses("coverage-gaps")) {
        let (docs, _) = crate::docs::read_specs(std::path::Path::new(&dir));
        let mut written = String::new();
        for d in &docs {
            let name = d
                .file
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default();
            existing.push_str(&format!(
                "- {name}: {} (deps: {}; {} phase(s))\n",
                d.title,
                if d.deps.is_empty() {
                    "none".to_string()
                } else {
                    d.deps.join(", ")
                },
                d.phases.len()
            ));
            written.push_str(&d.title.to_lowercase());
            written.push('\n');
            written.push_str(&d.body.to_lowercase());
        }
        if !docs.is_empty() {
            for section in crate::docs::sections(&plan) {
                if !written.contains(&section.to_lowercase()) {
                    gaps.push_str(&format!("- {section}\n"));
                }
            }
        }
    }
    out.push(("existing-specs".into(), json!(existing.trim_end())));
    out.push(("coverage-gaps".into(), json!(gaps.trim_end())));
    out
}

#[cfg(test)]
mod tests {
    use super::{PlanStage, plan_instructions};

    #[test]
    fn plan_instructions_follow_the_task_type_and_the_phase() {
        let task = "# Task: x\nType: mutation\nPrevious: task-2-post\nCounter: 3\n";
        let m = plan_instructions(task, PlanStage::Planning);
        assert!(
            m.contains("`<!-- TASK-3 [ADD|MODIFY|FIX|REMOVE]: description -->`"),
            "{m}"
        );
        assert!(m.contains("NO CHANGES for task-3"));
        assert!(m.contains("`\"$TASKDAEMON_BIN\" plan update`"), "{m}");
        assert!(!m.contains("BUILD: implement"), "{m}");
        // Once the plan covers the task, the update block is not repeated.
        let b = plan_instructions(task, PlanStage::Building);
        assert!(b.starts_with("## Build (the plan covers task 3)"), "{b}");
        assert!(!b.contains("UPDATING"), "{b}");
        assert!(
            plan_instructions(task, PlanStage::NoPlan).contains("There is no `.ralph/plan.md`")
        );
        assert!(
            plan_instructions("Type: fresh\nCounter: 1\n", PlanStage::NoPlan)
                .contains("Plan first")
        );
        assert!(
            plan_instructions("Type: bugfix\n", PlanStage::Planning)
                .contains("Do not update the plan")
        );
        assert_eq!(
            plan_instructions("Type: pending\n", PlanStage::Planning),
            ""
        );
    }
}
