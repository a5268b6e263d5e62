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
    assert!(text[0].starts_with("plan A plan with"), "{text:#?}");
    assert!(text[1].contains("spec login [running]"), "{text:#?}");
    assert!(
        text[2].contains("blocked") && text[2].contains("it 3/10") && text[2].contains("$0.50")
    );
    assert!(text[2].contains("Edit src/logi"), "{text:#?}");
    assert!(text[3].contains("DECIDE: OAuth or passwords?"));
    assert!(text.iter().any(|t| t.contains("fix the flaky test")));
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
        r.log_path()
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
