//! The git merge driver for the record store, and its installation.
//!
//! `taskdaemon init` writes `.taskdaemon/store/*.jsonl merge=taskstore` to `.gitattributes`
//! (committed: everyone's git uses it) and, in the repository's own config (not
//! committed: it names a program on this machine), `merge.taskstore.driver`: `taskdaemon`
//! when that name on `PATH` is this very binary (so an upgrade or a move along `PATH` keeps
//! it working), else this binary's absolute path (`std::env::current_exe`), with the
//! hidden subcommand `__merge-store %O %A %B %P`. The `taskstore-merge` binary of the
//! taskstore crate does the same job for those who install it. If the program is gone,
//! `taskdaemon store check` says so and `taskdaemon init` fixes it. Without the driver git falls back to its line
//! merge (it still refuses nothing silently, but conflicts are per line, not per record).

use std::path::Path;

use serde::Serialize;
use taskdaemon_core::agent::find_on_path;
use taskdaemon_core::git::Git;

pub const DRIVER_NAME: &str = "taskstore";
pub const ATTRIBUTES_LINE: &str = ".taskdaemon/store/*.jsonl merge=taskstore";

/// The driver command for git config: this binary, quoted for the shell git runs it with.
pub fn driver_command() -> anyhow::Result<String> {
    let exe = std::env::current_exe()?;
    let exe = exe.canonicalize().unwrap_or(exe);
    if find_on_path("taskdaemon").and_then(|p| p.canonicalize().ok()) == Some(exe.clone()) {
        return Ok("taskdaemon __merge-store %O %A %B %P".into());
    }
    let quoted = format!("'{}'", exe.display().to_string().replace('\'', r"'\''"));
    Ok(format!("{quoted} __merge-store %O %A %B %P"))
}

/// Set the repository-local git config for the driver. Returns the driver command.
pub fn install(dir: &Path) -> anyhow::Result<String> {
    let git = Git::new(dir);
    let cmd = driver_command()?;
    git.run(&[
        "config",
        "--local",
        &format!("merge.{DRIVER_NAME}.name"),
        "taskdaemon record store: per-record three-way merge",
    ])?;
    git.run(&[
        "config",
        "--local",
        &format!("merge.{DRIVER_NAME}.driver"),
        &cmd,
    ])?;
    Ok(cmd)
}

#[derive(Debug, Serialize)]
pub struct DriverStatus {
    /// `.gitattributes` sends the store's files to the driver.
    pub attribute: bool,
    /// `merge.taskstore.driver`, if set.
    pub driver: Option<String>,
    /// The driver's program exists on this machine.
    pub program_exists: bool,
}

impl DriverStatus {
    pub fn describe(&self) -> String {
        match (&self.driver, self.attribute, self.program_exists) {
            (Some(d), true, true) => format!("merge driver: installed ({d})"),
            (None, _, _) => "merge driver: not configured in this repository (git would merge the store line by line)\n  hint: run `taskdaemon init`".into(),
            (Some(_), false, _) => format!("merge driver: .gitattributes lacks `{ATTRIBUTES_LINE}`\n  hint: run `taskdaemon init`"),
            (Some(d), true, false) => format!("merge driver: its program is gone ({d})\n  hint: run `taskdaemon init` again with the taskdaemon you use now"),
        }
    }
}

pub fn status(dir: &Path) -> DriverStatus {
    let git = Git::new(dir);
    let attribute = git
        .run(&["check-attr", "merge", "--", ".taskdaemon/store/plans.jsonl"])
        .is_ok_and(|out| out.trim_end().ends_with(&format!(": {DRIVER_NAME}")));
    let driver = git
        .run(&["config", "--get", &format!("merge.{DRIVER_NAME}.driver")])
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    let program_exists = driver.as_deref().is_some_and(|d| {
        let program = match d.strip_prefix('\'') {
            Some(rest) => rest
                .split("' ")
                .next()
                .unwrap_or(rest)
                .replace(r"'\''", "'"),
            None => d.split_whitespace().next().unwrap_or("").to_string(),
        };
        if program.contains('/') {
            Path::new(&program).is_file()
        } else {
            find_on_path(&program).is_some()
        }
    });
    DriverStatus {
        attribute,
        driver,
        program_exists,
    }
}
