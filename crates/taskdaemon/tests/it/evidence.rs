//! Evidence the agent cannot rewrite (issue 36), end to end from the CLI with scripted
//! agents: a changed validation script, deleted, skipped or emptied tests, a narrowed test
//! command and fewer tests run are rejections, not passes; a task that names a test may
//! change it; ADD counts one-entry-per-line files, Markdown and YAML lists; a file the
//! harness cannot read asks the person; `--allow-test-changes` lets it through loudly.

use std::path::Path;

use crate::harness::{Env, Run, csv_rows, git};

/// One iteration of a scripted agent: its steps as YAML flow items.
fn iteration(steps: &[String]) -> String {
    let mut s = String::from("  - steps:\n");
    for step in steps {
        s.push_str(&format!("      - {step}\n"));
    }
    s
}

fn write(path: &str, content: &str) -> String {
    format!("write: {{ path: {path:?}, content: {content:?} }}")
}

fn run_step(cmd: &str) -> String {
    format!("run: {cmd:?}")
}

fn commit(msg: &str) -> String {
    format!("commit: {msg:?}")
}

fn complete() -> String {
    "say: \"<promise>COMPLETE</promise>\"".into()
}

/// A scripted agent of these iterations (the last one repeats).
fn agent(env: &Env, name: &str, iterations: &[Vec<String>]) -> String {
    let mut yaml = String::from("after-last: repeat-last\niterations:\n");
    for it in iterations {
        yaml.push_str(&iteration(it));
    }
    env.script(name, &yaml)
}

/// A project with these files committed.
fn project(files: &[(&str, &str)]) -> Env {
    let env = Env::new();
    let repo = env.repo();
    for (p, t) in files {
        let f = repo.join(p);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, t).unwrap();
    }
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "project"]);
    env
}

fn outcomes(repo: &Path) -> Vec<String> {
    csv_rows(repo)
        .iter()
        .map(|r| r["outcome"].clone())
        .collect()
}

fn has_tag(repo: &Path, tag: &str) -> bool {
    git(repo, &["tag", "-l", tag]).trim() == tag
}

const TEST_SH: &str = "out=$(sh calc.sh add 2 3)\n[ \"$out\" = 5 ] || { echo \"expected 5, got $out\"; exit 1; }\necho ok\n";
const CALC_GOOD: &str = "[ \"$1\" = add ] && echo $(($2 + $3))\n";

fn calc_project() -> Env {
    project(&[("test.sh", TEST_SH), ("calc.sh", "echo 0\n")])
}

fn run_calc(env: &Env, agent: &str, extra: &[&str]) -> Run {
    let mut args = vec![
        "run",
        "Implement calc.sh so that sh test.sh passes",
        "--agent",
        agent,
        "--validate",
        "sh test.sh",
    ];
    args.extend_from_slice(extra);
    if !extra.contains(&"--max-iterations") {
        args.extend_from_slice(&["--max-iterations", "3"]);
    }
    env.run(&args)
}

#[test]
fn a_rewritten_test_script_is_rejected_and_restoring_it_completes() {
    let env = calc_project();
    let repo = env.repo();
    let a = agent(
        &env,
        "cheat-then-fix.yaml",
        &[
            vec![
                write("test.sh", "echo ok\n"),
                commit("tests pass"),
                complete(),
            ],
            vec![
                write("test.sh", TEST_SH),
                write("calc.sh", CALC_GOOD),
                commit("calc"),
                complete(),
            ],
        ],
    );
    let r = run_calc(&env, &a, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains("iteration 1: gate evidence: not met: `test.sh` changed since the run started: the validation now runs `echo ok`"),
        "{}",
        r.stderr
    );
    assert_eq!(outcomes(&repo), ["rejected", "complete"]);
    let prompt = std::fs::read_to_string(repo.join(".ralph/logs/iteration-002.prompt.md")).unwrap();
    assert!(
        prompt.contains("-[ \"$out\" = 5 ]"),
        "the diff is in the next prompt: {prompt}"
    );
    assert_eq!(prompt.matches("## Fixed evidence").count(), 1, "{prompt}");
}

#[test]
fn a_cheat_that_keeps_cheating_is_stuck_never_complete() {
    let env = calc_project();
    let a = agent(
        &env,
        "cheat.yaml",
        &[vec![
            run_step("echo 'echo ok' > test.sh"),
            commit("pass"),
            complete(),
        ]],
    );
    let r = run_calc(&env, &a, &["--max-iterations", "6"]);
    assert_eq!(
        r.code, 4,
        "stuck, though every iteration committed: {}",
        r.stderr
    );
    assert_eq!(outcomes(&env.repo()), ["rejected", "rejected", "stuck"]);
}

#[test]
fn allow_test_changes_lets_it_through_with_a_warning_in_the_output_the_log_and_the_report() {
    let env = calc_project();
    let repo = env.repo();
    let a = agent(
        &env,
        "cheat.yaml",
        &[vec![
            write("test.sh", "echo ok\n"),
            commit("pass"),
            complete(),
        ]],
    );
    let r = run_calc(&env, &a, &["--allow-test-changes"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains("the evidence protection is OFF"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("reminder: allowed by --allow-test-changes: `test.sh` changed"),
        "{}",
        r.stderr
    );
    let log = std::fs::read_to_string(repo.join(".ralph/logs/iteration-001.log")).unwrap();
    assert!(log.contains("allowed by --allow-test-changes"), "{log}");
    let out = env.run(&["report"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let html = std::fs::read_to_string(repo.join(".ralph/logs/report.html")).unwrap();
    assert!(html.contains("--allow-test-changes</code>: the evidence protection was off"));
    assert!(html.contains("allowed by --allow-test-changes"));
}

#[test]
fn a_repository_config_cannot_turn_the_protection_off() {
    let env = calc_project();
    let repo = env.repo();
    std::fs::create_dir_all(repo.join(".taskdaemon")).unwrap();
    std::fs::write(
        repo.join(".taskdaemon/config.yaml"),
        "allow-test-changes: true\n",
    )
    .unwrap();
    let a = agent(&env, "cheat.yaml", &[vec![complete()]]);
    let r = run_calc(&env, &a, &[]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("`allow-test-changes` cannot be set in a repository's own config"),
        "{}",
        r.stderr
    );
}

const PY_TEST: &str = "from calc import add\n\ndef test_add():\n    assert add(2, 3) == 5\n\ndef test_add_zero():\n    assert add(0, 0) == 0\n";

/// A Python project: the validation is a plain `true` here, since what is judged is the
/// test files themselves (pytest need not be installed).
fn py_project() -> Env {
    project(&[
        ("calc.py", "def add(a, b):\n    return 0\n"),
        ("tests/test_calc.py", PY_TEST),
    ])
}

fn run_py(env: &Env, agent: &str) -> Run {
    env.run(&[
        "run",
        "Implement add in calc.py",
        "--agent",
        agent,
        "--validate",
        "true",
        "--max-iterations",
        "1",
    ])
}

/// An agent that writes `tests/test_calc.py` with `from` replaced by `to` and claims
/// completion.
fn test_calc_agent(env: &Env, from: &str, to: &str) -> String {
    agent(
        env,
        "test-calc.yaml",
        &[vec![
            write("tests/test_calc.py", &PY_TEST.replace(from, to)),
            commit("x"),
            complete(),
        ]],
    )
}

/// An agent that puts `@pytest.mark.skip` on `test_add` and claims completion.
fn skipping_agent(env: &Env) -> String {
    test_calc_agent(
        env,
        "def test_add():",
        "import pytest\n@pytest.mark.skip\ndef test_add():",
    )
}

#[test]
fn deleting_or_skipping_a_python_test_is_rejected() {
    let env = py_project();
    let deleted = agent(
        &env,
        "delete.yaml",
        &[vec![
            run_step("rm tests/test_calc.py"),
            commit("x"),
            complete(),
        ]],
    );
    let r = run_py(&env, &deleted);
    assert_eq!(r.code, 1, "never COMPLETE: {}", r.stderr);
    assert!(
        r.stderr
            .contains("tests/test_calc.py was deleted since the run started"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("`test_add`"), "{}", r.stderr);

    let env = py_project();
    let skip = skipping_agent(&env);
    let r = run_py(&env, &skip);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("`@pytest.mark.skip`"), "{}", r.stderr);
}

#[test]
fn a_moved_test_file_keeps_its_tests_counted() {
    let env = py_project();
    let a = agent(
        &env,
        "move.yaml",
        &[vec![
            run_step("mkdir -p tests/unit && git mv tests/test_calc.py tests/unit/test_calc.py"),
            write("calc.py", "def add(a, b):\n    return a + b\n"),
            commit("move"),
            complete(),
        ]],
    );
    let r = run_py(&env, &a);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn a_skipped_vitest_test_is_rejected() {
    let env = project(&[(
        "src/calc.test.ts",
        "import { it, expect } from 'vitest';\nit('adds', () => { expect(1 + 1).toBe(2); });\n",
    )]);
    let a = agent(
        &env,
        "skip.yaml",
        &[vec![
            run_step("sed -i 's/^it(/it.skip(/' src/calc.test.ts"),
            commit("x"),
            complete(),
        ]],
    );
    let r = env.run(&[
        "run",
        "Fix the adder",
        "--agent",
        &a,
        "--validate",
        "true",
        "--max-iterations",
        "1",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("`it.skip`"), "{}", r.stderr);
}

/// A fake of a build tool: it exits 0 (what is judged is the file it reads).
fn fake_tool(env: &Env, name: &str) -> (String, String) {
    let bin = env.root().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let p = bin.join(name);
    std::fs::write(&p, "#!/bin/sh\nexit 0\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        crate::harness::narrowed_path().to_string_lossy()
    );
    ("PATH".into(), path)
}

#[test]
fn a_narrowed_package_script_or_an_emptied_make_target_is_rejected() {
    let env = project(&[(
        "package.json",
        "{\n  \"scripts\": {\n    \"test\": \"vitest run\"\n  }\n}\n",
    )]);
    let path = fake_tool(&env, "npm");
    let a = agent(
        &env,
        "npm.yaml",
        &[vec![
            write(
                "package.json",
                "{\n  \"scripts\": {\n    \"test\": \"true\"\n  }\n}\n",
            ),
            commit("x"),
            complete(),
        ]],
    );
    let r = env.run_with(
        &[path],
        &[
            "run",
            "Fix it",
            "--agent",
            &a,
            "--validate",
            "npm test",
            "--max-iterations",
            "1",
        ],
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("the `test` script of `package.json` changed since the run started: the validation now runs `true`"), "{}", r.stderr);

    let env = project(&[(
        "Makefile",
        "build:\n\tcc -o x x.c\n\ntest: build\n\tsh run-tests.sh\n",
    )]);
    let path = fake_tool(&env, "make");
    let a = agent(
        &env,
        "make.yaml",
        &[vec![
            write("Makefile", "build:\n\tcc -o x x.c\n\ntest:\n"),
            commit("x"),
            complete(),
        ]],
    );
    let r = env.run_with(
        &[path],
        &[
            "run",
            "Fix it",
            "--agent",
            &a,
            "--validate",
            "make test",
            "--max-iterations",
            "1",
        ],
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("the `test` target of `Makefile` changed since the run started"),
        "{}",
        r.stderr
    );
}

/// The environment cargo needs under the test's HOME: the real toolchain's homes.
fn cargo_env(env: &Env) -> Vec<(String, String)> {
    let real_home = std::env::var("HOME").unwrap_or_default();
    let rustup = std::env::var("RUSTUP_HOME").unwrap_or(format!("{real_home}/.rustup"));
    let cargo = std::env::var("CARGO_HOME").unwrap_or(format!("{real_home}/.cargo"));
    vec![
        ("RUSTUP_HOME".into(), rustup),
        ("CARGO_HOME".into(), cargo),
        (
            "CARGO_TARGET_DIR".into(),
            env.root().join("target").display().to_string(),
        ),
        ("CARGO_NET_OFFLINE".into(), "true".into()),
    ]
}

/// A library with tests `adds_I` for each of `tests`; the first one `#[ignore]`d when asked.
fn lib_rs(tests: &[u32], ignore_first: bool) -> String {
    let mut s = String::from(
        "pub fn add(a: i32, b: i32) -> i32 { a + b }\n\n#[cfg(test)]\nmod tests {\n    use super::*;\n",
    );
    for (k, i) in tests.iter().enumerate() {
        let ignore = if ignore_first && k == 0 {
            "    #[ignore]\n"
        } else {
            ""
        };
        s.push_str(&format!(
            "    #[test]\n{ignore}    fn adds_{i}() {{ assert_eq!(add({i}, 1), {i} + 1); }}\n"
        ));
    }
    s.push_str("}\n");
    s
}

/// A cargo project of five tests whose agent writes `lib` into src/lib.rs.
fn cargo_run(lib: &str) -> Run {
    let env = project(&[
        (
            "Cargo.toml",
            "[package]\nname = \"adder\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
        ),
        ("src/lib.rs", &lib_rs(&[0, 1, 2, 3, 4], false)),
    ]);
    let a = agent(
        &env,
        "tests.yaml",
        &[vec![write("src/lib.rs", lib), commit("x"), complete()]],
    );
    env.run_with(
        &cargo_env(&env),
        &[
            "run",
            "Speed up add",
            "--agent",
            &a,
            "--validate",
            "cargo test --quiet",
            "--max-iterations",
            "1",
        ],
    )
}

#[test]
fn a_cargo_project_that_loses_three_of_five_tests_is_rejected_by_the_count_that_ran() {
    let r = cargo_run(&lib_rs(&[0, 1], false));
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("validation passed"), "{}", r.stderr);
    assert!(
        r.stderr.contains("5 tests ran at the start, 2 now"),
        "{}",
        r.stderr
    );
    let r = cargo_run(&lib_rs(&[0, 1, 2, 3, 4], true));
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("`#[ignore]`"), "{}", r.stderr);
}

/// The legacy-parser project and a `task` to remove its obsolete test, whose agent runs `rm`.
fn remove_legacy_test(rm: &str) -> (Run, Env) {
    let env = project(&[
        ("parser.py", "def parse(s):\n    return s\n"),
        ("tests/test_calc.py", PY_TEST),
        (
            "tests/test_legacy_parser.py",
            "def test_legacy_parse():\n    assert True\n",
        ),
    ]);
    let a = agent(
        &env,
        "remove.yaml",
        &[vec![
            run_step(rm),
            run_step("echo 'Removed the legacy parser test' > .ralph/summary.md"),
            commit("remove"),
            complete(),
        ]],
    );
    let r = env.run(&[
        "task",
        "Remove the obsolete test for the legacy parser",
        "--agent",
        &a,
        "--validate",
        "true",
        "--max-iterations",
        "1",
    ]);
    (r, env)
}

#[test]
fn a_task_that_names_a_test_may_remove_it_and_only_it() {
    let (r, env) = remove_legacy_test("git rm -q tests/test_legacy_parser.py");
    assert_eq!(r.code, 0, "{}", r.stderr);
    let repo = env.repo();
    assert!(has_tag(&repo, "task-1-post"), "{}", r.stderr);
    let task = std::fs::read_to_string(repo.join(".ralph/task.md")).unwrap();
    assert!(
        task.contains("- Tests this task may change (it names them): tests/test_legacy_parser.py."),
        "{task}"
    );
    let (r, env) = remove_legacy_test("git rm -q tests/test_legacy_parser.py tests/test_calc.py");
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("tests/test_calc.py was deleted since the run started"),
        "{}",
        r.stderr
    );
    assert!(!has_tag(&env.repo(), "task-1-post"));
}

/// `task "Add 2 new fruits to FILE"` with an agent that writes `after`.
fn add_two(file: &str, before: &str, after: &str) -> (Run, Env) {
    let env = project(&[(file, before)]);
    let a = agent(
        &env,
        "add.yaml",
        &[vec![
            write(file, after),
            run_step("echo 'Added fruits' > .ralph/summary.md"),
            commit("fruits"),
            complete(),
        ]],
    );
    let msg = format!("Add 2 new fruits to {file}");
    let r = env.run(&["task", &msg, "--agent", &a, "--max-iterations", "1"]);
    (r, env)
}

#[test]
fn add_counts_one_entry_per_line_files_markdown_and_yaml_lists() {
    let (r, env) = add_two(
        "items.txt",
        "apple\nbanana\ncherry\n",
        "apple\nbanana\ncherry\nkiwi\n",
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("expected 5 lines, found 4"),
        "{}",
        r.stderr
    );
    assert!(!has_tag(&env.repo(), "task-1-post"));
    let (r, env) = add_two(
        "items.txt",
        "apple\nbanana\ncherry\n",
        "apple\nbanana\ncherry\nkiwi\nmango\n",
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(has_tag(&env.repo(), "task-1-post"));
    let (r, _) = add_two(
        "items.txt",
        "apple\nbanana\ncherry\n",
        "apple\nmelon\ncherry\nkiwi\nmango\n",
    );
    assert_eq!(r.code, 1, "a changed item: {}", r.stderr);
    assert!(r.stderr.contains("items.txt: `banana`"), "{}", r.stderr);

    let (r, _) = add_two(
        "fruits.md",
        "# Fruits\n\n- apple\n- banana\n- cherry\n",
        "# Fruits\n\n- apple\n- banana\n- cherry\n- kiwi\n",
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("expected 5 list items, found 4"),
        "{}",
        r.stderr
    );
    let (r, _) = add_two(
        "fruits.md",
        "# Fruits\n\n- apple\n- banana\n- cherry\n",
        "# Fruits\n\n- apple\n- banana\n- cherry\n- kiwi\n- mango\n",
    );
    assert_eq!(r.code, 0, "{}", r.stderr);

    let (r, _) = add_two(
        "fruits.yaml",
        "- apple\n- banana\n- cherry\n",
        "- apple\n- banana\n- cherry\n- kiwi\n",
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("expected 5 elements, found 4"),
        "{}",
        r.stderr
    );
    let (r, _) = add_two(
        "fruits.yaml",
        "- apple\n- banana\n- cherry\n",
        "- apple\n- banana\n- cherry\n- kiwi\n- mango\n",
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn a_requirement_on_a_file_the_harness_cannot_read_asks_the_person() {
    let env = Env::new();
    let repo = env.repo();
    std::fs::write(
        repo.join("fruits.dat"),
        b"\x00\x01apple\x00banana\x00cherry\xff",
    )
    .unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "data"]);
    let a = agent(
        &env,
        "add.yaml",
        &[vec![
            run_step("printf 'kiwi\\000mango\\000' >> fruits.dat"),
            run_step("echo 'Added fruits' > .ralph/summary.md"),
            commit("fruits"),
            complete(),
        ]],
    );
    let r = env.run(&[
        "task",
        "Add 2 new fruits to fruits.dat",
        "--agent",
        &a,
        "--max-iterations",
        "3",
    ]);
    assert_eq!(r.code, 3, "DECIDE: {}", r.stderr);
    let decide = std::fs::read_to_string(repo.join(".ralph/decide.txt")).unwrap();
    assert!(decide.contains("fruits.dat is not a text file"), "{decide}");
    assert!(!has_tag(&repo, "task-1-post"));
    // The person accepts: the work completes without that count.
    assert_eq!(env.run(&["answer", "accept"]).code, 0);
    let r = env.run(&["run", "--resume"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains("accepted by a person's answer"),
        "{}",
        r.stderr
    );
}

/// A work-list agent (a shell program): attempt 1 of a task runs `cheat`, later attempts
/// `fix`; then it checks the task's box, commits and says TASK_COMPLETE.
fn worklist_agent(env: &Env, cheat: &str, fix: &str) -> String {
    let root = env.root().display().to_string();
    let script = format!(
        r#"#!/bin/sh
R='{root}'
id="$TASKDAEMON_TASK_ID"
cat > /dev/null
n=$(cat "$R/n-$id" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$R/n-$id"
if [ "$n" = 1 ]; then {cheat}; else {fix}; fi
git add -A && git commit -qm "task $id attempt $n"
sed -i "s/^- \[ \] $id /- [x] $id /" "$TASKDAEMON_TASKS_FILE"
git add -A "$TASKDAEMON_SPEC_DIR" && git commit -qm "mark $id"
echo "done. TASK_COMPLETE"
"#
    );
    let p = env.root().join("worklist-agent.sh");
    std::fs::write(&p, script).unwrap();
    format!("cmd:sh {}", p.display())
}

#[test]
fn implement_rejects_a_task_whose_agent_rewrote_its_verify_script() {
    let env = project(&[
        ("test.sh", TEST_SH),
        ("calc.sh", "echo 0\n"),
        (
            "specs/calc/tasks.md",
            "- [ ] 1.1 Make calc add\n  - **Do**: implement calc.sh\n  - **Files**: calc.sh\n  - **Verify**: `sh test.sh`\n",
        ),
    ]);
    let repo = env.repo();
    let fix = format!(
        "git checkout HEAD~{} -- test.sh 2>/dev/null || git show $(git rev-list --max-parents=0 HEAD | head -1):test.sh > test.sh; printf '%s' '{}' > calc.sh",
        2,
        CALC_GOOD.replace('\'', "'\\''")
    );
    let a = worklist_agent(&env, "echo 'echo ok' > test.sh", &fix);
    let r = env.run(&["implement", "specs/calc", "--agent", &a]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let all = format!("{}{}", r.stdout, r.stderr);
    assert!(
        all.contains("layer 6: `test.sh` changed since the run started"),
        "{all}"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("test.sh")).unwrap(),
        TEST_SH
    );
}

#[test]
fn stories_reject_an_iteration_that_deleted_a_test() {
    let env = py_project();
    let repo = env.repo();
    std::fs::write(
        repo.join("prd.json"),
        "{\"userStories\": [{\"id\": \"US-1\", \"title\": \"Add\", \"description\": \"add works\", \"acceptanceCriteria\": [\"add(2, 3) is 5\"], \"priority\": 1, \"passes\": false, \"dependsOn\": []}]}\n",
    )
    .unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "stories"]);
    let script = env.root().join("story.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\ncat > /dev/null\ngit rm -q tests/test_calc.py\nsed -i 's/\"passes\": false/\"passes\": true/' \"$TASKDAEMON_STORIES_FILE\"\ngit add -A && git commit -qm story\necho '<promise>COMPLETE</promise>'\n",
    )
    .unwrap();
    let a = format!("cmd:sh {}", script.display());
    let r = env.run(&[
        "stories",
        "prd.json",
        "--skip-review",
        "--agent",
        &a,
        "--max-iterations",
        "2",
    ]);
    assert_ne!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let all = format!("{}{}", r.stdout, r.stderr);
    assert!(
        all.contains("tests/test_calc.py was deleted since the run started"),
        "{all}"
    );
}

/// Whether `python3 -m pytest` works here; without it the pytest test is skipped loudly,
/// and fails under CI (`.ci/run` installs pytest).
fn have_pytest(test: &str) -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import pytest"])
        .env("PATH", crate::harness::narrowed_path())
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "{test}: pytest is not installed (CI installs it)"
        );
        eprintln!("\n*** SKIPPED {test}: pytest not installed ***\n");
    }
    ok
}

#[test]
fn with_real_pytest_a_deleted_or_skipped_test_is_rejected_though_pytest_passes() {
    let io_test = "def test_read():\n    assert open('calc.py').read()\n";
    let make = || {
        project(&[
            ("calc.py", "def add(a, b):\n    return a + b\n"),
            ("tests/test_calc.py", PY_TEST),
            ("tests/test_io.py", io_test),
            (
                "tests/conftest.py",
                "import sys, os\nsys.path.insert(0, os.getcwd())\n",
            ),
        ])
    };
    let env = make();
    if !have_pytest("evidence::with_real_pytest") {
        return;
    }
    let run = |env: &Env, agent: &str| {
        env.run(&[
            "run",
            "Speed up add in calc.py",
            "--agent",
            agent,
            "--validate",
            "python3 -m pytest -q -p no:cacheprovider",
            "--max-iterations",
            "1",
        ])
    };
    let deleted = agent(
        &env,
        "delete.yaml",
        &[vec![
            run_step("git rm -q tests/test_calc.py"),
            commit("x"),
            complete(),
        ]],
    );
    let r = run(&env, &deleted);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("validation passed"), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("tests/test_calc.py was deleted since the run started"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("3 tests ran at the start, 1 now"),
        "{}",
        r.stderr
    );

    let env = make();
    let skip = skipping_agent(&env);
    let r = run(&env, &skip);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("`@pytest.mark.skip`"), "{}", r.stderr);
    assert!(
        r.stderr.contains("3 tests ran at the start, 2 now"),
        "{}",
        r.stderr
    );

    // A conftest.py made at the top that turns every failure into a pass.
    let env = make();
    let hook = "import pytest\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n    out = yield\n    out.get_result().outcome = 'passed'\n";
    let a = agent(
        &env,
        "hook.yaml",
        &[vec![write("conftest.py", hook), commit("x"), complete()]],
    );
    let r = run(&env, &a);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("`conftest.py` was made since the run started"),
        "{}",
        r.stderr
    );
}

#[test]
fn the_baseline_of_a_run_holds_across_a_resume() {
    let env = calc_project();
    let repo = env.repo();
    let a = agent(
        &env,
        "slow-cheat.yaml",
        &[
            vec![write("test.sh", "echo ok\n"), commit("simplify the test")],
            vec![complete()],
        ],
    );
    // Iteration 1 passes the (changed) validation but does not promise: no claim yet.
    let r = run_calc(
        &env,
        &a,
        &["--max-iterations", "1", "--completion-promise", "COMPLETE"],
    );
    assert_eq!(r.code, 1, "limit: {}", r.stderr);
    let r = env.run(&["run", "--resume", "--max-iterations", "2"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("`test.sh` changed since the run started"),
        "the baseline is the first start's, not the resume's: {}",
        r.stderr
    );
    assert_eq!(outcomes(&repo), ["continue", "rejected"]);
    // Kept outside the repository and its git directory.
    let kept = env.home().join(".local/state/taskdaemon/evidence");
    assert!(kept.is_dir(), "{}", kept.display());
}

#[test]
fn a_test_weakened_in_place_or_moved_without_its_body_is_rejected() {
    let env = py_project();
    let a = test_calc_agent(&env, "assert add(2, 3) == 5", "assert True");
    let r = run_py(&env, &a);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("`assert True` at line 4 added since the run started"),
        "{}",
        r.stderr
    );

    let env = py_project();
    let hollow = "def test_add():\n    pass\n\ndef test_add_zero():\n    pass\n";
    let a = agent(
        &env,
        "hollow.yaml",
        &[vec![
            run_step("git rm -q tests/test_calc.py"),
            write("tests/test_math.py", hollow),
            commit("x"),
            complete(),
        ]],
    );
    let r = run_py(&env, &a);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "tests/test_calc.py: `test_add`, `test_add_zero` changed since the run started"
        ),
        "{}",
        r.stderr
    );
}

#[test]
fn an_edited_test_body_or_padding_with_new_tests_is_rejected_new_tests_are_welcome() {
    // `== 5` → `is not None`: the names, markers and assertion count are the same.
    let env = py_project();
    let a = test_calc_agent(
        &env,
        "assert add(2, 3) == 5",
        "assert add(2, 3) is not None",
    );
    let r = run_py(&env, &a);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("tests/test_calc.py: `test_add` changed since the run started"),
        "{}",
        r.stderr
    );
    // New tests in the same file and in a new one: complete.
    let env = py_project();
    let more = format!("{PY_TEST}\ndef test_add_negative():\n    assert add(-1, -1) == -2\n");
    let a = agent(
        &env,
        "more.yaml",
        &[vec![
            write("tests/test_calc.py", &more),
            write(
                "tests/test_more.py",
                "from calc import add\n\ndef test_big():\n    assert add(10**6, 1) == 10**6 + 1\n",
            ),
            write("calc.py", "def add(a, b):\n    return a + b\n"),
            commit("tests and add"),
            complete(),
        ]],
    );
    let r = run_py(&env, &a);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn hidden_tests_padded_with_new_ones_are_rejected_by_the_count_that_ran() {
    // 5 tests: `#[cfg(any())]` hides 3 (a marker), and 3 empty new tests make up the count.
    let hidden = lib_rs(&[0, 1, 2, 3, 4], false).replacen(
        "    #[test]\n",
        "    #[cfg(any())]\n    #[test]\n",
        3,
    );
    let padded = format!(
        "{hidden}\n#[cfg(test)]\nmod pad {{\n    #[test]\n    fn p0() {{}}\n    #[test]\n    fn p1() {{}}\n    #[test]\n    fn p2() {{}}\n}}\n"
    );
    let r = cargo_run(&padded);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("though 3 test(s) were written since, so at least 8 should run"),
        "{}",
        r.stderr
    );
}

#[test]
fn a_work_list_agent_that_keeps_changing_its_evidence_is_stuck() {
    let env = project(&[
        ("test.sh", TEST_SH),
        ("calc.sh", "echo 0\n"),
        (
            "specs/calc/tasks.md",
            "- [ ] 1.1 Make calc add\n  - **Do**: implement calc.sh\n  - **Verify**: `sh test.sh`\n",
        ),
    ]);
    let cheat = "echo \"echo ok $n\" > test.sh";
    let a = worklist_agent(&env, cheat, cheat);
    let r = env.run(&["implement", "specs/calc", "--agent", &a, "--max-stuck", "2"]);
    assert_eq!(
        r.code, 4,
        "stuck though every attempt committed: {}\n{}",
        r.stdout, r.stderr
    );
}
