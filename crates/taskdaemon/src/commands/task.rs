//! `taskdaemon task "MESSAGE"`: a new task on an existing project (spec 1 §3, §5). Parse
//! the message into the structured `task.md` (or ask, exit 3, when its scope is ambiguous),
//! snapshot `task-N-pre`, reset the task files, run the loop, snapshot `task-N-post` on
//! verified completion. `taskdaemon task parse` shows the parse without running.

mod parse;

use std::path::PathBuf;

use clap::{Args, Subcommand};
use taskdaemon_core::clock;
use taskdaemon_core::engine::exit_code;
use taskdaemon_core::git::Git;
use taskdaemon_core::git::snapshot::Snapshots;
use taskdaemon_core::lifecycle;
use taskdaemon_core::lifecycle::parser::TaskKind;
use taskdaemon_core::workspace::IGNORED;

pub use parse::{ParseArgs, ParserFlags};

use super::util::{
    RunFlags, drive, finish_task, hold_for_loop, indent, new_state, refuse_if_waiting_for_a_human,
    resolve,
};
use super::{Ctx, print_json};
use crate::cli::user;

#[derive(Debug, Args)]
#[command(
    args_conflicts_with_subcommands = true,
    after_help = "Examples:\n  \
taskdaemon task \"add a mul command\" --agent claude --validate \"cargo test\"\n  \
taskdaemon task -f request.md --agent 'script:agent.yaml'\n  \
taskdaemon task parse \"refine the copy and add 2 more drinks\"   # look at the parse only\n\n\
The message is parsed into a structured .ralph/task.md: its type (fresh, mutation, bugfix), a \
checklist of requirements marked [ADD] [MODIFY] [FIX] [REMOVE] (\"2 more drinks\" is ADD 2 and keeps \
the existing ones), what to PRESERVE, and the AFFECTED FILES. By default (--task-parser auto) \
built-in rules parse it, instantly and at no cost. With a parse agent set (--parse-agent, e.g. a \
small fast model as cmd:COMMAND) or --task-parser model (the parse agent, else the run's agent), that \
agent is asked once for JSON within --parse-timeout (default 2s; an agent CLI such as claude needs \
more, e.g. 30s); its answer is checked, and on any failure or timeout the rules parse instead. A \
parse never stops a task, except when the scope is ambiguous (add new things or change existing \
ones? change what?): then nothing starts and nothing changes; the question goes to \
.ralph/decide.txt and the exit code is 3. Answer it with `taskdaemon answer \"...\"`, then run \
`taskdaemon task` again: without a message it takes the one from decide.txt, parses it with the \
answer, and starts.\n\n\
Before the loop starts, the whole project is saved as task-N-pre (not for the first task of an \
empty project); .ralph/summary.md and feedback.md are cleared, the previous task gets a line in \
.ralph/task-history.md and .ralph/task.md holds the new task. When the loop completes with its \
evidence verified the result is saved as task-N-post. Otherwise `taskdaemon snapshot rollback \
task-N-pre` undoes the task.\n\n\
A one-word task named `parse` is written `taskdaemon task -- parse`."
)]
pub struct TaskArgs {
    #[command(subcommand)]
    pub command: Option<TaskCommand>,
    /// The new task, in your words.
    #[arg(value_name = "MESSAGE")]
    pub message: Option<String>,
    /// Read the message from FILE (`-` for stdin).
    #[arg(short = 'f', long, value_name = "FILE", conflicts_with = "message")]
    pub message_file: Option<PathBuf>,
    #[command(flatten)]
    pub flags: RunFlags,
    #[command(flatten)]
    pub parser: ParserFlags,
    /// One JSON event per line on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// Show how MESSAGE would be parsed into .ralph/task.md, without running or changing anything.
    Parse(Box<ParseArgs>),
}

pub fn run(args: TaskArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    if let Some(TaskCommand::Parse(p)) = args.command {
        return parse::run(*p, ctx);
    }
    let (dir, ws) = ctx.workspace()?;
    if let Some(code) = refuse_if_waiting_for_a_human(&ws, true)? {
        return Ok(code);
    }
    // An answered question of the task parser: its task starts now, with the answer.
    let pending = ws
        .read_decide()
        .map_err(user)?
        .filter(|d| d.task_message.is_some());
    let message = match parse::read_message(&args.message, &args.message_file)? {
        Some(m) => m,
        None => pending
            .as_ref()
            .and_then(|d| d.task_message.clone())
            .ok_or_else(|| {
                user("no task given\n  hint: `taskdaemon task \"what to do next\"` or `taskdaemon task -f request.md`")
            })?,
    };
    if message.trim().is_empty() {
        return Err(user(
            "the task message is empty\n  hint: `taskdaemon task \"what to do next\"`",
        ));
    }
    let clarification = parse::clarification_for(pending.as_ref(), &message);
    let _no_rollback = hold_for_loop(&dir)?; // first: finishes an interrupted rollback
    let _lock = ws.lock().map_err(user)?;
    // Logs, the question file and runtime files are never committed, asked or not.
    Git::new(&dir).ensure_excluded(IGNORED).map_err(user)?;
    if pending.is_some() && clarification.is_none() {
        // The answer was about another message: keep it on record, out of the way.
        if let Some(p) = ws
            .archive_decide(&clock::now().as_second().to_string())
            .map_err(user)?
        {
            eprintln!(
                "taskdaemon: the answered parser question was about another message; moved it to {}",
                p.display()
            );
        }
    }
    // Settings are checked before anything changes on disk.
    let flags = args.flags.settings().merge(args.parser.settings());
    let settings = super::util::settings(&dir, &flags, ctx.config.as_deref())?;
    let mut cfg = resolve(&dir, message.clone(), &settings)?;

    let (report, interrupted) =
        parse::parse_message(&dir, &ws, &message, clarification.clone(), &settings)?;
    if interrupted {
        eprintln!("taskdaemon: interrupted while parsing the task; nothing was changed");
        return Ok(exit_code::INTERRUPTED);
    }
    if report.task.kind == TaskKind::NeedsClarification {
        let question = report
            .task
            .question
            .clone()
            .unwrap_or_else(|| "What exactly should this task change?".into());
        ws.write_parser_decide(&question, &message, &clock::now_rfc3339())
            .map_err(user)?;
        if args.json {
            print_json(&serde_json::json!({
                "event": "task_needs_clarification",
                "question": question,
                "decide_file": ws.decide_file(),
                "parse": report,
                "next": "taskdaemon answer \"...\", then taskdaemon task",
            }))?;
        } else {
            eprintln!(
                "taskdaemon: {}\ntaskdaemon: the task is not clear enough to start; nothing was changed. The question ({}):\n{}\n  hint: `taskdaemon answer \"your decision\"`, then `taskdaemon task` (no message needed: it takes this one and the answer)",
                parse::parser_note(&report),
                ws.decide_file().display(),
                indent(&question)
            );
        }
        return Ok(exit_code::DECIDE);
    }

    let snaps = Snapshots::open(&dir).map_err(user)?;
    let start = lifecycle::begin_task(&snaps, &ws, &message, &report.task, clarification.as_ref())
        .map_err(user)?;
    if clarification.is_some() {
        // Answered and used: kept in .ralph/decisions/ and out of the loop's prompt.
        ws.archive_decide(&clock::now().as_second().to_string())
            .map_err(user)?;
    }
    if args.json {
        print_json(&serde_json::json!({
            "event": "task_started",
            "task": start.number,
            "pre_snapshot": start.pre.as_ref().map(|s| &s.tag),
            "history": start.history_line,
            "parse": report,
        }))?;
    } else {
        match &start.pre {
            Some(s) => eprintln!(
                "taskdaemon: task {}: saved the project as {} (undo the task with `taskdaemon snapshot rollback {}`)",
                start.number, s.tag, s.tag
            ),
            None => eprintln!(
                "taskdaemon: task {}: empty project, no pre-task snapshot",
                start.number
            ),
        }
        eprintln!(
            "taskdaemon: task {}: {} (.ralph/task.md)",
            start.number,
            parse::parser_note(&report)
        );
        for l in parse::summary_lines(&report) {
            eprintln!("taskdaemon: {l}");
        }
    }
    cfg.task = start.task_text.clone();
    let mut state = new_state(&dir, &ws, cfg)?;
    state.task = Some(start.number);
    let (outcome, summary) = drive(&ws, state, false, args.json)?;
    finish_task(&dir, &ws, start.number, &outcome, &summary, args.json)?;
    Ok(summary.exit_code)
}
