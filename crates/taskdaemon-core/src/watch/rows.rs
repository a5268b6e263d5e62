//! The model as lines of a tree: what the TUI lists and `watch --once` prints.

use std::time::Duration;

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

fn cut(s: &str, n: usize) -> String {
    let s = s.lines().next().unwrap_or("");
    if s.chars().count() <= n {
        return s.to_string();
    }
    let mut t: String = s.chars().take(n.saturating_sub(1)).collect();
    t.push('…');
    t
}

fn run_row(indent: &str, r: &RunView, width: usize) -> Row {
    let name = if r.title.is_empty() { &r.id } else { &r.title };
    let phase = r
        .phase
        .as_deref()
        .map(|p| format!(" {p}"))
        .unwrap_or_default();
    let tool = r
        .last_tool
        .as_deref()
        .map(|t| format!(" {}", cut(t, 14)))
        .unwrap_or_default();
    let cost = r.cost_usd.map(|c| format!(" ${c:.2}")).unwrap_or_default();
    let elapsed = format_duration(Duration::from_millis(r.elapsed_ms));
    let tail = format!(
        " {:<9} it {}{phase}{tool} {elapsed}{cost}",
        r.status.as_str(),
        r.iteration_text()
    );
    let room = width
        .saturating_sub(indent.len() + tail.chars().count() + 1)
        .max(8);
    Row {
        kind: RowKind::Run,
        run: Some(r.id.clone()),
        status: r.status.as_str().to_string(),
        text: format!("{indent}{:<room$}{tail}", cut(name, room)),
    }
}

impl Model {
    /// The tree, each line at most about `width` characters.
    pub fn rows(&self, width: usize) -> Vec<Row> {
        let mut out = Vec::new();
        let head = |kind, status: &str, text: String| Row {
            kind,
            run: None,
            status: status.to_string(),
            text: cut(&text, width),
        };
        for p in &self.plans {
            out.push(head(
                RowKind::Plan,
                &p.status,
                format!("plan {} [{}]", p.title, p.status),
            ));
            for id in &p.runs {
                self.push_run(&mut out, "  ", id, width);
            }
            for s in &p.specs {
                out.push(head(
                    RowKind::Spec,
                    &s.status,
                    format!("  spec {} [{}]", s.title, s.status),
                ));
                for id in &s.runs {
                    self.push_run(&mut out, "    ", id, width);
                }
            }
        }
        if !self.standalone.is_empty() {
            out.push(head(RowKind::Plan, "", "runs".into()));
            for id in &self.standalone {
                self.push_run(&mut out, "  ", id, width);
            }
        }
        out
    }

    fn push_run(&self, out: &mut Vec<Row>, indent: &str, id: &str, width: usize) {
        let Some(r) = self.runs.get(id) else { return };
        out.push(run_row(indent, r, width));
        let sub = format!("{indent}   ");
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
                text: cut(&format!("{sub}task {title} [{status}]"), width),
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
