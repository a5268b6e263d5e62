//! `taskdaemon report [REF|--all] [-o FILE]`: one self-contained HTML file (inline SVG
//! plots, no script, no network) for this directory's run, all its runs, or a daemon
//! record (a run, or a spec or plan with all their runs). The core builds it.

use std::path::{Path, PathBuf};

use clap::Args;
use taskdaemon_core::report::{self, Report, RunData, RunDir};
use taskstore::StoreOptions;

use super::{Ctx, daemon_link, emit, open_records, print_json, store_err};
use crate::cli::user;

#[derive(Debug, Args)]
#[command(
    after_long_help = "Examples:\n  taskdaemon report                 # this directory's last run\n  taskdaemon report --all -o runs.html\n  taskdaemon report plan-oauth      # a daemon plan: its specs and every run"
)]
pub struct ReportArgs {
    /// A run id of this directory (or its start), or a daemon record: run, spec or plan (id, hex, or part of its name).
    #[arg(value_name = "REF", conflicts_with = "all")]
    pub reference: Option<String>,
    /// Every run of this directory's .ralph/logs/summary.csv, oldest first.
    #[arg(long)]
    pub all: bool,
    /// Where to write the HTML file (default: .ralph/logs/report.html, or for a record the daemon's reports/ID.html).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Print {"path":…,"runs":N} instead of a sentence.
    #[arg(long)]
    pub json: bool,
}

/// Whether `path`, its `.` and `..` taken away as written, lies outside the work tree of
/// `workdir` (or there is none).
fn outside_repository(workdir: &std::path::Path, path: &std::path::Path) -> bool {
    let plain = taskdaemon_core::fsutil::normalize(path);
    taskdaemon_core::git::RepoFacts::of(workdir).map_or(true, |f| !plain.starts_with(&f.toplevel))
}

/// What to read, what to call it and where to write it by default.
struct Plan {
    subject: String,
    sources: Vec<RunDir>,
    records: Vec<report::RecordRow>,
    default_out: PathBuf,
}

fn local_plan(args: &ReportArgs, workdir: &Path) -> Option<Plan> {
    let ralph = workdir.join(".ralph");
    let ids = report::run_ids(&ralph);
    let one = |id: Option<String>| RunDir {
        ralph: ralph.clone(),
        run_id: id,
        title: None,
        record: None,
    };
    let (subject, sources) = match &args.reference {
        None if args.all => (
            format!("all runs in {}", workdir.display()),
            ids.iter().map(|id| one(Some(id.clone()))).collect(),
        ),
        None => (
            format!("last run in {}", workdir.display()),
            vec![one(None)],
        ),
        Some(r) => {
            let hits: Vec<&String> = ids.iter().filter(|id| id.starts_with(r.as_str())).collect();
            match hits.as_slice() {
                [id] => (format!("run {id}"), vec![one(Some((*id).clone()))]),
                _ => return None,
            }
        }
    };
    Some(Plan {
        subject,
        sources,
        records: Vec::new(),
        default_out: ralph.join("logs/report.html"),
    })
}

fn record_plan(reference: &str, ctx: &Ctx) -> anyhow::Result<Plan> {
    let paths = daemon_link::paths(ctx)?;
    let records = open_records(ctx, StoreOptions::default())?;
    let rec = records.find(reference).map_err(store_err)?;
    let (kind, id) = (rec.kind().tag(), rec.id().to_string());
    let (rows, runs) = report::record_tree(&records, rec).map_err(store_err)?;
    // The first row is the record itself, with a run's real title.
    let title = rows.first().map(|r| r.title.clone()).unwrap_or_default();
    let subject = format!("{kind} {id}: {title}");
    let sources = runs
        .into_iter()
        .filter_map(|(run, title)| report::run_dir(&paths, &run, Some(title)))
        .collect();
    Ok(Plan {
        subject,
        sources,
        records: rows,
        default_out: paths.dir.join("reports").join(format!("{id}.html")),
    })
}

fn load(sources: &[RunDir]) -> anyhow::Result<Vec<RunData>> {
    let mut runs = Vec::new();
    let mut first_err = None;
    for s in sources {
        match report::load_run(s) {
            Ok(r) => runs.push(r),
            Err(e) => {
                eprintln!("taskdaemon: skipped: {e}");
                first_err.get_or_insert(e);
            }
        }
    }
    match first_err {
        Some(e) if runs.is_empty() => Err(user(e)),
        _ => Ok(runs),
    }
}

pub fn run(args: ReportArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let workdir = ctx.workdir()?;
    let plan = match local_plan(&args, &workdir) {
        Some(p) => p,
        None => record_plan(args.reference.as_deref().unwrap_or_default(), ctx)?,
    };
    if plan.sources.is_empty() && plan.records.is_empty() {
        return Err(user(format!(
            "no runs in {}\n  hint: start one with `taskdaemon run`, or name a daemon record: `taskdaemon report REF`",
            workdir.join(".ralph/logs/summary.csv").display()
        )));
    }
    let mut runs = load(&plan.sources)?;
    if plan.records.is_empty() {
        // One directory's runs, one after the other: each snapshot under one of them.
        report::settle_snapshots(&mut runs);
    }
    let rep = Report {
        subject: plan.subject,
        generated_at: taskdaemon_core::clock::now_rfc3339(),
        runs,
        records: plan.records,
    };
    let chosen = args.output.is_some();
    let mut out = match args.output {
        Some(p) if p.is_relative() => workdir.join(p),
        Some(p) => p,
        None => plan.default_out,
    };
    if let Some(parent) = out.parent() {
        let cannot = |e: std::io::Error| {
            user(format!(
                "cannot create {}: {e}\n  hint: choose another place with -o FILE",
                parent.display()
            ))
        };
        std::fs::create_dir_all(parent).map_err(cannot)?;
        // A place the person chose outside the repository (`-o ../reports/x.html`, as
        // written, no link followed) is theirs: its `..` and links resolved. One inside it
        // stays under the rule that no link in the repository is followed out of it.
        if chosen
            && outside_repository(&workdir, &out)
            && let Some(name) = out.file_name()
        {
            out = parent.canonicalize().map_err(cannot)?.join(name);
        }
    }
    taskdaemon_core::fsutil::write_atomic(&out, report::render(&rep).as_bytes()).map_err(|e| {
        user(format!(
            "cannot write {}: {e}\n  hint: choose another place with -o FILE",
            out.display()
        ))
    })?;
    if args.json {
        print_json(&serde_json::json!({"path": out, "runs": rep.runs.len()}))?;
    } else {
        emit(&format!(
            "report of {} run(s): {}\n  open it in a browser (one file, no network needed)\n",
            rep.runs.len(),
            out.display()
        ))?;
    }
    Ok(0)
}
