//! Domain records on a real store: constraints, ids, resolution, deps and cycles,
//! readiness and deletion rules.

use std::collections::HashSet;
use std::path::Path;

use serde_json::json;
use taskdaemon_core::store::{
    AnyRecord, Kind, NewPlan, NewRecord, NewRun, NewSpec, Phase, Records, StoreError, ids,
};
use taskstore::{Filter, StoreOptions};

const T0: i64 = 1_763_726_400_000;

fn open(dir: &Path) -> Records {
    Records::open_with(
        dir,
        StoreOptions {
            fsync: false,
            ..Default::default()
        },
    )
    .unwrap()
}

fn plan(r: &mut Records, title: &str, deps: &[&str]) -> String {
    r.create_plan(
        NewPlan {
            title: title.into(),
            deps: deps.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        },
        T0,
    )
    .unwrap()
    .id
}

fn spec(r: &mut Records, title: &str, parent: &str, deps: &[&str]) -> String {
    r.create_spec(
        NewSpec {
            title: title.into(),
            parent: parent.into(),
            deps: deps.iter().map(|s| s.to_string()).collect(),
            phases: vec![Phase::parse("Phase 1: stubs").unwrap()],
            ..Default::default()
        },
        T0,
    )
    .unwrap()
    .id
}

#[test]
fn records_have_the_spec_fields_and_defaults() {
    let d = tempfile::tempdir().unwrap();
    let mut r = open(d.path());
    let p = plan(&mut r, "Add OAuth", &[]);
    let (hex, tag, slug) = ids::split(&p).unwrap();
    assert_eq!((hex.len(), tag, slug), (6, "plan", "add-oauth"));
    let s = spec(&mut r, "OAuth DB schema", &p, &[]);
    let text = std::fs::read_to_string(d.path().join(".taskdaemon/store/specs.jsonl")).unwrap();
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(
        v,
        json!({
            "id": s, "parent": p, "title": "OAuth DB schema", "status": "pending", "deps": [],
            // Stored relative to the repository (the same in every clone).
            "file": format!(".taskdaemon/specs/{s}.md"),
            "phases": [{"name": "Phase 1", "description": "stubs"}],
            "created-at": T0, "updated-at": T0,
        })
    );
    let run = r
        .create_run(
            NewRun {
                loop_type: "phase".into(),
                parent: Some(s.clone()),
                context: Box::new(json!({"spec": s}).as_object().unwrap().clone().into()),
                ..Default::default()
            },
            T0,
        )
        .unwrap();
    assert_eq!((run.iteration, run.status.as_str()), (1, "pending"));
    assert!(run.id.contains("-run-phase"));
    assert_eq!(r.get(&p).unwrap().unwrap().status(), "draft");
}

#[test]
fn constraints_name_the_field() {
    let d = tempfile::tempdir().unwrap();
    let mut r = open(d.path());
    let e = r
        .create_plan(
            NewPlan {
                title: "x".repeat(257),
                ..Default::default()
            },
            T0,
        )
        .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("title: 257 characters, over the limit of 256"),
        "{e}"
    );
    // 256 multi-byte characters are fine.
    r.create_plan(
        NewPlan {
            title: "é".repeat(256),
            ..Default::default()
        },
        T0,
    )
    .unwrap();
    // A relative path is relative to the repository; one that leaves it is refused.
    let e = r
        .create_plan(
            NewPlan {
                title: "t".into(),
                file: Some("../relative/plan.md".into()),
                ..Default::default()
            },
            T0,
        )
        .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("file: `../relative/plan.md` resolves to")
            && e.to_string().contains("outside the repository"),
        "{e}"
    );
    let e = r
        .create_spec(
            NewSpec {
                title: "s".into(),
                parent: "abcdef-plan-nope".into(),
                ..Default::default()
            },
            T0,
        )
        .unwrap_err();
    assert!(
        matches!(&e, StoreError::Missing { field, .. } if field == "parent"),
        "{e}"
    );
    let p = plan(&mut r, "p", &[]);
    let e = r
        .create_spec(
            NewSpec {
                title: "s".into(),
                parent: p.clone(),
                deps: vec!["123456-spec-gone".into()],
                ..Default::default()
            },
            T0,
        )
        .unwrap_err();
    assert_eq!(
        e.to_string().lines().next().unwrap(),
        "deps: 123456-spec-gone does not exist"
    );
    let e = r
        .create_run(
            NewRun {
                loop_type: "phase".into(),
                iteration: Some(0),
                ..Default::default()
            },
            T0,
        )
        .unwrap_err();
    assert!(e.to_string().starts_with("iteration:"), "{e}");
    let mut strict = open(d.path()).with_loop_types(["ralph".to_string()]);
    let e = strict
        .create_run(
            NewRun {
                loop_type: "phase".into(),
                ..Default::default()
            },
            T0,
        )
        .unwrap_err();
    assert!(
        e.to_string().contains("no loop type named `phase`")
            && e.to_string().contains("known: ralph"),
        "{e}"
    );
    // Nothing invalid was written.
    assert_eq!(r.list(Kind::Spec, &[]).unwrap().len(), 0);
}

#[test]
fn a_cycle_is_refused_and_named() {
    let d = tempfile::tempdir().unwrap();
    let mut r = open(d.path());
    let p = plan(&mut r, "plan", &[]);
    let a = spec(&mut r, "a", &p, &[]);
    let b = spec(&mut r, "b", &p, &[&a]);
    let c = spec(&mut r, "c", &p, &[&b]);
    let mut rec = r.get(&a).unwrap().unwrap();
    rec.deps_mut().push(c.clone());
    let e = r.update(rec.clone(), T0 + 1).unwrap_err();
    match &e {
        StoreError::Cycle { cycle } => {
            assert_eq!(cycle, &[a.clone(), c.clone(), b.clone(), a.clone()])
        }
        other => panic!("{other}"),
    }
    assert!(
        e.to_string().starts_with(&format!(
            "deps would make a cycle: {a} -> {c} -> {b} -> {a}"
        )),
        "{e}"
    );
    // Depending on yourself is the shortest cycle.
    let mut selfdep = r.get(&b).unwrap().unwrap();
    selfdep.deps_mut().push(b.clone());
    assert!(matches!(
        r.update(selfdep, T0 + 1),
        Err(StoreError::Cycle { .. })
    ));
    // Nothing changed.
    assert!(r.get(&a).unwrap().unwrap().deps().is_empty());
    // A diamond is not a cycle.
    let mut diamond = r.get(&c).unwrap().unwrap();
    diamond.deps_mut().push(a.clone());
    r.update(diamond, T0 + 1).unwrap();
}

#[test]
fn ready_only_when_every_dep_is_complete() {
    let d = tempfile::tempdir().unwrap();
    let mut r = open(d.path());
    let p = plan(&mut r, "plan", &[]);
    let db = spec(&mut r, "oauth db schema", &p, &[]);
    let api = spec(&mut r, "oauth endpoints", &p, &[&db, &p]);
    let rec = r.get(&api).unwrap().unwrap();
    let rd = r.readiness(&rec).unwrap();
    assert!(!rd.ready);
    assert_eq!(
        rd.waiting,
        [
            (db.clone(), "pending".to_string()),
            (p.clone(), "draft".to_string())
        ]
    );
    for id in [&db, &p] {
        let mut dep = r.get(id).unwrap().unwrap();
        dep.set_status("complete").unwrap();
        r.update(dep, T0 + 5).unwrap();
    }
    assert!(r.is_ready(&rec).unwrap());
    assert!(
        r.is_ready(&r.get(&db).unwrap().unwrap()).unwrap(),
        "no deps: ready"
    );
    assert_eq!(r.get(&db).unwrap().unwrap().updated_at(), T0 + 5);
    let e = r.get(&db).unwrap().unwrap().set_status("done").unwrap_err();
    assert!(
        e.to_string()
            .contains("use one of: pending, blocked, running, paused, complete, failed"),
        "{e}"
    );
}

#[test]
fn resolution_against_the_store() {
    let d = tempfile::tempdir().unwrap();
    let mut r = open(d.path());
    let p = plan(&mut r, "Add OAuth", &[]);
    let db = spec(&mut r, "OAuth DB schema", &p, &[]);
    let ep = spec(&mut r, "OAuth endpoints", &p, &[]);
    let tests = spec(&mut r, "OAuth tests", &p, &[]);
    assert_eq!(r.resolve("oauth-db").unwrap(), db);
    assert_eq!(r.resolve(ids::split(&ep).unwrap().0).unwrap(), ep);
    assert_eq!(r.resolve(&tests).unwrap(), tests);
    let e = r.resolve("oauth").unwrap_err();
    // Oldest first (all made at T0 here, so then by id).
    let mut all = [p.clone(), db.clone(), ep.clone(), tests.clone()];
    all.sort();
    assert_eq!(
        e.to_string().lines().take(5).collect::<Vec<_>>(),
        std::iter::once("ambiguous reference \"oauth\" matches:".to_string())
            .chain(all.iter().map(|i| format!("  - {i}")))
            .collect::<Vec<_>>()
    );
    assert_eq!(r.resolve("endpoint").unwrap(), ep);
    let e = r.resolve("oath-endpionts").unwrap_err();
    assert!(e.to_string().contains(&ep), "nearest should name {ep}: {e}");
    // Deleted records do not resolve.
    r.delete(&tests, T0 + 1).unwrap();
    assert!(r.resolve("oauth-tests").is_err());
}

#[test]
fn hex_stays_unique_across_a_big_batch() {
    let d = tempfile::tempdir().unwrap();
    let mut r = open(d.path());
    let news = (0..3000)
        .map(|i| {
            NewRecord::Plan(NewPlan {
                title: format!("plan {i}"),
                ..Default::default()
            })
        })
        .collect();
    let made = r.create_batch(news, T0).unwrap();
    let hexes: HashSet<&str> = made.iter().map(|m| ids::split(m.id()).unwrap().0).collect();
    assert_eq!(hexes.len(), 3000);
    let r2 = open(d.path());
    assert_eq!(r2.list(Kind::Plan, &[]).unwrap().len(), 3000);
}

#[test]
fn delete_refused_while_referenced() {
    let d = tempfile::tempdir().unwrap();
    let mut r = open(d.path());
    let p = plan(&mut r, "plan", &[]);
    let s = spec(&mut r, "spec", &p, &[]);
    let e = r.delete(&p, T0).unwrap_err();
    assert!(
        e.to_string()
            .starts_with(&format!("{p} is still referenced by {s}")),
        "{e}"
    );
    r.delete(&s, T0).unwrap();
    r.delete(&p, T0).unwrap();
    assert!(r.get(&p).unwrap().is_none());
}

#[test]
fn list_filters_by_status_and_parent() {
    let d = tempfile::tempdir().unwrap();
    let mut r = open(d.path());
    let p1 = plan(&mut r, "one", &[]);
    let p2 = plan(&mut r, "two", &[]);
    let a = spec(&mut r, "a", &p1, &[]);
    let _b = spec(&mut r, "b", &p2, &[]);
    let got = r
        .list(Kind::Spec, &[Filter::eq("parent", p1.as_str())])
        .unwrap();
    assert_eq!(
        got.iter().map(AnyRecord::id).collect::<Vec<_>>(),
        [a.as_str()]
    );
    let got = r
        .list(Kind::Spec, &[Filter::eq("status", "pending")])
        .unwrap();
    assert_eq!(got.len(), 2);
}

#[test]
fn new_record_json_is_checked() {
    let e = NewRecord::from_json(Kind::Spec, json!({"title": "x"})).unwrap_err();
    assert!(e.to_string().contains("missing field `parent`"), "{e}");
    let e = AnyRecord::from_json(Kind::Plan, json!({"id": "x"})).unwrap_err();
    assert!(e.to_string().contains("missing field"), "{e}");
}

#[test]
fn an_update_from_a_stale_read_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let mut r = open(d.path());
    let p = plan(&mut r, "plan", &[]);
    let mut mine = r.get(&p).unwrap().unwrap();
    // Someone else changes it first (another process).
    let mut other = open(d.path());
    let mut theirs = other.get(&p).unwrap().unwrap();
    theirs.set_status("ready").unwrap();
    other.update(theirs, T0 + 10).unwrap();
    mine.set_status("cancelled").unwrap();
    let e = r.update(mine, T0 + 20).unwrap_err();
    assert!(
        matches!(e, StoreError::Changed { read: T0, stored, .. } if stored == T0 + 10),
        "{e}"
    );
    assert_eq!(r.get(&p).unwrap().unwrap().status(), "ready");
}
