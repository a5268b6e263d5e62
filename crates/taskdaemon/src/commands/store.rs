//! `taskdaemon store check|compact|stats`: look after the record store.

use clap::{Args, Subcommand};
use serde::Serialize;
use taskdaemon_core::duration::parse_duration;
use taskstore::{CompactOptions, DEFAULT_RETENTION_MS, MAX_BYTES, StoreOptions, WARN_BYTES};

use super::util::merge_driver as merge_store;
use super::{Ctx, emit, now_ms, print_json, say, store_err};
use crate::cli::user;
use crate::outln;

#[derive(Debug, Args)]
pub struct StoreArgs {
    #[command(subcommand)]
    pub command: StoreCommand,
}

#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// List unreadable lines (torn writes, bad merges, hand edits), oversized files,
    /// dangling parents/deps, dependency cycles, and the merge driver's state. Exit 1 if
    /// anything needs fixing.
    Check(CheckArgs),
    /// Rewrite each collection with only the latest version of each record (atomically);
    /// tombstones older than the retention are dropped.
    Compact(CompactArgs),
    /// Sizes and counts per collection.
    Stats(StatsArgs),
    /// Allow the commands (`cmd:`/`script:` agent, validate) of a record that came from
    /// another clone, and of the records above it: read them first (`taskdaemon show REF`).
    Trust(TrustArgs),
    /// Copy the project's records to a shared queue (`--to postgres://…`) or back into
    /// .taskdaemon/store/ (`--to jsonl`): same ids and fields, updated-at kept. A target
    /// that already holds records is refused unless --force (then saved first).
    Migrate(MigrateArgs),
}

#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// `postgres://USER:PASSWORD@HOST/DB` (copy the JSONL store there), or `jsonl` (copy
    /// the configured queue's records into .taskdaemon/store/).
    #[arg(long, value_name = "URL|jsonl")]
    pub to: String,
    /// Replace what the target holds (saved to .git/taskdaemon/saved/ first).
    #[arg(long)]
    pub force: bool,
    /// Print what was copied as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct TrustArgs {
    /// The record (id, hex or name).
    pub reference: String,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Print the findings as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CompactArgs {
    /// Keep tombstones younger than this (so deletions still win when branches merge).
    #[arg(long, default_value = "30d", value_name = "DURATION")]
    pub retention: String,
    /// Move unreadable lines to <collection>.jsonl.rejected instead of refusing.
    #[arg(long)]
    pub drop_corrupt: bool,
    /// Print what was compacted as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Print the statistics as one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: StoreArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    match args.command {
        StoreCommand::Check(a) => check(a, ctx),
        StoreCommand::Compact(a) => compact(a, ctx),
        StoreCommand::Stats(a) => stats(a, ctx),
        StoreCommand::Trust(a) => trust(a, ctx),
        StoreCommand::Migrate(a) => migrate(a, ctx),
    }
}

fn migrate(a: MigrateArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    use taskdaemon_core::store::{QueueConfig, migrate};
    let dir = ctx.project_dir()?;
    let to_jsonl = a.to == "jsonl";
    let report = if to_jsonl {
        let queue = QueueConfig::resolve(&dir)
            .map_err(|e| store_err(e.into()))?
            .ok_or_else(|| {
                user(
                    "no queue is configured: the records already are in .taskdaemon/store/\n  hint: set `queue: postgres://…` (or TASKDAEMON_QUEUE) to name the queue to copy from",
                )
            })?;
        migrate::to_jsonl(&dir, &queue, a.force, now_ms())
    } else {
        let queue = QueueConfig::for_url(&dir, &a.to).map_err(|e| store_err(e.into()))?;
        migrate::to_postgres(&dir, &queue, a.force, now_ms())
    }
    .map_err(store_err)?;
    if a.json {
        print_json(&report)?;
        return Ok(0);
    }
    let mut out = String::new();
    outln!(
        out,
        "copied {} plan(s), {} spec(s), {} run(s) from {} to {} (project {})",
        report.plans,
        report.specs,
        report.runs,
        report.from,
        report.to,
        report.project
    );
    if report.tombstones > 0 {
        outln!(
            out,
            "  {} deletion(s) (tombstones) {}",
            report.tombstones,
            if to_jsonl {
                "copied"
            } else {
                "not copied: deleted records stay deleted"
            }
        );
    }
    let t = report.tables;
    if let Some(dir) = &report.tables_dir
        && t.leases + t.run_logs + t.merges > 0
    {
        outln!(
            out,
            "  {} iteration log(s), {} merge record(s), {} lease(s) {} {}",
            t.run_logs,
            t.merges,
            t.leases,
            if to_jsonl { "kept in" } else { "restored from" },
            dir.display()
        );
    }
    if let Some(saved) = &report.saved {
        let r = report.replaced_tables;
        outln!(
            out,
            "  replaced {} record line(s), {} iteration log(s), {} merge record(s), {} lease(s); they were saved in {}",
            report.replaced,
            r.run_logs,
            r.merges,
            r.leases,
            saved.display()
        );
    }
    if to_jsonl {
        outln!(
            out,
            "  hint: remove `queue:` from the config (and unset TASKDAEMON_QUEUE) to use these files"
        );
    } else {
        outln!(
            out,
            "  hint: set `queue:` to that URL (with its password) in .taskdaemon/config.yaml on every clone (then `taskdaemon trust` there), or TASKDAEMON_QUEUE, to use it"
        );
    }
    say(&out)?;
    Ok(0)
}

fn trust(a: TrustArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let dir = ctx.project_dir()?;
    let records = taskdaemon_core::store::Records::open(&dir).map_err(store_err)?;
    let id = records.resolve(&a.reference).map_err(store_err)?;
    let chain = records.trust(&id).map_err(store_err)?;
    emit(&format!(
        "trusted as if created here: {}\n",
        chain.join(", ")
    ))?;
    Ok(0)
}

/// Where the records are: the store's directory, or the queue (its password hidden) and
/// the project's key.
pub(crate) fn where_is(records: &taskdaemon_core::store::Records) -> String {
    match (records.store().dir(), records.queue()) {
        (Some(d), _) => d.display().to_string(),
        (None, Some(q)) => format!("{} (project {})", q.shown(), q.project),
        (None, None) => String::new(),
    }
}

/// Loads anything: these commands are how a too-large store gets fixed.
fn unlimited() -> StoreOptions {
    StoreOptions {
        max_bytes: None,
        ..Default::default()
    }
}

#[derive(Serialize)]
struct CheckReport<'a> {
    store: String,
    ok: bool,
    bad_lines: Vec<&'a taskstore::LineIssue>,
    oversized: Vec<String>,
    large: Vec<String>,
    graph: Vec<taskdaemon_core::store::check::GraphIssue>,
    merge_driver: merge_store::DriverStatus,
}

fn check(a: CheckArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let dir = ctx.project_dir()?;
    let records =
        taskdaemon_core::store::Records::open_with(&dir, unlimited()).map_err(store_err)?;
    let store = records.store();
    let stats = store.stats();
    let oversized: Vec<String> = stats
        .iter()
        .filter(|s| s.bytes > MAX_BYTES)
        .map(|s| {
            format!(
                "{} is {} MB, over the {} MB limit: other commands refuse to load it\n  hint: `taskdaemon store compact`",
                s.file.display(),
                s.bytes / (1024 * 1024),
                MAX_BYTES / (1024 * 1024)
            )
        })
        .collect();
    let large: Vec<String> = stats
        .iter()
        .filter(|s| s.bytes > WARN_BYTES && s.bytes <= MAX_BYTES)
        .map(|s| {
            format!(
                "{} is {} MB (warning at {} MB)",
                s.file.display(),
                s.bytes / (1024 * 1024),
                WARN_BYTES / (1024 * 1024)
            )
        })
        .collect();
    let graph = records.check_graph().map_err(store_err)?;
    let driver = merge_store::status(&dir);
    // A driver configured but whose program is gone makes every merge of the store fail.
    let driver_broken = driver.driver.is_some() && !driver.program_exists;
    let report = CheckReport {
        store: where_is(&records),
        ok: store.issues().is_empty() && oversized.is_empty() && graph.is_empty() && !driver_broken,
        bad_lines: store.issues(),
        oversized,
        large,
        graph,
        merge_driver: driver,
    };
    let code = if report.ok { 0 } else { 1 };
    if a.json {
        print_json(&report)?;
        return Ok(code);
    }
    let mut out = String::new();
    outln!(out, "store: {}", report.store);
    for s in &stats {
        outln!(
            out,
            "  {}: {} records, {} bad line(s)",
            s.file
                .file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default(),
            s.live,
            s.bad_lines
        );
    }
    for i in &report.bad_lines {
        outln!(out, "{i}");
    }
    for o in report.oversized.iter().chain(&report.large) {
        outln!(out, "{o}");
    }
    for g in &report.graph {
        outln!(out, "{}: {}", g.id, g.problem);
    }
    outln!(out, "{}", report.merge_driver.describe());
    if report.ok {
        outln!(out, "ok");
    } else if !report.bad_lines.is_empty() && store.postgres().is_some() {
        outln!(
            out,
            "hint: the rows above are skipped; fix their `body` in the queue's `records` table (project `{}`), \
or delete them there",
            records
                .queue()
                .map(|q| q.project.as_str())
                .unwrap_or_default()
        );
    } else if !report.bad_lines.is_empty() {
        outln!(
            out,
            "hint: fix or delete the lines above (for conflict markers, keep one version of the record); \
`taskdaemon store compact --drop-corrupt` moves them to a .rejected file"
        );
    }
    emit(&out)?;
    Ok(code)
}

fn compact(a: CompactArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let retention = parse_duration(&a.retention)
        .map_err(|e| user(format!("--retention: {e}\n  hint: e.g. 30d, 12h, 0s")))?;
    let retention_ms = i64::try_from(retention.as_millis()).unwrap_or(DEFAULT_RETENTION_MS);
    let dir = ctx.project_dir()?;
    let mut records =
        taskdaemon_core::store::Records::open_with(&dir, unlimited()).map_err(store_err)?;
    let o = CompactOptions {
        retention_ms,
        now_ms: now_ms(),
        drop_corrupt: a.drop_corrupt,
    };
    let Some(store) = records.store_mut().jsonl_mut() else {
        return Err(user(format!(
            "the records are in the shared queue {}: there are no files to compact\n  hint: PostgreSQL keeps only the latest version of each record; nothing to do",
            where_is(&records)
        )));
    };
    let names: Vec<String> = store.collection_names().map(String::from).collect();
    let mut reports = Vec::new();
    for name in names {
        let r = store.compact(&name, &o).map_err(|e| store_err(e.into()))?;
        reports.push(r);
    }
    if a.json {
        super::print_list("collections", &reports)?;
        return Ok(0);
    }
    let mut out = String::new();
    for r in &reports {
        if r.bytes_before == 0 {
            continue;
        }
        outln!(
            out,
            "{}: {} -> {} bytes; {} records, {} tombstones kept, {} dropped{}",
            r.file.display(),
            r.bytes_before,
            r.bytes_after,
            r.records,
            r.tombstones_kept,
            r.tombstones_dropped,
            match &r.rejected_file {
                Some(f) => format!(
                    "; {} unreadable line(s) moved to {}",
                    r.rejected_lines,
                    f.display()
                ),
                None => String::new(),
            }
        );
    }
    emit(&out)?;
    Ok(0)
}

fn stats(a: StatsArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let dir = ctx.project_dir()?;
    let records =
        taskdaemon_core::store::Records::open_with(&dir, unlimited()).map_err(store_err)?;
    let stats = records.store().stats();
    if a.json {
        super::print_list("collections", &stats)?;
        return Ok(0);
    }
    let mut out = String::new();
    outln!(out, "store: {}", where_is(&records));
    outln!(
        out,
        "{:<12} {:>12} {:>8} {:>8} {:>10} {:>10} {:>9}",
        "COLLECTION",
        "BYTES",
        "LINES",
        "LIVE",
        "TOMBSTONES",
        "SUPERSEDED",
        "BAD"
    );
    for s in &stats {
        outln!(
            out,
            "{:<12} {:>12} {:>8} {:>8} {:>10} {:>10} {:>9}",
            s.collection,
            s.bytes,
            s.lines,
            s.live,
            s.tombstones,
            s.superseded,
            s.bad_lines
        );
    }
    outln!(
        out,
        "size guard: warning above {} MB, refused above {} MB per file (run `taskdaemon store compact`)",
        WARN_BYTES / (1024 * 1024),
        MAX_BYTES / (1024 * 1024)
    );
    emit(&out)?;
    Ok(0)
}
