//! The evidence of a work list's task (issue 36), the same baseline the engine keeps for a
//! run: recorded when the task's first attempt starts (its Verify command's sources and one
//! run of it for the tests it runs, the test files), kept in the user's state directory so
//! a rerun of `implement` judges by the same record, and compared at every claim of the task — a
//! sixth verification layer. A task whose **Files** names a test file may change it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::WorklistError;
use super::tasks_md::Task;
use super::verify::Failure;
use crate::gates::evidence::{Baseline, Capture, Finding, TallyLines, compare, runners};
use crate::gates::{Validation, run_validation};
use crate::git::Git;

/// The layer number of the evidence's failures.
pub const LAYER: u8 = 6;

/// How the Verify command is run for the baseline.
pub struct VerifyRun<'a> {
    pub timeout: Option<std::time::Duration>,
    pub grace: std::time::Duration,
    pub sandbox: &'a crate::sandbox::SandboxPlan,
    pub cancel: &'a CancellationToken,
}

/// The baselines of a work list's tasks.
pub struct TaskEvidence {
    repo: PathBuf,
    dir: PathBuf,
    /// The work list's name in file names (`implement-NAME`, `stories`).
    list: String,
    /// `--allow-test-changes`.
    pub allow: bool,
    known: Mutex<HashMap<String, Arc<Baseline>>>,
    /// The task a resumed run was in: only its saved baseline is read back (one an agent
    /// left for a later task is not).
    resumed: Option<String>,
}

impl TaskEvidence {
    pub fn new(
        repo: &Path,
        list: &str,
        allow: bool,
        resumed: Option<String>,
    ) -> Result<TaskEvidence, WorklistError> {
        let facts = Git::new(repo).facts()?;
        Ok(TaskEvidence {
            repo: facts.toplevel.clone(),
            dir: crate::gates::evidence::evidence_dir(&facts.git_dir),
            list: list.replace(|c: char| !c.is_ascii_alphanumeric() && c != '-', "_"),
            allow,
            known: Mutex::new(HashMap::new()),
            resumed,
        })
    }

    fn path(&self, id: &str) -> PathBuf {
        let id = id.replace(|c: char| !c.is_ascii_alphanumeric() && c != '.', "_");
        self.dir.join(format!("{}-{id}.json", self.list))
    }

    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Baseline>>> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The task's baseline: kept from an earlier attempt, else recorded now (with one run
    /// of its Verify command). Returns a note when a saved one was set aside because the
    /// task's Verify command is no longer the one it was recorded for (a person changed it
    /// between runs).
    pub async fn before(
        &self,
        task: &Task,
        run: &VerifyRun<'_>,
    ) -> Result<Option<String>, WorklistError> {
        if self.known().contains_key(&task.id) {
            return Ok(None);
        }
        let path = self.path(&task.id);
        let verify = task.verify_command();
        let mut note = None;
        if self.resumed.as_deref() == Some(task.id.as_str())
            && let Ok(Some(b)) = Baseline::load(&path)
        {
            if b.validate == verify {
                self.known().insert(task.id.clone(), Arc::new(b));
                return Ok(None);
            }
            note = Some(format!(
                "task {}: its Verify command is not the one its evidence was recorded for (`{}`, now `{}`): recorded again",
                task.id,
                b.validate.as_deref().unwrap_or(""),
                verify.as_deref().unwrap_or("")
            ));
        }
        let files = named_files(task);
        let mut b = Baseline::capture(&Capture {
            top: &self.repo,
            workdir: &self.repo,
            validate: verify.as_deref(),
            task: task.fields.do_.as_deref().unwrap_or(&task.title),
            also_allowed: &files,
        })?;
        if let Some(cmd) = &verify
            && b.has_evidence()
        {
            b.tally = self.tally(cmd, run).await?;
        }
        // Not kept is no loss: a rerun records it again.
        let _ = b.save(&path);
        self.known().insert(task.id.clone(), Arc::new(b));
        Ok(note)
    }

    async fn tally(
        &self,
        cmd: &str,
        run: &VerifyRun<'_>,
    ) -> Result<Option<runners::Tally>, WorklistError> {
        let mut lines = TallyLines::default();
        run_validation(
            Validation {
                command: cmd,
                dir: &self.repo,
                env: Vec::new(),
                success_exit_code: 0,
                timeout: run.timeout,
                grace: run.grace,
                sandbox: run.sandbox,
            },
            run.cancel,
            |l| lines.push(l),
        )
        .await
        .map_err(WorklistError::io(&self.repo))?;
        Ok(lines.tally())
    }

    /// A baseline of the test files alone (no Verify command), kept in memory: a `stories`
    /// run's, recorded when it starts.
    pub fn record(&self, id: &str, text: &str) -> Result<(), WorklistError> {
        let b = Baseline::capture(&Capture {
            top: &self.repo,
            workdir: &self.repo,
            validate: None,
            task: text,
            also_allowed: &[],
        })?;
        self.known().insert(id.to_string(), Arc::new(b));
        Ok(())
    }

    /// The claim of `id` in `tree` against its baseline: layer-6 failures (none with
    /// `--allow-test-changes`: then the findings are the warnings returned).
    /// `verify` is the Verify command that ran now and its output (`None`: none).
    pub fn check(
        &self,
        id: &str,
        tree: &Path,
        verify: Option<(&str, &str)>,
    ) -> (Vec<Failure>, Vec<String>) {
        let Some(b) = self.known().get(id).cloned() else {
            return (Vec::new(), Vec::new());
        };
        let tally = verify.and_then(|(_, output)| runners::tally(output));
        let mut findings = compare(&b, tree, tree, tally);
        let (then, now) = (b.validate.as_deref(), verify.map(|(cmd, _)| cmd));
        if b.has_evidence() && then != now {
            findings.insert(
                0,
                Finding {
                    path: "tasks.md".into(),
                    message: format!(
                        "the Verify command of {id} changed since the task started: it was `{}`, now `{}`; the task is judged by the command it started with: restore it",
                        then.unwrap_or(""),
                        now.unwrap_or("")
                    ),
                    diff: None,
                },
            );
        }
        if self.allow {
            let warnings = findings
                .into_iter()
                .map(|f| {
                    format!(
                        "{id}: evidence changed (allowed by --allow-test-changes): {}",
                        f.message
                    )
                })
                .collect();
            return (Vec::new(), warnings);
        }
        let failures = findings
            .into_iter()
            .map(|f| Failure {
                layer: LAYER,
                message: match f.diff {
                    Some(d) => format!("{}\n```diff\n{d}```", f.message),
                    None => f.message,
                },
            })
            .collect();
        (failures, Vec::new())
    }

    /// What the agent of `id` is told once about its fixed evidence (empty: nothing kept).
    pub fn rules(&self, id: &str) -> String {
        self.known().get(id).map(|b| b.rules()).unwrap_or_default()
    }

    /// The task was accepted: its baseline is done with.
    pub fn done(&self, task: &Task) {
        self.known().remove(&task.id);
        let _ = std::fs::remove_file(self.path(&task.id));
    }
}

/// The paths a task's **Files** field names (`a.py, tests/test_a.py`).
fn named_files(task: &Task) -> Vec<String> {
    task.fields
        .files
        .as_deref()
        .unwrap_or("")
        .split([',', ' ', '\n'])
        .map(|f| {
            f.trim()
                .trim_matches('`')
                .trim_start_matches("./")
                .to_string()
        })
        .filter(|f| !f.is_empty())
        .collect()
}
