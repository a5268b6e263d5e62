//! The phase gate (spec 4): `.ralph/phase.txt` is `plan` or `build`, and only the harness
//! moves it. While the phase is `plan` and the plan file has content, the plan is validated
//! at the top of each iteration (valid → `build`, with word in `feedback.md`; invalid → the
//! problems in `feedback.md`), and a completion claim is swallowed. Without a plan the gate
//! is inert: tasks pass straight through.

use std::path::{Path, PathBuf};

use crate::fsutil::{read_optional, write_atomic};
use crate::gates::contract::Contract;
use crate::lifecycle::plan::{MarkerKind, Plan, PlanProblem};
use crate::lifecycle::plan_update::task_requirements;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Plan,
    Build,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Plan => "plan",
            Phase::Build => "build",
        }
    }
}

/// What the top-of-iteration check did.
#[derive(Debug, Clone, PartialEq)]
pub enum PhaseStep {
    /// Build phase already, or no plan with content: nothing to do.
    Inert,
    /// The plan was valid: now `build`.
    Flipped { plan: PathBuf },
    /// The plan has problems: still `plan`.
    Invalid {
        plan: PathBuf,
        problems: Vec<PlanProblem>,
    },
}

/// The heading of the flip's word in `feedback.md`.
const VALIDATED: &str = "## Plan validated";

pub fn phase_file(workdir: &Path) -> PathBuf {
    workdir.join(".ralph").join("phase.txt")
}

pub fn read_phase(workdir: &Path) -> std::io::Result<Phase> {
    Ok(match read_optional(&phase_file(workdir))? {
        Some(t) if t.trim() == "build" => Phase::Build,
        _ => Phase::Plan,
    })
}

pub fn write_phase(workdir: &Path, phase: Phase) -> std::io::Result<()> {
    write_atomic(
        &phase_file(workdir),
        format!("{}\n", phase.as_str()).as_bytes(),
    )
}

/// The plan file, when it has content.
fn plan_with_content(workdir: &Path) -> std::io::Result<Option<(PathBuf, String)>> {
    let Some(path) = Plan::locate(workdir) else {
        return Ok(None);
    };
    // Never through a link: a cloned repository cannot put a file of the user's into a prompt.
    let Some(text) = crate::fsutil::read_optional(&path)? else {
        return Ok(None);
    };
    Ok((!text.trim().is_empty()).then_some((path, text)))
}

/// What a mutation task's plan still lacks to cover task `n` (issue 12): every requirement
/// of `.ralph/task.md` needs a `TASK-n` marker of its kind in a section that names files,
/// and what the task preserves needs a `PRESERVED` marker in such a section.
pub fn coverage(workdir: &Path, plan: &Plan, n: u32) -> std::io::Result<Vec<PlanProblem>> {
    let ralph = workdir.join(".ralph");
    let Some(task_md) = read_optional(&ralph.join("task.md"))? else {
        return Ok(Vec::new());
    };
    let is_mutation = task_md.lines().any(|l| {
        l.strip_prefix("Type:")
            .is_some_and(|t| t.trim() == "mutation")
    });
    let (counter, reqs) = task_requirements(&task_md);
    if !is_mutation || counter != Some(n) {
        return Ok(Vec::new());
    }
    let with_files = |kind: MarkerKind| {
        plan.marked_for(n)
            .filter(|(s, m)| m.kind == kind && !s.files.is_empty())
            .count()
    };
    let mut out = Vec::new();
    for kind in [
        MarkerKind::Add,
        MarkerKind::Modify,
        MarkerKind::Fix,
        MarkerKind::Remove,
    ] {
        let wanted: Vec<&str> = reqs
            .iter()
            .filter(|r| r.kind == kind)
            .map(|r| r.text.as_str())
            .collect();
        let have = with_files(kind);
        for text in wanted.iter().skip(have) {
            out.push(PlanProblem {
                line: 1,
                message: format!(
                    "task {n}'s requirement `[{}] {text}` has no `TASK-{n} [{}]` marker in a section that names its files (`Files: path`)",
                    kind.label(),
                    kind.label()
                ),
            });
        }
    }
    let preserves = Contract::load(&ralph, n)?.is_some_and(|c| {
        c.requirements
            .iter()
            .any(|r| r.check == crate::gates::contract::Check::Preserve)
    });
    if preserves && with_files(MarkerKind::Preserved) == 0 {
        out.push(PlanProblem {
            line: 1,
            message: format!(
                "task {n} keeps existing items, but no section that names files carries `<!-- EXISTING n items PRESERVED -->` (put it in the section whose files hold them)"
            ),
        });
    }
    Ok(out)
}

/// The check at the top of an iteration; writes phase.txt and feedback.md. With `task`,
/// a mutation task's plan must also cover that task ([`coverage`]).
pub fn at_iteration_top(
    workdir: &Path,
    feedback: &Path,
    task: Option<u32>,
) -> std::io::Result<PhaseStep> {
    if read_phase(workdir)? == Phase::Build {
        // The word of the flip was for the iteration it started; it is not repeated.
        if read_optional(feedback)?.is_some_and(|f| f.starts_with(VALIDATED)) {
            write_atomic(feedback, b"")?;
        }
        return Ok(PhaseStep::Inert);
    }
    let Some((path, text)) = plan_with_content(workdir)? else {
        return Ok(PhaseStep::Inert);
    };
    let (plan, parse_problems) = Plan::parse(&path, &text);
    let mut problems = plan.validate(parse_problems);
    if let Some(n) = task {
        problems.extend(coverage(workdir, &plan, n)?);
    }
    let shown = path
        .strip_prefix(workdir)
        .unwrap_or(&path)
        .display()
        .to_string();
    if problems.is_empty() {
        write_phase(workdir, Phase::Build)?;
        let sections: Vec<&str> = plan.sections.iter().map(|s| s.name.as_str()).collect();
        write_atomic(
            feedback,
            format!(
                "{VALIDATED}\n\n{shown} is valid ({} sections: {}). The phase is now BUILD: implement the plan, \
only in the sections it marks for this task; a completion claim is checked against its markers.\n",
                sections.len(),
                sections.join(", ")
            )
            .as_bytes(),
        )?;
        return Ok(PhaseStep::Flipped { plan: path });
    }
    let list: String = problems
        .iter()
        .map(|p| format!("- {shown}:{}: {}\n", p.line, p.message))
        .collect();
    write_atomic(
        feedback,
        format!("## Plan validation\n\n{shown} has problems:\n{list}\nFix the plan; the build phase starts once it is valid.\n")
            .as_bytes(),
    )?;
    Ok(PhaseStep::Invalid {
        plan: path,
        problems,
    })
}

/// Whether a completion claim must be swallowed: plan phase with a plan that has content.
pub fn swallows_completion(workdir: &Path) -> std::io::Result<bool> {
    Ok(read_phase(workdir)? == Phase::Plan && plan_with_content(workdir)?.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inert_without_plan_flips_on_valid_plan_stays_on_invalid() {
        let d = tempfile::tempdir().unwrap();
        let w = d.path();
        let fb = w.join(".ralph/feedback.md");
        assert_eq!(at_iteration_top(w, &fb, None).unwrap(), PhaseStep::Inert);
        assert!(!swallows_completion(w).unwrap());
        std::fs::create_dir_all(w.join(".ralph")).unwrap();
        std::fs::write(
            w.join(".ralph/plan.md"),
            "## a\n<!-- TASK-1 [BOGUS]: x -->\n",
        )
        .unwrap();
        assert!(swallows_completion(w).unwrap());
        assert!(matches!(
            at_iteration_top(w, &fb, None).unwrap(),
            PhaseStep::Invalid { .. }
        ));
        assert!(std::fs::read_to_string(&fb).unwrap().contains("plan.md:2:"));
        assert_eq!(read_phase(w).unwrap(), Phase::Plan);
        std::fs::write(w.join(".ralph/plan.md"), "## a\n<!-- TASK-1 [ADD]: x -->\n").unwrap();
        assert!(matches!(
            at_iteration_top(w, &fb, None).unwrap(),
            PhaseStep::Flipped { .. }
        ));
        assert_eq!(read_phase(w).unwrap(), Phase::Build);
        assert!(std::fs::read_to_string(&fb).unwrap().starts_with(VALIDATED));
        assert!(!swallows_completion(w).unwrap());
        assert_eq!(at_iteration_top(w, &fb, None).unwrap(), PhaseStep::Inert);
        assert_eq!(
            std::fs::read_to_string(&fb).unwrap(),
            "",
            "the flip's word is shown once"
        );
    }
}
