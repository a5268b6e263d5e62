//! `taskdaemon submit plan|spec|ralph …`: queue work for the daemon. The record is written to
//! the store at once (work queued while no daemon runs waits for one), then a running daemon
//! is told to look.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde_json::Value;
use taskdaemon_core::docs;
use taskdaemon_core::scheduler::context;
use taskdaemon_core::store::{NewPlan, NewRun, NewSpec, PlanStatus, Records, ids};

use super::daemon_link::{self, current_branch};
use super::{Ctx, emit, now_ms, print_json, resolve_all, store_err};
use crate::cli::user;

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
taskdaemon submit plan \"add OAuth login with Google and GitHub\" --agent claude\n  \
taskdaemon submit plan --file docs/oauth-plan.md          # an existing plan: straight to specs\n  \
taskdaemon submit spec docs/specs/01-schema.md --plan oauth\n  \
taskdaemon submit ralph \"make the flaky test stable\" --validate \"cargo test\"\n\n\
A plan is refined (plan loop), split into specs (spec loop), and each spec is built phase by \
phase in its own worktree on branch taskdaemon/<spec-id>, then merged into the target branch.")]
pub struct SubmitArgs {
    #[command(subcommand)]
    pub what: What,
    /// Print the created records as JSON.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Args, Clone)]
pub struct Common {
    /// The agent for its loops (claude, codex, …, cmd:COMMAND) [default: config].
    #[arg(long, value_name = "SPEC")]
    pub agent: Option<String>,
    /// The branch finished work is merged into [default: config target-branch, else the branch checked out here].
    #[arg(long, value_name = "BRANCH")]
    pub target: Option<String>,
    /// Higher runs first.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub priority: i64,
}

#[derive(Debug, Subcommand)]
pub enum What {
    /// An idea to plan, split into specs and build; or an existing plan document (--file).
    Plan {
        /// The idea, in your words.
        #[arg(value_name = "IDEA", required_unless_present = "file")]
        idea: Option<String>,
        /// An existing plan document: no plan loop, straight to the spec loop.
        #[arg(long, value_name = "FILE", conflicts_with = "idea")]
        file: Option<PathBuf>,
        /// The plan's title [default: the idea's first line].
        #[arg(long)]
        title: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// A spec document (front matter: title, deps, phases) to build; or a spec directory
    /// with a tasks.md, worked through as `implement` does, in its own worktree, merged when done.
    Spec {
        /// The spec document.
        file: PathBuf,
        /// The plan it belongs to [default: a new plan record named after the spec].
        #[arg(long, value_name = "REF")]
        plan: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// A generic loop on one task, in its own worktree, merged when done.
    Ralph {
        /// What the loop should do, in words.
        task: String,
        /// Validation command (sh -c) [default: config validate].
        #[arg(long, value_name = "CMD")]
        validate: Option<String>,
        /// Runs or specs that must be complete first.
        #[arg(long = "after", value_name = "REF")]
        after: Vec<String>,
        /// Its sandbox: none, bwrap, docker, podman (docs/sandbox.md) [default: the daemon's --sandbox, else config sandbox].
        #[arg(long, value_name = "KIND", value_parser = super::util::sandbox_kind)]
        sandbox: Option<taskdaemon_core::sandbox::SandboxKind>,
        #[command(flatten)]
        common: Common,
    },
}

fn target(ctx: &Ctx, project: &std::path::Path, c: &Common) -> anyhow::Result<String> {
    if let Some(t) = &c.target {
        taskdaemon_core::config::check_branch_name(t).map_err(user)?;
        return Ok(t.clone());
    }
    let s = taskdaemon_core::config::load_layers(project, ctx.config.as_deref()).map_err(user)?;
    match s.target_branch {
        Some(t) => Ok(t),
        None => current_branch(&ctx.repo_dir()?),
    }
}

fn check_agent(c: &Common) -> anyhow::Result<()> {
    if let Some(a) = &c.agent {
        let spec = taskdaemon_core::agent::AgentSpec::parse(a).map_err(user)?;
        spec.check_installed().map_err(user)?;
    }
    Ok(())
}

fn check_branch(project: &std::path::Path, branch: &str) -> anyhow::Result<()> {
    let exists = taskdaemon_core::git::Git::new(project).branch_exists(branch);
    if !matches!(exists, Ok(true)) {
        return Err(user(format!(
            "target branch `{branch}` does not exist\n  hint: create it (`git branch {branch}`) or pass --target with an existing branch"
        )));
    }
    Ok(())
}

pub fn run(args: SubmitArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let paths = daemon_link::paths(ctx)?;
    let project = paths.project.clone();
    let mut records = Records::open(&project).map_err(store_err)?;
    let now = now_ms();
    let mut created: Vec<Value> = Vec::new();
    match args.what {
        What::Plan {
            idea,
            file,
            title,
            common,
        } => {
            check_agent(&common)?;
            let target = target(ctx, &project, &common)?;
            check_branch(&project, &target)?;
            let (title, status, plan_file) = match (&idea, &file) {
                (_, Some(f)) => {
                    let abs = std::fs::canonicalize(f)
                        .map_err(|e| user(format!("cannot read plan file {}: {e}", f.display())))?;
                    let c = docs::check_plan(&abs, docs::REVIEW_PASSES);
                    if !c.passed() {
                        let list: Vec<String> =
                            c.problems.iter().map(|p| format!("  {p}")).collect();
                        return Err(user(format!(
                            "the plan {} does not check:\n{}\n  hint: `taskdaemon check-doc plan {}`",
                            abs.display(),
                            list.join("\n"),
                            abs.display()
                        )));
                    }
                    let t = title.clone().or(c.title).unwrap_or_else(|| "plan".into());
                    (t, PlanStatus::Ready, Some(abs.display().to_string()))
                }
                (Some(i), None) => {
                    if i.trim().is_empty() {
                        return Err(user(
                            "the idea is empty\n  hint: `taskdaemon submit plan \"what you want built\"`",
                        ));
                    }
                    let first = i.lines().find(|l| !l.trim().is_empty()).unwrap_or(i).trim();
                    let t = title
                        .clone()
                        .unwrap_or_else(|| first.chars().take(80).collect());
                    (t, PlanStatus::Draft, None)
                }
                (None, None) => return Err(user("give the idea, or --file PLAN.md")),
            };
            let plan = records
                .create_plan(
                    NewPlan {
                        title,
                        file: plan_file,
                        status: Some(status),
                        target_branch: Some(target),
                        ..NewPlan::default()
                    },
                    now,
                )
                .map_err(store_err)?;
            if let Some(dir) = std::path::Path::new(&plan.file).parent() {
                std::fs::create_dir_all(dir)
                    .map_err(|e| user(format!("cannot create {}: {e}", dir.display())))?;
            }
            created.push(serde_json::to_value(&plan)?);
            if idea.is_none() {
                // A finished plan: its spec loop is queued now, with this submission's agent
                // and priority.
                let run = records
                    .create_run(
                        NewRun {
                            loop_type: "spec".into(),
                            name: Some(format!("specs {}", ids::slug_part(&plan.id))),
                            parent: Some(plan.id.clone()),
                            context: context::spec_run(&project, &plan, common.agent.as_deref())
                                .into(),
                            priority: common.priority,
                            ..NewRun::default()
                        },
                        now,
                    )
                    .map_err(store_err)?;
                let mut p = plan.clone();
                p.status = PlanStatus::InProgress;
                records
                    .update(taskdaemon_core::store::AnyRecord::Plan(p), now)
                    .map_err(store_err)?;
                created.push(serde_json::to_value(&run)?);
            }
            if let Some(i) = &idea {
                let run = records
                    .create_run(
                        NewRun {
                            loop_type: "plan".into(),
                            name: Some(format!("plan {}", ids::slug_part(&plan.id))),
                            parent: Some(plan.id.clone()),
                            context: context::plan_run(&plan, i, common.agent.as_deref()).into(),
                            priority: common.priority,
                            ..NewRun::default()
                        },
                        now,
                    )
                    .map_err(store_err)?;
                created.push(serde_json::to_value(&run)?);
            }
        }
        What::Spec { file, common, .. } if file.is_dir() => {
            let run = submit_worklist(ctx, &project, &mut records, &file, &common, now)?;
            created.push(serde_json::to_value(&run)?);
        }
        What::Spec { file, plan, common } => {
            if common.agent.is_some() {
                return Err(user(
                    "--agent does not apply to a single spec: its phases use the agent the daemon was started with\n  hint: `taskdaemon daemon start --agent SPEC`, or `agent:` in .taskdaemon/config.yaml",
                ));
            }
            let abs = std::fs::canonicalize(&file)
                .map_err(|e| user(format!("cannot read spec file {}: {e}", file.display())))?;
            let dir = abs
                .parent()
                .map(std::path::Path::to_path_buf)
                .unwrap_or_default();
            let (docs_found, problems) = docs::read_specs(&dir);
            if let Some(p) = problems
                .iter()
                .find(|p| p.place.starts_with(&abs.display().to_string()))
            {
                return Err(user(format!(
                    "{p}\n  hint: `taskdaemon check-doc specs {}`",
                    dir.display()
                )));
            }
            let doc = docs_found
                .into_iter()
                .find(|d| d.file == abs)
                .ok_or_else(|| {
                    user(format!(
                        "{} is not a spec document (*.md with front matter)",
                        abs.display()
                    ))
                })?;
            let deps = resolve_all(&records, &doc.deps).map_err(|e| {
                user(format!("{e}\n  hint: a spec submitted alone names its deps by the ids of specs in the store"))
            })?;
            let parent = match plan {
                Some(p) => records.resolve(&p).map_err(store_err)?,
                None => {
                    let target = target(ctx, &project, &common)?;
                    check_branch(&project, &target)?;
                    let p = records
                        .create_plan(
                            NewPlan {
                                title: doc.title.clone(),
                                file: Some(abs.display().to_string()),
                                status: Some(PlanStatus::InProgress),
                                target_branch: Some(target),
                                ..NewPlan::default()
                            },
                            now,
                        )
                        .map_err(store_err)?;
                    created.push(serde_json::to_value(&p)?);
                    p.id
                }
            };
            let spec = records
                .create_spec(
                    NewSpec {
                        title: doc.title,
                        parent,
                        file: Some(abs.display().to_string()),
                        deps,
                        phases: doc.phases,
                        status: None,
                        priority: common.priority.max(doc.priority),
                    },
                    now,
                )
                .map_err(store_err)?;
            created.push(serde_json::to_value(&spec)?);
        }
        What::Ralph {
            task,
            validate,
            after,
            sandbox,
            common,
        } => {
            check_agent(&common)?;
            if task.trim().is_empty() {
                return Err(user("the task is empty"));
            }
            let target = target(ctx, &project, &common)?;
            check_branch(&project, &target)?;
            let deps = resolve_all(&records, &after)?;
            let ctxv = context::RunContext {
                task: Some(task.clone()),
                target_branch: Some(target),
                validate,
                agent: common.agent.clone(),
                sandbox: sandbox.map(|k| k.name().to_string()),
                ..Default::default()
            };
            let run = records
                .create_run(
                    NewRun {
                        loop_type: "ralph".into(),
                        name: Some(task.chars().take(40).collect()),
                        deps,
                        context: ctxv.into(),
                        priority: common.priority,
                        ..NewRun::default()
                    },
                    now,
                )
                .map_err(store_err)?;
            created.push(serde_json::to_value(&run)?);
        }
    }
    let hint = daemon_link::queued_hint(&paths);
    if args.json {
        print_json(&serde_json::json!({"created": created, "daemon": hint}))?;
    } else {
        let ids: Vec<&str> = created.iter().filter_map(|v| v["id"].as_str()).collect();
        emit(&format!("queued {}\n  {hint}\n", ids.join(", ")))?;
    }
    Ok(0)
}

/// `submit spec specs/NAME`: an implement run of the spec directory's tasks.md.
fn submit_worklist(
    ctx: &Ctx,
    project: &std::path::Path,
    records: &mut Records,
    dir: &std::path::Path,
    common: &Common,
    now: i64,
) -> anyhow::Result<taskdaemon_core::store::LoopRun> {
    check_agent(common)?;
    let abs = std::fs::canonicalize(dir)
        .map_err(|e| user(format!("cannot read spec directory {}: {e}", dir.display())))?;
    let top = taskdaemon_core::git::Git::new(project)
        .toplevel()
        .map_err(user)?;
    let top = top.canonicalize().unwrap_or(top);
    taskdaemon_core::worklist::coordinator::preflight(&abs, &top).map_err(user)?;
    let rel = abs.strip_prefix(&top).map_err(|_| {
        user(format!(
            "{} is outside the repository {}\n  hint: a spec directory of this repository, e.g. specs/NAME",
            abs.display(),
            top.display()
        ))
    })?;
    let target = target(ctx, project, common)?;
    check_branch(project, &target)?;
    let name = rel.display().to_string();
    let ctxv = context::RunContext {
        spec_dir: Some(name.clone()),
        task: Some(format!("implement {name}")),
        target_branch: Some(target),
        agent: common.agent.clone(),
        ..Default::default()
    };
    records
        .create_run(
            NewRun {
                loop_type: "implement".into(),
                name: Some(format!("implement {name}")),
                context: ctxv.into(),
                priority: common.priority,
                ..NewRun::default()
            },
            now,
        )
        .map_err(store_err)
}
