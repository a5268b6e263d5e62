//! One file per command: an `Args` struct and a `run(args, ctx)` function.

pub mod answer;
pub mod api_agent;
pub mod archive;
pub mod cancel;
pub mod check_doc;
pub mod completions;
pub mod config;
pub mod daemon;
pub mod daemon_link;
pub mod delete;
pub mod demo;
pub mod doctor;
pub mod edit;
pub mod implement;
pub mod init;
pub mod list;
pub mod logs;
pub mod loops;
pub mod merge_store;
pub mod pause;
pub mod plan;
pub mod plan_file;
pub mod record_control;
pub mod report;
pub mod resume;
pub mod run;
pub mod script_agent;
pub mod show;
pub mod snapshot;
pub mod spec;
pub mod start;
pub mod status;
pub mod store;
pub mod store_stress;
pub mod stories;
pub mod submit;
pub mod task;
pub mod trust;
pub mod unblock;
pub mod util;
pub mod watch;
pub mod worktree;

use std::path::PathBuf;

use anyhow::Context;
use taskdaemon_core::git::Git;
use taskdaemon_core::store::{AnyRecord, Records, StoreError};
use taskdaemon_core::workspace::Workspace;
use taskstore::StoreOptions;

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
        let real = std::fs::canonicalize(&dir).map_err(|e| {
            user(format!(
                "directory {} is not usable: {e}\n  hint: check the path given with -C",
                dir.display()
            ))
        })?;
        if !real.is_dir() {
            return Err(user(format!(
                "{} is a file, not a directory\n  hint: -C takes the directory to work in (the repository, or a directory in it)",
                dir.display()
            )));
        }
        Ok(real)
    }

    /// The work directory, required to be inside a git repository.
    pub fn repo_dir(&self) -> anyhow::Result<PathBuf> {
        let dir = self.workdir()?;
        Git::new(&dir).toplevel().map_err(user)?;
        Ok(dir)
    }

    /// Where the record store's project is: the one resolver every command and the
    /// daemon use (`taskdaemon_core::project`).
    pub fn project_dir(&self) -> anyhow::Result<PathBuf> {
        taskdaemon_core::project::project_dir(&self.workdir()?).map_err(user)
    }

    pub fn workspace(&self) -> anyhow::Result<(PathBuf, Workspace)> {
        let dir = self.repo_dir()?;
        let ws = Workspace::new(&dir);
        Ok((dir, ws))
    }
}

/// Print a document (an object) as one line of JSON, in the one convention
/// (`taskdaemon_core::json`, docs/json.md): snake_case keys, `"schema": 1`, RFC 3339 times.
pub fn print_json(v: &impl serde::Serialize) -> anyhow::Result<()> {
    print_value(&taskdaemon_core::json::document(v)?)
}

/// Print a list as `{"schema":1,"<key>":[…]}`.
pub fn print_list(key: &str, items: &impl serde::Serialize) -> anyhow::Result<()> {
    print_value(&taskdaemon_core::json::list(key, items)?)
}

/// Print an event as one line: a document with `at`, now on the project's clock.
pub fn print_event(e: &impl serde::Serialize) -> anyhow::Result<()> {
    print_value(&taskdaemon_core::json::event(e)?)
}

fn print_value(v: &serde_json::Value) -> anyhow::Result<()> {
    let mut line = serde_json::to_string(v)?;
    line.push('\n');
    emit(&line)
}

/// Write to stdout; a reader that went away (`| head`) is not an error.
pub fn emit(text: &str) -> anyhow::Result<()> {
    Ok(crate::out::write_out(text)?)
}

/// Write a success report to stdout unless `-q` asked for silence on success (as
/// `git init -q`): what a command was asked to print (a list, JSON) goes through [`emit`].
pub fn say(text: &str) -> anyhow::Result<()> {
    if crate::out::level() < 0 {
        return Ok(());
    }
    emit(text)
}

/// `println!` into a String (for `emit`).
#[macro_export]
macro_rules! outln {
    ($out:expr) => { $out.push('\n') };
    ($out:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($out, $($arg)*);
    }};
}

/// A store error: the user's to fix (exit 64) unless it is an I/O failure (70).
pub fn store_err(e: StoreError) -> anyhow::Error {
    if e.is_user_fault() {
        user(e)
    } else {
        anyhow::Error::new(e)
    }
}

/// Open the project's record store; size warnings and unreadable lines are noted on
/// stderr (they are skipped, the rest loads).
pub fn open_records(ctx: &Ctx, opts: StoreOptions) -> anyhow::Result<Records> {
    let dir = ctx.project_dir()?;
    let records = Records::open_with(&dir, opts).map_err(store_err)?;
    let store = records.store();
    for w in store.warnings() {
        eprintln!("taskdaemon: warning: {w}");
    }
    let issues = store.issues();
    if let Some(first) = issues.first() {
        eprintln!(
            "taskdaemon: warning: skipped {} unreadable line(s) in the store, first {first}\n  hint: `taskdaemon store check` lists them",
            issues.len()
        );
    }
    Ok(records)
}

/// Now, in unix milliseconds (`TASKDAEMON_NOW` fixes it for tests).
pub fn now_ms() -> i64 {
    taskdaemon_core::clock::now().as_millisecond()
}

/// A unix-ms time as RFC 3339 (UTC).
pub fn fmt_ms(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(taskdaemon_core::clock::rfc3339)
        .unwrap_or_else(|_| ms.to_string())
}

/// A record as JSON with its kind and readiness added.
pub fn record_json(records: &Records, r: &AnyRecord) -> anyhow::Result<serde_json::Value> {
    let readiness = records.readiness(r).map_err(store_err)?;
    let mut v = r.to_json();
    if let Some(o) = v.as_object_mut() {
        o.insert("kind".into(), r.kind().tag().into());
        o.insert("ready".into(), readiness.ready.into());
        o.insert(
            "waiting-for".into(),
            readiness
                .waiting
                .iter()
                .map(|(id, status)| serde_json::json!({"id": id, "status": status}))
                .collect(),
        );
    }
    Ok(v)
}

/// Resolve each reference to an id.
pub fn resolve_all(records: &Records, refs: &[String]) -> anyhow::Result<Vec<String>> {
    refs.iter()
        .map(|r| records.resolve(r).map_err(store_err))
        .collect()
}
