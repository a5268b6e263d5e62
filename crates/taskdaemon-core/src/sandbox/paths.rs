//! Which paths a sandboxed process may write or may not see: per-preset state, `~/`
//! expansion, and what git needs to commit in a work tree.

use std::path::{Path, PathBuf};

use super::SandboxError;
use crate::agent::{AgentSpec, Preset};

/// Hidden from every sandboxed process (when they exist): credentials and keys.
pub const DEFAULT_HIDE: &[&str] = &[
    "~/.ssh",
    "~/.aws",
    "~/.gnupg",
    "~/.azure",
    "~/.kube",
    "~/.docker",
    "~/.config/gcloud",
    "~/.config/gh",
    "~/.password-store",
    "~/.netrc",
    "~/.git-credentials",
    "~/.pgpass",
];

/// A path the agent must write: a directory made when missing, or one writable only when
/// it exists (a cache). (Claude Code's `~/.claude.json` is not listed: it is replaced by
/// a rename in the home directory, which stays read-only, so those updates — startup
/// counters, tips — are dropped; Claude Code runs without them.)
enum State {
    Dir(&'static str),
    Cache(&'static str),
}

fn preset_state(p: Preset) -> &'static [State] {
    use State::{Cache, Dir};
    match p {
        Preset::Claude => &[Dir("~/.claude"), Cache("~/.npm")],
        Preset::Codex => &[Dir("~/.codex"), Cache("~/.npm")],
        Preset::Gemini => &[Dir("~/.gemini"), Cache("~/.npm")],
        Preset::Opencode => &[
            Dir("~/.config/opencode"),
            Dir("~/.local/share/opencode"),
            Dir("~/.local/state/opencode"),
            Cache("~/.cache/opencode"),
            Cache("~/.npm"),
        ],
        Preset::Amp => &[
            Dir("~/.config/amp"),
            Dir("~/.local/share/amp"),
            Cache("~/.cache/amp"),
            Cache("~/.npm"),
        ],
    }
}

/// The variables that move a preset's state elsewhere, and the directory each names:
/// `CLAUDE_CONFIG_DIR`, `CODEX_HOME`, and `GEMINI_CLI_HOME` (its `.gemini` inside).
fn preset_state_vars(p: Preset) -> &'static [(&'static str, &'static str)] {
    match p {
        Preset::Claude => &[("CLAUDE_CONFIG_DIR", "")],
        Preset::Codex => &[("CODEX_HOME", "")],
        Preset::Gemini => &[("GEMINI_CLI_HOME", ".gemini")],
        Preset::Opencode | Preset::Amp => &[],
    }
}

/// The preset's state paths, made when missing (also where its variables in this
/// process's environment put them); nothing for `cmd:` and `script:` agents (give them
/// `sandbox-rw`).
pub fn agent_state(agent: &AgentSpec, home: Option<&Path>) -> Result<Vec<PathBuf>, SandboxError> {
    agent_state_with(agent, home, |k| std::env::var_os(k))
}

fn agent_state_with(
    agent: &AgentSpec,
    home: Option<&Path>,
    var: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Result<Vec<PathBuf>, SandboxError> {
    let (AgentSpec::Preset { preset }, Some(h)) = (agent, home) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for s in preset_state(*preset) {
        let (raw, make) = match s {
            State::Dir(p) => (p, true),
            State::Cache(p) => (p, false),
        };
        out.extend(prepare(&expand(Path::new(raw), home), make)?);
    }
    for (name, sub) in preset_state_vars(*preset) {
        let Some(value) = var(name).filter(|v| !v.is_empty()) else {
            continue;
        };
        let dir = state_var_dir(name, Path::new(&value), h)?.join(sub);
        out.extend(prepare(&dir, true)?);
    }
    Ok(out)
}

/// The directory a state variable names: absolute, and neither `/` nor the home
/// directory or one above it (the agent would get all of it writable).
fn state_var_dir(name: &'static str, value: &Path, home: &Path) -> Result<PathBuf, SandboxError> {
    let home = home.canonicalize().unwrap_or_else(|_| home.to_path_buf());
    let real = value.canonicalize().unwrap_or_else(|_| value.to_path_buf());
    if !value.is_absolute() || home.starts_with(&real) {
        return Err(SandboxError::StateVar {
            var: name,
            path: value.to_path_buf(),
        });
    }
    Ok(value.to_path_buf())
}

/// `path` when it exists (made first when `make`), canonical.
fn prepare(path: &Path, make: bool) -> Result<Option<PathBuf>, SandboxError> {
    if make && !path.exists() {
        std::fs::create_dir_all(path).map_err(|e| SandboxError::Prepare {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    }
    Ok(existing(path))
}

/// `~/x` against `home`; other paths unchanged.
pub fn expand(p: &Path, home: Option<&Path>) -> PathBuf {
    match (p.strip_prefix("~"), home) {
        (Ok(rest), Some(h)) => h.join(rest),
        _ => p.to_path_buf(),
    }
}

/// The canonical absolute form of an existing path.
pub fn existing(p: &Path) -> Option<PathBuf> {
    p.is_absolute().then(|| p.canonicalize().ok()).flatten()
}

/// What git writes to commit in the work tree at `cwd` that lies outside it: for a linked
/// worktree its own git dir and the common objects, refs and logs (not the other
/// worktrees' files); for a checkout whose `.git` is above `cwd`, that `.git`.
pub fn git_writable(cwd: &Path) -> Vec<PathBuf> {
    let Some(dot_git) = cwd.ancestors().map(|d| d.join(".git")).find(|g| g.exists()) else {
        return Vec::new();
    };
    if dot_git.is_dir() {
        return if dot_git.starts_with(cwd) {
            Vec::new()
        } else {
            existing(&dot_git).into_iter().collect()
        };
    }
    let Some(gitdir) = read_pointer(&dot_git, "gitdir:") else {
        return Vec::new();
    };
    let gitdir = dot_git.parent().unwrap_or(cwd).join(gitdir);
    let common = read_pointer(&gitdir.join("commondir"), "")
        .map(|c| gitdir.join(c))
        .unwrap_or_else(|| gitdir.clone());
    let mut out: Vec<PathBuf> = existing(&gitdir).into_iter().collect();
    for sub in ["objects", "refs", "logs"] {
        out.extend(existing(&common.join(sub)));
    }
    out
}

/// How one of git's own paths is mounted in the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GitMount {
    /// Bound onto itself, writable: a mount point cannot be renamed or removed, so the
    /// agent cannot put another `.git` (with its own config) in its place.
    Pinned,
    ReadOnly,
}

/// What of git's own files the agent must not change in the work tree at `cwd`, because
/// taskdaemon's git reads them outside the sandbox (`git::guard` puts back what changes
/// anyway, and what the agent creates, such as a missing `hooks` or a `commondir`): for a
/// checkout, its `.git` pinned and `.git/config`, `.git/hooks` and `config.worktree`
/// read-only (those that exist); for a linked
/// worktree, its `.git` file and its git dir's `commondir`, `gitdir` and `config.worktree`
/// read-only (the common config and hooks are not writable there at all). In mount order.
pub fn git_protected(cwd: &Path) -> Vec<(GitMount, PathBuf)> {
    let Some(dot_git) = cwd.ancestors().map(|d| d.join(".git")).find(|g| g.exists()) else {
        return Vec::new();
    };
    let read_only = |dir: &Path, names: &[&str], out: &mut Vec<(GitMount, PathBuf)>| {
        for n in names {
            let p = dir.join(n);
            if std::fs::symlink_metadata(&p).is_ok_and(|m| !m.file_type().is_symlink()) {
                out.push((GitMount::ReadOnly, p));
            }
        }
    };
    let mut out = Vec::new();
    if dot_git.is_dir() {
        let Some(g) = existing(&dot_git) else {
            return out;
        };
        out.push((GitMount::Pinned, g.clone()));
        read_only(&g, &["config", "hooks", "config.worktree"], &mut out);
        return out;
    }
    let Some(gitdir) = read_pointer(&dot_git, "gitdir:") else {
        return out;
    };
    let gitdir = dot_git.parent().unwrap_or(cwd).join(gitdir);
    if let (Some(file), Some(gitdir)) = (existing(&dot_git), existing(&gitdir)) {
        out.push((GitMount::ReadOnly, file));
        read_only(
            &gitdir,
            &["commondir", "gitdir", "config.worktree"],
            &mut out,
        );
    }
    out
}

/// The one-line content of a git pointer file after `prefix`.
fn read_pointer(file: &Path, prefix: &str) -> Option<PathBuf> {
    let text = std::fs::read_to_string(file).ok()?;
    let line = text.lines().next()?.strip_prefix(prefix)?.trim();
    (!line.is_empty()).then(|| PathBuf::from(line))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) {
        let st = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap();
        assert!(st.status.success(), "{st:?}");
    }

    /// A repository with one commit and a linked worktree `../wt` beside it.
    fn repo_with_worktree() -> (tempfile::TempDir, std::path::PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let repo = t.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        let who = ["-c", "user.name=t", "-c", "user.email=t@t"];
        git(
            &repo,
            &[&who[..], &["commit", "-q", "--allow-empty", "-m", "i"]].concat(),
        );
        git(&repo, &["worktree", "add", "-q", "../wt", "-b", "wt"]);
        (t, repo)
    }

    #[test]
    fn a_linked_worktree_gets_its_git_dir_and_the_common_store_only() {
        let (t, repo) = repo_with_worktree();
        git(&repo, &["worktree", "add", "-q", "../other", "-b", "other"]);
        let found = git_writable(&t.path().join("wt"));
        let g = repo.join(".git").canonicalize().unwrap();
        assert!(found.contains(&g.join("worktrees/wt")), "{found:?}");
        assert!(found.contains(&g.join("objects")));
        assert!(found.contains(&g.join("refs")));
        assert!(!found.iter().any(|p| p.ends_with("worktrees/other")));
        assert!(!found.contains(&g));
        // The main checkout's .git lies inside its tree: nothing more.
        assert!(git_writable(&repo).is_empty());
        // A subdirectory of the checkout: its .git above.
        std::fs::create_dir(repo.join("sub")).unwrap();
        assert_eq!(git_writable(&repo.join("sub")), vec![g]);
    }

    #[test]
    fn git_config_hooks_and_pointers_are_protected_for_checkouts_and_worktrees() {
        let (t, repo) = repo_with_worktree();
        let g = repo.join(".git").canonicalize().unwrap();
        std::fs::create_dir_all(g.join("hooks")).unwrap();
        let main = git_protected(&repo);
        assert_eq!(
            main,
            vec![
                (GitMount::Pinned, g.clone()),
                (GitMount::ReadOnly, g.join("config")),
                (GitMount::ReadOnly, g.join("hooks")),
            ]
        );
        // A subdirectory: the same .git above it.
        std::fs::create_dir(repo.join("sub")).unwrap();
        assert_eq!(git_protected(&repo.join("sub")), main);
        let wt = t.path().join("wt").canonicalize().unwrap();
        assert_eq!(
            git_protected(&wt),
            vec![
                (GitMount::ReadOnly, wt.join(".git")),
                (GitMount::ReadOnly, g.join("worktrees/wt/commondir")),
                (GitMount::ReadOnly, g.join("worktrees/wt/gitdir")),
            ]
        );
        assert!(git_protected(t.path()).is_empty());
    }

    #[test]
    fn the_state_variables_of_codex_claude_and_gemini_are_made_writable() {
        let t = tempfile::tempdir().unwrap();
        let home = t.path().join("home");
        std::fs::create_dir(&home).unwrap();
        let elsewhere = t.path().join("state");
        let state = |agent: &str, var: &'static str| {
            let value = elsewhere.join(agent);
            agent_state_with(&AgentSpec::parse(agent).unwrap(), Some(&home), |k| {
                (k == var).then(|| value.clone().into_os_string())
            })
        };
        std::fs::create_dir(&elsewhere).unwrap();
        let e = elsewhere.canonicalize().unwrap();
        let codex = state("codex", "CODEX_HOME").unwrap();
        assert!(codex.contains(&e.join("codex")), "{codex:?}");
        assert!(codex.contains(&home.canonicalize().unwrap().join(".codex")));
        let claude = state("claude", "CLAUDE_CONFIG_DIR").unwrap();
        assert!(claude.contains(&e.join("claude")), "{claude:?}");
        let gemini = state("gemini", "GEMINI_CLI_HOME").unwrap();
        assert!(gemini.contains(&e.join("gemini/.gemini")), "{gemini:?}");
        // Never the home directory itself, nor a relative path.
        let refused = agent_state_with(&AgentSpec::parse("codex").unwrap(), Some(&home), |k| {
            (k == "CODEX_HOME").then(|| home.clone().into_os_string())
        });
        assert!(matches!(
            refused,
            Err(SandboxError::StateVar {
                var: "CODEX_HOME",
                ..
            })
        ));
        let relative = agent_state_with(&AgentSpec::parse("codex").unwrap(), Some(&home), |k| {
            (k == "CODEX_HOME").then(|| "rel".into())
        });
        assert!(relative.is_err());
    }

    #[test]
    fn home_is_expanded() {
        let h = Path::new("/home/u");
        assert_eq!(expand(Path::new("~/.ssh"), Some(h)), h.join(".ssh"));
        assert_eq!(expand(Path::new("/etc"), Some(h)), PathBuf::from("/etc"));
        assert_eq!(expand(Path::new("~/.ssh"), None), PathBuf::from("~/.ssh"));
    }
}
