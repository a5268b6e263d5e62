//! Guards against waste: the stuck counter (no new commit) and budgets (iterations,
//! runtime, cost).

use std::time::Duration;

/// Consecutive iterations with the same tool-call signature, after one with `signature`
/// (`None`: no tool calls, which never counts as a stall).
pub fn next_stall_count(previous: Option<&str>, count: u32, signature: Option<&str>) -> u32 {
    match signature {
        None => 0,
        Some(s) if previous == Some(s) => count + 1,
        Some(_) => 1,
    }
}

/// The stuck count after an iteration: reset by a new commit, raised otherwise. A timed-out
/// iteration is no progress whatever it committed.
pub fn next_stuck_count(
    current: u32,
    head_before: Option<&str>,
    head_after: Option<&str>,
    timed_out: bool,
) -> u32 {
    if !timed_out && head_after.is_some() && head_after != head_before {
        0
    } else {
        current + 1
    }
}

/// Whether `stuck` consecutive iterations without progress end the loop (`max` 0: never).
pub fn is_stuck(stuck: u32, max: u32) -> bool {
    max > 0 && stuck >= max
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Limit {
    MaxIterations,
    MaxRuntime,
    MaxCost,
}

impl Limit {
    pub fn describe(self) -> &'static str {
        match self {
            Limit::MaxIterations => "max iterations",
            Limit::MaxRuntime => "max runtime",
            Limit::MaxCost => "max cost",
        }
    }

    pub fn flag(self) -> &'static str {
        match self {
            Limit::MaxIterations => "--max-iterations",
            Limit::MaxRuntime => "--max-runtime",
            Limit::MaxCost => "--max-cost",
        }
    }
}

/// The first budget that is used up after `iteration` iterations, `elapsed` time and
/// `cost` dollars.
pub fn limit_reached(
    iteration: u32,
    max_iterations: u32,
    elapsed: Duration,
    max_runtime: Option<Duration>,
    cost: f64,
    max_cost: Option<f64>,
) -> Option<Limit> {
    if iteration >= max_iterations {
        return Some(Limit::MaxIterations);
    }
    if max_runtime.is_some_and(|m| elapsed >= m) {
        return Some(Limit::MaxRuntime);
    }
    if max_cost.is_some_and(|m| cost >= m) {
        return Some(Limit::MaxCost);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_resets_and_no_commit_raises() {
        assert_eq!(next_stuck_count(2, Some("a"), Some("b"), false), 0);
        assert_eq!(next_stuck_count(2, Some("a"), Some("a"), false), 3);
        assert_eq!(next_stuck_count(0, None, None, false), 1);
        assert_eq!(next_stuck_count(0, None, Some("a"), false), 0);
        assert_eq!(next_stuck_count(1, Some("a"), Some("b"), true), 2);
    }

    #[test]
    fn stuck_zero_disables() {
        assert!(!is_stuck(100, 0));
        assert!(is_stuck(3, 3));
    }

    #[test]
    fn limits_in_order() {
        let d = Duration::from_secs;
        assert_eq!(
            limit_reached(5, 5, d(0), None, 0.0, None),
            Some(Limit::MaxIterations)
        );
        assert_eq!(
            limit_reached(1, 5, d(10), Some(d(10)), 0.0, None),
            Some(Limit::MaxRuntime)
        );
        assert_eq!(
            limit_reached(1, 5, d(1), Some(d(10)), 2.0, Some(1.5)),
            Some(Limit::MaxCost)
        );
        assert_eq!(limit_reached(1, 5, d(1), Some(d(10)), 1.0, Some(1.5)), None);
    }

    #[test]
    fn stall_counts_identical_signatures_in_a_row() {
        assert_eq!(next_stall_count(None, 0, Some("a")), 1);
        assert_eq!(next_stall_count(Some("a"), 1, Some("a")), 2);
        assert_eq!(next_stall_count(Some("a"), 2, Some("b")), 1);
        assert_eq!(next_stall_count(Some("a"), 2, None), 0);
    }
}
