//! `snapshot prune`: drop old snapshot tags so they do not pile up. What it removes is
//! chosen here and listed before anything changes; each tag is written to a restore
//! file in the git directory first (`git update-ref refs/tags/TAG OBJECT` brings one back
//! until git's garbage collection drops it). Never pruned: the current task's
//! snapshots, and a snapshot whose commit another ref also names (a lock, a rollback in
//! progress, a branch or tag someone made on it).

use std::collections::HashMap;
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

/// Every ref of the repository, read by one `for-each-ref`: which refs name an object
/// (directly, or a tag through the object it points at), and what each ref names.
struct RefIndex {
    /// Object id → the refs naming it.
    naming: HashMap<String, Vec<String>>,
    /// Ref name → its object id.
    object: HashMap<String, String>,
}

impl RefIndex {
    fn read(s: &Snapshots) -> Result<RefIndex, SnapshotError> {
        let out = s.git.call(&[
            "for-each-ref",
            "--format=%(refname)%00%(objectname)%00%(*objectname)",
        ]);
        let text = String::from_utf8_lossy(&out.bytes()?).into_owned();
        let mut index = RefIndex {
            naming: HashMap::new(),
            object: HashMap::new(),
        };
        for line in text.lines() {
            let mut f = line.split('\0');
            let (Some(name), Some(id)) = (f.next(), f.next()) else {
                continue;
            };
            let peeled = f.next().filter(|p| !p.is_empty() && *p != id);
            for target in std::iter::once(id).chain(peeled) {
                index
                    .naming
                    .entry(target.to_string())
                    .or_default()
                    .push(name.to_string());
            }
            index.object.insert(name.to_string(), id.to_string());
        }
        Ok(index)
    }

    /// Refs other than the snapshot's own tag that point at its tag object or commit
    /// (what `for-each-ref --points-at` finds for each), sorted.
    fn others(&self, s: &Snapshot) -> Vec<String> {
        let own = format!("refs/tags/{}", s.tag);
        let own_object = self.object.get(&own).map(String::as_str);
        let mut refs: Vec<String> = [Some(s.commit.as_str()), own_object]
            .into_iter()
            .flatten()
            .filter_map(|target| self.naming.get(target))
            .flatten()
            .filter(|r| **r != own)
            .cloned()
            .collect();
        refs.sort();
        refs.dedup();
        refs
    }
}

impl Snapshots {
    /// What `prune` would remove, and what it keeps although the policy selects it. One
    /// listing of the snapshots and one of every ref, whatever their number (a git
    /// process per snapshot, each reading every ref, took 85 s at 800 snapshots).
    pub fn prune_plan(&self, policy: &PrunePolicy) -> Result<PrunePlan, SnapshotError> {
        let mut all = self.list()?;
        all.reverse(); // newest first
        let mut plan = PrunePlan {
            remove: Vec::new(),
            kept_because: Vec::new(),
        };
        let mut refs: Option<RefIndex> = None;
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
            let index = match &refs {
                Some(index) => index,
                None => refs.insert(RefIndex::read(self)?),
            };
            if let Some(r) = index.others(&s).first() {
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

    /// Remove the planned tags: the restore file first, then every tag in one transaction
    /// (`update-ref --stdin`: each only if it still names the same object, and none if
    /// one does not; `packed-refs` is rewritten once, not once per tag).
    pub fn prune(&self, plan: &PrunePlan, time_ms: i64) -> Result<Pruned, SnapshotError> {
        if plan.remove.is_empty() {
            return Ok(Pruned {
                removed: Vec::new(),
                restore_file: None,
            });
        }
        let _lock = self.lock()?;
        // Each tag object as it is now: the restore line brings back the annotated tag.
        let now = RefIndex::read(self)?;
        let mut objects = Vec::new();
        for s in &plan.remove {
            let tag_ref = format!("refs/tags/{}", s.tag);
            // Removed since it was planned (another prune): say so, change nothing.
            let Some(obj) = now.object.get(&tag_ref) else {
                return Err(SnapshotError::NotFound {
                    tag: s.tag.clone(),
                    nearest: Vec::new(),
                });
            };
            objects.push((tag_ref, obj.clone(), s));
        }
        let file = self.write_restore_file(&objects, time_ms)?;
        let mut batch = String::new();
        for (tag_ref, obj, _) in &objects {
            batch.push_str(&format!("delete {tag_ref} {obj}\n"));
        }
        self.git
            .call(&["update-ref", "--stdin"])
            .input(batch.into_bytes())
            .bytes()?;
        Ok(Pruned {
            removed: objects.into_iter().map(|(_, _, s)| s.clone()).collect(),
            restore_file: Some(file),
        })
    }

    /// `pruned-snapshots-TIME.sh` in the git directory: a `git update-ref` line per tag.
    fn write_restore_file(
        &self,
        objects: &[(String, String, &Snapshot)],
        time_ms: i64,
    ) -> Result<PathBuf, SnapshotError> {
        let dir = self.common_dir.join("taskdaemon");
        let file = dir.join(format!("pruned-snapshots-{time_ms}.sh"));
        let mut text = String::from(
            "# Snapshot tags removed by `taskdaemon snapshot prune`; run a line to restore one\n# (until `git gc` drops the unreachable objects).\n",
        );
        for (tag_ref, obj, s) in objects {
            let message = s.message.lines().next().unwrap_or("");
            text.push_str(&format!("git update-ref {tag_ref} {obj}  # {message}\n"));
        }
        std::fs::create_dir_all(&dir)
            .and_then(|()| crate::fsutil::write_atomic(&file, text.as_bytes()))
            .map_err(|source| SnapshotError::Io {
                path: file.clone(),
                source,
            })?;
        Ok(file)
    }
}
