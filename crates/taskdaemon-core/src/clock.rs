//! Wall-clock time for records. `TASKDAEMON_NOW` (RFC 3339) fixes it, for tests.
//! Durations are always measured with the monotonic clock, never with this one.

use jiff::Timestamp;

pub fn now() -> Timestamp {
    std::env::var("TASKDAEMON_NOW")
        .ok()
        .and_then(|s| s.parse::<Timestamp>().ok())
        .unwrap_or_else(Timestamp::now)
}

/// `2026-11-21T12:00:00Z`: seconds precision, UTC.
pub fn rfc3339(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

pub fn now_rfc3339() -> String {
    rfc3339(now())
}
