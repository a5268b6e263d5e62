//! Why an agent's run failed: the agent-failure model. Every iteration's result is
//! classified from its exit code, the structured events it printed and its text, so the
//! engine can stop (could-not-start, auth), wait (usage limit), back off (rate limits,
//! overload, unreachable API) or count a crash — instead of mistaking a failure for work.
//!
//! The evidence is gathered line by line by the output parser ([`Evidence`]); [`classify`]
//! decides. The text patterns per CLI are in [`PATTERNS`]; reset times are read by
//! [`parse_reset`] from Claude's `rate_limit_event`, "resets 4:20am (Europe/Warsaw)",
//! "Claude AI usage limit reached|<epoch>" and Codex's "try again at 2:36 AM".

use std::time::Duration;

use jiff::civil::{Date, Time};
use jiff::tz::TimeZone;
use jiff::{Timestamp, Zoned};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What an agent's run amounts to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureClass {
    /// No failure recognised (the engine judges the work).
    Ok,
    /// The agent could not run at all: not installed, not executable (126/127), refused to
    /// start (Claude as root without IS_SANDBOX).
    CouldNotStart,
    /// Not logged in, invalid or missing key.
    Auth,
    /// The subscription's usage limit: wait for the reset.
    UsageLimit,
    /// Too many requests (transient).
    RateLimited,
    /// The model API is overloaded or failing (5xx; transient).
    Overloaded,
    /// No answer from the model API at all (transient).
    Unreachable,
    /// Another non-zero exit.
    Crashed,
}

impl FailureClass {
    pub fn name(self) -> &'static str {
        match self {
            FailureClass::Ok => "ok",
            FailureClass::CouldNotStart => "could-not-start",
            FailureClass::Auth => "auth",
            FailureClass::UsageLimit => "usage-limit",
            FailureClass::RateLimited => "rate-limited",
            FailureClass::Overloaded => "overloaded",
            FailureClass::Unreachable => "unreachable",
            FailureClass::Crashed => "crashed",
        }
    }

    /// Failures that pass by themselves: back off and try again.
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            FailureClass::RateLimited | FailureClass::Overloaded | FailureClass::Unreachable
        )
    }

    /// Failures no retry can fix: a person must act.
    pub fn needs_a_person(self) -> bool {
        matches!(self, FailureClass::CouldNotStart | FailureClass::Auth)
    }
}

/// A usage window as Claude's `rate_limit_event` reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageWindow {
    /// `allowed`, `allowed_warning` or `rejected`.
    pub status: String,
    pub resets_at: Option<i64>,
    /// `five_hour`, `seven_day`, …
    pub kind: Option<String>,
    /// 0.0–1.0 when the CLI reports it.
    pub utilization: Option<f64>,
}

/// What the output showed about failures; filled line by line by the output parser.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Evidence {
    /// Claude's result line said `is_error: true`.
    pub is_error: bool,
    /// Claude's `api_error_status` (None: absent or null).
    pub api_error_status: Option<u16>,
    /// Claude's synthetic assistant message's `error` (`authentication_failed`, …).
    pub assistant_error: Option<String>,
    /// The error text of Claude's result line (when `is_error`).
    pub result_error: Option<String>,
    /// Codex's `turn.failed` message: the only fatal Codex error.
    pub turn_failed: Option<String>,
    /// The last non-fatal error line (Codex `Reconnecting…`, Claude `api_retry`).
    pub last_retry: Option<String>,
    /// The delay the CLI chose for its last retry (Claude `retry_delay_ms`).
    pub retry_delay: Option<Duration>,
    /// The last usage window reported (Claude `rate_limit_event`).
    pub usage: Option<UsageWindow>,
    /// The last few non-empty lines of stderr, and of stdout for plain-text agents.
    pub tail: Vec<String>,
}

const TAIL_LINES: usize = 6;

impl Evidence {
    /// A line of text (stderr, or stdout of a plain-text agent).
    pub fn text_line(&mut self, line: &str) {
        let line = line.trim();
        if line.is_empty() {
            return;
        }
        if self.tail.len() == TAIL_LINES {
            self.tail.remove(0);
        }
        self.tail.push(line.chars().take(400).collect());
    }

    /// One line of Claude Code stream-json.
    pub fn claude(&mut self, v: &Value) {
        let s = |p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_string);
        match v.get("type").and_then(Value::as_str) {
            Some("rate_limit_event") => {
                if let Some(info) = v.get("rate_limit_info") {
                    self.usage = Some(UsageWindow {
                        status: info
                            .get("status")
                            .and_then(Value::as_str)
                            .unwrap_or("allowed")
                            .to_string(),
                        resets_at: info.get("resetsAt").and_then(Value::as_i64),
                        kind: info
                            .get("rateLimitType")
                            .and_then(Value::as_str)
                            .map(str::to_string),
                        utilization: info
                            .get("utilization")
                            .and_then(Value::as_f64)
                            .filter(|u| u.is_finite()),
                    });
                }
            }
            Some("assistant") => {
                if let Some(e) = s("/error") {
                    self.assistant_error = Some(e);
                }
            }
            Some("system") if s("/subtype").as_deref() == Some("api_retry") => {
                let status = v.get("error_status").and_then(Value::as_u64);
                let error = s("/error").unwrap_or_default();
                self.last_retry = Some(match status {
                    Some(st) => format!("API retry: {st} {error}"),
                    None => format!("API retry: {error}"),
                });
                self.retry_delay = v
                    .get("retry_delay_ms")
                    .and_then(Value::as_u64)
                    .map(Duration::from_millis);
            }
            Some("result") => {
                self.is_error = v.get("is_error").and_then(Value::as_bool) == Some(true)
                    || s("/subtype").is_some_and(|t| t.starts_with("error"));
                self.api_error_status = v
                    .get("api_error_status")
                    .and_then(Value::as_u64)
                    .and_then(|n| u16::try_from(n).ok());
                if self.is_error {
                    self.result_error = s("/result").or_else(|| s("/subtype"));
                }
            }
            _ => {}
        }
    }

    /// One line of Gemini CLI stream-json.
    pub fn gemini(&mut self, v: &Value) {
        let s = |p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_string);
        match v.get("type").and_then(Value::as_str) {
            Some("result") if s("/status").as_deref() == Some("error") => {
                self.is_error = true;
                self.result_error = s("/error/message").or_else(|| Some("error".into()));
            }
            Some("error") => self.last_retry = s("/message"),
            _ => {}
        }
    }

    /// One line of opencode `run --format json`: an `error` event ends the run.
    pub fn opencode(&mut self, v: &Value) {
        if v.get("type").and_then(Value::as_str) != Some("error") {
            return;
        }
        let s = |p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_string);
        self.is_error = true;
        self.result_error = s("/error/data/message")
            .or_else(|| s("/error/name"))
            .or_else(|| Some("error".into()));
        self.api_error_status = v
            .pointer("/error/data/statusCode")
            .and_then(Value::as_u64)
            .and_then(|n| u16::try_from(n).ok());
    }

    /// One line of Codex `exec --json`.
    pub fn codex(&mut self, v: &Value) {
        let s = |p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_string);
        match v.get("type").and_then(Value::as_str) {
            Some("turn.failed") => {
                self.turn_failed = s("/error/message").or_else(|| Some("turn failed".into()));
            }
            Some("error") => self.last_retry = s("/message"),
            Some("item.completed") if s("/item/type").as_deref() == Some("error") => {
                self.last_retry = s("/item/message");
            }
            _ => {}
        }
    }
}

/// An agent's run, classified.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentResult {
    pub class: FailureClass,
    /// The agent's own line saying what went wrong.
    pub line: Option<String>,
    /// When a usage limit resets (from the event, else from the text).
    pub reset_at: Option<Timestamp>,
    /// How long the CLI itself last waited before a retry.
    pub retry_after: Option<Duration>,
}

impl AgentResult {
    pub fn ok() -> AgentResult {
        AgentResult {
            class: FailureClass::Ok,
            line: None,
            reset_at: None,
            retry_after: None,
        }
    }

    /// This result of a process under `plan` that exited `code`: when a container engine
    /// could not start the agent's container, the agent could not start, whatever its text.
    fn in_sandbox(
        mut self,
        plan: &crate::sandbox::SandboxPlan,
        code: i32,
        ev: &Evidence,
    ) -> AgentResult {
        if self.class == FailureClass::Ok {
            return self;
        }
        if let Some(line) = crate::sandbox::exec_failed(plan, code, &ev.tail) {
            self.class = FailureClass::CouldNotStart;
            self.line = Some(format!("{SANDBOX_EXEC} ({}): {line}", plan.kind));
        } else if plan.kind == crate::sandbox::SandboxKind::Bwrap
            && code == 127
            && self.class == FailureClass::CouldNotStart
        {
            // The shell of a `cmd:` agent found no such program inside (the preflight
            // found it outside).
            let line = self.line.as_deref().unwrap_or("exit 127");
            self.line = Some(format!("{SANDBOX_EXEC} ({}): {line}", plan.kind));
        } else if crate::sandbox::engine_failed(plan, code) {
            self.class = FailureClass::CouldNotStart;
            self.line = Some(format!(
                "{ENGINE_FAILED}: {}",
                self.line.as_deref().unwrap_or("exit 125")
            ));
        }
        self
    }

    /// What a person can do about it.
    pub fn hint(&self) -> &'static str {
        let line = self.line.as_deref().unwrap_or_default();
        match self.class {
            FailureClass::CouldNotStart if line.starts_with(SANDBOX_EXEC) => {
                "inside the bwrap sandbox / is read-only but /tmp is private and empty and hidden directories (~/.ssh, sandbox-ro-hide) are empty: a program there (or its symlink's target, its #! interpreter) is not found; install it elsewhere, or run with --sandbox none (docs/sandbox.md)"
            }
            FailureClass::CouldNotStart if line.starts_with(ENGINE_FAILED) => {
                "check the engine and the image: `podman info` or `docker info`, `sandbox-image` in the settings (`taskdaemon config show`); podman's --init needs catatonit (docs/sandbox.md)"
            }
            FailureClass::CouldNotStart if line.contains("root/sudo") => {
                "Claude Code refuses --dangerously-skip-permissions as root: run as a normal user, or set IS_SANDBOX=1 inside a container or VM"
            }
            FailureClass::CouldNotStart => {
                "check that the agent is installed and executable (`taskdaemon doctor`), or pick another with --agent"
            }
            FailureClass::Auth => {
                "log the agent in (`claude` then /login, `codex login`) or set its API key, then `taskdaemon run --resume`"
            }
            FailureClass::UsageLimit => {
                "wait for the reset (the default, --on-usage-limit wait) or use another account"
            }
            FailureClass::RateLimited | FailureClass::Overloaded => {
                "the model API refused the requests for a while; try again later with `taskdaemon run --resume`"
            }
            FailureClass::Unreachable => {
                "check the network and the agent's API endpoint (ANTHROPIC_BASE_URL, the provider's base_url), then `taskdaemon run --resume`"
            }
            FailureClass::Crashed => {
                "read the iteration log; the agent exited with an error and did no work"
            }
            FailureClass::Ok => "",
        }
    }
}

/// Text patterns, lowercase, typographic apostrophes folded to `'`. Checked in this order
/// against the agent's error lines; the first class with a matching pattern wins.
pub const PATTERNS: &[(FailureClass, &[&str])] = &[
    (
        FailureClass::CouldNotStart,
        &[
            // Claude Code as root without IS_SANDBOX.
            "cannot be used with root/sudo privileges",
            // sh -c (cmd: agents).
            ": command not found",
            ": not found",
            ": permission denied",
        ],
    ),
    (
        FailureClass::UsageLimit,
        &[
            // Claude Code: "You've hit your limit · resets 4:20am (Europe/Warsaw)", "…session
            // limit…", "…weekly limit…"; Codex: "You’ve hit your usage limit."
            "hit your limit",
            "hit your session limit",
            "hit your weekly limit",
            "hit your usage limit",
            "hit your opus limit",
            // Claude Code (older): "Claude AI usage limit reached|1714590000",
            // "5-hour limit reached ∙ resets 2am".
            "usage limit reached",
            "limit reached ∙ resets",
            "limit reached · resets",
            "out of extra usage",
            // Codex: insufficient_quota; usage_limit_reached in bodies.
            "quota exceeded. check your plan",
            "usage_limit_reached",
            "insufficient_quota",
        ],
    ),
    (
        FailureClass::Auth,
        &[
            // Claude Code.
            "not logged in",
            "please run /login",
            // amp without a key opens a browser login and waits for a pasted code:
            // "No API key found. Starting login flow...", "When prompted, paste your code".
            "no api key found",
            "starting login flow",
            "paste your code here",
            "invalid api key",
            "authentication_failed",
            "oauth token has expired",
            "invalid bearer token",
            // Codex.
            "401 unauthorized",
            "incorrect api key",
            "missing environment variable",
            "didn't provide an api key",
            "codex login",
            // Gemini CLI, opencode.
            "api key not valid",
            "api_key_invalid",
            "invalid auth method selected",
            "please set an auth method",
        ],
    ),
    (
        FailureClass::RateLimited,
        &[
            "rate limit",
            "rate_limit",
            "429 too many requests",
            "request rejected (429)",
            "too many requests",
            "resource_exhausted",
        ],
    ),
    (
        FailureClass::Unreachable,
        &[
            // Claude Code: "API Error: Unable to connect to API (ConnectionRefused)".
            "unable to connect to api",
            // opencode: "Cannot connect to API: Unable to connect. …".
            "cannot connect to api",
            "connectionrefused",
            "econnrefused",
            "enotfound",
            // Codex: "Reconnecting... waiting for network (Connection failed: …)".
            "waiting for network",
            "connection failed",
            "failed to lookup address",
            "name does not resolve",
            "connection refused",
            "network is unreachable",
            "stream disconnected before completion",
        ],
    ),
    (
        FailureClass::Overloaded,
        &[
            // Claude Code: "API Error: 529 Overloaded."; Codex 500 and 503.
            "overloaded",
            "529",
            "high demand",
            "503 service unavailable",
            "500 internal server error",
            "502 bad gateway",
            "internal server error",
            "server_error",
        ],
    ),
];

/// Lowercase, with typographic apostrophes folded.
fn fold(s: &str) -> String {
    s.to_lowercase().replace(['\u{2019}', '\u{2018}'], "'")
}

/// The class the text names, by [`PATTERNS`].
pub fn class_of_text(text: &str) -> Option<FailureClass> {
    let t = fold(text);
    PATTERNS
        .iter()
        .find(|(_, pats)| pats.iter().any(|p| t.contains(p)))
        .map(|(c, _)| *c)
}

/// Classify one run of the agent. `exit_code` is the shell's (128 + signal); `now` carries
/// the local time zone the CLI printed its clock times in.
pub fn classify(exit_code: i32, timed_out: bool, ev: &Evidence, now: &Zoned) -> AgentResult {
    classify_at(exit_code, timed_out, ev, || now.clone())
}

/// How [`AgentResult::in_sandbox`] begins the line of a program bwrap could not run.
const SANDBOX_EXEC: &str = "the agent's program could not be started inside the sandbox";

/// How [`AgentResult::in_sandbox`] begins its line.
const ENGINE_FAILED: &str = "the container engine could not start the agent's container";

/// [`classify_now`] of an agent process that ran under `plan`: a container engine that
/// could not start the agent's container means the agent could not start.
pub fn classify_process(
    exit_code: i32,
    timed_out: bool,
    ev: &Evidence,
    plan: &crate::sandbox::SandboxPlan,
) -> AgentResult {
    classify_now(exit_code, timed_out, ev).in_sandbox(plan, exit_code, ev)
}

/// [`classify`] at the current time in the local time zone, which is looked up only when
/// the run failed (jiff reads the system's zone database for it: a directory scan).
pub fn classify_now(exit_code: i32, timed_out: bool, ev: &Evidence) -> AgentResult {
    classify_at(exit_code, timed_out, ev, Zoned::now)
}

fn classify_at(
    exit_code: i32,
    timed_out: bool,
    ev: &Evidence,
    now: impl FnOnce() -> Zoned,
) -> AgentResult {
    let failed = exit_code != 0 || ev.is_error || ev.turn_failed.is_some();
    if !failed && !timed_out {
        return AgentResult::ok();
    }
    let now = &now();
    // The agent's own line: its fatal error, else its last retry, else its last words.
    let line = ev
        .turn_failed
        .clone()
        .or_else(|| ev.result_error.clone())
        .or_else(|| ev.last_retry.clone())
        .or_else(|| ev.tail.last().cloned());
    let texts: Vec<&str> = [ev.turn_failed.as_deref(), ev.result_error.as_deref()]
        .into_iter()
        .flatten()
        .chain(ev.tail.iter().map(String::as_str))
        .chain(ev.last_retry.as_deref())
        .collect();
    let by_text = texts.iter().find_map(|t| class_of_text(t));
    let rejected = ev
        .usage
        .as_ref()
        .filter(|u| u.status == "rejected" && failed);
    let class = if rejected.is_some() {
        FailureClass::UsageLimit
    } else if failed && matches!(exit_code, 126 | 127) {
        FailureClass::CouldNotStart
    } else if let Some(c) = by_text {
        c
    } else if let Some(c) = structured_class(ev) {
        c
    } else if timed_out {
        // A timeout without any sign of a failing API: the engine's timeout handling.
        return AgentResult::ok();
    } else {
        FailureClass::Crashed
    };
    let now_ts = now.timestamp();
    let reset_at = match class {
        FailureClass::UsageLimit => rejected
            .and_then(|u| u.resets_at)
            .and_then(|s| Timestamp::from_second(s).ok())
            .or_else(|| texts.iter().find_map(|t| parse_reset(t, now)))
            .filter(|t| *t > now_ts - jiff::SignedDuration::from_hours(1)),
        _ => None,
    };
    AgentResult {
        class,
        line,
        reset_at,
        retry_after: ev.retry_delay,
    }
}

/// Claude's structured error fields when no text matched.
fn structured_class(ev: &Evidence) -> Option<FailureClass> {
    match (ev.assistant_error.as_deref(), ev.api_error_status) {
        (Some("authentication_failed"), _) | (_, Some(401 | 403)) => Some(FailureClass::Auth),
        (Some("rate_limit"), _) | (_, Some(429)) => Some(FailureClass::RateLimited),
        (_, Some(s)) if s >= 500 => Some(FailureClass::Overloaded),
        (Some("server_error"), None) if ev.is_error => Some(FailureClass::Unreachable),
        _ => None,
    }
}

/// The reset time a usage-limit text gives, resolved against `now` (its time zone is the
/// one the CLI printed local clock times in). Recognises `…limit reached|<epoch>`,
/// `resets [Mon D, ]H[:MM]am|pm [(Zone/Name)]` and `try again at [Mon Dth, YYYY ]H:MM AM|PM`.
pub fn parse_reset(text: &str, now: &Zoned) -> Option<Timestamp> {
    if let Some(t) = epoch_after_bar(text) {
        return Some(t);
    }
    let low = fold(text);
    // `fold` keeps byte offsets only for ASCII; search the folded text, cut the original
    // at the same keyword found in it.
    let key = ["resets ", "try again at "]
        .into_iter()
        .find(|k| low.contains(k))?;
    let at = text.to_lowercase().find(key)? + key.len();
    let rest = text.get(at..)?;
    let (date, rest) = parse_month_day(rest, now.date().year());
    let (time, rest) = parse_clock(rest)?;
    let tz = parse_zone(rest).unwrap_or_else(|| now.time_zone().clone());
    let local_today = now.with_time_zone(tz.clone()).date();
    let day = date.map(|(d, _)| d).unwrap_or(local_today);
    let mut when = day.to_datetime(time).to_zoned(tz).ok()?;
    let day_span = jiff::Span::new().days(1);
    match date {
        // A clock time given to the minute that is now means the end of this minute (a
        // second refusal within it), not tomorrow.
        None if when.timestamp() <= now.timestamp()
            && now.timestamp().duration_since(when.timestamp())
                < jiff::SignedDuration::from_secs(60) =>
        {
            when = when.checked_add(jiff::Span::new().minutes(1)).ok()?
        }
        // A clock time without a date is the next one.
        None if when.timestamp() <= now.timestamp() => when = when.checked_add(day_span).ok()?,
        // A date without a year that has passed is next year's.
        Some((_, false))
            if when.timestamp() + jiff::SignedDuration::from_hours(24) < now.timestamp() =>
        {
            when = when.checked_add(jiff::Span::new().years(1)).ok()?
        }
        _ => {}
    }
    Some(when.timestamp())
}

/// `…|1714590000` (Claude Code's old usage-limit line).
fn epoch_after_bar(text: &str) -> Option<Timestamp> {
    let (_, rest) = text.split_once('|')?;
    let digits: String = rest
        .trim()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    if digits.len() < 9 {
        return None;
    }
    let n: i64 = digits.parse().ok()?;
    // Seconds, or milliseconds.
    let secs = if digits.len() >= 13 { n / 1000 } else { n };
    Timestamp::from_second(secs).ok()
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];

/// `Nov 28, ` or `Nov 28th, 2026 ` → (date, whether the year was given), rest.
fn parse_month_day(s: &str, this_year: i16) -> (Option<(Date, bool)>, &str) {
    let t = s.trim_start();
    let month = t
        .get(..3)
        .and_then(|m| MONTHS.iter().position(|x| x.eq_ignore_ascii_case(m)));
    let Some(month) = month else {
        return (None, s);
    };
    // Skip the rest of the month's name.
    let after = t[3..].trim_start_matches(|c: char| c.is_ascii_alphabetic() || c == '.');
    let after = after.trim_start();
    let day_digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    let Ok(day) = day_digits.parse::<i8>() else {
        return (None, s);
    };
    let mut rest = after[day_digits.len()..]
        .trim_start_matches(|c: char| c.is_ascii_alphabetic())
        .trim_start_matches(',')
        .trim_start();
    let year_digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let mut year = None;
    if year_digits.len() == 4 && !rest[4..].starts_with(':') {
        year = year_digits.parse::<i16>().ok();
        rest = rest[4..].trim_start_matches(',').trim_start();
    }
    match Date::new(year.unwrap_or(this_year), month as i8 + 1, day) {
        Ok(d) => (Some((d, year.is_some())), rest),
        Err(_) => (None, s),
    }
}

/// `4:20am`, `2am`, `1:28 AM`, `21:05` → the time, rest.
fn parse_clock(s: &str) -> Option<(Time, &str)> {
    let t = s.trim_start();
    let hour_digits: String = t.chars().take_while(char::is_ascii_digit).collect();
    let mut hour: i8 = hour_digits.parse().ok()?;
    let mut rest = &t[hour_digits.len()..];
    let mut minute: i8 = 0;
    if let Some(r) = rest.strip_prefix(':') {
        let m: String = r.chars().take_while(char::is_ascii_digit).collect();
        minute = m.parse().ok()?;
        rest = &r[m.len()..];
    } else if hour_digits.is_empty() {
        return None;
    }
    let r = rest.trim_start();
    let low = r.get(..2).map(str::to_ascii_lowercase);
    match low.as_deref() {
        Some("am") | Some("pm") => {
            if !(1..=12).contains(&hour) {
                return None;
            }
            let pm = low.as_deref() == Some("pm");
            hour = match (hour, pm) {
                (12, false) => 0,
                (12, true) => 12,
                (h, true) => h + 12,
                (h, false) => h,
            };
            rest = &r[2..];
        }
        _ if !s.contains(':') => return None,
        _ => {}
    }
    Some((Time::new(hour, minute, 0, 0).ok()?, rest))
}

/// ` (Europe/Warsaw)` → that zone; `(UTC)` too.
fn parse_zone(s: &str) -> Option<TimeZone> {
    let inner = s.trim_start().strip_prefix('(')?;
    let name = &inner[..inner.find(')')?];
    TimeZone::get(name.trim()).ok()
}

/// "04:20 (in 2h 13m)" in the local time zone, from now.
pub fn describe_local(reset: Timestamp) -> String {
    describe_reset(reset, &Zoned::now())
}

/// "04:20 (in 2h 13m)" in the time zone of `now`.
pub fn describe_reset(reset: Timestamp, now: &Zoned) -> String {
    let local = reset.to_zoned(now.time_zone().clone());
    let secs = (reset.as_second() - now.timestamp().as_second()).max(0);
    let clock = if local.date() == now.date() {
        local.strftime("%H:%M").to_string()
    } else {
        local.strftime("%b %-d %H:%M").to_string()
    };
    format!(
        "{clock} (in {})",
        crate::duration::format_duration(Duration::from_secs(secs as u64))
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::{SandboxKind, SandboxPlan};

    #[test]
    fn a_container_engines_own_failure_is_could_not_start_and_nothing_else_is() {
        let ev = Evidence {
            tail: vec!["Error: container-init binary not found on the host".into()],
            ..Evidence::default()
        };
        let crashed = || classify_now(125, false, &ev);
        assert_eq!(crashed().class, FailureClass::Crashed);
        for kind in [SandboxKind::Podman, SandboxKind::Docker] {
            let plan = SandboxPlan {
                kind,
                ..Default::default()
            };
            let r = crashed().in_sandbox(&plan, 125, &ev);
            assert_eq!(r.class, FailureClass::CouldNotStart, "{kind}");
            assert_eq!(classify_process(125, false, &ev, &plan), r);
            assert!(
                r.line.as_deref().unwrap().contains("container-init"),
                "{r:?}"
            );
            assert!(r.hint().contains("podman info"), "{}", r.hint());
            // The agent's own exit code 1 in the container is the agent's.
            let own = classify_now(1, false, &ev).in_sandbox(&plan, 1, &ev);
            assert_eq!(own.class, FailureClass::Crashed);
        }
        for kind in [SandboxKind::None, SandboxKind::Bwrap] {
            let plan = SandboxPlan {
                kind,
                ..Default::default()
            };
            assert_eq!(
                crashed().in_sandbox(&plan, 125, &ev).class,
                FailureClass::Crashed
            );
        }
        let ok = classify_now(0, false, &Evidence::default()).in_sandbox(
            &SandboxPlan {
                kind: SandboxKind::Podman,
                ..Default::default()
            },
            0,
            &Evidence::default(),
        );
        assert_eq!(ok.class, FailureClass::Ok);
    }

    #[test]
    fn a_program_bwrap_cannot_run_is_could_not_start_naming_the_sandbox() {
        let ev = Evidence {
            tail: vec!["bwrap: execvp claude: No such file or directory".into()],
            ..Evidence::default()
        };
        let bwrap = SandboxPlan {
            kind: SandboxKind::Bwrap,
            ..Default::default()
        };
        let r = classify_process(1, false, &ev, &bwrap);
        assert_eq!(r.class, FailureClass::CouldNotStart);
        let line = r.line.as_deref().unwrap_or_default();
        assert!(
            line.contains("sandbox (bwrap)") && line.contains("execvp claude"),
            "{line}"
        );
        assert!(r.hint().contains("bwrap sandbox"), "{}", r.hint());
        // Not under another sandbox, and not the agent's own exit code 2.
        let none = SandboxPlan::default();
        assert_eq!(
            classify_process(1, false, &ev, &none).class,
            FailureClass::Crashed
        );
        assert_eq!(
            classify_process(2, false, &ev, &bwrap).class,
            FailureClass::Crashed
        );
        // A `cmd:` agent's shell that finds no such program inside.
        let sh = Evidence {
            tail: vec!["sh: 1: fakeagent: not found".into()],
            ..Evidence::default()
        };
        let r = classify_process(127, false, &sh, &bwrap);
        assert_eq!(r.class, FailureClass::CouldNotStart);
        assert!(r.hint().contains("bwrap sandbox"), "{}", r.hint());
        let r = classify_process(127, false, &sh, &none);
        assert!(!r.hint().contains("bwrap"), "{}", r.hint());
    }
}
