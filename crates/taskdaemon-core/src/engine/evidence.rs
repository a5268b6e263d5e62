//! The engine's side of the evidence baseline (issue 36): recorded before iteration 1 of
//! a new run (the validation's sources, the test files, and one run of the validation for
//! the tests it runs), read back on a resume; compared at every completion claim by
//! `completion.rs`, whose findings reject the claim (or, with `--allow-test-changes`, are
//! said as warnings in the output, the log and the report).

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::state::RunState;
use super::{EngineContext, EngineError, EngineEvent, warn};
use crate::gates::evidence::{Baseline, Capture, Finding, TallyLines, compare};
use crate::gates::scope::{GateResult, Severity};
use crate::gates::{Validation, run_validation};
use crate::git::Git;

/// The gate name of the evidence's findings.
pub const GATE: &str = "evidence";

/// Make sure `st` has its baseline: the saved one of a resumed run, else recorded now.
pub(super) async fn record(
    st: &mut RunState,
    resumed: bool,
    ctx: &EngineContext,
    cancel: &CancellationToken,
) -> Result<(), EngineError> {
    if st.evidence.is_some() {
        return Ok(());
    }
    let cfg = st.config.clone();
    let facts = Git::new(&cfg.workdir).facts()?;
    let path = Baseline::path(&facts.git_dir, &st.run_id);
    if resumed {
        match Baseline::load(&path) {
            Ok(Some(b)) => {
                st.evidence = Some(Arc::new(b));
                return Ok(());
            }
            Ok(None) => warn(
                ctx,
                "this run's evidence baseline was not found: recorded again now, from the work tree as it is",
            ),
            Err(e) => warn(
                ctx,
                &format!(
                    "cannot read this run's evidence baseline {}: {e}; recorded again now",
                    path.display()
                ),
            ),
        }
    }
    let mut b = Baseline::capture(&Capture {
        top: &facts.toplevel,
        workdir: &cfg.workdir,
        validate: cfg.validate.as_deref(),
        task: &cfg.task,
        also_allowed: &[],
    })?;
    let mut complete = true;
    // The tests it runs are counted only where there is evidence to count: a project
    // without test files or validation scripts has none for the validation to lose.
    if let Some(cmd) = cfg.validate.as_deref()
        && b.has_evidence()
    {
        let (tally, interrupted) = baseline_validation(st, cmd, ctx, cancel).await?;
        b.tally = tally;
        complete = !interrupted;
    }
    if b.has_evidence() {
        ctx.events.emit(EngineEvent::Evidence {
            message: b.summary(),
        });
    }
    if cfg.allow_test_changes {
        warn(
            ctx,
            "--allow-test-changes: the evidence protection is OFF for this run: a changed validation script, deleted or skipped tests and fewer tests run are only warned about",
        );
    }
    // Nothing to protect is nothing to keep: a resume records again what there is then.
    if complete
        && b.has_evidence()
        && let Err(e) = b.save(&path)
    {
        warn(
            ctx,
            &format!(
                "cannot keep the evidence baseline in {}: {e}; a resume records it again",
                path.display()
            ),
        );
    }
    st.evidence = Some(Arc::new(b));
    Ok(())
}

/// A completed run's baseline is done with (a resume of it has nothing left to judge).
pub(super) fn forget(st: &RunState) {
    if let Ok(facts) = Git::new(&st.config.workdir).facts() {
        let _ = std::fs::remove_file(Baseline::path(&facts.git_dir, &st.run_id));
    }
}

/// One run of the validation before the agent's first iteration: how many tests it runs.
async fn baseline_validation(
    st: &RunState,
    cmd: &str,
    ctx: &EngineContext,
    cancel: &CancellationToken,
) -> Result<(Option<crate::gates::evidence::Tally>, bool), EngineError> {
    let cfg = &st.config;
    let mut lines = TallyLines::default();
    let v = run_validation(
        Validation {
            command: cmd,
            dir: &cfg.workdir,
            env: super::agents::baseline_env(st, &ctx.script_runner),
            success_exit_code: cfg.success_exit_code,
            timeout: cfg.iteration_timeout(),
            grace: cfg.kill_grace(),
            sandbox: &cfg.sandbox,
        },
        cancel,
        |line| lines.push(line),
    )
    .await
    .map_err(|source| EngineError::Io {
        what: format!("running the validation `{cmd}` for the evidence baseline"),
        source,
    })?;
    Ok((lines.tally(), v.interrupted))
}

/// The claim of iteration `n` against the baseline: one gate result per finding (hard;
/// soft with `--allow-test-changes`), and the diffs for the next prompt.
pub(super) fn check(
    st: &RunState,
    tally: Option<crate::gates::evidence::Tally>,
    ctx: &EngineContext,
    n: u32,
) -> Result<(Vec<GateResult>, String), EngineError> {
    let Some(b) = &st.evidence else {
        return Ok((Vec::new(), String::new()));
    };
    let cfg = &st.config;
    let top = Git::new(&cfg.workdir).facts()?.toplevel.clone();
    let findings = compare(b, &top, &cfg.workdir, tally);
    let allowed = cfg.allow_test_changes;
    if allowed {
        for f in &findings {
            warn(
                ctx,
                &format!(
                    "iteration {n}: evidence changed (allowed by --allow-test-changes): {}",
                    f.message
                ),
            );
        }
    }
    let results = findings
        .iter()
        .map(|f| GateResult {
            gate: GATE.into(),
            severity: if allowed {
                Severity::Soft
            } else {
                Severity::Hard
            },
            passed: false,
            message: if allowed {
                format!("allowed by --allow-test-changes: {}", f.message)
            } else {
                f.message.clone()
            },
        })
        .collect();
    Ok((results, diffs(&findings)))
}

/// The diffs of the evidence files that changed, for `feedback.md`.
fn diffs(findings: &[Finding]) -> String {
    let shown: Vec<&str> = findings.iter().filter_map(|f| f.diff.as_deref()).collect();
    if shown.is_empty() {
        return String::new();
    }
    format!(
        "\nWhat changed in the evidence since the run started (restore it):\n```diff\n{}```\n",
        shown.join("")
    )
}
