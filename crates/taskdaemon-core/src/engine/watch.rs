//! No silent hours: while the agent runs, say when it has printed nothing for a while
//! (`quiet-warning`), and stop it when it makes no progress — no words, no tool calls —
//! while it only retries (`no-progress-timeout`): Codex never gives up on an unreachable
//! server, and Claude retries for minutes.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::events::{EngineEvent, EventSink};
use crate::agent::Activity;

#[derive(Debug)]
struct Seen {
    last_output: Instant,
    last_progress: Instant,
    /// The last stdout line was not progress (a retry, an error) or nothing made progress yet.
    idle: bool,
    last_line: String,
    warned: bool,
}

/// What the agent printed, and when; shared by the output callback and the watcher.
#[derive(Debug)]
pub(super) struct Watch {
    start: Instant,
    seen: Mutex<Seen>,
    /// Set when the watcher stopped the agent for want of progress.
    pub(super) stopped_after: Mutex<Option<Duration>>,
}

impl Watch {
    pub(super) fn new() -> Watch {
        let now = Instant::now();
        Watch {
            start: now,
            seen: Mutex::new(Seen {
                last_output: now,
                last_progress: now,
                idle: true,
                last_line: String::new(),
                warned: false,
            }),
            stopped_after: Mutex::new(None),
        }
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A line of output and what the parser made of it.
    pub(super) fn line(&self, text: &str, stdout: bool, acts: &[Activity]) {
        let now = Instant::now();
        let mut s = self.seen();
        s.last_output = now;
        s.warned = false;
        if !text.trim().is_empty() {
            s.last_line = text.trim().chars().take(200).collect();
        }
        let progress = acts
            .iter()
            .any(|a| matches!(a, Activity::Text { .. } | Activity::ToolCall { .. }));
        if progress {
            s.last_progress = now;
            s.idle = false;
        } else if stdout {
            s.idle = true;
        }
    }

    pub(super) fn stopped(&self) -> Option<Duration> {
        *self.stopped_after.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs until `done` is cancelled: warns once per quiet spell, and cancels `agent`
    /// when no progress came for `deadline` while the agent only retried.
    pub(super) async fn run(
        &self,
        n: u32,
        quiet: Option<Duration>,
        deadline: Option<Duration>,
        events: &EventSink,
        agent: &CancellationToken,
        notes: &Mutex<Vec<String>>,
    ) -> std::convert::Infallible {
        let tick = [quiet, deadline]
            .into_iter()
            .flatten()
            .min()
            .map(|d| (d / 4).clamp(Duration::from_millis(100), Duration::from_secs(5)));
        let Some(tick) = tick else {
            return std::future::pending().await;
        };
        loop {
            tokio::time::sleep(tick).await;
            if self.check(n, quiet, deadline, events, notes) {
                agent.cancel();
                return std::future::pending().await;
            }
        }
    }

    /// One look; true when the agent must be stopped.
    fn check(
        &self,
        n: u32,
        quiet: Option<Duration>,
        deadline: Option<Duration>,
        events: &EventSink,
        notes: &Mutex<Vec<String>>,
    ) -> bool {
        let now = Instant::now();
        let mut s = self.seen();
        let silent = now - s.last_output;
        if let Some(q) = quiet
            && !s.warned
            && silent >= q
        {
            s.warned = true;
            let elapsed = now - self.start;
            let message = format!(
                "the agent has printed nothing for {} (iteration {n} running for {}); its last line: {}",
                crate::duration::format_duration(silent),
                crate::duration::format_duration(elapsed),
                if s.last_line.is_empty() {
                    "(none)"
                } else {
                    &s.last_line
                }
            );
            push(notes, message.clone());
            events.emit(EngineEvent::Quiet {
                iteration: n,
                silent_ms: silent.as_millis() as u64,
                elapsed_ms: elapsed.as_millis() as u64,
                last_line: s.last_line.clone(),
                message,
            });
        }
        let Some(d) = deadline.filter(|d| s.idle && now - s.last_progress >= *d) else {
            return false;
        };
        *self.stopped_after.lock().unwrap_or_else(|e| e.into_inner()) = Some(d);
        push(
            notes,
            format!(
                "no progress from the agent for {} (no words, no tool calls; last line: {}): stopping it",
                crate::duration::format_duration(d),
                s.last_line
            ),
        );
        true
    }
}

fn push(notes: &Mutex<Vec<String>>, note: String) {
    notes.lock().unwrap_or_else(|e| e.into_inner()).push(note);
}
