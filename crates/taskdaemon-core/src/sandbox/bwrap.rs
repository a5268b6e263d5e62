//! bubblewrap: the whole filesystem read-only, the work tree (and git's paths, the
//! agent's state) read-write, a private `/tmp`, secrets hidden.
//!
//! No new session (the runner's process group must keep holding every process) and the
//! environment passes through (the tracking token, the agent contract). A PID namespace
//! of its own: `/proc` can be mounted without privileges, and when the sandbox's first
//! process ends, the kernel ends everything left inside.

use std::ffi::OsString;
use std::path::Path;

use super::{SandboxNetwork, SandboxPlan, paths};
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

fn bind(a: &mut Vec<OsString>, flag: &str, from: &Path, to: &Path) {
    a.push(flag.into());
    a.push(from.into());
    a.push(to.into());
}

pub fn wrap(spec: ProcessSpec, plan: &SandboxPlan) -> ProcessSpec {
    let mut a = base_args(plan.network);
    let cwd = spec.cwd.canonicalize().unwrap_or_else(|_| spec.cwd.clone());
    bind(&mut a, "--bind", &cwd, &cwd);
    for p in paths::git_writable(&cwd).iter().chain(&plan.rw) {
        bind(&mut a, "--bind", p, p);
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
