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
64 usage or configuration error, 70 internal error, 78 `doctor` found a problem, 130 interrupted (resumable).",
    after_help = "Start with `taskdaemon demo` (no API key needed), then `taskdaemon init` in your repository."
)]
pub struct Cli {
    /// Run as if started in DIR.
    #[arg(short = 'C', long = "dir", global = true, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Settings file to use instead of the project's .taskdaemon/config.yaml; it must exist.
    #[arg(long, global = true, value_name = "FILE", env = "TASKDAEMON_CONFIG")]
    pub config: Option<PathBuf>,
    /// Say less: only warnings, errors and what the command was asked to print.
    #[arg(short = 'q', long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// Say more: every cause of an error on its own line.
    #[arg(short = 'v', long, global = true)]
    pub verbose: bool,
    /// Colour: auto (a terminal, no NO_COLOR, not TERM=dumb), always or never.
    #[arg(long, global = true, value_name = "WHEN", default_value = "auto", value_parser = ["auto", "always", "never"])]
    pub color: String,
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
    /// Pause a run when its iteration ends (`--force`: now), or every run of a spec or plan; `resume` goes on.
    Pause(commands::pause::PauseArgs),
    /// Resume a paused, blocked or stopped run, spec or plan (after a merge conflict: once resolved).
    Resume(commands::resume::ResumeArgs),
    /// Check a plan document or a directory of spec documents (the plan and spec loops' validation).
    CheckDoc(commands::check_doc::CheckDocArgs),
    /// The loops' git worktrees: list them, prune finished ones.
    Worktree(commands::worktree::WorktreeArgs),
    /// Write one self-contained HTML report (timeline, plots, gates, logs) of a run, all runs, or a daemon plan.
    Report(commands::report::ReportArgs),
    /// Print a shell completion script: bash, zsh, fish, elvish or powershell.
    Completions(commands::completions::CompletionsArgs),
    /// Print the man page, taskdaemon(1), in roff (`taskdaemon man | man -l -`).
    Man(commands::completions::ManArgs),
    /// The settings in force: `config show [--json]`, each with where it came from.
    Config(commands::config::ConfigArgs),
    /// Trust this repository's .taskdaemon/config.yaml as it is now, so that its commands, destinations and sandbox keys apply; --list shows what you trust.
    Trust(commands::trust::TrustArgs),
    /// Stop trusting a repository's .taskdaemon/config.yaml: its commands, destinations and sandbox keys are ignored again.
    Untrust(commands::trust::UntrustArgs),
    /// Delete a plan, spec or run record (refused while others name it; saved first).
    Delete(commands::delete::DeleteArgs),
    /// Git merge driver for the record store (`%O %A %B %P`), installed by `init`.
    #[command(name = "__merge-store", hide = true)]
    MergeStore(commands::merge_store::MergeStoreArgs),
    /// Store writer for crash and concurrency tests.
    #[command(name = "__store-stress", hide = true)]
    StoreStress(commands::store_stress::StoreStressArgs),
    /// Play a scripted-agent YAML script (used by `--agent script:FILE`).
    #[command(name = "__script-agent", hide = true)]
    ScriptAgent(commands::script_agent::ScriptAgentArgs),
    /// Run a direct API agent as a process (used by `implement`, `stories`, the task parser).
    #[command(name = "__api-agent", hide = true)]
    ApiAgent(commands::api_agent::ApiAgentArgs),
    /// The watchdog of a harness that runs agents: ends their trees when its input ends.
    #[command(name = "__watchdog", hide = true)]
    Watchdog,
    /// Panic on purpose, to check that a build's backtraces still name file and line.
    #[command(name = "__panic", hide = true)]
    Panic,
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

/// Whether the command line asked for JSON (then errors are JSON too).
fn json_wanted() -> bool {
    std::env::args_os().skip(1).any(|a| a == "--json")
}

/// An error and its causes: on one line (`a: b: c`), or with `verbose` a cause per line.
/// A cause whose text a message before it already holds (an error that says its source
/// and also gives it as its source) is not said again.
fn error_text(e: &anyhow::Error, verbose: bool) -> String {
    let mut out = e.to_string();
    for cause in e.chain().skip(1).map(|c| c.to_string()) {
        if out.contains(&cause) {
            continue;
        }
        out.push_str(if verbose { "\n  caused by: " } else { ": " });
        out.push_str(&cause);
    }
    out
}

/// Print an error for people (`error:` in red when colour is on) or, with `--json`, as
/// `{"schema":1,"error":…,"hint":…,"exit":N}` on stdout.
fn report_error(message: &str, code: i32) {
    let (what, hint) = match message.split_once("\n  hint: ") {
        Some((w, h)) => (w.trim_end(), Some(h.trim())),
        None => (message.trim_end(), None),
    };
    if json_wanted() {
        let v = serde_json::json!({"schema": taskdaemon_core::json::SCHEMA, "error": what, "hint": hint, "exit": code});
        println!("{v}");
        return;
    }
    let label = crate::out::paint("error:", crate::out::error_style(), true);
    let what = what.strip_prefix("error: ").unwrap_or(what);
    match hint {
        Some(h) => eprintln!("{label} {what}\n  hint: {h}"),
        None => eprintln!("{label} {what}"),
    }
}

/// A bad value that came from a `TASKDAEMON_*` variable, not from the command line, is
/// reported as the variable (clap names the flag it feeds).
fn env_value_error(e: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    let arg = match e.get(ContextKind::InvalidArg)? {
        ContextValue::String(s) => s.clone(),
        _ => return None,
    };
    let value = match e.get(ContextKind::InvalidValue)? {
        ContextValue::String(s) => s.clone(),
        _ => return None,
    };
    let long = arg
        .strip_prefix("--")?
        .split([' ', '='])
        .next()?
        .to_string();
    let on_line = std::env::args()
        .skip(1)
        .any(|a| a == format!("--{long}") || a.starts_with(&format!("--{long}=")));
    let var = taskdaemon_core::config::env_var_of(&long);
    (!on_line && std::env::var(&var).ok().as_deref() == Some(value.as_str())).then(|| {
        format!(
            "environment variable {var}={value:?} is not a valid {long}\n  hint: fix or unset it (`unset {var}`); `taskdaemon {} --help` describes --{long}",
            std::env::args().nth(1).unwrap_or_default()
        )
    })
}

fn parse_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = e.print();
        return ExitCode::from(0);
    }
    if let Some(m) = env_value_error(&e) {
        report_error(&m, exit_code::USAGE);
    } else if json_wanted() {
        let text = e
            .kind()
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| e.to_string());
        let full = e.to_string();
        let first = full.lines().next().unwrap_or(&text).to_string();
        report_error(&first, exit_code::USAGE);
    } else {
        let _ = e.print();
    }
    ExitCode::from(exit_code::USAGE as u8)
}

pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => return parse_error(e),
    };
    crate::out::set_level(if cli.quiet { -1 } else { i8::from(cli.verbose) });
    crate::out::set_colour(&cli.color);
    if let Ok(exe) = std::env::current_exe() {
        // Started (by `become_subreaper`) only by the commands that run agents.
        taskdaemon_core::agent::watchdog::set_program(exe, vec!["__watchdog".into()]);
    }
    let code = match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            let user_fault = e.chain().any(|c| c.is::<UserError>());
            let code = if user_fault {
                exit_code::USAGE
            } else {
                exit_code::INTERNAL
            };
            report_error(&error_text(&e, crate::out::level() > 0), code);
            code
        }
    };
    if crate::commands::util::forcing_stop() {
        // A second signal is forcing the stop: its thread ends the process (exit 130) as
        // soon as the agents are killed; this wait only bounds a thread that never does.
        std::thread::sleep(std::time::Duration::from_secs(30));
    }
    ExitCode::from(u8::try_from(code).unwrap_or(exit_code::INTERNAL as u8))
}

/// `--config FILE` (or TASKDAEMON_CONFIG) must name a file: a typo is an error, never a
/// silent fall back to no settings.
fn check_config(config: Option<&std::path::Path>) -> anyhow::Result<()> {
    match config {
        Some(p) if p.is_dir() => Err(user(format!(
            "config file {} is a directory (given with --config or TASKDAEMON_CONFIG)\n  hint: name the settings file itself, e.g. {}",
            p.display(),
            p.join("config.yaml").display()
        ))),
        Some(p) if !p.is_file() => Err(user(format!(
            "config file {} does not exist (given with --config or TASKDAEMON_CONFIG)\n  hint: check the path, or leave --config out to use .taskdaemon/config.yaml (`taskdaemon init` writes one)",
            p.display()
        ))),
        _ => Ok(()),
    }
}

fn dispatch(cli: Cli) -> anyhow::Result<i32> {
    check_config(cli.config.as_deref())?;
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
        Command::Report(a) => commands::report::run(a, &ctx),
        Command::Completions(a) => commands::completions::completions(a),
        Command::Man(a) => commands::completions::man(a),
        Command::Config(a) => commands::config::run(a, &ctx),
        Command::Trust(a) => commands::trust::run(a, &ctx),
        Command::Untrust(a) => commands::trust::run_untrust(a, &ctx),
        Command::Delete(a) => commands::delete::run(a, &ctx),
        Command::MergeStore(a) => commands::merge_store::run(a),
        Command::StoreStress(a) => commands::store_stress::run(a, &ctx),
        Command::ScriptAgent(a) => commands::script_agent::run(a),
        Command::ApiAgent(a) => commands::api_agent::run(a, &ctx),
        Command::Watchdog => {
            taskdaemon_core::agent::watchdog::serve(std::io::stdin().lock());
            Ok(0)
        }
        Command::Panic => panic!("`taskdaemon __panic`: a panic on purpose, to check backtraces"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_error_says_each_cause_once() {
        /// Says its source and gives it as its source, as a `thiserror` field named
        /// `source` does.
        #[derive(Debug)]
        struct Outer {
            source: std::io::Error,
        }
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "moving logs: {}", self.source)
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.source)
            }
        }
        let io = || std::io::Error::other("refusing to use x\n  hint: remove the link");
        let e = anyhow::Error::new(Outer { source: io() });
        assert_eq!(
            super::error_text(&e, false),
            "moving logs: refusing to use x\n  hint: remove the link"
        );
        let e = anyhow::Error::new(io()).context("reading the plan");
        assert_eq!(
            super::error_text(&e, false),
            "reading the plan: refusing to use x\n  hint: remove the link"
        );
        assert_eq!(
            super::error_text(&e, true),
            "reading the plan\n  caused by: refusing to use x\n  hint: remove the link"
        );
    }

    use clap::CommandFactory;

    /// Every command and subcommand, with its path (`taskdaemon plan diff`).
    fn walk(cmd: &clap::Command, path: String, out: &mut Vec<(String, clap::Command)>) {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            let p = format!("{path} {}", sub.get_name());
            out.push((p.clone(), sub.clone()));
            walk(sub, p, out);
        }
    }

    #[test]
    fn every_argument_of_every_command_has_help_and_one_default() {
        let mut root = super::Cli::command();
        root.build();
        let mut all = vec![("taskdaemon".to_string(), root.clone())];
        walk(&root, "taskdaemon".into(), &mut all);
        let mut missing = Vec::new();
        for (path, cmd) in &all {
            if cmd.get_about().is_none() {
                missing.push(format!("{path}: no about"));
            }
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version") {
                    continue;
                }
                let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
                if help.trim().is_empty() {
                    missing.push(format!("{path}: `{id}` has no help"));
                }
                let declared = help.matches("[default:").count();
                if declared > 0 && !arg.get_default_values().is_empty() {
                    missing.push(format!("{path}: `{id}` says its default twice"));
                }
            }
        }
        assert!(missing.is_empty(), "{}", missing.join("\n"));
    }

    #[test]
    fn a_short_flag_means_one_thing_everywhere() {
        let mut root = super::Cli::command();
        root.build();
        let mut all = vec![("taskdaemon".to_string(), root.clone())];
        walk(&root, "taskdaemon".into(), &mut all);
        let mut meaning: std::collections::BTreeMap<char, (String, String)> = Default::default();
        let mut clash = Vec::new();
        for (path, cmd) in &all {
            for arg in cmd.get_arguments() {
                let (Some(s), Some(long)) = (arg.get_short(), arg.get_long()) else {
                    continue;
                };
                // -f is "the text from FILE": the run's prompt, the task's message; and
                // `logs -f` follows, as `tail -f` does.
                if s == 'f' && long == "follow" && path.ends_with(" logs") {
                    continue;
                }
                let same = |a: &str, b: &str| {
                    a == b
                        || ["prompt-file", "message-file"].contains(&a)
                            && ["prompt-file", "message-file"].contains(&b)
                };
                match meaning.get(&s) {
                    Some((l, p)) if !same(l, long) => {
                        clash.push(format!("-{s}: --{l} in `{p}`, --{long} in `{path}`"))
                    }
                    Some(_) => {}
                    None => {
                        meaning.insert(s, (long.to_string(), path.clone()));
                    }
                }
            }
        }
        assert!(clash.is_empty(), "{}", clash.join("\n"));
    }
}
