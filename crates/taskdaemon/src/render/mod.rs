//! Rendering of engine events: for people (agent output on stdout, harness notes on stderr,
//! a live status line when stderr is a terminal) or for machines (`--json`: one event per
//! line on stdout). A closed pipe is not an error: output just stops.

mod summary;

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use taskdaemon_core::agent::Activity;
use taskdaemon_core::duration::format_duration;
use taskdaemon_core::engine::EngineEvent;
use taskdaemon_core::gates::scope::Severity;
use tokio::sync::mpsc::UnboundedReceiver;

pub use summary::summary_block;

pub struct Renderer {
    json: bool,
    tty: bool,
    status: Status,
    /// The live status line (indicatif), while an iteration is active.
    bar: Option<indicatif::ProgressBar>,
}

/// Whether stderr takes a live status line: a terminal, not `TERM=dumb`.
fn status_line_wanted(json: bool) -> bool {
    !json && std::io::stderr().is_terminal() && std::env::var("TERM").map_or(true, |t| t != "dumb")
}

/// A spinner on stderr; dimmed unless NO_COLOR is set.
fn status_bar() -> indicatif::ProgressBar {
    let plain = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    // wide_msg: cut to the terminal's width, so the line never wraps.
    let template = if plain {
        "{spinner} {wide_msg}"
    } else {
        "{spinner:.dim} {wide_msg:.dim}"
    };
    let style = indicatif::ProgressStyle::with_template(template)
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner())
        .tick_chars("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏·");
    let bar =
        indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
    bar.set_style(style);
    bar
}

#[derive(Default)]
struct Status {
    iteration: u32,
    max: u32,
    agent: String,
    last: String,
    cost: f64,
    started: Option<Instant>,
    active: bool,
    iteration_cost: Option<f64>,
}

impl Renderer {
    pub fn new(json: bool) -> Renderer {
        Renderer {
            json,
            tty: status_line_wanted(json),
            status: Status::default(),
            bar: None,
        }
    }

    pub async fn run(mut self, mut rx: UnboundedReceiver<EngineEvent>) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                ev = rx.recv() => match ev {
                    Some(ev) => self.event(ev),
                    None => break,
                },
                _ = tick.tick(), if self.tty && self.status.active => self.draw_status(),
            }
        }
        self.clear_status();
    }

    fn event(&mut self, ev: EngineEvent) {
        if self.json {
            if let Ok(line) = taskdaemon_core::json::event(&ev).map(|v| v.to_string()) {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{line}");
                let _ = out.flush();
            }
            return;
        }
        match ev {
            ev @ EngineEvent::RunStarted { .. } => self.run_started(ev),
            EngineEvent::Warning { message } => self.note(&format!("warning: {message}")),
            EngineEvent::Evidence { message } => self.note(&message),
            EngineEvent::UncommittedSaved { message, .. } => self.note(&message),
            EngineEvent::Gate {
                iteration,
                gate,
                passed,
                message,
                severity,
                ..
            } => self.note(&format!(
                "iteration {iteration}: gate {gate}: {}{message}",
                match (passed, severity) {
                    (true, _) => "",
                    (false, Severity::Soft) => "reminder: ",
                    (false, _) => "not met: ",
                }
            )),
            EngineEvent::Stall {
                iteration,
                repeats,
                snapshot,
                rolled_back_to,
                ..
            } => match rolled_back_to {
                Some(to) => self.note(&format!(
                    "iteration {iteration}: stalled again ({repeats} iterations of the same tool calls): rolled back to {to}"
                )),
                None => self.note(&format!(
                    "iteration {iteration}: stalled ({repeats} iterations of the same tool calls): saved {}, recovery guidance in .ralph/feedback.md",
                    snapshot.as_deref().unwrap_or("a snapshot")
                )),
            },
            EngineEvent::Signal { signal, text, .. } => {
                self.note(&format!(
                    "agent says {}{}",
                    signal.to_uppercase(),
                    text.map(|t| format!(": {t}")).unwrap_or_default()
                ));
            }
            EngineEvent::ValidationStarted { command, .. } => {
                self.status.last = format!("validating: {command}");
                self.note(&format!("validating: $ {command}"));
            }
            EngineEvent::ValidationFinished {
                interrupted: true,
                duration_ms,
                ..
            } => self.note(&format!(
                "validation interrupted by the stop after {}: no verdict",
                format_duration(Duration::from_millis(duration_ms))
            )),
            EngineEvent::ValidationFinished {
                passed,
                exit_code,
                timed_out,
                duration_ms,
                ..
            } => self.note(&format!(
                "validation {} (exit {exit_code}{}) in {}",
                if passed { "passed" } else { "failed" },
                if timed_out { ", timed out" } else { "" },
                format_duration(Duration::from_millis(duration_ms))
            )),
            EngineEvent::GitTampered { iteration, changes } => {
                let list: Vec<String> = changes.iter().map(|c| c.to_string()).collect();
                self.note(&format!(
                    "warning: iteration {iteration}: the agent changed git's own files, which taskdaemon's git would have run outside the sandbox: {}; the iteration is rejected",
                    list.join(", ")
                ))
            }
            EngineEvent::CompletionRejected { reason, .. } => {
                self.note(&format!("COMPLETE rejected: {reason}"))
            }
            EngineEvent::AgentFailure {
                iteration,
                class,
                line,
                ..
            } => self.note(&format!(
                "iteration {iteration}: agent failure ({}): {}",
                class.name(),
                line.as_deref().unwrap_or("(no output)")
            )),
            EngineEvent::Waiting {
                iteration, message, ..
            } => {
                self.status.iteration = iteration;
                self.status.last = message.clone();
                self.status.active = true;
                self.note(&message);
            }
            EngineEvent::Quiet { message, .. } => {
                self.status.last = "quiet: no output".into();
                self.note(&message);
            }
            EngineEvent::WaitOver { iteration, .. } => {
                self.status.active = false;
                self.note(&format!("the wait is over: iteration {iteration} runs again"));
            }
            EngineEvent::RunFinished { summary } => {
                self.status.active = false;
                self.clear_status();
                self.out(&summary_block(&summary));
            }
            EngineEvent::Work(w) => {
                if let Some(text) = w.describe() {
                    self.note(&text);
                }
            }
            ev @ (EngineEvent::IterationStarted { .. }
            | EngineEvent::Agent { .. }
            | EngineEvent::AgentFinished { .. }
            | EngineEvent::IterationFinished { .. }) => self.iteration_event(ev),
        }
    }

    /// The start line: which run, how it starts, what it runs, where.
    fn run_started(&mut self, ev: EngineEvent) {
        let EngineEvent::RunStarted {
            run_id,
            loop_type,
            agent,
            workdir,
            first_iteration,
            max_iterations,
            validate,
            resumed,
            sandbox,
            work,
        } = ev
        else {
            return;
        };
        self.status.agent = agent.clone();
        self.status.max = max_iterations;
        self.status.started = Some(Instant::now());
        let start = if resumed {
            format!("resuming at iteration {first_iteration}")
        } else {
            "starting".into()
        };
        let what = match work {
            Some(w) => w,
            None => format!(
                "loop {loop_type} · {}",
                validate
                    .map(|v| format!("validate `{v}`"))
                    .unwrap_or_else(|| "no validation".into())
            ),
        };
        self.note(&format!(
            "run {run_id} {start} · {what} · agent {agent} · sandbox {sandbox} · at most {max_iterations} iterations · in {workdir}"
        ));
    }

    /// An iteration's own events: its start, the agent's activity and end, its finish
    /// (`event` gives it those only).
    fn iteration_event(&mut self, ev: EngineEvent) {
        match ev {
            EngineEvent::IterationStarted {
                iteration,
                max_iterations,
                ..
            } => {
                self.status.iteration = iteration;
                self.status.max = max_iterations;
                self.status.last.clear();
                self.status.active = true;
                self.note(&format!("── iteration {iteration}/{max_iterations} ──"));
            }
            EngineEvent::Agent {
                activity, member, ..
            } => {
                let tag = member.map(|m| format!("[{m}] ")).unwrap_or_default();
                match activity {
                    Activity::Text { text } => {
                        self.status.last = text
                            .lines()
                            .last()
                            .unwrap_or_default()
                            .chars()
                            .take(60)
                            .collect();
                        let lines: Vec<String> =
                            text.lines().map(|l| format!("{tag}{l}")).collect();
                        self.out(&lines.join("\n"));
                    }
                    Activity::ToolCall { name, detail } => {
                        self.status.last = format!("{name} {detail}").chars().take(60).collect();
                        let line =
                            taskdaemon_core::agent::readable::activity_text(&Activity::ToolCall {
                                name,
                                detail,
                            });
                        self.out(&format!("{tag}  {line}"));
                    }
                    Activity::Other { text } => self.out(&format!("{tag}{text}")),
                }
            }
            EngineEvent::AgentFinished {
                member,
                exit_code,
                timed_out,
                interrupted,
                duration_ms,
                tool_calls,
                cost_usd,
                ..
            } => {
                if let Some(c) = cost_usd {
                    self.status.cost += c;
                }
                self.status.iteration_cost = cost_usd;
                let how = if timed_out {
                    " (timed out: its process group was stopped)"
                } else if interrupted {
                    " (interrupted)"
                } else {
                    ""
                };
                self.note(&format!(
                    "{}agent exited {exit_code}{how} after {}, {tool_calls} tool calls{}",
                    member.map(|m| format!("task {m}: ")).unwrap_or_default(),
                    format_duration(Duration::from_millis(duration_ms)),
                    cost_usd.map(|c| format!(", ${c:.4}")).unwrap_or_default()
                ));
            }
            EngineEvent::IterationFinished {
                iteration,
                outcome,
                commit,
                stuck_count,
                duration_ms,
                cost_total_usd,
                ..
            } => {
                self.status.active = false;
                // One line per iteration, like a CI log: outcome, duration, commit, cost.
                let cost = match self.status.iteration_cost.take() {
                    Some(c) => format!(" · ${c:.4} (total ${cost_total_usd:.4})"),
                    None => String::new(),
                };
                self.note(&format!(
                    "iteration {iteration}: {outcome} · {} · {}{cost} · stuck count {stuck_count}",
                    format_duration(Duration::from_millis(duration_ms as u64)),
                    commit
                        .map(|c| format!("commit {c}"))
                        .unwrap_or_else(|| "no new commit".into())
                ));
            }
            _ => {}
        }
    }

    fn out(&mut self, text: &str) {
        let write = || {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{text}");
            let _ = out.flush();
        };
        match &self.bar {
            Some(b) => b.suspend(write),
            None => write(),
        }
        self.draw_status();
    }

    fn note(&mut self, text: &str) {
        // Through out.rs: `-q` drops notes (not warnings).
        let write = || crate::out::write_err(&format!("taskdaemon: {text}\n"));
        match &self.bar {
            Some(b) => b.suspend(write),
            None => write(),
        }
        self.draw_status();
    }

    fn clear_status(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }

    fn draw_status(&mut self) {
        if !self.status.active {
            self.clear_status();
        }
        if !self.tty || !self.status.active {
            return;
        }
        let s = &self.status;
        let elapsed = s
            .started
            .map(|t| format_duration(t.elapsed()))
            .unwrap_or_default();
        let cost = if s.cost > 0.0 {
            format!(" · ${:.4}", s.cost)
        } else {
            String::new()
        };
        let line = format!(
            "iteration {}/{} · {elapsed} · {} · {}{cost}",
            s.iteration, s.max, s.agent, s.last
        );
        let bar = self.bar.get_or_insert_with(status_bar);
        bar.set_message(line);
        bar.tick();
    }
}
