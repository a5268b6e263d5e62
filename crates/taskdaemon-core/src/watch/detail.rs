//! A run's iterations, for the watcher's drill-down: one row per iteration from the
//! `summary.csv` of the `.ralph/` directories that hold the run's files.

use std::collections::BTreeMap;
use std::path::Path;

use super::Model;

/// What the iteration's validation said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validation {
    Passed,
    Failed,
    /// No validation command, or not run.
    Skipped,
}

/// One finished iteration of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct IterationRow {
    pub n: u32,
    /// As in `summary.csv`: continue, complete, rejected, interrupted, …
    pub outcome: String,
    pub duration_s: f64,
    /// The run's cost when this iteration ended, when the agent reports cost.
    pub cost_usd: Option<f64>,
    pub validation: Validation,
    /// The commit it made (short), if any.
    pub commit: Option<String>,
}

fn rows_of(csv_path: &Path, id: &str, out: &mut BTreeMap<u32, IterationRow>) {
    let Ok(mut r) = csv::ReaderBuilder::new().flexible(true).from_path(csv_path) else {
        return;
    };
    let Ok(header) = r.headers().cloned() else {
        return;
    };
    let col = |name: &str| header.iter().position(|h| h == name);
    let (Some(run), Some(it)) = (col("run_id"), col("iteration")) else {
        return;
    };
    let cols = [
        "outcome",
        "duration_seconds",
        "cost_usd",
        "validation_passed",
        "commit_hash",
    ]
    .map(col);
    for rec in r.records().flatten() {
        if rec.get(run) != Some(id) {
            continue;
        }
        let Some(n) = rec.get(it).and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let get = |i: usize| cols[i].and_then(|c| rec.get(c)).unwrap_or("").to_string();
        let cost = get(2).parse::<f64>().ok().filter(|c| *c > 0.0);
        let commit = get(4);
        out.insert(
            n,
            IterationRow {
                n,
                outcome: get(0),
                duration_s: get(1).parse().unwrap_or(0.0),
                cost_usd: cost,
                validation: match get(3).as_str() {
                    "true" => Validation::Passed,
                    "false" => Validation::Failed,
                    _ => Validation::Skipped,
                },
                commit: (!commit.is_empty()).then(|| commit.chars().take(10).collect()),
            },
        );
    }
}

impl Model {
    /// Run `id`'s finished iterations, in order (none when its files are not found).
    pub fn iterations(&self, id: &str) -> Vec<IterationRow> {
        let Some(dir) = self.runs.get(id).and_then(|r| r.workdir.as_ref()) else {
            return Vec::new();
        };
        let mut out = BTreeMap::new();
        // The worktree's own file last: it is the newest when both are there.
        for ralph in super::logs::ralph_dirs(self.kept_logs.as_deref(), dir) {
            rows_of(&ralph.join("logs/summary.csv"), id, &mut out);
        }
        out.into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_iterations_come_from_its_rows_of_summary_csv() {
        let d = tempfile::tempdir().unwrap();
        let logs = d.path().join(".ralph/logs");
        std::fs::create_dir_all(&logs).unwrap();
        std::fs::write(
            logs.join("summary.csv"),
            "iteration,duration_seconds,commit_hash,run_id,outcome,validation_passed,cost_usd\n\
             1,2.5,abcdef1234567,r1,continue,false,0.10\n\
             1,1.0,,other,complete,true,0\n\
             2,3.0,,r1,complete,true,0.25\n\
             2,9.0,,r1,complete,skipped,\n",
        )
        .unwrap();
        let mut m = Model::default();
        m.run_mut("r1").workdir = Some(d.path().to_path_buf());
        let rows = m.iterations("r1");
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert_eq!(rows[0].outcome, "continue");
        assert_eq!(rows[0].validation, Validation::Failed);
        assert_eq!(rows[0].commit.as_deref(), Some("abcdef1234"));
        assert_eq!(rows[0].cost_usd, Some(0.10));
        // A row written again (the iteration done again) replaces the first.
        assert_eq!(rows[1].duration_s, 9.0);
        assert_eq!(rows[1].cost_usd, None);
        assert!(m.iterations("nobody").is_empty());
    }
}
