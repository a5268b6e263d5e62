//! What the engine does when the agent failed (see `agent::failure`): stop for a person
//! (could-not-start, auth: exit 64), wait for a usage limit's reset and retry the same
//! iteration, back off from transient failures, stop after repeated crashes.

use std::time::Duration;

use jiff::{Timestamp, Zoned};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::events::EngineEvent;
use super::outcome::Outcome;
use super::state::{RunConfig, RunState};
use super::{EngineContext, EngineError};
use crate::agent::{AgentResult, Evidence, FailureClass};
use crate::daemon::governor;
use crate::telemetry::IterationLog;
use crate::workspace::Workspace;

pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(12 * 3600);
pub const DEFAULT_RETRY_BACKOFF: Duration = Duration::from_secs(30);
pub const DEFAULT_MAX_RETRIES: u32 = 5;
pub const DEFAULT_QUIET_WARNING: Duration = Duration::from_secs(5 * 60);
pub const DEFAULT_NO_PROGRESS: Duration = Duration::from_secs(10 * 60);
/// Backoff never waits longer than this between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(15 * 60);
/// Crashes without work in a row that stop the run.
pub const MAX_CRASHES: u32 = 2;

/// What to do at a usage limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnUsageLimit {
    /// Wait for the reset, then retry the same iteration.
    #[default]
    Wait,
    /// Stop (exit 1) naming the reset time.
    Stop,
}

impl OnUsageLimit {
    pub fn parse(s: &str) -> Result<OnUsageLimit, String> {
        match s {
            "wait" => Ok(OnUsageLimit::Wait),
            "stop" => Ok(OnUsageLimit::Stop),
            other => Err(format!("`{other}` is not an action; use wait or stop")),
        }
    }
}

/// The run's settings for agent failures (saved with the run).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FailurePolicy {
    pub on_usage_limit: OnUsageLimit,
    /// A reset further away than this stops the run instead.
    pub max_wait_ms: u64,
    /// The first backoff after a transient failure; doubled each time.
    pub retry_backoff_ms: u64,
    /// Transient failures in a row before the run stops.
    pub max_retries: u32,
    /// Say so when the agent prints nothing for this long; 0: never.
    pub quiet_warning_ms: u64,
    /// Stop the agent after this long without progress while it only retries; 0: never.
    pub no_progress_ms: u64,
    /// Pause after an iteration whose reported usage window reached this percentage,
    /// until the window resets.
    pub pause_at_usage: Option<u8>,
}

impl Default for FailurePolicy {
    fn default() -> FailurePolicy {
        FailurePolicy {
            on_usage_limit: OnUsageLimit::Wait,
            max_wait_ms: DEFAULT_MAX_WAIT.as_millis() as u64,
            retry_backoff_ms: DEFAULT_RETRY_BACKOFF.as_millis() as u64,
            max_retries: DEFAULT_MAX_RETRIES,
            quiet_warning_ms: DEFAULT_QUIET_WARNING.as_millis() as u64,
            no_progress_ms: DEFAULT_NO_PROGRESS.as_millis() as u64,
            pause_at_usage: None,
        }
    }
}

/// Progress of the failure handling (saved with the run, so a resume goes on waiting).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FailureState {
    /// A wait in progress: retry the next iteration at this time (unix seconds).
    pub wait_until: Option<i64>,
    /// Why (`usage-limit`, `rate-limited`, …) and the agent's line.
    pub wait_class: Option<FailureClass>,
    pub wait_line: Option<String>,
    /// Transient failures in a row.
    pub transient: u32,
    /// Crashes without work in a row.
    pub crashes: u32,
    /// Time waited before the iteration now running (for its summary row).
    pub waited_ms: u64,
    /// The wait is a pause before the limit (`--pause-at-usage`), not the limit itself.
    pub paused: bool,
    /// The wait is the quota governor's: another loop on this account hit the limit.
    pub governed: bool,
}

impl FailureState {
    /// Another member's result of the same iteration, taken in: the later wait wins (with
    /// its reason), the counters move once per iteration (the higher count).
    pub fn fold(&mut self, other: &FailureState) {
        if other.wait_until > self.wait_until {
            self.wait_until = other.wait_until;
            self.wait_class = other.wait_class;
            self.wait_line = other.wait_line.clone();
            self.paused = other.paused;
            self.governed = other.governed;
        }
        self.transient = self.transient.max(other.transient);
        self.crashes = self.crashes.max(other.crashes);
        self.waited_ms = self.waited_ms.max(other.waited_ms);
    }
}

/// The engine's decision about an agent's result.
#[derive(Debug, PartialEq)]
pub(super) enum Verdict {
    /// Judge the iteration as usual.
    Proceed,
    /// The agent did no work: the iteration counts, but never completes.
    NoWork { reason: String },
    /// Stop the run.
    Stop(Outcome),
    /// Wait, then run the same iteration again (not counted).
    Retry,
}

/// Decide what `result` means for the run; on a retry, `st.failures` holds the wait.
pub(super) fn decide(
    st: &mut RunState,
    cfg: &RunConfig,
    result: &AgentResult,
    tool_calls: u32,
    new_commit: bool,
    now: Timestamp,
) -> Verdict {
    let p = &cfg.failure_policy;
    let line = result.line.clone().unwrap_or_else(|| "(no output)".into());
    let class = result.class;
    if class != FailureClass::Crashed {
        st.failures.crashes = 0;
    }
    if !class.is_transient() {
        st.failures.transient = 0;
    }
    let stop = |reason: String| Verdict::Stop(Outcome::AgentFailed { class, reason });
    match class {
        FailureClass::Ok => Verdict::Proceed,
        FailureClass::CouldNotStart | FailureClass::Auth => stop(format!(
            "the agent {}: {line}\n  hint: {}",
            if class == FailureClass::Auth {
                "is not logged in or its key was refused"
            } else {
                "could not start"
            },
            result.hint()
        )),
        FailureClass::UsageLimit => {
            let Some(reset) = result.reset_at else {
                return stop(format!(
                    "the agent hit its usage limit and gave no reset time: {line}\n  hint: continue with `taskdaemon run --resume` once the quota is back"
                ));
            };
            let wait = Duration::from_secs((reset.as_second() - now.as_second()).max(0) as u64);
            let at = describe(reset);
            if p.on_usage_limit == OnUsageLimit::Stop {
                return stop(format!(
                    "the agent hit its usage limit; it resets at {at}: {line}\n  hint: `taskdaemon run --resume` after the reset, or --on-usage-limit wait"
                ));
            }
            if wait > Duration::from_millis(p.max_wait_ms) {
                return stop(format!(
                    "the agent hit its usage limit; it resets at {at}, later than --max-wait {}: {line}\n  hint: `taskdaemon run --resume` after the reset, or raise --max-wait",
                    crate::duration::format_duration(Duration::from_millis(p.max_wait_ms))
                ));
            }
            let until =
                reset.as_second() + jitter(wait / 10 + Duration::from_secs(1)).as_secs() as i64;
            set_wait(st, until.max(reset.as_second()), class, line);
            Verdict::Retry
        }
        FailureClass::RateLimited | FailureClass::Overloaded | FailureClass::Unreachable => {
            st.failures.transient += 1;
            let attempt = st.failures.transient;
            if attempt > p.max_retries {
                st.failures.transient = 0;
                return stop(format!(
                    "the agent failed {attempt} times in a row ({}): {line}\n  hint: {}",
                    class.name(),
                    result.hint()
                ));
            }
            let wait = backoff(
                attempt,
                Duration::from_millis(p.retry_backoff_ms),
                result.retry_after,
            );
            set_wait(
                st,
                now.as_second() + wait.as_secs().max(1) as i64,
                class,
                line,
            );
            Verdict::Retry
        }
        FailureClass::Crashed if tool_calls == 0 && !new_commit => {
            st.failures.crashes += 1;
            if st.failures.crashes >= MAX_CRASHES {
                st.failures.crashes = 0;
                return stop(format!(
                    "the agent crashed {MAX_CRASHES} times in a row without doing anything: {line}\n  hint: {}",
                    result.hint()
                ));
            }
            Verdict::NoWork {
                reason: format!("the agent crashed without doing anything: {line}"),
            }
        }
        FailureClass::Crashed => {
            st.failures.crashes = 0;
            Verdict::Proceed
        }
    }
}

/// `--pause-at-usage`: after an iteration whose usage window (Claude's `rate_limit_event`)
/// reached the percentage, wait for that window's reset. True when a pause was set.
pub(super) fn pause_at_usage(
    st: &mut RunState,
    cfg: &RunConfig,
    ev: &Evidence,
    now: Timestamp,
) -> bool {
    let (Some(pct), Some(u)) = (cfg.failure_policy.pause_at_usage, ev.usage.as_ref()) else {
        return false;
    };
    let (Some(used), Some(reset)) = (u.utilization, u.resets_at) else {
        return false;
    };
    if used * 100.0 < f64::from(pct) || reset <= now.as_second() {
        return false;
    }
    let window = u.kind.as_deref().unwrap_or("usage");
    set_wait(
        st,
        reset + jitter(Duration::from_secs(1)).as_secs() as i64,
        FailureClass::UsageLimit,
        format!(
            "{:.0}% of the {window} window used (--pause-at-usage {pct})",
            used * 100.0
        ),
    );
    st.failures.paused = true;
    true
}

fn set_wait(st: &mut RunState, until: i64, class: FailureClass, line: String) {
    if class == FailureClass::UsageLimit {
        // Every loop of this process on the same account pauses too.
        governor::global().pause(
            &governor::account_key(&st.config.agent.label()),
            until,
            format!("run {}: {line}", st.run_id),
        );
    }
    st.failures.wait_until = Some(until);
    st.failures.wait_class = Some(class);
    st.failures.wait_line = Some(line);
}

/// At an iteration boundary: when the quota governor holds this loop's account (another
/// loop hit the limit), wait for this loop's restart slot.
pub(super) fn governed(st: &mut RunState) {
    let account = governor::account_key(&st.config.agent.label());
    let now = Timestamp::now().as_second();
    let Some((slot, reason)) = governor::global().gate(&account, &st.run_id, now) else {
        return;
    };
    if st.failures.wait_until.is_none_or(|w| w < slot) {
        st.failures.wait_until = Some(slot);
        st.failures.wait_class = Some(FailureClass::UsageLimit);
        st.failures.wait_line = Some(reason);
        st.failures.paused = false;
        st.failures.governed = true;
    }
}

/// Bounded exponential backoff with up to 25 % jitter; never shorter than what the CLI
/// itself last waited (its retry-after).
pub fn backoff(attempt: u32, base: Duration, retry_after: Option<Duration>) -> Duration {
    let exp = base.saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
    let d = exp.min(MAX_BACKOFF);
    let d = d + jitter(d / 4);
    d.max(retry_after.unwrap_or_default().min(MAX_BACKOFF))
}

/// A random duration in `[0, max]`.
pub fn jitter(max: Duration) -> Duration {
    let ms = max.as_millis() as u64;
    if ms == 0 {
        return Duration::ZERO;
    }
    let r = u64::from_le_bytes(
        uuid::Uuid::new_v4().as_bytes()[..8]
            .try_into()
            .unwrap_or([0; 8]),
    );
    Duration::from_millis(r % (ms + 1))
}

/// "04:20 (in 2h 13m)" in the local time zone.
pub fn describe(t: Timestamp) -> String {
    crate::agent::failure::describe_reset(t, &Zoned::now())
}

/// Wait for `st.failures.wait_until` (the state is saved first, so `run --resume` goes on
/// waiting). False when cancelled.
pub(super) async fn wait(
    st: &mut RunState,
    ws: &Workspace,
    ctx: &EngineContext,
    cancel: &CancellationToken,
) -> Result<bool, EngineError> {
    let Some(until) = st.failures.wait_until else {
        return Ok(true);
    };
    let n = st.iterations_done + 1;
    let class = st.failures.wait_class.unwrap_or(FailureClass::UsageLimit);
    let reset = Timestamp::from_second(until).unwrap_or_else(|_| Timestamp::now());
    let secs = (until - Timestamp::now().as_second()).max(0) as u64;
    let message = if st.failures.governed {
        format!(
            "paused by the quota governor: another loop on this account hit the usage limit ({}); this loop restarts at {}",
            st.failures.wait_line.as_deref().unwrap_or_default(),
            describe(reset)
        )
    } else if st.failures.paused {
        format!(
            "pausing before the usage limit ({}): waiting for the window to reset at {}",
            st.failures.wait_line.as_deref().unwrap_or_default(),
            describe(reset)
        )
    } else if class == FailureClass::UsageLimit {
        format!(
            "waiting for the usage limit to reset at {}",
            describe(reset)
        )
    } else {
        format!(
            "{}: backing off, retrying iteration {n} at {} (attempt {} of {})",
            class.name(),
            describe(reset),
            st.failures.transient + 1,
            st.config.failure_policy.max_retries + 1
        )
    };
    st.save(ws)?;
    let log_path = ws.iteration_log(n);
    if let Ok(mut log) = IterationLog::create(&log_path, st.config.max_log_bytes) {
        log.note(&format!(
            "{message}; the agent said: {}",
            st.failures.wait_line.as_deref().unwrap_or("(nothing)")
        ));
        let _ = log.finish();
    }
    ctx.events.emit(EngineEvent::Waiting {
        iteration: n,
        class,
        until: crate::clock::rfc3339(reset),
        wait_ms: secs * 1000,
        message,
        line: st.failures.wait_line.clone(),
    });
    let started = std::time::Instant::now();
    let done = tokio::select! {
        _ = tokio::time::sleep(Duration::from_secs(secs)) => true,
        _ = cancel.cancelled() => false,
    };
    st.failures.waited_ms += started.elapsed().as_millis() as u64;
    if done {
        st.failures.wait_until = None;
        st.failures.paused = false;
        st.failures.governed = false;
        ctx.events.emit(EngineEvent::WaitOver {
            iteration: n,
            class,
        });
    }
    st.save(ws)?;
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_groups_members_move_the_counters_once_and_the_later_wait_wins() {
        let member = |transient, until: Option<i64>| FailureState {
            transient,
            wait_until: until,
            wait_class: until.map(|_| FailureClass::Overloaded),
            ..FailureState::default()
        };
        // Six members overloaded in one iteration: the count is one iteration's.
        let mut f = member(1, Some(100));
        for _ in 0..5 {
            f.fold(&member(1, Some(90)));
        }
        assert_eq!((f.transient, f.wait_until), (1, Some(100)));
        f.fold(&member(1, Some(200)));
        assert_eq!(f.wait_until, Some(200));
        assert_eq!(f.wait_class, Some(FailureClass::Overloaded));
        // A member that worked does not reset what another's failure counted.
        f.fold(&member(0, None));
        assert_eq!((f.transient, f.wait_until), (1, Some(200)));
    }

    #[test]
    fn backoff_doubles_and_is_bounded() {
        let b = Duration::from_secs(10);
        let a1 = backoff(1, b, None);
        assert!(a1 >= b && a1 <= b + b / 4, "{a1:?}");
        let a3 = backoff(3, b, None);
        assert!(a3 >= 4 * b && a3 <= 5 * b, "{a3:?}");
        assert!(backoff(30, b, None) <= MAX_BACKOFF + MAX_BACKOFF / 4);
        assert!(backoff(1, b, Some(Duration::from_secs(60))) >= Duration::from_secs(60));
    }

    #[test]
    fn jitter_stays_in_range() {
        for _ in 0..100 {
            assert!(jitter(Duration::from_millis(50)) <= Duration::from_millis(50));
        }
        assert_eq!(jitter(Duration::ZERO), Duration::ZERO);
    }
}

#[cfg(test)]
mod decide_tests {
    use super::*;
    use crate::agent::AgentSpec;
    use crate::loops::Registry;

    /// A run in a temp dir of its own (kept while the test runs): nothing in a shared
    /// /tmp (stray loop files, a `.taskdaemon/`) can change it.
    fn state() -> (tempfile::TempDir, RunState) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        // Built-ins only: the directory holds no loop types.
        let reg = Registry::load(None, &dir.join("no-loops-here")).unwrap();
        let s = crate::config::Settings {
            agent: Some("cmd:true".into()),
            ..Default::default()
        };
        let cfg = RunConfig::resolve(&dir, "t".into(), &s, &reg).unwrap();
        assert!(matches!(cfg.agent, AgentSpec::Cmd { .. }));
        (tmp, RunState::new(cfg, "r".into(), None, "now".into()))
    }

    fn result(class: FailureClass, reset: Option<i64>) -> AgentResult {
        AgentResult {
            class,
            line: Some("the agent's line".into()),
            reset_at: reset.map(|s| Timestamp::from_second(s).unwrap()),
            retry_after: None,
        }
    }

    #[test]
    fn each_class_decides() {
        let now = Timestamp::from_second(1_000_000).unwrap();
        let (_tmp, mut st) = state();
        assert!(st.config.workdir.starts_with(_tmp.path()));
        let cfg = st.config.clone();
        let stop_code = |v: Verdict| match v {
            Verdict::Stop(o) => o.exit_code(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            stop_code(decide(
                &mut st,
                &cfg,
                &result(FailureClass::Auth, None),
                0,
                false,
                now
            )),
            64
        );
        assert_eq!(
            stop_code(decide(
                &mut st,
                &cfg,
                &result(FailureClass::CouldNotStart, None),
                0,
                false,
                now
            )),
            64
        );
        // A usage limit with a reset waits; without one it stops.
        let v = decide(
            &mut st,
            &cfg,
            &result(FailureClass::UsageLimit, Some(1_000_060)),
            0,
            false,
            now,
        );
        assert_eq!(v, Verdict::Retry);
        assert!(st.failures.wait_until.is_some_and(|u| u >= 1_000_060));
        st.failures.wait_until = None;
        assert_eq!(
            stop_code(decide(
                &mut st,
                &cfg,
                &result(FailureClass::UsageLimit, None),
                0,
                false,
                now
            )),
            1
        );
        // Too far: past --max-wait.
        let far = 1_000_000 + 13 * 3600;
        assert_eq!(
            stop_code(decide(
                &mut st,
                &cfg,
                &result(FailureClass::UsageLimit, Some(far)),
                0,
                false,
                now
            )),
            1
        );
        // Transient: retried max-retries times, then a stop.
        for _ in 0..cfg.failure_policy.max_retries {
            assert_eq!(
                decide(
                    &mut st,
                    &cfg,
                    &result(FailureClass::Overloaded, None),
                    0,
                    false,
                    now
                ),
                Verdict::Retry
            );
        }
        assert_eq!(
            stop_code(decide(
                &mut st,
                &cfg,
                &result(FailureClass::Overloaded, None),
                0,
                false,
                now
            )),
            1
        );
        // A crash without work: once no work, twice a stop; with work it is judged as usual.
        assert!(matches!(
            decide(
                &mut st,
                &cfg,
                &result(FailureClass::Crashed, None),
                0,
                false,
                now
            ),
            Verdict::NoWork { .. }
        ));
        assert_eq!(
            stop_code(decide(
                &mut st,
                &cfg,
                &result(FailureClass::Crashed, None),
                0,
                false,
                now
            )),
            1
        );
        assert_eq!(
            decide(
                &mut st,
                &cfg,
                &result(FailureClass::Crashed, None),
                3,
                true,
                now
            ),
            Verdict::Proceed
        );
    }
}
