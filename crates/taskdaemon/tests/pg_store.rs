//! The PostgreSQL backend of the store and the queue API (issue 19), against a real
//! server (`common/pg.rs`): the record commands through the CLI, the domain checks, the
//! claim/lease promises under concurrency, and `store migrate` both ways.

mod harness;
#[path = "common/pg.rs"]
mod pg;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use harness::Env;
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

#[test]
fn two_claimers_never_get_the_same_run() {
    let Some(db) = pg::database() else { return };
    let env = Env::new();
    let q = queue(&db, "claims");
    let ids = pending_runs(&mut open(&env, &q), 40);
    let barrier = Arc::new(Barrier::new(2));
    let handles: Vec<_> = (0..2)
        .map(|n| {
            let (ids, q, repo, barrier) = (ids.clone(), q.clone(), env.repo(), barrier.clone());
            std::thread::spawn(move || {
                let mut r = Records::open_queue(&repo, q).expect("open");
                let me = Holder::new(&format!("m{n}"), 100 + n, NOW);
                barrier.wait();
                let mut mine = Vec::new();
                // Small batches, so the two interleave.
                for chunk in ids.chunks(3) {
                    mine.extend(r.claim(chunk, &me, Duration::from_secs(60)).expect("claim"));
                }
                mine
            })
        })
        .collect();
    let got: Vec<Vec<String>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
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
