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
            return Err("notify: `events: []` takes no event; remove `events:` for all of them, or name some (blocked, decide, complete, failed, stuck, usage-limit-wait, usage-limit-over, merge-conflict, daemon-stopped)".into());
        }
        if r.timeout.is_some_and(|t| t.0.is_zero()) {
            return Err("notify: `timeout: 0s` would fail every delivery; write e.g. `10s`".into());
        }
        Ok(SinkConfig {
            target,
            events: r.events,
            timeout: r.timeout,
            retries: r.retries,
        })
    }
}

impl From<SinkConfig> for RawSink {
    fn from(s: SinkConfig) -> RawSink {
        let mut r = RawSink {
            events: s.events,
            timeout: s.timeout,
            retries: s.retries,
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
