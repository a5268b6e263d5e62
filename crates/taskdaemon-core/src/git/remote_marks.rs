//! Iteration marks on the shared remote: `refs/taskdaemon/iterations/<run id>` names a
//! commit with an empty tree whose parent is the run's branch tip after its iteration N,
//! and whose message carries `Taskdaemon-Run: <id>` and `Taskdaemon-Iteration: N`. It is
//! pushed with the branch in one atomic push, so the remote and the mark always agree: a
//! machine taking the run over (its holder died before its record said so) goes on after
//! iteration N, never redoing one whose commit is already on the remote.
//!
//! What the remote holds is input: a mark is believed only when its parent is the branch's
//! tip as fetched, its trailers name this run, and its number parses.

use super::{Remote, RemoteError};

/// The iterations a run finished, as pushed with its branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    pub run_id: String,
    pub iteration: u32,
}

/// Where the marks live, here and on the remote.
const MARKS: &str = "refs/taskdaemon/iterations";

fn mark_ref(run_id: &str) -> String {
    format!("{MARKS}/{run_id}")
}

impl Remote {
    /// The refspec that pushes `mark` on `tip` (its commit made here).
    pub(super) fn mark_spec(&self, mark: &Mark, tip: &str) -> Result<String, RemoteError> {
        self.wt
            .check_branch(&format!("taskdaemon/iterations/{}", mark.run_id))?;
        let tree = self.git().call(&["mktree"]).input(Vec::new()).text()?;
        let message = format!(
            "taskdaemon: run {id} after iteration {n}\n\nTaskdaemon-Run: {id}\nTaskdaemon-Iteration: {n}\n",
            id = mark.run_id,
            n = mark.iteration
        );
        let commit = self
            .git()
            .call(&["commit-tree", &tree, "-p", tip, "-m", &message])
            .env("GIT_AUTHOR_NAME", "taskdaemon")
            .env("GIT_AUTHOR_EMAIL", "taskdaemon@localhost")
            .env("GIT_COMMITTER_NAME", "taskdaemon")
            .env("GIT_COMMITTER_EMAIL", "taskdaemon@localhost")
            .text()?;
        Ok(format!("+{commit}:{}", mark_ref(&mark.run_id)))
    }

    /// Push a mark alone (the branch was on the remote already).
    pub(super) fn push_mark(&self, spec: &str) -> Result<(), RemoteError> {
        let out = self
            .net(&["push", "-q", "--no-verify", "--", &self.name, spec])
            .output()?;
        if out.status.success() {
            return Ok(());
        }
        Err(RemoteError::Refused {
            remote: self.name.clone(),
            what: format!("the iteration mark {spec}"),
            reason: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }

    /// The iterations run `run_id` finished on the remote's commit `tip` of its branch, by
    /// its mark (`None`: no mark, or one that is not on `tip`, or unreadable).
    pub fn iterations_on(&self, run_id: &str, tip: &str) -> Result<Option<u32>, RemoteError> {
        self.wt
            .check_branch(&format!("taskdaemon/iterations/{run_id}"))?;
        let full = mark_ref(run_id);
        let listed = self.net(&["ls-remote", "--", &self.name, &full]).text()?;
        let Some(commit) = listed
            .lines()
            .filter_map(|l| l.split_once('\t'))
            .find(|(_, r)| *r == full)
            .map(|(c, _)| c.to_string())
        else {
            return Ok(None);
        };
        let spec = format!("+{full}:{full}");
        self.net(&[
            "fetch",
            "-q",
            "--no-tags",
            "--no-write-fetch-head",
            "--",
            &self.name,
            &spec,
        ])
        .bytes()?;
        let body = self.git().call(&["cat-file", "commit", &commit]).text()?;
        Ok(read_mark(&body, run_id, tip))
    }
}

/// The iteration a mark commit's text (`git cat-file commit`) names, when its only parent is
/// `tip` and its trailers name `run_id`.
fn read_mark(body: &str, run_id: &str, tip: &str) -> Option<u32> {
    let (header, message) = body.split_once("\n\n")?;
    let parents: Vec<&str> = header
        .lines()
        .filter_map(|l| l.strip_prefix("parent "))
        .collect();
    if parents != [tip] {
        return None;
    }
    let trailer = |key: &str| {
        message
            .lines()
            .find_map(|l| l.strip_prefix(key).map(str::trim))
    };
    if trailer("Taskdaemon-Run:") != Some(run_id) {
        return None;
    }
    trailer("Taskdaemon-Iteration:")?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &str = "tree 4b82\nparent abc\nauthor t <t@l> 1 +0000\ncommitter t <t@l> 1 +0000\n\ntaskdaemon: run r1 after iteration 3\n\nTaskdaemon-Run: r1\nTaskdaemon-Iteration: 3\n";

    #[test]
    fn a_mark_is_believed_only_on_its_tip_and_for_its_run() {
        assert_eq!(read_mark(BODY, "r1", "abc"), Some(3));
        assert_eq!(read_mark(BODY, "r1", "def"), None);
        assert_eq!(read_mark(BODY, "r2", "abc"), None);
        assert_eq!(
            read_mark(&BODY.replace("Iteration: 3", "Iteration: x"), "r1", "abc"),
            None
        );
        assert_eq!(
            read_mark(
                &BODY.replace("parent abc\n", "parent abc\nparent def\n"),
                "r1",
                "abc"
            ),
            None
        );
    }
}
