//! Whole-store checks of the relations between records: parents and deps that name
//! nothing (a merge or a hand edit can do that), and dependency cycles (two branches can
//! each add one edge of a cycle; each edge was fine on its own branch).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::{Kind, Records, Result};

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GraphIssue {
    pub id: String,
    pub problem: String,
}

impl Records {
    pub fn check_graph(&self) -> Result<Vec<GraphIssue>> {
        let mut deps: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut issues = Vec::new();
        let mut live: BTreeSet<String> = BTreeSet::new();
        for k in Kind::ALL {
            for id in self.store().ids(k.collection())? {
                live.insert(id.to_string());
            }
        }
        for k in Kind::ALL {
            for r in self.list(k, &[])? {
                if let Some(p) = r.parent()
                    && !live.contains(p)
                {
                    issues.push(GraphIssue {
                        id: r.id().to_string(),
                        problem: format!("parent {p} does not exist"),
                    });
                }
                for d in r.deps() {
                    if !live.contains(d) {
                        issues.push(GraphIssue {
                            id: r.id().to_string(),
                            problem: format!(
                                "dep {d} does not exist (the record can never be ready)"
                            ),
                        });
                    }
                }
                deps.insert(r.id().to_string(), r.deps().to_vec());
                // A record may come from another clone: its paths must stay inside.
                for (field, path) in r.paths() {
                    if let Err(why) = super::paths::inside(&path, self.project()) {
                        issues.push(GraphIssue {
                            id: r.id().to_string(),
                            problem: format!("{field}: {why}"),
                        });
                    }
                }
            }
        }
        for cycle in cycles(&deps) {
            issues.push(GraphIssue {
                id: cycle[0].clone(),
                problem: format!("dependency cycle: {}", cycle.join(" -> ")),
            });
        }
        Ok(issues)
    }
}

/// Each cycle once (found by depth-first search; a cycle is reported from the first of
/// its records the search reaches).
fn cycles(deps: &BTreeMap<String, Vec<String>>) -> Vec<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    let mut mark: BTreeMap<&str, Mark> = BTreeMap::new();
    let mut found = Vec::new();
    for start in deps.keys() {
        if mark.contains_key(start.as_str()) {
            continue;
        }
        // (node, index of the next dep to visit)
        let mut path: Vec<(&str, usize)> = vec![(start, 0)];
        mark.insert(start, Mark::Open);
        while let Some((node, i)) = path.last().copied() {
            let next = deps.get(node).and_then(|d| d.get(i));
            match next {
                None => {
                    mark.insert(node, Mark::Done);
                    path.pop();
                }
                Some(n) => {
                    if let Some(top) = path.last_mut() {
                        top.1 += 1;
                    }
                    match mark.get(n.as_str()) {
                        Some(Mark::Open) => {
                            let from = path.iter().position(|(p, _)| *p == n).unwrap_or(0);
                            let mut c: Vec<String> =
                                path[from..].iter().map(|(p, _)| p.to_string()).collect();
                            c.push(n.clone());
                            found.push(c);
                        }
                        Some(Mark::Done) => {}
                        None if deps.contains_key(n) => {
                            mark.insert(n, Mark::Open);
                            path.push((n, 0));
                        }
                        None => {}
                    }
                }
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_each_cycle() {
        let g: BTreeMap<String, Vec<String>> = [
            ("a", vec!["b"]),
            ("b", vec!["c"]),
            ("c", vec!["a"]),
            ("d", vec!["a", "d"]),
            ("e", vec![]),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
        .collect();
        assert_eq!(cycles(&g), [vec!["a", "b", "c", "a"], vec!["d", "d"]]);
    }
}
