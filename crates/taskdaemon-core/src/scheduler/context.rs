//! What each kind of run is spawned with: its LoopRun `context` (template variables, and
//! `TASKDAEMON_<NAME>` in its environment), and the paths the cascade passes documents by.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use crate::store::{Phase, Plan, Spec};

/// Keys of a run's context that are settings rather than template variables.
pub const AGENT: &str = "agent";
pub const VALIDATE: &str = "validate";
/// The run's sandbox kind (`submit --sandbox`).
pub const SANDBOX: &str = "sandbox";
pub const TARGET: &str = "target-branch";
pub const TASK: &str = "task";
pub const PHASE_INDEX: &str = "phase-index";
pub const SPEC_ID: &str = "spec-id";
pub const PLAN_ID: &str = "plan-id";

/// Where the spec loop of `plan` writes its documents.
pub fn specs_dir(project: &Path, plan_id: &str) -> PathBuf {
    project.join(".taskdaemon").join("specs").join(plan_id)
}

/// The branch a worktree named `name` works on.
pub fn branch_for(name: &str) -> String {
    format!("taskdaemon/{name}")
}

fn put(m: &mut Map<String, Value>, k: &str, v: impl Into<Value>) {
    m.insert(k.to_string(), v.into());
}

/// The plan loop of `plan`, refining `idea`.
pub fn plan_run(plan: &Plan, idea: &str, agent: Option<&str>) -> Map<String, Value> {
    let mut m = Map::new();
    put(&mut m, PLAN_ID, plan.id.as_str());
    put(&mut m, "user-request", idea);
    put(&mut m, "plan-file", plan.file.as_str());
    if let Some(a) = agent {
        put(&mut m, AGENT, a);
    }
    m
}

/// The spec loop of `plan`.
pub fn spec_run(project: &Path, plan: &Plan, agent: Option<&str>) -> Map<String, Value> {
    let mut m = Map::new();
    put(&mut m, PLAN_ID, plan.id.as_str());
    put(&mut m, "plan-file", plan.file.as_str());
    put(
        &mut m,
        "specs-dir",
        specs_dir(project, &plan.id).display().to_string(),
    );
    if let Some(a) = agent {
        put(&mut m, AGENT, a);
    }
    m
}

/// The phase loop of phase `index` of `spec`.
pub fn phase_run(
    spec: &Spec,
    index: usize,
    validate: Option<&str>,
    agent: Option<&str>,
) -> Map<String, Value> {
    let mut m = Map::new();
    let phase = spec.phases.get(index).cloned().unwrap_or_else(|| Phase {
        name: "Implement".into(),
        description: String::new(),
    });
    let total = spec.phases.len().max(1);
    put(&mut m, SPEC_ID, spec.id.as_str());
    put(&mut m, "spec-file", spec.file.as_str());
    put(&mut m, PHASE_INDEX, json!(index));
    put(&mut m, "phase-name", phase_label(&phase));
    put(&mut m, "phase-number", format!("{} of {total}", index + 1));
    let done: Vec<String> = spec
        .phases
        .iter()
        .take(index)
        .map(|p| format!("- {}", phase_label(p)))
        .collect();
    put(&mut m, "completed-phases", done.join("\n"));
    if let Some(v) = validate {
        put(&mut m, VALIDATE, v);
    }
    if let Some(a) = agent {
        put(&mut m, AGENT, a);
    }
    m
}

fn phase_label(p: &Phase) -> String {
    if p.description.is_empty() {
        p.name.clone()
    } else {
        format!("{}: {}", p.name, p.description)
    }
}

/// A string value of a context.
pub fn text<'a>(ctx: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    ctx.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}
