//! `taskdaemon submit plan|spec|stories|ralph …`: queue work for the daemon. The records are written
//! by the core (`daemon::submit`; work queued while no daemon runs waits for one, and the
//! cascade queues what follows from them), then a running daemon is told to look.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde_json::Value;
use taskdaemon_core::daemon::submit::{Submission, SubmitOptions, SubmitPlace, submit};
use taskdaemon_core::store::{AnyRecord, Records};

use super::daemon_link;
use super::{Ctx, emit, now_ms, print_json, store_err};
use crate::cli::user;

#[derive(Debug, Args)]
#[command(after_long_help = "Examples:\n  \
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
    /// A stories file (prd.json, tasks.json) worked through as `stories` does, in its own
    /// worktree, merged when done. The file must be committed.
    Stories {
        /// The stories file.
        file: PathBuf,
        /// No review: an implement iteration sets `passes` itself.
        #[arg(long)]
        skip_review: bool,
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

impl Common {
    fn options(&self) -> SubmitOptions {
        SubmitOptions {
            agent: self.agent.clone(),
            target: self.target.clone(),
            priority: self.priority,
        }
    }
}

impl What {
    /// The submission and its options, for the core.
    fn into_submission(self) -> (Submission, SubmitOptions) {
        match self {
            What::Plan {
                idea: Some(idea),
                title,
                common,
                ..
            } => (Submission::PlanIdea { idea, title }, common.options()),
            What::Plan {
                file,
                title,
                common,
                ..
            } => (
                Submission::PlanFile {
                    file: file.unwrap_or_default(),
                    title,
                },
                common.options(),
            ),
            What::Spec { file, plan, common } => {
                (Submission::Spec { file, plan }, common.options())
            }
            What::Stories {
                file,
                skip_review,
                common,
            } => (
                Submission::Stories {
                    file,
                    review: !skip_review,
                },
                common.options(),
            ),
            What::Ralph {
                task,
                validate,
                after,
                sandbox,
                common,
            } => (
                Submission::Ralph {
                    task,
                    validate,
                    after,
                    sandbox,
                },
                common.options(),
            ),
        }
    }
}

pub fn run(args: SubmitArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let paths = daemon_link::paths(ctx)?;
    let mut records = Records::open(&paths.project).map_err(store_err)?;
    let checkout = ctx.repo_dir()?;
    let place = SubmitPlace {
        project: &paths.project,
        checkout: &checkout,
        config: ctx.config.as_deref(),
        now: now_ms(),
    };
    let (what, opts) = args.what.into_submission();
    let created = submit(&mut records, &place, what, &opts).map_err(|e| {
        if e.is_user_fault() {
            user(e)
        } else {
            anyhow::Error::new(e)
        }
    })?;
    let hint = daemon_link::queued_hint(&paths);
    if args.json {
        let created: Vec<Value> = created.iter().map(AnyRecord::to_json).collect();
        print_json(&serde_json::json!({"created": created, "daemon": hint}))?;
    } else {
        let ids: Vec<&str> = created.iter().map(AnyRecord::id).collect();
        emit(&format!("queued {}\n  {hint}\n", ids.join(", ")))?;
    }
    Ok(0)
}
