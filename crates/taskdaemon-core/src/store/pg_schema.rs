//! The shared queue's schema, versioned: `taskdaemon_schema` lists the applied versions;
//! each migration runs in one transaction under an advisory lock, so daemons starting
//! together migrate once.

use postgres::Client;

use super::pg_conn::{QueueConfig, QueueError};

/// Migrations in order; version = index + 1. Never edit one that shipped: add another.
const MIGRATIONS: &[&str] = &[
    // 1: records (the JSONL lines, kept byte for byte in `body`), leases, logs, merges.
    "create sequence if not exists taskdaemon_seq;
     create table records (
         project text not null,
         collection text not null,
         id text not null,
         updated_at bigint not null,
         deleted boolean not null default false,
         seq bigint not null,
         first_seq bigint not null,
         body json not null,
         primary key (project, collection, id));
     create index records_by_seq on records (project, seq);
     create index records_by_status on records (project, collection, (body->>'status'));
     create index records_by_kind on records (project, collection, (body->>'loop-type'));
     create index records_by_parent on records (project, (body->>'parent'));
     create table leases (
         project text not null,
         run_id text not null,
         holder text not null,
         host text not null,
         pid int not null,
         expires_at timestamptz not null,
         primary key (project, run_id));
     create table run_logs (
         project text not null,
         run_id text not null,
         iteration int not null,
         text text not null,
         primary key (project, run_id, iteration));
     create table merges (
         project text not null,
         run_id text not null,
         target text not null,
         commit text not null,
         recorded_at timestamptz not null default now(),
         primary key (project, run_id));",
];

/// The schema version this binary writes.
pub const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

/// The version the database is at (0: no schema yet).
pub fn version(client: &mut Client, cfg: &QueueConfig) -> Result<i32, QueueError> {
    let sql = |e| QueueError::sql(cfg, "reading the schema version", e);
    let exists: bool = client
        .query_one("select to_regclass('taskdaemon_schema') is not null", &[])
        .map_err(sql)?
        .get(0);
    if !exists {
        return Ok(0);
    }
    Ok(client
        .query_one(
            "select coalesce(max(version), 0) from taskdaemon_schema",
            &[],
        )
        .map_err(sql)?
        .get(0))
}

/// Bring the schema to [`SCHEMA_VERSION`]; refuse a newer one.
pub fn migrate(client: &mut Client, cfg: &QueueConfig) -> Result<(), QueueError> {
    let found = version(client, cfg)?;
    if found > SCHEMA_VERSION {
        return Err(QueueError::SchemaTooNew {
            url: cfg.shown(),
            found,
            known: SCHEMA_VERSION,
        });
    }
    if found == SCHEMA_VERSION {
        return Ok(());
    }
    let sql = |e| QueueError::sql(cfg, "migrating the schema", e);
    let mut tx = client.transaction().map_err(sql)?;
    tx.execute("select pg_advisory_xact_lock(7236910531)", &[])
        .map_err(sql)?;
    tx.batch_execute(
        "create table if not exists taskdaemon_schema (
             version int primary key,
             applied_at timestamptz not null default now())",
    )
    .map_err(sql)?;
    // Another process may have migrated while we waited for the lock.
    let now: i32 = tx
        .query_one(
            "select coalesce(max(version), 0) from taskdaemon_schema",
            &[],
        )
        .map_err(sql)?
        .get(0);
    for (i, m) in MIGRATIONS.iter().enumerate().skip(now.max(0) as usize) {
        tx.batch_execute(m).map_err(sql)?;
        tx.execute(
            "insert into taskdaemon_schema (version) values ($1)",
            &[&(i as i32 + 1)],
        )
        .map_err(sql)?;
    }
    tx.commit().map_err(sql)
}

/// The tables and the sequence the queue's role works with.
const TABLES: &str = "records, leases, run_logs, merges, taskdaemon_schema";

/// What the connected role lacks to use the queue, with the `GRANT` that gives it: before
/// the tables exist, creating them in its schema; after, writing them.
fn missing_privileges(c: &mut Client, cfg: &QueueConfig) -> Result<Option<String>, QueueError> {
    let sql = |e| QueueError::sql(cfg, "reading the role's privileges", e);
    let row = c
        .query_one(
            "select current_user::text, coalesce(current_schema()::text, ''),
                    coalesce(has_schema_privilege(current_schema(), 'CREATE'), false),
                    to_regclass('taskdaemon_schema') is not null",
            &[],
        )
        .map_err(sql)?;
    let (role, schema, create, made): (String, String, bool, bool) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    if !made {
        return Ok((!create).then(|| {
            format!(
                "the role `{role}` may not create the queue's tables in schema `{schema}` (they are made at first use)\n  hint: as the database's owner: GRANT CREATE ON SCHEMA {schema} TO {role}; (or create them once as a role that may, then grant `{role}` SELECT, INSERT, UPDATE, DELETE on them; docs/multi-machine.md)"
            )
        }));
    }
    let ok: bool = c
        .query_one(
            "select bool_and(has_table_privilege(t, 'SELECT, INSERT, UPDATE, DELETE'))
                    and has_sequence_privilege('taskdaemon_seq', 'USAGE, SELECT')
             from unnest(string_to_array($1, ', ')) as t",
            &[&TABLES],
        )
        .map_err(sql)?
        .get::<_, Option<bool>>(0)
        .unwrap_or(false);
    Ok((!ok).then(|| {
        format!(
            "the role `{role}` may not read and write the queue's tables\n  hint: as their owner: GRANT SELECT, INSERT, UPDATE, DELETE ON {TABLES} TO {role}; GRANT USAGE, SELECT ON SEQUENCE taskdaemon_seq TO {role};"
        )
    }))
}

/// What `doctor` says about the shared queue.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct QueueStatus {
    /// The URL, its password hidden.
    pub url: String,
    pub project: String,
    pub reachable: bool,
    /// The schema version found (0: none yet); none when unreachable.
    pub schema: Option<i32>,
    /// The version this binary writes.
    pub expected: i32,
    /// What is wrong, with a hint; none when the queue can be used.
    pub problem: Option<String>,
}

/// Try the queue configured for `repo` without changing anything: `None` when no queue
/// is configured (the JSONL store); a configuration error is a problem too.
pub fn status(repo: &std::path::Path) -> Option<QueueStatus> {
    let cfg = match QueueConfig::resolve(repo) {
        Ok(Some(c)) => c,
        Ok(None) => return None,
        Err(e) => {
            return Some(QueueStatus {
                url: String::new(),
                project: String::new(),
                reachable: false,
                schema: None,
                expected: SCHEMA_VERSION,
                problem: Some(e.to_string()),
            });
        }
    };
    let mut out = QueueStatus {
        url: cfg.shown(),
        project: cfg.project.clone(),
        reachable: false,
        schema: None,
        expected: SCHEMA_VERSION,
        problem: None,
    };
    let found = super::pg_conn::connect_only(&cfg).and_then(|mut c| {
        out.reachable = true;
        // The privileges first: without them even the version cannot be read.
        if let Some(missing) = missing_privileges(&mut c, &cfg)? {
            return Ok((None, Some(missing)));
        }
        Ok((Some(version(&mut c, &cfg)?), None))
    });
    match found {
        Ok((v, missing)) => {
            out.schema = v;
            out.problem = missing;
            if let Some(v) = v.filter(|v| *v > SCHEMA_VERSION) {
                out.problem = Some(
                    QueueError::SchemaTooNew {
                        url: cfg.shown(),
                        found: v,
                        known: SCHEMA_VERSION,
                    }
                    .to_string(),
                );
            }
        }
        Err(e) => out.problem = Some(e.to_string()),
    }
    Some(out)
}
