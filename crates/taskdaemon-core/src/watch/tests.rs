use std::time::{Duration, Instant};

use super::*;

fn view(id: &str, status: RunStatus) -> RunView {
    let mut m = Model::default();
    let v = m.run_mut(id);
    v.status = status;
    v.clone()
}

#[test]
fn notes_say_what_a_run_waits_for() {
    assert_eq!(
        waiting_from_note("DECIDE: A or B? (answer with `taskdaemon -C /w answer \"…\"`, then x)"),
        Some(Waiting::Decide("A or B?".into()))
    );
    assert_eq!(
        waiting_from_note("BLOCKED: no key"),
        Some(Waiting::Blocked("no key".into()))
    );
    assert!(matches!(
        waiting_from_note("held on taskdaemon/integration/main: …"),
        Some(Waiting::MergeHeld(_))
    ));
    assert_eq!(waiting_from_note("cancelled by a person"), None);
}

#[test]
fn rows_show_the_tree_and_fit_80_columns() {
    let mut m = Model {
        repository: "/src/repo".into(),
        daemon: Some(42),
        ..Model::default()
    };
    m.plans.push(PlanNode {
        id: "p1".into(),
        title: "A plan with a very long title that goes on and on and on beyond the screen".into(),
        status: "in-progress".into(),
        runs: vec![],
        specs: vec![SpecNode {
            id: "s1".into(),
            title: "login".into(),
            status: "running".into(),
            runs: vec!["r1".into()],
        }],
    });
    let mut r = view("r1", RunStatus::Blocked);
    r.title = "login".into();
    r.iteration = 3;
    r.max_iterations = Some(10);
    r.cost_usd = Some(0.5);
    r.last_tool = Some("Edit src/login.rs".into());
    r.waiting = Some(Waiting::Decide("OAuth or passwords?".into()));
    m.runs.insert("r1".into(), r);
    m.run_mut("r2").title = "fix the flaky test".into();
    let rows = m.rows(80);
    let text: Vec<&str> = rows.iter().map(|r| r.text.as_str()).collect();
    assert!(text[0].starts_with("● plan A plan with"), "{text:#?}");
    assert!(
        text[1].starts_with("  ● spec login") && text[1].ends_with(" running"),
        "{text:#?}"
    );
    assert!(
        text[2].starts_with("    ! login")
            && text[2].contains("blocked")
            && text[2].contains("it 3/10")
            && text[2].contains("$0.50")
    );
    assert!(text[3].contains("DECIDE: OAuth or passwords?"));
    // The status column starts at one place on every line, whatever the depth.
    let col = |t: &str, w: &str| t.find(w).map(|b| t[..b].chars().count());
    assert_eq!(
        col(text[1], "running"),
        col(text[2], "blocked"),
        "{text:#?}"
    );
    let r2 = text
        .iter()
        .find(|t| t.contains("fix the flaky test"))
        .unwrap();
    assert_eq!(col(r2, "running"), col(text[2], "blocked"), "{text:#?}");
    // 80 columns leave no room for the last tool; 120 do.
    assert!(!text[2].contains("Edit src/"), "{text:#?}");
    let wide = m.rows(120);
    assert!(wide[2].text.contains("Edit src/login.rs"), "{wide:#?}");
    assert!(wide[2].text.chars().count() <= 120);
    for t in &text {
        assert!(t.chars().count() <= 80, "{t}");
    }
    assert_eq!(m.run_order(), vec!["r1", "r2"]);
    assert!(m.header().contains("daemon pid 42"));
}

#[test]
fn pushed_events_fold_into_the_model() {
    use crate::daemon::events::{DaemonEvent as E, Subject, WaitReason};
    let subject = Subject {
        run: "r1".into(),
        title: "add login".into(),
        loop_type: "ralph".into(),
        plan: None,
        spec: None,
        repo: "/src/repo".into(),
    };
    let mut m = Model::default();
    let events = [
        E::RunStarted {
            subject: subject.clone(),
            iteration: 1,
            worktree: "/src/repo/.taskdaemon/worktrees/r1".into(),
            resumed: false,
        },
        E::IterationStarted {
            subject: subject.clone(),
            iteration: 2,
            max_iterations: 9,
            log: String::new(),
        },
        E::AgentActivity {
            subject: subject.clone(),
            iteration: 2,
            tool: "Edit".into(),
            detail: "src/a.rs".into(),
        },
        E::Waiting {
            subject: subject.clone(),
            reason: WaitReason::UsageLimit,
            until: Some("2026-11-24T06:00:00Z".into()),
            message: "usage limit".into(),
            action: None,
            line: None,
            facts: Default::default(),
        },
    ];
    for e in &events {
        m.apply(e);
    }
    let r = &m.runs["r1"];
    assert_eq!(r.title, "add login");
    assert_eq!(r.iteration_text(), "2/9");
    assert_eq!(r.last_tool.as_deref(), Some("Edit src/a.rs"));
    assert_eq!(
        r.waiting,
        Some(Waiting::UsageLimit {
            until: "2026-11-24T06:00:00Z".into()
        })
    );
    assert!(
        m.log_path("r1")
            .unwrap()
            .ends_with(".ralph/logs/iteration-002.log")
    );
    m.apply(&E::WaitOver {
        subject: subject.clone(),
        reason: WaitReason::UsageLimit,
    });
    m.apply(&E::Decide {
        subject: subject.clone(),
        question: "A or B?".into(),
        action: String::new(),
        facts: Default::default(),
    });
    assert_eq!(m.runs["r1"].status, RunStatus::Blocked);
    assert_eq!(
        m.runs["r1"].waiting,
        Some(Waiting::Decide("A or B?".into()))
    );
    m.apply(&E::Paused { subject });
    assert_eq!(m.runs["r1"].status, RunStatus::Paused);
    assert_eq!(m.run_order(), vec!["r1"]);
}

fn plan_with_spec() -> Model {
    let mut m = Model::default();
    m.plans.push(PlanNode {
        id: "p1".into(),
        title: "widgets".into(),
        status: "in-progress".into(),
        runs: vec!["r-plan".into()],
        specs: vec![SpecNode {
            id: "s1".into(),
            title: "base".into(),
            status: "running".into(),
            runs: vec![],
        }],
    });
    m.runs
        .insert("r-plan".into(), view("r-plan", RunStatus::Complete));
    m
}

#[test]
fn a_new_run_goes_under_its_spec_and_a_merge_completes_the_spec() {
    use crate::daemon::events::{DaemonEvent as E, Subject};
    let mut m = plan_with_spec();
    let subject = Subject {
        run: "r-phase".into(),
        title: "base".into(),
        loop_type: "phase".into(),
        plan: Some("p1".into()),
        spec: Some("s1".into()),
        repo: "/src/repo".into(),
    };
    let changed = m.apply(&E::RunStarted {
        subject: subject.clone(),
        iteration: 1,
        worktree: "/src/repo/.taskdaemon/worktrees/s1".into(),
        resumed: false,
    });
    assert!(changed, "a run's start changes its record");
    assert_eq!(m.plans[0].specs[0].runs, vec!["r-phase"]);
    assert!(m.standalone.is_empty(), "{:?}", m.standalone);
    let line = E::AgentLine {
        subject: subject.clone(),
        iteration: 1,
        stream: crate::daemon::events::AgentStream::Text,
        line: "hello".into(),
    };
    assert!(!m.apply(&line), "an agent line changes no record");
    m.apply(&E::Merged {
        subject: Subject {
            run: "s1".into(),
            loop_type: String::new(),
            spec: None,
            ..subject
        },
        branch: "taskdaemon/s1".into(),
        target: "main".into(),
        held_on: None,
    });
    assert_eq!(m.plans[0].specs[0].status, "complete");
}

#[test]
fn a_running_runs_elapsed_time_goes_on_from_when_it_was_read() {
    let t0 = Instant::now();
    let mut m = plan_with_spec();
    let mut fresh = plan_with_spec();
    let mut r = view("r-plan", RunStatus::Running);
    r.elapsed_ms = 5_000;
    fresh.runs.insert("r-plan".into(), r.clone());
    m.refresh(fresh, t0);
    let at = |m: &Model, secs: u64| m.runs["r-plan"].elapsed_at(t0 + Duration::from_secs(secs));
    assert_eq!(at(&m, 0), 5_000);
    assert_eq!(at(&m, 3), 8_000);
    let rows = m.rows_at(100, t0 + Duration::from_secs(65));
    assert!(rows[1].text.contains("1m 10s"), "{rows:#?}");
    // Read again with the same stored time: it keeps going from the first read.
    let mut again = plan_with_spec();
    again.runs.insert("r-plan".into(), r.clone());
    m.refresh(again, t0 + Duration::from_secs(2));
    assert_eq!(at(&m, 3), 8_000);
    // The store's time moved (an iteration ended): from there, from now.
    let mut later = plan_with_spec();
    r.elapsed_ms = 9_000;
    later.runs.insert("r-plan".into(), r.clone());
    m.refresh(later, t0 + Duration::from_secs(4));
    assert_eq!(at(&m, 5), 10_000);
    // A run that is not running does not tick.
    let mut done = plan_with_spec();
    r.status = RunStatus::Complete;
    done.runs.insert("r-plan".into(), r);
    m.refresh(done, t0 + Duration::from_secs(6));
    assert_eq!(at(&m, 60), 9_000);
}

#[test]
fn an_implement_run_shows_its_tasks_from_its_worktree() {
    let wt = tempfile::tempdir().unwrap();
    let spec = wt.path().join("specs/demo");
    std::fs::create_dir_all(&spec).unwrap();
    std::fs::write(
        spec.join("tasks.md"),
        "# Tasks\n\n- [x] 1.1 Add the parser\n- [ ] 1.2 [P] Wire it in\n",
    )
    .unwrap();
    let run = |dir: &str| -> crate::store::LoopRun {
        serde_json::from_value(serde_json::json!({
            "id": "r1-run-implement", "loop-type": "implement", "status": "running",
            "iteration": 1, "created-at": 1, "updated-at": 1,
            "worktree": wt.path().display().to_string(),
            "context": {"spec-dir": dir},
        }))
        .unwrap()
    };
    let v = RunView::from_record(&run("specs/demo"), "demo");
    assert_eq!(
        v.tasks,
        vec![
            ("1.1 Add the parser".to_string(), "done".to_string()),
            ("1.2 Wire it in".to_string(), "pending".to_string()),
        ]
    );
    // A spec dir pointing out of the worktree is not read.
    assert!(
        RunView::from_record(&run("../../etc"), "x")
            .tasks
            .is_empty()
    );
}

#[test]
fn a_held_merge_shows_the_command_that_takes_it() {
    use crate::daemon::events::{DaemonEvent as E, Subject};
    let subject = Subject {
        run: "r1".into(),
        title: "add login".into(),
        loop_type: "ralph".into(),
        plan: None,
        spec: None,
        repo: "/src/repo".into(),
    };
    let mut m = Model::default();
    m.apply(&E::MergeHeld {
        subject,
        branch: "taskdaemon/r1".into(),
        target: "main".into(),
        integration_branch: "taskdaemon/integration/main".into(),
        checkout: "/src/repo".into(),
        message: "held on taskdaemon/integration/main: …".into(),
        action: "git -C /src/repo merge --no-edit taskdaemon/integration/main".into(),
    });
    assert_eq!(
        m.runs["r1"].waiting,
        Some(Waiting::MergeHeld(
            "take it with `git -C /src/repo merge --no-edit taskdaemon/integration/main`".into()
        ))
    );
}
