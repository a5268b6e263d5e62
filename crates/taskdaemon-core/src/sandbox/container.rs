//! docker / podman: `run --rm -i` of the configured image, with the work tree (and git's
//! paths, the agent's state) mounted at the same paths (git's config, hooks and pointer
//! files read-only: [`paths::git_protected`]), the user's uid and gid, and the
//! environment contract passed by name (`--env KEY`: the value comes from the CLI's own
//! environment, never from its command line). `PATH` is the image's own: the host's
//! directories mean nothing inside it. The container is named, so that a timeout or a
//! stop, which ends the CLI and the container's processes, also removes the container
//! (`rm -f NAME`): it belongs to the runtime, not to the process tree.

use std::ffi::OsString;

use super::{SandboxKind, SandboxNetwork, SandboxPlan, paths};
use crate::agent::ProcessSpec;
use crate::agent::tracked::GROUP_VAR;

pub fn wrap(spec: ProcessSpec, plan: &SandboxPlan) -> ProcessSpec {
    let cwd = spec.cwd.canonicalize().unwrap_or_else(|_| spec.cwd.clone());
    let uid = nix::unistd::getuid().as_raw();
    let gid = nix::unistd::getgid().as_raw();
    let name = format!("taskdaemon-{}", uuid::Uuid::new_v4().simple());
    let mut a: Vec<OsString> = vec!["run".into(), "--rm".into(), "-i".into(), "--init".into()];
    a.push(format!("--name={name}").into());
    a.push(format!("--user={uid}:{gid}").into());
    if plan.kind == SandboxKind::Podman && uid != 0 {
        a.push("--userns=keep-id".into());
    }
    if plan.network == SandboxNetwork::None {
        a.push("--network=none".into());
    }
    for p in std::iter::once(&cwd)
        .chain(&paths::git_writable(&cwd))
        .chain(&plan.rw)
    {
        let mut v = OsString::from("--volume=");
        v.push(p);
        v.push(":");
        v.push(p);
        a.push(v);
    }
    // After the writable volumes: what taskdaemon's own git reads, pinned or read-only.
    for (how, p) in paths::git_protected(&cwd) {
        let mut v = OsString::from("--volume=");
        v.push(&p);
        v.push(":");
        v.push(&p);
        if how == paths::GitMount::ReadOnly {
            v.push(":ro");
        }
        a.push(v);
    }
    let mut w = OsString::from("--workdir=");
    w.push(&cwd);
    a.push(w);
    let names = spec
        .env
        .iter()
        .map(|(k, _)| k.clone())
        .filter(|k| k != "PATH");
    for k in names.chain([GROUP_VAR.into(), "HOME".into()]) {
        a.push("--env".into());
        a.push(k);
    }
    a.push(plan.image.clone().unwrap_or_default().into());
    a.push(spec.program);
    a.extend(spec.args);
    let engine: OsString = plan.kind.name().into();
    ProcessSpec {
        after_stop: Some(vec![engine.clone(), "rm".into(), "-f".into(), name.into()]),
        program: engine,
        args: a,
        ..spec
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_same_command_runs_in_the_image_at_the_same_path() {
        let t = tempfile::tempdir().unwrap();
        let plan = SandboxPlan {
            kind: SandboxKind::Podman,
            image: Some("taskdaemon-claude:latest".into()),
            network: SandboxNetwork::None,
            ..Default::default()
        };
        let spec = ProcessSpec {
            program: "claude".into(),
            args: vec!["-p".into()],
            cwd: t.path().to_path_buf(),
            env: vec![
                ("TASKDAEMON_RUN_ID".into(), "r1".into()),
                ("PATH".into(), "/home/u/bin:/usr/bin".into()),
            ],
            stdin: None,
            timeout: None,
            grace: Duration::from_secs(1),
            after_stop: None,
        };
        let w = wrap(spec, &plan);
        assert_eq!(w.program, "podman");
        let s: Vec<String> = w
            .args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let s = s.join(" ");
        let cwd = t.path().canonicalize().unwrap().display().to_string();
        assert!(
            s.starts_with("run --rm -i --init --name=taskdaemon-"),
            "{s}"
        );
        let name = s
            .split_whitespace()
            .nth(4)
            .unwrap()
            .trim_start_matches("--name=");
        assert_eq!(w.after_stop.unwrap(), ["podman", "rm", "-f", name]);
        assert!(!s.contains("--env PATH"), "the image's own PATH: {s}");
        assert!(s.contains("--network=none"));
        assert!(
            s.contains(&format!("--volume={cwd}:{cwd} --workdir={cwd}")),
            "{s}"
        );
        assert!(s.contains("--env TASKDAEMON_RUN_ID --env TASKDAEMON_GROUP --env HOME"));
        assert!(!s.contains("r1"), "values stay off the command line: {s}");
        assert!(s.ends_with("taskdaemon-claude:latest claude -p"), "{s}");
    }
}
