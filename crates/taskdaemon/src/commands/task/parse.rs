//! `taskdaemon task parse "MESSAGE"`: how the message would become `.ralph/task.md`,
//! without running anything or changing a file; and the parser setup `task` shares.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Args;
use taskdaemon_core::config::{Dur, ParserMode, Settings};
use taskdaemon_core::git::snapshot::Snapshots;
use taskdaemon_core::lifecycle::parser::{
    Clarification, ParseInput, ParseReport, ParsedBy, TaskKind, choose_parser, parse_task,
    project_context, task_md,
};
use taskdaemon_core::lifecycle::task_flow::clarification_for;
use taskdaemon_core::lifecycle::{self, NextTask};
use taskdaemon_core::workspace::Workspace;
use tokio_util::sync::CancellationToken;

use super::super::util::{dur, settings, spawn_signal_handler};
use super::super::{Ctx, print_json};
use crate::cli::user;

/// The task parser's settings, shared by `task` and `task parse`.
#[derive(Debug, Args)]
pub struct ParserFlags {
    /// How the message becomes .ralph/task.md: auto (parse-agent if set, else rules), model, rules [default: auto].
    #[arg(long, value_name = "MODE", env = "TASKDAEMON_TASK_PARSER", value_parser = ParserMode::parse)]
    pub task_parser: Option<ParserMode>,
    /// The agent or model the parser asks once for JSON: claude, codex, …, script:FILE, cmd:COMMAND.
    #[arg(long, value_name = "SPEC", env = "TASKDAEMON_PARSE_AGENT")]
    pub parse_agent: Option<String>,
    /// Time budget of that call; past it the rules parse [default: 2s].
    #[arg(long, value_name = "DUR", env = "TASKDAEMON_PARSE_TIMEOUT", value_parser = dur)]
    pub parse_timeout: Option<Dur>,
}

impl ParserFlags {
    pub fn settings(&self) -> Settings {
        Settings {
            task_parser: self.task_parser,
            parse_agent: self.parse_agent.clone(),
            parse_timeout: self.parse_timeout,
            ..Settings::default()
        }
    }
}

#[derive(Debug, Args)]
#[command(after_long_help = "Examples:\n  \
taskdaemon task parse \"refine the copy, fix the toggle and add 2 more drinks\"\n  \
taskdaemon task parse --json -f request.md\n  \
taskdaemon task parse \"add a mul command\" --task-parser model --parse-agent claude --parse-timeout 30s\n\n\
Prints the .ralph/task.md the message would become (with --json: the parse as one JSON object, \
its task.md included) and on stderr which parser produced it. Nothing runs and no file changes; \
the exit code is 0 whatever the type, needs-clarification included.")]
pub struct ParseArgs {
    /// The message to parse.
    #[arg(value_name = "MESSAGE")]
    pub message: Option<String>,
    /// Read the message from FILE (`-` for stdin).
    #[arg(short = 'f', long, value_name = "FILE", conflicts_with = "message")]
    pub message_file: Option<PathBuf>,
    /// The run's agent, which `--task-parser model` asks when no parse agent is set.
    #[arg(long, value_name = "SPEC", env = "TASKDAEMON_AGENT")]
    pub agent: Option<String>,
    #[command(flatten)]
    pub parser: ParserFlags,
    /// Print the parse as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The message from the argument, a file, or stdin.
pub fn read_message(
    message: &Option<String>,
    file: &Option<PathBuf>,
) -> anyhow::Result<Option<String>> {
    if let Some(m) = message {
        return Ok(Some(m.clone()));
    }
    let Some(file) = file else {
        return Ok(None);
    };
    if file.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("reading the message from stdin")?;
        return Ok(Some(s));
    }
    std::fs::read_to_string(file)
        .map(Some)
        .map_err(|e| user(format!("cannot read message file {}: {e}", file.display())))
}

pub fn run(args: ParseArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let (dir, ws) = ctx.workspace()?;
    let pending = ws.read_decide().map_err(user)?;
    let message = match read_message(&args.message, &args.message_file)? {
        Some(m) => m,
        None => pending
            .as_ref()
            .and_then(|d| d.task_message.clone())
            .ok_or_else(|| {
                user("no message given\n  hint: `taskdaemon task parse \"what to do next\"` or `taskdaemon task parse -f request.md`")
            })?,
    };
    if message.trim().is_empty() {
        return Err(user(
            "the task message is empty\n  hint: `taskdaemon task parse \"what to do next\"`",
        ));
    }
    let flags = Settings {
        agent: args.agent.clone(),
        ..args.parser.settings()
    };
    let settings = settings(&dir, &flags, ctx.config.as_deref())?;
    let clarification = clarification_for(pending.as_ref(), &message);
    let (report, interrupted) =
        parse_message(&dir, &ws, &message, clarification.clone(), &settings)?;
    if interrupted {
        eprintln!("taskdaemon: interrupted");
        return Ok(taskdaemon_core::engine::exit_code::INTERRUPTED);
    }
    // The number the task would get; a preview, so an unreadable counter only shows as 1.
    let next = Snapshots::open(&dir)
        .ok()
        .and_then(|s| lifecycle::next_task(&s, &ws).ok())
        .unwrap_or(NextTask {
            number: 1,
            previous: 0,
            previous_ref: "none".into(),
        });
    let md = task_md(
        next.number,
        &next.previous_ref,
        &message,
        &report.task,
        clarification.as_ref(),
    );
    if args.json {
        let mut v = serde_json::to_value(&report)?;
        if let Some(o) = v.as_object_mut() {
            o.insert("task_md".into(), md.into());
            o.insert("counter".into(), next.number.into());
        }
        print_json(&v)?;
    } else {
        print!("{md}");
        eprintln!("taskdaemon: {}", parser_note(&report));
    }
    Ok(0)
}

/// One line on which parser produced the task and why.
pub fn parser_note(r: &ParseReport) -> String {
    let by = match (&r.by, &r.fallback_reason, &r.rules_because) {
        (ParsedBy::Model { agent }, _, _) => format!("parsed by {agent} in {} ms", r.elapsed_ms),
        (ParsedBy::Rules, Some(why), _) if r.fallback_class.is_some() => {
            format!("{why}; parsed by the rules instead{}", log_note(r))
        }
        (ParsedBy::Rules, Some(why), _) => format!(
            "the parse agent's answer was not used ({why}); parsed by the rules{}",
            log_note(r)
        ),
        (ParsedBy::Rules, None, Some(why)) => format!("parsed by the rules ({why})"),
        (ParsedBy::Rules, None, None) => "parsed by the rules".to_string(),
    };
    format!("{by}: {}", r.task.kind.label())
}

/// Parse `message` with the configured parser, changing no file (the parse agent's log
/// is not kept). Returns whether Ctrl-C interrupted it.
fn parse_message(
    dir: &Path,
    ws: &Workspace,
    message: &str,
    clarification: Option<Clarification>,
    settings: &Settings,
) -> anyhow::Result<(ParseReport, bool)> {
    let exe = std::env::current_exe().context("finding the taskdaemon executable")?;
    let (model, because) = choose_parser(settings, dir, exe, None).map_err(user)?;
    let input = ParseInput {
        message: message.to_string(),
        clarification,
        context: project_context(dir, ws),
    };
    let cancel = CancellationToken::new();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let report = rt.block_on(async {
        if model.is_some() {
            // Ctrl-C stops the parse agent's whole process group, not only us.
            crate::commands::util::guard_agents();
            spawn_signal_handler(cancel.clone())?;
        }
        anyhow::Ok(parse_task(&input, model.as_ref(), because, &cancel).await)
    })?;
    Ok((report, cancel.is_cancelled()))
}

/// Where the parse agent's log is, when it is kept.
fn log_note(r: &ParseReport) -> String {
    r.log
        .as_ref()
        .map(|l| format!(" (its log: {})", l.display()))
        .unwrap_or_default()
}

/// A few lines for people: the type, each requirement, and the budget used.
pub fn summary_lines(r: &ParseReport) -> Vec<String> {
    let mut out = Vec::new();
    for req in &r.task.requirements {
        let count = req.count.map(|n| format!(" {n}")).unwrap_or_default();
        out.push(format!("  [{}{count}] {}", req.marker.label(), req.text));
    }
    if r.task.kind != TaskKind::NeedsClarification && !r.task.affected_files.is_empty() {
        out.push(format!("  files: {}", r.task.affected_files.join(", ")));
    }
    out
}
