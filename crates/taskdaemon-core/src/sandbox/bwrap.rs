//! bubblewrap: the whole filesystem read-only, the work tree (and git's paths, the
//! agent's state) read-write but git's config, hooks and pointer files read-only
//! ([`paths::git_protected`]), a private `/tmp`, secrets hidden.
//!
//! No new session (the runner's process group must keep holding every process) and the
//! environment passes through (the tracking token, the agent contract). A PID namespace
//! of its own: `/proc` can be mounted without privileges, and when the sandbox's first
//! process ends, the kernel ends everything left inside.

use std::ffi::OsString;
use std::path::Path;

use super::{SandboxNetwork, SandboxPlan, paths, programs};
use crate::agent::ProcessSpec;

pub const PROGRAM: &str = "bwrap";

/// The options that make the base of every bwrap sandbox (also the preflight's trial).
pub fn base_args(network: SandboxNetwork) -> Vec<OsString> {
    let mut a: Vec<OsString> = [
        "--die-with-parent",
        "--unshare-pid",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
    ]
    .into_iter()
    .map(OsString::from)
    .collect();
    if network == SandboxNetwork::None {
        a.push("--unshare-net".into());
    }
    a
}

/// `PATH`'s directories under `/tmp`, bound read-only over the private `/tmp` so the
/// programs the agent finds outside the sandbox are found inside too (a harness or a
/// tool installed under `/tmp`).
pub fn path_binds(path: Option<&std::ffi::OsStr>) -> Vec<OsString> {
    let mut a = Vec::new();
    for dir in path.map(std::env::split_paths).into_iter().flatten() {
        let Ok(real) = dir.canonicalize() else {
            continue;
        };
        if real.starts_with("/tmp") && real.is_dir() {
            bind(&mut a, "--ro-bind", &real, &real);
            if dir != real && dir.is_absolute() && dir.starts_with("/tmp") {
                bind(&mut a, "--ro-bind", &real, &dir);
            }
        }
    }
    a
}

/// `line` when it is bwrap's own word that it could not run the program.
pub fn exec_failed(line: &str) -> Option<&str> {
    let line = line.trim();
    line.strip_prefix("bwrap: execvp ")
        .is_some_and(|rest| rest.contains(": "))
        .then_some(line)
}

/// What the program (and the first program of a `sh -c` command) needs under `/tmp`,
/// bound read-only: the real file behind its symlink, its package, its `#!` interpreter.
fn program_binds(spec: &ProcessSpec, path: Option<&std::ffi::OsStr>, cwd: &Path) -> Vec<OsString> {
    let first = programs::shell_command_program(&spec.program, &spec.args);
    let mut a = Vec::new();
    for program in
        std::iter::once(spec.program.as_os_str()).chain(first.as_deref().map(Path::as_os_str))
    {
        for dir in programs::needed_under_tmp(program, path, cwd) {
            bind(&mut a, "--ro-bind", &dir, &dir);
        }
    }
    a
}

/// The git config files the agent's environment names (`GIT_CONFIG_GLOBAL`,
/// `GIT_CONFIG_SYSTEM`) that lie under `/tmp`, bound read-only over the private `/tmp`:
/// without them the agent's git has no identity and cannot commit.
fn git_config_binds(spec: &ProcessSpec) -> Vec<OsString> {
    let mut a = Vec::new();
    for key in ["GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM"] {
        let value = spec
            .env
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var_os(key));
        let Some(named) = value.map(std::path::PathBuf::from) else {
            continue;
        };
        let Ok(real) = named.canonicalize() else {
            continue;
        };
        if !real.is_file() {
            continue;
        }
        // The file itself, and the name the variable gives it (a link under /tmp).
        if real.starts_with("/tmp") {
            bind(&mut a, "--ro-bind", &real, &real);
        }
        if named != real && named.is_absolute() && named.starts_with("/tmp") {
            bind(&mut a, "--ro-bind", &real, &named);
        }
    }
    a
}

fn bind(a: &mut Vec<OsString>, flag: &str, from: &Path, to: &Path) {
    a.push(flag.into());
    a.push(from.into());
    a.push(to.into());
}

pub fn wrap(spec: ProcessSpec, plan: &SandboxPlan) -> ProcessSpec {
    let mut a = base_args(plan.network);
    let path = spec
        .env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .or_else(|| std::env::var_os("PATH"));
    a.extend(path_binds(path.as_deref()));
    a.extend(git_config_binds(&spec));
    let cwd = spec.cwd.canonicalize().unwrap_or_else(|_| spec.cwd.clone());
    a.extend(program_binds(&spec, path.as_deref(), &cwd));
    bind(&mut a, "--bind", &cwd, &cwd);
    for p in paths::git_writable(&cwd).iter().chain(&plan.rw) {
        bind(&mut a, "--bind", p, p);
    }
    // Last, so that no writable bind lies over them: what taskdaemon's own git reads.
    for (how, p) in paths::git_protected(&cwd) {
        let flag = match how {
            paths::GitMount::Pinned => "--bind",
            paths::GitMount::ReadOnly => "--ro-bind",
        };
        bind(&mut a, flag, &p, &p);
    }
    for p in &plan.hide {
        if p.is_dir() {
            a.push("--tmpfs".into());
            a.push(p.into());
        } else {
            bind(&mut a, "--ro-bind", Path::new("/dev/null"), p);
        }
    }
    a.push("--chdir".into());
    a.push(cwd.into());
    a.push("--".into());
    a.push(spec.program);
    a.extend(spec.args);
    ProcessSpec {
        program: PROGRAM.into(),
        args: a,
        ..spec
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::SandboxKind;
    use std::path::PathBuf;
    use std::time::Duration;

    #[test]
    fn the_command_runs_inside_with_the_tree_writable_and_secrets_hidden() {
        let t = tempfile::tempdir().unwrap();
        let plan = SandboxPlan {
            kind: SandboxKind::Bwrap,
            rw: vec![PathBuf::from("/state")],
            hide: vec![t.path().to_path_buf(), PathBuf::from("/no/such/file")],
            network: SandboxNetwork::None,
            ..Default::default()
        };
        let spec = ProcessSpec {
            program: "sh".into(),
            args: vec!["-c".into(), "true".into()],
            cwd: t.path().to_path_buf(),
            env: vec![("A".into(), "1".into())],
            stdin: Some(b"x".to_vec()),
            timeout: Some(Duration::from_secs(3)),
            grace: Duration::from_secs(1),
            after_stop: None,
        };
        let w = wrap(spec, &plan);
        assert_eq!(w.program, "bwrap");
        let args: Vec<String> = w
            .args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let s = args.join(" ");
        let cwd = t.path().canonicalize().unwrap().display().to_string();
        assert!(s.starts_with("--die-with-parent --unshare-pid --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp --unshare-net"), "{s}");
        assert!(s.contains(&format!("--bind {cwd} {cwd}")), "{s}");
        assert!(s.contains("--bind /state /state"));
        assert!(s.contains(&format!("--tmpfs {}", t.path().display())));
        assert!(s.contains("--ro-bind /dev/null /no/such/file"));
        assert!(s.ends_with(&format!("--chdir {cwd} -- sh -c true")), "{s}");
        assert_eq!(w.env, vec![("A".into(), "1".into())]);
        assert_eq!(w.stdin.as_deref(), Some(&b"x"[..]));
        assert_eq!(w.timeout, Some(Duration::from_secs(3)));
    }
}

#[cfg(test)]
mod path_tests {
    use super::*;

    #[test]
    fn path_directories_under_tmp_are_bound_over_the_private_tmp() {
        let t = tempfile::Builder::new().tempdir_in("/tmp").unwrap();
        let real = t.path().canonicalize().unwrap();
        let path = std::env::join_paths([real.as_path(), Path::new("/usr/bin")]).unwrap();
        let a: Vec<String> = path_binds(Some(&path))
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let r = real.display().to_string();
        assert_eq!(a, ["--ro-bind", &r, &r]);
        assert!(path_binds(None).is_empty());
    }
}
