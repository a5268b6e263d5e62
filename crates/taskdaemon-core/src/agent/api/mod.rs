//! Direct model API agents (`api:anthropic:MODEL`, `api:openai:MODEL`): the harness talks
//! to the model itself, with its own tools confined to the work tree, and one request
//! scheduler per process. An iteration is one bounded conversation
//! ([`conversation`]); the engine gets the same things a CLI agent's run gives it (an exit
//! status, the agent's words, tool calls, usage and failure evidence).

pub mod anthropic;
pub mod conversation;
pub mod http;
pub mod openai;
pub mod scheduler;
pub mod settings;
pub mod tools;

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use settings::{ApiSettings, Price, ProviderSettings};

use crate::agent::{Activity, ParsedOutput, ProcessResult};
use crate::sandbox::SandboxPlan;

/// A model API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    Anthropic,
    #[serde(rename = "openai")]
    OpenAi,
}

impl Provider {
    pub const ALL: [Provider; 2] = [Provider::Anthropic, Provider::OpenAi];

    pub fn name(self) -> &'static str {
        match self {
            Provider::Anthropic => "anthropic",
            Provider::OpenAi => "openai",
        }
    }

    pub fn from_name(s: &str) -> Option<Provider> {
        Provider::ALL.into_iter().find(|p| p.name() == s)
    }
}

/// Tokens of one request (or summed over an iteration). `input` excludes cached tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

impl Usage {
    pub fn add(&mut self, o: &Usage) {
        self.input += o.input;
        self.output += o.output;
        self.cache_read += o.cache_read;
        self.cache_write += o.cache_write;
    }

    /// Every input token, cached or not.
    pub fn all_input(&self) -> u64 {
        self.input + self.cache_read + self.cache_write
    }
}

/// A tool call of the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub input: Value,
}

/// A tool's result, for the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    pub id: String,
    pub content: String,
    pub is_error: bool,
}

/// The conversation, provider-neutral.
#[derive(Debug, Clone, PartialEq)]
pub enum Msg {
    User(String),
    Assistant { text: String, calls: Vec<ToolCall> },
    Results(Vec<ToolResult>),
}

/// Why the model stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    EndTurn,
    ToolUse,
    MaxTokens,
}

/// One model turn.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub text: String,
    pub calls: Vec<ToolCall>,
    pub usage: Usage,
    pub stop: Stop,
}

/// One request as the providers build it.
pub struct Request<'a> {
    pub model: &'a str,
    pub system: Option<&'a str>,
    pub history: &'a [Msg],
    pub tools: &'a [(&'static str, &'static str, Value)],
    pub max_tokens: u32,
}

/// The most one reply's text may hold; more is not read (the iteration ends with a note).
pub const MAX_REPLY_TEXT: usize = 4 << 20;
/// The most one reply's tool-call arguments may hold together.
pub const MAX_REPLY_ARGS: usize = 4 << 20;

/// `add` more bytes of `what` (now `*used`), unless that passes `cap`.
pub(crate) fn grow(
    used: &mut usize,
    add: usize,
    cap: usize,
    what: &str,
) -> Result<(), http::ApiError> {
    *used = used.saturating_add(add);
    if *used > cap {
        return Err(http::ApiError::TooLarge {
            message: format!(
                "the reply's {what} passed {} MiB; the rest of the reply was not read and the reply was dropped",
                cap >> 20
            ),
        });
    }
    Ok(())
}

/// Tool arguments as streamed (JSON text); invalid JSON is kept for the tool to refuse.
pub fn parse_arguments(json: &str) -> Value {
    if json.trim().is_empty() {
        return Value::Object(Default::default());
    }
    serde_json::from_str(json).unwrap_or_else(|_| serde_json::json!({ "_invalid_json": json }))
}

/// What one iteration of an API agent needs.
#[derive(Debug, Clone)]
pub struct Iteration<'a> {
    pub provider: Provider,
    pub model: &'a str,
    pub settings: &'a ApiSettings,
    /// The loop type's `system-prompt`: the request's system field.
    pub system: Option<&'a str>,
    pub prompt: &'a str,
    pub workdir: &'a Path,
    /// The agent's environment (run_command gets it).
    pub env: Vec<(OsString, OsString)>,
    /// The taskdaemon binary (the snapshot tool).
    pub harness: &'a Path,
    pub timeout: Option<Duration>,
    pub grace: Duration,
}

/// Run one iteration: a fresh conversation until the model stops calling tools,
/// `max-turns`, the timeout or a failure. `log` gets the exchange, readably, line by line;
/// `activity` what the agent does, for events.
pub async fn run_iteration(
    it: Iteration<'_>,
    cancel: &CancellationToken,
    log: impl FnMut(&str),
    activity: impl FnMut(Activity),
) -> (ProcessResult, ParsedOutput) {
    conversation::run(it, &SandboxPlan::default(), cancel, log, activity).await
}

/// [`run_iteration`] with `run_command` confined by `sandbox` (the plan a CLI agent of
/// the run would get).
pub async fn run_iteration_sandboxed(
    it: Iteration<'_>,
    sandbox: &SandboxPlan,
    cancel: &CancellationToken,
    log: impl FnMut(&str),
    activity: impl FnMut(Activity),
) -> (ProcessResult, ParsedOutput) {
    conversation::run(it, sandbox, cancel, log, activity).await
}

/// `doctor`'s row for an API agent: the endpoint, whether the key is there (never its
/// value), the limits and the model's price.
pub fn check(provider: Provider, model: &str, s: &ApiSettings) -> super::doctor::AgentCheck {
    let p = s.provider(provider);
    let base = p.base_url(provider);
    let limits = scheduler::Limits::of(&p);
    let key = settings::api_key(provider, &p);
    let price = match s.price(model) {
        Some(pr) => format!(
            "${}/M in, ${}/M out (api.prices overrides)",
            pr.input, pr.output
        ),
        None => format!("no price known: cost not counted (set api.prices.{model})"),
    };
    super::doctor::AgentCheck {
        agent: format!("api:{}:{model}", provider.name()),
        path: Some(std::path::PathBuf::from(&base)),
        version: None,
        logged_in: Some(key.is_ok()),
        login_detail: match &key {
            Ok(Some(_)) => format!("${} is set", p.key_env(provider)),
            Ok(None) => "a server on this machine: no key needed".into(),
            Err(_) => format!("${} is not set", p.key_env(provider)),
        },
        structured_output: "the API's own (streamed), read by the harness",
        usage_reporting: "tokens per request (cache included), cost from the price table",
        hint: Some(format!(
            "limits: {} in flight, {} requests/min, {} tokens/min; max-turns {}; price {price}",
            limits.max_concurrent,
            limits
                .requests_per_minute
                .map_or("no limit".into(), |n| n.to_string()),
            limits
                .tokens_per_minute
                .map_or("no limit".into(), |n| n.to_string()),
            s.max_turns()
        ))
        .filter(|_| key.is_ok())
        .or_else(|| key.err()),
    }
}
