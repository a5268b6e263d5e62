//! `taskdaemon run`: resolve settings, check the work tree, drive the engine, render events.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Args;
use taskdaemon_core::config::Settings;
use taskdaemon_core::engine::standalone::standalone_context;
use taskdaemon_core::engine::{Begin, Outcome, RunConfig, RunState};
use taskdaemon_core::workspace::Workspace;

use super::Ctx;
use super::util::{
    RunFlags, drive, finish_task, hold_for_loop, new_state, refuse_if_waiting_for_a_human, resolve,
    settings,
};
use crate::cli::user;

#[derive(Debug, Args)]
#[command(after_long_help = "Examples:\n  \
taskdaemon run \"make the failing tests pass\" --agent claude --validate \"cargo test\"\n  \
taskdaemon run -f task.md --agent 'cmd:./my-agent.sh' --max-iterations 5\n  \
taskdaemon run --resume                 # continue the last run here\n\n\
Every option can also be set in .taskdaemon/config.yaml or as TASKDAEMON_<NAME> (e.g. TASKDAEMON_MAX_ITERATIONS).")]
pub struct RunArgs {
    /// The task for the agent.
    #[arg(value_name = "PROMPT")]
    pub prompt: Option<String>,
    /// Read the task from FILE (`-` for stdin).
    #[arg(short = 'f', long, value_name = "FILE", conflicts_with = "prompt")]
    pub prompt_file: Option<PathBuf>,
    #[command(flatten)]
    pub flags: RunFlags,
    /// A variable of a cascade loop run by hand (`--loop plan|spec|phase`), repeatable:
    /// `--var spec-file=specs/auth.md --var phase-number=2` (else TASKDAEMON_SPEC_FILE, …).
    #[arg(long = "var", value_name = "NAME=VALUE")]
    pub vars: Vec<String>,
    /// Continue the last run in this directory at its next iteration, with its saved settings
    /// (options given now override them).
    #[arg(long, help_heading = "Run")]
    pub resume: bool,
    /// One JSON event per line on stdout.
    #[arg(long, help_heading = "Output")]
    pub json: bool,
}

impl RunArgs {
    fn task(&self) -> anyhow::Result<Option<String>> {
        if let Some(p) = &self.prompt {
            return Ok(Some(p.clone()));
        }
        let Some(file) = &self.prompt_file else {
            return Ok(None);
        };
        if file.as_os_str() == "-" {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .context("reading the task from stdin")?;
            return Ok(Some(s));
        }
        std::fs::read_to_string(file)
            .map(Some)
            .map_err(|e| user(format!("cannot read prompt file {}: {e}", file.display())))
    }
}

pub fn run(args: RunArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let (dir, ws) = ctx.workspace()?;
    if let Some(code) = refuse_if_waiting_for_a_human(&ws, false)? {
        return Ok(code);
    }
    // What is wrong with the command line is said before any wait for a lock.
    let given = args.prompt.is_some() || args.prompt_file.is_some();
    if args.resume && given {
        return Err(user(
            "--resume continues the saved task; drop PROMPT / --prompt-file, or start a new run without --resume",
        ));
    }
    if !args.resume && !given {
        return Err(user(
            "no task given\n  hint: `taskdaemon run \"what to do\"`, `taskdaemon run -f task.md`, or `taskdaemon run --resume`",
        ));
    }
    let _no_rollback = hold_for_loop(&dir)?; // first: finishes an interrupted rollback
    let _lock = ws.lock().map_err(user)?;
    let flags = args.flags.settings();

    // The task file is read once an interrupted rollback has put the work tree back.
    let (state, begin) = match args.task()? {
        None => (
            resume_state(&ws, &flags)?,
            Begin::Resumed { temps_removed: 0 },
        ),
        Some(task) => {
            let settings = settings(&dir, &flags, ctx.config.as_deref())?;
            let mut cfg = resolve(&dir, task, &settings)?;
            cascade_context(&dir, &mut cfg, &args.vars)?;
            new_state(&dir, &ws, cfg)?
        }
    };
    let task = state.task;
    let (outcome, summary) = drive(&ws, state, begin, args.json)?;
    if let Some(number) = task {
        finish_task(&dir, &ws, number, &outcome, &summary, args.json)?;
    }
    Ok(summary.exit_code)
}

fn resume_state(ws: &Workspace, flags: &Settings) -> anyhow::Result<RunState> {
    let mut st = RunState::load(ws).map_err(user)?.ok_or_else(|| {
        user(format!(
            "no run to resume in {}\n  hint: start one with `taskdaemon run \"task\"`",
            ws.root().display()
        ))
    })?;
    if let Some(o) = &st.outcome {
        if !o.resumable() {
            return Err(user(format!(
                "the last run here ended {} ({}); there is nothing to resume\n  hint: start a new run with `taskdaemon run \"task\"`",
                o.label(),
                o.detail()
            )));
        }
        if matches!(o, Outcome::Stuck { .. }) {
            st.stuck_count = 0;
        }
    }
    st.config.apply(flags, true).map_err(user)?;
    if let Some(why) = st.spent_limit() {
        return Err(user(why));
    }
    Ok(st)
}

/// A cascade loop outside the daemon: its variables from `--var`, the environment and the
/// files, or a refusal naming what is missing.
fn cascade_context(dir: &Path, cfg: &mut RunConfig, vars: &[String]) -> anyhow::Result<()> {
    let mut given = std::collections::BTreeMap::new();
    for v in vars {
        let (k, val) = v.split_once('=').ok_or_else(|| {
            user(format!(
                "--var {v}: expected NAME=VALUE\n  hint: `--var spec-file=specs/auth.md`"
            ))
        })?;
        given.insert(k.trim().to_string(), val.to_string());
    }
    let lookup = |k: &str| {
        given
            .get(k)
            .cloned()
            .or_else(|| {
                std::env::var(format!(
                    "TASKDAEMON_{}",
                    k.to_ascii_uppercase().replace('-', "_")
                ))
                .ok()
            })
            .filter(|v| !v.trim().is_empty())
    };
    let ctx = standalone_context(&cfg.loop_name, dir, &cfg.task, &lookup).map_err(user)?;
    if let Some(ctx) = ctx {
        cfg.context = ctx;
    } else if !given.is_empty() {
        return Err(user(format!(
            "--var is for the cascade's loops (plan, spec, phase), not `{}`",
            cfg.loop_name
        )));
    }
    Ok(())
}
