//! The `notify:` setting: a list of sinks.
//!
//! ```yaml
//! notify:
//!   - webhook: https://hooks.slack.com/services/…
//!     events: [blocked, decide, failed]
//!   - desktop: true
//!   - command: ~/bin/on-taskdaemon-event
//!     timeout: 10s
//! ```
//!
//! A webhook may say `format: slack | discord | matrix | json` (else it is inferred from
//! its address).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Kind;
use crate::config::Dur;

/// Where a sink delivers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// POST the notice as JSON (with a Slack-compatible `text`) to this URL.
    Webhook(String),
    /// `notify-send`, where installed.
    Desktop,
    /// `sh -c COMMAND` with the notice as JSON on stdin.
    Command(String),
}

/// What a webhook's receiver reads: every payload has the notice's fields, `text` (plain)
/// and `markdown`; each format adds or replaces the field its receiver shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// The notice as it is (a command hook always gets this).
    Json,
    /// `text` in Slack's mrkdwn.
    Slack,
    /// `content`: Markdown, at most 2000 characters.
    Discord,
    /// `msgtype`, `body` (plain), `format`, `formatted_body` (HTML): an `m.room.message`.
    Matrix,
}

impl Format {
    /// The format a webhook's address implies: Slack's and Discord's hosts; else JSON.
    pub fn of_url(url: &str) -> Format {
        let rest = url.split_once("://").map_or(url, |(_, r)| r);
        let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
        let host = host.rsplit('@').next().unwrap_or(host).to_ascii_lowercase();
        let host = host.split(':').next().unwrap_or(&host).to_string();
        if host == "hooks.slack.com" {
            Format::Slack
        } else if (host == "discord.com"
            || host.ends_with(".discord.com")
            || host == "discordapp.com"
            || host.ends_with(".discordapp.com"))
            && path.starts_with("api/webhooks")
        {
            Format::Discord
        } else {
            Format::Json
        }
    }
}

/// One sink of `notify:`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawSink", into = "RawSink")]
pub struct SinkConfig {
    pub target: Target,
    /// Only these kinds (all when unset).
    pub events: Option<Vec<Kind>>,
    /// One delivery attempt's limit [default: 10s].
    pub timeout: Option<Dur>,
    /// Attempts after the first failed one [default: 2].
    pub retries: Option<u32>,
    /// A webhook's payload format [default: from its address].
    pub format: Option<Format>,
}

pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_RETRIES: u32 = 2;
/// The most attempts after a failed one, whatever the config says.
pub const MAX_RETRIES: u32 = 10;

impl SinkConfig {
    pub fn wants(&self, kind: Kind) -> bool {
        self.events.as_ref().is_none_or(|e| e.contains(&kind))
    }

    pub fn timeout(&self) -> Duration {
        self.timeout.map(|d| d.0).unwrap_or(DEFAULT_TIMEOUT)
    }

    pub fn retries(&self) -> u32 {
        self.retries.unwrap_or(DEFAULT_RETRIES).min(MAX_RETRIES)
    }

    /// The payload format this sink sends.
    pub fn format(&self) -> Format {
        match (&self.target, self.format) {
            (_, Some(f)) => f,
            (Target::Webhook(url), None) => Format::of_url(url),
            _ => Format::Json,
        }
    }

    /// The sink in a log line.
    pub fn describe(&self) -> String {
        match &self.target {
            Target::Webhook(url) => format!("webhook {}", redact(url)),
            Target::Desktop => "desktop notifications".into(),
            Target::Command(c) => format!("command hook `{c}`"),
        }
    }
}

/// A URL without its path and query (which often hold a secret token).
fn redact(url: &str) -> String {
    let rest = url.split_once("://");
    match rest {
        Some((scheme, r)) => {
            let host = r.split(['/', '?']).next().unwrap_or(r);
            format!("{scheme}://{host}/…")
        }
        None => "(bad url)".into(),
    }
}

/// The sink as written in YAML.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawSink {
    #[serde(skip_serializing_if = "Option::is_none")]
    webhook: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    desktop: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    command: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    events: Option<Vec<Kind>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout: Option<Dur>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retries: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    format: Option<Format>,
}

impl TryFrom<RawSink> for SinkConfig {
    type Error = String;

    fn try_from(r: RawSink) -> Result<SinkConfig, String> {
        let target = match (r.webhook, r.desktop, r.command) {
            (Some(url), None, None) => {
                let url = url.trim().to_string();
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(format!(
                        "notify: webhook `{url}` is not an http(s) URL; write e.g. `webhook: https://hooks.slack.com/services/…`"
                    ));
                }
                Target::Webhook(url)
            }
            (None, Some(true), None) => Target::Desktop,
            (None, Some(false), None) => {
                return Err(
                    "notify: `desktop: false` is a sink that does nothing; remove the entry".into(),
                );
            }
            (None, None, Some(c)) if c.trim().is_empty() => {
                return Err("notify: `command:` is empty; write the command to run (it gets the event as JSON on stdin)".into());
            }
            (None, None, Some(c)) => Target::Command(c),
            (None, None, None) => {
                return Err("notify: a sink needs one of `webhook: URL`, `desktop: true` or `command: COMMAND`".into());
            }
            _ => {
                return Err("notify: one sink per entry: write `webhook:`, `desktop:` and `command:` as separate list items (`- `)".into());
            }
        };
        if r.events.as_ref().is_some_and(|e| e.is_empty()) {
            return Err("notify: `events: []` takes no event; remove `events:` for all of them, or name some (blocked, decide, complete, failed, stuck, usage_limit_wait, usage_limit_over, merge_conflict, merge_held, daemon_stopped)".into());
        }
        if r.timeout.is_some_and(|t| t.0.is_zero()) {
            return Err("notify: `timeout: 0s` would fail every delivery; write e.g. `10s`".into());
        }
        if r.format.is_some() && !matches!(target, Target::Webhook(_)) {
            return Err("notify: `format:` applies to a webhook only (a command hook gets the JSON payload, a desktop notification plain text); remove it".into());
        }
        Ok(SinkConfig {
            target,
            events: r.events,
            timeout: r.timeout,
            retries: r.retries,
            format: r.format,
        })
    }
}

impl From<SinkConfig> for RawSink {
    fn from(s: SinkConfig) -> RawSink {
        let mut r = RawSink {
            events: s.events,
            timeout: s.timeout,
            retries: s.retries,
            format: s.format,
            ..RawSink::default()
        };
        match s.target {
            Target::Webhook(u) => r.webhook = Some(u),
            Target::Desktop => r.desktop = Some(true),
            Target::Command(c) => r.command = Some(c),
        }
        r
    }
}
