//! `snapshot prune`: drop old snapshot tags so they do not pile up. What it removes is
//! chosen here and listed before anything changes; each tag is written to a restore
//! file in the git directory first (`git update-ref refs/tags/TAG OBJECT` brings one back
//! until git's garbage collection drops it). Never pruned: the current task's
//! snapshots, and a snapshot whose commit another ref also names (a lock, a rollback in
//! progress, a branch or tag someone made on it).

use std::path::PathBuf;

use super::{Snapshot, SnapshotError, Snapshots};

/// Which snapshots to drop: beyond the `keep` newest, and (when set) older than `before_ms`.
#[derive(Debug, Clone, Copy, Default)]
pub struct PrunePolicy {
    pub keep: Option<usize>,
    pub before_ms: Option<i64>,
    /// The current task (its task-N-pre/post stay).
    pub current_task: Option<u32>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Kept {
    pub tag: String,
    pub why: String,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct PrunePlan {
    pub remove: Vec<Snapshot>,
    pub kept_because: Vec<Kept>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Pruned {
    pub removed: Vec<Snapshot>,
    /// The restore file (`git update-ref refs/tags/TAG OBJECT` lines).
    pub restore_file: Option<PathBuf>,
}

impl Snapshots {
    /// What `prune` would remove, and what it keeps although the policy selects it.
    pub fn prune_plan(&self, policy: &PrunePolicy) -> Result<PrunePlan, SnapshotError> {
        let mut all = self.list()?;
        all.reverse(); // newest first
        let mut plan = PrunePlan {
            remove: Vec::new(),
            kept_because: Vec::new(),
        };
        for (i, s) in all.into_iter().enumerate() {
            let beyond_keep = policy.keep.is_none_or(|k| i >= k);
            let old_enough = policy.before_ms.is_none_or(|t| s.time_ms < t);
            if !(beyond_keep && old_enough) {
                continue;
            }
            if s.task.is_some() && s.task == policy.current_task && s.tag.starts_with("task-") {
                plan.kept_because.push(Kept {
                    tag: s.tag.clone(),
                    why: "the current task's snapshot".into(),
                });
                continue;
            }
            let others = self.other_refs(&s)?;
            if let Some(r) = others.first() {
                plan.kept_because.push(Kept {
                    tag: s.tag.clone(),
                    why: format!("{r} also names its commit"),
                });
                continue;
            }
            plan.remove.push(s);
        }
        Ok(plan)
    }

    /// Refs other than the tag itself that point at its tag object or commit.
    fn other_refs(&self, s: &Snapshot) -> Result<Vec<String>, SnapshotError> {
        let own = format!("refs/tags/{}", s.tag);
        let mut refs = Vec::new();
        for target in [s.commit.as_str(), own.as_str()] {
            let out =
                self.git
                    .run(&["for-each-ref", "--format=%(refname)", "--points-at", target])?;
            refs.extend(out.lines().filter(|r| *r != own).map(str::to_string));
        }
        refs.sort();
        refs.dedup();
        Ok(refs)
    }

    /// Remove the planned tags: the restore file first, then each tag (only if it still
    /// names the same commit).
    pub fn prune(&self, plan: &PrunePlan, time_ms: i64) -> Result<Pruned, SnapshotError> {
        if plan.remove.is_empty() {
            return Ok(Pruned {
                removed: Vec::new(),
                restore_file: None,
            });
        }
        let _lock = self.lock()?;
        // Each tag object as it is now: the restore line brings back the annotated tag.
        let mut objects = Vec::new();
        for s in &plan.remove {
            let tag_ref = format!("refs/tags/{}", s.tag);
            let obj = self.git.run(&["rev-parse", "--verify", "-q", &tag_ref])?;
            objects.push((tag_ref, obj.trim().to_string(), s));
        }
        let dir = self.common_dir.join("taskdaemon");
        let file = dir.join(format!("pruned-snapshots-{time_ms}.sh"));
        let mut text = String::from(
            "# Snapshot tags removed by `taskdaemon snapshot prune`; run a line to restore one\n# (until `git gc` drops the unreachable objects).\n",
        );
        for (tag_ref, obj, s) in &objects {
            let message = s.message.lines().next().unwrap_or("");
            text.push_str(&format!("git update-ref {tag_ref} {obj}  # {message}\n"));
        }
        std::fs::create_dir_all(&dir)
            .and_then(|()| crate::fsutil::write_atomic(&file, text.as_bytes()))
            .map_err(|source| SnapshotError::Io {
                path: file.clone(),
                source,
            })?;
        let mut removed = Vec::new();
        for (tag_ref, obj, s) in objects {
            // Only if it still names the same object.
            self.git.run(&["update-ref", "-d", &tag_ref, &obj])?;
            removed.push(s.clone());
        }
        Ok(Pruned {
            removed,
            restore_file: Some(file),
        })
    }
}
