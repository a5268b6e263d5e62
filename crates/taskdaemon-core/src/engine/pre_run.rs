//! The user's uncommitted work at a run's start (issue 37 item 10): a fresh run on a work
//! tree with uncommitted changes (tracked edits, untracked files that are not ignored)
//! saves them as a `run-N-pre` snapshot before iteration 1, so `snapshot rollback` undoes
//! the run's changes and gives them back, and says so ([`EngineEvent::UncommittedSaved`]).
//! Untracked files that look like secrets (`crate::secrets`) are named and left out of it.
//!
//! Once per run (`RunState::uncommitted_checked`, saved before any agent starts): not on a
//! resume or after a kill, not for a `task` run (its `task-N-pre` saved the same
//! state a moment before), not when nothing is uncommitted (the harness's own `.ralph/`
//! files do not count).
//!
//! After each iteration, [`secrets_step`]: the files that look like secrets which the run's
//! commits add (from its start to HEAD), for the decision (no claim is accepted while one
//! does) and a warning.

use tokio_util::sync::CancellationToken;

use super::{EngineContext, EngineError, EngineEvent, Outcome, RunState};
use crate::git::Git;
use crate::git::snapshot::{Kind, SaveRequest, SnapshotError};

/// What `git status` says is uncommitted: every path, and the untracked ones that look
/// like secrets.
#[derive(Debug, Default, PartialEq)]
struct Uncommitted {
    paths: Vec<String>,
    secrets: Vec<String>,
}

/// Save the uncommitted changes of a new run's work tree as `run-N-pre` and say it. A wait
/// for another holder of the snapshot lock is told after a second and ended by the run's
/// stop (`Some(Interrupted)`: nothing saved, no agent started).
pub(super) fn save_uncommitted(
    st: &RunState,
    git: &Git,
    ctx: &EngineContext,
    cancel: &CancellationToken,
) -> Result<Option<Outcome>, EngineError> {
    if st.task.is_some() {
        return Ok(None);
    }
    let out = git
        .call(&[
            "status",
            "--porcelain",
            "-z",
            "--untracked-files=all",
            "--no-renames",
            "--ignore-submodules=dirty",
        ])
        .bytes()?;
    let found = parse_status(&out);
    if found.paths.is_empty() {
        return Ok(None);
    }
    let secrets = found.secrets.clone();
    let saved: Vec<String> = found
        .paths
        .iter()
        .filter(|p| !secrets.contains(p))
        .cloned()
        .collect();
    let tag = if saved.is_empty() {
        None
    } else {
        let events = ctx.events.clone();
        let tell = move |lock: &std::path::Path, pid: Option<i32>| {
            events.emit(EngineEvent::Warning {
                message: format!(
                    "saving your uncommitted changes: {}",
                    crate::git::snapshot::waiting_text(lock, pid)
                ),
            });
        };
        let snaps = crate::git::snapshot::Snapshots::open(&st.config.workdir)?
            .stopped_by(cancel)
            .telling_waits_to(std::sync::Arc::new(tell));
        let saved = snaps.save(&SaveRequest {
            kind: Kind::RunPre,
            task: None,
            message: &format!("before run {}: the uncommitted changes", st.run_id),
            time_ms: crate::clock::now().as_millisecond(),
        });
        match saved {
            Ok(snap) => Some(snap.tag),
            Err(SnapshotError::Stopped { .. }) => return Ok(Some(Outcome::Interrupted)),
            Err(e) => return Err(e.into()),
        }
    };
    let message = describe(tag.as_deref(), &saved, &secrets);
    ctx.events.emit(EngineEvent::UncommittedSaved {
        snapshot: tag,
        files: saved.len(),
        paths: saved.into_iter().take(SHOWN).collect(),
        secrets,
        message,
    });
    Ok(None)
}

/// The files that look like secrets which the run's commits add (from its start to HEAD;
/// no git process while HEAD is where the run started).
pub(super) fn committed_secrets(
    st: &RunState,
    git: &Git,
) -> Result<Vec<crate::secrets::Added>, EngineError> {
    let Some(head) = git.head()? else {
        return Ok(Vec::new());
    };
    if st.start_head.as_deref() == Some(head.as_str()) {
        return Ok(Vec::new());
    }
    let range = match &st.start_head {
        Some(start) => format!("{start}..{head}"),
        None => head,
    };
    Ok(crate::secrets::added_in(git, &[&range])?)
}

/// After iteration `n`'s agents and their judgement: the secret-looking files the run's
/// commits add, said in a warning and the first member's log (and, for a work list, in
/// `feedback.md` for its next prompt); their paths.
pub(super) fn secrets_step(
    st: &RunState,
    (git, ws): (&Git, &crate::workspace::Workspace),
    n: u32,
    log: Option<&mut crate::telemetry::IterationLog>,
    ctx: &EngineContext,
) -> Result<Vec<String>, EngineError> {
    let added = committed_secrets(st, git)?;
    if added.is_empty() {
        return Ok(Vec::new());
    }
    let commits: Vec<String> = added
        .iter()
        .map(|a| format!("{} in {}", a.path, a.commit.get(..12).unwrap_or(&a.commit)))
        .collect();
    let text = format!(
        "iteration {n}: the run's commits add files that look like secrets ({}): the work is not accepted, and the branch is neither pushed nor merged, until no commit adds them",
        commits.join(", ")
    );
    if let Some(log) = log {
        log.note(&text);
    }
    super::warn(ctx, &text);
    let paths = crate::secrets::paths(&added);
    if !st.config.source.is_ralph() {
        // A work list's next prompt takes the harness's note from feedback.md (the ralph
        // loop's, from the decision's feedback).
        let mut note = crate::secrets::take_out(&paths);
        if let Some(earlier) = ws.read_feedback()? {
            note = format!("{note}\n\n{earlier}");
        }
        ws.write_feedback(&note)?;
    }
    Ok(paths)
}

/// How many paths the event and its sentence name.
const SHOWN: usize = 5;

/// The sentence for people.
fn describe(tag: Option<&str>, saved: &[String], secrets: &[String]) -> String {
    let mut text = match tag {
        Some(tag) => format!(
            "your uncommitted changes ({} file{}: {}) are saved as snapshot {tag}; undo the run's changes with `taskdaemon snapshot rollback {tag}`",
            saved.len(),
            if saved.len() == 1 { "" } else { "s" },
            crate::secrets::list(saved)
        ),
        None => String::new(),
    };
    if !secrets.is_empty() {
        if !text.is_empty() {
            text.push_str("; ");
        }
        text.push_str(&format!(
            "{} {}: left out of snapshots and of taskdaemon's commits (it stays where it is), and an agent commit that adds one is rejected",
            crate::secrets::list(secrets),
            if secrets.len() == 1 {
                "looks like a secret"
            } else {
                "look like secrets"
            }
        ));
    }
    text
}

/// `git status --porcelain -z --no-renames`: `XY path\0` entries.
fn parse_status(out: &[u8]) -> Uncommitted {
    let mut u = Uncommitted::default();
    for entry in out.split(|b| *b == 0) {
        let (Some(xy), Some(path)) = (entry.get(..2), entry.get(3..)) else {
            continue;
        };
        if path.is_empty() {
            continue;
        }
        let path = String::from_utf8_lossy(path).into_owned();
        // The harness's own files (an archived run's record, the agent's notes) are not
        // the user's work.
        if path.starts_with(".ralph/") {
            continue;
        }
        if xy == b"??" && crate::secrets::looks_secret(&path) {
            u.secrets.push(path.clone());
        }
        u.paths.push(path);
    }
    u
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_entries_and_the_untracked_secrets_among_them() {
        let u = parse_status(
            b" M src/a.rs\0?? notes.txt\0?? .env\0M  id_rsa\0?? .ralph/archive/1/run.json\0",
        );
        assert_eq!(u.paths, ["src/a.rs", "notes.txt", ".env", "id_rsa"]);
        // A tracked key is the user's decision.
        assert_eq!(u.secrets, [".env"]);
        assert_eq!(parse_status(b""), Uncommitted::default());
    }

    #[test]
    fn the_sentence_names_the_files_the_snapshot_and_the_undo() {
        let saved = vec!["src/a.rs".to_string(), "notes.txt".to_string()];
        assert_eq!(
            describe(Some("run-3-pre"), &saved, &[]),
            "your uncommitted changes (2 files: src/a.rs, notes.txt) are saved as snapshot run-3-pre; undo the run's changes with `taskdaemon snapshot rollback run-3-pre`"
        );
        let only = describe(None, &[], &[".env".to_string()]);
        assert!(only.starts_with(".env looks like a secret:"), "{only}");
    }
}
