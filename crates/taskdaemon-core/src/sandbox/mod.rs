//! Agents in a sandbox (`--sandbox none|bwrap|docker|podman`): the agent's and the
//! validation command's [`ProcessSpec`] is rewritten so that the process can write only
//! the run's work tree (plus what git needs to commit there, a private `/tmp` and the
//! agent's own state directories), and cannot read the hidden secrets (`~/.ssh`, …).
//!
//! - [`SandboxSettings`] are what a person wrote (config `sandbox:`, `sandbox-rw:`, …).
//! - [`SandboxPlan`] is the resolved form a run keeps (absolute paths, per-preset state
//!   directories), saved in the run's config so a resume uses the same.
//! - [`wrap`] rewrites a spec; [`check_available`] is the preflight before iteration 1.
//! - [`DeniedWrites`] counts the denied writes the agent's output shows.
//!
//! The environment (the agent contract, the process-tracking token) passes through
//! unchanged, and no new session or PID namespace is made, so the runner's process-group
//! stop, parent-death signal and descendant-tree cleanup reach every sandboxed process.

mod bwrap;
mod check;
mod container;
mod denied;
mod paths;
mod podman_init;
mod programs;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::agent::{AgentSpec, ProcessSpec};

pub use check::{check_available, describe};
pub use denied::DeniedWrites;

/// Variables of the agent contract naming directories the agent must write.
pub const CONTRACT_DIRS: &[&str] = &["TASKDAEMON_SPEC_DIR"];

/// Which sandbox confines a process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxKind {
    #[default]
    None,
    Bwrap,
    Docker,
    Podman,
}

impl SandboxKind {
    pub const ALL: [SandboxKind; 4] = [
        SandboxKind::None,
        SandboxKind::Bwrap,
        SandboxKind::Docker,
        SandboxKind::Podman,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SandboxKind::None => "none",
            SandboxKind::Bwrap => "bwrap",
            SandboxKind::Docker => "docker",
            SandboxKind::Podman => "podman",
        }
    }

    pub fn parse(s: &str) -> Result<SandboxKind, String> {
        SandboxKind::ALL
            .into_iter()
            .find(|k| k.name() == s.trim())
            .ok_or_else(|| format!("`{s}` is not a sandbox; use none, bwrap, docker or podman"))
    }

    fn is_container(self) -> bool {
        matches!(self, SandboxKind::Docker | SandboxKind::Podman)
    }
}

impl std::fmt::Display for SandboxKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The sandbox's network.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxNetwork {
    /// The host's network (the agent needs its model API).
    #[default]
    Shared,
    /// No network at all (local models, offline loops).
    None,
}

/// The sandbox settings as written (config file, flags); `None`: not set in this layer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SandboxSettings {
    pub sandbox: Option<SandboxKind>,
    /// For the validation command [default: the agent's].
    pub sandbox_validate: Option<SandboxKind>,
    /// More read-write paths (`~/` is the home directory).
    pub sandbox_rw: Option<Vec<PathBuf>>,
    /// More paths hidden entirely (added to the defaults).
    pub sandbox_ro_hide: Option<Vec<PathBuf>>,
    pub sandbox_network: Option<SandboxNetwork>,
    /// The container image of docker/podman.
    pub sandbox_image: Option<String>,
}

/// What a run's processes are confined by, resolved.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SandboxPlan {
    /// The agent's sandbox.
    pub kind: SandboxKind,
    /// The validation command's sandbox.
    pub validate: SandboxKind,
    /// Read-write besides the work tree and git's paths: absolute, existing.
    pub rw: Vec<PathBuf>,
    /// Hidden (an empty directory, or /dev/null for a file): absolute, existing.
    pub hide: Vec<PathBuf>,
    pub network: SandboxNetwork,
    pub image: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("--sandbox {kind}: {reason}\n  hint: {hint}")]
    Unavailable {
        kind: SandboxKind,
        reason: String,
        hint: String,
    },
    #[error(
        "--sandbox {kind} needs an image\n  hint: set `sandbox-image: IMAGE` in .taskdaemon/config.yaml (docs/sandbox.md has an example Dockerfile for Claude Code)"
    )]
    NoImage { kind: SandboxKind },
    #[error(
        "preparing the sandbox: {path}: {message}\n  hint: create it yourself, or remove it from sandbox-rw"
    )]
    Prepare { path: PathBuf, message: String },
    #[error(
        "{var}={path} cannot be made writable in the sandbox: it is not an absolute path, or it is the home directory or above it\n  hint: point {var} at a directory of its own, or unset it"
    )]
    StateVar { var: &'static str, path: PathBuf },
}

impl SandboxPlan {
    /// Resolve `s` for `agent`: the preset's state directories (created when missing, so
    /// the agent can write them), `sandbox-rw` and the hidden paths (defaults +
    /// `sandbox-ro-hide`), with `~/` expanded against `home`.
    pub fn resolve(
        s: &SandboxSettings,
        agent: &AgentSpec,
        home: Option<&std::path::Path>,
    ) -> Result<SandboxPlan, SandboxError> {
        let kind = s.sandbox.unwrap_or_default();
        let validate = s.sandbox_validate.unwrap_or(kind);
        let mut plan = SandboxPlan {
            kind,
            validate,
            network: s.sandbox_network.unwrap_or_default(),
            image: s.sandbox_image.clone(),
            ..SandboxPlan::default()
        };
        if kind == SandboxKind::None && validate == SandboxKind::None {
            return Ok(plan);
        }
        if (kind.is_container() || validate.is_container()) && plan.image.is_none() {
            return Err(SandboxError::NoImage {
                kind: if kind.is_container() { kind } else { validate },
            });
        }
        if kind != SandboxKind::None {
            plan.rw = paths::agent_state(agent, home)?;
        }
        for p in s.sandbox_rw.iter().flatten() {
            if let Some(p) = paths::existing(&paths::expand(p, home)) {
                plan.rw.push(p);
            }
        }
        let hide = paths::DEFAULT_HIDE.iter().map(PathBuf::from);
        for p in hide.chain(s.sandbox_ro_hide.iter().flatten().cloned()) {
            if let Some(p) = paths::existing(&paths::expand(&p, home)) {
                plan.hide.push(p);
            }
        }
        plan.rw.dedup();
        plan.hide.dedup();
        Ok(plan)
    }

    /// The same plan for the validation command.
    pub fn for_validation(&self) -> SandboxPlan {
        SandboxPlan {
            kind: self.validate,
            ..self.clone()
        }
    }

    /// The plan with the directories the agent contract tells the agent to write (in
    /// `env`: [`CONTRACT_DIRS`]) also writable: a task of a parallel group works in its own
    /// worktree but checks its box in the spec directory's tasks.md, under its lock, and
    /// writes its progress file there.
    pub fn with_contract_dirs(&self, env: &[(OsString, OsString)]) -> SandboxPlan {
        let mut plan = self.clone();
        for (k, v) in env {
            if CONTRACT_DIRS.iter().any(|c| k == c)
                && let Some(p) = paths::existing(Path::new(v))
                && !plan.rw.contains(&p)
            {
                plan.rw.push(p);
            }
        }
        plan
    }

    /// One line for the start line and `doctor`: `bwrap (network shared)`, `none`.
    pub fn label(&self) -> String {
        let mut s = self.kind.name().to_string();
        if self.kind != SandboxKind::None {
            let net = match self.network {
                SandboxNetwork::Shared => "network shared",
                SandboxNetwork::None => "no network",
            };
            s.push_str(&format!(" ({net})"));
        }
        if self.validate != self.kind {
            s.push_str(&format!("; validation: {}", self.validate));
        }
        s
    }
}

/// `spec` confined by `plan.kind`: the program and arguments rewritten to start the same
/// command inside the sandbox, with the same cwd, environment, stdin and time limits.
pub fn wrap(mut spec: ProcessSpec, plan: &SandboxPlan) -> ProcessSpec {
    if plan.kind != SandboxKind::None {
        // It is one: Claude Code then allows its permission bypass also as root.
        spec.env.push(("IS_SANDBOX".into(), "1".into()));
    }
    match plan.kind {
        SandboxKind::None => spec,
        SandboxKind::Bwrap => bwrap::wrap(spec, plan),
        SandboxKind::Docker | SandboxKind::Podman => container::wrap(spec, plan),
    }
}

/// Whether a process under `plan` that exited `code` never became the agent: docker and
/// podman `run` exit 125 when the engine itself failed (the image missing, a runtime or its
/// init binary missing, an option refused), before the command in the image ran.
pub fn engine_failed(plan: &SandboxPlan, code: i32) -> bool {
    plan.kind.is_container() && code == 125
}

/// The line in which bwrap (under `plan`, exited `code`) said it could not run the
/// program: `bwrap: execvp claude: No such file or directory`, exit 1.
pub fn exec_failed<'a>(plan: &SandboxPlan, code: i32, tail: &'a [String]) -> Option<&'a str> {
    (plan.kind == SandboxKind::Bwrap && code == 1)
        .then(|| tail.iter().find_map(|l| bwrap::exec_failed(l)))
        .flatten()
}

/// [`wrap`] for the validation command (`sandbox-validate:`).
pub fn wrap_validation(spec: ProcessSpec, plan: &SandboxPlan) -> ProcessSpec {
    wrap(spec, &plan.for_validation())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_and_print() {
        for k in SandboxKind::ALL {
            assert_eq!(SandboxKind::parse(k.name()), Ok(k));
        }
        assert!(SandboxKind::parse("firejail").is_err());
    }

    #[test]
    fn none_resolves_to_nothing_and_wraps_nothing() {
        let plan = SandboxPlan::resolve(
            &SandboxSettings::default(),
            &AgentSpec::parse("claude").unwrap(),
            None,
        )
        .unwrap();
        assert_eq!(plan, SandboxPlan::default());
        assert_eq!(plan.label(), "none");
    }

    #[test]
    fn containers_need_an_image() {
        let s = SandboxSettings {
            sandbox: Some(SandboxKind::Docker),
            ..Default::default()
        };
        let e = SandboxPlan::resolve(&s, &AgentSpec::parse("cmd:true").unwrap(), None);
        assert!(matches!(e, Err(SandboxError::NoImage { .. })));
    }

    #[test]
    fn state_dirs_are_made_and_secrets_found() {
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir(home.path().join(".ssh")).unwrap();
        std::fs::write(home.path().join(".netrc"), "machine x").unwrap();
        let s = SandboxSettings {
            sandbox: Some(SandboxKind::Bwrap),
            sandbox_validate: Some(SandboxKind::None),
            sandbox_rw: Some(vec!["~/extra".into(), "~/missing".into()]),
            sandbox_ro_hide: Some(vec!["~/secret".into()]),
            ..Default::default()
        };
        std::fs::create_dir(home.path().join("extra")).unwrap();
        std::fs::create_dir(home.path().join("secret")).unwrap();
        let plan =
            SandboxPlan::resolve(&s, &AgentSpec::parse("claude").unwrap(), Some(home.path()))
                .unwrap();
        let h = home.path().canonicalize().unwrap();
        assert!(plan.rw.contains(&h.join(".claude")));
        assert!(h.join(".claude").is_dir());
        assert!(plan.rw.contains(&h.join("extra")));
        assert!(!plan.rw.iter().any(|p| p.ends_with("missing")));
        for p in [".ssh", ".netrc", "secret"] {
            assert!(
                plan.hide.contains(&h.join(p)),
                "{p} hidden: {:?}",
                plan.hide
            );
        }
        assert_eq!(plan.for_validation().kind, SandboxKind::None);
        assert_eq!(plan.label(), "bwrap (network shared); validation: none");
        let env = [
            (
                "TASKDAEMON_SPEC_DIR".into(),
                home.path().join("extra").into(),
            ),
            (
                "TASKDAEMON_WORKDIR".into(),
                home.path().join("secret").into(),
            ),
        ];
        let with = plan.with_contract_dirs(&env);
        assert_eq!(with.rw, plan.rw, "extra was already writable");
        let env = [(
            "TASKDAEMON_SPEC_DIR".into(),
            home.path().join("secret").into(),
        )];
        assert!(plan.with_contract_dirs(&env).rw.contains(&h.join("secret")));
    }
}
