//! The task parser end to end (spec 1 §5): `taskdaemon task parse`, the structured task.md
//! written by `taskdaemon task`, option A through real agent processes (the scripted agent
//! and shell agents) with its fallback, and the needs-clarification → answer → task flow.

use crate::harness;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::harness::{Env, events, git};

const VIBRANT: &str = "refine ad copy! less generic, more adult, less monster energy.\ntwo moods not working. add 2 more drinks for nighttime.";

/// A small web project with a plan, committed.
fn web_project(env: &Env) {
    let repo = env.repo();
    for f in [
        "src/components/HeroSection.tsx",
        "src/components/CTASection.tsx",
        "src/components/FlavorGrid.tsx",
        "src/components/ThemeToggle.tsx",
        "src/data/flavors.ts",
        "src/index.css",
        ".ralph/plan.md",
    ] {
        let p = repo.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, format!("// {f}\n")).unwrap();
    }
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "landing page"]);
}

fn read(repo: &Path, rel: &str) -> String {
    std::fs::read_to_string(repo.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Everything `task parse` could have touched.
fn fingerprint(repo: &Path) -> (String, String, String, Vec<String>) {
    let mut ralph: Vec<String> = std::fs::read_dir(repo.join(".ralph"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    ralph.sort();
    (
        git(repo, &["status", "--porcelain", "--ignored"]),
        git(repo, &["tag", "--list"]),
        git(repo, &["rev-parse", "HEAD"]),
        ralph,
    )
}

#[test]
fn task_parse_shows_the_structured_task_and_changes_nothing() {
    let env = Env::new();
    web_project(&env);
    let repo = env.repo();
    let before = fingerprint(&repo);
    let r = env.run(&["task", "parse", VIBRANT]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let md = &r.stdout;
    assert!(
        md.starts_with(
            "# Task: Refine ad copy; two moods not working; add 2 more drinks for nighttime\n\
Type: mutation\nPrevious: none\nCounter: 1\n\n## Requirements\n"
        ),
        "{md}"
    );
    assert!(
        md.contains(
            "- [MODIFY] Refine ad copy — less generic, more adult, less monster energy\n\
- [FIX] Two moods not working\n\
- [ADD] Add 2 more drinks for nighttime (2 new, in addition to the existing ones; keep them all)\n"
        ),
        "{md}"
    );
    assert!(
        md.contains("- PRESERVE: All existing drinks unchanged (add new ones; never convert existing ones)\n"),
        "{md}"
    );
    assert!(md.contains("- AFFECTED FILES: "), "{md}");
    assert!(md.contains("src/components/HeroSection.tsx"), "{md}");
    assert!(md.contains("src/data/flavors.ts"), "{md}");
    assert!(
        md.ends_with(
            "## Original Message\n> refine ad copy! less generic, more adult, less monster energy.\n> two moods not working. add 2 more drinks for nighttime.\n"
        ),
        "{md}"
    );
    assert!(
        r.stderr
            .contains("parsed by the rules (no parse-agent is set"),
        "{}",
        r.stderr
    );

    let r = env.run(&["task", "parse", "--json", "fix the theme toggle"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(r.stdout.trim()).unwrap();
    assert_eq!(v["parser"], "rules");
    assert_eq!(v["task"]["type"], "bugfix");
    assert_eq!(v["task"]["requirements"][0]["marker"], "FIX");
    assert_eq!(
        v["task"]["affected_files"][0],
        "src/components/ThemeToggle.tsx"
    );
    assert!(v["task_md"].as_str().unwrap().contains("Type: bugfix\n"));

    // A question is only shown: nothing is written, the exit code is 0.
    let r = env.run(&["task", "parse", "make some drinks nighttime"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("Type: needs-clarification\n"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("- QUESTION: \"make some drinks nighttime\": add new drinks, or change some of the existing drinks?"), "{}", r.stdout);
    assert_eq!(fingerprint(&repo), before);
}

#[test]
fn a_message_that_starts_with_parse_is_still_a_task() {
    let env = Env::new();
    let repo = env.repo();
    let r = env.run(&[
        "task",
        "parse the logs into a CSV",
        "--agent",
        "cmd:true",
        "--max-iterations",
        "1",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(read(&repo, ".ralph/task.md").contains("> parse the logs into a CSV\n"));
    assert_eq!(read(&repo, ".ralph/task-counter.txt"), "1\n");
    // The subcommand needs its message; task options do not mix with it.
    let r = env.run(&["task", "parse"]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(
        r.stderr.contains("hint: `taskdaemon task parse"),
        "{}",
        r.stderr
    );
    let r = env.run(&["task", "--agent", "cmd:true", "parse", "x"]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    // A one-word task `parse` comes after `--` (and, being vague, is asked about).
    let r = env.run(&["task", "--agent", "cmd:true", "--", "parse"]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(read(&repo, ".ralph/decide.txt").contains("### Task message\n> parse\n"));
}

#[test]
fn option_a_uses_the_agents_json() {
    let env = Env::new();
    web_project(&env);
    let repo = env.repo();
    // The scripted agent as the run's agent, asked by `--task-parser model`.
    let model = env.script(
        "model.yaml",
        r#"iterations:
  - steps:
      - say: "Here is the task:"
      - say: '{"type": "mutation", "title": "Nighttime drinks", "requirements": [{"marker": "ADD", "text": "2 nighttime drinks", "count": 2}, {"marker": "FIX", "text": "Mood toggle does not switch"}], "preserve": ["The 8 existing drinks"], "affected_files": ["src/data/flavors.ts", "src/Invented.tsx"]}'
"#,
    );
    let r = env.run(&[
        "task",
        "parse",
        "--json",
        "--task-parser",
        "model",
        "--agent",
        &model,
        VIBRANT,
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(r.stdout.trim()).unwrap();
    assert_eq!(v["parser"], "model", "{v}");
    assert_eq!(v["agent"], format!("{model}"));
    assert_eq!(v["fallback_reason"], serde_json::Value::Null);
    let t = &v["task"];
    assert_eq!(t["title"], "Nighttime drinks");
    assert_eq!(t["requirements"][0]["count"], 2);
    assert_eq!(t["requirements"][1]["marker"], "FIX");
    assert_eq!(
        t["affected_files"],
        serde_json::json!(["src/data/flavors.ts"])
    );
    assert!(
        t["ambiguities"][0]
            .as_str()
            .unwrap()
            .contains("src/Invented.tsx"),
        "{t}"
    );

    // A shell command as the parse agent: it gets spec 1 §5's prompt on stdin, runs outside
    // the repository, and its JSON becomes task.md of a real task.
    let prompt_copy = env.root().join("prompt.txt");
    let parse_agent = format!(
        "cmd:cat > {}; pwd >> {}; printf '%s' '{{\"type\":\"bugfix\",\"requirements\":[{{\"marker\":\"FIX\",\"text\":\"Theme toggle does not switch moods\"}}],\"preserve\":[\"Copy and drinks\"],\"affected_files\":[\"src/components/ThemeToggle.tsx\"]}}'",
        prompt_copy.display(),
        prompt_copy.display()
    );
    let done = env.script(
        "done.yaml",
        "iterations:\n  - steps:\n      - write: { path: src/components/ThemeToggle.tsx, content: \"fixed\\n\" }\n      - commit: fix toggle\n      - say: \"<promise>COMPLETE</promise>\"\n",
    );
    let r = env.run(&[
        "task",
        "the moods do not switch",
        "--parse-agent",
        &parse_agent,
        "--agent",
        &done,
        "--validate",
        "grep -q fixed src/components/ThemeToggle.tsx",
        "--json",
    ]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let ev = events(&r.stdout);
    assert_eq!(ev[0]["event"], "task_started");
    assert_eq!(ev[0]["parse"]["parser"], "model");
    assert_eq!(ev[0]["parse"]["task"]["type"], "bugfix");
    let md = read(&repo, ".ralph/task.md");
    assert!(md.contains("Type: bugfix\n"), "{md}");
    assert!(
        md.contains("- [FIX] Theme toggle does not switch moods\n"),
        "{md}"
    );
    assert!(md.contains("- PRESERVE: Copy and drinks\n"), "{md}");
    assert!(
        md.contains("- AFFECTED FILES: src/components/ThemeToggle.tsx\n"),
        "{md}"
    );
    let prompt = std::fs::read_to_string(&prompt_copy).unwrap();
    assert!(
        prompt.contains("User message: \"\"\"the moods do not switch\"\"\""),
        "{prompt}"
    );
    assert!(prompt.contains("Existing plan: exists"), "{prompt}");
    assert!(
        prompt.contains("src/components/ThemeToggle.tsx"),
        "{prompt}"
    );
    assert!(prompt.contains("If the scope is ambiguous"), "{prompt}");
    let cwd = prompt.lines().last().unwrap();
    assert!(!cwd.starts_with(&repo.display().to_string()), "{cwd}");
    // The loop's prompt carried the structured task.
    assert!(
        read(&repo, ".ralph/logs/iteration-001.prompt.md")
            .contains("- [FIX] Theme toggle does not switch moods")
    );
}

#[test]
fn option_a_falls_back_to_the_rules_on_garbage_failure_or_timeout() {
    let env = Env::new();
    web_project(&env);
    let garbage = env.script(
        "garbage.yaml",
        "iterations:\n  - steps:\n      - say: \"I think you should add some drinks! {not json}\"\n",
    );
    let parse = |agent: &str, timeout: &str| {
        let start = Instant::now();
        let r = env.run(&[
            "task",
            "parse",
            "--json",
            "--parse-agent",
            agent,
            "--parse-timeout",
            timeout,
            "add 2 more drinks",
        ]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let v: serde_json::Value = serde_json::from_str(r.stdout.trim()).unwrap();
        // The rules parsed it.
        assert_eq!(v["parser"], "rules", "{v}");
        assert_eq!(v["task"]["requirements"][0]["marker"], "ADD");
        assert_eq!(v["task"]["requirements"][0]["count"], 2);
        (v, start.elapsed())
    };
    let (v, _) = parse(&garbage, "5s");
    assert!(
        v["fallback_reason"]
            .as_str()
            .unwrap()
            .contains("invalid JSON"),
        "{v}"
    );
    let (v, _) = parse(
        "cmd:echo '{\"type\": \"mutation\", \"requirements\": []}'",
        "5s",
    );
    assert_eq!(v["fallback_reason"], "no requirements", "{v}");
    let (v, _) = parse("cmd:echo oops >&2; exit 3", "5s");
    assert!(
        v["fallback_reason"]
            .as_str()
            .unwrap()
            .contains("exited with 3: oops"),
        "{v}"
    );

    // An agent that hangs is stopped at the budget, its whole process group with it.
    let pid = env.root().join("hang.pid");
    let hang = format!("cmd:echo $$ > {}; sleep 60 & wait", pid.display());
    let (v, took) = parse(&hang, "1s");
    assert!(
        v["fallback_reason"]
            .as_str()
            .unwrap()
            .contains("no usable answer within the 1.0s budget"),
        "{v}"
    );
    assert!(took < Duration::from_secs(4), "took {took:?}");
    assert!(v["elapsed_ms"].as_u64().unwrap() < 1500, "{v}");
    let p = harness::read_pid(&pid);
    assert!(!harness::pid_alive(p), "the hung parse agent {p} survived");
    assert!(!harness::group_exists(p), "its process group survived");

    // The same within a task: the task starts, parsed by the rules.
    let slow = env.script("slow.yaml", "iterations:\n  - steps:\n      - sleep: 30\n");
    let r = env.run(&[
        "task",
        "add 2 more drinks",
        "--parse-agent",
        &slow,
        "--parse-timeout",
        "500ms",
        "--agent",
        "cmd:true",
        "--max-iterations",
        "1",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "the parse agent's answer was not used (no usable answer within the 500ms budget"
        ),
        "{}",
        r.stderr
    );
    assert!(
        read(&env.repo(), ".ralph/task.md")
            .contains("- [ADD] Add 2 more drinks (2 new, in addition")
    );
}

#[test]
fn an_ambiguous_task_asks_first_and_starts_once_answered() {
    let env = Env::new();
    web_project(&env);
    let repo = env.repo();
    let before = fingerprint(&repo);
    let agent = env.script(
        "a.yaml",
        &format!(
            "after-last: repeat-last\niterations:\n  - steps:\n      - write: {{ path: .ralph/plan.md, content: {plan:?} }}\n      - write: {{ path: src/data/flavors.ts, content: \"// src/data/flavors.ts\\nexport const flavors = [\\\"moonlit\\\", \\\"deep rest\\\"];\\n\" }}\n      - commit: two nighttime drinks\n      - say: \"<promise>COMPLETE</promise>\"\n",
            plan = "## drinks\nFiles: src/data/flavors.ts\n<!-- TASK-1 [ADD]: 2 nighttime drinks -->\n<!-- EXISTING drinks PRESERVED -->\n"
        ),
    );
    let r = env.run(&["task", "make some drinks nighttime", "--agent", &agent]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("not clear enough to start; nothing was changed"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("`taskdaemon answer \"your decision\"`, then `taskdaemon task`"),
        "{}",
        r.stderr
    );
    let decide = read(&repo, ".ralph/decide.txt");
    assert!(
        decide.starts_with("## Question (from the task parser, 2026-11-21T12:00:00Z)\n\"make some drinks nighttime\": add new drinks, or change some of the existing drinks?"),
        "{decide}"
    );
    assert!(
        decide.ends_with("### Task message\n> make some drinks nighttime\n\n---\n## Answer\n"),
        "{decide}"
    );
    // No snapshot, no counter, no task files: only the question.
    let mut after = fingerprint(&repo);
    after.3.retain(|f| f != "decide.txt" && f != "run.lock");
    let mut want = before.clone();
    want.3.retain(|f| f != "run.lock");
    assert_eq!((&after.1, &after.2, &after.3), (&want.1, &want.2, &want.3));

    // Until answered, neither task nor run starts.
    let r = env.run(&["task", "--agent", &agent]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr.contains("the task parser asked a question"),
        "{}",
        r.stderr
    );
    let r = env.run(&["run", "--resume"]);
    assert_eq!(r.code, 3, "{}", r.stderr);

    let r = env.run(&[
        "answer",
        "add 2 new nighttime drinks, keep the existing ones",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("Start the task with `taskdaemon task`"),
        "{}",
        r.stdout
    );
    // `run` does not take the parser's answer for the agent's.
    let r = env.run(&["run", "--resume"]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr.contains("start that task with `taskdaemon task`"),
        "{}",
        r.stderr
    );

    // No message needed: the question's message and its answer make the task.
    let r = env.run(&[
        "task",
        "--agent",
        &agent,
        "--validate",
        "grep -q moonlit src/data/flavors.ts",
    ]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let md = read(&repo, ".ralph/task.md");
    assert!(md.contains("Type: mutation\n"), "{md}");
    assert!(
        md.contains("- [ADD] Add 2 new nighttime drinks (2 new, in addition to the existing ones; keep them all)\n"),
        "{md}"
    );
    assert!(
        md.contains("- PRESERVE: Keep the existing drinks\n"),
        "{md}"
    );
    assert!(
        md.contains("## Original Message\n> make some drinks nighttime\n"),
        "{md}"
    );
    assert!(
        md.contains("## Clarification\nQuestion: \"make some drinks nighttime\": add new drinks"),
        "{md}"
    );
    assert!(
        md.contains("Answer: add 2 new nighttime drinks, keep the existing ones\n"),
        "{md}"
    );
    assert!(!repo.join(".ralph/decide.txt").exists());
    let kept: Vec<_> = std::fs::read_dir(repo.join(".ralph/decisions"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(kept.len(), 1);
    assert_eq!(git(&repo, &["tag", "--list"]), "task-1-post\ntask-1-pre\n");
}

#[test]
fn parser_settings_are_checked_before_anything_changes() {
    let env = Env::new();
    let repo = env.repo();
    std::fs::create_dir_all(repo.join(".taskdaemon")).unwrap();
    std::fs::write(
        repo.join(".taskdaemon/config.yaml"),
        "agent: cmd:true\ntask-parser: sometimes\n",
    )
    .unwrap();
    let r = env.run(&["task", "add a.txt"]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(r.stderr.contains("config.yaml:2:"), "{}", r.stderr);
    std::fs::write(repo.join(".taskdaemon/config.yaml"), "agent: cmd:true\n").unwrap();
    assert_eq!(
        env.run(&["trust"]).code,
        0,
        "its agent applies once trusted"
    );
    let r = env.run(&[
        "task",
        "add a.txt",
        "--parse-agent",
        "cmd:true",
        "--parse-timeout",
        "0s",
    ]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(r.stderr.contains("parse-timeout"), "{}", r.stderr);
    assert!(!repo.join(".ralph/task.md").exists());
    // A misspelt parse agent never stops a task: the rules parse, and say why.
    std::fs::write(
        repo.join(".taskdaemon/config.yaml"),
        "agent: cmd:true\nparse-agent: gpt\n",
    )
    .unwrap();
    let r = env.run(&["task", "parse", "add a.txt"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("parsed by the rules (parse-agent: unknown agent `gpt`"),
        "{}",
        r.stderr
    );
    // Nor does an agent CLI that is not installed.
    std::fs::write(
        repo.join(".taskdaemon/config.yaml"),
        "agent: cmd:true\nparse-agent: amp\n",
    )
    .unwrap();
    let r = env
        .cmd()
        .args(["task", "parse", "add a.txt"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("parsed by the rules (parse-agent: agent `amp` is not installed"),
        "{stderr}"
    );
}
