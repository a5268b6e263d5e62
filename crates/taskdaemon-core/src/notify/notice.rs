//! One notice (payload schema 1, docs/notifications.md): what happened, to which run, why
//! in the agent's words, the command to run next, and the run's figures.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Kind, Next, Place, next_step};
use crate::daemon::events::RunFacts;

/// The payload's schema version: bumped when a field changes meaning or goes away.
pub const SCHEMA: u32 = 1;

/// How a finished run's branch went into its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MergeOutcome {
    /// The target moved: the work is in it.
    Merged,
    /// The target is checked out: the work waits on `integration_branch` for a person.
    Held,
}

/// Where a run's work went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MergeFacts {
    pub outcome: MergeOutcome,
    /// The branch merged into (`main`).
    pub target: String,
    /// The run's branch.
    pub branch: Option<String>,
    /// Where a held result waits (`taskdaemon/integration/main`).
    pub integration_branch: Option<String>,
    /// The checkout that has the target checked out (where the person merges).
    pub checkout: Option<String>,
}

/// One message: everything a person needs to act without opening a terminal first.
/// Serialized as the documented payload (snake_case keys, `null` for what is unknown).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notice {
    pub schema: u32,
    #[serde(rename = "event")]
    pub kind: Kind,
    /// When the notice was made (RFC 3339, UTC).
    pub at: String,
    /// The repository's top level (for a daemon run: the daemon's repository).
    pub repository: String,
    /// The run's id (`null` for the daemon's own events).
    pub run: Option<String>,
    /// The plan, spec or task title.
    pub title: Option<String>,
    /// Why, in the agent's words (the BLOCKED reason, the DECIDE question, the agent's
    /// usage-limit line) or the outcome's (`validation passed`).
    pub reason: String,
    /// The one shell command line to run next; `null` when nothing is to be run.
    pub action: Option<String>,
    /// Plain words around it: what to do first, or why nothing is to be run.
    pub action_note: Option<String>,
    /// Iterations the run has done.
    pub iterations: Option<u32>,
    /// Time spent in its iterations, all sessions.
    pub duration_ms: Option<u64>,
    /// What the agent reported it cost, US dollars; `null` when it reports none.
    pub cost_usd: Option<f64>,
    /// The head of the run's branch.
    pub commit: Option<String>,
    /// The run's web page, when a daemon serves one (none in this version).
    pub link: Option<String>,
    /// Where the work went, for a finished run that was merged or held.
    pub merge: Option<MergeFacts>,
}

impl Notice {
    /// A notice of `kind` about `run` (empty: the daemon itself), with the command for its
    /// kind and place.
    pub fn new(kind: Kind, place: Place<'_>, run: &str, title: &str, reason: &str) -> Notice {
        let next = next_step(kind, place, run, None, None);
        Notice {
            schema: SCHEMA,
            kind,
            at: crate::clock::now_rfc3339(),
            repository: place.repository().display().to_string(),
            run: Some(run.to_string()).filter(|r| !r.is_empty()),
            title: Some(title.trim().to_string()).filter(|t| !t.is_empty()),
            reason: reason.trim().to_string(),
            action: next.command,
            action_note: next.note,
            iterations: None,
            duration_ms: None,
            cost_usd: None,
            commit: None,
            link: None,
            merge: None,
        }
    }

    /// With the run's figures.
    pub fn with_facts(mut self, f: &RunFacts) -> Notice {
        self.iterations = Some(f.iterations);
        self.duration_ms = Some(f.duration_ms);
        self.cost_usd = f.cost_usd;
        self.commit = f.commit.clone();
        self
    }

    /// With the next step `next` instead of the kind's usual one.
    pub fn with_next(mut self, next: Next) -> Notice {
        self.action = next.command;
        self.action_note = next.note;
        self
    }

    /// Its kind and run (`blocked of run 2026…`), for a log line about it.
    pub fn describe(&self) -> String {
        match &self.run {
            None => self.kind.to_string(),
            Some(r) => format!("{} of run {r}", self.kind),
        }
    }

    /// The repository's directory name.
    pub(crate) fn repo_name(&self) -> String {
        Path::new(&self.repository)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.repository.clone())
    }

    /// The headline, with a held or merged result said.
    pub(crate) fn headline(&self) -> String {
        match (&self.kind, &self.merge) {
            (Kind::Complete, Some(m)) if m.outcome == MergeOutcome::Held => format!(
                "is COMPLETE; its merge into {} is HELD for you to take",
                m.target
            ),
            (Kind::Complete, Some(m)) => format!("is COMPLETE and merged into {}", m.target),
            (k, _) => k.headline().to_string(),
        }
    }

    /// One line for a terminal or a desktop notification's summary.
    pub fn summary(&self) -> String {
        let repo = self.repo_name();
        let Some(run) = &self.run else {
            return format!("taskdaemon in {repo} {}", self.headline());
        };
        let title = self
            .title
            .as_ref()
            .map(|t| format!(" \"{t}\""))
            .unwrap_or_default();
        format!("taskdaemon: run {run}{title} in {repo} {}", self.headline())
    }

    /// The plain text: no markup at all.
    pub fn text(&self) -> String {
        super::render::plain(self)
    }

    /// CommonMark (Discord, Matrix clients, GitHub).
    pub fn markdown(&self) -> String {
        super::render::markdown(self, super::render::Dialect::CommonMark)
    }

    /// The payload for a sink of `format`: the notice's fields, `text` and `markdown`, and
    /// the field the target reads (Slack `text`, Discord `content`, Matrix
    /// `body`/`formatted_body`).
    pub fn body(&self, format: super::Format) -> serde_json::Value {
        super::render::body(self, format)
    }
}
