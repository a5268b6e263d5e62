//! The domain records of spec 3 §6: Plan, Spec and LoopRun (the spec's LoopExecution),
//! their status enums and their field constraints. Stored as kebab-case JSON.

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::scheduler::context::RunContext;
use taskstore::Record;

use super::StoreError;
use super::ids;

pub const TITLE_MAX: usize = 256;

/// The three record kinds; each is one collection and one id tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    Plan,
    Spec,
    Run,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Plan, Kind::Spec, Kind::Run];

    pub fn collection(self) -> &'static str {
        match self {
            Kind::Plan => Plan::COLLECTION,
            Kind::Spec => Spec::COLLECTION,
            Kind::Run => LoopRun::COLLECTION,
        }
    }

    /// The collection's definition (name, indexed fields).
    pub fn def(self) -> taskstore::CollectionDef {
        match self {
            Kind::Plan => Plan::collection_def(),
            Kind::Spec => Spec::collection_def(),
            Kind::Run => LoopRun::collection_def(),
        }
    }

    /// The word in the id: `1a2b3c-<tag>-slug`.
    pub fn tag(self) -> &'static str {
        match self {
            Kind::Plan => "plan",
            Kind::Spec => "spec",
            Kind::Run => "run",
        }
    }

    pub fn from_tag(tag: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.tag() == tag)
    }

    pub fn from_collection(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.collection() == name)
    }

    /// The statuses a record of this kind can have.
    pub fn statuses(self) -> &'static [&'static str] {
        match self {
            Kind::Plan => PlanStatus::NAMES,
            Kind::Spec => SpecStatus::NAMES,
            Kind::Run => RunStatus::NAMES,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.tag())
    }
}

macro_rules! status_enum {
    ($(#[$m:meta])* $name:ident { $($variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name {
            $(#[serde(rename = $text)] $variant),+
        }

        impl $name {
            pub const NAMES: &'static [&'static str] = &[$($text),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }

            pub fn parse(s: &str) -> Result<$name, StoreError> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err(StoreError::Invalid {
                        field: "status".into(),
                        reason: format!("`{s}` is not a {} status", stringify!($name).trim_end_matches("Status").to_lowercase()),
                        hint: format!("use one of: {}", Self::NAMES.join(", ")),
                    }),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

status_enum!(
    /// Spec 3 §6 Plan statuses, and `paused` (a person paused it: the cascade leaves it).
    PlanStatus {
        Draft = "draft",
        Ready = "ready",
        InProgress = "in-progress",
        Paused = "paused",
        Complete = "complete",
        Failed = "failed",
        Cancelled = "cancelled",
    }
);

status_enum!(
    /// Spec 3 §6 Spec statuses, and `paused` (a person paused it: nothing of it starts).
    SpecStatus {
        Pending = "pending",
        Blocked = "blocked",
        Running = "running",
        Paused = "paused",
        Complete = "complete",
        Failed = "failed",
    }
);

status_enum!(
    /// Spec 3 §6 LoopExecution statuses.
    RunStatus {
        Pending = "pending",
        Running = "running",
        Paused = "paused",
        Rebasing = "rebasing",
        Blocked = "blocked",
        Complete = "complete",
        Failed = "failed",
        Stopped = "stopped",
    }
);

/// A plan: what a person wants, refined into a markdown document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Plan {
    pub id: String,
    /// Structure: the record above this one (usually none for plans).
    #[serde(default)]
    pub parent: Option<String>,
    /// Execution order: records that must be complete before this one starts.
    #[serde(default)]
    pub deps: Vec<String>,
    pub title: String,
    pub status: PlanStatus,
    /// Absolute path of the plan's markdown.
    pub file: String,
    /// The branch its specs are merged into (none: the daemon's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_branch: Option<String>,
    /// The agent of the spec run the cascade queues for it (a submission's `--agent`;
    /// none: its plan run's, else the daemon's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The priority of that spec run (a submission's `--priority`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub priority: i64,
    /// Why the record is blocked, failed or held (shown by `status`); none when all is well.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

/// One phase of a spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Phase {
    pub name: String,
    #[serde(default)]
    pub description: String,
}

impl Phase {
    /// `"NAME: DESCRIPTION"` (the description may be empty).
    pub fn parse(text: &str) -> Result<Phase, StoreError> {
        let (name, description) = match text.split_once(':') {
            Some((n, d)) => (n.trim(), d.trim()),
            None => (text.trim(), ""),
        };
        if name.is_empty() {
            return Err(StoreError::Invalid {
                field: "phases".into(),
                reason: format!("phase `{text}` has no name"),
                hint: "write a phase as \"NAME: DESCRIPTION\", e.g. --phase \"Phase 1: create the stubs\"".into(),
            });
        }
        Ok(Phase {
            name: name.to_string(),
            description: description.to_string(),
        })
    }
}

/// A spec: one atomic piece of a plan, in phases.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Spec {
    pub id: String,
    /// Structure: the plan (usually) this spec belongs to. Required.
    pub parent: String,
    pub title: String,
    pub status: SpecStatus,
    #[serde(default)]
    pub deps: Vec<String>,
    /// Absolute path of the spec's markdown.
    pub file: String,
    #[serde(default)]
    pub phases: Vec<Phase>,
    /// Higher is scheduled first; ties go to the older record.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub priority: i64,
    /// Why the record is blocked, failed or held (shown by `status`); none when all is well.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
}

/// One execution of a loop (spec 3's LoopExecution).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct LoopRun {
    pub id: String,
    /// The loop type (`ralph`, `phase`, …; stored as its name).
    pub loop_type: super::LoopKind,
    #[serde(default)]
    pub parent: Option<String>,
    #[serde(default)]
    pub deps: Vec<String>,
    pub status: RunStatus,
    /// Absolute path of the run's git worktree.
    #[serde(default)]
    pub worktree: Option<String>,
    /// Current iteration, from 1.
    pub iteration: u32,
    /// Progress text accumulated over iterations.
    #[serde(default)]
    pub progress: String,
    /// Template context the run was spawned with (never runtime values).
    #[serde(default)]
    pub context: Box<crate::scheduler::context::RunContext>,
    /// Time spent in its iterations so far, over all sessions (a runtime value).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub elapsed_ms: u64,
    /// Cost the agent reported so far, US dollars (a runtime value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Higher is scheduled first; ties go to the older record.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub priority: i64,
    /// Why the record is blocked, failed or held (shown by `status`); none when all is well.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
}

impl Record for Plan {
    const COLLECTION: &'static str = "plans";
    const INDEXED: &'static [&'static str] = &["status", "parent", "deps"];
    fn id(&self) -> &str {
        &self.id
    }
    fn updated_at(&self) -> i64 {
        self.updated_at
    }
}

impl Record for Spec {
    const COLLECTION: &'static str = "specs";
    const INDEXED: &'static [&'static str] = &["status", "parent", "deps"];
    fn id(&self) -> &str {
        &self.id
    }
    fn updated_at(&self) -> i64 {
        self.updated_at
    }
}

impl Record for LoopRun {
    const COLLECTION: &'static str = "runs";
    const INDEXED: &'static [&'static str] = &["status", "parent", "deps", "loop-type"];
    fn id(&self) -> &str {
        &self.id
    }
    fn updated_at(&self) -> i64 {
        self.updated_at
    }
}

/// Any record.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum AnyRecord {
    Plan(Plan),
    Spec(Spec),
    Run(LoopRun),
}

impl AnyRecord {
    pub fn kind(&self) -> Kind {
        match self {
            AnyRecord::Plan(_) => Kind::Plan,
            AnyRecord::Spec(_) => Kind::Spec,
            AnyRecord::Run(_) => Kind::Run,
        }
    }
    pub fn id(&self) -> &str {
        match self {
            AnyRecord::Plan(r) => &r.id,
            AnyRecord::Spec(r) => &r.id,
            AnyRecord::Run(r) => &r.id,
        }
    }
    pub fn parent(&self) -> Option<&str> {
        match self {
            AnyRecord::Plan(r) => r.parent.as_deref(),
            AnyRecord::Spec(r) => Some(&r.parent),
            AnyRecord::Run(r) => r.parent.as_deref(),
        }
    }
    pub fn deps(&self) -> &[String] {
        match self {
            AnyRecord::Plan(r) => &r.deps,
            AnyRecord::Spec(r) => &r.deps,
            AnyRecord::Run(r) => &r.deps,
        }
    }
    pub fn deps_mut(&mut self) -> &mut Vec<String> {
        match self {
            AnyRecord::Plan(r) => &mut r.deps,
            AnyRecord::Spec(r) => &mut r.deps,
            AnyRecord::Run(r) => &mut r.deps,
        }
    }
    pub fn status(&self) -> &'static str {
        match self {
            AnyRecord::Plan(r) => r.status.as_str(),
            AnyRecord::Spec(r) => r.status.as_str(),
            AnyRecord::Run(r) => r.status.as_str(),
        }
    }
    /// Set the status from its name (checked against the kind's statuses).
    pub fn set_status(&mut self, s: &str) -> Result<(), StoreError> {
        match self {
            AnyRecord::Plan(r) => r.status = PlanStatus::parse(s)?,
            AnyRecord::Spec(r) => r.status = SpecStatus::parse(s)?,
            AnyRecord::Run(r) => r.status = RunStatus::parse(s)?,
        }
        Ok(())
    }
    pub fn is_complete(&self) -> bool {
        self.status() == "complete"
    }
    /// The title (runs have none: their loop type).
    pub fn title(&self) -> &str {
        match self {
            AnyRecord::Plan(r) => &r.title,
            AnyRecord::Spec(r) => &r.title,
            AnyRecord::Run(r) => r.loop_type.as_str(),
        }
    }
    pub fn created_at(&self) -> i64 {
        match self {
            AnyRecord::Plan(r) => r.created_at,
            AnyRecord::Spec(r) => r.created_at,
            AnyRecord::Run(r) => r.created_at,
        }
    }
    pub fn updated_at(&self) -> i64 {
        match self {
            AnyRecord::Plan(r) => r.updated_at,
            AnyRecord::Spec(r) => r.updated_at,
            AnyRecord::Run(r) => r.updated_at,
        }
    }
    /// Apply `f` to every path the record holds (a plan's or spec's file, a run's context
    /// paths; a run's worktree is the daemon's own and stays as it is).
    pub fn map_paths(&mut self, f: impl Fn(&str) -> String) {
        match self {
            AnyRecord::Plan(p) => p.file = f(&p.file),
            AnyRecord::Spec(s) => s.file = f(&s.file),
            AnyRecord::Run(r) => {
                for (_, v) in r.context.paths_mut() {
                    if let Some(v) = v {
                        *v = f(v);
                    }
                }
            }
        }
    }

    /// The paths of [`map_paths`](Self::map_paths), with their field names.
    pub fn paths(&self) -> Vec<(String, String)> {
        match self {
            AnyRecord::Plan(p) => vec![("file".into(), p.file.clone())],
            AnyRecord::Spec(s) => vec![("file".into(), s.file.clone())],
            AnyRecord::Run(r) => {
                let mut c = r.context.clone();
                c.paths_mut()
                    .into_iter()
                    .filter_map(|(k, v)| {
                        RunContext::get(v).map(|v| (format!("context.{k}"), v.to_string()))
                    })
                    .collect()
            }
        }
    }

    pub fn set_updated_at(&mut self, t: i64) {
        match self {
            AnyRecord::Plan(r) => r.updated_at = t,
            AnyRecord::Spec(r) => r.updated_at = t,
            AnyRecord::Run(r) => r.updated_at = t,
        }
    }
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
    /// Read a record of `kind` from JSON (a full record, as stored).
    pub fn from_json(kind: Kind, v: Value) -> Result<AnyRecord, StoreError> {
        let bad = |e: serde_json::Error| StoreError::Invalid {
            field: kind.tag().into(),
            reason: e.to_string(),
            hint:
                "send a whole record with kebab-case fields, as `taskdaemon show --json` prints it"
                    .into(),
        };
        Ok(match kind {
            Kind::Plan => AnyRecord::Plan(serde_json::from_value(v).map_err(bad)?),
            Kind::Spec => AnyRecord::Spec(serde_json::from_value(v).map_err(bad)?),
            Kind::Run => AnyRecord::Run(serde_json::from_value(v).map_err(bad)?),
        })
    }

    /// The constraints of spec 3 §6 that need nothing but the record itself.
    pub fn validate(&self) -> Result<(), StoreError> {
        let invalid = |field: &str, reason: String, hint: &str| StoreError::Invalid {
            field: field.into(),
            reason,
            hint: hint.into(),
        };
        match ids::split(self.id()) {
            Some((_, tag, _)) if tag == self.kind().tag() => {}
            _ => {
                return Err(invalid(
                    "id",
                    format!("`{}` is not a {} id", self.id(), self.kind()),
                    &format!("ids look like 1a2b3c-{}-some-title", self.kind()),
                ));
            }
        }
        match self {
            AnyRecord::Plan(p) => {
                check_title(&p.title)?;
                check_abs("file", &p.file, true)?;
            }
            AnyRecord::Spec(s) => {
                check_title(&s.title)?;
                check_abs("file", &s.file, true)?;
                if s.parent.trim().is_empty() {
                    return Err(invalid(
                        "parent",
                        "a spec needs a parent".into(),
                        "give the plan it belongs to with --parent REF",
                    ));
                }
                for p in &s.phases {
                    if p.name.trim().is_empty() {
                        return Err(invalid(
                            "phases",
                            "a phase has no name".into(),
                            "write a phase as \"NAME: DESCRIPTION\"",
                        ));
                    }
                }
            }
            AnyRecord::Run(r) => {
                if r.loop_type.as_str().trim().is_empty() {
                    return Err(invalid(
                        "loop-type",
                        "empty".into(),
                        "name a loop type (`taskdaemon loops` lists them)",
                    ));
                }
                if r.iteration < 1 {
                    return Err(invalid(
                        "iteration",
                        "must be at least 1".into(),
                        "iterations count from 1",
                    ));
                }
                if let Some(w) = &r.worktree {
                    check_abs("worktree", w, false)?;
                    if !w.is_empty() && !Path::new(w).is_absolute() {
                        return Err(invalid(
                            "worktree",
                            format!("`{w}` is not an absolute path"),
                            "a run's worktree is the absolute path the daemon made it at",
                        ));
                    }
                }
            }
        }
        if self.created_at() <= 0 || self.updated_at() < self.created_at() {
            return Err(invalid(
                "updated-at",
                format!(
                    "created-at {} / updated-at {} must be unix milliseconds with updated-at >= created-at",
                    self.created_at(),
                    self.updated_at()
                ),
                "timestamps are milliseconds since 1970",
            ));
        }
        if self.deps().iter().any(|d| d == self.id()) {
            return Err(StoreError::Cycle {
                cycle: vec![self.id().to_string(), self.id().to_string()],
            });
        }
        Ok(())
    }
}

pub(crate) fn check_title(title: &str) -> Result<(), StoreError> {
    let n = title.chars().count();
    let invalid = |reason: String, hint: &str| StoreError::Invalid {
        field: "title".into(),
        reason,
        hint: hint.into(),
    };
    if title.trim().is_empty() {
        return Err(invalid("empty".into(), "give a short title"));
    }
    if n > TITLE_MAX {
        return Err(invalid(
            format!("{n} characters, over the limit of {TITLE_MAX}"),
            "shorten the title; put details in the record's file",
        ));
    }
    if title.contains(['\n', '\r']) {
        return Err(invalid(
            "has a line break".into(),
            "a title is one line; put details in the record's file",
        ));
    }
    Ok(())
}

fn check_abs(field: &str, path: &str, required: bool) -> Result<(), StoreError> {
    if path.is_empty() && !required {
        return Ok(());
    }
    // Absolute, or relative to the repository's top level (the stored form).
    if path.is_empty() {
        return Err(StoreError::Invalid {
            field: field.into(),
            reason: "empty".into(),
            hint: "give the path of the record's file".into(),
        });
    }
    Ok(())
}
