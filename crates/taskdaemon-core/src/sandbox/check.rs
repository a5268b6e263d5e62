//! Before iteration 1: is the requested sandbox there and does it work? A sandbox that
//! cannot start is an error with the reason and an install hint, never a silent run
//! without it.

use std::process::{Command, Stdio};

use super::podman_init::InitSearch;
use super::{SandboxError, SandboxKind, SandboxPlan, bwrap};
use crate::agent::find_on_path;

fn unavailable(kind: SandboxKind, reason: String, hint: &str) -> SandboxError {
    SandboxError::Unavailable {
        kind,
        reason,
        hint: hint.into(),
    }
}

/// Both of the plan's sandboxes (the agent's and the validation's) can start.
pub fn check_available(plan: &SandboxPlan) -> Result<(), SandboxError> {
    check_kind(plan.kind, plan)?;
    if plan.validate != plan.kind {
        check_kind(plan.validate, plan)?;
    }
    Ok(())
}

fn check_kind(kind: SandboxKind, plan: &SandboxPlan) -> Result<(), SandboxError> {
    match kind {
        SandboxKind::None => Ok(()),
        SandboxKind::Bwrap => check_bwrap(plan),
        SandboxKind::Docker | SandboxKind::Podman => check_container(kind),
    }
}

fn check_bwrap(plan: &SandboxPlan) -> Result<(), SandboxError> {
    let kind = SandboxKind::Bwrap;
    if find_on_path(bwrap::PROGRAM).is_none() {
        return Err(unavailable(
            kind,
            "bubblewrap is not installed (no `bwrap` on PATH)".into(),
            "install it: `sudo apt-get install bubblewrap` (Debian/Ubuntu), `sudo dnf install bubblewrap` (Fedora), `sudo pacman -S bubblewrap` (Arch); or run with --sandbox none",
        ));
    }
    let mut trial = Command::new(bwrap::PROGRAM);
    trial
        .args(bwrap::base_args(plan.network))
        .args(bwrap::path_binds(std::env::var_os("PATH").as_deref()))
        .arg("true");
    match output(trial) {
        Ok((true, _)) => Ok(()),
        Ok((false, err)) => Err(unavailable(
            kind,
            format!("a trial `bwrap --ro-bind / / true` failed: {err}"),
            "user namespaces are probably disabled: enable them (`sudo sysctl kernel.unprivileged_userns_clone=1`; on Ubuntu 24.04+ `sudo sysctl kernel.apparmor_restrict_unprivileged_userns=0` or an AppArmor profile for bwrap), or use --sandbox docker|podman",
        )),
        Err(e) => Err(unavailable(
            kind,
            format!("`bwrap` could not be started: {e}"),
            "check that bwrap is executable; or run with --sandbox none",
        )),
    }
}

fn check_container(kind: SandboxKind) -> Result<(), SandboxError> {
    let name = kind.name();
    if find_on_path(name).is_none() {
        return Err(unavailable(
            kind,
            format!("no `{name}` on PATH"),
            "install Docker (https://docs.docker.com/engine/install/) or Podman (`sudo apt-get install podman`), or use --sandbox bwrap",
        ));
    }
    let mut info = Command::new(name);
    info.arg("info");
    match output(info) {
        Ok((true, _)) => Ok(()),
        Ok((false, err)) => Err(unavailable(
            kind,
            format!("`{name} info` failed, so no container runtime answers: {err}"),
            "start the engine (`sudo systemctl start docker`, Docker Desktop) or check your access to its socket; or use --sandbox bwrap",
        )),
        Err(e) => Err(unavailable(
            kind,
            format!("`{name}` could not be started: {e}"),
            "check the installation; or use --sandbox bwrap",
        )),
    }
}

/// Run to the end; whether it succeeded and the last line of its stderr.
fn output(mut cmd: Command) -> std::io::Result<(bool, String)> {
    let out = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    let last = err
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    Ok((
        out.status.success(),
        if last.is_empty() {
            format!("exit status {}", out.status)
        } else {
            last.trim().to_string()
        },
    ))
}

/// For `doctor`: whether each sandbox kind can be used here, in one line each, with a
/// warning where it answers but likely cannot start a container (podman without an init
/// for `--init`).
pub fn describe() -> Vec<(SandboxKind, Result<Option<String>, String>)> {
    let plan = SandboxPlan::default();
    [SandboxKind::Bwrap, SandboxKind::Docker, SandboxKind::Podman]
        .into_iter()
        .map(|k| {
            let found = check_kind(k, &plan).map_err(|e| e.to_string());
            let warning = |()| {
                (k == SandboxKind::Podman)
                    .then(|| {
                        InitSearch::here(find_on_path(k.name()).as_deref())
                            .find()
                            .err()
                    })
                    .flatten()
            };
            (k, found.map(warning))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn none_is_always_available() {
        assert!(check_available(&SandboxPlan::default()).is_ok());
    }
}
