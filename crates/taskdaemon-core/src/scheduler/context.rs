//! What each kind of run is spawned with: its LoopRun `context` (template variables, and
//! `TASKDAEMON_<NAME>` in its environment), and the paths the cascade passes documents by.
//!
//! [`RunContext`] is typed, but its line in the store is the JSON object older versions
//! wrote (the same kebab-case keys, unknown keys kept as they are), so existing stores
//! load and records written now load in older binaries.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

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

/// A run's context: the settings it was submitted with and the template variables the
/// cascade gives each kind of run. Every field is optional; an empty text is none.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(from = "Map<String, Value>", into = "Map<String, Value>")]
pub struct RunContext {
    /// `--agent` (settings, not a template variable).
    pub agent: Option<String>,
    /// `--validate`.
    pub validate: Option<String>,
    /// `--sandbox` (the kind's name).
    pub sandbox: Option<String>,
    /// The branch the result merges into.
    pub target_branch: Option<String>,
    /// A ralph run's task; a work list's `implement NAME`.
    pub task: Option<String>,
    pub plan_id: Option<String>,
    pub spec_id: Option<String>,
    /// A plan loop's idea.
    pub user_request: Option<String>,
    pub plan_file: Option<String>,
    pub specs_dir: Option<String>,
    pub spec_file: Option<String>,
    /// A work list's spec directory (relative to the project).
    pub spec_dir: Option<String>,
    /// A stories run's file (relative to the project), and whether it has the review
    /// cycle (`yes` / `no`).
    pub stories_file: Option<String>,
    pub stories_review: Option<String>,
    pub phase_index: Option<u64>,
    pub phase_name: Option<String>,
    /// `2 of 3`.
    pub phase_number: Option<String>,
    pub completed_phases: Option<String>,
    /// Keys this version does not know (a custom loop's variables), kept as they are.
    pub extra: BTreeMap<String, Value>,
}

/// The text fields with their keys in the store.
macro_rules! text_fields {
    ($m:ident) => {
        $m!(
            (AGENT, agent),
            (VALIDATE, validate),
            (SANDBOX, sandbox),
            (TARGET, target_branch),
            (TASK, task),
            (PLAN_ID, plan_id),
            (SPEC_ID, spec_id),
            ("user-request", user_request),
            ("plan-file", plan_file),
            ("specs-dir", specs_dir),
            ("spec-file", spec_file),
            ("spec-dir", spec_dir),
            ("stories-file", stories_file),
            ("stories-review", stories_review),
            ("phase-name", phase_name),
            ("phase-number", phase_number),
            ("completed-phases", completed_phases)
        )
    };
}

impl From<Map<String, Value>> for RunContext {
    /// A value of an unexpected type stays in `extra` under its key (written back as
    /// it was), never an unreadable record.
    fn from(mut m: Map<String, Value>) -> RunContext {
        let mut c = RunContext::default();
        macro_rules! take {
            ($(($k:expr, $f:ident)),*) => {$(
                if let Some(Value::String(v)) = m.get($k) {
                    c.$f = Some(v.clone());
                    m.remove($k);
                }
            )*};
        }
        text_fields!(take);
        if let Some(n) = m.get(PHASE_INDEX).and_then(Value::as_u64) {
            c.phase_index = Some(n);
            m.remove(PHASE_INDEX);
        }
        c.extra = m.into_iter().collect();
        c
    }
}

impl From<RunContext> for Map<String, Value> {
    fn from(c: RunContext) -> Map<String, Value> {
        let mut m: Map<String, Value> = c.extra.into_iter().collect();
        macro_rules! put {
            ($(($k:expr, $f:ident)),*) => {$(
                if let Some(v) = c.$f {
                    m.insert($k.to_string(), Value::String(v));
                }
            )*};
        }
        text_fields!(put);
        if let Some(n) = c.phase_index {
            m.insert(PHASE_INDEX.to_string(), Value::from(n));
        }
        m
    }
}

impl RunContext {
    /// The JSON object (template variables of the engine's `RunConfig`, `show`).
    pub fn to_map(&self) -> Map<String, Value> {
        self.clone().into()
    }

    pub fn is_empty(&self) -> bool {
        self == &RunContext::default()
    }

    /// The paths in it that are the project's files (`store::paths` rewrites them when a
    /// store moves), with their keys.
    pub fn paths_mut(&mut self) -> [(&'static str, &mut Option<String>); 3] {
        [
            ("plan-file", &mut self.plan_file),
            ("specs-dir", &mut self.specs_dir),
            ("spec-file", &mut self.spec_file),
        ]
    }

    /// A text field: `None` when missing or empty.
    pub fn get(field: &Option<String>) -> Option<&str> {
        field.as_deref().filter(|s| !s.is_empty())
    }
}

/// The plan loop of `plan`, refining `idea`.
pub fn plan_run(plan: &Plan, idea: &str, agent: Option<&str>) -> RunContext {
    RunContext {
        plan_id: Some(plan.id.clone()),
        user_request: Some(idea.to_string()),
        plan_file: Some(plan.file.clone()),
        agent: agent.map(str::to_string),
        ..RunContext::default()
    }
}

/// The spec loop of `plan`.
pub fn spec_run(project: &Path, plan: &Plan, agent: Option<&str>) -> RunContext {
    RunContext {
        plan_id: Some(plan.id.clone()),
        plan_file: Some(plan.file.clone()),
        specs_dir: Some(specs_dir(project, &plan.id).display().to_string()),
        agent: agent.map(str::to_string),
        ..RunContext::default()
    }
}

/// The phase loop of phase `index` of `spec`.
pub fn phase_run(
    spec: &Spec,
    index: usize,
    validate: Option<&str>,
    agent: Option<&str>,
) -> RunContext {
    let phase = spec.phases.get(index).cloned().unwrap_or_else(|| Phase {
        name: "Implement".into(),
        description: String::new(),
    });
    let total = spec.phases.len().max(1);
    let done: Vec<String> = spec
        .phases
        .iter()
        .take(index)
        .map(|p| format!("- {}", phase_label(p)))
        .collect();
    RunContext {
        spec_id: Some(spec.id.clone()),
        spec_file: Some(spec.file.clone()),
        phase_index: Some(index as u64),
        phase_name: Some(phase_label(&phase)),
        phase_number: Some(format!("{} of {total}", index + 1)),
        completed_phases: Some(done.join("\n")),
        validate: validate.map(str::to_string),
        agent: agent.map(str::to_string),
        ..RunContext::default()
    }
}

fn phase_label(p: &Phase) -> String {
    if p.description.is_empty() {
        p.name.clone()
    } else {
        format!("{}: {}", p.name, p.description)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line's context as the map-based code wrote it loads typed and is written back
    /// with the same keys and values.
    #[test]
    fn a_context_written_by_the_old_code_round_trips() {
        let old = r#"{"agent":"claude","completed-phases":"- A","custom-var":{"x":1},"phase-index":1,"phase-name":"B: build","phase-number":"2 of 3","spec-file":"/p/s.md","spec-id":"ab12-spec-x","target-branch":"main","task":7,"validate":"make test"}"#;
        let c: RunContext = serde_json::from_str(old).unwrap();
        assert_eq!(c.agent.as_deref(), Some("claude"));
        assert_eq!(c.phase_index, Some(1));
        assert_eq!(c.phase_number.as_deref(), Some("2 of 3"));
        assert_eq!(c.target_branch.as_deref(), Some("main"));
        // A value of an unexpected type is kept, not a reason to drop the record.
        assert_eq!(c.task, None);
        assert_eq!(c.extra["task"], Value::from(7));
        assert_eq!(c.extra["custom-var"], serde_json::json!({"x": 1}));
        assert_eq!(serde_json::to_string(&c).unwrap(), old);
    }
}
