//! One iteration of the one loop, for every work source: the source's unit → its agents →
//! their failures (a usage limit or a backoff retries the members that did not finish, as
//! the same attempt) → the source's judgement → [`decide::decide`] → its effects → the
//! records.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::agents::{self, Spawned};
use super::source::{Finished, Judged, Member, Next, Unit, WorkSource};
use super::{
    EngineContext, EngineError, EngineEvent, Outcome, RunConfig, RunState, counters, decide,
    effects, failures, io_err, policy, record,
};
use crate::clock;
use crate::fsutil::PendingSyncs;
use crate::git::Git;
use crate::git::guard::GitGuard;
use crate::telemetry::IterationLog;
use crate::workspace::Workspace;

/// What an iteration works with.
pub(super) struct Iter<'a> {
    pub n: u32,
    /// The run's remaining runtime, when it has a limit.
    pub remaining: Option<Duration>,
    pub st: &'a mut RunState,
    pub cfg: &'a RunConfig,
    pub ws: &'a Workspace,
    pub git: &'a Git,
    pub ctx: &'a EngineContext,
    pub cancel: &'a CancellationToken,
    /// The iteration's log and CSV row: synced with the state's next save.
    pub pending: &'a mut PendingSyncs,
}

/// A member's agent run with its log, before the source has judged it.
struct Ran {
    index: usize,
    run: agents::AgentRun,
    log: IterationLog,
}

/// One iteration. Returns the loop's outcome when this iteration ends it.
pub(super) async fn iteration<S: WorkSource>(
    it: &mut Iter<'_>,
    source: &mut S,
) -> Result<Option<Outcome>, EngineError> {
    let started = Instant::now();
    let started_at = clock::now_rfc3339();
    let unit = match source.next(it.st, it.n, it.ctx, it.cancel).await? {
        Next::Done(o) => return Ok(Some(done_unless_secrets(it, o)?)),
        Next::Work(u) => u,
    };
    // What the source committed while it chose the work (a story approved at the review
    // cap) is the harness's bookkeeping, not the agents' progress.
    it.st.last_head = it.git.head()?;
    let mut logs = open_logs(it, &unit, &started_at)?;
    let guard = GitGuard::record(
        std::iter::once(it.git.dir()).chain(unit.members.iter().map(|m| m.cwd.as_path())),
    );
    let spawned = agents::run_members(it, &unit.members, &mut logs).await?;
    // Before any git of ours runs again: what the agents changed in git's own files.
    let git_tampered = restore_git(it, &guard, &mut logs);
    let ran = match started_agents(it, source, &unit, spawned, logs)? {
        Ok(ran) => ran,
        Err(o) => return Ok(Some(o)),
    };
    let head = it.git.head()?;
    let (mut done, stop) = match failure_step(it, source, &unit, ran)? {
        Ok(finished) => finished,
        Err(ended) => return Ok(ended),
    };
    archive_answer(it, &unit, &mut done)?;
    let interrupted = it.cancel.is_cancelled() || done.iter().any(|f| f.run.agent.interrupted);
    // Work done by agents that changed git's own files is not judged: given back.
    let judged = if interrupted || git_tampered.is_some() {
        let all: Vec<usize> = done.iter().map(|f| f.index).collect();
        source.abandon(&unit, &all, it.ctx)?;
        if let Some(files) = &git_tampered {
            source.note_for_next(&decide::git_tampered_feedback(it.n, files));
        }
        Judged {
            head_after: head.clone(),
            ..Judged::default()
        }
    } else {
        source
            .judge(it.st, &mut done, head.clone(), it.ctx, it.cancel)
            .await?
    };
    let interrupted = interrupted || judged.interrupted;
    // Files that look like secrets which the run's commits add: no claim is accepted.
    let secrets = if interrupted {
        Vec::new()
    } else {
        let log = done.first_mut().map(|f| &mut f.log);
        super::pre_run::secrets_step(it.st, (it.git, it.ws), it.n, log, it.ctx)?
    };
    let mut ev = evidence(it, &done, &judged, interrupted, git_tampered);
    ev.secrets = secrets;
    let d = decide::decide(&ev, &counters(it.st), &policy(it.cfg));
    let mut d = effects::apply(it, &mut done, d)?;
    if d.run_outcome.is_none()
        && let Some(o) = stop
    {
        // A member's failure stops the run; the others' finished work was judged first.
        d.run_outcome = Some(o);
    }
    if let Some(o) = source.settle(it.st, &d, it.ctx)?
        && d.run_outcome.is_none()
    {
        d.outcome = decide::IterationOutcome::Failed;
        d.run_outcome = Some(o);
    }
    let start = record::Start {
        at: started,
        at_text: started_at,
        head_before: it.st.last_head.clone(),
    };
    it.st.last_head = it.git.head()?;
    // An interrupted iteration did not happen for the limits: a resume runs it again (its
    // row and log are replaced and appended to).
    if d.outcome != decide::IterationOutcome::Interrupted {
        it.st.iterations_done = it.n;
    }
    record::finish(it, &unit, done, &judged, d, start, source.tally())
}

/// Put back what the agents changed in git's own files (`git::guard`): announced, noted in
/// each member's log, and named for the decision (`None`: nothing changed).
fn restore_git(it: &Iter<'_>, guard: &GitGuard, logs: &mut [IterationLog]) -> Option<String> {
    let changes = guard.restore();
    if changes.is_empty() {
        return None;
    }
    let list: Vec<String> = changes.iter().map(|c| c.to_string()).collect();
    let list = list.join(", ");
    for log in logs.iter_mut() {
        log.note(&format!(
            "the agent changed git's own files: {list}; the iteration is rejected"
        ));
    }
    it.ctx.events.emit(EngineEvent::GitTampered {
        iteration: it.n,
        changes,
    });
    Some(list)
}

/// A work list with nothing left to do does not complete while the run's commits add
/// files that look like secrets: it fails, naming them (its work stays on the branch).
fn done_unless_secrets(it: &Iter<'_>, o: Outcome) -> Result<Outcome, EngineError> {
    if !matches!(o, Outcome::Complete { .. }) {
        return Ok(o);
    }
    let added = super::pre_run::committed_secrets(it.st, it.git)?;
    if added.is_empty() {
        return Ok(o);
    }
    Ok(Outcome::Failed {
        reason: format!(
            "the work is done, but the run's commits add files that look like secrets: {}; take them out of the commits (`git rm --cached`, then rewrite the commits that added them) and run again",
            crate::secrets::list(&crate::secrets::paths(&added))
        ),
    })
}

/// Each member's log, created with its first lines; the iteration announced.
fn open_logs(
    it: &Iter<'_>,
    unit: &Unit,
    started_at: &str,
) -> Result<Vec<IterationLog>, EngineError> {
    let mut logs = Vec::new();
    for m in &unit.members {
        logs.push(open_log(it, m, started_at)?);
    }
    it.ctx.events.emit(EngineEvent::IterationStarted {
        iteration: it.n,
        max_iterations: it.cfg.max_iterations,
        prompt_bytes: unit.members.iter().map(|m| m.prompt.len()).sum(),
        log: unit
            .members
            .first()
            .map(|m| m.log.display().to_string())
            .unwrap_or_default(),
    });
    for e in &unit.announce {
        it.ctx.events.work(e.clone());
    }
    Ok(logs)
}

fn open_log(it: &Iter<'_>, m: &Member, started_at: &str) -> Result<IterationLog, EngineError> {
    if let Some(dir) = m.log.parent() {
        std::fs::create_dir_all(dir).map_err(io_err(format!("creating {}", dir.display())))?;
    }
    let mut log = IterationLog::create(&m.log, it.cfg.max_log_bytes)
        .map_err(io_err(format!("creating {}", m.log.display())))?;
    log.note(&format!(
        "run {} iteration {}/{} started {started_at}; {}agent {}{}{}; prompt {} ({} bytes)",
        it.st.run_id,
        it.n,
        it.cfg.max_iterations,
        m.label
            .as_deref()
            .map(|l| format!("{} {l}; ", m.mode))
            .unwrap_or_default(),
        it.cfg.agent.label(),
        crate::agent::readable::FORMAT_MARK,
        it.cfg.agent_format.name(),
        m.prompt_file.display(),
        m.prompt.len()
    ));
    for note in &m.notes {
        log.note(note);
    }
    log.keep(&m.prompt_file, m.prompt.as_bytes());
    Ok(log)
}

/// The members that started, accounted; an agent that could not start ends the run (what
/// the others did is abandoned).
fn started_agents<S: WorkSource>(
    it: &mut Iter<'_>,
    source: &mut S,
    unit: &Unit,
    spawned: Vec<Spawned>,
    logs: Vec<IterationLog>,
) -> Result<Result<Vec<Ran>, Outcome>, EngineError> {
    let mut ran = Vec::new();
    let mut refused: Option<Result<Outcome, EngineError>> = None;
    for (index, (s, mut log)) in spawned.into_iter().zip(logs).enumerate() {
        match s {
            Spawned::Ran(run) => {
                agents::account(it, &unit.members[index], &run, &mut log);
                ran.push(Ran {
                    index,
                    run: *run,
                    log,
                });
            }
            Spawned::CouldNotStart(spec, e) => {
                let o = agents::could_not_spawn(it, &spec, e, &mut log);
                let _ = log.finish();
                if refused.as_ref().is_none_or(|r| r.is_ok()) {
                    refused = Some(o);
                }
            }
        }
    }
    let Some(o) = refused else {
        return Ok(Ok(ran));
    };
    // What the others did is undone before the run ends (also on an error).
    let all: Vec<usize> = (0..unit.members.len()).collect();
    source.abandon(unit, &all, it.ctx)?;
    for r in ran {
        let _ = r.log.finish();
    }
    Ok(Err(o?))
}

/// A person's answer to an earlier DECIDE is archived once an agent has seen it and
/// finished (not when every member waits: the retried prompts carry it again).
fn archive_answer(it: &Iter<'_>, unit: &Unit, done: &mut [Finished]) -> Result<(), EngineError> {
    if !unit.answered || done.is_empty() || done.iter().any(|f| f.run.agent.interrupted) {
        return Ok(());
    }
    if let Some(p) = it
        .ws
        .archive_decide(&clock::now().as_second().to_string())?
    {
        let note = format!("the answered question was archived to {}", p.display());
        for f in done {
            f.log.note(&note);
        }
    }
    Ok(())
}

/// The failure classes of the members' runs (one iteration moves the failure counters
/// once, whatever the size of its group). `Err`: the iteration ends here — the run stops
/// (`Some`), or every member waits and runs again (`None`, not counted). Members that wait
/// or stop are abandoned; the finished ones go on to be judged, with the stop, if any,
/// to end the run after them.
#[allow(clippy::type_complexity)]
fn failure_step<S: WorkSource>(
    it: &mut Iter<'_>,
    source: &mut S,
    unit: &Unit,
    ran: Vec<Ran>,
) -> Result<Result<(Vec<Finished>, Option<Outcome>), Option<Outcome>>, EngineError> {
    let mut done = Vec::new();
    let mut left = Vec::new();
    let mut stop = None;
    let base = it.st.failures.clone();
    let mut folded: Option<failures::FailureState> = None;
    for mut r in ran {
        it.st.failures = base.clone();
        let member = &unit.members[r.index];
        let head = crate::git::Git::new(&member.cwd).head()?;
        let new_commit = head.is_some() && head != it.st.last_head;
        match agents::judge(it, &r.run, new_commit, &mut r.log) {
            failures::Verdict::Proceed => done.push((r, None)),
            failures::Verdict::NoWork { reason } => done.push((r, Some(reason))),
            failures::Verdict::Stop(o) => {
                stop.get_or_insert(o);
                left.push(r);
            }
            failures::Verdict::Retry => left.push(r),
        }
        match &mut folded {
            None => folded = Some(it.st.failures.clone()),
            Some(f) => f.fold(&it.st.failures),
        }
    }
    it.st.failures = folded.unwrap_or(base);
    let gone: Vec<usize> = if done.is_empty() {
        (0..unit.members.len()).collect()
    } else {
        left.iter().map(|r| r.index).collect()
    };
    if !gone.is_empty() {
        source.abandon(unit, &gone, it.ctx)?;
    }
    for r in left {
        r.log
            .finish()
            .map_err(io_err(format!("writing the log of iteration {}", it.n)))?;
    }
    if done.is_empty() {
        return Ok(Err(stop));
    }
    Ok(Ok((
        done.into_iter()
            .map(|(r, no_work)| Finished {
                index: r.index,
                run: r.run,
                no_work,
                log: r.log,
            })
            .collect(),
        stop,
    )))
}

/// Everything the iteration found out, for [`decide::decide`]. A single agent's timeout
/// or crash is the iteration's; a group's members are judged by the source one by one.
fn evidence(
    it: &Iter<'_>,
    done: &[Finished],
    j: &Judged,
    interrupted: bool,
    git_tampered: Option<String>,
) -> decide::Evidence {
    let single = match done {
        [one] if done.len() == 1 => Some(one),
        _ => None,
    };
    let signatures: Vec<&str> = done
        .iter()
        .filter_map(|f| f.run.parsed.tool_signature.as_deref())
        .collect();
    decide::Evidence {
        iteration: it.n,
        interrupted,
        timed_out: single.is_some_and(|f| f.run.agent.timed_out),
        cut_by_runtime: single.is_some_and(|f| f.run.cut_by_runtime),
        timeout: single.and_then(|f| f.run.timeout),
        no_work: single.and_then(|f| f.no_work.clone()),
        signal: j.signal.clone(),
        validation: j.validation.clone(),
        gates: j.gates.clone(),
        work: j.work,
        head_before: it.st.last_head.clone(),
        head_after: j.head_after.clone(),
        tool_signature: (!signatures.is_empty()).then(|| signatures.join("|")),
        cost_usd: it.st.cost_usd,
        git_tampered,
        secrets: Vec::new(),
    }
}
