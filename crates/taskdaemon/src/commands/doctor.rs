//! `taskdaemon doctor [--agent A] [--json]`: what the loops need, checked without calling a
//! model: each agent CLI (installed, version, logged in, structured output, usage
//! reporting), git (version, identity, the store's merge driver), the daemon's socket, and
//! the settings in force with where each came from. Exit 1 when something needed is missing.

use std::path::Path;

use clap::Args;
use serde_json::{Value, json};
use taskdaemon_core::agent::doctor::{AgentCheck, capture, check_preset, check_spec};
use taskdaemon_core::agent::{AgentSpec, Preset, first_installed};
use taskdaemon_core::config::{self, Settings};
use taskdaemon_core::sandbox;

use super::{Ctx, emit, print_json};
use crate::cli::user;
use crate::outln;

/// `doctor`'s exit code when a check fails (the sysexits "configuration error").
pub const PROBLEMS_FOUND: i32 = 78;

#[derive(Debug, Args)]
#[command(
    after_long_help = "Examples:\n  taskdaemon doctor\n  taskdaemon doctor --agent codex --json\n\nExit codes: 0 every check passed, 78 a check failed (each problem is listed)."
)]
pub struct DoctorArgs {
    /// Check only this agent (claude, codex, …, cmd:COMMAND, script:FILE) [default: every CLI].
    #[arg(long, value_name = "SPEC")]
    pub agent: Option<String>,
    /// Print the checks as one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: DoctorArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let dir = ctx.workdir()?;
    let (settings, untrusted) = settings_json(&dir, ctx.config.as_deref())?;
    let merged = config::load_layers(&dir, ctx.config.as_deref())
        .map_err(user)?
        .settings;
    // The agent a loop would run: --agent, else TASKDAEMON_AGENT (as `run` and the daemon
    // read it), else the config's.
    let from_env = std::env::var("TASKDAEMON_AGENT")
        .ok()
        .filter(|v| !v.trim().is_empty());
    let wanted = a.agent.clone().or(from_env).or(merged.agent.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let api = merged.api.clone().unwrap_or_default();
    let (agents, needed) = rt.block_on(agents(&a, wanted.as_deref(), &dir, &api))?;
    let git = rt.block_on(git(&dir));
    let daemon = daemon(&dir);
    let mut problems: Vec<String> = Vec::new();
    match agents.iter().find(|c| Some(&c.agent) == needed.as_ref()) {
        Some(c) if !c.usable() => problems.push(format!(
            "the agent that would run, {}, is {}",
            c.agent,
            if c.path.is_none() {
                "not installed"
            } else {
                "not logged in"
            }
        )),
        None => problems.push("no agent is installed".into()),
        _ => {}
    }
    if git["version"].is_null() {
        problems.push("git is not installed".into());
    } else if git["user.name"].is_null() || git["user.email"].is_null() {
        problems.push("git has no identity (user.name, user.email): commits fail".into());
    }
    let sandbox = sandbox(&merged, &mut problems);
    let queue = taskdaemon_core::store::pg_schema::status(&dir);
    if let Some(p) = queue.as_ref().and_then(|q| q.problem.clone()) {
        problems.push(p);
    }
    // Its own code: 1 is a run's "a limit came first".
    let code = if problems.is_empty() {
        0
    } else {
        PROBLEMS_FOUND
    };
    if a.json {
        print_json(&json!({
            "agents": agents, "agent_in_use": needed, "git": git, "daemon": daemon,
            "settings": settings, "sandbox": sandbox, "problems": problems, "exit_code": code,
            "queue": queue,
            "api_prices": api.price_table().into_iter().map(|(model, p)| json!({
                "model": model, "input": p.input, "output": p.output,
                "cache_read": p.cache_read, "cache_write": p.cache_write,
            })).collect::<Vec<_>>(),
            "untrusted": untrusted.as_ref().map(|u| json!({
                "file": u.path, "ignored": u.ignored,
                "trust": format!("taskdaemon trust {}", u.path.display()),
            })),
        }))?;
        return Ok(code);
    }
    let mut out = String::new();
    for c in &agents {
        render_agent(&mut out, c, needed.as_deref() == Some(c.agent.as_str()));
    }
    if merged.api.is_some() || needed.as_deref().is_some_and(|a| a.starts_with("api:")) {
        outln!(
            out,
            "api prices (USD per million tokens: in / out / cache read / cache write):"
        );
        for (model, p) in api.price_table() {
            outln!(
                out,
                "  {model}: {} / {} / {} / {}",
                p.input,
                p.output,
                p.cache_read.unwrap_or(p.input / 10.0),
                p.cache_write.unwrap_or(p.input * 1.25)
            );
        }
    }
    outln!(
        out,
        "git: {}",
        git["version"].as_str().unwrap_or("not installed")
    );
    for k in ["user.name", "user.email", "merge.taskstore.driver"] {
        outln!(out, "  {k}: {}", git[k].as_str().unwrap_or("(not set)"));
    }
    outln!(
        out,
        "daemon: {}",
        daemon["state"].as_str().unwrap_or_default()
    );
    match &queue {
        None => outln!(out, "queue: none (records in .taskdaemon/store/)"),
        Some(q) => outln!(
            out,
            "queue: {} (project {}): {}",
            q.url,
            q.project,
            match (q.reachable, q.schema) {
                (true, Some(v)) if v == q.expected => format!("reachable, schema version {v}"),
                (true, Some(0)) => "reachable, no schema yet (created at first use)".into(),
                (true, Some(v)) => format!(
                    "reachable, schema version {v} (this taskdaemon: {})",
                    q.expected
                ),
                (true, None) => "reachable, but not usable (the problem below)".into(),
                _ => "unreachable".into(),
            }
        ),
    }
    outln!(
        out,
        "sandbox: {} (docs/sandbox.md)",
        sandbox["in-force"].as_str().unwrap_or("none")
    );
    for (k, v) in sandbox["available"].as_object().into_iter().flatten() {
        outln!(out, "  {k}: {}", v.as_str().unwrap_or_default());
    }
    outln!(out, "settings in force:");
    if settings.as_array().is_none_or(|m| m.is_empty()) {
        outln!(
            out,
            "  none set: every setting is its built-in default (`taskdaemon init` writes them, commented)"
        );
    }
    for v in settings.as_array().into_iter().flatten() {
        outln!(
            out,
            "  {}: {} (from {})",
            v["key"].as_str().unwrap_or_default(),
            v["value"],
            v["from"].as_str().unwrap_or_default()
        );
    }
    if let Some(u) = &untrusted {
        outln!(out, "  {u}");
    }
    for p in &problems {
        outln!(out, "problem: {p}");
    }
    if problems.is_empty() {
        outln!(out, "everything needed is there");
    }
    emit(&out)?;
    Ok(code)
}

/// The sandbox in force (config `sandbox:`, default none) and which kinds work here; one
/// in force that cannot start is a problem.
fn sandbox(merged: &Settings, problems: &mut Vec<String>) -> Value {
    let kinds = [merged.sandbox, merged.sandbox_validate];
    let mut available = serde_json::Map::new();
    for (kind, found) in sandbox::describe() {
        let text = match &found {
            Ok(None) => "available".to_string(),
            Ok(Some(warning)) => format!("available; warning: {warning}"),
            Err(e) => format!("unavailable: {}", e.lines().next().unwrap_or_default()),
        };
        if let (Err(e), true) = (&found, kinds.contains(&Some(kind))) {
            problems.push(format!("the sandbox in force is unavailable: {e}"));
        }
        available.insert(kind.name().into(), text.into());
    }
    let in_force = merged.sandbox.unwrap_or_default().name().to_string();
    json!({ "in-force": in_force, "available": available })
}

/// The agents to check, and the one a run would use.
async fn agents(
    a: &DoctorArgs,
    wanted: Option<&str>,
    dir: &Path,
    api: &taskdaemon_core::agent::api::ApiSettings,
) -> anyhow::Result<(Vec<AgentCheck>, Option<String>)> {
    let spec = wanted.map(AgentSpec::parse).transpose().map_err(user)?;
    let mut checks = Vec::new();
    if a.agent.is_none() {
        for p in Preset::ALL {
            checks.push(check_preset(p, dir).await);
        }
    }
    match &spec {
        Some(AgentSpec::Preset { preset }) if a.agent.is_none() => {
            return Ok((checks, Some(preset.name().to_string())));
        }
        Some(AgentSpec::Api { provider, model }) => {
            checks.push(taskdaemon_core::agent::api::check(*provider, model, api))
        }
        Some(s) => checks.push(check_spec(&s.clone().absolutize(dir), dir).await),
        None => {}
    }
    let in_use = match &spec {
        Some(s) => checks.last().map(|c| c.agent.clone()).or(Some(s.label())),
        None => first_installed().map(|p| p.name().to_string()),
    };
    Ok((checks, in_use))
}

fn render_agent(out: &mut String, c: &AgentCheck, in_use: bool) {
    outln!(
        out,
        "{}{}: {}",
        c.agent,
        if in_use { " (in use)" } else { "" },
        match (&c.path, &c.version) {
            (Some(p), Some(v)) => format!("{v} at {}", p.display()),
            (Some(p), None) => format!("at {}", p.display()),
            (None, _) => "not installed".into(),
        }
    );
    if c.path.is_some() {
        let login = match c.logged_in {
            Some(true) => "logged in",
            Some(false) => "NOT logged in",
            None => "login not checked",
        };
        outln!(out, "  {login}: {}", c.login_detail);
        outln!(out, "  structured output: {}", c.structured_output);
        outln!(out, "  usage reporting: {}", c.usage_reporting);
    }
    if let Some(h) = &c.hint {
        outln!(out, "  hint: {h}");
    }
}

async fn git(dir: &Path) -> Value {
    let Some(git) = taskdaemon_core::agent::find_on_path("git") else {
        return json!({"version": null});
    };
    let get = |args: &'static [&'static str]| {
        let git = git.clone();
        async move {
            capture(&git, args, dir)
                .await
                .filter(|(c, _)| *c == 0)
                .map(|(_, o)| o.trim().to_string())
                .filter(|o| !o.is_empty())
        }
    };
    json!({
        "version": get(&["--version"]).await,
        "user.name": get(&["config", "user.name"]).await,
        "user.email": get(&["config", "user.email"]).await,
        "merge.taskstore.driver": get(&["config", "merge.taskstore.driver"]).await,
    })
}

fn daemon(dir: &Path) -> Value {
    match taskdaemon_core::daemon::DaemonPaths::for_repo(dir) {
        Ok(p) if p.is_running() => {
            json!({"state": format!("running (socket {})", p.socket().display())})
        }
        Ok(p) => {
            json!({"state": format!("not running (socket would be {})", p.socket().display())})
        }
        Err(_) => json!({"state": "not a git repository: no daemon"}),
    }
}

/// Every key set by some layer (not a default): its value and where it came from, as
/// `config show` finds them; and what an untrusted repository config had that was left
/// out.
fn settings_json(
    dir: &Path,
    explicit: Option<&Path>,
) -> anyhow::Result<(Value, Option<config::Untrusted>)> {
    let report = config::settings_in_force(dir, explicit).map_err(user)?;
    let rows = Value::Array(
        report
            .rows
            .iter()
            .filter(|r| r.from != config::Origin::Default)
            .map(|r| json!({"key": r.key, "value": r.json_value(), "from": r.from.to_string()}))
            .collect(),
    );
    Ok((rows, report.untrusted))
}
