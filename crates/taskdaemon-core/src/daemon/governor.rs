//! The quota governor: loops of one process (the daemon's) that use the same agent and
//! account share it. The first usage limit (or `--pause-at-usage` pause) pauses every loop
//! on that account at its next iteration boundary — no new agent starts — and after the
//! reset they restart staggered, a few seconds apart, not all at once.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, OnceLock};

use serde::Serialize;

/// Seconds between two loops' restarts after a reset.
pub const STAGGER_SECS: i64 = 3;

/// One account's pause.
#[derive(Debug, Clone, Serialize)]
pub struct Pause {
    /// When the limit resets (unix seconds).
    pub until: i64,
    /// What paused it: the agent's line and which run hit it.
    pub reason: String,
    /// Restart slots handed out: run id → its restart time (unix seconds).
    pub slots: BTreeMap<String, i64>,
}

#[derive(Debug, Default)]
pub struct Governor {
    accounts: Mutex<HashMap<String, Pause>>,
}

/// The process's governor (a daemon's loops run in one process).
pub fn global() -> &'static Governor {
    static G: OnceLock<Governor> = OnceLock::new();
    G.get_or_init(Governor::default)
}

/// The account an agent runs as: the agent and the variables that choose its credentials.
pub fn account_key(agent: &str) -> String {
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let home = ["CLAUDE_CONFIG_DIR", "CODEX_HOME", "HOME"]
        .iter()
        .map(|k| var(k))
        .collect::<Vec<_>>()
        .join(":");
    format!("{agent}@{home}")
}

impl Governor {
    fn accounts(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pause>> {
        self.accounts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A loop on `account` hit the limit (or paused before it) until `until`.
    pub fn pause(&self, account: &str, until: i64, reason: String) {
        let mut a = self.accounts();
        match a.get_mut(account) {
            Some(p) if p.until >= until => {}
            Some(p) => {
                p.until = until;
                p.reason = reason;
                p.slots.clear();
            }
            None => {
                a.insert(
                    account.to_string(),
                    Pause {
                        until,
                        reason,
                        slots: BTreeMap::new(),
                    },
                );
            }
        }
    }

    /// At an iteration boundary of `run`: the time it may start its next agent, when the
    /// account is paused (its own restart slot: the reset plus a stagger per loop), else None.
    pub fn gate(&self, account: &str, run: &str, now: i64) -> Option<(i64, String)> {
        let mut a = self.accounts();
        let p = a.get_mut(account)?;
        if let Some(&slot) = p.slots.get(run) {
            if now >= slot {
                p.slots.remove(run);
                if p.slots.is_empty() && now >= p.until {
                    a.remove(account);
                }
                return None;
            }
            return Some((slot, p.reason.clone()));
        }
        if now >= p.until {
            if p.slots.is_empty() {
                a.remove(account);
            }
            return None;
        }
        let slot = p.until + STAGGER_SECS * p.slots.len() as i64;
        p.slots.insert(run.to_string(), slot);
        Some((slot, p.reason.clone()))
    }

    /// Every paused account as `status --json` shows it: a list of `{account, until,
    /// reason, restarts: [{run, at}]}`, times RFC 3339 (docs/json.md).
    pub fn status(&self) -> serde_json::Value {
        let at = |secs: i64| {
            jiff::Timestamp::from_second(secs)
                .map(crate::json::time)
                .ok()
        };
        self.snapshot()
            .into_iter()
            .map(|(account, p)| {
                let restarts: Vec<serde_json::Value> = p
                    .slots
                    .iter()
                    .map(|(run, secs)| serde_json::json!({"run": run, "at": at(*secs)}))
                    .collect();
                serde_json::json!({
                    "account": account,
                    "until": at(p.until),
                    "reason": p.reason,
                    "restarts": restarts,
                })
            })
            .collect()
    }

    /// Every paused account (for `status`).
    pub fn snapshot(&self) -> BTreeMap<String, Pause> {
        self.accounts()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_limit_pauses_every_loop_and_they_restart_staggered() {
        let g = Governor::default();
        assert_eq!(g.gate("acct", "a", 100), None);
        g.pause("acct", 200, "limit hit by a".into());
        let (sa, _) = g.gate("acct", "a", 110).unwrap();
        let (sb, why) = g.gate("acct", "b", 111).unwrap();
        assert_eq!((sa, sb), (200, 200 + STAGGER_SECS));
        assert_eq!(why, "limit hit by a");
        // Asking again keeps the slot; another account is not paused.
        assert_eq!(g.gate("acct", "b", 150).unwrap().0, sb);
        assert_eq!(g.gate("other", "c", 150), None);
        // After its slot each loop goes on; then the pause is gone.
        assert_eq!(g.gate("acct", "a", 200), None);
        assert_eq!(g.gate("acct", "b", 202).unwrap().0, sb);
        assert_eq!(g.gate("acct", "b", 203), None);
        assert!(g.snapshot().is_empty());
        assert_eq!(g.gate("acct", "a", 204), None);
    }

    #[test]
    fn a_later_reset_extends_the_pause() {
        let g = Governor::default();
        g.pause("acct", 200, "first".into());
        g.pause("acct", 150, "earlier".into());
        assert_eq!(g.snapshot()["acct"].until, 200);
        g.pause("acct", 300, "weekly".into());
        assert_eq!(g.gate("acct", "a", 100).unwrap(), (300, "weekly".into()));
    }
}
