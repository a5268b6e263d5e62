use std::path::Path;

use super::*;
use crate::config::Settings;

fn parse(text: &str) -> Result<Settings, crate::yaml::YamlError> {
    crate::yaml::parse::<Settings>(Path::new("c.yaml"), text).map(|s| s.unwrap_or_default())
}

#[test]
fn sinks_parse_with_their_filters() {
    let s = parse(
        "notify:\n  - webhook: http://127.0.0.1:9/x?token=secret\n    events: [blocked, usage-limit-wait]\n  - desktop: true\n  - command: ./hook.sh\n    timeout: 3s\n    retries: 0\n",
    )
    .unwrap();
    let sinks = s.notify.unwrap();
    assert_eq!(sinks.len(), 3);
    assert_eq!(
        sinks[0].target,
        Target::Webhook("http://127.0.0.1:9/x?token=secret".into())
    );
    assert!(sinks[0].wants(Kind::Blocked) && sinks[0].wants(Kind::UsageLimitWait));
    assert!(!sinks[0].wants(Kind::Complete));
    assert!(
        !sinks[0].describe().contains("secret"),
        "{}",
        sinks[0].describe()
    );
    assert_eq!(sinks[1].target, Target::Desktop);
    assert!(sinks[1].wants(Kind::DaemonStopped));
    assert_eq!(sinks[2].timeout(), std::time::Duration::from_secs(3));
    assert_eq!(sinks[2].retries(), 0);
}

#[test]
fn bad_sinks_are_refused_with_their_line_and_a_hint() {
    let cases = [
        ("notify:\n  - webhook: ftp://x\n", "not an http(s) URL"),
        (
            "notify:\n  - webhook: http://x\n    command: y\n",
            "one sink per entry",
        ),
        ("notify:\n  - events: [blocked]\n", "needs one of"),
        (
            "notify:\n  - desktop: true\n    events: [blockd]\n",
            "blockd",
        ),
        ("notify:\n  - desktop: true\n    colour: red\n", "colour"),
        ("notify:\n  - command: x\n    timeout: 0s\n", "timeout: 0s"),
        (
            "notify:\n  - command: x\n    events: []\n",
            "takes no event",
        ),
    ];
    for (text, want) in cases {
        let e = parse(&format!("max-stuck: 2\n{text}")).unwrap_err();
        assert!(e.line.is_some_and(|l| l >= 2), "{text}: {e}");
        assert!(e.to_string().contains(want), "{text}: {e}");
    }
}

#[test]
fn user_and_project_sinks_add_up() {
    let user = parse("notify:\n  - desktop: true\n").unwrap();
    let project = parse("notify:\n  - command: ./h\n").unwrap();
    let both = user.clone().merge(project).notify.unwrap();
    assert_eq!(both.len(), 2);
    assert_eq!(user.merge(Settings::default()).notify.unwrap().len(), 1);
}

#[test]
fn a_notice_names_repository_run_reason_and_action() {
    let n = Notice::new(
        Kind::Decide,
        Place::Daemon {
            repo: Path::new("/src/my repo"),
            worktree: Some(Path::new("/src/my repo/.taskdaemon/worktrees/r-12ab")),
        },
        "r-12ab",
        "Add login",
        "  Use OAuth or passwords?\n",
    );
    assert_eq!(n.reason, "Use OAuth or passwords?");
    assert_eq!(
        n.action,
        "taskdaemon -C '/src/my repo/.taskdaemon/worktrees/r-12ab' answer \"…\" && taskdaemon -C '/src/my repo' resume r-12ab"
    );
    let body = n.body();
    assert_eq!(body["event"], "decide");
    assert_eq!(body["run"], "r-12ab");
    let text = body["text"].as_str().unwrap();
    for want in [
        "r-12ab",
        "Add login",
        "my repo",
        "OAuth or passwords",
        "resume r-12ab",
    ] {
        assert!(text.contains(want), "{want} in {text}");
    }
    for k in Kind::ALL {
        let a = action_for(k, Place::Local(Path::new("/r")), "x");
        assert!(
            a.contains("taskdaemon -C /r ") || a == "ls /r/.ralph/logs",
            "{a}"
        );
        let back: Kind = serde_json::from_value(serde_json::json!(k.as_str())).unwrap();
        assert_eq!(back, k);
    }
}

#[test]
fn engine_events_become_notices_with_the_agents_words() {
    use crate::engine::EngineEvent;
    let mut l = LocalNotices::new("/r".into(), "", "fix the bug");
    let started = EngineEvent::RunStarted {
        run_id: "run-1".into(),
        loop_type: "ralph".into(),
        agent: "cmd:x".into(),
        workdir: "/r".into(),
        first_iteration: 1,
        max_iterations: 5,
        validate: None,
        resumed: false,
        sandbox: "none".into(),
        work: None,
    };
    assert!(l.on(&started).is_none());
    let wait = EngineEvent::Waiting {
        iteration: 2,
        class: crate::agent::FailureClass::UsageLimit,
        until: "2026-11-24T05:00:00Z".into(),
        wait_ms: 1000,
        message: "usage limit".into(),
        line: Some("Claude AI usage limit reached".into()),
    };
    let n = l.on(&wait).unwrap();
    assert_eq!(n.kind, Kind::UsageLimitWait);
    assert!(n.reason.contains("Claude AI usage limit reached") && n.reason.contains("05:00"));
    assert_eq!(n.run, "run-1");
    let said = EngineEvent::Signal {
        iteration: 3,
        signal: "blocked".into(),
        text: Some("the API key is missing".into()),
    };
    assert!(l.on(&said).is_none());
}

#[tokio::test]
async fn a_failing_sink_is_reported_once_and_never_blocks_send() {
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let log: Log = {
        let lines = lines.clone();
        std::sync::Arc::new(move |s| lines.lock().unwrap().push(s))
    };
    let sink = parse("notify:\n  - command: echo nope >&2; exit 3\n    retries: 0\n")
        .unwrap()
        .notify
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let n = Notifier::start(&sink, dir.path(), log);
    for _ in 0..(QUEUE * 2) {
        n.send(Notice::new(
            Kind::Failed,
            Place::Local(dir.path()),
            "r",
            "t",
            "why",
        ));
    }
    n.finish(std::time::Duration::from_secs(120)).await;
    let lines = lines.lock().unwrap();
    let failed = lines
        .iter()
        .filter(|l| l.contains("failed (exit 3: nope)"))
        .count();
    let full = lines
        .iter()
        .filter(|l| l.contains("not keeping up"))
        .count();
    assert_eq!(failed, 1, "{lines:?}");
    assert_eq!(full, 1, "{lines:?}");
}

/// A command hook that never ends, at a stop: its process is ended (TERM, within the
/// hook's grace), and the notices it had not finished with, the one in flight and those
/// queued behind it, are named in one line.
#[tokio::test]
async fn a_stop_ends_a_hanging_hook_and_names_what_it_drops() {
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let log: Log = {
        let lines = lines.clone();
        std::sync::Arc::new(move |s| lines.lock().unwrap().push(s))
    };
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let sink = parse(&format!(
        "notify:\n  - command: echo $$ > {}; exec sleep 600\n    timeout: 10m\n",
        started.display()
    ))
    .unwrap()
    .notify
    .unwrap();
    let n = Notifier::start(&sink, dir.path(), log);
    for run in ["run-1", "run-2"] {
        n.send(Notice::new(
            Kind::Blocked,
            Place::Local(dir.path()),
            run,
            "t",
            "why",
        ));
    }
    while std::fs::read_to_string(&started).map_or(true, |s| s.trim().is_empty()) {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let pid: i32 = std::fs::read_to_string(&started)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    n.finish(std::time::Duration::from_millis(100)).await;
    let gone = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err()
        || std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        });
    assert!(gone, "the hook (pid {pid}) still runs after the stop");
    let lines = lines.lock().unwrap();
    let dropped: Vec<&String> = lines.iter().filter(|l| l.contains("dropped")).collect();
    assert_eq!(dropped.len(), 1, "{lines:?}");
    assert!(
        dropped[0].contains("2 notice(s)")
            && dropped[0].contains("blocked of run run-1, blocked of run run-2"),
        "{lines:?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains("failed")),
        "a stop is no failure: {lines:?}"
    );
}

#[test]
fn an_action_with_its_own_commands_quoted_gets_no_backticks_around_them() {
    let mut n = Notice::new(
        Kind::Blocked,
        Place::Local(Path::new("/r")),
        "r-1",
        "Add login",
        "no key",
    );
    n.action = "deal with it, then `taskdaemon unblock` and `taskdaemon resume r-1`".into();
    let text = n.text();
    assert!(
        text.ends_with(
            "\nnext: deal with it, then `taskdaemon unblock` and `taskdaemon resume r-1`"
        ),
        "{text}"
    );
    n.action = "taskdaemon -C /r unblock".into();
    assert!(n.text().ends_with("\nnext: `taskdaemon -C /r unblock`"));
}
