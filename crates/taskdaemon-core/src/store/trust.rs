//! Which records may make the daemon run a command.
//!
//! The store is tracked by git, so a cloned repository's records are someone else's input.
//! A run's `agent` of the form `cmd:…` or `script:…`, and its `validate` command, are run
//! only when the run **and every record above it** (its parent spec, that spec's plan)
//! were created on this machine. Creation is remembered outside git, one id per line, in
//! `<project>/.git/taskdaemon/local-records`: a clone never has it. A value that equals
//! what the local user configured (the daemon's `--agent`, or `agent`/`validate` in the
//! user's own `~/.config/taskdaemon/config.yaml`) is allowed whatever the record's origin.
//! A refused run is blocked with a note saying how to allow it: `taskdaemon store trust
//! REF` (after reading the command).

use std::collections::HashSet;
use std::path::PathBuf;

use super::{AnyRecord, LoopRun, Records, Result, StoreError};

/// The context keys whose values the daemon runs as commands.
fn commands(run: &LoopRun) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    use crate::scheduler::context::RunContext;
    if let Some(a) = RunContext::get(&run.context.agent)
        && (a.starts_with("cmd:") || a.starts_with("script:"))
    {
        out.push(("agent", a.to_string()));
    }
    if let Some(v) = RunContext::get(&run.context.validate) {
        out.push(("validate", v.to_string()));
    }
    out
}

impl Records {
    /// `<project>/.git/taskdaemon/local-records` (none when `.git` is not a directory).
    fn local_marker(&self) -> Option<PathBuf> {
        let git = self.project.join(".git");
        git.is_dir()
            .then(|| git.join("taskdaemon").join("local-records"))
    }

    /// Remember that `ids` were created here.
    pub(crate) fn mark_local<'a>(&self, ids: impl Iterator<Item = &'a str>) -> Result<()> {
        let Some(path) = self.local_marker() else {
            return Ok(());
        };
        let text: String = ids.map(|id| format!("{id}\n")).collect();
        // Inside `.git` (never checked out, so no link a repository could plant): a plain
        // append, without the per-call checks of `fsutil`.
        let append = || -> std::io::Result<()> {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .custom_flags(nix::libc::O_NOFOLLOW)
                .open(&path)?
                .write_all(text.as_bytes())
        };
        append().map_err(|e| StoreError::Invalid {
            field: "local-records".into(),
            reason: format!("{}: {e}", path.display()),
            hint: "check the permissions of the repository's .git directory".into(),
        })
    }

    fn local_ids(&self) -> HashSet<String> {
        self.local_marker()
            .and_then(|p| crate::fsutil::read_optional(&p).ok().flatten())
            .map(|t| t.lines().map(str::to_string).collect())
            .unwrap_or_default()
    }

    /// Mark a record (and the records above it) as created here: the person read its
    /// commands and accepts them.
    pub fn trust(&self, id: &str) -> Result<Vec<String>> {
        let chain = self.ancestry(id)?;
        self.mark_local(chain.iter().map(String::as_str))?;
        Ok(chain)
    }

    /// `id` and its parents, nearest first (stops at a missing parent or a loop).
    fn ancestry(&self, id: &str) -> Result<Vec<String>> {
        let mut chain = vec![id.to_string()];
        let mut cur = self.get(id)?;
        while let Some(p) = cur.as_ref().and_then(AnyRecord::parent).map(str::to_string) {
            if chain.contains(&p) {
                break;
            }
            chain.push(p.clone());
            cur = self.get(&p)?;
        }
        Ok(chain)
    }

    /// `Err(note)` when `run` would make the daemon run a command that neither this
    /// machine's records nor the local user's configuration gave it. `configured` are the
    /// values the local user set (the daemon's agent, the user config's agent and validate).
    pub fn check_commands(
        &self,
        run: &LoopRun,
        configured: &[String],
    ) -> Result<std::result::Result<(), String>> {
        let wanted: Vec<_> = commands(run)
            .into_iter()
            .filter(|(_, v)| !configured.contains(v))
            .collect();
        if wanted.is_empty() {
            return Ok(Ok(()));
        }
        let local = self.local_ids();
        let chain = self.ancestry(&run.id)?;
        let Some(foreign) = chain.iter().find(|id| !local.contains(*id)) else {
            return Ok(Ok(()));
        };
        let what: Vec<String> = wanted.iter().map(|(k, v)| format!("{k} `{v}`")).collect();
        Ok(Err(format!(
            "not started: its {} came with record {foreign}, which was not created on this machine (a cloned or merged store); taskdaemon runs commands only from records made here or from your own configuration. Read the command, then allow it with `taskdaemon store trust {}` and `taskdaemon resume {}`",
            what.join(" and "),
            run.id,
            run.id
        )))
    }
}
