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
        n.action.as_deref(),
        Some(
            "taskdaemon -C '/src/my repo/.taskdaemon/worktrees/r-12ab' answer \"…\" && taskdaemon -C '/src/my repo' resume r-12ab"
        )
    );
    let body = n.body(Format::Json);
    assert_eq!(body["schema"], 1);
    assert_eq!(body["event"], "decide");
    assert_eq!(body["run"], "r-12ab");
    assert!(body["cost_usd"].is_null() && body["commit"].is_null());
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
        let back: Kind = serde_json::from_value(serde_json::json!(k.as_str())).unwrap();
        assert_eq!(back, k);
        let kebab: Kind =
            serde_json::from_value(serde_json::json!(k.as_str().replace('_', "-"))).unwrap();
        assert_eq!(kebab, k, "the spelling of earlier versions is read");
    }
}

/// Every action of every kind, for a foreground and a daemon run, merged or held, is one
/// command line `sh -n` accepts (no `ls …; then …`), and the words of its note are no
/// command line.
#[test]
fn every_action_is_a_command_line_sh_accepts() {
    let places = [
        Place::Local(Path::new("/src/my repo")),
        Place::Daemon {
            repo: Path::new("/src/my repo"),
            worktree: Some(Path::new("/src/my repo/.taskdaemon/worktrees/r-1")),
        },
    ];
    let held = MergeFacts {
        outcome: MergeOutcome::Held,
        target: "main".into(),
        branch: Some("taskdaemon/r-1".into()),
        integration_branch: Some("taskdaemon/integration/main".into()),
        checkout: Some("/src/my repo".into()),
    };
    let merged = MergeFacts {
        outcome: MergeOutcome::Merged,
        ..held.clone()
    };
    let mut seen = 0;
    for place in places {
        for k in Kind::ALL {
            for m in [None, Some(&held), Some(&merged)] {
                let next = next_step(k, place, "r-1", m, Some("2026-11-24T05:00:00Z"));
                let Some(cmd) = next.command else {
                    assert!(
                        matches!(k, Kind::UsageLimitWait | Kind::UsageLimitOver),
                        "{k}: no command"
                    );
                    assert!(next.note.unwrap().starts_with("nothing to do"));
                    continue;
                };
                assert!(!cmd.contains('`') && !cmd.contains("; then"), "{k}: {cmd}");
                let ok = std::process::Command::new("sh")
                    .args(["-n", "-c", &cmd])
                    .status()
                    .unwrap()
                    .success();
                assert!(ok, "{k}: sh -n refuses {cmd}");
                seen += 1;
            }
        }
    }
    assert!(seen > 40);
    let n = next_step(Kind::Complete, places[1], "r-1", Some(&held), None);
    assert_eq!(
        n.command.as_deref(),
        Some("git -C '/src/my repo' merge --no-edit taskdaemon/integration/main")
    );
    let n = next_step(Kind::Complete, places[1], "r-1", Some(&merged), None);
    assert_eq!(
        n.command.as_deref(),
        Some("taskdaemon -C '/src/my repo' report r-1")
    );
}

/// A command in Markdown is one code span (never backticks inside backticks); Slack gets
/// `&<>` escaped and `*bold*`; Discord `content`; Matrix `body` and HTML.
#[test]
fn each_receiver_gets_its_markup_and_a_command_is_never_nested_in_backticks() {
    let mut n = Notice::new(
        Kind::Blocked,
        Place::Local(Path::new("/r")),
        "r-1",
        "Add <login> & more",
        "the `API_KEY` is missing",
    )
    .with_facts(&crate::daemon::events::RunFacts {
        iterations: 2,
        duration_ms: 61_000,
        cost_usd: None,
        commit: Some("0123456789abcdef0123".into()),
        worktree: None,
    });
    let md = n.markdown();
    assert!(
        md.contains("`taskdaemon -C /r unblock && taskdaemon -C /r run --resume`"),
        "{md}"
    );
    assert!(md.contains("> the `API_KEY` is missing"), "{md}");
    assert!(
        md.contains("2 iterations") && md.contains("cost not reported"),
        "{md}"
    );
    assert!(md.contains("commit `0123456789ab`"), "{md}");
    let slack = n.body(Format::Slack);
    let t = slack["text"].as_str().unwrap();
    assert!(
        t.contains("&lt;login&gt; &amp; more") && t.contains("*is BLOCKED*"),
        "{t}"
    );
    let discord = n.body(Format::Discord);
    assert_eq!(discord["content"], md.as_str());
    let matrix = n.body(Format::Matrix);
    assert_eq!(matrix["msgtype"], "m.text");
    assert_eq!(matrix["body"], n.text().as_str());
    let html = matrix["formatted_body"].as_str().unwrap();
    assert!(
        html.contains(
            "<code>taskdaemon -C /r unblock &amp;&amp; taskdaemon -C /r run --resume</code>"
        ),
        "{html}"
    );
    assert!(html.contains("&lt;login&gt;"), "{html}");
    let plain = n.text();
    assert!(
        !plain.contains("**")
            && plain.contains("next (deal with the reason first, then): taskdaemon -C /r unblock"),
        "{plain}"
    );
    // An action with a backtick of its own goes into a fenced block.
    n.action = Some("echo `date`".into());
    let md = n.markdown();
    assert!(md.contains("\n```\necho `date`\n```"), "{md}");
    assert_eq!(
        Format::of_url("https://hooks.slack.com/services/T/B/X"),
        Format::Slack
    );
    assert_eq!(
        Format::of_url("https://discord.com/api/webhooks/1/x"),
        Format::Discord
    );
    assert_eq!(Format::of_url("http://127.0.0.1:9/hook"), Format::Json);
}

/// A daemon run's `complete` waits for its merge: merged says so and points at the
/// report; held names the merge that takes it; a spec's held merge is `merge_held`.
#[test]
fn a_daemon_complete_waits_for_the_merge_outcome() {
    use crate::daemon::events::{DaemonEvent, RunFacts, Subject};
    let subject = |run: &str| Subject {
        run: run.into(),
        title: "write the readme".into(),
        loop_type: "ralph".into(),
        plan: None,
        spec: None,
        repo: "/src/shop".into(),
    };
    let facts = RunFacts {
        iterations: 3,
        duration_ms: 1200,
        cost_usd: Some(0.03),
        commit: Some("abc".into()),
        worktree: Some("/src/shop/.taskdaemon/worktrees/r-1".into()),
    };
    let complete = |run: &str| DaemonEvent::Complete {
        subject: subject(run),
        reason: "validation passed".into(),
        facts: facts.clone(),
        merge_follows: true,
    };
    let mut d = DaemonNotices::default();
    assert!(d.on(&complete("r-1")).is_empty(), "waits for the merge");
    let merged = d.on(&DaemonEvent::Merged {
        subject: subject("r-1"),
        branch: "taskdaemon/r-1".into(),
        target: "main".into(),
        held_on: None,
    });
    assert_eq!(merged.len(), 1);
    let n = &merged[0];
    assert_eq!(
        (n.kind, n.reason.as_str()),
        (Kind::Complete, "validation passed")
    );
    assert_eq!(n.merge.as_ref().unwrap().outcome, MergeOutcome::Merged);
    assert_eq!(
        n.action.as_deref(),
        Some("taskdaemon -C /src/shop report r-1")
    );
    assert_eq!((n.iterations, n.cost_usd), (Some(3), Some(0.03)));

    // One whose merge outcome never comes (another machine merged it) goes after the wait.
    assert!(d.on(&complete("r-3")).is_empty());
    assert!(d.overdue(std::time::Duration::from_secs(3600)).is_empty());
    let late = d.overdue(std::time::Duration::ZERO);
    assert_eq!(late.len(), 1);
    assert_eq!(
        (late[0].kind, late[0].merge.is_none()),
        (Kind::Complete, true)
    );

    assert!(d.on(&complete("r-2")).is_empty());
    assert!(
        d.on(&DaemonEvent::Merged {
            subject: subject("r-2"),
            branch: "taskdaemon/r-2".into(),
            target: "main".into(),
            held_on: Some("taskdaemon/integration/main".into()),
        })
        .is_empty(),
        "merge-held follows and says where"
    );
    let held_event = |run: &str| DaemonEvent::MergeHeld {
        subject: subject(run),
        branch: format!("taskdaemon/{run}"),
        target: "main".into(),
        integration_branch: "taskdaemon/integration/main".into(),
        checkout: "/src/shop".into(),
        message: "held".into(),
        action: String::new(),
    };
    let held = d.on(&held_event("r-2"));
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].kind, Kind::Complete);
    assert_eq!(
        held[0].action.as_deref(),
        Some("git -C /src/shop merge --no-edit taskdaemon/integration/main")
    );
    assert!(held[0].summary().contains("HELD"), "{}", held[0].summary());
    let spec = d.on(&held_event("s-1"));
    assert_eq!(spec.len(), 1);
    assert_eq!(spec[0].kind, Kind::MergeHeld);
    assert!(d.flush().is_empty());
    assert!(d.on(&complete("r-3")).is_empty());
    assert_eq!(d.flush().len(), 1, "what still waits goes out at the stop");
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
    assert_eq!(n.run.as_deref(), Some("run-1"));
    assert!(n.action.is_none(), "nothing to run: {n:?}");
    assert!(n.action_note.unwrap().contains("05:00"));
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
    n.action = Some("taskdaemon -C /r unblock".into());
    n.action_note = None;
    assert!(
        n.text().contains("\nnext: taskdaemon -C /r unblock\n"),
        "{}",
        n.text()
    );
    assert!(
        n.markdown()
            .contains("**Next:** `taskdaemon -C /r unblock`"),
        "{}",
        n.markdown()
    );
}
