//! A work list's run configuration: the engine's [`RunConfig`], resolved from the settings
//! layers the way `run`'s is (one agent resolution: flag, config, preset, output format,
//! the installed check, the sandbox), with the list as its work source. The CLI and the
//! daemon both build their work-list runs here.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::Settings;
use crate::engine::{ResolveError, RunConfig, SourceSpec};
use crate::loops::Registry;

/// A tasks.md run.
#[derive(Debug, Clone)]
pub struct TasksRun {
    pub spec_dir: PathBuf,
    pub max_task_iterations: u32,
    pub verify_timeout: Option<Duration>,
    /// Open tasks and all (the iteration limit is all × attempts × 2).
    pub tasks: usize,
}

/// A stories run.
#[derive(Debug, Clone)]
pub struct StoriesRun {
    pub file: PathBuf,
    pub review: bool,
    pub max_reviews: u64,
    /// `None`: stories × (2 × reviews + 2) × 2.
    pub max_iterations: Option<u32>,
    pub stories: usize,
}

/// The run of `t` in the work tree `repo`.
pub fn tasks_config(
    repo: &Path,
    t: &TasksRun,
    s: &Settings,
    registry: &Registry,
) -> Result<RunConfig, ResolveError> {
    let mut s = s.clone();
    s.loop_type = Some("implement".into());
    s.max_iterations = None;
    let rel = t.spec_dir.strip_prefix(repo).unwrap_or(&t.spec_dir);
    let mut cfg = resolve(repo, format!("implement {}", rel.display()), &s, registry)?;
    cfg.max_iterations = super::coordinator::max_iterations(t.tasks, t.max_task_iterations);
    cfg.source = SourceSpec::Tasks {
        spec_dir: t.spec_dir.clone(),
        max_task_iterations: t.max_task_iterations,
        verify_timeout_ms: t.verify_timeout.map(|d| d.as_millis() as u64),
    };
    Ok(cfg)
}

/// The run of `r` in the work tree `repo`.
pub fn stories_config(
    repo: &Path,
    r: &StoriesRun,
    s: &Settings,
    registry: &Registry,
) -> Result<RunConfig, ResolveError> {
    let mut s = s.clone();
    s.loop_type = Some("story-implement".into());
    s.max_iterations = None;
    let rel = r.file.strip_prefix(repo).unwrap_or(&r.file);
    let mut cfg = resolve(repo, format!("stories {}", rel.display()), &s, registry)?;
    cfg.max_iterations = r.max_iterations.unwrap_or_else(|| {
        super::stories::default_max_iterations(r.stories, r.max_reviews, r.review)
    });
    cfg.source = SourceSpec::Stories {
        file: r.file.clone(),
        review: r.review,
        max_reviews: r.max_reviews,
    };
    Ok(cfg)
}

/// The engine's resolution; a work list has no validation command of its own (each task
/// has its Verify; the story rules judge a story).
fn resolve(
    repo: &Path,
    task: String,
    s: &Settings,
    registry: &Registry,
) -> Result<RunConfig, ResolveError> {
    let mut cfg = RunConfig::resolve(repo, task, s, registry)?;
    cfg.validate = None;
    cfg.completion_promise = None;
    Ok(cfg)
}
