//! The gate pipeline a completion must pass after the validation command, in order: the
//! task's own requirements (`task:` gates of `.ralph/requirements.json`, against
//! `task-N-pre`, whatever the plan says), `phase` (a claim in the plan phase is swallowed
//! unless a requirement already fails), `plan validate`'s problems, then the `scope` gates
//! of the plan's markers for this task. Hard failures block completion and go into `feedback.md` with
//! "attempt n of 5"; the fifth consecutive rejection aborts the task (rolled back to
//! `task-N-pre`, exit 5). Soft failures are only reported.

use std::collections::HashMap;
use std::path::Path;

use tokio_util::sync::CancellationToken;

use super::state::{RunConfig, RunState};
use super::{EngineContext, EngineError, EngineEvent};
use crate::gates::contract::{Contract, check_contract};
use crate::gates::evidence::Tally;
use crate::gates::phase;
use crate::gates::scope::{GateResult, GitWorld, Severity, scope_gates};
use crate::gates::{Validation, run_validation};
use crate::git::Git;
use crate::git::snapshot::Snapshots;
use crate::lifecycle::plan::{MarkerKind, Plan, PlanProblem};
use crate::telemetry::IterationLog;
use crate::workspace::Workspace;

/// Consecutive rejected completions before the task is aborted.
pub const MAX_GATE_FAILURES: u32 = 5;

pub enum Verdict {
    Complete,
    /// Plan phase: the claim does not count; the next iteration validates the plan.
    Swallowed,
    Rejected {
        attempt: u32,
        /// The first blocking result's message.
        first: String,
        /// The agent changed its own evidence: the iteration counts toward stuck, commit or not.
        tampered: bool,
    },
    /// A requirement the harness cannot measure and the agent cannot make measurable: the
    /// person is asked (DECIDE).
    Ask {
        question: String,
    },
    Abort {
        reason: String,
    },
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> EngineError {
    move |source| EngineError::Io { what, source }
}

pub async fn gates(
    st: &mut RunState,
    n: u32,
    tally: Option<Tally>,
    ws: &Workspace,
    log: &mut IterationLog,
    ctx: &EngineContext,
    cancel: &CancellationToken,
) -> Result<Verdict, EngineError> {
    let cfg = &st.config.clone();
    let workdir = &cfg.workdir;
    let plan = read_plan(workdir)?;
    // The evidence first (issue 36), then the task's own requirements, whatever the plan
    // says (issue 12).
    let (mut results, evidence_diffs) = super::evidence::check(st, tally, ctx, n)?;
    let tampered = results.iter().any(GateResult::blocks);
    results.extend(contract(st, cfg, ws, plan.as_ref())?);
    results.extend(no_work(st, cfg)?);
    results.extend(summary_note(st, ws)?);
    let swallow =
        phase::swallows_completion(workdir).map_err(io("reading .ralph/phase.txt".into()))?;
    if swallow {
        ctx.events.emit(EngineEvent::Gate {
            iteration: n,
            gate: "phase".into(),
            passed: false,
            severity: Severity::Hard,
            message: "completion claimed in the plan phase: ignored; the plan is validated at the top of the next iteration".into(),
        });
        if !results.iter().any(GateResult::blocks) {
            return Ok(Verdict::Swallowed);
        }
    } else {
        results.extend(plan_problems(workdir, plan.as_ref()));
        results.extend(scope(st, cfg, plan.as_ref(), cancel).await?);
    }
    for r in results.iter_mut() {
        if r.severity == Severity::Ask && !r.passed && st.waived.contains(&waiver_key(r)) {
            r.passed = true;
            r.message = format!("accepted by a person's answer: {}", r.message);
        }
    }
    for r in &results {
        log.note(&format!(
            "gate {}: {}{}",
            r.gate,
            match (r.passed, r.severity) {
                (true, _) => "",
                (false, Severity::Hard | Severity::Ask) => "not met: ",
                (false, Severity::Soft) => "reminder: ",
            },
            r.message
        ));
        ctx.events.emit(EngineEvent::Gate {
            iteration: n,
            gate: r.gate.clone(),
            passed: r.passed,
            severity: r.severity,
            message: r.message.clone(),
        });
    }
    if let Some((keys, question)) = unmeasurable(&results) {
        st.gate_question = keys;
        return Ok(Verdict::Ask { question });
    }
    let hard: Vec<&GateResult> = results.iter().filter(|r| r.blocks()).collect();
    if hard.is_empty() {
        st.gate_failures = 0;
        return Ok(Verdict::Complete);
    }
    let first = hard[0].message.clone();
    st.gate_failures += 1;
    let attempt = st.gate_failures;
    if attempt >= MAX_GATE_FAILURES {
        let snaps = super::loop_snapshots(workdir, n, ctx, cancel)?;
        let cause = format!("{attempt} consecutive rejected completions (hard gate failures)");
        let rb = match crate::lifecycle::fail_task(&snaps, ws, st.task, &cause) {
            Err(e) if e.is_stopped() => {
                // Nothing was rolled back: the completion stays a rejected one, and a
                // resumed run fails the task at its next rejected completion.
                super::warn(
                    ctx,
                    &format!(
                        "iteration {n}: {cause}, but the task was not failed (its rollback was not begun): {e}"
                    ),
                );
                ws.write_feedback(&rejection_text(attempt, &results, swallow, &evidence_diffs))?;
                return Ok(Verdict::Rejected {
                    attempt,
                    first,
                    tampered,
                });
            }
            r => r?,
        };
        let reason = match rb {
            Some(r) => format!(
                "{cause}: {}; rolled back to {} (the state it replaced is saved as {})",
                hard[0].message, r.restored.tag, r.saved.tag
            ),
            None => format!(
                "{cause}: {}; not a task, so nothing was rolled back",
                hard[0].message
            ),
        };
        return Ok(Verdict::Abort { reason });
    }
    ws.write_feedback(&rejection_text(attempt, &results, swallow, &evidence_diffs))?;
    Ok(Verdict::Rejected {
        attempt,
        first,
        tampered,
    })
}

/// The blocking results the agent cannot fix (the harness cannot read the file they are
/// counted in; the person did not accept the work without them yet): their keys, and the
/// question for the person.
fn unmeasurable(results: &[GateResult]) -> Option<(Vec<String>, String)> {
    // What the agent can fix comes first: the person is asked only about what it cannot.
    if results
        .iter()
        .any(|r| r.blocks() && r.severity == Severity::Hard)
    {
        return None;
    }
    let asked: Vec<&GateResult> = results
        .iter()
        .filter(|r| r.blocks() && r.severity == Severity::Ask)
        .collect();
    if asked.is_empty() {
        return None;
    }
    let what: Vec<&str> = asked.iter().map(|r| r.message.as_str()).collect();
    Some((
        asked.iter().map(|r| waiver_key(r)).collect(),
        format!(
            "{} Answer `accept` to accept the work without {} (`taskdaemon answer accept`, then `taskdaemon run --resume`), or answer with what the agent should do instead.",
            what.join(" "),
            if asked.len() == 1 {
                "this check"
            } else {
                "these checks"
            }
        ),
    ))
}

/// A person's answer to the gates' question: `accept` waives that requirement for the
/// rest of the run; any other answer is guidance for the agent (it is in the prompt).
pub fn take_answer(st: &mut RunState, answer: Option<&str>) {
    let Some(answer) = answer else {
        return;
    };
    let asked = std::mem::take(&mut st.gate_question);
    let word = answer.trim().trim_end_matches(['.', '!']).to_lowercase();
    if word == "accept" {
        st.waived.extend(asked);
    }
}

/// What a person's `accept` of a gate question is remembered by.
fn waiver_key(r: &GateResult) -> String {
    format!("{}: {}", r.gate, r.message)
}

/// `feedback.md` after a rejected completion.
fn rejection_text(
    attempt: u32,
    results: &[GateResult],
    plan_phase: bool,
    evidence: &str,
) -> String {
    let list: String = results
        .iter()
        .filter(|r| r.blocks())
        .map(|r| format!("- {}\n", r.message))
        .collect();
    let soft: String = results
        .iter()
        .filter(|r| !r.passed && r.severity == Severity::Soft)
        .map(|r| format!("- {}\n", r.message))
        .collect();
    format!(
        "## Gate failures (attempt {attempt} of {MAX_GATE_FAILURES})\n\n\
The validation passed, but the harness's checks of this task are not met, so the task is not done:\n{list}{evidence}{}{}\n\
Fix these first. After {MAX_GATE_FAILURES} rejected completions in a row the run fails (a task is rolled back to task-N-pre).\n",
        if soft.is_empty() {
            String::new()
        } else {
            format!("\nAlso check (warnings):\n{soft}")
        },
        if plan_phase {
            "\nThe plan does not cover this task yet either: still the plan phase (see the plan's problems at the top of the next iteration).\n"
        } else {
            ""
        }
    )
}

/// A phase loop completes only with work: at least one commit since the run started,
/// unless its phase is a no-op (its name says `no-op`).
fn no_work(st: &RunState, cfg: &RunConfig) -> Result<Option<GateResult>, EngineError> {
    if cfg.loop_name != "phase" {
        return Ok(None);
    }
    let name = match cfg.context.get("phase-name") {
        Some(serde_json::Value::String(s)) => s.to_lowercase(),
        _ => String::new(),
    };
    if name.contains("no-op") || name.contains("noop") {
        return Ok(None);
    }
    let head = Git::new(&cfg.workdir).head()?;
    if head.is_some() && head != st.start_head {
        return Ok(None);
    }
    let at = st
        .start_head
        .as_deref()
        .map(|h| h.chars().take(12).collect::<String>())
        .unwrap_or_else(|| "no commit".into());
    Ok(Some(GateResult {
        gate: "work".into(),
        severity: Severity::Hard,
        passed: false,
        message: format!(
            "no commit since this phase started (HEAD is still {at}): a phase completes only with committed work. Implement the phase and commit it; if the phase truly needs no change, its name in the spec must say `no-op`."
        ),
    }))
}

/// Spec 1 §3's `summary.md`: a task's completion without one is reported (a warning that
/// goes into the feedback of a rejection), not refused: validated work is not rejected for
/// a note, and the history line falls back to the task's message.
fn summary_note(st: &RunState, ws: &Workspace) -> Result<Option<GateResult>, EngineError> {
    if st.task.is_none() {
        return Ok(None);
    }
    let path = ws.root().join("summary.md");
    let text = crate::fsutil::read_optional(&path)
        .map_err(io("reading .ralph/summary.md".into()))?
        .unwrap_or_default();
    Ok(text.trim().is_empty().then(|| GateResult {
        gate: "summary".into(),
        severity: Severity::Soft,
        passed: false,
        message: "`.ralph/summary.md` is empty: put a one-line summary of what this task did there (it goes into the task history)".into(),
    }))
}

/// The plan of the work tree, parsed, with its parse problems.
fn read_plan(workdir: &Path) -> Result<Option<(Plan, Vec<PlanProblem>)>, EngineError> {
    let Some(path) = Plan::locate(workdir) else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(&path).map_err(io(format!("reading {}", path.display())))?;
    if text.trim().is_empty() {
        return Ok(None);
    }
    Ok(Some(Plan::parse(&path, &text)))
}

/// `plan validate`'s problems, each a hard failure at every completion.
fn plan_problems(workdir: &Path, plan: Option<&(Plan, Vec<PlanProblem>)>) -> Vec<GateResult> {
    let Some((plan, parse)) = plan else {
        return Vec::new();
    };
    let shown = plan
        .path
        .strip_prefix(workdir)
        .unwrap_or(&plan.path)
        .display()
        .to_string();
    plan.validate(parse.clone())
        .into_iter()
        .map(|p| GateResult {
            gate: "plan".into(),
            severity: Severity::Hard,
            passed: false,
            message: format!(
                "{shown}:{}: {} (`taskdaemon plan validate`)",
                p.line, p.message
            ),
        })
        .collect()
}

/// The baseline of the run's task: its `task-N-pre` snapshot.
fn baseline(st: &RunState, workdir: &Path) -> Result<Option<(u32, GitWorld)>, EngineError> {
    let Some(task) = st.task else {
        return Ok(None);
    };
    let snaps = Snapshots::open(workdir)?;
    let Some(pre) = snaps.task_pre(task)? else {
        return Ok(None);
    };
    Ok(Some((
        task,
        GitWorld {
            workdir: workdir.to_path_buf(),
            git: Git::new(workdir),
            baseline: format!("{}^{{commit}}", pre.commit),
            checks: HashMap::new(),
        },
    )))
}

/// The task's requirements checked against `task-N-pre` (none outside a task).
fn contract(
    st: &RunState,
    cfg: &RunConfig,
    ws: &Workspace,
    plan: Option<&(Plan, Vec<PlanProblem>)>,
) -> Result<Vec<GateResult>, EngineError> {
    let Some((task, world)) = baseline(st, &cfg.workdir)? else {
        return Ok(Vec::new());
    };
    let Some(c) =
        Contract::load(ws.root(), task).map_err(io("reading .ralph/requirements.json".into()))?
    else {
        return Ok(Vec::new());
    };
    Ok(check_contract(&c, plan.map(|(p, _)| p), &world))
}

/// The scope gates for the run's task, when it has a task, a `task-N-pre` snapshot and a
/// plan with markers for it.
async fn scope(
    st: &RunState,
    cfg: &RunConfig,
    plan: Option<&(Plan, Vec<PlanProblem>)>,
    cancel: &CancellationToken,
) -> Result<Vec<GateResult>, EngineError> {
    let Some((plan, _)) = plan else {
        return Ok(Vec::new());
    };
    let workdir = &cfg.workdir;
    let Some((task, mut world)) = baseline(st, workdir)? else {
        return Ok(Vec::new());
    };
    if plan.marked_for(task).next().is_none() {
        return Ok(Vec::new());
    }
    for (_, m) in plan.marked_for(task) {
        if m.kind == MarkerKind::Fix
            && let Some(cmd) = &m.check
            && !world.checks.contains_key(cmd)
        {
            let v = run_validation(
                Validation {
                    command: cmd,
                    dir: workdir,
                    env: Vec::new(),
                    success_exit_code: 0,
                    timeout: cfg.iteration_timeout(),
                    grace: cfg.kill_grace(),
                    sandbox: &cfg.sandbox,
                },
                cancel,
                |_| {},
            )
            .await
            .map_err(io(format!("running the FIX check `{cmd}`")))?;
            world.checks.insert(cmd.clone(), v.passed);
        }
    }
    Ok(scope_gates(plan, task, &world))
}
