//! One request scheduler per process (the daemon's, or a foreground run's): every API
//! agent's request waits here for its provider's lane — requests in flight, requests
//! started in the last 60 seconds, tokens used in the last 60 seconds — so all loops of a
//! daemon share the limits of the config. [`status`] is its state for `daemon status`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::settings::{DEFAULT_MAX_CONCURRENT, ProviderSettings};

/// The window of `requests-per-minute` and `tokens-per-minute`.
pub const WINDOW: Duration = Duration::from_secs(60);
/// How long a request is counted: the window and a second more, so that a server, which
/// sees a request a little after it was let go (and another sooner), also counts at most
/// the limit in any 60 seconds.
const HELD: Duration = Duration::from_secs(61);

/// One lane's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Limits {
    pub max_concurrent: u32,
    pub requests_per_minute: Option<u32>,
    pub tokens_per_minute: Option<u64>,
}

impl Limits {
    pub fn of(s: &ProviderSettings) -> Limits {
        Limits {
            max_concurrent: s.max_concurrent.unwrap_or(DEFAULT_MAX_CONCURRENT).max(1),
            requests_per_minute: s.requests_per_minute.filter(|n| *n > 0),
            tokens_per_minute: s.tokens_per_minute.filter(|n| *n > 0),
        }
    }
}

#[derive(Debug)]
struct LaneState {
    limits: Limits,
    in_flight: u32,
    waiting: u32,
    started: VecDeque<Instant>,
    tokens: VecDeque<(Instant, u64)>,
    total_requests: u64,
    total_tokens: u64,
}

impl LaneState {
    fn prune(&mut self, now: Instant) {
        while self
            .started
            .front()
            .is_some_and(|t| now.duration_since(*t) >= HELD)
        {
            self.started.pop_front();
        }
        while self
            .tokens
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t) >= HELD)
        {
            self.tokens.pop_front();
        }
    }

    fn tokens_in_window(&self) -> u64 {
        self.tokens.iter().map(|(_, n)| n).sum()
    }

    /// `Ok` when a request may start now, else the instant to look again (None: when a
    /// request in flight ends).
    fn admit(&mut self, now: Instant) -> Result<(), Option<Instant>> {
        self.prune(now);
        if self.in_flight >= self.limits.max_concurrent {
            return Err(None);
        }
        if let Some(rpm) = self.limits.requests_per_minute
            && self.started.len() >= rpm as usize
        {
            return Err(self.started.front().map(|t| *t + HELD));
        }
        if let Some(tpm) = self.limits.tokens_per_minute
            && self.tokens_in_window() >= tpm
        {
            return Err(self.tokens.front().map(|(t, _)| *t + HELD));
        }
        self.in_flight += 1;
        self.started.push_back(now);
        self.total_requests += 1;
        Ok(())
    }
}

#[derive(Debug)]
struct Lane {
    state: Mutex<LaneState>,
    freed: Notify,
}

impl Lane {
    fn lock(&self) -> std::sync::MutexGuard<'_, LaneState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A started request; dropping it frees its place.
#[derive(Debug)]
pub struct Permit {
    lane: Arc<Lane>,
}

impl Permit {
    /// The tokens the request used (for tokens-per-minute).
    pub fn used(&self, tokens: u64) {
        let mut s = self.lane.lock();
        s.tokens.push_back((Instant::now(), tokens));
        s.total_tokens += tokens;
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.lane.lock().in_flight -= 1;
        self.lane.freed.notify_waiters();
    }
}

fn lanes() -> &'static Mutex<BTreeMap<String, Arc<Lane>>> {
    static LANES: OnceLock<Mutex<BTreeMap<String, Arc<Lane>>>> = OnceLock::new();
    LANES.get_or_init(Default::default)
}

fn lane(key: &str, limits: Limits) -> Arc<Lane> {
    let mut map = lanes().lock().unwrap_or_else(|e| e.into_inner());
    let lane = map.entry(key.to_string()).or_insert_with(|| {
        Arc::new(Lane {
            state: Mutex::new(LaneState {
                limits,
                in_flight: 0,
                waiting: 0,
                started: VecDeque::new(),
                tokens: VecDeque::new(),
                total_requests: 0,
                total_tokens: 0,
            }),
            freed: Notify::new(),
        })
    });
    // The latest run's settings apply (a daemon reads one config).
    lane.lock().limits = limits;
    lane.clone()
}

/// Wait for a place in `key`'s lane (`provider base-url`). `None` when cancelled first.
pub async fn acquire(key: &str, limits: Limits, cancel: &CancellationToken) -> Option<Permit> {
    let lane = lane(key, limits);
    lane.lock().waiting += 1;
    let got = loop {
        let freed = lane.freed.notified();
        tokio::pin!(freed);
        freed.as_mut().enable();
        let wake = match lane.lock().admit(Instant::now()) {
            Ok(()) => break true,
            Err(w) => w,
        };
        let sleep = async {
            match wake {
                Some(t) => tokio::time::sleep_until(t.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = freed => {}
            _ = sleep => {}
            _ = cancel.cancelled() => break false,
        }
    };
    lane.lock().waiting -= 1;
    got.then(|| Permit { lane })
}

/// One lane as `daemon status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct LaneStatus {
    /// `anthropic https://api.anthropic.com`.
    pub lane: String,
    pub in_flight: u32,
    pub waiting: u32,
    pub requests_last_minute: u32,
    pub tokens_last_minute: u64,
    pub max_concurrent: u32,
    pub requests_per_minute: Option<u32>,
    pub tokens_per_minute: Option<u64>,
    pub total_requests: u64,
    pub total_tokens: u64,
}

/// Every lane used so far in this process.
pub fn status() -> Vec<LaneStatus> {
    let map = lanes().lock().unwrap_or_else(|e| e.into_inner());
    let now = Instant::now();
    map.iter()
        .map(|(key, lane)| {
            let mut s = lane.lock();
            s.prune(now);
            LaneStatus {
                lane: key.clone(),
                in_flight: s.in_flight,
                waiting: s.waiting,
                requests_last_minute: s.started.len() as u32,
                tokens_last_minute: s.tokens_in_window(),
                max_concurrent: s.limits.max_concurrent,
                requests_per_minute: s.limits.requests_per_minute,
                tokens_per_minute: s.limits.tokens_per_minute,
                total_requests: s.total_requests,
                total_tokens: s.total_tokens,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admit_counts_requests_in_the_window() {
        let mut s = LaneState {
            limits: Limits {
                max_concurrent: 10,
                requests_per_minute: Some(2),
                tokens_per_minute: None,
            },
            in_flight: 0,
            waiting: 0,
            started: VecDeque::new(),
            tokens: VecDeque::new(),
            total_requests: 0,
            total_tokens: 0,
        };
        let t0 = Instant::now();
        assert!(s.admit(t0).is_ok());
        assert!(s.admit(t0).is_ok());
        assert_eq!(s.admit(t0), Err(Some(t0 + HELD)));
        assert!(s.admit(t0 + WINDOW).is_err(), "a second's margin");
        s.in_flight = 0;
        assert!(s.admit(t0 + HELD).is_ok(), "the window moved on");
        s.limits.max_concurrent = 1;
        assert_eq!(s.admit(t0 + HELD), Err(None));
    }
}
