//! `taskdaemon daemon start [--foreground] | stop | status`: the repository's long-running
//! scheduler. In the background it writes what it does to its log
//! (`<git-dir>/taskdaemon/daemon/daemon.log`).

use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::{Args, Subcommand};
use taskdaemon_core::config;
use taskdaemon_core::daemon::{self, DaemonPaths, Options, ipc::Request};
use taskdaemon_core::sandbox::{self, SandboxKind, SandboxPlan};
use taskdaemon_core::scheduler::Limits;

use super::daemon_link::{self, current_branch};
use super::{Ctx, emit, print_json, say};
use crate::cli::user;
use crate::outln;

#[derive(Debug, Args)]
#[command(after_long_help = "Examples:\n  \
taskdaemon daemon start                 # in the background; returns once it answers\n  \
taskdaemon daemon start --foreground    # in this terminal (Ctrl-C stops it)\n  \
taskdaemon daemon status --json\n  \
taskdaemon daemon events --json         # one event per line, until the daemon stops\n  \
taskdaemon daemon stop                  # runs are interrupted and resume on the next start\n\n\
One daemon per repository. It runs what `taskdaemon submit` queues, each run in its own \
worktree, in dependency order, and merges finished work into the target branch.")]
pub struct DaemonArgs {
    #[command(subcommand)]
    pub command: DaemonCommand,
}

#[derive(Debug, Subcommand)]
pub enum DaemonCommand {
    /// Start the daemon (in the background unless --foreground).
    Start(StartArgs),
    /// Stop it: running loops are interrupted (their agents ended) and resume on the next start.
    /// Exits 1 when no daemon runs.
    Stop {
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Whether it runs, its pid, socket, log and active runs. Exits 1 when none runs.
    Status {
        /// Print the daemon's state as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Print the daemon's events as they happen (a snapshot first), until it stops.
    Events {
        /// One JSON event per line, as the daemon's socket sends it (docs/json.md).
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args, Clone)]
pub struct StartArgs {
    /// Run in this terminal; lines of what it does go to stdout.
    #[arg(long)]
    pub foreground: bool,
    /// How many loops run at once [default: config max-loops, else 4].
    #[arg(long, value_name = "N")]
    pub max_loops: Option<u32>,
    /// Merge target for work that names none [default: config target-branch, else the branch checked out here].
    #[arg(long, value_name = "BRANCH")]
    pub target: Option<String>,
    /// The agent of runs that name none (claude, codex, …, cmd:COMMAND) [default: config agent].
    #[arg(long, value_name = "SPEC", env = "TASKDAEMON_AGENT")]
    pub agent: Option<String>,
    /// The sandbox of runs that name none: none, bwrap, docker, podman (docs/sandbox.md) [default: config sandbox, else none].
    #[arg(long, value_name = "KIND", env = "TASKDAEMON_SANDBOX", value_parser = super::util::sandbox_kind)]
    pub sandbox: Option<SandboxKind>,
    /// Seconds between passes when nothing happens.
    #[arg(long, value_name = "SECONDS", default_value_t = 1.0, hide = true, value_parser = tick_seconds)]
    pub tick: f64,
    /// Print the result as JSON (in the background).
    #[arg(long)]
    pub json: bool,
}

impl StartArgs {
    /// The arguments of the foreground daemon a background start runs: every setting of
    /// these (the fields taken apart by name, so a new flag cannot be left out).
    fn foreground_args(&self) -> Vec<String> {
        let StartArgs {
            foreground: _,
            max_loops,
            target,
            agent,
            sandbox,
            tick,
            json: _,
        } = self;
        let mut v = vec!["--foreground".into(), "--tick".into(), tick.to_string()];
        let mut flag = |name: &str, value: Option<String>| {
            if let Some(value) = value {
                v.extend([name.to_string(), value]);
            }
        };
        flag("--max-loops", max_loops.map(|n| n.to_string()));
        flag("--target", target.clone());
        flag("--agent", agent.clone());
        flag("--sandbox", sandbox.map(|k| k.name().to_string()));
        v
    }
}

/// `--tick`: a number of seconds, more than 0 (NaN and infinities are no time).
fn tick_seconds(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(t) if t.is_finite() && t > 0.0 => Ok(t),
        _ => Err(format!(
            "`{s}` is not a number of seconds above 0 (e.g. 0.2 or 1)"
        )),
    }
}

/// The exit status of `daemon status|stop` when no daemon runs.
const NOT_RUNNING: i32 = 1;

pub fn run(args: DaemonArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let paths = daemon_link::paths(ctx)?;
    match args.command {
        DaemonCommand::Start(a) if a.foreground => foreground(&paths, a, ctx),
        DaemonCommand::Start(a) => background(&paths, a, ctx),
        DaemonCommand::Stop { json } => stop(&paths, json),
        DaemonCommand::Status { json } => status(&paths, json),
        DaemonCommand::Events { json } => events(&paths, json),
    }
}

/// The daemon's options from the flags and the config files; and what an untrusted
/// project config had that was left out (said by `daemon start`, and by the daemon itself
/// in its log).
fn options(
    paths: &DaemonPaths,
    a: &StartArgs,
    ctx: &Ctx,
) -> anyhow::Result<(Options, Option<config::Untrusted>)> {
    let layers = config::load_layers(&paths.project, ctx.config.as_deref()).map_err(user)?;
    let s = layers.settings;
    let max_loops = a.max_loops.or(s.max_loops).unwrap_or(4);
    if max_loops == 0 {
        return Err(user("max-loops must be at least 1"));
    }
    let per_agent = s
        .agent_limits
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v as usize))
        .collect();
    let default_target = match a.target.clone().or(s.target_branch.clone()) {
        Some(t) => t,
        None => current_branch(&paths.project)?,
    };
    config::check_branch_name(&default_target).map_err(user)?;
    if let Some(kind) = a.sandbox.or(s.sandbox) {
        // Refused here, before the daemon starts, rather than in every run.
        let plan = SandboxPlan {
            kind,
            validate: s.sandbox_validate.unwrap_or(kind),
            network: s.sandbox_network.unwrap_or_default(),
            ..SandboxPlan::default()
        };
        sandbox::check_available(&plan).map_err(user)?;
    }
    let opts = Options {
        script_runner: std::env::current_exe().context("finding the taskdaemon executable")?,
        worktrees_dir: s
            .worktrees_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(taskdaemon_core::git::worktree::DEFAULT_BASE)),
        default_target,
        limits: Limits {
            max_loops: max_loops as usize,
            per_agent,
        },
        default_agent: a.agent.clone(),
        default_sandbox: a.sandbox,
        config: ctx.config.clone(),
        default_agent_kind: a
            .agent
            .as_deref()
            .or(s.agent.as_deref())
            .map(daemon::agent_kind)
            .unwrap_or_else(|| "auto".into()),
        tick: Duration::from_secs_f64(a.tick.clamp(0.05, 60.0)),
        grace: s.kill_grace.map(|d| d.0).unwrap_or(Duration::from_secs(5)),
        queue: queue_options(&s)?,
    };
    Ok((opts, layers.untrusted))
}

/// The shared queue's settings (used only when `queue:` is set): the remote, the lease,
/// the project's limit across machines.
fn queue_options(s: &config::Settings) -> anyhow::Result<daemon::QueueOptions> {
    let mut q = daemon::QueueOptions::default();
    if let Some(r) = std::env::var("TASKDAEMON_QUEUE_REMOTE")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .or(s.queue_remote.clone())
    {
        q.remote = r;
    }
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let lease = match var("TASKDAEMON_QUEUE_LEASE") {
        Some(v) => Some(taskdaemon_core::duration::parse_duration(&v).map_err(|e| {
            user(format!(
                "TASKDAEMON_QUEUE_LEASE: {e}\n  hint: a duration such as 30s or 2m"
            ))
        })?),
        None => s.queue_lease.map(|d| d.0),
    };
    if let Some(l) = lease {
        if l < Duration::from_secs(1) {
            return Err(user(
                "queue-lease must be at least 1s\n  hint: a lease is renewed three times per period; 10s–60s suits most networks",
            ));
        }
        q.lease = l;
    }
    let max = match var("TASKDAEMON_QUEUE_MAX_LOOPS") {
        Some(v) => Some(v.trim().parse::<u32>().map_err(|_| {
            user(format!(
                "TASKDAEMON_QUEUE_MAX_LOOPS: `{v}` is not a number\n  hint: a whole number of loops, e.g. 8"
            ))
        })?),
        None => s.queue_max_loops,
    };
    if let Some(m) = max {
        if m == 0 {
            return Err(user("queue-max-loops must be at least 1"));
        }
        q.max_loops = Some(m as usize);
    }
    Ok(q)
}

/// The runtime of a foreground daemon: a worker per loop (each run's engine), and one for
/// the dispatcher and the socket.
fn runtime(max_loops: usize) -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads((max_loops + 1).clamp(2, 16))
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// SIGINT, SIGTERM or SIGHUP stop the daemon (runs resume on the next start); a second one
/// forces the stop: the agents' process groups are killed at once and the daemon exits.
fn spawn_signals(
    paths: &DaemonPaths,
    shutdown: tokio_util::sync::CancellationToken,
) -> anyhow::Result<()> {
    let groups = paths.groups();
    super::util::on_signals(
        move || {
            shutdown.cancel();
            let _ = writeln!(
                std::io::stderr(),
                "stopping: runs are interrupted and resume on the next start (again to force)"
            );
        },
        move || {
            let _ = writeln!(
                std::io::stderr(),
                "forcing the stop: the agents are killed now"
            );
            let left = taskdaemon_core::daemon::force_stop(&groups);
            let _ = writeln!(std::io::stderr(), "{left}");
        },
    )
}

fn foreground(paths: &DaemonPaths, a: StartArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let (opts, _said_by_the_daemon) = options(paths, &a, ctx)?;
    super::util::guard_agents();
    let rt = runtime(opts.limits.max_loops)?;
    rt.block_on(async move {
        let shutdown = tokio_util::sync::CancellationToken::new();
        spawn_signals(paths, shutdown.clone())?;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<daemon::DaemonEvent>();
        let printer = tokio::spawn(async move {
            while let Some(event) = rx.recv().await {
                let line = event.to_string();
                // Real time in milliseconds: the log is how a person (or a benchmark) times
                // the runs.
                let t = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.3fZ");
                let _ = emit(&format!("{t} {line}\n"));
            }
        });
        let result = daemon::run(paths.clone(), opts, tx, shutdown).await;
        let _ = printer.await;
        result.map_err(|e| match e {
            daemon::DaemonError::AlreadyRunning { .. } => user(e),
            e => anyhow::Error::new(e),
        })
    })?;
    Ok(0)
}

/// Whether a daemon runs here: its lock is held and it answers, or the lock stays held
/// (a daemon still starting). A lock that a killed daemon's last processes hold for a
/// moment is waited out (5 s at most), so a start right after a kill is not told "already
/// runs" by a daemon that is gone.
fn daemon_runs(paths: &DaemonPaths) -> bool {
    let until = Instant::now() + Duration::from_secs(5);
    while paths.is_running() {
        if matches!(daemon_link::call(paths, &Request::Ping), Ok(Some(r)) if r.ok) {
            return true;
        }
        if Instant::now() >= until {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

fn background(paths: &DaemonPaths, a: StartArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    if daemon_runs(paths) {
        let pid = paths
            .read_info()
            .map(|i| i.pid.to_string())
            .unwrap_or_default();
        if a.json {
            print_json(
                &serde_json::json!({"started": false, "running": true, "pid": pid, "log": paths.log()}),
            )?;
        } else {
            say(&format!("the daemon already runs (pid {pid})\n"))?;
        }
        return Ok(0);
    }
    // Check the settings here, where the person can see the error.
    let (_, untrusted) = options(paths, &a, ctx)?;
    super::util::warn_untrusted(untrusted.as_ref());
    if let Some(ag) = &a.agent {
        let spec = taskdaemon_core::agent::AgentSpec::parse(ag).map_err(user)?;
        spec.check_installed().map_err(user)?;
    }
    std::fs::create_dir_all(&paths.dir)
        .with_context(|| format!("creating {}", paths.dir.display()))?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(paths.log())
        .with_context(|| format!("opening {}", paths.log().display()))?;
    let exe = std::env::current_exe().context("finding the taskdaemon executable")?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("-C").arg(&paths.project);
    if let Some(c) = &ctx.config {
        cmd.arg("--config").arg(c);
    }
    cmd.args(["daemon", "start"]).args(a.foreground_args());
    cmd.stdin(std::process::Stdio::null())
        .stdout(log.try_clone().context("duplicating the log handle")?)
        .stderr(log);
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: setsid is async-signal-safe; a new session leaves this terminal behind.
        unsafe {
            cmd.pre_exec(|| {
                nix::unistd::setsid()
                    .map(|_| ())
                    .map_err(std::io::Error::from)
            });
        }
    }
    let mut child = cmd.spawn().context("starting the daemon process")?;
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(Some(r)) = daemon_link::call(paths, &Request::Ping)
            && r.ok
        {
            let pid = paths.read_info().map(|i| i.pid).unwrap_or(child.id());
            if a.json {
                print_json(
                    &serde_json::json!({"started": true, "running": true, "pid": pid, "log": paths.log()}),
                )?;
            } else {
                say(&format!(
                    "daemon started (pid {pid}); log: {}\n",
                    paths.log().display()
                ))?;
            }
            return Ok(0);
        }
        if let Ok(Some(status)) = child.try_wait() {
            let tail = std::fs::read_to_string(paths.log()).unwrap_or_default();
            let tail: Vec<&str> = tail.lines().rev().take(5).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            return Err(user(format!(
                "the daemon exited at start ({status}); the end of its log ({}):\n{}",
                paths.log().display(),
                tail.join("\n")
            )));
        }
        if Instant::now() > until {
            return Err(anyhow::anyhow!(
                "the daemon (pid {}) did not answer within 15 s; see {}",
                child.id(),
                paths.log().display()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn stop(paths: &DaemonPaths, json: bool) -> anyhow::Result<i32> {
    let pid = paths.read_info().map(|i| i.pid);
    let Some(r) = daemon_link::call(paths, &Request::Stop)? else {
        if json {
            print_json(&serde_json::json!({"running": false, "stopped": false}))?;
        } else {
            eprintln!(
                "no daemon runs for {}\n  hint: `taskdaemon daemon start` starts one",
                paths.project.display()
            );
        }
        return Ok(NOT_RUNNING);
    };
    let until = Instant::now() + Duration::from_secs(120);
    while paths.is_running() {
        if Instant::now() > until {
            return Err(anyhow::anyhow!(
                "the daemon is still stopping after 120 s; see {}",
                paths.log().display()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // The lock goes with the last of its work; the process itself follows at once.
    if let Some(pid) = pid {
        wait_gone(pid);
    }
    if json {
        print_json(&serde_json::json!({
            "running": false, "stopped": true, "pid": pid, "message": r.message,
        }))?;
    } else {
        say(&format!("{}\ndaemon stopped\n", r.message))?;
    }
    Ok(0)
}

/// Wait (up to 10 s) until process `pid` is gone or a zombie.
fn wait_gone(pid: u32) {
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until && std::path::Path::new(&format!("/proc/{pid}")).exists() {
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        });
        if zombie {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `daemon events`: every event of the daemon's stream, a line each (the socket's own
/// JSON line with `--json`; else its time and what happened), until the daemon stops.
fn events(paths: &DaemonPaths, json: bool) -> anyhow::Result<i32> {
    if !paths.is_running() {
        return Err(user(format!(
            "no daemon runs for {}, so there are no events to show\n  hint: `taskdaemon daemon start` starts it",
            paths.project.display()
        )));
    }
    let socket = paths
        .read_info()
        .map(|i| i.socket)
        .unwrap_or_else(|| paths.socket());
    let mut sub = daemon::ipc::subscribe(&socket)?;
    while let Some(next) = sub.next_line() {
        let (line, event) = next?;
        if json {
            emit(&format!("{line}\n"))?;
        } else {
            let at: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
            emit(&format!(
                "{}  {event}\n",
                at["at"].as_str().unwrap_or_default()
            ))?;
        }
        if crate::out::stdout_closed() {
            break;
        }
    }
    Ok(0)
}

fn status(paths: &DaemonPaths, json: bool) -> anyhow::Result<i32> {
    let reply = daemon_link::call(paths, &Request::Status)?;
    let code = if reply.is_some() { 0 } else { NOT_RUNNING };
    if json {
        let v = match &reply {
            Some(r) => serde_json::json!({
                "running": true,
                "log": paths.log(),
                "socket": paths.read_info().map(|i| i.socket),
                "daemon": r.data,
            }),
            None => serde_json::json!({"running": false, "log": paths.log()}),
        };
        print_json(&v)?;
        return Ok(code);
    }
    let mut out = String::new();
    match reply {
        None => {
            eprintln!(
                "no daemon runs for {}\n  hint: start it with `taskdaemon daemon start`",
                paths.project.display()
            );
            return Ok(code);
        }
        Some(r) => {
            let d = &r.data;
            outln!(
                out,
                "daemon pid {} since {} for {}",
                d["pid"],
                d["started-at"].as_str().unwrap_or("?"),
                paths.project.display()
            );
            outln!(out, "  log:    {}", paths.log().display());
            if let Some(i) = paths.read_info() {
                outln!(out, "  socket: {}", i.socket.display());
            }
            outln!(out, "  {} (max {})", r.message, d["max-loops"]);
            if let Some(a) = d["active"].as_array() {
                for id in a {
                    outln!(out, "    {}", id.as_str().unwrap_or("?"));
                }
            }
        }
    }
    emit(&out)?;
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Start {
        #[command(flatten)]
        a: StartArgs,
    }

    fn parse(args: &[String]) -> StartArgs {
        let argv = std::iter::once("start".to_string()).chain(args.iter().cloned());
        Start::try_parse_from(argv).map(|s| s.a).expect("parses")
    }

    #[test]
    fn the_foreground_daemon_gets_every_setting_of_a_background_start() {
        let given: Vec<String> = [
            "--max-loops",
            "3",
            "--target",
            "dev",
            "--agent",
            "cmd:agent.sh --fast",
            "--sandbox",
            "bwrap",
            "--tick",
            "0.25",
            "--json",
        ]
        .map(String::from)
        .to_vec();
        let a = parse(&given);
        let child = parse(&a.foreground_args());
        let expected = StartArgs {
            foreground: true,
            json: false,
            ..a
        };
        assert_eq!(format!("{child:?}"), format!("{expected:?}"));
        // Nothing set: only what every foreground daemon gets.
        let bare = parse(&[]).foreground_args();
        assert_eq!(bare, ["--foreground", "--tick", "1"]);
    }
}
