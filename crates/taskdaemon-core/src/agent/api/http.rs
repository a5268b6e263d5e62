//! What a provider's HTTP answer means: the status and body of a failed request become an
//! [`ApiError`] in the agent-failure model's terms; `retry-after` and the providers'
//! rate-limit headers say how long to wait.

use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::Value;

use crate::agent::FailureClass;

/// A failed request.
#[derive(Debug, Clone, PartialEq)]
pub enum ApiError {
    /// 401/403: stop at once.
    Auth { status: u16, message: String },
    /// 429: wait (retry-after) and retry the turn.
    RateLimited {
        message: String,
        retry_after: Option<Duration>,
    },
    /// 5xx, 529, an `overloaded_error` event: bounded backoff.
    Overloaded { status: u16, message: String },
    /// No answer (connection refused, reset, a stream cut short): bounded backoff.
    Unreachable { message: String },
    /// The conversation no longer fits the model's context: end the iteration.
    ContextOverflow { message: String },
    /// Any other refusal (400, 404: a wrong model name): the iteration fails.
    Refused { status: u16, message: String },
    /// The reply grew past what the harness holds: the iteration ends with a note.
    TooLarge { message: String },
}

impl ApiError {
    pub fn class(&self) -> FailureClass {
        match self {
            ApiError::Auth { .. } => FailureClass::Auth,
            ApiError::RateLimited { .. } => FailureClass::RateLimited,
            ApiError::Overloaded { .. } => FailureClass::Overloaded,
            ApiError::Unreachable { .. } => FailureClass::Unreachable,
            ApiError::ContextOverflow { .. }
            | ApiError::Refused { .. }
            | ApiError::TooLarge { .. } => FailureClass::Crashed,
        }
    }

    pub fn status(&self) -> Option<u16> {
        match self {
            ApiError::Auth { status, .. }
            | ApiError::Overloaded { status, .. }
            | ApiError::Refused { status, .. } => Some(*status),
            ApiError::RateLimited { .. } => Some(429),
            _ => None,
        }
    }

    pub fn message(&self) -> &str {
        match self {
            ApiError::Auth { message, .. }
            | ApiError::RateLimited { message, .. }
            | ApiError::Overloaded { message, .. }
            | ApiError::Unreachable { message }
            | ApiError::ContextOverflow { message }
            | ApiError::TooLarge { message }
            | ApiError::Refused { message, .. } => message,
        }
    }

    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ApiError::RateLimited { .. }
                | ApiError::Overloaded { .. }
                | ApiError::Unreachable { .. }
        )
    }

    /// A transport error of reqwest (no status): unreachable.
    pub fn transport(e: &reqwest::Error) -> ApiError {
        let mut message = e.to_string();
        let mut src = std::error::Error::source(e);
        while let Some(s) = src {
            message.push_str(&format!(": {s}"));
            src = s.source();
        }
        ApiError::Unreachable { message }
    }
}

/// The provider's own message in an error body (`{"error":{"message":…}}`), else the
/// body's start.
/// Send `rb` and open its reply as a stream of server-sent events; a status other than
/// success is the provider's error (status, retry headers, message).
pub async fn event_stream(
    rb: reqwest::RequestBuilder,
) -> Result<impl futures_util::Stream<Item = Result<eventsource_stream::Event, ApiError>>, ApiError>
{
    use eventsource_stream::Eventsource;
    use futures_util::StreamExt;
    let resp = rb.send().await.map_err(|e| ApiError::transport(&e))?;
    let status = resp.status().as_u16();
    if !resp.status().is_success() {
        let headers = resp.headers().clone();
        let text = resp.text().await.unwrap_or_default();
        return Err(from_status(status, &headers, &text));
    }
    let mut bound = EventBound::default();
    let bytes = resp.bytes_stream().map(move |chunk| match chunk {
        Err(e) => Err(ApiError::transport(&e)),
        Ok(b) if !bound.feed(&b) => Err(ApiError::TooLarge {
            message: format!(
                "one event of the reply stream passed {} MiB; the rest was not read",
                MAX_EVENT >> 20
            ),
        }),
        Ok(b) => Ok(b),
    });
    Ok(bytes.eventsource().map(|ev| {
        use eventsource_stream::EventStreamError as E;
        ev.map_err(|e| match e {
            E::Transport(e) => e,
            E::Utf8(e) => ApiError::Unreachable {
                message: format!("the reply stream broke: {e}"),
            },
            E::Parser(e) => ApiError::Unreachable {
                message: format!("the reply stream broke: {e}"),
            },
        })
    }))
}

/// The most one server-sent event may hold before its end (the parser buffers it whole).
pub const MAX_EVENT: usize = 8 << 20;

/// Bytes since the last event boundary (an empty line), `\r` not counted.
#[derive(Default)]
struct EventBound {
    run: usize,
    line: usize,
}

impl EventBound {
    /// False once an event passes [`MAX_EVENT`].
    fn feed(&mut self, bytes: &[u8]) -> bool {
        for &c in bytes {
            match c {
                b'\n' => {
                    if self.line == 0 {
                        self.run = 0;
                    }
                    self.line = 0;
                }
                b'\r' => {}
                _ => {
                    self.line += 1;
                    self.run += 1;
                }
            }
        }
        self.run <= MAX_EVENT
    }
}

pub fn error_message(body: &str) -> String {
    let v: Option<Value> = serde_json::from_str(body).ok();
    let from_json = v.as_ref().and_then(|v| {
        let e = v.get("error")?;
        e.get("message")
            .and_then(Value::as_str)
            .map(str::to_string)
            .or_else(|| e.as_str().map(str::to_string))
    });
    from_json.unwrap_or_else(|| body.trim().chars().take(300).collect())
}

fn is_overflow(status: u16, body: &str) -> bool {
    let t = body.to_lowercase();
    matches!(status, 400 | 413)
        && [
            "prompt is too long",
            "context_length_exceeded",
            "maximum context length",
            "context window",
            "too many tokens",
        ]
        .iter()
        .any(|p| t.contains(p))
}

/// A non-success answer as an error.
pub fn from_status(status: u16, headers: &HeaderMap, body: &str) -> ApiError {
    let message = format!("{status}: {}", error_message(body));
    match status {
        401 | 403 => ApiError::Auth { status, message },
        429 => ApiError::RateLimited {
            message,
            retry_after: retry_after(headers),
        },
        408 | 500..=599 => ApiError::Overloaded { status, message },
        s if is_overflow(s, body) => ApiError::ContextOverflow { message },
        _ => ApiError::Refused { status, message },
    }
}

/// How long the server asks to wait: `retry-after` (seconds or an HTTP date), else
/// Anthropic's `anthropic-ratelimit-*-reset` (RFC 3339), else OpenAI's
/// `x-ratelimit-reset-requests`/`-tokens` (`1s`, `6m0s`, `20ms`).
pub fn retry_after(h: &HeaderMap) -> Option<Duration> {
    let get = |k: &str| h.get(k).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(v) = get("retry-after") {
        if let Ok(secs) = v.parse::<f64>()
            && secs.is_finite()
            && secs >= 0.0
        {
            return Some(Duration::from_secs_f64(secs.min(86_400.0)));
        }
        if let Ok(t) = jiff::fmt::rfc2822::parse(v) {
            return Some(until(t.timestamp()));
        }
    }
    for k in [
        "anthropic-ratelimit-requests-reset",
        "anthropic-ratelimit-tokens-reset",
        "anthropic-ratelimit-input-tokens-reset",
        "anthropic-ratelimit-output-tokens-reset",
    ] {
        if let Some(t) = get(k).and_then(|v| v.parse::<jiff::Timestamp>().ok()) {
            return Some(until(t));
        }
    }
    ["x-ratelimit-reset-requests", "x-ratelimit-reset-tokens"]
        .iter()
        .filter_map(|k| get(k).and_then(go_duration))
        .max()
}

fn until(t: jiff::Timestamp) -> Duration {
    let ms = t.as_millisecond() - jiff::Timestamp::now().as_millisecond();
    Duration::from_millis(ms.clamp(0, 86_400_000) as u64)
}

/// `1h2m3.5s`, `20ms`.
fn go_duration(s: &str) -> Option<Duration> {
    let mut total = 0.0;
    let mut num = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() || c == '.' {
            num.push(c);
            continue;
        }
        let n: f64 = num.parse().ok()?;
        num.clear();
        total += match c {
            'h' => n * 3600.0,
            'm' if chars.peek() == Some(&'s') => {
                chars.next();
                n / 1000.0
            }
            'm' => n * 60.0,
            's' => n,
            _ => return None,
        };
    }
    (num.is_empty() && total.is_finite()).then(|| Duration::from_secs_f64(total.min(86_400.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_bounded_until_its_empty_line() {
        let mut b = EventBound::default();
        let big = vec![b'x'; MAX_EVENT / 2];
        assert!(b.feed(b"data: ") && b.feed(&big) && b.feed(b"\r\n\r\n"));
        assert!(b.feed(&big) && b.feed(b"\n") && b.feed(&big));
        assert!(!b.feed(b"xxxxxxxxxx"), "one event of two halves and more");
    }
    use reqwest::header::HeaderValue;

    #[test]
    fn statuses_map_to_the_failure_model() {
        let h = HeaderMap::new();
        let auth = from_status(
            401,
            &h,
            r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#,
        );
        assert_eq!(auth.class(), FailureClass::Auth);
        assert_eq!(auth.message(), "401: invalid x-api-key");
        assert_eq!(from_status(529, &h, "").class(), FailureClass::Overloaded);
        let o = from_status(
            400,
            &h,
            r#"{"error":{"message":"This model's maximum context length is 8192 tokens","code":"context_length_exceeded"}}"#,
        );
        assert!(matches!(o, ApiError::ContextOverflow { .. }));
        assert!(matches!(
            from_status(404, &h, "no such model"),
            ApiError::Refused { .. }
        ));
    }

    #[test]
    fn retry_after_forms() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        let mut h = HeaderMap::new();
        h.insert(
            "x-ratelimit-reset-requests",
            HeaderValue::from_static("1m30s"),
        );
        h.insert("x-ratelimit-reset-tokens", HeaderValue::from_static("20ms"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(90)));
        assert_eq!(go_duration("bad"), None);
    }
}
