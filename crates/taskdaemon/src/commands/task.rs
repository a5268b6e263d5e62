//! `taskdaemon task "MESSAGE"`: a new task on an existing project (spec 1 §3, §5). Parse
//! the message into the structured `task.md` (or ask, exit 3, when its scope is ambiguous),
//! snapshot `task-N-pre`, reset the task files, run the loop, snapshot `task-N-post` on
//! verified completion. `taskdaemon task parse` shows the parse without running.

mod parse;

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::{Args, Subcommand};
use taskdaemon_core::engine::{EngineContext, RunState, exit_code};
use taskdaemon_core::git::snapshot::{WaitTold, waiting_text};
use taskdaemon_core::lifecycle::TaskStart;
use taskdaemon_core::lifecycle::parser::ParseReport;
use taskdaemon_core::lifecycle::task_flow::{
    TaskEvent, TaskFlowEnd, TaskHost, TaskRequest, run_task,
};

pub use parse::{ParseArgs, ParserFlags};

use super::Ctx;
use super::util::{
    RunFlags, flow_err, hold_for_loop, indent, refuse_if_waiting_for_a_human, render_leftovers,
    render_replaced, render_task_end, with_signals,
};
use crate::cli::user;

#[derive(Debug, Args)]
#[command(
    args_conflicts_with_subcommands = true,
    after_long_help = "Examples:\n  \
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
    let message = parse::read_message(&args.message, &args.message_file)?;
    let _no_rollback = hold_for_loop(&dir)?; // first: finishes an interrupted rollback
    let _lock = ws.lock().map_err(user)?;
    // Settings are checked before anything changes on disk.
    let flags = args.flags.settings().merge(args.parser.settings());
    let req = TaskRequest {
        dir: dir.clone(),
        message,
        settings: super::util::settings(&dir, &flags, ctx.config.as_deref())?,
        script_runner: std::env::current_exe().context("finding the taskdaemon executable")?,
    };
    let json = args.json;
    let end = with_signals(|cancel| async move {
        let mut host = Host {
            json,
            dir: &req.dir,
            exe: &req.script_runner,
            renderings: Vec::new(),
        };
        let end = run_task(&req, &ws, &mut host, &cancel).await;
        for r in host.renderings {
            r.finish().await;
        }
        end.map_err(flow_err)
    })?;
    render_end(end, json)
}

/// The CLI as the task's host: its events rendered, the loop's renderer and notifications.
struct Host<'a> {
    json: bool,
    dir: &'a Path,
    exe: &'a Path,
    renderings: Vec<super::util::Rendering>,
}

impl TaskHost for Host<'_> {
    fn event(&mut self, event: TaskEvent<'_>) {
        match event {
            TaskEvent::OtherAnswerArchived { path } => eprintln!(
                "taskdaemon: the answered parser question was about another message; moved it to {}",
                path.display()
            ),
            TaskEvent::Started { start, report } => render_start(start, report, self.json),
            TaskEvent::RunReplaced { replaced } => render_replaced(replaced),
            TaskEvent::LeftoversEnded { left } => render_leftovers(left, self.dir),
        }
    }

    fn start_wait_told(&self) -> Option<WaitTold> {
        Some(std::sync::Arc::new(|lock, pid| {
            let _ = writeln!(
                std::io::stderr(),
                "taskdaemon: before the task begins: {}",
                waiting_text(lock, pid)
            );
        }))
    }

    fn engine(&mut self, state: &RunState) -> EngineContext {
        let (events, rendering) = super::util::render_loop_events(state, self.json);
        self.renderings.push(rendering);
        EngineContext {
            script_runner: self.exe.to_path_buf(),
            events,
            pause: tokio_util::sync::CancellationToken::new(),
        }
    }
}

fn render_start(start: &TaskStart, report: &ParseReport, json: bool) {
    if json {
        let _ = super::print_event(&serde_json::json!({
            "event": "task_started",
            "task": start.number,
            "pre_snapshot": start.pre.as_ref().map(|s| &s.tag),
            "history": start.history_line,
            "parse": report,
        }));
        return;
    }
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
        parse::parser_note(report)
    );
    for l in parse::summary_lines(report) {
        eprintln!("taskdaemon: {l}");
    }
}

/// The task's end: its exit code, with the question or the end rendered.
fn render_end(end: TaskFlowEnd, json: bool) -> anyhow::Result<i32> {
    match end {
        TaskFlowEnd::InterruptedWhileParsing => {
            eprintln!("taskdaemon: interrupted while parsing the task; nothing was changed");
            Ok(exit_code::INTERRUPTED)
        }
        TaskFlowEnd::InterruptedBeforeStart { lock } => {
            eprintln!(
                "taskdaemon: interrupted before the task began, while its start snapshot waited for {} (held by another taskdaemon's snapshot save or rollback); nothing was changed",
                lock.display()
            );
            Ok(exit_code::INTERRUPTED)
        }
        TaskFlowEnd::NeedsClarification(c) => {
            if json {
                super::print_event(&serde_json::json!({
                    "event": "task_needs_clarification",
                    "question": c.question,
                    "decide_file": c.decide_file,
                    "parse": c.report,
                    "next": "taskdaemon answer \"...\", then taskdaemon task",
                }))?;
            } else {
                eprintln!(
                    "taskdaemon: {}\ntaskdaemon: the task is not clear enough to start; nothing was changed. The question ({}):\n{}\n  hint: `taskdaemon answer \"your decision\"`, then `taskdaemon task` (no message needed: it takes this one and the answer)",
                    parse::parser_note(&c.report),
                    c.decide_file.display(),
                    indent(&c.question)
                );
            }
            Ok(exit_code::DECIDE)
        }
        TaskFlowEnd::Finished(f) => {
            render_task_end(&f.end, &f.outcome, json)?;
            Ok(f.summary.exit_code)
        }
    }
}
