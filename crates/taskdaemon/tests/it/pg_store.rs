//! The PostgreSQL backend of the store and the queue API (issue 19), against a real
//! server (`pg.rs`): the record commands through the CLI, the domain checks, the
//! claim/lease promises under concurrency, and `store migrate` both ways.

use crate::pg;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use crate::harness::Env;
use pg::PgDb;
use taskdaemon_core::store::{
    Holder, NewPlan, NewRun, NewSpec, QueueConfig, Records, RunStatus, StoreError,
};

const NOW: i64 = 1_763_726_400_000; // 2025-11-21T12:00:00Z

fn queue(db: &PgDb, project: &str) -> QueueConfig {
    QueueConfig {
        url: db.url(),
        project: project.into(),
    }
}

fn open(env: &Env, q: &QueueConfig) -> Records {
    Records::open_queue(&env.repo(), q.clone()).expect("open the queue")
}

/// `n` pending runs without deps.
fn pending_runs(r: &mut Records, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            r.create_run(
                NewRun {
                    loop_type: "ralph".into(),
                    name: Some(format!("job {i}")),
                    ..Default::default()
                },
                NOW,
            )
            .expect("create run")
            .id
        })
        .collect()
}

/// Two machines (threads, each with its own connection) claiming `ids` at the same moment
/// in batches of `chunk` (small, so the two interleave), within `limit`: what each got.
fn claim_from_two_machines(
    env: &Env,
    q: &QueueConfig,
    ids: &[String],
    chunk: usize,
    limit: Option<usize>,
) -> Vec<Vec<String>> {
    let barrier = Arc::new(Barrier::new(2));
    let handles: Vec<_> = (0..2)
        .map(|n| {
            let (ids, q, repo, barrier) = (ids.to_vec(), q.clone(), env.repo(), barrier.clone());
            std::thread::spawn(move || {
                let mut r = Records::open_queue(&repo, q).expect("open");
                let me = Holder::new(&format!("m{n}"), 100 + n, NOW);
                barrier.wait();
                let mut mine = Vec::new();
                for batch in ids.chunks(chunk) {
                    let ttl = Duration::from_secs(60);
                    mine.extend(r.claim_within(batch, &me, ttl, limit).expect("claim"));
                }
                mine
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn two_claimers_never_get_the_same_run() {
    let Some(db) = pg::database() else { return };
    let env = Env::new();
    let q = queue(&db, "claims");
    let ids = pending_runs(&mut open(&env, &q), 40);
    let got = claim_from_two_machines(&env, &q, &ids, 3, None);
    let mut all: Vec<String> = got.concat();
    all.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(all, want, "every run claimed exactly once: {got:?}");
    let mut r = open(&env, &q);
    r.sync().unwrap();
    for id in &ids {
        let run = r
            .store()
            .get_as::<taskdaemon_core::store::LoopRun>(id)
            .unwrap()
            .unwrap();
        assert_eq!(run.status, RunStatus::Running, "{id}");
    }
    let leases = r.leases().unwrap();
    assert_eq!(leases.len(), ids.len());
    // A second claim finds nothing left.
    let late = Holder::new("m9", 9, NOW);
    assert!(
        r.claim(&ids, &late, Duration::from_secs(60))
            .unwrap()
            .is_empty()
    );
}

#[test]
fn two_claimers_at_once_never_run_more_than_the_projects_limit() {
    // `queue-max-loops`: the running runs are counted under the project's lock, so two
    // machines claiming at the same moment cannot both take the last free places.
    let Some(db) = pg::database() else { return };
    let env = Env::new();
    let q = queue(&db, "claim-limit");
    let ids = pending_runs(&mut open(&env, &q), 12);
    let got = claim_from_two_machines(&env, &q, &ids, 2, Some(5));
    assert_eq!(got.concat().len(), 5, "{got:?}");
    let mut r = open(&env, &q);
    r.sync().unwrap();
    let running = ids
        .iter()
        .filter(|id| {
            r.store()
                .get_as::<taskdaemon_core::store::LoopRun>(id)
                .unwrap()
                .is_some_and(|run| run.status == RunStatus::Running)
        })
        .count();
    assert_eq!(running, 5);
}

#[test]
fn an_expired_lease_is_taken_over_once_and_the_old_holder_cannot_renew() {
    let Some(db) = pg::database() else { return };
    let env = Env::new();
    let q = queue(&db, "takeover");
    let mut r = open(&env, &q);
    let ids = pending_runs(&mut r, 3);
    let dead = Holder::new("dead", 1, NOW);
    // A lease that is already over.
    assert_eq!(r.claim(&ids, &dead, Duration::ZERO).unwrap(), ids);
    assert!(r.leases().unwrap().iter().all(|l| l.expired));
    let barrier = Arc::new(Barrier::new(2));
    let handles: Vec<_> = (0..2)
        .map(|n| {
            let (q, repo, barrier) = (q.clone(), env.repo(), barrier.clone());
            std::thread::spawn(move || {
                let mut r = Records::open_queue(&repo, q).expect("open");
                let me = Holder::new(&format!("alive{n}"), 200 + n, NOW);
                barrier.wait();
                let taken = r
                    .take_over_expired(&me, Duration::from_secs(600), 10)
                    .unwrap();
                (me, taken.into_iter().map(|t| t.id).collect::<Vec<_>>())
            })
        })
        .collect();
    let got: Vec<(Holder, Vec<String>)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let mut all: Vec<String> = got.iter().flat_map(|(_, t)| t.clone()).collect();
    all.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(all, want, "each run taken over exactly once: {got:?}");
    // The dead holder's renew says no; the new holders' says yes.
    for id in &ids {
        assert!(
            !r.renew(id, &dead, Duration::from_secs(60)).unwrap(),
            "{id}"
        );
    }
    for (holder, taken) in &got {
        for id in taken {
            assert!(r.renew(id, holder, Duration::from_secs(60)).unwrap());
        }
    }
    // Nothing expired is left; a released lease makes the run available again.
    let third = Holder::new("third", 3, NOW);
    assert!(
        r.take_over_expired(&third, Duration::from_secs(60), 10)
            .unwrap()
            .is_empty()
    );
    let (h0, t0) = got.iter().find(|(_, t)| !t.is_empty()).unwrap();
    r.release(&t0[0], h0).unwrap();
    let again = r
        .take_over_expired(&third, Duration::from_secs(60), 10)
        .unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].id, t0[0]);
    let lease = r
        .leases()
        .unwrap()
        .into_iter()
        .find(|l| l.run_id == t0[0])
        .unwrap();
    assert_eq!((lease.host.as_str(), lease.pid), ("third", 3));
}

#[test]
fn a_merge_is_recorded_once_and_logs_stay_bounded() {
    let Some(db) = pg::database() else { return };
    let env = Env::new();
    let q = queue(&db, "merges");
    let mut a = open(&env, &q);
    let mut b = open(&env, &q);
    assert!(a.record_merge("r1", "main", "abc").unwrap());
    assert!(!b.record_merge("r1", "main", "def").unwrap());
    assert_eq!(a.merged("r1").unwrap().as_deref(), Some("abc"));
    assert_eq!(b.merged("r2").unwrap(), None);
    let big = "x".repeat(300 * 1024) + "tail";
    a.put_log("r1", 1, "first").unwrap();
    a.put_log("r1", 2, &big).unwrap();
    a.put_log("r1", 1, "first, again").unwrap();
    let logs = b.logs("r1").unwrap();
    assert_eq!(logs.len(), 2);
    assert_eq!(logs[0], (1, "first, again".to_string()));
    assert_eq!(logs[1].1.len(), 256 * 1024);
    assert!(logs[1].1.ends_with("tail"));
    // Another project sees none of it.
    let other = open(&env, &queue(&db, "elsewhere"));
    assert_eq!(other.merged("r1").unwrap(), None);
    assert!(other.logs("r1").unwrap().is_empty());
}

#[test]
fn the_domain_checks_hold_on_postgres() {
    let Some(db) = pg::database() else { return };
    let env = Env::new();
    let q = queue(&db, "checks");
    let mut a = open(&env, &q);
    let mut b = open(&env, &q);
    let plan = a
        .create_plan(
            NewPlan {
                title: "the plan".into(),
                ..Default::default()
            },
            NOW,
        )
        .unwrap();
    // b sees a's plan after catching up, and writes under the same checks.
    let s1 = b
        .create_spec(
            NewSpec {
                title: "one".into(),
                parent: plan.id.clone(),
                ..Default::default()
            },
            NOW,
        )
        .unwrap();
    let s2 = a
        .create_spec(
            NewSpec {
                title: "two".into(),
                parent: plan.id.clone(),
                deps: vec![s1.id.clone()],
                ..Default::default()
            },
            NOW,
        )
        .unwrap();
    // A dep that does not exist.
    let missing = a.create_spec(
        NewSpec {
            title: "three".into(),
            parent: plan.id.clone(),
            deps: vec!["abcdef-spec-nothing".into()],
            ..Default::default()
        },
        NOW,
    );
    assert!(
        matches!(missing, Err(StoreError::Missing { .. })),
        "{missing:?}"
    );
    // A cycle, made by the other connection.
    b.sync().unwrap();
    let mut s1b = match b.get(&s1.id).unwrap().unwrap() {
        taskdaemon_core::store::AnyRecord::Spec(s) => s,
        other => panic!("{other:?}"),
    };
    s1b.deps.push(s2.id.clone());
    let cyc = b.update(
        taskdaemon_core::store::AnyRecord::Spec(s1b.clone()),
        NOW + 1,
    );
    assert!(matches!(cyc, Err(StoreError::Cycle { .. })), "{cyc:?}");
    // A stale update: a changed it after b read it.
    let mut s1a = match a.get(&s1.id).unwrap().unwrap() {
        taskdaemon_core::store::AnyRecord::Spec(s) => s,
        other => panic!("{other:?}"),
    };
    s1a.title = "one, renamed".into();
    a.update(taskdaemon_core::store::AnyRecord::Spec(s1a), NOW + 5)
        .unwrap();
    s1b.deps.clear();
    s1b.title = "one, b's name".into();
    let stale = b.update(taskdaemon_core::store::AnyRecord::Spec(s1b), NOW + 6);
    assert!(
        matches!(stale, Err(StoreError::Changed { .. })),
        "{stale:?}"
    );
    // Still referenced: no delete; the checks rolled back cleanly and the store works.
    let used = b.delete(&s1.id, NOW + 7);
    assert!(matches!(used, Err(StoreError::InUse { .. })), "{used:?}");
    b.delete(&s2.id, NOW + 7).unwrap();
    a.sync().unwrap();
    assert!(a.get(&s2.id).unwrap().is_none());
    assert_eq!(a.resolve("renamed").ok(), None, "ids keep their slug");
    assert_eq!(a.resolve(&s1.id[..6]).unwrap(), s1.id);
    // Unique hex: every id's hex differs.
    let ids: Vec<String> = [plan.id, s1.id]
        .into_iter()
        .map(|i| i[..6].to_string())
        .collect();
    assert_ne!(ids[0], ids[1]);
}

fn id_of(out: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(out).expect(out);
    v["id"].as_str().expect(out).to_string()
}

fn with_queue(db: &PgDb, project: &str) -> Vec<(String, String)> {
    vec![
        ("TASKDAEMON_QUEUE".into(), db.url()),
        ("TASKDAEMON_QUEUE_PROJECT".into(), project.into()),
    ]
}

#[test]
fn the_record_commands_work_unchanged_on_postgres() {
    let Some(db) = pg::database() else { return };
    let env = Env::new();
    // The queue in the project's config, its password (ignored by the test server's
    // trust login) never shown.
    std::fs::create_dir_all(env.repo().join(".taskdaemon")).unwrap();
    std::fs::write(
        env.repo().join(".taskdaemon/config.yaml"),
        format!(
            "queue: {}&password=s3cret-pw\nqueue-project: cli\n",
            db.url()
        ),
    )
    .unwrap();
    let none: &[(String, String)] = &[];
    // A repository's queue is used once its config is trusted.
    env.ok_with(none, &["trust"]);
    let plan = id_of(&env.ok_with(none, &["plan", "new", "Shared plan", "--json"]));
    let one = id_of(&env.ok_with(none, &["spec", "new", "one", "--parent", &plan, "--json"]));
    let two = id_of(&env.ok_with(
        none,
        &[
            "spec", "new", "two", "--parent", &plan, "--deps", "one", "--json",
        ],
    ));
    let sub: serde_json::Value =
        serde_json::from_str(&env.ok_with(none, &["submit", "ralph", "tidy the docs", "--json"]))
            .unwrap();
    let run = sub["created"][0]["id"].as_str().unwrap().to_string();
    let list = env.ok_with(none, &["list"]);
    for id in [&plan, &one, &two, &run] {
        assert!(list.contains(id.as_str()), "{list}");
    }
    let show: serde_json::Value =
        serde_json::from_str(&env.ok_with(none, &["show", "two", "--json"])).unwrap();
    assert_eq!(show["deps"][0], one.as_str());
    assert_eq!(show["ready"], false);
    env.ok_with(none, &["edit", &one, "--status", "complete"]);
    let show: serde_json::Value =
        serde_json::from_str(&env.ok_with(none, &["show", "two", "--json"])).unwrap();
    assert_eq!(show["ready"], true, "{show}");
    // A cycle is refused as on JSONL.
    let r = env.run(&["edit", &one, "--add-dep", &two]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(r.stderr.contains("cycle"), "{}", r.stderr);
    for (verb, want) in [
        ("pause", "pending -> paused"),
        ("resume", "paused -> pending"),
        ("start", ""),
        ("cancel", "-> stopped"),
    ] {
        let out = env.ok_with(none, &[verb, &run]);
        assert!(out.contains(want), "{verb}: {out}");
    }
    let status = env.ok_with(none, &["status"]);
    assert!(status.contains(&plan) && status.contains(&run), "{status}");
    let r = env.run(&["delete", &one]);
    assert_eq!(r.code, 64, "in use: {}", r.stderr);
    env.ok_with(none, &["delete", &two]);
    assert!(!env.ok_with(none, &["list"]).contains(&two));
    // Nothing went to the JSONL files; everything is in the queue.
    assert!(!env.repo().join(".taskdaemon/store/specs.jsonl").exists());
    let q = queue(&db, "cli");
    let r = open(&env, &q);
    assert!(r.get(&plan).unwrap().is_some());
    assert!(r.get(&two).unwrap().is_none());
    assert_eq!(r.get(&one).unwrap().unwrap().status(), "complete");
    // Settings and doctor show the queue with its origin, never the password.
    let shown = env.ok_with(none, &["config", "show"]);
    assert!(
        shown.contains("queue-project") && shown.contains("password=***"),
        "{shown}"
    );
    let doctor = env.run(&["doctor"]);
    let all = format!("{}{}", doctor.stdout, doctor.stderr);
    assert!(all.contains("reachable, schema version 1"), "{all}");
    // Issue 42: `store stats` counts the queue's records (it printed only its header).
    let stats = env.ok_with(none, &["store", "stats"]);
    let row = |c: &str| -> Vec<String> {
        stats
            .lines()
            .find(|l| l.split_whitespace().next() == Some(c))
            .unwrap_or_else(|| panic!("no {c} row:\n{stats}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    // COLLECTION BYTES LINES LIVE TOMBSTONES: one plan; one spec live, one deleted; one run.
    assert_eq!(row("plans")[3], "1", "{stats}");
    assert_eq!(
        (row("specs")[3].as_str(), row("specs")[4].as_str()),
        ("1", "1"),
        "{stats}"
    );
    assert_eq!(row("runs")[3], "1", "{stats}");
    for text in [&shown, &all, &list, &stats] {
        assert!(!text.contains("s3cret-pw"), "{text}");
    }
}

#[test]
fn an_unreadable_row_is_skipped_and_reported_not_fatal() {
    // As a bad line of a JSONL file: the rest of the queue loads, `store check` names it.
    let Some(db) = pg::database() else { return };
    let env = Env::new();
    let vars = with_queue(&db, "bad-row");
    let plan = id_of(&env.ok_with(&vars, &["plan", "new", "Kept plan", "--json"]));
    let doomed = id_of(&env.ok_with(&vars, &["plan", "new", "Broken plan", "--json"]));
    let mut admin = postgres::Client::connect(&db.url(), postgres::NoTls).unwrap();
    admin
        .execute(
            "update records set body = '{\"id\": 7}'::json where project = 'bad-row' and id = $1",
            &[&doomed],
        )
        .unwrap();
    let r = env.run_with(&vars, &["list"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains(&plan) && !r.stdout.contains(&doomed),
        "{}",
        r.stdout
    );
    assert!(r.stderr.contains("skipped 1 unreadable"), "{}", r.stderr);
    let r = env.run_with(&vars, &["store", "check"]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(
        r.stdout
            .contains(&format!("record `{doomed}` is unreadable")),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("`records` table (project `bad-row`)"),
        "{}",
        r.stdout
    );
    // Written again, it reads and the report is gone.
    admin
        .execute(
            "update records
                set body = (select jsonb_set(body::jsonb, '{id}', to_jsonb($1::text))::json
                              from records where project = 'bad-row' and id = $2),
                    seq = nextval('taskdaemon_seq')
              where project = 'bad-row' and id = $1",
            &[&doomed, &plan],
        )
        .unwrap();
    let r = env.run_with(&vars, &["store", "check"]);
    assert!(!r.stdout.contains("unreadable"), "{}", r.stdout);
    assert!(env.ok_with(&vars, &["list"]).contains(&doomed));
}

#[test]
fn an_unreachable_or_malformed_queue_says_what_to_do_and_exits_64() {
    let env = Env::new();
    let gone = env.root().join("no-server-here");
    for (url, want) in [
        (
            format!(
                "postgresql:///db?user=u&password=pw-xyz&host={}",
                gone.display()
            ),
            "cannot connect",
        ),
        (
            "postgres://u:pw-xyz@127.0.0.1:1/db".to_string(),
            "cannot connect",
        ),
        (
            "mysql://u:pw-xyz@host/db".to_string(),
            "not a postgres:// URL",
        ),
    ] {
        let vars = vec![
            ("TASKDAEMON_QUEUE".to_string(), url.clone()),
            ("TASKDAEMON_QUEUE_PROJECT".to_string(), "p".to_string()),
        ];
        for args in [&["list"][..], &["store", "migrate", "--to", &url][..]] {
            let r = env.run_with(&vars, args);
            assert_eq!(r.code, 64, "{url} {args:?}: {}", r.stderr);
            assert!(r.stderr.contains(want), "{}", r.stderr);
            assert!(r.stderr.contains("hint:"), "{}", r.stderr);
            assert!(!r.stderr.contains("pw-xyz"), "{}", r.stderr);
        }
    }
    // No remote and no queue-project: the project has no key.
    let vars = vec![(
        "TASKDAEMON_QUEUE".to_string(),
        "postgres://h/db".to_string(),
    )];
    let r = env.run_with(&vars, &["list"]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(r.stderr.contains("queue-project"), "{}", r.stderr);
}

/// The live records' stored lines per collection, as the JSONL store holds them.
fn lines(env: &Env) -> Vec<Vec<String>> {
    let r = Records::open_jsonl(&env.repo(), Default::default()).unwrap();
    let s = r.store();
    ["plans", "specs", "runs"]
        .iter()
        .map(|c| {
            s.list_raw(c, &[])
                .unwrap()
                .into_iter()
                .map(|(_, l)| String::from_utf8(l).unwrap())
                .collect()
        })
        .collect()
}

#[test]
fn migrate_round_trips_byte_for_byte_and_refuses_to_overwrite() {
    let Some(db) = pg::database() else { return };
    let env = Env::new();
    let none: &[(String, String)] = &[];
    let plan = id_of(&env.ok_with(none, &["plan", "new", "Move me", "--json"]));
    env.ok_with(
        none,
        &[
            "spec",
            "new",
            "alpha",
            "--parent",
            &plan,
            "--phase",
            "P1: first",
        ],
    );
    env.ok_with(
        none,
        &["spec", "new", "beta", "--parent", &plan, "--deps", "alpha"],
    );
    env.ok_with(none, &["spec", "new", "doomed", "--parent", &plan]);
    env.ok_with(none, &["delete", "doomed"]);
    env.ok_with(
        none,
        &["submit", "ralph", "a task with \"quotes\" and ünïcode"],
    );
    env.ok_with(none, &["edit", "alpha", "--status", "running"]);
    let before = lines(&env);
    assert_eq!(before.iter().map(Vec::len).sum::<usize>(), 4);
    let url = format!("{}&password=pw-hidden", db.url());
    let vars = vec![("TASKDAEMON_QUEUE_PROJECT".to_string(), "mig".to_string())];
    let out: serde_json::Value =
        serde_json::from_str(&env.ok_with(&vars, &["store", "migrate", "--to", &url, "--json"]))
            .unwrap();
    assert_eq!(
        (
            out["plans"].as_u64(),
            out["specs"].as_u64(),
            out["runs"].as_u64()
        ),
        (Some(1), Some(2), Some(1))
    );
    assert_eq!(out["tombstones"], 1);
    assert!(!out.to_string().contains("pw-hidden"));
    // Again: the target holds the project now.
    let r = env.run_with(&vars, &["store", "migrate", "--to", &url]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(r.stderr.contains("--force"), "{}", r.stderr);
    // Forced: the project is replaced whole, its old leases and merge records too.
    let mut admin = postgres::Client::connect(&db.url(), postgres::NoTls).unwrap();
    admin
        .batch_execute(
            "insert into leases (project, run_id, holder, host, pid, expires_at)
               values ('mig', 'old-run', 'h:1:0', 'h', 1, now() + interval '1 hour');
             insert into merges (project, run_id, target, commit)
               values ('mig', 'old-run', 'main', 'abc')",
        )
        .unwrap();
    let out: serde_json::Value = serde_json::from_str(&env.ok_with(
        &vars,
        &["store", "migrate", "--to", &url, "--force", "--json"],
    ))
    .unwrap();
    // What was replaced is saved, the old project's lease and merge record with its records.
    let saved = std::path::PathBuf::from(out["saved"].as_str().unwrap());
    assert_eq!(out["replaced_tables"]["leases"], 1, "{out}");
    assert_eq!(out["replaced_tables"]["merges"], 1, "{out}");
    let saved_merges = std::fs::read_to_string(saved.join("merges.jsonl")).unwrap();
    assert!(
        saved_merges.contains("\"run_id\":\"old-run\"") && saved_merges.contains("abc"),
        "{saved_merges}"
    );
    for table in ["leases", "merges"] {
        let n: i64 = admin
            .query_one(
                &format!("select count(*) from {table} where project = 'mig'"),
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(n, 0, "{table} kept rows of the replaced project");
    }
    // Ids, fields and updated-at as they were.
    let q = queue(&db, "mig");
    let pg = open(&env, &q);
    for (i, c) in ["plans", "specs", "runs"].iter().enumerate() {
        let got: Vec<String> = pg
            .store()
            .list_raw(c, &[])
            .unwrap()
            .into_iter()
            .map(|(_, l)| String::from_utf8(l).unwrap())
            .collect();
        assert_eq!(got, before[i], "{c}");
    }
    // The queue's other tables: a live lease, two iteration logs, a merge record.
    admin
        .batch_execute(
            "insert into leases (project, run_id, holder, host, pid, expires_at)
               values ('mig', 'run-1', 'h:1:0', 'h', 1, '2026-12-02 10:00:00.123456+00');
             insert into run_logs (project, run_id, iteration, text)
               values ('mig', 'run-1', 1, 'first ünïcode \"log\"'), ('mig', 'run-1', 2, 'second');
             insert into merges (project, run_id, target, commit, recorded_at)
               values ('mig', 'run-1', 'main', 'def', '2026-12-02 11:00:00.654321+00')",
        )
        .unwrap();
    let tables_before = side_tables(&mut admin, "mig");
    // Back: refused over the existing files, then forced (they are saved first).
    let mut back = with_queue(&db, "mig");
    back[0].1 = url.clone();
    let r = env.run_with(&back, &["store", "migrate", "--to", "jsonl"]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    let out: serde_json::Value = serde_json::from_str(&env.ok_with(
        &back,
        &["store", "migrate", "--to", "jsonl", "--force", "--json"],
    ))
    .unwrap();
    let saved = std::path::PathBuf::from(out["saved"].as_str().unwrap());
    assert!(saved.join("specs.jsonl").is_file());
    assert_eq!(
        (
            out["tables"]["leases"].as_u64(),
            out["tables"]["run_logs"].as_u64(),
            out["tables"]["merges"].as_u64()
        ),
        (Some(1), Some(2), Some(1)),
        "{out}"
    );
    assert!(
        env.repo()
            .join(".git/taskdaemon/queue-tables/run_logs.jsonl")
            .is_file()
    );
    assert_eq!(
        lines(&env),
        before,
        "JSONL -> Postgres -> JSONL is byte-identical"
    );
    // Each file now holds exactly the latest lines.
    let specs = std::fs::read_to_string(env.repo().join(".taskdaemon/store/specs.jsonl")).unwrap();
    assert_eq!(
        specs,
        before[1]
            .iter()
            .map(|l| format!("{l}\n"))
            .collect::<String>()
    );
    // The JSONL store works as before on the written files.
    env.ok_with(none, &["edit", "beta", "--status", "complete"]);
    assert!(env.ok_with(none, &["list"]).contains("complete"));
    // And to the queue again: the other tables come back byte for byte.
    admin
        .batch_execute("delete from run_logs where project = 'mig'")
        .unwrap();
    let out = env.ok_with(&vars, &["store", "migrate", "--to", &url, "--force"]);
    assert!(
        out.contains("2 iteration log(s), 1 merge record(s), 1 lease(s) restored from"),
        "{out}"
    );
    assert_eq!(
        side_tables(&mut admin, "mig"),
        tables_before,
        "leases, run_logs and merges after JSONL and back"
    );
}

/// Every row of the project's leases, run_logs and merges, as PostgreSQL prints them.
fn side_tables(admin: &mut postgres::Client, project: &str) -> Vec<String> {
    let mut rows = Vec::new();
    for (table, order) in [
        ("leases", "run_id"),
        ("run_logs", "run_id, iteration"),
        ("merges", "run_id"),
    ] {
        for r in admin
            .query(
                &format!("select row_to_json(t)::text from (select * from {table} where project = $1 order by {order}) t"),
                &[&project],
            )
            .unwrap()
        {
            rows.push(format!("{table}: {}", r.get::<_, String>(0)));
        }
    }
    assert!(!rows.is_empty());
    rows
}

#[test]
fn sync_sees_other_writers_and_notify_wakes_listeners() {
    use taskstore::ChangeKind;
    let Some(db) = pg::database() else { return };
    let env = Env::new();
    let q = queue(&db, "sync");
    let mut a = open(&env, &q);
    let mut b = open(&env, &q);
    let mut listen = taskdaemon_core::store::queue::listener(&q).unwrap();
    let plan = b
        .create_plan(
            NewPlan {
                title: "from b".into(),
                ..Default::default()
            },
            NOW,
        )
        .unwrap();
    assert!(listen.wait(Duration::from_secs(60)).unwrap(), "notified");
    assert!(a.get(&plan.id).unwrap().is_none(), "not before sync");
    a.sync().unwrap();
    let seen: Vec<(String, ChangeKind)> = a
        .take_changes()
        .into_iter()
        .map(|c| (c.id, c.kind))
        .collect();
    assert_eq!(seen, vec![(plan.id.clone(), ChangeKind::Created)]);
    let mut p = match b.get(&plan.id).unwrap().unwrap() {
        taskdaemon_core::store::AnyRecord::Plan(p) => p,
        other => panic!("{other:?}"),
    };
    p.title = "renamed by b".into();
    b.update(taskdaemon_core::store::AnyRecord::Plan(p), NOW + 1)
        .unwrap();
    b.delete(&plan.id, NOW + 2).unwrap();
    a.sync().unwrap();
    let kinds: Vec<ChangeKind> = a.take_changes().into_iter().map(|c| c.kind).collect();
    // One row per record: the latest state (deleted) is what a reader catches up to.
    assert_eq!(kinds, vec![ChangeKind::Deleted]);
    assert!(a.get(&plan.id).unwrap().is_none());
    // The id stays taken (a tombstone), as on JSONL.
    assert_eq!(a.store().status_of("plans", &plan.id).unwrap(), Some(true));
    // Writes of another project do not wake this one.
    let mut other = open(&env, &queue(&db, "sync-other"));
    while listen.wait(Duration::from_millis(1)).unwrap() {}
    other
        .create_plan(
            NewPlan {
                title: "elsewhere".into(),
                ..Default::default()
            },
            NOW,
        )
        .unwrap();
    assert!(!listen.wait(Duration::from_millis(300)).unwrap());
}

#[test]
fn an_advisory_lock_is_held_until_dropped() {
    let Some(db) = pg::database() else { return };
    let env = Env::new();
    let q = queue(&db, "locks");
    let r = open(&env, &q);
    let held = r.exclusive("merge:main").unwrap();
    let mut probe = postgres::Client::connect(&db.url(), postgres::NoTls).unwrap();
    let try_lock = |c: &mut postgres::Client| -> bool {
        let got: bool = c
            .query_one(
                "select pg_try_advisory_lock(hashtextextended('taskdaemon:locks:merge:main', 0))",
                &[],
            )
            .unwrap()
            .get(0);
        if got {
            c.execute(
                "select pg_advisory_unlock(hashtextextended('taskdaemon:locks:merge:main', 0))",
                &[],
            )
            .unwrap();
        }
        got
    };
    assert!(!try_lock(&mut probe), "held by another session");
    drop(held);
    // The server releases it when the holder's connection ends.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !try_lock(&mut probe) {
        assert!(std::time::Instant::now() < deadline, "never released");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Another key of the same project is another lock.
    let _a = r.exclusive("merge:main").unwrap();
    let _b = r.exclusive("merge:release").unwrap();
}

#[test]
fn on_jsonl_the_queue_api_is_the_one_daemon_case() {
    let env = Env::new();
    let mut r = Records::open(&env.repo()).unwrap();
    assert!(r.queue().is_none());
    let ids = pending_runs(&mut r, 2);
    let me = Holder::new("here", 1, NOW);
    assert_eq!(r.claim(&ids, &me, Duration::from_secs(1)).unwrap(), ids);
    assert!(
        r.claim(&ids, &me, Duration::from_secs(1))
            .unwrap()
            .is_empty()
    );
    let run = r
        .store()
        .get_as::<taskdaemon_core::store::LoopRun>(&ids[0])
        .unwrap()
        .unwrap();
    assert_eq!(run.status, RunStatus::Running);
    assert!(r.renew(&ids[0], &me, Duration::from_secs(1)).unwrap());
    assert!(
        r.take_over_expired(&me, Duration::ZERO, 10)
            .unwrap()
            .is_empty()
    );
    assert!(r.leases().unwrap().is_empty());
    assert!(r.record_merge(&ids[0], "main", "abc").unwrap());
    assert!(r.logs(&ids[0]).unwrap().is_empty());
    drop(r.exclusive("merge:main").unwrap());
    let _again = r.exclusive("merge:main").unwrap();
    assert!(
        env.repo()
            .join(".git/taskdaemon/locks/merge_main.lock")
            .is_file()
    );
}

#[test]
fn a_dropped_connection_is_replaced_and_the_cache_reloaded() {
    let Some(db) = pg::database() else { return };
    let env = Env::new();
    let q = queue(&db, "reconnect");
    let mut a = open(&env, &q);
    let mut b = open(&env, &q);
    let mut admin = postgres::Client::connect(&db.url(), postgres::NoTls).unwrap();
    // End every other session on the database (a's, b's: a server restart, say).
    admin
        .execute(
            "select pg_terminate_backend(pid) from pg_stat_activity
             where datname = current_database() and pid <> pg_backend_pid()",
            &[],
        )
        .unwrap();
    // What runs on the dead connection fails with a queue error, then the next call
    // reconnects.
    let first = a.sync();
    let second = a.sync();
    assert!(first.is_ok() || second.is_ok(), "{first:?} / {second:?}");
    let mut made = None;
    for _ in 0..2 {
        if let Ok(p) = b.create_plan(
            NewPlan {
                title: "after the drop".into(),
                ..Default::default()
            },
            NOW,
        ) {
            made = Some(p);
            break;
        }
    }
    let plan = made.expect("b writes again after reconnecting");
    a.sync().unwrap();
    assert!(a.get(&plan.id).unwrap().is_some());
}

/// Issue 42: a role that may not create the queue's tables (PostgreSQL 15's `public`), or
/// may not write them, fails `doctor` with the `GRANT` that fixes it, and a command that
/// meets the refusal says where to look, instead of passing `doctor` and failing later.
#[test]
fn a_role_without_privileges_fails_doctor_with_the_grant_that_fixes_it() {
    let Some(db) = pg::database() else { return };
    let env = Env::new();
    let mut admin = postgres::Client::connect(&db.url(), postgres::NoTls).unwrap();
    let role = format!("weak_{}", db.name);
    admin
        .batch_execute(&format!(
            "create role {role} login; revoke create on schema public from public"
        ))
        .unwrap();
    let weak = db.url().replace("user=postgres", &format!("user={role}"));
    let vars = vec![
        ("TASKDAEMON_QUEUE".to_string(), weak.clone()),
        ("TASKDAEMON_QUEUE_PROJECT".to_string(), "weak".to_string()),
    ];
    let doctor = env.run_with(&vars, &["doctor"]);
    let all = format!("{}{}", doctor.stdout, doctor.stderr);
    assert_eq!(doctor.code, 78, "{all}");
    assert!(
        all.contains(&format!("GRANT CREATE ON SCHEMA public TO {role};")),
        "{all}"
    );
    let list = env.run_with(&vars, &["list"]);
    assert_ne!(list.code, 0);
    assert!(
        list.stderr.contains("`taskdaemon doctor` names the GRANT"),
        "{}",
        list.stderr
    );
    // The tables made by their owner, the role not granted them: doctor names that GRANT.
    env.ok_with(
        &[("TASKDAEMON_QUEUE".to_string(), db.url()), vars[1].clone()],
        &["list"],
    );
    let doctor = env.run_with(&vars, &["doctor"]);
    let all = format!("{}{}", doctor.stdout, doctor.stderr);
    assert_eq!(doctor.code, 78, "{all}");
    assert!(
        all.contains("GRANT SELECT, INSERT, UPDATE, DELETE ON records"),
        "{all}"
    );
    // Granted as said, it passes that check.
    admin
        .batch_execute(&format!(
            "grant select, insert, update, delete on records, leases, run_logs, merges, taskdaemon_schema to {role};
             grant usage, select on sequence taskdaemon_seq to {role}"
        ))
        .unwrap();
    let doctor = env.run_with(&vars, &["doctor"]);
    let all = format!("{}{}", doctor.stdout, doctor.stderr);
    assert!(!all.contains("GRANT"), "{all}");
    assert!(all.contains("reachable, schema version 1"), "{all}");
    env.ok_with(&vars, &["list"]);
}
