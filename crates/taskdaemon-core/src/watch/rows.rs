//! The model as lines of a tree: what the TUI lists and `watch --once` prints. Columns
//! line up whatever the depth: a status symbol and the name, then status, iteration,
//! phase, elapsed time, cost and (when there is room) the last tool call.

use std::time::{Duration, Instant};

use super::{Model, RunView};
use crate::duration::format_duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowKind {
    Plan,
    Spec,
    Run,
    /// A task of an implement run.
    Task,
    /// Why a run waits (under the run).
    Waiting,
}

/// One line of the tree.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub kind: RowKind,
    /// The run this line belongs to (selectable lines).
    pub run: Option<String>,
    /// The status word, for colouring.
    pub status: String,
    pub text: String,
}

/// The symbol of a plan's, spec's or run's status.
pub fn symbol(status: &str) -> &'static str {
    match status {
        "running" | "in-progress" => "●",
        "complete" | "done" => "✓",
        "failed" | "cancelled" => "✗",
        "paused" | "pausing" => "⏸",
        "blocked" => "!",
        "rebasing" => "↻",
        "stopped" => "■",
        _ => "◌",
    }
}

/// Widths of the columns after the name.
const STATUS_W: usize = 8;
const ITER_W: usize = 8;
const PHASE_W: usize = 10;
const ELAPSED_W: usize = 8;
const COST_W: usize = 7;
const TOOL_W: usize = 18;
/// The columns after the name, with their separating spaces (the tool's not counted).
const TAIL_W: usize = 1 + STATUS_W + 1 + ITER_W + 1 + PHASE_W + 1 + ELAPSED_W + 1 + COST_W;
/// A name gets at least this much before the tool column is dropped.
const NAME_MIN: usize = 16;

fn cut(s: &str, n: usize) -> String {
    let s = s.lines().next().unwrap_or("");
    if s.chars().count() <= n {
        return s.to_string();
    }
    let mut t: String = s.chars().take(n.saturating_sub(1)).collect();
    t.push('…');
    t
}

/// The layout of one frame's tree: where the name column ends.
#[derive(Debug, Clone, Copy)]
struct Layout {
    /// Indent, symbol and name together.
    lead: usize,
    tool: bool,
}

impl Layout {
    fn new(width: usize) -> Layout {
        let with_tool = width.saturating_sub(TAIL_W + 1 + TOOL_W);
        if with_tool >= NAME_MIN + 6 {
            return Layout {
                lead: with_tool,
                tool: true,
            };
        }
        Layout {
            lead: width.saturating_sub(TAIL_W).max(NAME_MIN),
            tool: false,
        }
    }

    /// `indent`, the symbol of `status` and `name`, padded to the name column's end.
    fn lead(&self, indent: &str, status: &str, name: &str) -> String {
        let room = self.lead.saturating_sub(indent.chars().count() + 2).max(4);
        format!("{indent}{} {:<room$}", symbol(status), cut(name, room))
    }
}

fn run_row(l: &Layout, indent: &str, r: &RunView, now: Instant) -> Row {
    let name = if r.title.is_empty() { &r.id } else { &r.title };
    let status = r.status_word();
    let iteration = format!("it {}", r.iteration_text());
    let phase = r.phase.as_deref().unwrap_or("");
    let elapsed = format_duration(Duration::from_millis(r.elapsed_at(now)));
    let cost = r.cost_usd.map(|c| format!("${c:.2}")).unwrap_or_default();
    let mut text = format!(
        "{} {status:<STATUS_W$} {:<ITER_W$} {:<PHASE_W$} {elapsed:>ELAPSED_W$} {cost:>COST_W$}",
        l.lead(indent, status, name),
        cut(&iteration, ITER_W),
        cut(phase, PHASE_W),
    );
    if l.tool
        && let Some(t) = &r.last_tool
    {
        text.push(' ');
        text.push_str(&cut(t, TOOL_W));
    }
    Row {
        kind: RowKind::Run,
        run: Some(r.id.clone()),
        status: status.to_string(),
        text: text.trim_end().to_string(),
    }
}

impl Model {
    /// The tree, each line at most about `width` characters, elapsed times as they are
    /// now.
    pub fn rows(&self, width: usize) -> Vec<Row> {
        self.rows_at(width, Instant::now())
    }

    /// The tree with running runs' elapsed times at `now`.
    pub fn rows_at(&self, width: usize, now: Instant) -> Vec<Row> {
        let l = Layout::new(width);
        let mut out = Vec::new();
        let head = |kind, indent: &str, status: &str, name: String| Row {
            kind,
            run: None,
            status: status.to_string(),
            text: cut(
                &format!("{} {status}", l.lead(indent, status, &name)),
                width,
            ),
        };
        for p in &self.plans {
            out.push(head(
                RowKind::Plan,
                "",
                &p.status,
                format!("plan {}", p.title),
            ));
            for id in &p.runs {
                self.push_run(&mut out, &l, "  ", id, width, now);
            }
            for s in &p.specs {
                out.push(head(
                    RowKind::Spec,
                    "  ",
                    &s.status,
                    format!("spec {}", s.title),
                ));
                for id in &s.runs {
                    self.push_run(&mut out, &l, "    ", id, width, now);
                }
            }
        }
        if !self.standalone.is_empty() {
            out.push(Row {
                kind: RowKind::Plan,
                run: None,
                status: String::new(),
                text: "runs".into(),
            });
            for id in &self.standalone {
                self.push_run(&mut out, &l, "  ", id, width, now);
            }
        }
        out
    }

    fn push_run(
        &self,
        out: &mut Vec<Row>,
        l: &Layout,
        indent: &str,
        id: &str,
        width: usize,
        now: Instant,
    ) {
        let Some(r) = self.runs.get(id) else { return };
        out.push(run_row(l, indent, r, now));
        let sub = format!("{indent}    ");
        if let Some(w) = &r.waiting {
            out.push(Row {
                kind: RowKind::Waiting,
                run: Some(r.id.clone()),
                status: "waiting".into(),
                text: cut(&format!("{sub}{}", w.label()), width),
            });
        }
        for (title, status) in &r.tasks {
            out.push(Row {
                kind: RowKind::Task,
                run: Some(r.id.clone()),
                status: status.clone(),
                text: cut(&format!("{sub}{} task {title}", symbol(status)), width),
            });
        }
    }

    /// The header line: repository and daemon.
    pub fn header(&self) -> String {
        let daemon = match self.daemon {
            Some(pid) => format!("daemon pid {pid}"),
            None => "no daemon".into(),
        };
        let active = self
            .runs
            .values()
            .filter(|r| r.status == crate::store::RunStatus::Running)
            .count();
        format!(
            "taskdaemon watch: {} ({daemon}; {active} running)",
            self.repository.display()
        )
    }
}
