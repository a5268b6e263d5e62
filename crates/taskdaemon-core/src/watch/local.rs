//! Without a daemon: the loop in this directory, from its `.ralph/` files.

use std::path::Path;

use super::{Model, RunView, Waiting};
use crate::engine::{Outcome, RunState};
use crate::store::RunStatus;
use crate::workspace::Workspace;

/// The model of the foreground loop (`run`/`task`) whose `.ralph/` is in `dir`; `None`
/// when there is none.
pub fn local_model(dir: &Path) -> Option<Model> {
    let ws = Workspace::new(dir);
    let state = RunState::load(&ws).ok()??;
    let running = ws.is_locked();
    let status = match (&state.outcome, running) {
        (_, true) => RunStatus::Running,
        (None, false) => RunStatus::Stopped,
        (Some(Outcome::Complete { .. }), _) => RunStatus::Complete,
        (Some(Outcome::Blocked { .. } | Outcome::Decide { .. }), _) => RunStatus::Blocked,
        (Some(Outcome::Interrupted), _) => RunStatus::Stopped,
        (Some(_), _) => RunStatus::Failed,
    };
    let iteration = if running {
        state.iterations_done + 1
    } else {
        state.iterations_done
    };
    let waiting = match (ws.read_blocked(), ws.read_decide()) {
        (Ok(Some(b)), _) => Some(Waiting::Blocked(b.trim().to_string())),
        (_, Ok(Some(d))) if d.answer.is_none() => Some(Waiting::Decide(d.question)),
        _ => None,
    };
    let phase = std::fs::read_to_string(ws.root().join("phase.txt"))
        .ok()
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty());
    let view = RunView {
        id: state.run_id.clone(),
        title: state.config.task.lines().next().unwrap_or("").to_string(),
        loop_type: state.config.loop_name.clone(),
        status,
        iteration,
        max_iterations: Some(state.config.max_iterations),
        phase,
        last_tool: None,
        elapsed_ms: state.elapsed_ms,
        cost_usd: state.cost_reported.then_some(state.cost_usd),
        waiting,
        workdir: Some(dir.to_path_buf()),
        note: state.outcome.as_ref().map(|o| o.detail()),
        tasks: Vec::new(),
        live: Vec::new(),
        pausing: false,
        since: None,
    };
    let mut m = Model {
        repository: dir.to_path_buf(),
        ..Model::default()
    };
    m.standalone.push(view.id.clone());
    m.runs.insert(view.id.clone(), view);
    Some(m)
}
