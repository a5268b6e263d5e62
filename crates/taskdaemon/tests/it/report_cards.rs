//! The report says only what happened (issue 38): through the CLI, the demo's report has
//! no stall card and says once that there is no cost; `report --all` over three runs opens
//! with an overview and lists under each run only its own snapshots; a daemon plan's report
//! shows its review passes as reviews.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::harness::{self, Env};

fn demo(env: &Env) -> PathBuf {
    let dir = env.root().join("demo");
    let r = env.run(&["demo", "--path", dir.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    dir
}

/// `report ARGS` in `dir`: the HTML it wrote.
fn report(env: &Env, dir: &Path, args: &[&str]) -> String {
    let mut all = vec!["-C", dir.to_str().unwrap(), "report", "--json"];
    all.extend_from_slice(args);
    let r = env.run(&all);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(r.stdout.trim()).unwrap();
    std::fs::read_to_string(v["path"].as_str().unwrap()).unwrap()
}

/// The summary cards of the page's first run.
fn cards(html: &str) -> &str {
    let start = html.find("<div class=\"cards\">").expect("cards");
    let end = start
        + html[start..]
            .find("</div></div>")
            .expect("end of the cards");
    &html[start..end]
}

#[test]
fn the_demos_report_has_no_stall_card_and_says_once_that_there_is_no_cost() {
    let env = Env::new();
    let dir = demo(&env);
    let html = report(&env, &dir, &[]);
    let c = cards(&html);
    // The demo's agent never repeated its tool calls: no stall, so no stall card.
    assert!(!c.contains("stall"), "{c}");
    assert!(!html.contains("stall count") && !html.contains("stalls ("));
    // Its agent reports no money: said once, and no dollar figure anywhere.
    assert_eq!(c.matches("<span>cost").count(), 1, "{c}");
    assert!(
        c.contains("<b>none</b><span>cost (the agent reported zero)</span>"),
        "{c}"
    );
    assert!(
        !html.contains("$0.0"),
        "a dollar figure for a run without a cost"
    );
    assert!(!html.contains("none reported by this agent"));
    assert!(!html.contains("cumulative cost"));
    // What did happen: iteration 1's completion was rejected.
    assert!(
        c.contains("<b>1</b><span>completions rejected</span>"),
        "{c}"
    );
}

/// A scripted agent of one iteration: writes `file`, commits, says it is done; `cost`: the
/// money it reports (stream-json).
fn one_shot(env: &Env, name: &str, file: &str, cost: Option<f64>) -> String {
    let cost = cost
        .map(|c| format!("{{ cost: {c} }}, "))
        .unwrap_or_default();
    env.script(
        name,
        &format!(
            "format: stream-json\niterations:\n  - steps: [ {cost}{{ write: {{ path: {file}, content: x }} }}, {{ commit: {file} }}, {{ say: \"<promise>COMPLETE</promise>\" }} ]\n"
        ),
    )
}

fn at(time: &str) -> Vec<(String, String)> {
    vec![("TASKDAEMON_NOW".into(), time.into())]
}

#[test]
fn report_all_over_three_runs_opens_with_an_overview_and_each_run_keeps_its_own_snapshots() {
    let env = Env::new();
    let dir = demo(&env); // at 12:00:00, its snapshot run-1-pre
    let d = dir.to_str().unwrap();
    // Between the runs, a snapshot of no run.
    env.ok_with(
        &at("2026-11-21T12:00:05Z"),
        &["-C", d, "snapshot", "save", "between runs"],
    );
    for (time, file, cost, task) in [
        (
            "2026-11-21T12:00:10Z",
            "b.txt",
            None,
            "# Task: the second run\n\nwrite b.txt",
        ),
        ("2026-11-21T12:00:20Z", "c.txt", Some(0.05), "the third run"),
    ] {
        // An uncommitted change, saved as the run's own snapshot before it starts.
        std::fs::write(dir.join(format!("{file}.draft")), "draft\n").unwrap();
        let agent = one_shot(&env, &format!("{file}.yaml"), file, cost);
        let r = env.run_with(
            &at(time),
            &[
                "-C",
                d,
                "run",
                task,
                "--agent",
                &agent,
                "--validate",
                "true",
            ],
        );
        assert_eq!(r.code, 0, "{}", r.stderr);
    }
    let html = report(&env, &dir, &["--all"]);

    // Each run's section: its own snapshot only; the one between runs under none.
    let sections: Vec<&str> = html.split("<section").skip(1).collect();
    assert_eq!(sections.len(), 3);
    let mut ids = Vec::new();
    for (k, s) in sections.iter().enumerate() {
        let run = s
            .split("<p class=\"sub\">run ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .unwrap();
        let rows: Vec<&str> = s.split("<td>snapshot <code>").skip(1).collect();
        assert_eq!(rows.len(), 1, "run {}: {rows:?}", k + 1);
        assert!(
            rows[0].contains(&format!("before run {run}: the uncommitted changes")),
            "run {}: {}",
            k + 1,
            rows[0]
        );
        assert!(!s.contains("between runs"), "run {}", k + 1);
        ids.push(s.split('"').nth(1).unwrap_or_default());
    }

    let overview = &html[html.find("<h2>Overview</h2>").expect("an overview table")..];
    let overview = &overview[..overview.find("</table>").unwrap()];
    assert_eq!(overview.matches("<tr><td>").count(), 3, "{overview}");
    for want in [
        "Implement calc.sh",
        ">the second run</a>",
        ">the third run</a>",
        "<td>ralph</td>",
        "<td>complete</td>",
        "<td class=\"num\">2 / 5</td>",
        "<td class=\"num\">$0.0500</td>",
        "<td class=\"num\">none</td>",
    ] {
        assert!(overview.contains(want), "{want} missing: {overview}");
    }
    assert!(
        !overview.contains("# Task") && !html.contains("<h2># Task"),
        "a markdown heading in a title"
    );
    // Each overview link leads to its section.
    for id in ids {
        assert!(overview.contains(&format!("href=\"#{id}\"")), "{id}");
    }
}

/// The daemon's agent: the plan loop writes its plan, the spec loop one spec of one phase,
/// the phase commits and is done.
const PLAN_AGENT: &str = r#"#!/bin/sh
case "$TASKDAEMON_LOOP" in
plan)
  printf '# Widgets\n\n## Goals\nwidgets, pass %s\n\n## Approach\nspecs\n' "$TASKDAEMON_REVIEW_PASS" > "$TASKDAEMON_PLAN_FILE"
  ;;
spec)
  mkdir -p "$TASKDAEMON_SPECS_DIR"
  printf -- '---\ntitle: alpha\ndeps: []\nphases: ["Phase 1: one"]\nvalidate: true\n---\nBuild alpha.\n' > "$TASKDAEMON_SPECS_DIR/01-alpha.md"
  ;;
phase)
  echo done > alpha.txt
  git add -A && git commit -qm "alpha"
  echo "<promise>COMPLETE</promise>"
  ;;
esac
"#;

#[test]
fn a_daemon_plans_report_shows_its_review_passes_as_reviews() {
    let env = Env::new();
    let agent = env.root().join("agent.sh");
    std::fs::write(&agent, PLAN_AGENT).unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let vars = vec![(
        "TASKDAEMON_AGENT".to_string(),
        format!("cmd:{}", agent.display()),
    )];
    env.ok_with(
        &vars,
        &["submit", "plan", "build widgets", "--target", "main"],
    );
    env.ok_with(&vars, &["daemon", "start", "--tick", "0.2"]);
    let status = || -> serde_json::Value {
        serde_json::from_str(&env.ok_with(&vars, &["status", "--json"])).unwrap()
    };
    let s = harness::wait_for_status(
        Duration::from_secs(180),
        "the plan completing",
        status,
        String::new,
        |s| s["plans"][0]["status"] == "complete",
    );
    env.ok_with(&vars, &["daemon", "stop"]);
    let id = s["plans"][0]["id"].as_str().unwrap().to_string();
    let html = report(&env, &env.repo(), &[&id]);
    let plan = html
        .split("<section")
        .find(|s| s.contains(" · loop plan · "))
        .expect("the plan loop's run");
    let table = &plan[plan.find("<h3>Iterations</h3>").unwrap()..];
    let table = &table[..table.find("</table>").unwrap()];
    assert!(table.contains("<th>check</th>"), "{table}");
    for n in 1..=5 {
        assert!(
            table.contains(&format!(
                "<span class=\"review\">review pass {n} of 5</span>"
            )),
            "pass {n}: {table}"
        );
    }
    assert!(table.contains("review pass 1 of 5: done, the plan in shape"));
    assert!(table.contains("review pass 5 of 5: done, the plan passed its check"));
    assert!(
        !table.contains("class=\"fail\""),
        "a review pass shown failed: {table}"
    );
    // The overview of the plan's runs, in the order they worked: plan, spec, phase.
    let overview = &html[html.find("<h2>Overview</h2>").expect("an overview")..];
    let loops: Vec<&str> = overview[..overview.find("</table>").unwrap()]
        .split("</a><br>")
        .skip(1)
        .filter_map(|row| row.split("<td>").nth(1)?.split('<').next())
        .collect();
    assert_eq!(loops, ["plan", "spec", "phase"], "{overview}");
}
