//! The ralph loop as a work source: one agent per iteration with the loop type's prompt
//! template (and, in the plan phase, the plan's validation first); its claim judged by the
//! promise, the validation command and the completion gates (`completion.rs`, the evidence
//! baseline of issue 36 first). `run`, `task` and the daemon's plan/spec/phase runs.

use std::ffi::OsString;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::source::{Ending, Finished, Judged, Member, Next, Unit, WorkSource};
use super::{
    EngineContext, EngineError, EngineEvent, Outcome, RunConfig, RunState, completion, decide,
    evidence, io_err, prompt, warn,
};
use crate::agent::OutputFormat;
use crate::duration::format_duration;
use crate::gates::evidence::{Tally, TallyLines};
use crate::gates::{Validation, run_validation};
use crate::git::Git;
use crate::loops::PromptTemplate;
use crate::signals::{self, Signal};
use crate::telemetry::{IterationLog, WorkTally, WorkUnit, count_stories};
use crate::workspace::Workspace;

pub struct Ralph {
    template: PromptTemplate,
    ws: Workspace,
    git: Git,
    workdir: std::path::PathBuf,
    /// The prompt of the iteration running (a text agent may echo it).
    prompt: String,
}

impl Ralph {
    pub fn new(cfg: &RunConfig, ws: &Workspace) -> Result<Ralph, EngineError> {
        Ok(Ralph {
            template: PromptTemplate::compile(&cfg.loop_name, &cfg.loop_def.prompt_template)?,
            ws: ws.clone(),
            git: Git::new(&cfg.workdir),
            workdir: cfg.workdir.clone(),
            prompt: String::new(),
        })
    }
}

impl WorkSource for Ralph {
    async fn start(
        &mut self,
        st: &mut RunState,
        resumed: bool,
        ctx: &EngineContext,
        cancel: &CancellationToken,
    ) -> Result<Option<Outcome>, EngineError> {
        if st.config.validate.is_none() {
            warn(
                ctx,
                "no validation command: the agent's COMPLETE promise will end the loop unverified (set --validate)",
            );
        }
        evidence::record(st, resumed, ctx, cancel).await?;
        Ok(None)
    }

    async fn next(
        &mut self,
        st: &mut RunState,
        n: u32,
        ctx: &EngineContext,
        _cancel: &CancellationToken,
    ) -> Result<Next, EngineError> {
        let cfg = st.config.clone();
        let phase_note = phase_step(st, &cfg, n, &self.ws, ctx)?;
        if st.task.is_some() {
            crate::lifecycle::note_iteration(&self.ws, n)?;
        }
        // A human's answer to an earlier DECIDE goes into this prompt.
        let decide = self.ws.read_decide()?;
        let decision = decide.as_ref().and_then(|d| {
            d.answer
                .as_ref()
                .map(|a| format!("Question: {}\nAnswer: {}", d.question, a))
        });
        let vars = prompt::variables(
            &self.template,
            st,
            n,
            decision.as_deref(),
            &self.ws,
            &self.git,
        )?;
        let text = self.template.render(&vars)?;
        completion::take_answer(st, decide.and_then(|d| d.answer).as_deref());
        self.prompt = text.clone();
        Ok(Next::Work(Unit {
            members: vec![Member {
                label: None,
                mode: cfg.loop_name.clone(),
                cwd: cfg.workdir.clone(),
                prompt: text,
                prompt_file: self.ws.prompt_file(n),
                log: self.ws.iteration_log(n),
                env: extra_env(st, n),
                system_prompt: cfg.loop_def.system_prompt.clone(),
                notes: phase_note.into_iter().collect(),
            }],
            answered: decision.is_some(),
            announce: Vec::new(),
        }))
    }

    async fn judge(
        &mut self,
        st: &mut RunState,
        done: &mut [Finished],
        head: Option<String>,
        ctx: &EngineContext,
        cancel: &CancellationToken,
    ) -> Result<Judged, EngineError> {
        let Some(f) = done.first_mut() else {
            return Ok(Judged::default());
        };
        let n = st.iterations_done + 1;
        let mut j = gather(st, n, f, &self.prompt, &self.ws, ctx, cancel).await?;
        j.head_after = head;
        j.members = vec![Default::default()];
        Ok(j)
    }

    fn abandon(&mut self, _: &Unit, _: &[usize], _: &EngineContext) -> Result<(), EngineError> {
        Ok(())
    }

    fn settle(
        &mut self,
        _: &mut RunState,
        _: &decide::Decision,
        _: &EngineContext,
    ) -> Result<Option<Outcome>, EngineError> {
        Ok(None)
    }

    fn finish(
        &mut self,
        st: &RunState,
        outcome: &Outcome,
        _: &EngineContext,
    ) -> Result<Ending, EngineError> {
        if matches!(outcome, Outcome::Complete { .. }) {
            evidence::forget(st);
        }
        Ok(Ending::default())
    }

    fn tally(&self) -> Option<WorkTally> {
        count_stories(&self.workdir).map(|(done, total)| WorkTally {
            unit: WorkUnit::Stories,
            done,
            total,
        })
    }
}

/// The ralph agent's part of the environment: the review pass and the spawned context
/// (`plan-file` → TASKDAEMON_PLAN_FILE, …).
pub(super) fn extra_env(st: &RunState, n: u32) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = vec![(
        "TASKDAEMON_REVIEW_PASS".into(),
        prompt::review_pass(n).to_string().into(),
    )];
    for (k, v) in &st.config.context {
        let name = format!(
            "TASKDAEMON_{}",
            k.to_ascii_uppercase()
                .replace(|c: char| !c.is_ascii_alphanumeric(), "_")
        );
        let value = match v {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        env.push((name.into(), value.into()));
    }
    env
}

/// The evidence of the iteration after the agent: its promise, the validation and the
/// completion gates (each run only when the evidence so far calls for it). Effects only:
/// logs, events, the commands; what it all means is [`decide::decide`]'s.
async fn gather(
    st: &mut RunState,
    n: u32,
    f: &mut Finished,
    prompt: &str,
    ws: &Workspace,
    ctx: &EngineContext,
    cancel: &CancellationToken,
) -> Result<Judged, EngineError> {
    let cfg = st.config.clone();
    let (ran, log) = (&f.run, &mut f.log);
    let mut j = Judged::default();
    let mut tally = None;
    if let Some(reason) = &f.no_work {
        log.note(reason);
    }
    let (interrupted, timed_out) = (ran.agent.interrupted, ran.agent.timed_out);
    if !interrupted && !timed_out && f.no_work.is_none() {
        j.signal = signals_step(&cfg, n, &ran.parsed, prompt, log, ctx);
        if !matches!(j.signal, Some(Signal::Blocked(_) | Signal::Decide(_))) {
            let claimed = j.signal == Some(Signal::Complete);
            let (v, t, counted) =
                validate_step(&cfg, n, claimed, ran.env.clone(), log, ctx, cancel).await?;
            j.validation = Some(v);
            j.validation_time = t;
            tally = counted;
        }
    }
    let ev = decide::Evidence {
        iteration: n,
        interrupted,
        timed_out,
        no_work: f.no_work.clone(),
        signal: j.signal.clone(),
        validation: j.validation.clone(),
        ..decide::Evidence::default()
    };
    if decide::completing(&ev, &super::policy(&cfg)).is_some() {
        j.gates = Some(completion_step(st, n, tally, ws, log, ctx, cancel).await?);
    }
    Ok(j)
}

/// Spec 4: in the plan phase a plan with content is validated first; valid → build.
/// Returns the note for the iteration's log.
fn phase_step(
    st: &RunState,
    cfg: &RunConfig,
    n: u32,
    ws: &Workspace,
    ctx: &EngineContext,
) -> Result<Option<String>, EngineError> {
    let step = crate::gates::phase::at_iteration_top(&cfg.workdir, &ws.feedback_file(), st.task)
        .map_err(io_err(
            "checking the plan phase (.ralph/phase.txt, the plan)",
        ))?;
    Ok(match step {
        crate::gates::phase::PhaseStep::Inert => None,
        crate::gates::phase::PhaseStep::Flipped { plan } => {
            let message = format!("{} is valid: the phase is now build", plan.display());
            ctx.events.emit(EngineEvent::Gate {
                iteration: n,
                gate: "phase".into(),
                passed: true,
                severity: crate::gates::scope::Severity::Hard,
                message: message.clone(),
            });
            Some(message)
        }
        crate::gates::phase::PhaseStep::Invalid { plan, problems } => {
            let message = format!(
                "{} has {} problem(s): still in the plan phase (see .ralph/feedback.md)",
                plan.display(),
                problems.len()
            );
            ctx.events.emit(EngineEvent::Gate {
                iteration: n,
                gate: "phase".into(),
                passed: false,
                severity: crate::gates::scope::Severity::Soft,
                message: message.clone(),
            });
            Some(message)
        }
    })
}

/// The agent's promise (logged, announced; ignored promises warned about).
fn signals_step(
    cfg: &RunConfig,
    n: u32,
    parsed: &crate::agent::ParsedOutput,
    prompt: &str,
    log: &mut IterationLog,
    ctx: &EngineContext,
) -> Option<Signal> {
    let words = match cfg.agent_format {
        OutputFormat::Text => signals::strip_prompt_echo(&parsed.words, prompt),
        _ => parsed.words.clone(),
    };
    let scan = signals::scan(&words, cfg.completion_text());
    for ignored in &scan.ignored {
        log.note(&format!("ignored promise: {ignored}"));
        warn(ctx, &format!("iteration {n}: ignored promise: {ignored}"));
    }
    let (kind, text) = match &scan.signal {
        Some(Signal::Complete) => ("complete", None),
        Some(Signal::Blocked(r)) => ("blocked", Some(r.clone())),
        Some(Signal::Decide(q)) => ("decide", Some(q.clone())),
        None => return None,
    };
    log.note(&format!(
        "promise: {kind}{}",
        text.as_deref()
            .map(|t| format!(": {t}"))
            .unwrap_or_default()
    ));
    ctx.events.emit(EngineEvent::Signal {
        iteration: n,
        signal: kind.into(),
        text,
    });
    scan.signal
}

/// The validation command, when there is one: its run as evidence, its time, and the
/// tests its output says ran.
async fn validate_step(
    cfg: &RunConfig,
    n: u32,
    claimed: bool,
    env: Vec<(OsString, OsString)>,
    log: &mut IterationLog,
    ctx: &EngineContext,
    cancel: &CancellationToken,
) -> Result<(decide::ValidationEvidence, Duration, Option<Tally>), EngineError> {
    let Some(cmd) = &cfg.validate else {
        return Ok((decide::ValidationEvidence::NotRun, Duration::ZERO, None));
    };
    let mut tally = TallyLines::default();
    ctx.events.emit(EngineEvent::ValidationStarted {
        iteration: n,
        command: cmd.clone(),
    });
    log.section();
    log.note(&format!("validation: $ {cmd}"));
    let v = run_validation(
        Validation {
            command: cmd,
            dir: &cfg.workdir,
            env,
            success_exit_code: cfg.success_exit_code,
            timeout: cfg.iteration_timeout(),
            grace: cfg.kill_grace(),
            sandbox: &cfg.sandbox,
        },
        cancel,
        |line| {
            tally.push(line);
            log.output(crate::agent::Stream::Stdout, line.as_bytes())
        },
    )
    .await
    .map_err(io_err(format!("running validation `{cmd}`")))?;
    log.note(&if v.interrupted {
        format!(
            "validation was interrupted by the stop after {}: no verdict",
            format_duration(v.duration)
        )
    } else {
        format!(
            "validation exited with {}{} after {} (success is {}): {}",
            v.exit_code,
            if v.timed_out { " (timed out)" } else { "" },
            format_duration(v.duration),
            cfg.success_exit_code,
            if v.passed { "passed" } else { "failed" }
        )
    });
    ctx.events.emit(EngineEvent::ValidationFinished {
        iteration: n,
        passed: v.passed,
        exit_code: v.exit_code,
        timed_out: v.timed_out,
        interrupted: v.interrupted,
        duration_ms: v.duration.as_millis() as u64,
    });
    let evidence = if v.exit_code == 127 && cfg.success_exit_code != 127 && !v.interrupted {
        decide::ValidationEvidence::Missing {
            command: cmd.clone(),
            output: v.output.clone(),
        }
    } else if v.interrupted {
        decide::ValidationEvidence::Interrupted
    } else if v.passed {
        decide::ValidationEvidence::Passed
    } else {
        if claimed {
            let reason = format!(
                "COMPLETE claimed but validation failed (exit {}); its output goes into the next prompt",
                v.exit_code
            );
            log.note(&reason);
            ctx.events.emit(EngineEvent::CompletionRejected {
                iteration: n,
                reason,
            });
        }
        decide::ValidationEvidence::Failed {
            command: cmd.clone(),
            exit_code: v.exit_code,
            timed_out: v.timed_out,
            expected: cfg.success_exit_code,
            output: v.output.clone(),
        }
    };
    Ok((evidence, v.duration, tally.tally()))
}

/// The completion gates: the harness's last word on evidence that says done.
async fn completion_step(
    st: &mut RunState,
    n: u32,
    tally: Option<Tally>,
    ws: &Workspace,
    log: &mut IterationLog,
    ctx: &EngineContext,
    cancel: &CancellationToken,
) -> Result<decide::GateVerdict, EngineError> {
    Ok(
        match completion::gates(st, n, tally, ws, log, ctx, cancel).await? {
            completion::Verdict::Complete => decide::GateVerdict::Complete,
            completion::Verdict::Swallowed => {
                log.note("completion claimed in the plan phase: ignored (spec 4)");
                decide::GateVerdict::Swallowed
            }
            completion::Verdict::Rejected {
                attempt,
                first,
                tampered,
            } => {
                let reason = format!(
                    "the harness's gates rejected the completion (attempt {attempt} of {}): {first}; see .ralph/feedback.md",
                    completion::MAX_GATE_FAILURES
                );
                log.note(&reason);
                ctx.events.emit(EngineEvent::CompletionRejected {
                    iteration: n,
                    reason,
                });
                decide::GateVerdict::Rejected { tampered }
            }
            completion::Verdict::Ask { question } => {
                log.note(&format!(
                    "the harness cannot measure a requirement: DECIDE: {question}"
                ));
                decide::GateVerdict::Ask { question }
            }
            completion::Verdict::Abort { reason } => {
                log.note(&reason);
                decide::GateVerdict::Abort { reason }
            }
        },
    )
}
