//! The CLI as a person meets it: the HTML report (rendered in headless Chromium),
//! completions, `config show`, JSON errors, and the rough edges of issue 17 item 4.

use crate::harness;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::harness::{Env, wait_timeout};

/// A Debian tool a test needs: its path, or `None` (skip, loudly) outside CI; on CI
/// (`CI=true`) a missing tool fails the test (`.ci/run` installs it).
fn tool(name: &str) -> Option<PathBuf> {
    let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join(name))
        .find(|p| p.is_file());
    if found.is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{name} is missing on CI: .ci/run should have installed it"
        );
        eprintln!(
            "SKIPPED: {name} is not installed (apt-get install {name}); this test did not run"
        );
    }
    found
}

fn demo(env: &Env) -> PathBuf {
    let dir = env.root().join("demo");
    let r = env.run(&["demo", "--path", dir.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    dir
}

fn chromium(args: &[&str], url: &Path, profile: &Path) -> std::process::Output {
    let bin = tool("chromium").expect("checked by the caller");
    let mut child = Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(format!("file://{}", url.display()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut s).unwrap();
        s
    });
    let status = wait_timeout(&mut child, Duration::from_secs(300));
    std::process::Output {
        status,
        stdout: reader.join().unwrap(),
        stderr: Vec::new(),
    }
}

#[test]
fn report_of_the_demo_is_one_file_and_a_hostile_log_stays_text() {
    let env = Env::new();
    let dir = demo(&env);
    let log = dir.join(".ralph/logs/iteration-002.log");
    let mut text = std::fs::read_to_string(&log).unwrap();
    text.push_str("</script><img src=x onerror=alert(1)></pre></details><script>document.title='owned'</script>\n");
    std::fs::write(&log, text).unwrap();
    let r = env.run(&["-C", dir.to_str().unwrap(), "report", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(r.stdout.trim()).unwrap();
    assert_eq!(v["runs"], 1);
    let out = PathBuf::from(v["path"].as_str().unwrap());
    assert_eq!(out, dir.join(".ralph/logs/report.html"));
    let html = std::fs::read_to_string(&out).unwrap();
    for want in [
        "rejected",
        "complete",
        "<svg",
        "sh test.sh",
        "iteration 2: log (complete)",
    ] {
        assert!(html.contains(want), "{want} missing");
    }
    assert!(
        !html.contains("<img") && !html.contains("<script"),
        "markup from a log got through"
    );
    assert!(html.contains("&lt;img src=x onerror=alert(1)&gt;"));
    assert!(!html.contains("http://") && !html.contains("https://"));

    // As a browser sees it: the log line is text, nothing ran, the page rendered.
    if tool("chromium").is_none() {
        return;
    }
    let profile = env.root().join("chromium-profile");
    let dom = chromium(&["--dump-dom"], &out, &profile);
    assert!(dom.status.success());
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(dom.contains("<title>taskdaemon report"), "{dom:.400}");
    // The title is still ours (a script from the log would have set it to `owned`).
    assert!(
        !dom.contains("<img") && !dom.contains("<script"),
        "the browser made markup from a log"
    );
    assert!(
        dom.contains("onerror=alert(1)"),
        "the hostile line is shown as text"
    );
    // The cards as the browser shows them: what happened, and no stall that did not.
    assert!(
        dom.contains("<span>completions rejected</span>"),
        "{dom:.2000}"
    );
    assert!(
        !dom.contains("stall count") && !dom.contains("stalls ("),
        "a stall card for a run without a stall"
    );
    let png = env.root().join("report.png");
    let shot = chromium(
        &[
            &format!("--screenshot={}", png.display()),
            "--window-size=1280,1600",
        ],
        &out,
        &profile,
    );
    assert!(shot.status.success());
    let bytes = std::fs::read(&png).unwrap();
    assert!(
        bytes.starts_with(b"\x89PNG") && bytes.len() > 10_000,
        "{} bytes",
        bytes.len()
    );
}

#[test]
fn report_all_with_output_and_a_missing_run_is_a_usage_error() {
    let env = Env::new();
    let r = env.run(&["report"]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(
        r.stderr.contains(".ralph") && r.stderr.contains("hint:"),
        "{}",
        r.stderr
    );
    let dir = demo(&env);
    let r = env.run(&[
        "-C",
        dir.to_str().unwrap(),
        "report",
        "--all",
        "-o",
        "all.html",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("report of 1 run(s)"), "{}", r.stdout);
    assert!(dir.join("all.html").is_file());
    // A place of the person's choosing outside the repository, reached with `..`.
    let r = env.run(&[
        "-C",
        dir.to_str().unwrap(),
        "report",
        "-o",
        "../reports/demo.html",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let written = dir.parent().unwrap().join("reports/demo.html");
    assert!(written.is_file(), "{}", r.stdout);
    assert!(
        r.stdout.contains(&written.display().to_string()),
        "{}",
        r.stdout
    );
    let r = env.run(&["-C", dir.to_str().unwrap(), "report", "nosuchrun"]);
    assert_eq!(r.code, 64, "{}", r.stderr);
}

/// Run `script` in bash with the completion script of `taskdaemon completions bash` loaded.
fn bash_completion(env: &Env, script: &str) -> String {
    let r = env.run(&["completions", "bash"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let file = env.root().join("taskdaemon.bash");
    std::fs::write(&file, &r.stdout).unwrap();
    let out = Command::new("bash")
        .arg("--norc")
        .arg("-c")
        .arg(format!("source {}\n{script}", file.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn bash_completion_loads_and_completes_subcommands_and_options() {
    let env = Env::new();
    let out = bash_completion(
        &env,
        "complete -p taskdaemon\n\
         COMP_WORDS=(taskdaemon rep); COMP_CWORD=1; _taskdaemon taskdaemon rep taskdaemon; echo \"sub: ${COMPREPLY[*]}\"\n\
         COMP_WORDS=(taskdaemon sn); COMP_CWORD=1; _taskdaemon taskdaemon sn taskdaemon; echo \"sub2: ${COMPREPLY[*]}\"\n\
         COMP_WORDS=(taskdaemon report --a); COMP_CWORD=2; _taskdaemon taskdaemon --a report; echo \"opt: ${COMPREPLY[*]}\"",
    );
    assert!(out.contains("-F _taskdaemon taskdaemon"), "{out}");
    assert!(out.contains("sub: report\n"), "{out}");
    assert!(out.contains("sub2: snapshot\n"), "{out}");
    assert!(out.contains("opt: --all\n"), "{out}");
    for shell in ["zsh", "fish"] {
        let r = env.run(&["completions", shell]);
        assert_eq!(r.code, 0);
        assert!(
            r.stdout.contains("report") && r.stdout.contains("snapshot"),
            "{shell}"
        );
    }
}

#[test]
fn man_page_is_roff_with_every_visible_subcommand() {
    let env = Env::new();
    let r = env.run(&["man"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.starts_with(".ie") || r.stdout.contains(".TH taskdaemon 1"),
        "{:.200}",
        r.stdout
    );
    for sub in [
        "TASKDAEMON REPORT",
        "TASKDAEMON RUN",
        "TASKDAEMON SNAPSHOT",
        "TASKDAEMON COMPLETIONS",
    ] {
        assert!(
            r.stdout.contains(&format!(".SH \"{sub}\"")),
            "{sub} missing"
        );
    }
    assert!(
        !r.stdout.contains("__merge-store"),
        "hidden commands stay out"
    );
    // The synopses name each option's value.
    assert!(
        r.stdout
            .contains("[\\fB\\-C\\fR|\\fB\\-\\-dir\\fR \\fIDIR\\fR]"),
        "{:.600}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains("[\\fB\\-\\-max\\-iterations\\fR \\fIN\\fR]"),
        "the run's synopsis"
    );
}

#[test]
fn config_show_names_each_settings_source() {
    let env = Env::new();
    std::fs::create_dir_all(env.repo().join(".taskdaemon")).unwrap();
    std::fs::write(
        env.repo().join(".taskdaemon/config.yaml"),
        "# mine\nmax-iterations: 9\n",
    )
    .unwrap();
    let r = env
        .cmd()
        .args(["config", "show", "--json"])
        .env("TASKDAEMON_MAX_STUCK", "5")
        .output()
        .unwrap();
    assert_eq!(
        r.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    let row = |k: &str| {
        v["settings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["key"] == k)
            .unwrap()
            .clone()
    };
    assert_eq!(row("max-iterations")["value"], 9);
    let cfg = env.repo().join(".taskdaemon/config.yaml");
    assert_eq!(
        row("max-iterations")["from"],
        format!("{}:2", cfg.display())
    );
    assert_eq!(row("max-stuck")["from"], "environment TASKDAEMON_MAX_STUCK");
    assert_eq!(row("kill-grace")["from"], "default");
    // The default file's examples are not shown as defaults: unset is null, with what
    // it means beside it (and in the table).
    for example in [
        "sandbox-image",
        "sandbox-rw",
        "sandbox-ro-hide",
        "sandbox-validate",
    ] {
        assert!(row(example)["value"].is_null(), "{example}: {v}");
        assert!(row(example)["unset"].is_string(), "{example}: {v}");
    }
    // A number from the environment is a number, as one from the file is.
    assert_eq!(row("max-stuck")["value"], 5);
    let text = env.run(&["config", "show"]);
    assert!(
        text.stdout
            .lines()
            .any(|l| l.starts_with("max-iterations") && l.ends_with(":2")),
        "{}",
        text.stdout
    );
    // doctor shows the same source.
    let d = env.run(&["doctor", "--json"]);
    let dv: serde_json::Value = serde_json::from_str(d.stdout.trim()).unwrap();
    let setting = dv["settings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["key"] == "max-iterations")
        .unwrap()
        .clone();
    assert_eq!(setting["from"], format!("{}:2", cfg.display()));
}

#[test]
fn a_missing_config_file_is_a_usage_error_also_as_json() {
    let env = Env::new();
    let r = env.run(&["--config", "/nonexistent.yaml", "list"]);
    assert_eq!(r.code, 64, "{}", r.stdout);
    assert!(
        r.stderr.contains("/nonexistent.yaml") && r.stderr.contains("hint:"),
        "{}",
        r.stderr
    );
    let r = env.run(&["--config", "/nonexistent.yaml", "list", "--json"]);
    assert_eq!(r.code, 64);
    let v: serde_json::Value = serde_json::from_str(r.stdout.trim()).unwrap();
    assert!(v["error"].as_str().unwrap().contains("/nonexistent.yaml"));
    assert!(v["hint"].as_str().unwrap().contains("--config"));
    assert_eq!(v["exit"], 64);
}

#[test]
fn a_bad_environment_value_is_reported_as_the_variable() {
    let env = Env::new();
    let r = env
        .cmd()
        .args(["run", "x"])
        .env("TASKDAEMON_MAX_ITERATIONS", "abc")
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(64));
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        err.contains("TASKDAEMON_MAX_ITERATIONS") && err.contains("abc"),
        "{err}"
    );
    assert!(err.contains("hint:"), "{err}");
    // On the command line it is the flag.
    let r = env.run(&["run", "x", "--max-iterations", "abc"]);
    assert_eq!(r.code, 64);
    assert!(
        r.stderr.contains("--max-iterations") && !r.stderr.contains("TASKDAEMON_MAX"),
        "{}",
        r.stderr
    );
}

#[test]
fn list_runs_shows_what_each_run_works_on_and_no_colour_in_a_pipe() {
    let env = Env::new();
    let r = env.run(&["submit", "ralph", "make the widget blue"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = env.run(&["list", "runs"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("make the widget blue (ralph)"),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains('\u{1b}'), "colour in a pipe");
}

#[test]
fn quiet_keeps_errors_and_drops_notes() {
    let env = Env::new();
    let dir = env.root().join("demo");
    let r = env.run(&["-q", "demo", "--path", dir.to_str().unwrap()]);
    assert_eq!(r.code, 0);
    assert!(!r.stderr.contains("taskdaemon: ──"), "{}", r.stderr);
    let loud = env.run(&["-C", dir.to_str().unwrap(), "report", "nosuch"]);
    let quiet = env.run(&["-q", "-C", dir.to_str().unwrap(), "report", "nosuch"]);
    assert_eq!(loud.code, 64);
    assert_eq!(quiet.code, 64);
    assert!(quiet.stderr.contains("error:"), "{}", quiet.stderr);
}

#[test]
fn plan_diff_exits_1_when_a_hard_gate_fails() {
    let env = Env::new();
    let repo = env.repo();
    let flavors = |n: usize| {
        let items: Vec<String> = (0..n).map(|i| format!("  {{ name: \"F{i}\" }},")).collect();
        format!("export const flavors = [\n{}\n];\n", items.join("\n"))
    };
    std::fs::create_dir_all(repo.join("src")).unwrap();
    std::fs::write(repo.join("src/flavors.ts"), flavors(8)).unwrap();
    harness::git(&repo, &["add", "-A"]);
    harness::git(&repo, &["commit", "-qm", "eight"]);
    let idle = env.script(
        "idle.yaml",
        "iterations:\n  - steps: [ { say: looking } ]\n",
    );
    let r = env.run(&[
        "task",
        "add 2 more flavors",
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
        "# Plan\n\n## features\nFiles: src/flavors.ts\n<!-- TASK-1 [ADD]: 2 flavors -->\n<!-- EXISTING 8 flavors PRESERVED -->\n",
    )
    .unwrap();
    std::fs::write(repo.join("src/flavors.ts"), flavors(10)).unwrap();
    let ok = env.run(&["plan", "diff"]);
    assert_eq!(ok.code, 0, "{}{}", ok.stdout, ok.stderr);
    // Two flavors removed: the PRESERVED gate (hard) fails.
    std::fs::write(repo.join("src/flavors.ts"), flavors(6)).unwrap();
    let bad = env.run(&["plan", "diff"]);
    assert!(bad.stdout.contains("FAIL"), "{}", bad.stdout);
    assert_eq!(bad.code, 1, "{}", bad.stdout);
    assert_eq!(env.run(&["plan", "diff", "--json"]).code, 1);
}

#[test]
fn store_check_exits_1_when_the_merge_drivers_program_is_gone() {
    let env = Env::new();
    assert_eq!(env.run(&["init"]).code, 0);
    let r = env.run(&["store", "check"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    harness::git(
        &env.repo(),
        &[
            "config",
            "merge.taskstore.driver",
            "/nonexistent/taskdaemon __merge-store %O %A %B %P",
        ],
    );
    let r = env.run(&["store", "check"]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(r.stdout.contains("program is gone"), "{}", r.stdout);
}

#[test]
fn edit_without_a_change_says_nothing_changed() {
    let env = Env::new();
    let r = env.run(&["plan", "new", "Blue widgets"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("not written yet"),
        "plan new names no file it did not write: {}",
        r.stdout
    );
    let id = r.stdout.split_whitespace().nth(1).unwrap().to_string();
    let r = env.run(&["edit", &id, "--title", "Blue widgets"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("nothing changed"), "{}", r.stdout);
    let r = env.run(&["edit", &id, "--title", "Red widgets"]);
    assert!(r.stdout.starts_with("updated"), "{}", r.stdout);
}

#[test]
fn loops_name_prints_yaml_that_loads_back() {
    let env = Env::new();
    let r = env.run(&["loops", "ralph"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("  prompt-template: |"),
        "{:.300}",
        r.stdout
    );
    assert!(!r.stdout.contains("\\n"), "no escaped newlines");
    let orig: serde_json::Value =
        serde_json::from_str(&env.run(&["loops", "ralph", "--json"]).stdout).unwrap();
    // Pasted into the project's loops, it loads as the same definition.
    let dir = env.repo().join(".taskdaemon/loops");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("ralph.yaml"), &r.stdout).unwrap();
    let back = env.run(&["loops", "ralph", "--json"]);
    assert_eq!(back.code, 0, "{}", back.stderr);
    let pasted: serde_json::Value = serde_json::from_str(&back.stdout).unwrap();
    assert_eq!(orig, pasted);
    assert!(
        env.run(&["loops"])
            .stdout
            .contains(".taskdaemon/loops/ralph.yaml")
    );
}

#[test]
fn check_doc_specs_takes_its_directory_under_dash_c() {
    let env = Env::new();
    let specs = env.repo().join("specs");
    std::fs::create_dir_all(&specs).unwrap();
    let r = env
        .cmd()
        .current_dir(env.root())
        .args(["-C", "repo", "check-doc", "specs", "specs", "--json"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&r.stdout);
    assert!(
        !String::from_utf8_lossy(&r.stderr).contains("No such file"),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    assert!(out.contains("\"specs\""), "{out}");
}

#[test]
fn init_that_cannot_write_names_the_path_and_a_hint() {
    let env = Env::new();
    // A file where .taskdaemon/ should be (root ignores permission bits, so no chmod).
    std::fs::write(env.repo().join(".taskdaemon"), "in the way\n").unwrap();
    let r = env.run(&["init"]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(r.stderr.contains(".taskdaemon/config.yaml"), "{}", r.stderr);
    assert!(r.stderr.contains("hint:"), "{}", r.stderr);
}

#[test]
fn worktree_list_columns_align_with_long_branch_names() {
    let env = Env::new();
    for (name, branch) in [
        ("a", "td/short"),
        ("bbbbbbbb", "taskdaemon/a-very-long-branch-name-indeed"),
    ] {
        let path = env.repo().join(".taskdaemon/worktrees").join(name);
        harness::git(
            &env.repo(),
            &[
                "worktree",
                "add",
                "-q",
                "-b",
                branch,
                path.to_str().unwrap(),
            ],
        );
    }
    let r = env.run(&["worktree", "list"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert!(lines[0].starts_with("NAME"), "{}", r.stdout);
    let col = |l: &str, word: &str| l.find(word);
    let state: Vec<usize> = lines[1..].iter().filter_map(|l| col(l, "clean")).collect();
    assert_eq!(state.len(), 2, "{}", r.stdout);
    assert_eq!(state[0], state[1], "{}", r.stdout);
    assert_eq!(col(lines[0], "STATE"), Some(state[0]), "{}", r.stdout);
}

#[test]
fn snapshot_prune_keeps_the_newest_and_what_another_ref_names_and_can_be_undone() {
    let env = Env::new();
    let repo = env.repo();
    let mut tags = Vec::new();
    for day in 1..=4 {
        std::fs::write(repo.join(format!("f{day}")), "x").unwrap();
        let out = env
            .cmd()
            .args(["snapshot", "save", &format!("s{day}"), "--json"])
            .env("TASKDAEMON_NOW", format!("2026-11-0{day}T00:00:00Z"))
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        tags.push(v["tag"].as_str().unwrap().to_string());
    }
    // Someone tagged the second snapshot's commit: it stays.
    harness::git(
        &repo,
        &[
            "tag",
            "release-candidate",
            &format!("{}^{{commit}}", tags[1]),
        ],
    );
    let r = env.run(&["snapshot", "prune"]);
    assert_eq!(r.code, 64, "a prune says which: {}", r.stdout);
    let dry = env.run(&["snapshot", "prune", "--keep", "1", "--dry-run"]);
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    assert!(
        dry.stdout.contains(&format!("would remove {}", tags[0])),
        "{}",
        dry.stdout
    );
    assert!(
        dry.stdout.contains(&format!("keep    {}", tags[1])),
        "{}",
        dry.stdout
    );
    assert_eq!(
        harness::git(&repo, &["tag"]).lines().count(),
        5,
        "a dry run changes nothing"
    );
    let r = env.run(&["snapshot", "prune", "--keep", "1", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(r.stdout.trim()).unwrap();
    let removed: Vec<&str> = v["removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["tag"].as_str().unwrap())
        .collect();
    assert_eq!(removed, [tags[2].as_str(), tags[0].as_str()]);
    let left = harness::git(&repo, &["tag"]);
    assert!(
        left.contains(&tags[3]) && left.contains(&tags[1]) && !left.contains(&tags[0]),
        "{left}"
    );
    // The restore file brings a removed snapshot back, whole.
    let restore = std::fs::read_to_string(v["restore_file"].as_str().unwrap()).unwrap();
    let line = restore.lines().find(|l| l.contains(&tags[0])).unwrap();
    let cmd = line.split("  #").next().unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .current_dir(&repo)
        .env("HOME", env.home())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list = env.run(&["snapshot", "list"]);
    assert!(
        list.stdout.contains(&tags[0]) && list.stdout.contains("s1"),
        "{}",
        list.stdout
    );
}

#[test]
fn delete_refuses_a_referenced_record_and_saves_what_it_deletes() {
    let env = Env::new();
    let new_plan = |title: &str, extra: &[&str]| {
        let mut args = vec!["plan", "new", title, "--json"];
        args.extend_from_slice(extra);
        let r = env.run(&args);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let v: serde_json::Value = serde_json::from_str(r.stdout.trim()).unwrap();
        v["id"].as_str().unwrap().to_string()
    };
    let base = new_plan("base work", &[]);
    let top = new_plan("top work", &["--deps", &base]);
    let r = env.run(&["delete", &base]);
    assert_eq!(r.code, 64, "{}", r.stdout);
    assert!(
        r.stderr.contains(&top) && r.stderr.contains("hint:"),
        "{}",
        r.stderr
    );
    let r = env.run(&["delete", &top, "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(r.stdout.trim()).unwrap();
    let saved = std::fs::read_to_string(v["saved"].as_str().unwrap()).unwrap();
    assert!(saved.contains("top work"), "{saved}");
    assert!(!env.run(&["list"]).stdout.contains(&top));
    assert_eq!(
        env.run(&["delete", &base]).code,
        0,
        "free once nothing names it"
    );
    assert_eq!(env.run(&["show", &base]).code, 64);
}

/// A resume whose --max-iterations are spent would run nothing: refused, with how many to
/// give; with more it goes on from where it stopped.
#[test]
fn a_resume_with_spent_max_iterations_is_refused_with_a_hint() {
    let env = Env::new();
    let args = [
        "--agent",
        "cmd:true",
        "--validate",
        "false",
        "--max-stuck",
        "0",
    ];
    let r = env.run(&[&["run"], &args[..], &["--max-iterations", "2", "the task"]].concat());
    assert_eq!(r.code, 1, "{}", r.stderr);
    for spent in ["1", "2"] {
        let r = env.run(&["run", "--resume", "--max-iterations", spent]);
        assert_eq!(r.code, 64, "{}", r.stderr);
        assert!(
            r.stderr.contains("is spent") && r.stderr.contains("--max-iterations 12"),
            "{}",
            r.stderr
        );
    }
    let r = env.run(&["run", "--resume", "--max-iterations", "3"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stdout.contains("3 / 3"), "{}", r.stdout);
}

/// `logs` with a damaged `.ralph/run.json` says so (not "no run.json") and still shows the
/// logs that are there.
#[test]
fn logs_with_a_damaged_run_state_names_it_and_still_shows_the_logs() {
    let env = Env::new();
    let r = env.run(&[
        "run",
        "--agent",
        "cmd:true",
        "--validate",
        "true",
        "the task",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    std::fs::write(env.repo().join(".ralph/run.json"), "{garbage").unwrap();
    let r = env.run(&["logs"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains("run.json is not a valid run state"),
        "{}",
        r.stderr
    );
    assert!(r.stdout.contains("iteration-001.log"), "{}", r.stdout);
    for f in std::fs::read_dir(env.repo().join(".ralph/logs")).unwrap() {
        let f = f.unwrap().path();
        if f.is_file() {
            std::fs::remove_file(f).unwrap();
        }
    }
    let r = env.run(&["logs"]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(
        r.stderr.contains("run.json is not a valid run state") && r.stderr.contains("hint:"),
        "{}",
        r.stderr
    );
}

/// A file where a directory is wanted, and a directory where a file is, are named as such.
#[test]
fn a_file_for_a_directory_and_a_directory_for_a_file_are_told_apart() {
    let env = Env::new();
    let file = env.root().join("a-file");
    std::fs::write(&file, "x\n").unwrap();
    let f = file.to_str().unwrap();
    let r = env.run(&["-C", f, "status"]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(
        r.stderr.contains("is a file, not a directory"),
        "{}",
        r.stderr
    );
    let dir = env.root().to_str().unwrap().to_string();
    let r = env.run(&["--config", &dir, "status"]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(r.stderr.contains("is a directory"), "{}", r.stderr);
    let r = env.run(&["demo", "--path", f]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(r.stderr.contains("is a file"), "{}", r.stderr);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x\n");
}

/// Issue 38's rough edges: a misspelt agent gets a did-you-mean, a duration needs its
/// unit, `logs -f` follows, `doctor` has its own exit code.
#[test]
fn cli_rough_edges_of_a_first_hour_are_smoothed() {
    let env = Env::new();
    let r = env.run(&["run", "--agent", "claud", "a task"]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(
        r.stderr.contains("(did you mean `claude`?)"),
        "{}",
        r.stderr
    );
    let r = env.run(&[
        "run",
        "--agent",
        "cmd:true",
        "--iteration-timeout",
        "10",
        "a task",
    ]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(
        r.stderr.contains("`10` has no unit; write 10s for seconds"),
        "{}",
        r.stderr
    );
    std::fs::create_dir_all(env.repo().join(".taskdaemon")).unwrap();
    std::fs::write(
        env.repo().join(".taskdaemon/config.yaml"),
        "max-runtime: 600\n",
    )
    .unwrap();
    let r = env.run(&["run", "--agent", "cmd:true", "a task"]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(r.stderr.contains("config.yaml:1"), "{}", r.stderr);
    assert!(r.stderr.contains("write 600s"), "{}", r.stderr);
    std::fs::remove_file(env.repo().join(".taskdaemon/config.yaml")).unwrap();
    // --color always colours the outcome whatever the stream is.
    let r = env.run(&[
        "--color",
        "always",
        "run",
        "--agent",
        "cmd:true",
        "--max-iterations",
        "1",
        "a task",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stdout.contains("\u{1b}[33mLIMIT\u{1b}[0m"),
        "{}",
        r.stdout
    );
    let r = env.run(&["logs", "-f"]);
    assert_eq!(
        r.code, 0,
        "a finished run's logs, followed to its end: {}",
        r.stderr
    );
    assert!(r.stdout.contains("iteration-001.log"), "{}", r.stdout);
    // No agent on the narrowed PATH: a failing check, doctor's own code.
    let r = env.run(&["doctor"]);
    assert_eq!(r.code, 78, "{}{}", r.stdout, r.stderr);
    // -h is the short help (options under headings), --help the long one (examples).
    let (short, long) = (
        env.run(&["run", "-h"]).stdout,
        env.run(&["run", "--help"]).stdout,
    );
    for heading in [
        "Agent:",
        "Evidence:",
        "Limits:",
        "Failure policy:",
        "Sandbox:",
    ] {
        assert!(short.contains(heading), "{heading}: {short}");
    }
    assert!(
        short.contains("see more with '--help'") && !short.contains("Examples:"),
        "{short}"
    );
    assert!(long.contains("Examples:"), "{long}");
    // A question keeps its own punctuation.
    let ask = env.script(
        "ask.yaml",
        "iterations:\n  - steps:\n      - say: \"<promise>DECIDE:red or blue?</promise>\"\n",
    );
    let r = env.run(&["--color", "never", "run", "--agent", &ask, "a new task"]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(!r.stdout.contains('\u{1b}'), "{}", r.stdout);
    let all = format!("{}{}", r.stdout, r.stderr);
    assert!(
        all.contains("decision needed: red or blue? Answer with") && !all.contains("?."),
        "{all}"
    );
}

/// `init -q` says nothing on success; the merge driver names `taskdaemon` when that is
/// this binary on PATH (an upgrade or move along PATH keeps it working), else its path.
#[test]
fn init_is_quiet_with_q_and_its_merge_driver_survives_a_move_along_path() {
    let env = Env::new();
    let r = env.run(&["init", "-q"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout, "", "init -q prints nothing");
    let driver = || harness::git(&env.repo(), &["config", "merge.taskstore.driver"]);
    assert!(
        driver().starts_with('\''),
        "not on PATH: its path: {}",
        driver()
    );
    let bin = env.root().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_taskdaemon"), bin.join("taskdaemon")).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = env
        .cmd()
        .env("PATH", &path)
        .args(["init"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(driver().trim(), "taskdaemon __merge-store %O %A %B %P");
    let out = env
        .cmd()
        .env("PATH", &path)
        .args(["store", "check"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("merge driver: installed"), "{text}");
}

/// `status` sees a foreground `run` of the repository while it runs (no daemon), and
/// names the plan's records git has not got.
#[test]
fn status_lists_a_foreground_run_while_it_runs_and_the_uncommitted_records() {
    let env = Env::new();
    let go = env.root().join("go");
    let agent = format!("cmd:while [ ! -f {} ]; do sleep 0.05; done", go.display());
    let mut child = env
        .cmd()
        .args([
            "run",
            "--agent",
            &agent,
            "--max-iterations",
            "1",
            "wait for go",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let seen = (0..200).find_map(|_| {
        std::thread::sleep(Duration::from_millis(50));
        let r = env.run(&["status", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&r.stdout).ok()?;
        (v["foreground"].as_array()?.len() == 1).then_some(v)
    });
    let v = seen.expect("status never listed the foreground run");
    let run = &v["foreground"][0];
    assert_eq!(run["title"], "wait for go", "{v}");
    assert_eq!(run["loop_type"], "ralph", "{v}");
    assert_eq!(run["iteration"], 1, "{v}");
    assert_eq!(run["pid"], child.id(), "{v}");
    let text = env.run(&["status"]).stdout;
    assert!(
        text.contains("foreground (not the daemon's)") && text.contains("wait for go"),
        "{text}"
    );
    std::fs::write(&go, "").unwrap();
    assert_eq!(
        wait_timeout(&mut child, Duration::from_secs(60)).code(),
        Some(1)
    );
    let v: serde_json::Value =
        serde_json::from_str(&env.run(&["status", "--json"]).stdout).unwrap();
    assert_eq!(v["foreground"], serde_json::json!([]), "it ended: {v}");
    // A plan made here and not committed: named, with the command that commits it.
    assert_eq!(env.run(&["plan", "new", "Add OAuth"]).code, 0);
    let text = env.run(&["status"]).stdout;
    assert!(
        text.contains("not committed: .taskdaemon/store/plans.jsonl")
            && text.contains("git add .taskdaemon && git commit"),
        "{text}"
    );
}

/// `logs` of a recorded Claude, Codex, Gemini and opencode run reads as the agent's words
/// and one line per tool call; `--raw` prints the log as written.
#[test]
fn logs_of_each_clis_recorded_run_read_as_words_and_tool_lines() {
    let fixtures = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../taskdaemon-core/tests/fixtures/"
    );
    let cases = [
        ("claude-stream-json", "claude-stream-json/2-complete.jsonl"),
        ("codex-json", "codex-exec-json/2-complete.jsonl"),
        (
            "gemini-stream-json",
            "agent-failures/gemini/success-tool-call/stdout.jsonl",
        ),
        (
            "opencode-json",
            "agent-failures/opencode/success-tool-call/stdout.jsonl",
        ),
    ];
    for (format, file) in cases {
        let env = Env::new();
        let recorded = format!("{fixtures}{file}");
        let agent = format!("cmd:cat {recorded}");
        let r = env.run(&[
            "run",
            "--agent",
            &agent,
            "--agent-format",
            format,
            "--max-iterations",
            "1",
            "replay",
        ]);
        assert!(r.code <= 1, "{format}: {}", r.stderr);
        let shown = env.run(&["logs"]).stdout;
        assert!(!shown.contains("{\""), "{format}: JSON in `logs`:\n{shown}");
        assert!(
            shown.lines().any(|l| l.starts_with("→ ")),
            "{format}: no tool line:\n{shown}"
        );
        assert!(shown.contains("[taskdaemon] agent exited"), "{shown}");
        let raw = env.run(&["logs", "--raw"]).stdout;
        let first = std::fs::read_to_string(&recorded).unwrap();
        let first = first.lines().next().unwrap();
        assert!(
            raw.contains(first),
            "{format}: --raw keeps the JSON:\n{raw}"
        );
    }
}

/// Issue 42: `-q` is honoured by `daemon start` and `daemon stop` (and `store migrate`,
/// through the same `say`): nothing on success (as `git init -q`), the error still on a
/// failure.
#[test]
fn quiet_daemon_start_stop_print_nothing_on_success() {
    let env = Env::new();
    let start = env.run(&["daemon", "start", "-q", "--tick", "0.2"]);
    assert_eq!(start.code, 0, "{}", start.stderr);
    let again = env.run(&["daemon", "start", "-q"]);
    let stop = env.run(&["daemon", "stop", "-q"]);
    assert_eq!(stop.code, 0, "{}", stop.stderr);
    for (what, r) in [("start", &start), ("start again", &again), ("stop", &stop)] {
        assert_eq!(r.stdout, "", "daemon {what} -q printed");
    }
    // A failure still says so.
    let none = env.run(&["daemon", "stop", "-q"]);
    assert_ne!(none.code, 0);
    assert!(none.stderr.contains("no daemon runs"), "{}", none.stderr);
}
