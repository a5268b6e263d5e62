//! What a notice says to do next, and why it was sent: one place for both, so a
//! foreground run and a daemon run say the same for the same outcome. An action is one
//! command line `sh` runs as it is (`a && b`, arguments quoted); anything that is not a
//! command goes into the plain words of its note.

use std::path::Path;

use super::{Kind, MergeFacts, MergeOutcome};
use crate::engine::Outcome;
use crate::shell::quote;

/// Where a run works, for the command that acts on it.
#[derive(Debug, Clone, Copy)]
pub enum Place<'a> {
    /// A foreground `run`/`task` in this directory.
    Local(&'a Path),
    /// A daemon run of the repository `repo`, in `worktree` once it started.
    Daemon {
        repo: &'a Path,
        worktree: Option<&'a Path>,
    },
}

impl Place<'_> {
    pub fn repository(&self) -> &Path {
        match self {
            Place::Local(d) => d,
            Place::Daemon { repo, .. } => repo,
        }
    }
}

/// The next step: a command line and the words around it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Next {
    pub command: Option<String>,
    pub note: Option<String>,
}

fn next(command: String, note: &str) -> Next {
    Next {
        command: Some(command),
        note: Some(note.to_string()).filter(|n| !n.is_empty()),
    }
}

fn td(dir: &Path) -> String {
    format!("taskdaemon -C {}", quote(&dir.display().to_string()))
}

/// Why a run ended, in words (no command: the action says that): the same text for a
/// foreground and a daemon run.
pub fn reason_of(o: &Outcome) -> String {
    match o {
        Outcome::Complete { verified: true } => "validation passed".into(),
        Outcome::Complete { verified: false } => {
            "the agent promised completion; no validation command verified it".into()
        }
        Outcome::LimitReached { limit } => {
            format!("{} reached before completion", limit.describe())
        }
        Outcome::Blocked { reason } => reason.trim().to_string(),
        Outcome::Decide { question } => question.trim().to_string(),
        Outcome::Stuck { iterations } => {
            format!("no new commit in {iterations} iterations in a row")
        }
        Outcome::Failed { reason } => reason.trim().to_string(),
        Outcome::AgentFailed { class, reason } => format!("{}: {}", class.name(), reason.trim()),
        Outcome::ValidationMissing { command, .. } => format!(
            "the validation command could not run: the program of {command:?} was not found"
        ),
        Outcome::Interrupted => "interrupted".into(),
    }
}

/// Why a run waits for the agent's usage limit: the agent's own line (else the harness's
/// words) and the reset time.
pub fn wait_reason(line: Option<&str>, message: &str, until: Option<&str>) -> String {
    let words = line
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .unwrap_or(message.trim());
    match until {
        Some(u) => format!("{words} (until {u})"),
        None => words.to_string(),
    }
}

/// The step a person takes on a notice of `kind` about `run` at `place`: `merge` says
/// where a finished run's work went, `until` when a usage-limit wait ends.
pub fn next_step(
    kind: Kind,
    place: Place<'_>,
    run: &str,
    merge: Option<&MergeFacts>,
    until: Option<&str>,
) -> Next {
    if let Some(m) = merge.filter(|m| m.outcome == MergeOutcome::Held) {
        return take_held(place, m);
    }
    match kind {
        Kind::UsageLimitWait => {
            return Next {
                command: None,
                note: Some(match until {
                    Some(u) => format!("nothing to do: the run resumes on its own at {u}"),
                    None => {
                        "nothing to do: the run resumes on its own once the limit resets".into()
                    }
                }),
            };
        }
        Kind::UsageLimitOver => {
            return Next {
                command: None,
                note: Some("nothing to do: the run goes on".into()),
            };
        }
        _ => {}
    }
    match place {
        Place::Local(dir) => local_step(kind, dir),
        Place::Daemon { repo, worktree } => daemon_step(kind, repo, worktree, run, merge),
    }
}

fn local_step(kind: Kind, dir: &Path) -> Next {
    let c = td(dir);
    match kind {
        Kind::Blocked => next(
            format!("{c} unblock && {c} run --resume"),
            "deal with the reason first, then",
        ),
        Kind::Decide => next(
            format!("{c} answer \"…\" && {c} run --resume"),
            "write your answer in place of …",
        ),
        Kind::Failed | Kind::Stuck | Kind::MergeConflict => next(
            format!("{c} logs"),
            "read what the last iterations did; once the cause is fixed, resume with run --resume",
        ),
        Kind::DaemonStopped => next(format!("{c} daemon start"), ""),
        Kind::Complete | Kind::MergeHeld | Kind::UsageLimitWait | Kind::UsageLimitOver => {
            next(format!("{c} report"), "the report shows what the run did")
        }
    }
}

fn daemon_step(
    kind: Kind,
    repo: &Path,
    worktree: Option<&Path>,
    run: &str,
    merge: Option<&MergeFacts>,
) -> Next {
    let c = td(repo);
    let w = td(worktree.unwrap_or(repo));
    let id = quote(run);
    match kind {
        Kind::Blocked => next(
            format!("{w} unblock && {c} resume {id}"),
            "deal with the reason first, then",
        ),
        Kind::Decide => next(
            format!("{w} answer \"…\" && {c} resume {id}"),
            "write your answer in place of …",
        ),
        Kind::MergeConflict => next(
            format!("{c} resume {id}"),
            "resolve the conflict first as the reason says, then",
        ),
        Kind::Failed | Kind::Stuck => next(
            format!("{c} logs {id}"),
            "read what the last iterations did; once the cause is fixed, resume the run",
        ),
        Kind::DaemonStopped => next(format!("{c} daemon start"), ""),
        Kind::Complete if merge.is_some() => next(
            format!("{c} report {id}"),
            "it is merged; the report shows what the run did",
        ),
        Kind::Complete | Kind::MergeHeld | Kind::UsageLimitWait | Kind::UsageLimitOver => next(
            format!("{c} report {id}"),
            "the report shows what the run did",
        ),
    }
}

/// A held result is taken with a merge in the checkout that has the target checked out.
fn take_held(place: Place<'_>, m: &MergeFacts) -> Next {
    let held = m
        .integration_branch
        .clone()
        .unwrap_or_else(|| crate::git::integrate::held_branch(&m.target));
    let checkout = m
        .checkout
        .clone()
        .unwrap_or_else(|| place.repository().display().to_string());
    next(
        format!(
            "git -C {} merge --no-edit {}",
            quote(&checkout),
            quote(&held)
        ),
        &format!(
            "{} is checked out there, so taskdaemon left it alone; this merge takes the work",
            m.target
        ),
    )
}
