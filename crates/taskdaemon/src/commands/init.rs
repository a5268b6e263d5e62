//! `taskdaemon init`: project settings with commented defaults, .gitignore entries, and
//! the record store's merge driver (`.gitattributes` + repository-local git config).

use clap::Args;
use taskdaemon_core::config::{DEFAULT_CONFIG_YAML, project_config_path};
use taskdaemon_core::fsutil::{read_optional, write_atomic};
use taskdaemon_core::git::with_ignore_block;
use taskdaemon_core::workspace::IGNORED;

use super::util::merge_driver as merge_store;
use super::{Ctx, emit, print_json};
use crate::cli::user;
use crate::outln;

#[derive(Debug, Args)]
pub struct InitArgs {
    /// Overwrite an existing .taskdaemon/config.yaml (the old one is kept as config.yaml.bak).
    #[arg(long)]
    pub force: bool,
    /// Print what was done as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(serde::Serialize)]
struct Report {
    config: String,
    config_written: bool,
    gitignore: String,
    gitignore_added: Vec<String>,
    gitattributes: String,
    gitattributes_added: bool,
    merge_driver: String,
}

/// Write a file of the project; a failure names the file and what to do (a read-only
/// checkout, a file owned by someone else).
fn write(path: &std::path::Path, bytes: &[u8]) -> anyhow::Result<()> {
    write_atomic(path, bytes).map_err(|e| {
        let hint = match e.kind() {
            std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem => {
                "the repository is not writable here: run `taskdaemon init` where you can write (or fix its permissions)"
            }
            _ => "check that the directory exists and is writable",
        };
        user(format!("cannot write {}: {e}\n  hint: {hint}", path.display()))
    })
}

/// Read a file of the project if it exists; a failure names the file.
fn read(path: &std::path::Path) -> anyhow::Result<Option<String>> {
    read_optional(path).map_err(|e| {
        user(format!(
            "cannot read {}: {e}\n  hint: check that it (and each directory above it) is a readable file or directory",
            path.display()
        ))
    })
}

pub fn run(args: InitArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let dir = ctx.repo_dir()?;
    let cfg = project_config_path(&dir);
    let existing = read(&cfg)?;
    let config_written = match existing {
        Some(_) if !args.force => false,
        Some(old) => {
            write(&cfg.with_extension("yaml.bak"), old.as_bytes())?;
            write(&cfg, DEFAULT_CONFIG_YAML.as_bytes())?;
            true
        }
        None => {
            write(&cfg, DEFAULT_CONFIG_YAML.as_bytes())?;
            true
        }
    };
    let gi = dir.join(".gitignore");
    let text = read(&gi)?.unwrap_or_default();
    let added: Vec<String> = IGNORED
        .iter()
        .filter(|p| !text.lines().any(|l| l.trim() == **p))
        .map(|p| p.to_string())
        .collect();
    if !added.is_empty() {
        let new = with_ignore_block(
            &text,
            "taskdaemon: logs, escalations and runtime state",
            &added,
        );
        write(&gi, new.as_bytes())?;
    }
    let ga = dir.join(".gitattributes");
    let attrs = read(&ga)?.unwrap_or_default();
    let attributes_added = !attrs
        .lines()
        .any(|l| l.trim() == merge_store::ATTRIBUTES_LINE);
    if attributes_added {
        let new = with_ignore_block(
            &attrs,
            "taskdaemon: merge the record store per record (`taskdaemon store check`)",
            &[merge_store::ATTRIBUTES_LINE.to_string()],
        );
        write(&ga, new.as_bytes())?;
    }
    let driver = merge_store::install(&dir)?;
    if args.json {
        print_json(&Report {
            config: cfg.display().to_string(),
            config_written,
            gitignore: gi.display().to_string(),
            gitignore_added: added,
            gitattributes: ga.display().to_string(),
            gitattributes_added: attributes_added,
            merge_driver: driver,
        })?;
        return Ok(0);
    }
    // `-q`: as `git init -q`, nothing on success.
    if crate::out::level() < 0 {
        return Ok(0);
    }
    let mut out = String::new();
    if config_written {
        outln!(
            out,
            "wrote {} (every setting commented at its default)",
            cfg.display()
        );
    } else {
        outln!(out, "kept {} (use --force to replace it)", cfg.display());
    }
    if added.is_empty() {
        outln!(
            out,
            "{} already ignores taskdaemon's runtime files",
            gi.display()
        );
    } else {
        outln!(out, "added to {}: {}", gi.display(), added.join(" "));
    }
    if attributes_added {
        outln!(
            out,
            "added to {}: {}",
            ga.display(),
            merge_store::ATTRIBUTES_LINE
        );
    }
    outln!(out, "git config merge.taskstore.driver = {driver}");
    outln!(
        out,
        "next: taskdaemon run \"your task\" --validate \"your test command\""
    );
    emit(&out)?;
    Ok(0)
}
