//! `submit plan|spec|ralph`: one path from a submission to the records the daemon works
//! from. Only records are written here; runs the cascade derives (a ready plan's spec
//! run, a spec's phase runs) are left to it (`scheduler::advance`, the daemon's pass), so
//! a submission is queued exactly once whether or not a daemon runs meanwhile. The caller
//! wakes a running daemon and renders the records.

use std::path::{Path, PathBuf};

use crate::config::{self, ConfigError};
use crate::docs;
use crate::git::Git;
use crate::sandbox::SandboxKind;
use crate::scheduler::context::{self, RunContext};
use crate::store::{AnyRecord, LoopRun, NewPlan, NewRun, NewSpec, PlanStatus, Records, ids};
use crate::store::{Spec, StoreError};

/// What is submitted.
#[derive(Debug, Clone)]
pub enum Submission {
    /// An idea: a plan loop writes the plan, then the cascade goes on.
    PlanIdea { idea: String, title: Option<String> },
    /// A plan document that checks: a ready plan, whose spec run the cascade queues.
    PlanFile {
        file: PathBuf,
        title: Option<String>,
    },
    /// A spec document (front matter), or a spec directory with a tasks.md (an
    /// `implement` run of it); `plan`: the plan it belongs to.
    Spec { file: PathBuf, plan: Option<String> },
    /// A stories file (`prd.json`, `tasks.json`): a `stories` run of it; `review`: with
    /// the review cycle.
    Stories { file: PathBuf, review: bool },
    /// A generic loop on one task.
    Ralph {
        task: String,
        validate: Option<String>,
        after: Vec<String>,
        sandbox: Option<SandboxKind>,
    },
}

/// The options every submission takes.
#[derive(Debug, Clone, Default)]
pub struct SubmitOptions {
    /// The agent of its loops (none: the daemon's).
    pub agent: Option<String>,
    /// The branch finished work is merged into (none: config, else the branch checked out
    /// in `SubmitPlace::checkout`).
    pub target: Option<String>,
    pub priority: i64,
}

/// Where a submission is made.
#[derive(Debug, Clone)]
pub struct SubmitPlace<'a> {
    /// The project (its store, its config).
    pub project: &'a Path,
    /// The directory the command runs in (its branch is the default target).
    pub checkout: &'a Path,
    /// `--config`.
    pub config: Option<&'a Path>,
    pub now: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The submission cannot be taken as it is; the message says why and what to do.
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Config(#[from] ConfigError),
}

impl SubmitError {
    /// Whether a person must change the submission (exit 64).
    pub fn is_user_fault(&self) -> bool {
        match self {
            SubmitError::Store(e) => e.is_user_fault(),
            _ => true,
        }
    }
}

fn refused(msg: impl Into<String>) -> SubmitError {
    SubmitError::Refused(msg.into())
}

/// Write the records of `what`; returns them in the order made.
pub fn submit(
    records: &mut Records,
    at: &SubmitPlace<'_>,
    what: Submission,
    opts: &SubmitOptions,
) -> Result<Vec<AnyRecord>, SubmitError> {
    match what {
        Submission::PlanIdea { idea, title } => plan_idea(records, at, &idea, title, opts),
        Submission::PlanFile { file, title } => plan_file(records, at, &file, title, opts),
        Submission::Spec { file, .. } if file.is_dir() => {
            Ok(vec![AnyRecord::Run(worklist(records, at, &file, opts)?)])
        }
        Submission::Spec { file, plan } => spec_doc(records, at, &file, plan, opts),
        Submission::Stories { file, review } => Ok(vec![AnyRecord::Run(stories(
            records, at, &file, review, opts,
        )?)]),
        Submission::Ralph {
            task,
            validate,
            after,
            sandbox,
        } => {
            check_agent(opts)?;
            if task.trim().is_empty() {
                return Err(refused(
                    "the task is empty\n  hint: `taskdaemon submit ralph \"what to do\"`",
                ));
            }
            let target = target(at, opts)?;
            let deps = resolve_all(records, &after)?;
            let ctx = RunContext {
                task: Some(task.clone()),
                target_branch: Some(target),
                validate,
                agent: opts.agent.clone(),
                sandbox: sandbox.map(|k| k.name().to_string()),
                ..Default::default()
            };
            let run = records.create_run(
                NewRun {
                    loop_type: "ralph".into(),
                    name: Some(task.chars().take(40).collect()),
                    deps,
                    context: ctx.into(),
                    priority: opts.priority,
                    ..NewRun::default()
                },
                at.now,
            )?;
            Ok(vec![AnyRecord::Run(run)])
        }
    }
}

/// A draft plan and its plan run.
fn plan_idea(
    records: &mut Records,
    at: &SubmitPlace<'_>,
    idea: &str,
    title: Option<String>,
    opts: &SubmitOptions,
) -> Result<Vec<AnyRecord>, SubmitError> {
    check_agent(opts)?;
    let target = target(at, opts)?;
    if idea.trim().is_empty() {
        return Err(refused(
            "the idea is empty\n  hint: `taskdaemon submit plan \"what you want built\"`",
        ));
    }
    let first = idea
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or(idea)
        .trim();
    let plan = records.create_plan(
        NewPlan {
            title: title.unwrap_or_else(|| first.chars().take(80).collect()),
            status: Some(PlanStatus::Draft),
            target_branch: Some(target),
            agent: opts.agent.clone(),
            priority: opts.priority,
            ..NewPlan::default()
        },
        at.now,
    )?;
    make_parent_dir(Path::new(&plan.file))?;
    let run = records.create_run(
        NewRun {
            loop_type: "plan".into(),
            name: Some(format!("plan {}", ids::slug_part(&plan.id))),
            parent: Some(plan.id.clone()),
            context: context::plan_run(&plan, idea, opts.agent.as_deref()).into(),
            priority: opts.priority,
            ..NewRun::default()
        },
        at.now,
    )?;
    Ok(vec![AnyRecord::Plan(plan), AnyRecord::Run(run)])
}

/// A ready plan of a document that checks; the cascade queues its spec run (with this
/// submission's agent and priority, kept on the plan).
fn plan_file(
    records: &mut Records,
    at: &SubmitPlace<'_>,
    file: &Path,
    title: Option<String>,
    opts: &SubmitOptions,
) -> Result<Vec<AnyRecord>, SubmitError> {
    check_agent(opts)?;
    let target = target(at, opts)?;
    let abs = std::fs::canonicalize(file)
        .map_err(|e| refused(format!("cannot read plan file {}: {e}", file.display())))?;
    let c = docs::check_plan(&abs, docs::REVIEW_PASSES);
    if !c.passed() {
        let list: Vec<String> = c.problems.iter().map(|p| format!("  {p}")).collect();
        return Err(refused(format!(
            "the plan {} does not check:\n{}\n  hint: `taskdaemon check-doc plan {}`",
            abs.display(),
            list.join("\n"),
            abs.display()
        )));
    }
    let plan = records.create_plan(
        NewPlan {
            title: title.or(c.title).unwrap_or_else(|| "plan".into()),
            file: Some(abs.display().to_string()),
            status: Some(PlanStatus::Ready),
            target_branch: Some(target),
            agent: opts.agent.clone(),
            priority: opts.priority,
            ..NewPlan::default()
        },
        at.now,
    )?;
    Ok(vec![AnyRecord::Plan(plan)])
}

/// One spec record of a spec document (and its plan when none is named); the cascade
/// queues its phase runs.
fn spec_doc(
    records: &mut Records,
    at: &SubmitPlace<'_>,
    file: &Path,
    plan: Option<String>,
    opts: &SubmitOptions,
) -> Result<Vec<AnyRecord>, SubmitError> {
    if opts.agent.is_some() {
        return Err(refused(
            "--agent does not apply to a single spec: its phases use the agent the daemon was started with\n  hint: `taskdaemon daemon start --agent SPEC`, or `agent:` in .taskdaemon/config.yaml",
        ));
    }
    let abs = std::fs::canonicalize(file)
        .map_err(|e| refused(format!("cannot read spec file {}: {e}", file.display())))?;
    let doc = read_spec_doc(&abs)?;
    let deps = resolve_all(records, &doc.deps).map_err(|e| {
        refused(format!(
            "{e}\n  hint: a spec submitted alone names its deps by the ids of specs in the store"
        ))
    })?;
    let mut made = Vec::new();
    let parent = match plan {
        Some(p) => records.resolve(&p)?,
        None => {
            let target = target(at, opts)?;
            let p = records.create_plan(
                NewPlan {
                    title: doc.title.clone(),
                    file: Some(abs.display().to_string()),
                    status: Some(PlanStatus::InProgress),
                    target_branch: Some(target),
                    ..NewPlan::default()
                },
                at.now,
            )?;
            let id = p.id.clone();
            made.push(AnyRecord::Plan(p));
            id
        }
    };
    let spec: Spec = records.create_spec(
        NewSpec {
            title: doc.title,
            parent,
            file: Some(abs.display().to_string()),
            deps,
            phases: doc.phases,
            status: None,
            priority: opts.priority.max(doc.priority),
        },
        at.now,
    )?;
    made.push(AnyRecord::Spec(spec));
    Ok(made)
}

/// The spec document at `abs`, checked with its siblings (deps by title or file).
fn read_spec_doc(abs: &Path) -> Result<docs::SpecDoc, SubmitError> {
    let dir = abs.parent().map(Path::to_path_buf).unwrap_or_default();
    let (found, problems) = docs::read_specs(&dir);
    if let Some(p) = problems
        .iter()
        .find(|p| p.place.starts_with(&abs.display().to_string()))
    {
        return Err(refused(format!(
            "{p}\n  hint: `taskdaemon check-doc specs {}`",
            dir.display()
        )));
    }
    found.into_iter().find(|d| d.file == abs).ok_or_else(|| {
        refused(format!(
            "{} is not a spec document (*.md with front matter)",
            abs.display()
        ))
    })
}

/// `submit spec specs/NAME`: an implement run of the spec directory's tasks.md.
fn worklist(
    records: &mut Records,
    at: &SubmitPlace<'_>,
    dir: &Path,
    opts: &SubmitOptions,
) -> Result<LoopRun, SubmitError> {
    check_agent(opts)?;
    let abs = std::fs::canonicalize(dir)
        .map_err(|e| refused(format!("cannot read spec directory {}: {e}", dir.display())))?;
    let top = Git::new(at.project)
        .toplevel()
        .map_err(|e| refused(e.to_string()))?;
    let top = top.canonicalize().unwrap_or(top);
    crate::worklist::coordinator::preflight(&abs, &top).map_err(|e| refused(e.to_string()))?;
    let rel = abs.strip_prefix(&top).map_err(|_| {
        refused(format!(
            "{} is outside the repository {}\n  hint: a spec directory of this repository, e.g. specs/NAME",
            abs.display(),
            top.display()
        ))
    })?;
    let target = target(at, opts)?;
    let name = rel.display().to_string();
    let ctx = RunContext {
        spec_dir: Some(name.clone()),
        task: Some(format!("implement {name}")),
        target_branch: Some(target),
        agent: opts.agent.clone(),
        ..Default::default()
    };
    Ok(records.create_run(
        NewRun {
            loop_type: "implement".into(),
            name: Some(format!("implement {name}")),
            context: ctx.into(),
            priority: opts.priority,
            ..NewRun::default()
        },
        at.now,
    )?)
}

/// `submit stories FILE`: a stories run of a committed stories file.
fn stories(
    records: &mut Records,
    at: &SubmitPlace<'_>,
    file: &Path,
    review: bool,
    opts: &SubmitOptions,
) -> Result<LoopRun, SubmitError> {
    check_agent(opts)?;
    let abs = std::fs::canonicalize(file)
        .map_err(|e| refused(format!("cannot read stories file {}: {e}", file.display())))?;
    crate::worklist::stories::load(&abs).map_err(|e| refused(e.to_string()))?;
    let top = Git::new(at.project)
        .toplevel()
        .map_err(|e| refused(e.to_string()))?;
    let top = top.canonicalize().unwrap_or(top);
    let rel = abs.strip_prefix(&top).map_err(|_| {
        refused(format!(
            "{} is outside the repository {}\n  hint: a stories file of this repository, e.g. prd.json",
            abs.display(),
            top.display()
        ))
    })?;
    let tracked = Git::new(&top)
        .call(&[
            "ls-files".as_ref(),
            "--error-unmatch".as_ref(),
            rel.as_os_str(),
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    if !tracked {
        return Err(refused(format!(
            "{} is not committed: the run works in a worktree of the target branch\n  hint: `git add {} && git commit -m stories` first",
            rel.display(),
            rel.display()
        )));
    }
    let target = target(at, opts)?;
    let name = rel.display().to_string();
    let ctx = RunContext {
        stories_file: Some(name.clone()),
        stories_review: Some(if review { "yes" } else { "no" }.into()),
        task: Some(format!("stories {name}")),
        target_branch: Some(target),
        agent: opts.agent.clone(),
        ..Default::default()
    };
    Ok(records.create_run(
        NewRun {
            loop_type: "stories".into(),
            name: Some(format!("stories {name}")),
            context: ctx.into(),
            priority: opts.priority,
            ..NewRun::default()
        },
        at.now,
    )?)
}

/// The merge target, which must exist: `--target`, else config `target-branch`, else the
/// branch checked out where the command runs.
fn target(at: &SubmitPlace<'_>, opts: &SubmitOptions) -> Result<String, SubmitError> {
    let branch = match &opts.target {
        Some(t) => {
            config::check_branch_name(t).map_err(|e| refused(e.to_string()))?;
            t.clone()
        }
        None => match config::load_layers(at.project, at.config)?
            .settings
            .target_branch
        {
            Some(t) => t,
            None => current_branch(at.checkout)?,
        },
    };
    if !matches!(Git::new(at.project).branch_exists(&branch), Ok(true)) {
        return Err(refused(format!(
            "target branch `{branch}` does not exist\n  hint: create it (`git branch {branch}`) or pass --target with an existing branch"
        )));
    }
    Ok(branch)
}

/// The branch checked out in `dir` (the default merge target).
pub fn current_branch(dir: &Path) -> Result<String, SubmitError> {
    match Git::new(dir).current_branch() {
        Ok(Some(b)) => Ok(b),
        _ => Err(refused(format!(
            "{} is on a detached HEAD, so there is no branch to merge finished work into\n  hint: pass --target BRANCH, or set `target-branch:` in .taskdaemon/config.yaml",
            dir.display()
        ))),
    }
}

fn check_agent(opts: &SubmitOptions) -> Result<(), SubmitError> {
    if let Some(a) = &opts.agent {
        let spec = crate::agent::AgentSpec::parse(a).map_err(|e| refused(e.to_string()))?;
        spec.check_installed().map_err(|e| refused(e.to_string()))?;
    }
    Ok(())
}

fn resolve_all(records: &Records, refs: &[String]) -> Result<Vec<String>, StoreError> {
    refs.iter().map(|r| records.resolve(r)).collect()
}

fn make_parent_dir(file: &Path) -> Result<(), SubmitError> {
    match file.parent() {
        Some(dir) => std::fs::create_dir_all(dir)
            .map_err(|e| refused(format!("cannot create {}: {e}", dir.display()))),
        None => Ok(()),
    }
}
