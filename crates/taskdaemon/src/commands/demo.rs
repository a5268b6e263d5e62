//! `taskdaemon demo`: a scratch repository with a tiny project and a failing test, and a
//! scripted loop in it. Iteration 1 writes code that still fails and claims COMPLETE (the
//! harness rejects it); iteration 2 fixes it; validation passes; exit 0.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use clap::Args;
use taskdaemon_core::config::Settings;
use taskdaemon_core::engine::{RunConfig, RunState};
use taskdaemon_core::loops::Registry;
use taskdaemon_core::workspace::Workspace;
use taskdaemon_core::{clock, fsutil::write_atomic};

use super::Ctx;
use crate::cli::user;

const CALC: &str =
    "#!/bin/sh\n# usage: sh calc.sh add|mul A B\necho \"not implemented\" >&2\nexit 1\n";
const TEST: &str = include_str!("demo/test.sh");
const SCRIPT: &str = include_str!("demo/agent.yaml");
const TASK: &str = "Implement calc.sh so that `sh test.sh` passes: `sh calc.sh add A B` prints A+B and `sh calc.sh mul A B` prints A*B.";

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Where to make the demo repository (must not exist or be empty) [default: a new temp dir]. Not the global -C/--dir, which names where to run.
    #[arg(long = "path", value_name = "PATH")]
    pub dir: Option<PathBuf>,
    /// One JSON event per line on stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: DemoArgs, _ctx: &Ctx) -> anyhow::Result<i32> {
    let dir = match args.dir {
        Some(d) => {
            if d.exists() && !d.is_dir() {
                return Err(user(format!(
                    "{} is a file\n  hint: --path takes a directory to make (new or empty), or leave --path out",
                    d.display()
                )));
            }
            if d.exists()
                && std::fs::read_dir(&d)
                    .map(|mut r| r.next().is_some())
                    .unwrap_or(true)
            {
                return Err(user(format!(
                    "{} exists and is not empty\n  hint: pass a new directory with --path, or leave --path out",
                    d.display()
                )));
            }
            std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
            d
        }
        None => {
            let stamp = clock::now().strftime("%Y%m%d-%H%M%S");
            let d = std::env::temp_dir()
                .join(format!("taskdaemon-demo-{stamp}-{}", std::process::id()));
            std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
            d
        }
    };
    let dir = std::fs::canonicalize(&dir)?;
    make_project(&dir)?;

    let script = dir.join(".taskdaemon").join("demo-agent.yaml");
    write_atomic(&script, SCRIPT.as_bytes())?;
    let settings = Settings {
        agent: Some(format!("script:{}", script.display())),
        validate: Some("sh test.sh".into()),
        max_iterations: Some(5),
        ..Settings::default()
    };
    let cfg =
        RunConfig::resolve(&dir, TASK.into(), &settings, &Registry::builtin()).map_err(user)?;
    let ws = Workspace::new(&dir);
    let _lock = ws.lock().map_err(user)?;
    let head = taskdaemon_core::git::Git::new(&dir).head()?;
    let now = clock::now();
    let state = RunState::new(cfg, RunState::new_id(now), head, clock::rfc3339(now));
    if !args.json {
        eprintln!("taskdaemon demo: a scratch repository in {}", dir.display());
        eprintln!("taskdaemon demo: task: {TASK}");
        eprintln!(
            "taskdaemon demo: agent: the built-in scripted agent playing {}\n",
            script.display()
        );
    }
    // A scratch directory of its own: no earlier run, no temporary file.
    let begin = taskdaemon_core::engine::Begin::New { temps_removed: 0 };
    let (_, summary) = super::util::drive(&ws, state, begin, args.json)?;
    if !args.json {
        println!("\nThe demo's record:");
        println!(
            "  per-iteration logs: {}/iteration-*.log",
            ws.logs_dir().display()
        );
        println!("  telemetry:          {}", ws.summary_csv().display());
        println!(
            "  prompts sent:       {}/iteration-*.prompt.md (the second carries the validation errors)",
            ws.logs_dir().display()
        );
        println!(
            "  the repository:     git -C {} log --oneline",
            dir.display()
        );
        println!(
            "  an HTML report:     taskdaemon -C {} report",
            dir.display()
        );
    }
    Ok(summary.exit_code)
}

fn make_project(dir: &Path) -> anyhow::Result<()> {
    // Through the core's wrapper: no file-system monitor, no hooks, as every git of ours.
    let git = |args: &[&str]| -> anyhow::Result<()> {
        let out = taskdaemon_core::git::Git::new(dir)
            .call(args)
            .output()
            .context("running git (is it installed?)")?;
        if !out.status.success() {
            bail!(
                "git {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    };
    git(&["init", "-q"])?;
    // The scratch repository gets its own identity so the demo works on a fresh machine.
    git(&["config", "user.name", "taskdaemon demo"])?;
    git(&["config", "user.email", "demo@taskdaemon.invalid"])?;
    write_atomic(&dir.join("calc.sh"), CALC.as_bytes())?;
    write_atomic(&dir.join("test.sh"), TEST.as_bytes())?;
    write_atomic(
        &dir.join("README.md"),
        b"# calc\n\nA tiny calculator for the taskdaemon demo. `sh test.sh` checks it.\n",
    )?;
    write_atomic(
        &dir.join(".gitignore"),
        taskdaemon_core::workspace::IGNORED.join("\n").as_bytes(),
    )?;
    git(&["add", "-A"])?;
    git(&["commit", "-q", "-m", "calc: a stub and its failing test"])?;
    Ok(())
}
