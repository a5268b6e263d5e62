//! `taskdaemon stories [FILE]`: user stories (tasks.json / prd.json) with a review cycle the
//! harness enforces.

use std::path::PathBuf;

use clap::Args;
use taskdaemon_core::worklist::config::StoriesRun;
use taskdaemon_core::worklist::stories::load;

use super::Ctx;
use super::util::LoopFlags;
use super::util::worklist::{layers, repo_of, run_worklist, worklist_err};
use crate::cli::user;

#[derive(Debug, Args)]
#[command(after_long_help = "Examples:\n  \
taskdaemon stories                       # tasks.json, else prd.json, in the current directory\n  \
taskdaemon stories prd.json --agent claude\n  \
taskdaemon stories --skip-review --max-iterations 20\n\n\
Each iteration the harness picks the mode: review-fix if a story has changes requested, else \
review if one needs review, else implement the highest-priority story whose dependsOn all pass. \
It snapshots the file first and checks the agent's changes: an implement iteration moves at most \
one story to needs_review and never sets passes; a review raises exactly one story's reviewCount \
by 1 and ends approved (passes true) or changes_requested with reviewFeedback; a review-fix only \
moves a story back to needs_review. A violation restores the file and the reason goes into the \
next prompt. At the review cap the harness approves the story, with a note. Done when the agent \
says <promise>COMPLETE</promise> and every story passes (and is approved).\n\n\
BLOCKED and DECIDE promises stop the loop as in `implement` (exit 2 and 3; a blocked iteration \
leaves the stories file as it was). Every agent invocation adds a row to .ralph/logs/summary.csv with \
its mode (implement, review, review-fix).\n\n\
Exit codes: 0 complete, 1 a limit (iterations, --max-cost, --max-runtime), 2 blocked, 3 decide, 4 stuck (--max-stuck iterations in a row without a new commit; an accepted transition of the file is committed), 5 no story can start, 64 usage, 130 interrupted.")]
pub struct StoriesArgs {
    /// The stories file [default: tasks.json, else prd.json].
    #[arg(value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// No review: an implement iteration sets `passes` itself.
    #[arg(long)]
    pub skip_review: bool,
    /// Reviews of one story before the harness approves it.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub max_reviews: u64,
    /// Stop (exit 1) after N iterations [default: stories × (2 × max-reviews + 2) × 2].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_iterations: Option<u32>,
    #[command(flatten)]
    pub flags: LoopFlags,
    /// One JSON event per line on stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: StoriesArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let cwd = ctx.workdir()?;
    let file = match &args.file {
        Some(f) => cwd.join(f),
        None => ["tasks.json", "prd.json"]
            .iter()
            .map(|n| cwd.join(n))
            .find(|p| p.is_file())
            .ok_or_else(|| {
                user(format!(
                    "no tasks.json or prd.json in {}\n  hint: `taskdaemon stories FILE` with a JSON file of user stories",
                    cwd.display()
                ))
            })?,
    };
    let (_, stories) = load(&file).map_err(worklist_err)?;
    let file = file.canonicalize().unwrap_or(file);
    let dir = file.parent().map(|p| p.to_path_buf()).unwrap_or(cwd);
    let repo = repo_of(&dir)?;
    let (settings, registry) = layers(&repo, &args.flags, ctx)?;
    let run = StoriesRun {
        file: file.clone(),
        review: !args.skip_review,
        max_reviews: args.max_reviews,
        max_iterations: args.max_iterations,
        stories: stories.len(),
    };
    let cfg = taskdaemon_core::worklist::config::stories_config(&repo, &run, &settings, &registry)
        .map_err(user)?;
    run_worklist(&repo, &file, cfg, args.json)
}
