//! Command-line parsing, dispatch, and the mapping of errors to exit codes (usage and
//! configuration errors: 64; internal errors: 70; outcomes: `Outcome::exit_code`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use taskdaemon_core::engine::exit_code;

use crate::commands;

#[derive(Debug, Parser)]
#[command(
    name = "taskdaemon",
    version,
    about = "Run autonomous AI coding loops in git repositories, verified by evidence.",
    long_about = "Run autonomous AI coding loops (\"Ralph Wiggum loops\") in git repositories.\n\n\
Each iteration gives an agent a fresh prompt; the harness then decides from evidence (a validation \
command, git) whether the work is done, blocked, stuck or must go on.\n\n\
Exit codes: 0 complete, 1 limit reached, 2 blocked, 3 decision needed, 4 stuck, 5 failed, \
64 usage or configuration error, 70 internal error, 130 interrupted (resumable).",
    after_help = "Start with `taskdaemon demo` (no API key needed), then `taskdaemon init` in your repository."
)]
pub struct Cli {
    /// Run as if started in DIR.
    #[arg(short = 'C', long = "dir", global = true, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Settings file to use instead of the project's .taskdaemon/config.yaml; it must exist.
    #[arg(long, global = true, value_name = "FILE", env = "TASKDAEMON_CONFIG")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a loop: an agent works on the task, iteration after iteration, until the evidence says done.
    Run(Box<commands::run::RunArgs>),
    /// Start a new task on this project: snapshot task-N-pre, run the loop, snapshot task-N-post.
    Task(Box<commands::task::TaskArgs>),
    /// Run a spec's tasks.md: one task per fresh agent, [P] groups in parallel worktrees, [VERIFY] checkpoints, every completion verified.
    Implement(Box<commands::implement::ImplementArgs>),
    /// Stop a spec's implement loop (a directory; .progress.md kept), or a daemon run, spec or plan (agents ended, worktree and logs kept).
    Cancel(commands::cancel::CancelArgs),
    /// Work through user stories (tasks.json / prd.json) with an implement → review cycle the harness enforces.
    Stories(Box<commands::stories::StoriesArgs>),
    /// Save, list, diff and roll back snapshots of the whole work tree.
    Snapshot(commands::snapshot::SnapshotArgs),
    /// Write .taskdaemon/config.yaml (commented defaults), the .gitignore entries and the record store's git merge driver.
    Init(commands::init::InitArgs),
    /// Check what the loops need without calling a model: agent CLIs (installed, version, logged in), git, the daemon, the settings in force.
    Doctor(commands::doctor::DoctorArgs),
    /// List the loop types and where each was defined.
    Loops(commands::loops::LoopsArgs),
    /// Show why the loop is blocked and clear the block.
    Unblock(commands::unblock::UnblockArgs),
    /// Answer the agent's DECIDE question; the next run puts the answer in its prompt.
    Answer(commands::answer::AnswerArgs),
    /// Move the finished run's .ralph/ files into .ralph/archive/.
    Archive(commands::archive::ArchiveArgs),
    /// Make a scratch repository and run a scripted loop in it (no API key, no network).
    Demo(commands::demo::DemoArgs),
    /// Plans: `plan new TITLE` (a record); `plan validate|show|diff|update` (the .ralph plan file).
    Plan(commands::plan::PlanArgs),
    /// Create specs: `taskdaemon spec new TITLE --parent PLAN`.
    Spec(commands::spec::SpecArgs),
    /// List plans, specs and runs, with status and readiness.
    List(commands::list::ListArgs),
    /// Show one record, found by id, hex, or part of its name.
    Show(commands::show::ShowArgs),
    /// Change a record's status, title, file or deps.
    Edit(commands::edit::EditArgs),
    /// Look after the record store: check, compact, stats.
    Store(commands::store::StoreArgs),
    /// The repository's daemon: start (in the background or --foreground), stop, status.
    Daemon(commands::daemon::DaemonArgs),
    /// Queue work for the daemon: a plan (idea or document), a spec document, or a ralph task.
    Submit(commands::submit::SubmitArgs),
    /// Watch the loops live: a tree of plans, specs and runs, the selected run's log, keys to act.
    Watch(commands::watch::WatchArgs),
    /// The tree plan → specs → runs with status, iteration, time and cost.
    Status(commands::status::StatusArgs),
    /// The iteration logs of a run (or of a spec's or plan's latest run); --follow keeps printing.
    Logs(commands::logs::LogsArgs),
    /// Start a queued or paused run now.
    Start(commands::start::StartArgs),
    /// Pause a run, or every run of a spec or plan; `resume` continues at the next iteration.
    Pause(commands::pause::PauseArgs),
    /// Resume a paused, blocked or stopped run, spec or plan (after a merge conflict: once resolved).
    Resume(commands::resume::ResumeArgs),
    /// Check a plan document or a directory of spec documents (the plan and spec loops' validation).
    CheckDoc(commands::check_doc::CheckDocArgs),
    /// The loops' git worktrees: list them, prune finished ones.
    Worktree(commands::worktree::WorktreeArgs),
    /// Git merge driver for the record store (`%O %A %B %P`), installed by `init`.
    #[command(name = "__merge-store", hide = true)]
    MergeStore(commands::merge_store::MergeStoreArgs),
    /// Store writer for crash and concurrency tests.
    #[command(name = "__store-stress", hide = true)]
    StoreStress(commands::store_stress::StoreStressArgs),
    /// Play a scripted-agent YAML script (used by `--agent script:FILE`).
    #[command(name = "__script-agent", hide = true)]
    ScriptAgent(commands::script_agent::ScriptAgentArgs),
}

/// An error that is the user's to fix (bad input, configuration, state): exit 64.
#[derive(Debug)]
pub struct UserError(pub String);

impl std::fmt::Display for UserError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UserError {}

/// Mark an error as the user's to fix.
pub fn user(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::Error::new(UserError(e.to_string()))
}

pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(match e.kind() {
                clap::error::ErrorKind::DisplayHelp
                | clap::error::ErrorKind::DisplayVersion
                | clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => 0,
                _ => exit_code::USAGE as u8,
            });
        }
    };
    let code = match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            let user_fault = e.chain().any(|c| c.is::<UserError>());
            eprintln!("error: {e:#}");
            if user_fault {
                exit_code::USAGE
            } else {
                exit_code::INTERNAL
            }
        }
    };
    ExitCode::from(u8::try_from(code).unwrap_or(exit_code::INTERNAL as u8))
}

fn dispatch(cli: Cli) -> anyhow::Result<i32> {
    let ctx = commands::Ctx {
        dir: cli.dir,
        config: cli.config,
    };
    match cli.command {
        Command::Run(a) => commands::run::run(*a, &ctx),
        Command::Task(a) => commands::task::run(*a, &ctx),
        Command::Implement(a) => commands::implement::run(*a, &ctx),
        Command::Cancel(a) => commands::cancel::run(a, &ctx),
        Command::Stories(a) => commands::stories::run(*a, &ctx),
        Command::Snapshot(a) => commands::snapshot::run(a, &ctx),
        Command::Init(a) => commands::init::run(a, &ctx),
        Command::Doctor(a) => commands::doctor::run(a, &ctx),
        Command::Loops(a) => commands::loops::run(a, &ctx),
        Command::Unblock(a) => commands::unblock::run(a, &ctx),
        Command::Answer(a) => commands::answer::run(a, &ctx),
        Command::Archive(a) => commands::archive::run(a, &ctx),
        Command::Demo(a) => commands::demo::run(a, &ctx),
        Command::Plan(a) => commands::plan::run(a, &ctx),
        Command::Spec(a) => commands::spec::run(a, &ctx),
        Command::List(a) => commands::list::run(a, &ctx),
        Command::Show(a) => commands::show::run(a, &ctx),
        Command::Edit(a) => commands::edit::run(a, &ctx),
        Command::Store(a) => commands::store::run(a, &ctx),
        Command::Daemon(a) => commands::daemon::run(a, &ctx),
        Command::Submit(a) => commands::submit::run(a, &ctx),
        Command::Status(a) => commands::status::run(a, &ctx),
        Command::Watch(a) => commands::watch::run(a, &ctx),
        Command::Logs(a) => commands::logs::run(a, &ctx),
        Command::Start(a) => commands::start::run(a, &ctx),
        Command::Pause(a) => commands::pause::run(a, &ctx),
        Command::Resume(a) => commands::resume::run(a, &ctx),
        Command::CheckDoc(a) => commands::check_doc::run(a, &ctx),
        Command::Worktree(a) => commands::worktree::run(a, &ctx),
        Command::MergeStore(a) => commands::merge_store::run(a),
        Command::StoreStress(a) => commands::store_stress::run(a, &ctx),
        Command::ScriptAgent(a) => commands::script_agent::run(a),
    }
}
