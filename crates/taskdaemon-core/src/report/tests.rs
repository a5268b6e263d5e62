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
"outcome":{"outcome":"complete","verified":true},"started_at":"2026-11-21T12:01:00Z","elapsed_ms":5500,"stall_count":2,"gate_failures":1}"#,
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
    assert_eq!((run.stall_count, run.gate_failures), (2, 1));
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
