//! One iteration as a bounded conversation: a fresh context (the prompt), then turns until
//! the model stops calling tools, `max-turns`, the iteration's timeout, a cancel or a
//! failure. Promises are read from the model's own text only (tool results never reach
//! the words). Failures are retried as the agent-failure model says: 429 after the
//! server's retry-after, 5xx/529/no connection with a bounded backoff; 401/403 and the
//! rest end the iteration with evidence the engine classifies.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::http::ApiError;
use super::scheduler::{self, Limits};
use super::settings::{ProviderSettings, api_key};
use super::tools::{self, ToolContext};
use super::{Iteration, Msg, Provider, Reply, Request, ToolResult, Usage};
use crate::agent::{Activity, Evidence, ExitStatus, ParsedOutput, ProcessResult};
use crate::duration::format_duration;
use crate::sandbox::SandboxPlan;

/// Transient failures of one turn retried before the iteration gives up.
const MAX_RETRIES: u32 = 5;
const FIRST_BACKOFF: Duration = Duration::from_secs(2);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// A tool result's part in the iteration log.
const LOG_RESULT: usize = 4 * 1024;
const RECENT_TOOLS: usize = 8;

/// How the conversation ended.
#[derive(Debug)]
enum End {
    /// The model stopped calling tools.
    Done,
    MaxTurns,
    TimedOut,
    Interrupted,
    /// The conversation outgrew the model's context.
    Overflow(String),
    /// A reply grew past the harness's bounds: not read further, dropped.
    Cut(String),
    Failed(ApiError),
}

/// The iteration's transcript as the engine reads it.
struct Transcript {
    out: ParsedOutput,
    signature: u64,
    usage: Usage,
}

impl Transcript {
    fn say(&mut self, text: &str) {
        if text.trim().is_empty() {
            return;
        }
        if !self.out.words.is_empty() {
            self.out.words.push('\n');
        }
        self.out.words.push_str(text);
        self.out.last_text = Some(text.to_string());
    }

    /// Same fingerprint scheme as the CLI parsers: every call with its full input.
    fn tool(&mut self, name: &str, key: &str, detail: &str) {
        for part in [name.as_bytes(), b"\0", key.as_bytes(), b"\0"] {
            self.signature = crate::fingerprint::fnv1a(self.signature, part);
        }
        self.out.tool_calls += 1;
        let line = if detail.is_empty() {
            name.to_string()
        } else {
            format!("{name}: {detail}")
        };
        if self.out.recent_tools.len() == RECENT_TOOLS {
            self.out.recent_tools.remove(0);
        }
        self.out.recent_tools.push(line.clone());
        self.out.last_tool = Some(line);
    }
}

/// The secrets of a run (the key in use, and the value of every provider's key variable,
/// `api-key-env` included) replaced in anything headed for a log, event, report or the
/// model.
#[derive(Debug, Clone, Default)]
struct Redactor {
    secrets: Vec<String>,
}

impl Redactor {
    fn new(it: &Iteration<'_>, key: Option<&str>) -> Redactor {
        let mut secrets: Vec<String> = key.into_iter().map(str::to_string).collect();
        for p in Provider::ALL {
            let var = it.settings.provider(p).key_env(p);
            secrets.extend(std::env::var(&var).ok());
            let given = it
                .env
                .iter()
                .filter(|(k, _)| k.to_str() == Some(var.as_str()));
            secrets.extend(given.filter_map(|(_, v)| v.to_str().map(str::to_string)));
        }
        secrets.retain(|s| s.len() >= 4);
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Redactor { secrets }
    }

    fn text(&self, text: &str) -> String {
        let mut out = text.to_string();
        for s in &self.secrets {
            if out.contains(s.as_str()) {
                out = out.replace(s.as_str(), "[redacted]");
            }
        }
        out
    }

    /// Every string of a tool call's arguments.
    fn value(&self, v: &mut serde_json::Value) {
        use serde_json::Value;
        match v {
            Value::String(s) => *s = self.text(s),
            Value::Array(a) => a.iter_mut().for_each(|v| self.value(v)),
            Value::Object(o) => o.values_mut().for_each(|v| self.value(v)),
            _ => {}
        }
    }

    fn reply(&self, mut r: Reply) -> Reply {
        r.text = self.text(&r.text);
        for c in &mut r.calls {
            self.value(&mut c.input);
        }
        r
    }

    fn activity(&self, a: Activity) -> Activity {
        match a {
            Activity::Text { text } => Activity::Text {
                text: self.text(&text),
            },
            Activity::ToolCall { name, detail } => Activity::ToolCall {
                name: self.text(&name),
                detail: self.text(&detail),
            },
            Activity::Other { text } => Activity::Other {
                text: self.text(&text),
            },
        }
    }
}

/// What a conversation may hold before it ends (no model's context is this large).
const MAX_CONVERSATION: usize = 32 << 20;

struct Turns<'a> {
    it: &'a Iteration<'a>,
    pset: ProviderSettings,
    base: String,
    key: Option<String>,
    redactor: Redactor,
    sandbox: &'a SandboxPlan,
    client: reqwest::Client,
    deadline: Option<Instant>,
    cancel: &'a CancellationToken,
}

pub(super) async fn run(
    it: Iteration<'_>,
    sandbox: &SandboxPlan,
    cancel: &CancellationToken,
    mut log: impl FnMut(&str),
    mut activity: impl FnMut(Activity),
) -> (ProcessResult, ParsedOutput) {
    let started = Instant::now();
    let mut tr = Transcript {
        out: ParsedOutput::default(),
        signature: crate::fingerprint::FNV_OFFSET,
        usage: Usage::default(),
    };
    let pset = it.settings.provider(it.provider);
    let base = pset.base_url(it.provider);
    let key = api_key(it.provider, &pset);
    let redactor = Redactor::new(&it, key.as_ref().ok().and_then(|k| k.as_deref()));
    let mut log = |l: &str| log(&redactor.text(l));
    let mut activity = |a: Activity| activity(redactor.activity(a));
    let end = match key {
        Err(message) => End::Failed(ApiError::Auth {
            status: 401,
            message,
        }),
        Ok(key) => match reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            .build()
        {
            Err(e) => End::Failed(ApiError::transport(&e)),
            Ok(client) => {
                let turns = Turns {
                    it: &it,
                    pset,
                    base: base.clone(),
                    key,
                    redactor: redactor.clone(),
                    sandbox,
                    client,
                    deadline: it.timeout.map(|t| started + t),
                    cancel,
                };
                log(&format!(
                    "api agent: {} {} at {base}; at most {} turns",
                    it.provider.name(),
                    it.model,
                    it.settings.max_turns()
                ));
                turns.converse(&mut tr, &mut log, &mut activity).await
            }
        },
    };
    finish(&it, tr, end, started, &mut log)
}

/// The conversation's size as held (and sent again every turn).
fn held(m: &Msg) -> usize {
    match m {
        Msg::User(t) => t.len(),
        Msg::Assistant { text, calls } => {
            text.len()
                + calls
                    .iter()
                    .map(|c| c.input.to_string().len())
                    .sum::<usize>()
        }
        Msg::Results(rs) => rs.iter().map(|r| r.content.len()).sum(),
    }
}

impl Turns<'_> {
    async fn converse(
        &self,
        tr: &mut Transcript,
        log: &mut impl FnMut(&str),
        activity: &mut impl FnMut(Activity),
    ) -> End {
        let mut history = vec![Msg::User(self.it.prompt.to_string())];
        let defs = tools::definitions();
        let ctx = ToolContext {
            root: std::fs::canonicalize(self.it.workdir)
                .unwrap_or_else(|_| self.it.workdir.to_path_buf()),
            // The key stays with the harness: the model's commands get it empty.
            env: {
                let mut env = self.it.env.clone();
                env.push((self.pset.key_env(self.it.provider).into(), "".into()));
                env
            },
            harness: self.it.harness.to_path_buf(),
            sandbox: self.sandbox.clone(),
            deadline: self.deadline,
            grace: self.it.grace,
            cancel: self.cancel.clone(),
        };
        for turn in 1..=self.it.settings.max_turns() {
            let req = Request {
                model: self.it.model,
                system: self.it.system,
                history: &history,
                tools: &defs,
                max_tokens: self.pset.max_tokens(),
            };
            let reply = match self.request(turn, &req, log).await {
                Ok(r) => self.redactor.reply(r),
                Err(end) => return end,
            };
            tr.usage.add(&reply.usage);
            self.log_turn(turn, &reply, log);
            tr.say(&reply.text);
            if !reply.text.trim().is_empty() {
                activity(Activity::Text {
                    text: reply.text.clone(),
                });
            }
            if reply.calls.is_empty() {
                if reply.stop == super::Stop::MaxTokens {
                    log("the reply reached max-tokens and was cut short");
                }
                return End::Done;
            }
            let mut results = Vec::new();
            for call in &reply.calls {
                let detail = tools::detail(&call.name, &call.input);
                tr.tool(&call.name, &call.input.to_string(), &detail);
                activity(Activity::ToolCall {
                    name: call.name.clone(),
                    detail: detail.clone(),
                });
                log(&format!(
                    "tool {}",
                    tr.out.last_tool.as_deref().unwrap_or_default()
                ));
                let mut out = tools::run(&ctx, &call.name, &call.input).await;
                out.content = self.redactor.text(&out.content);
                let shown = crate::fsutil::bound_text(&out.content, LOG_RESULT);
                let mark = if out.is_error { "  ✗ " } else { "  → " };
                for (i, l) in shown.lines().enumerate() {
                    log(&format!("{}{l}", if i == 0 { mark } else { "    " }));
                }
                results.push(ToolResult {
                    id: call.id.clone(),
                    content: out.content,
                    is_error: out.is_error,
                });
                if self.cancel.is_cancelled() {
                    return End::Interrupted;
                }
            }
            history.push(Msg::Assistant {
                text: reply.text,
                calls: reply.calls,
            });
            history.push(Msg::Results(results));
            let size: usize = history.iter().map(held).sum();
            if size > MAX_CONVERSATION {
                return End::Overflow(format!(
                    "the conversation holds {} MiB, more than the {} MiB the harness keeps",
                    size >> 20,
                    MAX_CONVERSATION >> 20
                ));
            }
        }
        End::MaxTurns
    }

    fn log_turn(&self, turn: u32, r: &Reply, log: &mut impl FnMut(&str)) {
        let u = &r.usage;
        log(&format!(
            "── turn {turn}: {} in ({} cached, {} written to the cache), {} out",
            u.all_input(),
            u.cache_read,
            u.cache_write,
            u.output
        ));
        for l in r.text.lines() {
            log(&format!("model: {l}"));
        }
    }

    /// One request, with the scheduler and the retries of transient failures.
    async fn request(
        &self,
        turn: u32,
        req: &Request<'_>,
        log: &mut impl FnMut(&str),
    ) -> Result<Reply, End> {
        let lane = format!("{} {}", self.it.provider.name(), self.base);
        let limits = Limits::of(&self.pset);
        let mut attempt = 0;
        loop {
            let r = self.bounded(async {
                let Some(permit) = scheduler::acquire(&lane, limits, self.cancel).await else {
                    return Err(End::Interrupted);
                };
                let r = self.send(req).await;
                if let Ok(reply) = &r {
                    permit.used(reply.usage.all_input() + reply.usage.output);
                }
                Ok(r)
            });
            let e = match r.await? {
                Ok(reply) => return Ok(reply),
                Err(e) => e,
            };
            let e = redacted(e, &self.redactor);
            match e {
                ApiError::ContextOverflow { message } => return Err(End::Overflow(message)),
                ApiError::TooLarge { message } => return Err(End::Cut(message)),
                _ => {}
            }
            if !e.is_transient() || attempt >= MAX_RETRIES {
                return Err(End::Failed(e));
            }
            let wait = match &e {
                ApiError::RateLimited {
                    retry_after: Some(d),
                    ..
                } => *d,
                _ => (FIRST_BACKOFF * 2u32.pow(attempt)).min(MAX_BACKOFF),
            };
            if self.deadline.is_some_and(|d| Instant::now() + wait >= d) {
                return Err(End::Failed(e));
            }
            log(&format!(
                "turn {turn}: {} ({}); retrying the turn in {}",
                e.message(),
                e.class().name(),
                format_duration(wait)
            ));
            attempt += 1;
            self.bounded(async {
                tokio::time::sleep(wait).await;
                Ok(())
            })
            .await?;
        }
    }

    async fn send(&self, req: &Request<'_>) -> Result<Reply, ApiError> {
        let key = self.key.as_deref();
        match self.it.provider {
            Provider::Anthropic => super::anthropic::send(&self.client, &self.base, key, req).await,
            Provider::OpenAi => {
                super::openai::send(&self.client, &self.base, key, req, self.pset.max_tokens).await
            }
        }
    }

    /// `f`, unless the iteration is cancelled or its time runs out first.
    async fn bounded<T>(
        &self,
        f: impl std::future::Future<Output = Result<T, End>>,
    ) -> Result<T, End> {
        let deadline = async {
            match self.deadline {
                Some(d) => tokio::time::sleep_until(d.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = f => r,
            _ = self.cancel.cancelled() => Err(End::Interrupted),
            _ = deadline => Err(End::TimedOut),
        }
    }
}

fn redacted(e: ApiError, red: &Redactor) -> ApiError {
    let r = |m: String| red.text(&m);
    match e {
        ApiError::Auth { status, message } => ApiError::Auth {
            status,
            message: r(message),
        },
        ApiError::RateLimited {
            message,
            retry_after,
        } => ApiError::RateLimited {
            message: r(message),
            retry_after,
        },
        ApiError::Overloaded { status, message } => ApiError::Overloaded {
            status,
            message: r(message),
        },
        ApiError::Unreachable { message } => ApiError::Unreachable {
            message: r(message),
        },
        ApiError::ContextOverflow { message } => ApiError::ContextOverflow {
            message: r(message),
        },
        ApiError::Refused { status, message } => ApiError::Refused {
            status,
            message: r(message),
        },
        ApiError::TooLarge { message } => ApiError::TooLarge {
            message: r(message),
        },
    }
}

/// The conversation's end as a process result and parsed output.
fn finish(
    it: &Iteration<'_>,
    mut tr: Transcript,
    end: End,
    started: Instant,
    log: &mut impl FnMut(&str),
) -> (ProcessResult, ParsedOutput) {
    let mut result = ProcessResult {
        status: ExitStatus::Code(0),
        timed_out: false,
        interrupted: false,
        duration: started.elapsed(),
        leftovers_ended: false,
    };
    match end {
        End::Done => log("the model stopped calling tools: the iteration's conversation ends"),
        End::MaxTurns => log(&format!(
            "max-turns ({}) reached: the iteration's conversation ends (api.max-turns in config)",
            it.settings.max_turns()
        )),
        End::TimedOut => {
            log("the iteration's time ran out during the conversation");
            result.status = ExitStatus::Code(124);
            result.timed_out = true;
        }
        End::Interrupted => {
            result.status = ExitStatus::Code(130);
            result.interrupted = true;
        }
        End::Overflow(m) => log(&format!(
            "the conversation no longer fits the model's context ({m}): the iteration ends here; the next one starts fresh"
        )),
        End::Cut(m) => log(&format!(
            "the model's reply was cut: {m}; the iteration ends here (its tool calls were not run); the next one starts fresh"
        )),
        End::Failed(e) => {
            log(&format!(
                "api error ({}): {}",
                e.class().name(),
                e.message()
            ));
            result.status = ExitStatus::Code(1);
            tr.out.evidence = evidence(&e);
        }
    }
    let u = tr.usage;
    tr.out.tokens_in = Some(u.all_input());
    tr.out.tokens_out = Some(u.output);
    match it.settings.price(it.model) {
        Some(p) => tr.out.cost_usd = Some(p.cost(&u)),
        None => log(&format!(
            "no price known for model `{}`: its cost is not counted (set api.prices.{} in config)",
            it.model, it.model
        )),
    }
    if tr.out.tool_calls > 0 {
        tr.out.tool_signature = Some(format!("{:016x}-{}", tr.signature, tr.out.tool_calls));
    }
    (result, tr.out)
}

/// A failed request as the agent-failure model's evidence.
fn evidence(e: &ApiError) -> Evidence {
    let mut ev = Evidence {
        is_error: true,
        api_error_status: e.status(),
        result_error: Some(e.message().to_string()),
        ..Default::default()
    };
    match e {
        ApiError::Auth { .. } => ev.assistant_error = Some("authentication_failed".into()),
        ApiError::RateLimited { retry_after, .. } => {
            ev.assistant_error = Some("rate_limit".into());
            ev.retry_delay = *retry_after;
        }
        ApiError::Unreachable { .. } | ApiError::Overloaded { .. } => {
            ev.assistant_error = Some("server_error".into())
        }
        _ => {}
    }
    ev.text_line(e.message());
    ev
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::FailureClass;

    fn class(e: ApiError) -> FailureClass {
        let ev = evidence(&e);
        crate::agent::classify(1, false, &ev, &jiff::Zoned::now()).class
    }

    #[test]
    fn failures_classify_like_the_clis() {
        let auth = ApiError::Auth {
            status: 401,
            message: "401: invalid x-api-key".into(),
        };
        assert_eq!(class(auth), FailureClass::Auth);
        let rl = ApiError::RateLimited {
            message: "429: slow down".into(),
            retry_after: None,
        };
        assert_eq!(class(rl), FailureClass::RateLimited);
        let o = ApiError::Overloaded {
            status: 529,
            message: "529: Overloaded".into(),
        };
        assert_eq!(class(o), FailureClass::Overloaded);
        let u = ApiError::Unreachable {
            message: "error sending request: connection refused".into(),
        };
        assert!(class(u).is_transient());
    }

    #[test]
    fn the_key_is_redacted() {
        let r = Redactor {
            secrets: vec!["sk-secret-123".into()],
        };
        assert_eq!(r.text("bad key sk-secret-123"), "bad key [redacted]");
        let mut v = serde_json::json!({"a": ["x sk-secret-123"], "b": {"c": "sk-secret-123"}});
        r.value(&mut v);
        assert_eq!(
            v.to_string(),
            r#"{"a":["x [redacted]"],"b":{"c":"[redacted]"}}"#
        );
    }
}
