//! Which pending runs start now: deps complete, highest priority first, then the oldest,
//! within `max-loops` and the per-agent limits.
//!
//! It runs on every scheduling pass, so it reads the store's lines without decoding whole
//! records: whether a dep is complete comes from the status index (one lookup per dep), and
//! of each pending run only the fields that decide are read. Only the runs chosen are
//! decoded in full.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Deserialize;
use taskstore::Filter;

use crate::store::{AnyRecord, Kind, LoopRun, Records, Result};

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

/// What scheduling needs of a pending run's line.
#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Head {
    id: String,
    #[serde(default)]
    deps: Vec<String>,
    #[serde(default)]
    priority: i64,
    #[serde(default)]
    created_at: i64,
    #[serde(default)]
    context: HeadContext,
}

#[derive(Deserialize, Default)]
struct HeadContext {
    #[serde(default)]
    agent: Option<String>,
}

/// The pending runs to start now. `running` are the runs active in this daemon with their
/// agent kind; `agent_of` gives the agent kind of a run's `agent` context value (none: the
/// default); `held` are runs that must not start.
pub fn pick(
    records: &Records,
    running: &BTreeMap<String, String>,
    limits: &Limits,
    agent_of: &dyn Fn(Option<&str>) -> String,
    held: &HashSet<String>,
) -> Result<Vec<LoopRun>> {
    let mut free = limits.max_loops.saturating_sub(running.len());
    if free == 0 {
        return Ok(Vec::new());
    }
    let store = records.store();
    let pending_filter = [Filter::eq("status", "pending")];
    let mut heads: Vec<Head> = store
        .list_raw(Kind::Run.collection(), &pending_filter)?
        .into_iter()
        .filter_map(|(_, line)| serde_json::from_slice::<Head>(&line).ok())
        .collect();
    if heads.is_empty() {
        return Ok(Vec::new());
    }
    let done = taskstore::IndexValue::Str("complete".into());
    let mut complete: HashMap<String, bool> = HashMap::new();
    let mut is_complete = |id: &str| -> Result<bool> {
        if let Some(known) = complete.get(id) {
            return Ok(*known);
        }
        let kinds: Vec<Kind> = match crate::store::ids::kind_of(id) {
            Some(k) => vec![k],
            None => Kind::ALL.to_vec(),
        };
        let mut yes = false;
        for k in kinds {
            yes |= store.value_of(k.collection(), id, "status")?.as_ref() == Some(&done);
        }
        complete.insert(id.to_string(), yes);
        Ok(yes)
    };
    // Priority (higher first), then age, then id.
    heads.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then(a.created_at.cmp(&b.created_at))
            .then_with(|| a.id.cmp(&b.id))
    });
    let mut per_agent: BTreeMap<String, usize> = BTreeMap::new();
    for a in running.values() {
        *per_agent.entry(a.clone()).or_default() += 1;
    }
    let mut out = Vec::new();
    for head in heads {
        if free == 0 {
            break;
        }
        if running.contains_key(&head.id) || held.contains(&head.id) {
            continue;
        }
        let mut ready = true;
        for d in &head.deps {
            if !is_complete(d)? {
                ready = false;
                break;
            }
        }
        if !ready {
            continue;
        }
        let agent = agent_of(head.context.agent.as_deref());
        let n = per_agent.entry(agent.clone()).or_default();
        if limits
            .per_agent
            .get(&agent)
            .is_some_and(|limit| *n >= *limit)
        {
            continue;
        }
        let Some(AnyRecord::Run(run)) = records.get(&head.id)? else {
            continue;
        };
        *n += 1;
        free -= 1;
        out.push(run);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::store::{NewRun, RunStatus};

    fn run(
        r: &mut Records,
        name: &str,
        deps: &[&str],
        priority: i64,
        agent: Option<&str>,
        at: i64,
    ) -> String {
        let context = Box::new(crate::scheduler::context::RunContext {
            agent: agent.map(str::to_string),
            ..Default::default()
        });
        r.create_run(
            NewRun {
                loop_type: "ralph".into(),
                name: Some(name.into()),
                deps: deps.iter().map(|d| d.to_string()).collect(),
                priority,
                context,
                ..NewRun::default()
            },
            at,
        )
        .unwrap()
        .id
    }

    fn kind(a: Option<&str>) -> String {
        a.map(|a| a.split(':').next().unwrap_or(a).to_string())
            .unwrap_or_else(|| "claude".into())
    }

    #[test]
    fn ready_runs_by_priority_then_age_within_the_limits() {
        let d = tempfile::tempdir().unwrap();
        let mut r = Records::open(d.path()).unwrap();
        let old = run(&mut r, "old", &[], 0, None, 1);
        let young = run(&mut r, "young", &[], 0, None, 2);
        let urgent = run(&mut r, "urgent", &[], 5, Some("cmd:x"), 3);
        let waiting = run(&mut r, "waiting", &[&old], 9, None, 4);
        let ids = |v: Vec<LoopRun>| v.into_iter().map(|r| r.id).collect::<Vec<_>>();
        let none = BTreeMap::new();
        let limits = Limits {
            max_loops: 3,
            per_agent: BTreeMap::new(),
        };
        assert_eq!(
            ids(pick(&r, &none, &limits, &kind, &HashSet::new()).unwrap()),
            vec![urgent.clone(), old.clone(), young.clone()],
            "priority first, then age; `waiting` waits for its dep"
        );
        // One slot in use: two free.
        let busy = BTreeMap::from([("x".to_string(), "claude".to_string())]);
        assert_eq!(
            ids(pick(&r, &busy, &limits, &kind, &HashSet::new()).unwrap()).len(),
            2
        );
        // At most one claude at a time, and one is running: only the cmd agent starts.
        let limits = Limits {
            max_loops: 8,
            per_agent: BTreeMap::from([("claude".to_string(), 1)]),
        };
        assert_eq!(
            ids(pick(&r, &busy, &limits, &kind, &HashSet::new()).unwrap()),
            vec![urgent.clone()]
        );
        // Its dep complete, `waiting` comes first (priority 9).
        let Some(AnyRecord::Run(mut o)) = r.get(&old).unwrap() else {
            panic!()
        };
        o.status = RunStatus::Complete;
        r.update(AnyRecord::Run(o), 5).unwrap();
        let limits = Limits {
            max_loops: 8,
            per_agent: BTreeMap::new(),
        };
        let held = HashSet::from([young.clone()]);
        assert_eq!(
            ids(pick(&r, &none, &limits, &kind, &held).unwrap()),
            vec![waiting, urgent]
        );
    }
}
