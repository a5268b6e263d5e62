//! Snapshot tags are input: anyone can push a tag whose message carries `Snapshot-*`
//! trailers. Before a rollback acts on one, its branch must be a `refs/heads/…` name that
//! passes `git check-ref-format`, its head an existing commit that is the snapshot
//! commit's first parent; and the rollback deletes no branch but the one checked out
//! (whose tip the safety snapshot keeps as its first parent).

use super::journal::RefMove;
use super::{Captured, Snapshot, SnapshotError, Snapshots};

/// What a rollback takes from a snapshot that passed the checks.
pub(super) struct Trusted {
    pub work_tree: String,
    pub index_tree: String,
    /// The commit of the saved index (its parent: the saved HEAD).
    pub index_commit: Option<String>,
    /// The branch's commit now (`None`: no such branch yet).
    pub tip: Option<String>,
}

impl Snapshots {
    /// The snapshot's work tree and index trees, once its trailers passed the checks.
    /// Also the branch's tip now (`None`: no such branch yet) and the index commit.
    pub(super) fn trusted_trees(&self, t: &Snapshot) -> Result<Trusted, SnapshotError> {
        let untrusted =
            |field: &'static str, value: &str, why: &'static str| SnapshotError::Untrusted {
                tag: t.tag.clone(),
                field,
                value: value.to_string(),
                why,
            };
        if let Some(b) = &t.branch {
            let valid = b.len() > "refs/heads/".len()
                && b.starts_with("refs/heads/")
                && (plainly_valid(b)
                    || self
                        .git
                        .call(&["check-ref-format", b.as_str()])
                        .output()?
                        .status
                        .success());
            if !valid {
                return Err(untrusted(
                    "Snapshot-Branch",
                    b,
                    "is not a valid branch name (refs/heads/…)",
                ));
            }
        }
        let damaged = |why: &str| SnapshotError::Damaged {
            tag: t.tag.clone(),
            why: why.to_string(),
        };
        if t.branch.is_none() && t.head.is_none() {
            return Err(damaged("it records neither a branch nor a HEAD"));
        }
        let index_parent = if t.head.is_some() { 2 } else { 1 };
        let mut specs = vec![
            format!("{}^{{tree}}", t.commit),
            format!("{}^{index_parent}^{{tree}}", t.commit),
            format!("{}^{index_parent}", t.commit),
        ];
        if let Some(h) = &t.head {
            let hex = matches!(h.len(), 40 | 64)
                && h.bytes()
                    .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c));
            if !hex {
                return Err(untrusted("Snapshot-Head", h, "is not a commit id"));
            }
            specs.push(format!("{h}^{{commit}}"));
            specs.push(format!("{}^1", t.commit));
        }
        if let Some(b) = &t.branch {
            specs.push(format!("{b}^{{commit}}"));
        }
        let got = match self.resolve_made(t, index_parent) {
            Some(got) => got,
            None => self.resolve_all(&specs)?,
        };
        let (Some(work_tree), Some(index_tree)) = (got[0].clone(), got[1].clone()) else {
            return Err(damaged("its commit or its index parent is missing"));
        };
        if let Some(h) = &t.head {
            if got[3].as_deref() != Some(h.as_str()) {
                return Err(untrusted("Snapshot-Head", h, "is not an existing commit"));
            }
            if got[4].as_deref() != Some(h.as_str()) {
                return Err(untrusted(
                    "Snapshot-Head",
                    h,
                    "is not the snapshot commit's first parent",
                ));
            }
        }
        let tip = t
            .branch
            .as_ref()
            .and_then(|_| got.last().cloned().flatten());
        Ok(Trusted {
            work_tree,
            index_tree,
            index_commit: got[2].clone(),
            tip,
        })
    }

    /// What `resolve_all` would answer for the specs of `trusted_trees`, without git: for a
    /// snapshot commit a save of this repository made (`tags.cache`), whose first parent
    /// is the recorded head (so that head is a commit), and a branch whose tip the ref
    /// files say plainly. `None`: ask git.
    fn resolve_made(&self, t: &Snapshot, index_parent: usize) -> Option<Vec<Option<String>>> {
        let made = self.made_commit(&t.commit)?;
        let index_commit = made.parents.get(index_parent - 1)?.clone();
        let mut got = vec![
            Some(made.tree.clone()),
            Some(made.index_tree.clone()),
            Some(index_commit),
        ];
        if let Some(h) = &t.head {
            if made.parents.first() != Some(h) {
                return None;
            }
            got.extend([Some(h.clone()), Some(h.clone())]);
        }
        if let Some(b) = &t.branch {
            let short = b.strip_prefix("refs/heads/")?;
            got.push(super::super::refs::branch_id(&self.repo, short)?);
        }
        Some(got)
    }

    /// Object ids of several revisions with one git process; `None` for what is missing.
    fn resolve_all(&self, specs: &[String]) -> Result<Vec<Option<String>>, SnapshotError> {
        let mut input = specs.join("\n");
        input.push('\n');
        let out = self
            .git
            .call(&["cat-file", "--batch-check=%(objectname)"])
            .input(input.into_bytes())
            .bytes()?;
        let text = String::from_utf8_lossy(&out);
        let mut lines = text.lines();
        Ok(specs
            .iter()
            .map(|_| {
                lines
                    .next()
                    .filter(|l| !l.contains(' ') && !l.is_empty())
                    .map(str::to_string)
            })
            .collect())
    }

    /// The refs the rollback writes, with their values now. Deleting a branch (the
    /// target is an unborn branch that exists now) is allowed only for the branch checked
    /// out: the safety snapshot's first parent is its tip.
    /// `tip`: the branch's commit now.
    pub(super) fn ref_moves(
        &self,
        t: &Snapshot,
        tip: Option<String>,
        now: &Captured,
    ) -> Result<Vec<RefMove>, SnapshotError> {
        let moves = match (&t.branch, &t.head) {
            (Some(b), Some(h)) => vec![RefMove {
                name: b.clone(),
                old: tip,
                new: Some(h.clone()),
            }],
            (None, Some(h)) => vec![RefMove {
                name: "HEAD".into(),
                old: now.head.clone(),
                new: Some(h.clone()),
            }],
            (Some(b), None) => {
                let old = tip;
                if old.is_some() && now.branch.as_ref() != Some(b) {
                    return Err(SnapshotError::WouldDeleteBranch {
                        tag: t.tag.clone(),
                        branch: b.trim_start_matches("refs/heads/").to_string(),
                    });
                }
                vec![RefMove {
                    name: b.clone(),
                    old,
                    new: None,
                }]
            }
            (None, None) => Vec::new(),
        };
        Ok(moves)
    }
}

/// A `refs/heads/…` name the in-process branch rules (`config::check_branch_name`) accept,
/// checked without a git process; anything they refuse is left to git.
fn plainly_valid(name: &str) -> bool {
    name.strip_prefix("refs/heads/")
        .is_some_and(|n| crate::config::check_branch_name(n).is_ok())
}

#[cfg(test)]
mod tests {
    use super::plainly_valid;

    #[test]
    fn plain_ref_names_skip_git_and_doubtful_ones_do_not() {
        for ok in ["refs/heads/main", "refs/heads/feature/x-1_2.3"] {
            assert!(plainly_valid(ok), "{ok}");
        }
        for doubtful in [
            "refs/heads/a..b",
            "refs/heads/.hidden",
            "refs/heads/x.lock",
            "refs/heads/x.",
            "refs/heads//x",
            "refs/heads/x/",
            "refs/heads/a b",
            "refs/heads/a@{1}",
        ] {
            assert!(!plainly_valid(doubtful), "{doubtful}");
        }
    }
}
