//! `taskdaemon __api-agent api:PROVIDER:MODEL [--system TEXT]` (hidden): a direct API
//! agent as a process, for the places that run an agent as a command (`implement`,
//! `stories`, the task parser's `parse-agent`). The prompt comes on stdin; the model's own
//! words go to stdout (plain text, where promises are read); the exchange goes to stderr;
//! a failure ends with one line naming its class in the words the failure model knows.

use std::io::Read;
use std::time::Duration;

use clap::Args;
use taskdaemon_core::agent::api::{Iteration, run_iteration};
use taskdaemon_core::agent::{Activity, AgentSpec, FailureClass, classify};
use taskdaemon_core::config;
use tokio_util::sync::CancellationToken;

use super::Ctx;
use crate::cli::user;

#[derive(Debug, Args)]
pub struct ApiAgentArgs {
    /// `api:anthropic:MODEL` or `api:openai:MODEL`.
    pub spec: String,
    /// The loop's system prompt (the request's system field).
    #[arg(long, value_name = "TEXT")]
    pub system: Option<String>,
}

pub fn run(args: ApiAgentArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let AgentSpec::Api { provider, model } = AgentSpec::parse(&args.spec).map_err(user)? else {
        return Err(user(format!(
            "`{}` is not an API agent\n  hint: api:anthropic:MODEL or api:openai:MODEL",
            args.spec
        )));
    };
    let dir = std::env::current_dir()?;
    // The harness that started this process has said what an untrusted config lacks.
    let api = config::load_layers(&dir, ctx.config.as_deref())
        .map_err(user)?
        .settings
        .api
        .unwrap_or_default();
    let mut prompt = String::new();
    std::io::stdin().read_to_string(&mut prompt)?;
    let harness = std::env::current_exe()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let cancel = CancellationToken::new();
        let on_term = cancel.clone();
        tokio::spawn(async move {
            use tokio::signal::unix::{SignalKind, signal};
            if let Ok(mut term) = signal(SignalKind::terminate()) {
                term.recv().await;
                on_term.cancel();
            }
        });
        let it = Iteration {
            provider,
            model: &model,
            settings: &api,
            system: args.system.as_deref(),
            prompt: &prompt,
            workdir: &dir,
            env: Vec::new(),
            harness: &harness,
            timeout: None,
            grace: Duration::from_secs(2),
        };
        let (result, parsed) = run_iteration(
            it,
            &cancel,
            |line| eprintln!("{line}"),
            |a| {
                if let Activity::Text { text } = a {
                    println!("{text}");
                }
            },
        )
        .await;
        let code = result.status.code();
        let verdict = classify(
            code,
            result.timed_out,
            &parsed.evidence,
            &jiff::Zoned::now(),
        );
        if verdict.class != FailureClass::Ok {
            let tag = match verdict.class {
                FailureClass::Auth => "authentication_failed",
                FailureClass::RateLimited => "rate limit",
                FailureClass::Unreachable => "unable to connect to api",
                _ => "server_error",
            };
            eprintln!(
                "api error: {} ({tag})",
                verdict.line.as_deref().unwrap_or("no answer")
            );
        }
        Ok(code)
    })
}
