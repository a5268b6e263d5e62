use super::*;

const HEADER: &str = "iteration,mode,duration_seconds,commit_hash,stories_complete,stories_total,stuck_count,timestamp,run_id,outcome,agent_exit_code,validation_passed,tokens_in,tokens_out,cost_usd,waited_seconds\n";

fn ralph_with(log2: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let logs = d.path().join(".ralph/logs");
    std::fs::create_dir_all(&logs).unwrap();
    std::fs::write(
        logs.join("summary.csv"),
        format!(
            "{HEADER}1,ralph,0.5,,0,0,0,2026-11-21T12:00:00Z,old,continue,0,false,1,1,0.1,0\n\
1,ralph,2.0,abc123,0,0,1,2026-11-21T12:01:00Z,r1,rejected,0,false,100,20,0.010000,0.000\n\
2,ralph,3.5,def456,0,0,0,2026-11-21T12:02:00Z,r1,complete,0,true,300,40,0.030000,61.000\n"
        ),
    )
    .unwrap();
    std::fs::write(
        d.path().join(".ralph/run.json"),
        r#"{"run_id":"r1","config":{"task":"make <b>it</b> work\nsecond line","loop_name":"ralph","max_iterations":5},
"outcome":{"outcome":"complete","verified":true},"started_at":"2026-11-21T12:01:00Z","elapsed_ms":5500,"stall_count":2,"stall_recoveries":1,"gate_failures":1}"#,
    )
    .unwrap();
    std::fs::write(
        logs.join("iteration-001.log"),
        "[taskdaemon] validation: $ sh test.sh\nFAIL\n",
    )
    .unwrap();
    std::fs::write(logs.join("iteration-001.prompt.md"), "You are iteration 1").unwrap();
    std::fs::write(logs.join("iteration-002.log"), log2).unwrap();
    d
}

fn load(d: &tempfile::TempDir) -> RunData {
    load_run(&RunDir {
        ralph: d.path().join(".ralph"),
        run_id: None,
        title: None,
        record: None,
    })
    .unwrap()
}

#[test]
fn reads_the_current_run_only_with_its_logs_and_state() {
    let d = ralph_with("ok\n");
    let run = load(&d);
    assert_eq!(run.run_id, "r1");
    assert_eq!(run.iterations.len(), 2);
    assert_eq!(run.iterations[0].outcome, Outcome::Rejected);
    assert_eq!(run.iterations[1].validation, Validation::Passed);
    assert_eq!(run.iterations[1].waited_s, 61.0);
    assert_eq!(run.title, "make <b>it</b> work");
    assert_eq!(run.outcome.as_deref(), Some("complete"));
    assert_eq!(run.stall_recoveries, 1);
    assert!((run.total_cost() - 0.04).abs() < 1e-9);
    assert_eq!(run.total_tokens(), (400, 60));
    assert_eq!(run.iterations[0].gate_notes().count(), 1);
    assert!(run.iterations[0].prompt.is_some());
    assert_eq!(run_ids(&d.path().join(".ralph")), ["old", "r1"]);
}

#[test]
fn an_older_run_gets_no_logs_of_the_current_one() {
    let d = ralph_with("ok\n");
    let run = load_run(&RunDir {
        ralph: d.path().join(".ralph"),
        run_id: Some("old".into()),
        title: Some("the old one".into()),
        record: None,
    })
    .unwrap();
    assert_eq!(run.iterations.len(), 1);
    assert!(run.iterations[0].log.is_none());
    assert!(run.outcome.is_none());
    assert_eq!(run.title, "the old one");
}

#[test]
fn hostile_log_text_stays_text() {
    let d = ralph_with(
        "</script><img src=x onerror=alert(1)></pre></details><script>alert(2)</script>\n",
    );
    let run = load(&d);
    let html = render(&Report {
        subject: "run <r1>".into(),
        generated_at: "now".into(),
        runs: vec![run],
        records: vec![],
    });
    assert!(!html.contains("<img"), "an <img> tag got through");
    assert!(!html.contains("<script"), "a <script> tag got through");
    assert!(html.contains("&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;"));
    assert!(html.contains("make &lt;b&gt;it&lt;/b&gt; work"));
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "no network"
    );
    assert_eq!(
        html.matches("<details>").count(),
        html.matches("</details>").count()
    );
    assert!(html.contains("<svg"));
}

#[test]
fn excerpts_are_bounded() {
    let big = "x".repeat(EXCERPT_CAP * 3);
    let e = Excerpt::new(big.as_bytes(), EXCERPT_CAP);
    assert!(e.text.len() <= EXCERPT_CAP + 8);
    assert_eq!(e.cut_bytes, EXCERPT_CAP * 2);
    let small = Excerpt::new(b"abc", EXCERPT_CAP);
    assert_eq!((small.text.as_str(), small.cut_bytes), ("abc", 0));
}

#[test]
fn no_run_is_an_error_that_names_the_directory() {
    let d = tempfile::tempdir().unwrap();
    let e = load_run(&RunDir {
        ralph: d.path().join(".ralph"),
        run_id: None,
        title: None,
        record: None,
    })
    .unwrap_err();
    assert!(e.to_string().contains(".ralph"));
    assert!(e.to_string().contains("hint"));
}

#[test]
fn a_kept_copy_without_run_json_takes_outcome_and_loop_from_the_record() {
    let d = ralph_with("ok\n");
    std::fs::remove_file(d.path().join(".ralph/run.json")).unwrap();
    let run = load_run(&RunDir {
        ralph: d.path().join(".ralph"),
        run_id: Some("r1".into()),
        title: Some("alpha: phase 1".into()),
        record: Some(RecordFacts {
            status: "complete".into(),
            loop_type: "phase".into(),
            note: None,
        }),
    })
    .unwrap();
    assert_eq!(run.outcome.as_deref(), Some("complete"));
    assert_eq!(run.loop_name, "phase");
    let still_running = load_run(&RunDir {
        ralph: d.path().join(".ralph"),
        run_id: Some("r1".into()),
        title: None,
        record: Some(RecordFacts {
            status: "running".into(),
            loop_type: "phase".into(),
            note: None,
        }),
    })
    .unwrap();
    assert!(
        still_running.outcome.is_none(),
        "a running record has no outcome yet"
    );
}

#[test]
fn an_iteration_log_of_a_json_stream_reads_as_words_and_tool_lines() {
    let log = "[taskdaemon] run r1 iteration 2/5 started t; agent claude; output claude-stream-json; prompt p (1 bytes)\n\
{\"type\":\"assistant\",\"message\":{\"content\":[{\"type\":\"tool_use\",\"name\":\"Write\",\"input\":{\"file_path\":\"calc.sh\"}}]}}\n\
{\"type\":\"assistant\",\"message\":{\"content\":[{\"type\":\"text\",\"text\":\"wrote it\"}]}}\n";
    let d = ralph_with(log);
    let run = load(&d);
    let text = &run.iterations[1].log.as_ref().unwrap().text;
    assert!(text.contains("→ Write: calc.sh\nwrote it\n"), "{text}");
    assert!(!text.contains("\"type\""), "{text}");
}

fn it(n: u32, outcome: &str) -> Iteration {
    Iteration {
        n,
        outcome: Outcome::parse(outcome),
        duration_s: 1.0,
        commit: None,
        stuck_count: 0,
        validation: Validation::Skipped,
        tokens_in: 0,
        tokens_out: 0,
        cost_usd: 0.0,
        waited_s: 0.0,
        timestamp: "2026-11-21T12:00:00Z".into(),
        review: None,
        notes: Vec::new(),
        prompt: None,
        log: None,
    }
}

fn run_of(id: &str, iterations: Vec<Iteration>) -> RunData {
    RunData {
        run_id: id.into(),
        title: format!("task {id}"),
        loop_name: "ralph".into(),
        outcome: Some("complete".into()),
        iterations,
        ..RunData::default()
    }
}

fn page(runs: Vec<RunData>) -> String {
    render(&Report {
        subject: "s".into(),
        generated_at: "now".into(),
        runs,
        records: vec![],
    })
}

/// The text of the summary cards of a page's first run.
fn cards(html: &str) -> String {
    let start = html.find("<div class=\"cards\">").expect("cards");
    let end = start + html[start..].find("</div></div>").unwrap_or(0);
    html[start..end].to_string()
}

#[test]
fn a_stall_card_only_for_a_run_that_stalled() {
    // The demo's state: a signature seen once (stall_count 1) is no stall.
    let calm = page(vec![run_of(
        "a",
        vec![it(1, "rejected"), it(2, "complete")],
    )]);
    assert!(!cards(&calm).contains("stall"), "{}", cards(&calm));
    assert!(!calm.contains("stalls ("));
    let mut stalled = run_of(
        "b",
        vec![
            it(1, "continue"),
            it(2, "stall-recovery"),
            it(3, "complete"),
        ],
    );
    stalled.stall_recoveries = 1;
    let html = page(vec![stalled]);
    assert!(
        cards(&html).contains("<b>1</b><span>stalls (1 recovered)</span>"),
        "{}",
        cards(&html)
    );
    // A second stall failed the run: two detected, the first recovered.
    let mut failed = run_of("c", vec![it(1, "stall-recovery"), it(2, "failed")]);
    failed.stall_recoveries = 2;
    assert_eq!(
        failed.stalls(),
        Stalls {
            detected: 2,
            recovered: 1
        }
    );
}

#[test]
fn a_run_without_a_cost_says_so_once_and_shows_no_dollar_figure() {
    for reported in [None, Some(false), Some(true)] {
        let mut run = run_of("a", vec![it(1, "rejected"), it(2, "complete")]);
        run.cost_reported = reported;
        let html = page(vec![run]);
        assert!(!html.contains('$'), "a dollar figure for {reported:?}");
        let says =
            html.matches("not reported").count() + html.matches("the agent reported zero").count();
        // Once for the cost, once for the tokens: both are missing.
        assert_eq!(says, 2, "{reported:?}: {}", cards(&html));
        assert!(!html.contains("cumulative cost") && !html.contains("<th>cost</th>"));
        assert!(!html.contains("none reported by this agent"));
    }
    let mut paid = run_of("b", vec![it(1, "rejected"), it(2, "complete")]);
    paid.iterations[0].cost_usd = 0.01;
    paid.iterations[1].cost_usd = 0.03;
    paid.cost_reported = Some(true);
    let html = page(vec![paid]);
    assert!(cards(&html).contains("<b>$0.0400</b><span>cost</span>"));
    assert!(html.contains("cumulative cost") && html.contains("<th>cost</th>"));
    assert!(cards(&html).contains("<b>not reported</b><span>tokens</span>"));
}

#[test]
fn tokens_show_when_reported() {
    let mut run = run_of("a", vec![it(1, "complete")]);
    run.iterations[0].tokens_in = 1200;
    run.iterations[0].tokens_out = 30;
    let html = page(vec![run]);
    assert!(cards(&html).contains("<b>1.2k / 30</b><span>tokens in / out</span>"));
    assert!(html.contains("cumulative tokens") && html.contains("<th>tokens in/out</th>"));
}

#[test]
fn waits_rejections_and_stuck_counts_only_when_there_were_some() {
    let quiet = page(vec![run_of("a", vec![it(1, "complete")])]);
    for absent in [
        "waited",
        "completions rejected",
        "without a commit",
        "<th>waited</th>",
    ] {
        assert!(!quiet.contains(absent), "{absent}: {}", cards(&quiet));
    }
    let mut busy = run_of(
        "b",
        vec![it(1, "rejected"), it(2, "continue"), it(3, "complete")],
    );
    busy.iterations[1].waited_s = 61.0;
    busy.iterations[1].stuck_count = 2;
    let html = page(vec![busy]);
    let c = cards(&html);
    assert!(
        c.contains("<b>1.0m</b><span>waited (usage limits, backoff)</span>"),
        "{c}"
    );
    assert!(
        c.contains("<b>1</b><span>completions rejected</span>"),
        "{c}"
    );
    assert!(
        c.contains("<b>2</b><span>most iterations in a row without a commit</span>"),
        "{c}"
    );
    assert!(html.contains("<th>waited</th>"));
}

#[test]
fn several_runs_open_with_an_overview_linking_to_each_section() {
    let runs = vec![
        run_of("r1", vec![it(1, "complete")]),
        run_of("r2", vec![it(1, "rejected"), it(2, "complete")]),
        run_of("r3", vec![it(1, "stuck")]),
    ];
    let html = page(runs);
    let overview = &html[html.find("<h2>Overview</h2>").expect("an overview")..];
    let overview = &overview[..overview.find("</table>").unwrap()];
    assert_eq!(overview.matches("<tr><td>").count(), 3, "{overview}");
    for id in ["r1", "r2", "r3"] {
        assert!(overview.contains(&format!("<a href=\"#run-{id}\">task {id}</a>")));
        assert!(html.contains(&format!("<section id=\"run-{id}\">")));
    }
    assert!(html.find("<h2>Overview</h2>") < html.find("<section"));
    let one = page(vec![run_of("r1", vec![it(1, "complete")])]);
    assert!(!one.contains("Overview"), "one run needs no overview");
}

#[test]
fn a_title_is_the_task_without_its_markdown_heading() {
    assert_eq!(heading_text("# Task: Add a flag\n\nmore"), "Add a flag");
    assert_eq!(heading_text("\n## Fix the parser\n"), "Fix the parser");
    assert_eq!(heading_text("plain words"), "plain words");
    let d = ralph_with("ok\n");
    let state = d.path().join(".ralph/run.json");
    let text = std::fs::read_to_string(&state)
        .unwrap()
        .replace("make <b>it</b> work", "# Task: make it work");
    std::fs::write(&state, text).unwrap();
    let run = load(&d);
    assert_eq!(run.title, "make it work");
    assert!(!page(vec![run]).contains("<h2># Task"));
}

/// A plan loop's run of five review passes: passes 1-4 fail the plan's check only because
/// passes are to go; `problem` is a real problem of pass 2's plan.
fn plan_run(problem: Option<&str>) -> RunData {
    let d = tempfile::tempdir().unwrap();
    let logs = d.path().join(".ralph/logs");
    std::fs::create_dir_all(&logs).unwrap();
    let mut csv = HEADER.to_string();
    for n in 1..=5 {
        let (outcome, passed) = if n == 5 {
            ("complete", "true")
        } else {
            ("continue", "false")
        };
        csv.push_str(&format!(
            "{n},plan,0.02,,0,0,{n},2026-11-21T12:00:00Z,p1,{outcome},0,{passed},0,0,0.000000,0.000\n"
        ));
        let mut log = format!(
            "[taskdaemon] run p1 iteration {n}/10 started t\n[taskdaemon] validation: $ check-doc plan\nplan Widgets: 2 section(s)\n"
        );
        if n == 2
            && let Some(p) = problem
        {
            log.push_str(&format!("  /r/plan.md: {p}\n"));
        }
        if n < 5 {
            log.push_str(&format!(
                "  /r/plan.md: {}\n[taskdaemon] validation exited with 1 after 12ms (success is 0): failed\n",
                crate::docs::plan_doc::passes_to_go(n)
            ));
        } else {
            log.push_str(
                "[taskdaemon] validation exited with 0 after 12ms (success is 0): passed\n",
            );
        }
        std::fs::write(logs.join(format!("iteration-{n:03}.log")), log).unwrap();
    }
    std::fs::write(logs.join("summary.csv"), csv).unwrap();
    std::fs::write(
        d.path().join(".ralph/run.json"),
        r#"{"run_id":"p1","config":{"task":"build widgets","loop_name":"plan","max_iterations":10},"outcome":{"outcome":"complete"}}"#,
    )
    .unwrap();
    load(&d)
}

#[test]
fn a_plan_runs_review_passes_show_as_reviews_not_failed_validations() {
    let run = plan_run(None);
    let reviews: Vec<&Review> = run
        .iterations
        .iter()
        .filter_map(|i| i.review.as_ref())
        .collect();
    assert_eq!(reviews.len(), 5);
    assert_eq!(reviews[0].verdict, ReviewVerdict::Done);
    assert_eq!(reviews[4].verdict, ReviewVerdict::Finished);
    assert_eq!((reviews[2].pass, reviews[2].of), (3, 5));
    let html = page(vec![run]);
    let table = &html[html.find("<h3>Iterations</h3>").unwrap()..];
    let table = &table[..table.find("</table>").unwrap()];
    assert!(!table.contains("class=\"fail\""), "{table}");
    assert!(!table.contains("failed"), "{table}");
    for n in 1..=5 {
        assert!(
            table.contains(&format!("review pass {n} of 5</span>")),
            "{table}"
        );
    }
    assert!(table.contains("review pass 4 of 5: done"));
    assert!(table.contains("review pass 5 of 5: done, the plan passed its check"));
    let unchecked = Review::of_iteration(2, Validation::Skipped, None);
    assert_eq!(unchecked.verdict, ReviewVerdict::Unchecked);
    assert!(!unchecked.passed());
}

#[test]
fn a_review_pass_with_a_real_problem_shows_it() {
    let run = plan_run(Some("no sections: organise the plan in `## ` sections"));
    let r = run.iterations[1].review.as_ref().unwrap();
    assert!(
        matches!(&r.verdict, ReviewVerdict::Problems(p) if p.len() == 1 && p[0].contains("no sections")),
        "{r:?}"
    );
    let html = page(vec![run]);
    assert!(html.contains("<span class=\"fail\">review pass 2 of 5</span>"));
    assert!(html.contains("review pass 2 of 5: problems: /r/plan.md: no sections"));
}

fn mark(tag: &str, message: &str, seq: u64) -> SnapshotMark {
    SnapshotMark {
        tag: tag.into(),
        message: message.into(),
        time: "t".into(),
        time_ms: 0,
        seq,
    }
}

#[test]
fn runs_that_met_within_a_second_each_keep_only_their_snapshots() {
    // All three runs in the same second: each listed every snapshot of its window.
    let all = [
        mark("run-1-pre", "before run r1: the uncommitted changes", 1),
        mark("task-1-post", "end of task 1", 2),
        mark("run-2-pre", "before run r2: the uncommitted changes", 3),
        mark("manual-1", "trying something", 4),
        mark("task-2-post", "end of task 2", 5),
        mark("run-3-pre", "before run r3: the uncommitted changes", 6),
        mark("task-3-pre", "start of task 3", 7),
    ];
    let mut runs: Vec<RunData> = ["r1", "r2", "r3"]
        .iter()
        .map(|id| {
            let mut r = run_of(id, vec![]);
            r.snapshots = all
                .iter()
                .filter(|m| snapshots::named_run(&m.message).is_none_or(|n| n == *id))
                .cloned()
                .collect();
            r
        })
        .collect();
    settle_snapshots(&mut runs);
    let tags = |r: &RunData| {
        r.snapshots
            .iter()
            .map(|s| s.tag.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(tags(&runs[0]), ["run-1-pre", "task-1-post"]);
    assert_eq!(tags(&runs[1]), ["run-2-pre", "manual-1", "task-2-post"]);
    assert_eq!(tags(&runs[2]), ["run-3-pre", "task-3-pre"]);
}

#[test]
fn a_run_that_never_ended_keeps_nothing_saved_after_the_next_runs_start() {
    let at = |tag: &str, s: i64, seq: u64| SnapshotMark {
        time_ms: s * 1000,
        ..mark(tag, "x", seq)
    };
    // Killed at 100: its window runs to now, so it listed the next run's snapshots too.
    let mut killed = run_of("r1", vec![]);
    killed.outcome = None;
    killed.started_at = Some("1970-01-01T00:01:40Z".into());
    killed.snapshots = vec![at("manual-1", 101, 1), at("manual-2", 300, 2)];
    let mut next = run_of("r2", vec![]);
    next.started_at = Some("1970-01-01T00:04:00Z".into());
    next.snapshots = vec![at("manual-2", 300, 2)];
    let mut runs = vec![killed, next];
    settle_snapshots(&mut runs);
    assert_eq!(runs[0].snapshots.len(), 1);
    assert_eq!(runs[0].snapshots[0].tag, "manual-1");
    assert_eq!(runs[1].snapshots.len(), 1);
}
