//! Phase gating and scope gates, end to end: spec 1 §2's VIBRANT ENERGY failure with a
//! scripted agent on a real repository.

use crate::harness;
use crate::harness::{Env, csv_rows, git};

/// The outcome column of every summary.csv row, in order.
fn outcomes(repo: &std::path::Path) -> Vec<String> {
    csv_rows(repo)
        .iter()
        .map(|r| r["outcome"].clone())
        .collect()
}

fn flavors(names: &[&str]) -> String {
    let items: Vec<String> = names
        .iter()
        .map(|n| format!("  {{ name: \"{n}\" }},"))
        .collect();
    format!("export const flavors = [\n{}\n];\n", items.join("\n"))
}

const EIGHT: &[&str] = &[
    "Volt", "Chrome", "Surge", "Blaze", "Frost", "Storm", "Pulse", "Flux",
];

/// The plan the agent writes in its first iteration (with a premature COMPLETE).
const PLAN: &str = "# Plan: VIBRANT ENERGY\n\n## features\nFiles: src/flavors.ts\n<!-- TASK-1 [ADD]: 2 nighttime drink flavors (Moonlit Calm, Deep Rest) -->\n<!-- EXISTING 8 flavors PRESERVED — do not remove or convert -->\n\n## store\nFiles: src/store.ts\n<!-- NO CHANGES for task-1 -->\n";

fn project() -> Env {
    let env = Env::new();
    let repo = env.repo();
    std::fs::create_dir_all(repo.join("src")).unwrap();
    std::fs::write(repo.join("src/flavors.ts"), flavors(EIGHT)).unwrap();
    std::fs::write(repo.join("src/store.ts"), "export const store = 1;\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "eight flavors"]);
    env
}

/// An agent: iteration 1 writes the plan and claims COMPLETE; later iterations write
/// `flavors` and claim COMPLETE again.
fn agent(env: &Env, name: &str, flavors_ts: &str) -> String {
    let yaml = format!(
        "after-last: repeat-last\niterations:\n  - steps:\n      - write: {{ path: .ralph/plan.md, content: {plan:?} }}\n      - commit: plan\n      - say: \"<promise>COMPLETE</promise>\"\n  - steps:\n      - write: {{ path: src/flavors.ts, content: {fl:?} }}\n      - commit: flavors\n      - say: \"<promise>COMPLETE</promise>\"\n",
        plan = PLAN,
        fl = flavors_ts
    );
    env.script(name, &yaml)
}

#[test]
fn converting_four_of_eight_fails_the_scope_gate_and_adding_two_passes() {
    let env = project();
    let repo = env.repo();
    let mut converted = EIGHT.to_vec();
    converted[4..].copy_from_slice(&["Moonlit Calm", "Deep Rest", "Night", "Dream"]);
    let bad = agent(&env, "bad.yaml", &flavors(&converted));
    let r = env.run(&[
        "task",
        "add 2 nighttime drinks",
        "--agent",
        &bad,
        "--validate",
        "true",
        "--max-iterations",
        "3",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("gate phase: not met: completion claimed in the plan phase"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("plan.md is valid: the phase is now build"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("ADD 2 in `features`: expected 10 items (8 + 2) in src/flavors.ts, found 8"),
        "{}",
        r.stderr
    );
    // Iteration 1's premature claim (plan written, nothing built) already fails the task's
    // own ADD requirement: a rejection, not just a claim swallowed in the plan phase.
    assert_eq!(outcomes(&repo), ["rejected", "rejected", "rejected"]);
    assert_eq!(
        std::fs::read_to_string(repo.join(".ralph/phase.txt")).unwrap(),
        "build\n"
    );
    let feedback = std::fs::read_to_string(repo.join(".ralph/feedback.md")).unwrap();
    assert!(
        feedback.contains("Gate failures (attempt 3 of 5)"),
        "{feedback}"
    );
    // The prompt of iteration 3 told the agent.
    let p3 = std::fs::read_to_string(repo.join(".ralph/logs/iteration-003.prompt.md")).unwrap();
    assert!(p3.contains("expected 10 items (8 + 2)"), "{p3}");
    assert!(!git(&repo, &["tag", "--list"]).contains("task-1-post"));

    let env = project();
    let mut ten = EIGHT.to_vec();
    ten.extend(["Moonlit Calm", "Deep Rest"]);
    let good = agent(&env, "good.yaml", &flavors(&ten));
    let r = env.run(&[
        "task",
        "add 2 nighttime drinks",
        "--agent",
        &good,
        "--validate",
        "true",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("gate scope:features:add: ADD 2 in `features`: 8 + 2 = 10 items"),
        "{}",
        r.stderr
    );
    assert_eq!(outcomes(&env.repo()), ["rejected", "complete"]);
    assert!(git(&env.repo(), &["tag", "--list"]).contains("task-1-post"));
}

#[test]
fn a_stop_while_a_failing_tasks_rollback_waits_for_the_snapshot_lock_fails_nothing() {
    // The fifth rejected completion would fail the task and roll it back, but another
    // taskdaemon's stuck save holds the snapshot lock: Ctrl-C ends the wait (up to 5
    // minutes otherwise) with nothing rolled back; the resumed run fails the task at its
    // next rejected completion.
    let env = project();
    let repo = env.repo();
    let pre_head = git(&repo, &["rev-parse", "HEAD"]);
    let bad = agent(&env, "bad.yaml", &flavors(&EIGHT[..6]));
    let validated = env.root().join("validated");
    let validate = format!("echo . >> '{}'", validated.display());
    let run = env.spawn(&[
        "task",
        "add 2 nighttime drinks",
        "--agent",
        &bad,
        "--validate",
        &validate,
        "--max-stuck",
        "0",
    ]);
    let limit = std::time::Duration::from_secs(60);
    harness::wait_for_lines(&validated, 1, limit);
    let held = harness::hold_snapshot_lock(&repo);
    run.wait_to_say("iteration 5: waiting for", limit);
    let (status, err) = run.interrupt(limit);
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(
        err.contains("5 consecutive rejected completions (hard gate failures), but the task was not failed (its rollback was not begun): stopped while waiting for"),
        "{err}"
    );
    assert_eq!(outcomes(&repo), ["rejected"; 5]);
    assert_ne!(git(&repo, &["rev-parse", "HEAD"]), pre_head);
    assert_ne!(
        std::fs::read_to_string(repo.join(".ralph/status.txt")).unwrap(),
        "failed\n"
    );

    drop(held);
    let r = env.run(&["run", "--resume"]);
    assert_eq!(r.code, 5, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("task 1 failed: 6 consecutive rejected completions"),
        "{}",
        r.stderr
    );
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), pre_head);
}

#[test]
fn five_rejected_completions_abort_the_task_and_roll_back() {
    let env = project();
    let repo = env.repo();
    let pre_head = git(&repo, &["rev-parse", "HEAD"]);
    let bad = agent(&env, "bad.yaml", &flavors(&EIGHT[..6]));
    let r = env.run(&[
        "task",
        "add 2 nighttime drinks",
        "--agent",
        &bad,
        "--validate",
        "true",
        "--max-stuck",
        "0",
    ]);
    assert_eq!(r.code, 5, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("PRESERVED violation in `features`: had 8 items"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("task 1 failed: 5 consecutive rejected completions"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("rolled back to task-1-pre"),
        "{}",
        r.stderr
    );
    assert_eq!(
        outcomes(&repo),
        ["rejected", "rejected", "rejected", "rejected", "failed"]
    );
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), pre_head);
    assert_eq!(
        std::fs::read_to_string(repo.join("src/flavors.ts")).unwrap(),
        flavors(EIGHT)
    );
    assert!(!repo.join(".ralph/plan.md").exists());
    assert_eq!(
        std::fs::read_to_string(repo.join(".ralph/status.txt")).unwrap(),
        "failed\n"
    );
    // The failed task keeps its number and goes into the history as failed.
    assert_eq!(
        std::fs::read_to_string(repo.join(".ralph/task-counter.txt")).unwrap(),
        "1\n"
    );
    let idle = env.script(
        "idle.yaml",
        "iterations:\n  - steps: [ { say: looking } ]\n",
    );
    let r = env.run(&[
        "task",
        "fix the store",
        "--agent",
        &idle,
        "--max-iterations",
        "1",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let history = std::fs::read_to_string(repo.join(".ralph/task-history.md")).unwrap();
    assert_eq!(
        history.trim_end(),
        "- Task 1: add 2 nighttime drinks (failed)",
        "{history}"
    );
    let task = std::fs::read_to_string(repo.join(".ralph/task.md")).unwrap();
    assert!(
        task.contains("Counter: 2") && task.contains("Previous: task 1 (it did not complete)"),
        "{task}"
    );
}

#[test]
fn the_task_files_follow_the_iterations_and_a_finished_task_leaves_a_clean_tree() {
    let env = project();
    let repo = env.repo();
    let a = env.script(
        "a.yaml",
        "iterations:\n  - steps:\n      - run: cp .ralph/iteration.txt it1.txt\n      - write: { path: .ralph/status.txt, content: \"complete\\n\" }\n      - commit: first\n      - say: \"<promise>COMPLETE</promise>\"\n  - steps:\n      - run: cp .ralph/iteration.txt it2.txt && cp .ralph/status.txt st2.txt\n      - write: { path: done, content: yes }\n      - commit: done\n      - say: \"<promise>COMPLETE</promise>\"\n",
    );
    let r = env.run(&[
        "task",
        "fix the store",
        "--agent",
        &a,
        "--validate",
        "test -f done",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let read = |f: &str| std::fs::read_to_string(repo.join(f)).unwrap();
    assert_eq!(read("it1.txt"), "1\n");
    assert_eq!(read("it2.txt"), "2\n");
    assert_eq!(
        read("st2.txt"),
        "running\n",
        "the agent's `complete` did not stick"
    );
    assert_eq!(read(".ralph/status.txt"), "complete\n");
    assert_eq!(read(".ralph/iteration.txt"), "2\n");
    assert_eq!(
        git(&repo, &["status", "--porcelain"]),
        "",
        "nothing left modified"
    );
}

#[test]
fn tasks_without_a_plan_pass_straight_through() {
    let env = project();
    let agent = env.script(
        "a.yaml",
        "iterations:\n  - steps:\n      - write: { path: src/x.ts, content: x }\n      - commit: x\n      - say: \"<promise>COMPLETE</promise>\"\n",
    );
    let r = env.run(&["task", "add x", "--agent", &agent, "--validate", "true"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(outcomes(&env.repo()), ["complete"]);
}

/// Spec 4 "Scenarios Traced", row by row (rows 4 and 5 are the tests above).
#[test]
fn scenarios_traced_in_spec_4() {
    let plan = "## bug\n<!-- TASK-1 [FIX]: the toggle -->\n";
    // Rows 1–2: iteration 1 researches (no plan, phase plan); iteration 2 writes the plan;
    // iteration 3's top validates it and flips to build; its completion is honored.
    let env = project();
    let a = env.script(
        "a.yaml",
        &format!("iterations:\n  - steps: [ {{ say: researching }} ]\n  - steps:\n      - write: {{ path: .ralph/plan.md, content: {plan:?} }}\n      - commit: plan\n  - steps:\n      - write: {{ path: src/fix.ts, content: fixed }}\n      - commit: fix\n      - say: \"<promise>COMPLETE</promise>\"\n"),
    );
    let r = env.run(&[
        "task",
        "fix the toggle",
        "--agent",
        &a,
        "--validate",
        "test -f src/fix.ts",
        "--json",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let flips: Vec<u64> = harness::events(&r.stdout)
        .iter()
        .filter(|e| e["event"] == "gate" && e["gate"] == "phase" && e["passed"] == true)
        .map(|e| e["iteration"].as_u64().unwrap())
        .collect();
    assert_eq!(flips, [3], "{}", r.stdout);
    assert_eq!(outcomes(&env.repo()), ["continue", "continue", "complete"]);

    // Row 7: a completion without validation (the promise alone) in the plan phase with a
    // plan is deferred; the next iteration flips to build and honors it.
    let env = project();
    let a = env.script(
        "a.yaml",
        &format!("after-last: repeat-last\niterations:\n  - steps:\n      - write: {{ path: .ralph/plan.md, content: {plan:?} }}\n      - commit: plan\n      - say: \"<promise>COMPLETE</promise>\"\n  - steps: [ {{ say: \"<promise>COMPLETE</promise>\" }} ]\n"),
    );
    let r = env.run(&["task", "fix the toggle", "--agent", &a]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(outcomes(&env.repo()), ["plan-phase", "complete"]);

    // Row 8: no plan, no validation: the promise is honored at once.
    let env = project();
    let a = env.script(
        "a.yaml",
        "iterations:\n  - steps: [ { say: \"<promise>COMPLETE</promise>\" } ]\n",
    );
    let r = env.run(&["task", "fix the toggle", "--agent", &a]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(outcomes(&env.repo()), ["complete"]);
    // Nothing changed: fine, and said so; the missing summary is a warning.
    assert!(
        r.stderr
            .contains("task 1 complete with no change to the project"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("gate summary: reminder: `.ralph/summary.md` is empty"),
        "{}",
        r.stderr
    );
}

#[test]
fn stall_recovery_names_the_plan_section_and_its_marker() {
    let env = project();
    let repo = env.repo();
    let a = env.script(
        "a.yaml",
        &format!(
            "format: stream-json\nafter-last: repeat-last\niterations:\n  - steps:\n      - write: {{ path: .ralph/plan.md, content: {PLAN:?} }}\n      - commit: plan\n  - steps:\n      - write: {{ path: src/flavors.ts, content: {fl:?} }}\n      - say: retrying\n",
            fl = flavors(EIGHT)
        ),
    );
    let r = env.run(&[
        "task",
        "add 2 nighttime drinks",
        "--agent",
        &a,
        "--validate",
        "false",
        "--max-iterations",
        "4",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let fb = std::fs::read_to_string(repo.join(".ralph/feedback.md")).unwrap();
    assert!(fb.contains("## Stall Recovery (iteration 4)"), "{fb}");
    assert!(
        fb.contains("You appear stuck on section `features` of the plan (marker [ADD]: 2 nighttime drink flavors"),
        "{fb}"
    );
    assert!(
        fb.contains("do not modify or convert existing items"),
        "{fb}"
    );
    // The mutation instructions reached the prompt: no plan yet in iteration 1, the build
    // block once the plan written in iteration 1 covers the task.
    let p1 = std::fs::read_to_string(repo.join(".ralph/logs/iteration-001.prompt.md")).unwrap();
    assert!(p1.contains("There is no `.ralph/plan.md`"), "{p1}");
    let p2 = std::fs::read_to_string(repo.join(".ralph/logs/iteration-002.prompt.md")).unwrap();
    assert!(p2.contains("## Build (the plan covers task 1)"), "{p2}");
    assert!(!p2.contains("UPDATING the existing plan"), "{p2}");
}

#[test]
fn plan_update_validate_show_and_diff_from_the_cli() {
    let env = project();
    let repo = env.repo();
    let idle = env.script(
        "idle.yaml",
        "iterations:\n  - steps: [ { say: looking } ]\n",
    );
    let r = env.run(&[
        "task",
        "add 2 more drinks to the flavors",
        "--agent",
        &idle,
        "--validate",
        "false",
        "--max-iterations",
        "1",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    std::fs::write(
        repo.join(".ralph/plan.md"),
        "# Plan\n\n## flavors\nFiles: src/flavors.ts\n\n## store\nFiles: src/store.ts\n",
    )
    .unwrap();
    let r = env.run(&["plan", "update"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("`flavors`: TASK-1 [ADD]:"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("`flavors`: EXISTING 8 items PRESERVED"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("`store`: NO CHANGES for task-1"),
        "{}",
        r.stdout
    );
    assert_eq!(
        env.run(&["plan", "update"]).stdout.trim_end(),
        format!(
            "{}: already up to date for task 1",
            repo.join(".ralph/plan.md").display()
        )
    );
    let archived = std::fs::read_dir(repo.join(".ralph/archive"))
        .unwrap()
        .count();
    assert_eq!(archived, 1, "the plan before the update is kept");

    let r = env.run(&["plan", "validate"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("valid (2 sections"), "{}", r.stdout);
    let show = env.run(&["plan", "show", "flavors", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&show.stdout).unwrap();
    assert_eq!(v["sections"][0]["markers"][0]["kind"], "add");
    assert_eq!(v["sections"][0]["markers"][0]["count"], 2);

    let mut ten = EIGHT.to_vec();
    ten.extend(["Moonlit Calm", "Deep Rest"]);
    std::fs::write(repo.join("src/flavors.ts"), flavors(&ten)).unwrap();
    let d = env.run(&["plan", "diff"]);
    assert_eq!(d.code, 0, "{}", d.stderr);
    assert!(
        d.stdout
            .contains("ok   ADD 2 in `flavors`: 8 + 2 = 10 items"),
        "{}",
        d.stdout
    );
    assert!(
        d.stdout.contains("ok   PRESERVED in `flavors`"),
        "{}",
        d.stdout
    );

    std::fs::write(
        repo.join(".ralph/plan.md"),
        "## a\n<!-- TASK-1 [CONVERT]: x -->\n",
    )
    .unwrap();
    let r = env.run(&["plan", "validate"]);
    assert_eq!(r.code, 1);
    assert!(
        r.stdout
            .contains("plan.md:2: `TASK-1 [CONVERT]: x`: the marker must be one of"),
        "{}",
        r.stdout
    );
    let r = env.run(&["plan", "show", "nope"]);
    assert_eq!(r.code, 64);
    assert!(r.stderr.contains("its sections are: a"), "{}", r.stderr);
}

/// The VIBRANT ENERGY message (spec 1 §2).
const VIBRANT: &str = "refine ad copy! less generic, more adult, less monster energy.\ntwo moods not working. add 2 more drinks for nighttime.";

/// The plan of the previous task: valid, no marker for task 1.
const OLD_PLAN: &str = "# Plan: VIBRANT ENERGY\n\n## hero\nFiles: src/HeroSection.tsx\n\n## features\nFiles: src/flavors.ts\n\n## theme\nFiles: src/ThemeToggle.tsx\n\n## store\nFiles: src/store.ts\n";

/// Eight flavors, a hero, a theme toggle, a store, and (optionally) the previous plan.
fn landing(with_plan: bool) -> Env {
    let env = project();
    let repo = env.repo();
    std::fs::write(
        repo.join("src/HeroSection.tsx"),
        "export const copy = \"MONSTER ENERGY\";\n",
    )
    .unwrap();
    std::fs::write(
        repo.join("src/ThemeToggle.tsx"),
        "export const moods = () => null;\n",
    )
    .unwrap();
    if with_plan {
        std::fs::create_dir_all(repo.join(".ralph")).unwrap();
        std::fs::write(repo.join(".ralph/plan.md"), OLD_PLAN).unwrap();
    }
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "landing page"]);
    env
}

/// What a model following the prompt writes besides the flavors: the copy and the fix.
fn other_work() -> String {
    "      - write: { path: src/HeroSection.tsx, content: \"export const copy = \\\"Calm, adult energy\\\";\\n\" }\n      - write: { path: src/ThemeToggle.tsx, content: \"export const moods = (m) => m;\\n\" }\n".to_string()
}

/// An agent that does `plan_steps` and the work with `flavors_ts`, commits and claims
/// COMPLETE, every iteration.
fn model(env: &Env, name: &str, plan_steps: &str, flavors_ts: &str) -> String {
    let yaml = format!(
        "after-last: repeat-last\niterations:\n  - steps:\n{plan_steps}      - write: {{ path: src/flavors.ts, content: {fl:?} }}\n{other}      - commit: the task\n      - say: \"<promise>COMPLETE</promise>\"\n",
        fl = flavors_ts,
        other = other_work(),
    );
    env.script(name, &yaml)
}

fn converted() -> String {
    let mut c = EIGHT.to_vec();
    c[4..].copy_from_slice(&["Moonlit Calm", "Deep Rest", "Night", "Dream"]);
    flavors(&c)
}

/// Runs the VIBRANT ENERGY task with `agent` and checks it was rejected for the count and
/// never reached task-1-post.
fn rejected_for_the_count(env: &Env, agent: &str) -> String {
    let r = env.run(&[
        "task",
        VIBRANT,
        "--agent",
        agent,
        "--validate",
        "true",
        "--max-iterations",
        "2",
    ]);
    assert_ne!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("expected 10 elements, found 8 in src/flavors.ts (8 at the start + 2)"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("existing items were changed or removed"),
        "{}",
        r.stderr
    );
    assert!(!git(&env.repo(), &["tag", "--list"]).contains("task-1-post"));
    assert!(!outcomes(&env.repo()).contains(&"complete".to_string()));
    r.stderr
}

#[test]
fn vibrant_energy_a_converting_four_without_a_plan_update_is_rejected() {
    // No plan at all.
    let env = landing(false);
    let a = model(&env, "a.yaml", "", &converted());
    rejected_for_the_count(&env, &a);
    // The previous plan, never updated for this task.
    let env = landing(true);
    let a = model(&env, "a.yaml", "", &converted());
    let err = rejected_for_the_count(&env, &a);
    assert!(err.contains("gate phase: not met"), "{err}");
    // The plan phase said which requirement lacks a marker.
    let fb =
        std::fs::read_to_string(env.repo().join(".ralph/logs/iteration-002.prompt.md")).unwrap();
    assert!(
        fb.contains("`[ADD] Add 2 more drinks for nighttime")
            && fb.contains("has no `TASK-1 [ADD]` marker"),
        "{fb}"
    );
    // `plan validate` says the same.
    let v = env.run(&["plan", "validate"]);
    assert_eq!(v.code, 1, "{}{}", v.stdout, v.stderr);
    assert!(
        v.stdout
            .contains("has no `TASK-1 [ADD]` marker in a section that names its files"),
        "{}",
        v.stdout
    );
    // Iteration 1 already named what the harness counts.
    let p1 =
        std::fs::read_to_string(env.repo().join(".ralph/logs/iteration-001.prompt.md")).unwrap();
    assert!(p1.contains("ADD \"Add 2 more drinks for nighttime\": src/flavors.ts: 8 items now, exactly 10 when done"), "{p1}");
}

#[test]
fn vibrant_energy_b_plan_update_then_converting_four_is_rejected() {
    let env = landing(true);
    let steps = "      - run: '\"$TASKDAEMON_BIN\" plan update'\n";
    let b = model(&env, "b.yaml", steps, &converted());
    rejected_for_the_count(&env, &b);
    let plan = std::fs::read_to_string(env.repo().join(".ralph/plan.md")).unwrap();
    let features = plan
        .split("## features")
        .nth(1)
        .unwrap()
        .split("## theme")
        .next()
        .unwrap();
    assert!(
        features.contains("TASK-1 [ADD]: Add 2 more drinks"),
        "{plan}"
    );
    assert!(features.contains("EXISTING 8 items PRESERVED"), "{plan}");
    assert!(!features.contains("NO CHANGES"), "{plan}");
}

#[test]
fn vibrant_energy_c_markers_in_the_wrong_section_and_d_correct_markers() {
    let env = landing(true);
    let wrong = "# Plan: VIBRANT ENERGY\n\n## hero\nFiles: src/HeroSection.tsx\n<!-- TASK-1 [MODIFY]: adult copy -->\n\n## features\nFiles: src/flavors.ts\n<!-- NO CHANGES for task-1 -->\n\n## theme\nFiles: src/ThemeToggle.tsx\n<!-- TASK-1 [FIX]: moods -->\n\n## store\nFiles: src/store.ts\n<!-- TASK-1 [ADD]: 2 nighttime drinks -->\n<!-- EXISTING 1 items PRESERVED -->\n";
    let steps = format!("      - write: {{ path: .ralph/plan.md, content: {wrong:?} }}\n");
    let c = model(&env, "c.yaml", &steps, &converted());
    rejected_for_the_count(&env, &c);

    let env = landing(true);
    let right = "# Plan: VIBRANT ENERGY\n\n## hero\nFiles: src/HeroSection.tsx\n<!-- TASK-1 [MODIFY]: adult copy -->\n\n## features\nFiles: src/flavors.ts\n<!-- TASK-1 [ADD]: 2 nighttime drinks -->\n<!-- EXISTING 8 flavors PRESERVED -->\n\n## theme\nFiles: src/ThemeToggle.tsx\n<!-- TASK-1 [FIX]: moods -->\n\n## store\nFiles: src/store.ts\n<!-- NO CHANGES for task-1 -->\n";
    let steps = format!("      - write: {{ path: .ralph/plan.md, content: {right:?} }}\n");
    let mut ten = EIGHT.to_vec();
    ten.extend(["Moonlit Calm", "Deep Rest"]);
    let d = model(&env, "d.yaml", &steps, &flavors(&ten));
    let r = env.run(&[
        "task",
        VIBRANT,
        "--agent",
        &d,
        "--validate",
        "true",
        "--max-iterations",
        "3",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "[ADD] Add 2 more drinks for nighttime: 8 + 2 = 10 elements in src/flavors.ts"
        ),
        "{}",
        r.stderr
    );
    assert_eq!(outcomes(&env.repo()), ["plan-phase", "complete"]);
    assert!(git(&env.repo(), &["tag", "--list"]).contains("task-1-post"));
}

/// A spec with two phases, committed.
fn spec_project() -> Env {
    let env = Env::new();
    let repo = env.repo();
    std::fs::create_dir_all(repo.join("specs")).unwrap();
    std::fs::write(
        repo.join("specs/auth.md"),
        "---\ntitle: auth\ndeps: []\nphases: [\"Phase 1: tokens\", \"Phase 2: login\"]\n---\nBuild auth.\n",
    )
    .unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "spec"]);
    env
}

#[test]
fn a_phase_run_by_hand_needs_its_variables_and_completes_only_with_a_commit() {
    let env = spec_project();
    let idle = env.script(
        "idle.yaml",
        "after-last: repeat-last\niterations:\n  - steps: [ { say: \"<promise>COMPLETE</promise>\" } ]\n",
    );
    // Without the spec: refused, naming what is missing; nothing ran.
    let r = env.run(&["run", "--loop", "phase", "implement", "--agent", &idle]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(
        r.stderr.contains("the `phase` loop needs `spec-file`")
            && r.stderr.contains("--var spec-file=VALUE"),
        "{}",
        r.stderr
    );
    assert!(
        !env.repo()
            .join(".ralph/logs/iteration-001.prompt.md")
            .exists()
    );
    let r = env.run(&[
        "run",
        "--loop",
        "phase",
        "implement",
        "--agent",
        &idle,
        "--var",
        "spec-file=specs/auth.md",
        "--var",
        "phase-number=3",
    ]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(
        r.stderr.contains("a phase number between 1 and 2"),
        "{}",
        r.stderr
    );

    // The agent claims COMPLETE and commits nothing: the clean tree passes the phase's
    // validation, but the phase is not complete.
    let r = env.run(&[
        "run",
        "--loop",
        "phase",
        "implement",
        "--agent",
        &idle,
        "--var",
        "spec-file=specs/auth.md",
        "--var",
        "phase-number=2",
        "--max-iterations",
        "2",
        "--max-stuck",
        "0",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("gate work: not met: no commit since this phase started"),
        "{}",
        r.stderr
    );
    assert_eq!(outcomes(&env.repo()), ["rejected", "rejected"]);
    let p1 =
        std::fs::read_to_string(env.repo().join(".ralph/logs/iteration-001.prompt.md")).unwrap();
    assert!(
        p1.contains("## Implement phase 2 of 2: Phase 2: login"),
        "{p1}"
    );
    assert!(p1.contains("- Phase 1: tokens"), "{p1}");
    assert!(p1.contains("Build auth."), "{p1}");

    // With a commit it completes.
    let env = spec_project();
    let worker = env.script(
        "w.yaml",
        "iterations:\n  - steps:\n      - write: { path: src/auth.rs, content: tokens }\n      - commit: tokens\n      - say: \"<promise>COMPLETE</promise>\"\n",
    );
    let r = env.run(&[
        "run",
        "--loop",
        "phase",
        "implement",
        "--agent",
        &worker,
        "--var",
        "spec-file=specs/auth.md",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(outcomes(&env.repo()), ["complete"]);
}

#[test]
fn git_diff_shows_the_change_since_the_run_started_even_when_committed() {
    let env = project();
    let repo = env.repo();
    std::fs::create_dir_all(repo.join(".taskdaemon/loops")).unwrap();
    std::fs::write(
        repo.join(".taskdaemon/loops/diffy.yaml"),
        "diffy:\n  description: shows the diff\n  validation-command: \"\"\n  success-exit-code: 0\n  max-iterations: 2\n  inputs: []\n  outputs: []\n  prompt-template: |\n    {{task-description}}\n    ## Diff\n    {{git-diff}}\n",
    )
    .unwrap();
    let a = env.script(
        "a.yaml",
        "iterations:\n  - steps:\n      - write: { path: src/one.ts, content: \"hello-one\\n\" }\n      - commit: one\n  - steps: [ { say: looking } ]\n",
    );
    let r = env.run(&[
        "run",
        "--loop",
        "diffy",
        "look",
        "--agent",
        &a,
        "--max-iterations",
        "2",
        "--max-stuck",
        "0",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let p2 = std::fs::read_to_string(repo.join(".ralph/logs/iteration-002.prompt.md")).unwrap();
    assert!(p2.contains("+hello-one"), "{p2}");
    assert!(p2.contains("the commit this run started from"), "{p2}");
}

/// Every command the ralph prompt hands the agent works pasted into `sh`, in a directory
/// whose path holds a space and a quote, with PATH reset (as Codex's login shell does).
#[test]
fn the_prompts_commands_work_pasted_into_sh_in_an_awkward_directory() {
    let env = Env::new();
    let dir = env.root().join("my repo's dir");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::create_dir_all(dir.join(".ralph")).unwrap();
    git(&dir, &["init", "-q"]);
    std::fs::write(dir.join("src/flavors.ts"), flavors(EIGHT)).unwrap();
    std::fs::write(
        dir.join(".ralph/plan.md"),
        "# Plan\n\n## features\nFiles: src/flavors.ts\n",
    )
    .unwrap();
    git(&dir, &["add", "-A"]);
    git(&dir, &["commit", "-qm", "eight"]);
    let idle = env.script(
        "idle.yaml",
        "iterations:\n  - steps: [ { say: looking } ]\n",
    );
    let out = env
        .cmd()
        .current_dir(&dir)
        .args([
            "task",
            "add 2 more drinks",
            "--agent",
            &idle,
            "--max-iterations",
            "1",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let prompt = std::fs::read_to_string(dir.join(".ralph/logs/iteration-001.prompt.md")).unwrap();
    let commands: Vec<&str> = prompt
        .split('`')
        .filter(|c| c.starts_with("\"$TASKDAEMON_BIN\"") && !c.contains("TAG"))
        .collect();
    assert!(commands.len() >= 3, "{commands:?}\n{prompt}");
    let entries = || std::fs::read_dir(env.root()).unwrap().count();
    let before = entries();
    for cmd in &commands {
        let out = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(cmd)
            .current_dir(&dir)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", env.home())
            .env("GIT_CONFIG_GLOBAL", env.home().join(".gitconfig"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("TASKDAEMON_NOW", "2026-11-21T12:00:00Z")
            .env("TASKDAEMON_BIN", env!("CARGO_BIN_EXE_taskdaemon"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{cmd}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(entries(), before, "no stray file next to the repository");
    let plan = std::fs::read_to_string(dir.join(".ralph/plan.md")).unwrap();
    assert!(plan.contains("TASK-1 [ADD]"), "{plan}");
    assert!(git(&dir, &["tag", "--list"]).contains("manual-"));
}
