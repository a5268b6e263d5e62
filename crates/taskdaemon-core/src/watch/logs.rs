//! Where a daemon run's iteration logs are. A plan's and its spec loop's runs share the
//! plan's worktree, and a spec's phases the spec's: a run's logs are at the top of
//! `.ralph/logs/` while it is the worktree's run, in `logs/runs/<id>/` once a later run
//! there set them aside, and in the daemon's copy of the `.ralph/` of a removed worktree
//! (`<daemon dir>/logs/<worktree name>/`) after its merge.

use std::path::{Path, PathBuf};

use crate::workspace::earlier_run_dirs;

/// The `run.json` of `ralph` (a `.ralph/` directory) when it is run `id`'s.
fn state_of(ralph: &Path, id: &str) -> Option<serde_json::Value> {
    let text = std::fs::read_to_string(ralph.join("run.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    (v.get("run_id")?.as_str()? == id).then_some(v)
}

fn names_run(ralph: &Path, id: &str) -> bool {
    state_of(ralph, id).is_some()
}

/// The iteration limit of run `id`, from its state in `worktree` (the record has none).
pub fn max_iterations(worktree: &Path, id: &str) -> Option<u32> {
    let v = state_of(&worktree.join(".ralph"), id)?;
    let n = v.get("config")?.get("max_iterations")?.as_u64()?;
    u32::try_from(n).ok()
}

/// The `.ralph/` directories that may hold the files of a run in `worktree`: the daemon's
/// kept copy (`kept`: the daemon's `logs/` directory), then the worktree's own.
pub fn ralph_dirs(kept: Option<&Path>, worktree: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let (Some(k), Some(name)) = (kept, worktree.file_name()) {
        out.push(k.join(name));
    }
    out.push(worktree.join(".ralph"));
    out
}

/// The directories that hold run `id`'s iteration logs, most likely first.
pub fn run_log_dirs(kept: Option<&Path>, worktree: &Path, id: &str) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for ralph in ralph_dirs(kept, worktree) {
        let logs = ralph.join("logs");
        if names_run(&ralph, id) {
            dirs.push(logs.clone());
        }
        dirs.extend(earlier_run_dirs(&logs, id));
    }
    dirs
}

/// Run `id`'s log of iteration `n`, else its last iteration's; `None` when it has none.
pub fn iteration_log(kept: Option<&Path>, worktree: &Path, id: &str, n: u32) -> Option<PathBuf> {
    if let Some(p) = iteration_file(kept, worktree, id, n.max(1), false) {
        return Some(p);
    }
    let dirs = run_log_dirs(kept, worktree, id);
    let name = format!("iteration-{:03}.log", n.max(1));
    let last = dirs.iter().find_map(|d| {
        let mut logs: Vec<PathBuf> = std::fs::read_dir(d)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("iteration-") && n.ends_with(".log"))
            })
            .collect();
        logs.sort();
        logs.pop()
    });
    // Not started yet: where its first log will be (the pane picks it up once written).
    last.or_else(|| Some(worktree.join(".ralph/logs").join(name)))
}

/// Iteration `n`'s own file of run `id`: its log, or (`prompt`) the prompt it was given
/// (`iteration-NNN.prompt.md` beside the log); `None` when that iteration left none.
pub fn iteration_file(
    kept: Option<&Path>,
    worktree: &Path,
    id: &str,
    n: u32,
    prompt: bool,
) -> Option<PathBuf> {
    let name = if prompt {
        format!("iteration-{n:03}.prompt.md")
    } else {
        format!("iteration-{n:03}.log")
    };
    run_log_dirs(kept, worktree, id)
        .iter()
        .map(|d| d.join(&name))
        .find(|p| p.is_file())
}

/// Write `lines` (a run's log as the watcher shows it) to `<repository>/.ralph/exports/
/// <run>-iteration-NNN.log`, a directory git ignores (it is put in `.git/info/exclude` if
/// it is not there yet). The file written.
pub fn export_log(
    repository: &Path,
    run_id: &str,
    iteration: u32,
    lines: &[&str],
) -> Result<PathBuf, String> {
    if !crate::workspace::is_plain_name(run_id) {
        return Err(format!("run id `{run_id}` is not a file name"));
    }
    let dir = crate::workspace::Workspace::new(repository).exports_dir();
    crate::fsutil::create_dir_confined(&dir)
        .map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    // Out of every commit, an agent's `git add -A` included (best effort: not a repository
    // is no reason not to write the file).
    let _ = crate::git::Git::new(repository).ensure_excluded(&[".ralph/exports/"]);
    let name = format!("{run_id}-iteration-{iteration:03}.log");
    let path = dir.join(name);
    let mut text = lines.join("\n");
    text.push('\n');
    crate::fsutil::write_atomic(&path, text.as_bytes())
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_runs_log_is_found_where_the_spec_run_set_it_aside_and_in_the_kept_copy() {
        let d = tempfile::tempdir().unwrap();
        let wt = d.path().join("worktrees/p1");
        let logs = wt.join(".ralph/logs");
        std::fs::create_dir_all(logs.join("runs/r-plan")).unwrap();
        std::fs::write(logs.join("runs/r-plan/iteration-005.log"), "pass 5\n").unwrap();
        std::fs::write(logs.join("iteration-001.log"), "spec 1\n").unwrap();
        std::fs::write(wt.join(".ralph/run.json"), r#"{"run_id": "r-spec"}"#).unwrap();
        let p = iteration_log(None, &wt, "r-plan", 5).unwrap();
        assert!(p.ends_with("runs/r-plan/iteration-005.log"), "{p:?}");
        let p = iteration_log(None, &wt, "r-spec", 1).unwrap();
        assert!(p.ends_with(".ralph/logs/iteration-001.log"), "{p:?}");
        // The worktree removed after the merge: its .ralph/ is in the daemon's logs.
        let kept = d.path().join("daemon/logs");
        std::fs::create_dir_all(&kept).unwrap();
        std::fs::rename(wt.join(".ralph"), kept.join("p1")).unwrap();
        let p = iteration_log(Some(&kept), &wt, "r-plan", 5).unwrap();
        assert!(p.starts_with(&kept) && p.is_file(), "{p:?}");
        // The iteration the record names has no log: the last one there is.
        let p = iteration_log(Some(&kept), &wt, "r-plan", 9).unwrap();
        assert!(p.ends_with("iteration-005.log"), "{p:?}");
    }

    #[test]
    fn an_export_goes_to_ralph_exports_which_git_ignores() {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path();
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .args(args)
                .current_dir(repo)
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        git(&["init", "-q"]);
        let p = export_log(repo, "r1", 3, &["one", "two"]).unwrap();
        assert_eq!(p, repo.join(".ralph/exports/r1-iteration-003.log"));
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "one\ntwo\n");
        let status = git(&["status", "--porcelain", "--untracked-files=all"]);
        assert!(!status.contains("exports"), "{status}");
        assert!(export_log(repo, "../x", 1, &["a"]).is_err());
    }
}
