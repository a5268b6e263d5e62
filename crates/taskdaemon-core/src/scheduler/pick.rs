//! Which pending runs start now: deps complete, highest priority first, then the oldest,
//! within `max-loops` and the per-agent limits.

use std::collections::{BTreeMap, HashSet};

use taskstore::Filter;

use super::runs;
use crate::store::{LoopRun, Records, Result};

pub const DEFAULT_MAX_LOOPS: usize = 4;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    pub max_loops: usize,
    /// Per agent kind (`claude`, `codex`, `cmd`, …).
    pub per_agent: BTreeMap<String, usize>,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_loops: DEFAULT_MAX_LOOPS,
            per_agent: BTreeMap::new(),
        }
    }
}

/// The pending runs to start now. `running` are the runs active in this daemon with their
/// agent kind; `agent_of` tells a pending run's agent kind; `held` are runs that must not
/// start (e.g. their worktree is busy).
pub fn pick(
    records: &Records,
    running: &BTreeMap<String, String>,
    limits: &Limits,
    agent_of: &dyn Fn(&LoopRun) -> String,
    held: &HashSet<String>,
) -> Result<Vec<LoopRun>> {
    let mut free = limits.max_loops.saturating_sub(running.len());
    if free == 0 {
        return Ok(Vec::new());
    }
    let mut per_agent: BTreeMap<String, usize> = BTreeMap::new();
    for a in running.values() {
        *per_agent.entry(a.clone()).or_default() += 1;
    }
    let mut pending = runs(records, &[Filter::eq("status", "pending")])?;
    // Priority (higher first), then age (list order is oldest first; the sort is stable).
    pending.sort_by(|a, b| b.priority.cmp(&a.priority));
    let mut out = Vec::new();
    for run in pending {
        if free == 0 {
            break;
        }
        if running.contains_key(&run.id) || held.contains(&run.id) {
            continue;
        }
        if !records
            .readiness(&crate::store::AnyRecord::Run(run.clone()))?
            .ready
        {
            continue;
        }
        let agent = agent_of(&run);
        if let Some(limit) = limits.per_agent.get(&agent) {
            let n = per_agent.entry(agent.clone()).or_default();
            if *n >= *limit {
                continue;
            }
            *n += 1;
        } else {
            *per_agent.entry(agent).or_default() += 1;
        }
        free -= 1;
        out.push(run);
    }
    Ok(out)
}
