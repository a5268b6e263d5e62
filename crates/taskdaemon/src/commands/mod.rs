//! One file per command: an `Args` struct and a `run(args, ctx)` function.

pub mod answer;
pub mod archive;
pub mod demo;
pub mod init;
pub mod loops;
pub mod run;
pub mod script_agent;
pub mod snapshot;
pub mod task;
pub mod unblock;

use std::path::PathBuf;

use anyhow::Context;
use taskdaemon_core::git::Git;
use taskdaemon_core::workspace::Workspace;

use crate::cli::user;

/// What every command gets: the global options.
#[derive(Debug)]
pub struct Ctx {
    pub dir: Option<PathBuf>,
    pub config: Option<PathBuf>,
}

impl Ctx {
    /// The directory to work in (`-C`, else the current one), checked to exist.
    pub fn workdir(&self) -> anyhow::Result<PathBuf> {
        let dir = match &self.dir {
            Some(d) => d.clone(),
            None => std::env::current_dir().context("cannot read the current directory")?,
        };
        std::fs::canonicalize(&dir).map_err(|e| {
            user(format!(
                "directory {} is not usable: {e}\n  hint: check the path given with -C",
                dir.display()
            ))
        })
    }

    /// The work directory, required to be inside a git repository.
    pub fn repo_dir(&self) -> anyhow::Result<PathBuf> {
        let dir = self.workdir()?;
        Git::new(&dir).toplevel().map_err(user)?;
        Ok(dir)
    }

    pub fn workspace(&self) -> anyhow::Result<(PathBuf, Workspace)> {
        let dir = self.repo_dir()?;
        let ws = Workspace::new(&dir);
        Ok((dir, ws))
    }
}

/// Print a value as one line of JSON.
pub fn print_json(v: &impl serde::Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string(v)?);
    Ok(())
}
