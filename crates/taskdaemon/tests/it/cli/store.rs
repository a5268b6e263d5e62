//! The record store from the command line: plan/spec/list/show/edit, resolution, deps,
//! `store check|compact|stats`, the git merge driver in a real `git merge`, a writer
//! killed with SIGKILL over and over, and two writers at once.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use crate::harness::{Env, Run, git};

fn ok(r: Run) -> Run {
    assert_eq!(r.code, 0, "stdout: {}\nstderr: {}", r.stdout, r.stderr);
    r
}

/// Run at a given clock (RFC 3339).
fn at(env: &Env, now: &str, args: &[&str]) -> Run {
    let out = env
        .cmd()
        .env("TASKDAEMON_NOW", now)
        .args(args)
        .output()
        .unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn json(r: &Run) -> Value {
    serde_json::from_str(r.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", r.stdout))
}

fn new_id(env: &Env, args: &[&str]) -> String {
    let mut a = args.to_vec();
    a.push("--json");
    json(&ok(env.run(&a)))["id"].as_str().unwrap().to_string()
}

fn hex(id: &str) -> &str {
    id.split('-').next().unwrap()
}

/// id → record, as the store answers after opening.
fn plans(env: &Env) -> HashMap<String, Value> {
    let r = ok(env.run(&["list", "plans", "--json"]));
    json(&r)["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["id"].as_str().unwrap().to_string(), v.clone()))
        .collect()
}

#[test]
fn resolution_behaves_as_in_spec_3_section_7() {
    let env = Env::new();
    let plan = new_id(&env, &["plan", "new", "Login with third parties"]);
    let mut specs = Vec::new();
    for (i, title) in ["OAuth DB schema", "OAuth endpoints", "OAuth tests"]
        .iter()
        .enumerate()
    {
        let now = format!("2026-11-21T12:00:0{i}Z");
        let r = ok(at(
            &env,
            &now,
            &["spec", "new", title, "--parent", &plan, "--json"],
        ));
        specs.push(json(&r)["id"].as_str().unwrap().to_string());
    }
    // > taskdaemon show oauth-db
    let r = ok(env.run(&["show", "oauth-db"]));
    assert_eq!(
        r.stdout.lines().next(),
        Some(&*format!("Found: {}", specs[0]))
    );
    // > taskdaemon show oauth
    let r = env.run(&["show", "oauth"]);
    assert_eq!(r.code, 64);
    let expected = format!(
        "error: ambiguous reference \"oauth\" matches:\n  - {}\n  - {}\n  - {}\n",
        specs[0], specs[1], specs[2]
    );
    assert!(r.stderr.starts_with(&expected), "{}", r.stderr);
    // > taskdaemon show <hex>
    let r = ok(env.run(&["show", hex(&specs[1])]));
    assert_eq!(
        r.stdout.lines().next(),
        Some(&*format!("Found: {}", specs[1]))
    );
    // Full id, slug prefix, slug substring.
    for (reference, want) in [
        (specs[2].as_str(), &specs[2]),
        ("spec-oauth-e", &specs[1]),
        ("tests", &specs[2]),
        ("login", &plan),
    ] {
        let r = ok(env.run(&["show", reference, "--json"]));
        assert_eq!(json(&r)["id"], want.as_str(), "{reference}");
    }
    // None: not found, with the nearest ids.
    let r = env.run(&["show", "oauth-endpionts"]);
    assert_eq!(r.code, 64);
    assert!(
        r.stderr
            .starts_with("error: no record matches \"oauth-endpionts\"; nearest: ")
            && r.stderr.contains(&specs[1]),
        "{}",
        r.stderr
    );
    // Ids made in the same second have different hex.
    let hexes: HashSet<&str> = specs.iter().map(|s| hex(s)).collect();
    assert_eq!(hexes.len(), 3);
}

#[test]
fn plan_and_spec_fields_paths_and_constraints() {
    let env = Env::new();
    std::fs::create_dir_all(env.repo().join("docs")).unwrap();
    let r = ok(env.run(&[
        "plan",
        "new",
        "Add OAuth",
        "--file",
        "docs/../docs/oauth.md",
        "--json",
    ]));
    let p = json(&r);
    assert_eq!(
        p["file"],
        env.repo().join("docs/oauth.md").display().to_string()
    );
    assert_eq!(
        (p["status"].as_str(), p["kind"].as_str()),
        (Some("draft"), Some("plan"))
    );
    assert_eq!(p["created_at"], "2026-11-21T12:00:00Z");
    let pid = p["id"].as_str().unwrap();
    // -C: relative paths are taken from that directory.
    let r = ok(env
        .cmd()
        .current_dir(env.root())
        .args([
            "-C",
            "repo/docs",
            "spec",
            "new",
            "Schema",
            "--parent",
            pid,
            "--file",
            "s.md",
        ])
        .args(["--phase", "Phase 1: tables", "--phase", "Phase 2", "--json"])
        .output()
        .map(|o| Run {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        })
        .unwrap());
    let s = json(&r);
    assert_eq!(
        s["file"],
        env.repo().join("docs/s.md").display().to_string()
    );
    assert_eq!(
        s["phases"],
        serde_json::json!([{"name": "Phase 1", "description": "tables"}, {"name": "Phase 2", "description": ""}])
    );
    let long = "x".repeat(257);
    let r = env.run(&["plan", "new", &long]);
    assert_eq!(r.code, 64);
    assert!(
        r.stderr
            .starts_with("error: title: 257 characters, over the limit of 256\n  hint: "),
        "{}",
        r.stderr
    );
    let r = env.run(&["spec", "new", "x", "--parent", "nothing-like-this"]);
    assert_eq!(r.code, 64);
    assert!(
        r.stderr.contains("no record matches \"nothing-like-this\""),
        "{}",
        r.stderr
    );
    let r = env.run(&["list", "specs", "--status", "draft"]);
    assert_eq!(r.code, 64);
    assert!(
        r.stderr
            .contains("hint: use one of: blocked, complete, failed, paused, pending, running"),
        "{}",
        r.stderr
    );
    // --status of one kind narrows `list` to the kinds that have it.
    let all = json(&ok(env.run(&["list", "--status", "draft", "--json"])));
    assert_eq!(all["records"].as_array().unwrap().len(), 1);
    let under = json(&ok(env.run(&["list", "--parent", "add-oauth", "--json"])));
    assert_eq!(under["records"][0]["id"], s["id"]);
    assert!(ok(env.run(&["list"])).stdout.contains("Add OAuth"));
}

#[test]
fn a_cycle_is_refused_with_the_cycle_named_and_unfinished_deps_are_not_ready() {
    let env = Env::new();
    let p = new_id(&env, &["plan", "new", "plan"]);
    let a = new_id(&env, &["spec", "new", "alpha", "--parent", &p]);
    let b = new_id(
        &env,
        &["spec", "new", "beta", "--parent", &p, "--deps", "alpha"],
    );
    let c = new_id(
        &env,
        &["spec", "new", "gamma", "--parent", &p, "--deps", "beta", &p],
    );
    let r = env.run(&["edit", "alpha", "--add-dep", "gamma"]);
    assert_eq!(r.code, 64);
    assert!(
        r.stderr.starts_with(&format!(
            "error: deps would make a cycle: {a} -> {c} -> {b} -> {a}\n  hint: "
        )),
        "{}",
        r.stderr
    );
    let r = env.run(&[
        "spec",
        "new",
        "delta",
        "--parent",
        &p,
        "--deps",
        "000000-spec-gone",
    ]);
    assert_eq!(r.code, 64);
    let ready = |id: &str| {
        json(&ok(env.run(&["show", id, "--json"])))["ready"]
            .as_bool()
            .unwrap()
    };
    assert!(ready(&a));
    assert!(!ready(&c));
    let r = ok(env.run(&["show", &c]));
    assert!(
        r.stdout.contains(&format!(
            "ready:    no: waiting for {b} (pending), {p} (draft)"
        )),
        "{}",
        r.stdout
    );
    ok(env.run(&["edit", &b, "--status", "complete"]));
    assert!(!ready(&c), "the plan is not complete yet");
    ok(env.run(&["edit", &p, "--status", "complete"]));
    assert!(ready(&c));
    let r = env.run(&["edit", &b, "--status", "draft"]);
    assert_eq!(r.code, 64);
    assert!(
        r.stderr.contains("`draft` is not a spec status"),
        "{}",
        r.stderr
    );
}

#[test]
fn store_check_names_bad_lines_and_the_rest_still_loads() {
    let env = Env::new();
    ok(env.run(&["init"]));
    let p = new_id(&env, &["plan", "new", "one"]);
    let file = env.repo().join(".taskdaemon/store/plans.jsonl");
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str("{\"id\": \"broken\n");
    std::fs::write(&file, &text).unwrap();
    let q = new_id(&env, &["plan", "new", "two"]);
    // A torn last line (a crash mid-append).
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&file)
        .unwrap();
    std::io::Write::write_all(&mut f, b"{\"id\":\"x\",\"upd").unwrap();
    let r = ok(env.run(&["list", "plans", "--json"]));
    assert_eq!(json(&r)["records"].as_array().unwrap().len(), 2);
    assert!(
        r.stderr.contains("skipped 2 unreadable line(s)"),
        "{}",
        r.stderr
    );
    let r = env.run(&["store", "check"]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(
        r.stdout.contains(&format!("{}:2: ", file.display())),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains(&format!("{}:4: incomplete last line", file.display())),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("merge driver: installed"), "{}", r.stdout);
    let v = json(&env.run(&["store", "check", "--json"]));
    assert_eq!(v["bad_lines"].as_array().unwrap().len(), 2);
    // Compaction refuses to drop them silently...
    let r = env.run(&["store", "compact"]);
    assert_eq!(r.code, 64);
    assert!(
        r.stderr.contains("2 corrupt or conflicted line(s)"),
        "{}",
        r.stderr
    );
    // ...and moves them aside when told to.
    ok(env.run(&["store", "compact", "--drop-corrupt"]));
    assert_eq!(
        ok(env.run(&["store", "check"])).stdout.lines().last(),
        Some("ok")
    );
    let rejected = std::fs::read_to_string(file.with_extension("jsonl.rejected")).unwrap();
    assert_eq!(rejected.lines().count(), 2);
    let ids: HashSet<String> = plans(&env).into_keys().collect();
    assert_eq!(ids, HashSet::from([p, q]));
}

#[test]
fn compaction_and_stats_from_the_cli() {
    let env = Env::new();
    let p = new_id(&env, &["plan", "new", "one"]);
    for s in ["ready", "in-progress", "complete"] {
        ok(env.run(&["edit", &p, "--status", s]));
    }
    let stats = json(&ok(env.run(&["store", "stats", "--json"])));
    let plans_stats = stats["collections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["collection"] == "plans")
        .unwrap();
    assert_eq!(
        (
            plans_stats["lines"].as_u64(),
            plans_stats["superseded"].as_u64()
        ),
        (Some(4), Some(3))
    );
    let r = json(&ok(env.run(&["store", "compact", "--json"])));
    let pr = r["collections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["collection"] == "plans")
        .unwrap();
    assert_eq!(pr["records"], 1);
    let text = std::fs::read_to_string(env.repo().join(".taskdaemon/store/plans.jsonl")).unwrap();
    assert_eq!(text.lines().count(), 1);
    assert_eq!(
        json(&ok(env.run(&["show", &p, "--json"])))["status"],
        "complete"
    );
}

#[test]
fn the_size_guard_refuses_before_loading() {
    let env = Env::new();
    new_id(&env, &["plan", "new", "one"]);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(env.repo().join(".taskdaemon/store/plans.jsonl"))
        .unwrap();
    f.set_len(201 * 1024 * 1024).unwrap(); // sparse: no disk used
    let r = env.run(&["list"]);
    assert_eq!(r.code, 64);
    assert!(
        r.stderr
            .contains("is 201 MB, over the 200 MB limit; it was not loaded")
            && r.stderr
                .contains("run compaction (`taskdaemon store compact`)"),
        "{}",
        r.stderr
    );
}

#[test]
fn init_installs_the_merge_driver() {
    let env = Env::new();
    let v = json(&ok(env.run(&["init", "--json"])));
    assert_eq!(v["gitattributes_added"], true);
    let driver = v["merge_driver"].as_str().unwrap();
    assert!(driver.ends_with(" __merge-store %O %A %B %P"), "{driver}");
    let attrs = std::fs::read_to_string(env.repo().join(".gitattributes")).unwrap();
    assert!(
        attrs
            .lines()
            .any(|l| l == ".taskdaemon/store/*.jsonl merge=taskstore")
    );
    assert_eq!(
        git(&env.repo(), &["config", "--get", "merge.taskstore.driver"]).trim(),
        driver
    );
    let again = json(&ok(env.run(&["init", "--json"])));
    assert_eq!(again["gitattributes_added"], false);
    // Without init, check says how to get it.
    let bare = Env::new();
    let r = ok(bare.run(&["store", "check"]));
    assert!(
        r.stdout.contains("merge driver: not configured") && r.stdout.contains("taskdaemon init"),
        "{}",
        r.stdout
    );
}

#[test]
fn a_real_git_merge_resolves_per_record_and_keeps_equal_time_conflicts() {
    let env = Env::new();
    let repo = env.repo();
    ok(env.run(&["init"]));
    let t = |m: u32| format!("2026-11-21T12:{m:02}:00Z");
    let p = json(&ok(at(&env, &t(0), &["plan", "new", "Merge me", "--json"])))["id"]
        .as_str()
        .unwrap()
        .to_string();
    let spec = |title: &str, m: u32| {
        json(&ok(at(
            &env,
            &t(m),
            &["spec", "new", title, "--parent", &p, "--json"],
        )))["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (a, b, c) = (spec("alpha", 0), spec("beta", 0), spec("gamma", 0));
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "store"]);

    // Branch `feature`: a -> running (12:01), c -> failed (12:05), new spec d.
    git(&repo, &["checkout", "-qb", "feature"]);
    ok(at(&env, &t(1), &["edit", &a, "--status", "running"]));
    ok(at(&env, &t(5), &["edit", &c, "--title", "gamma (feature)"]));
    let d = spec("delta", 2);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "feature"]);

    // main: a -> failed later (12:03) wins; b -> complete; new spec e.
    git(&repo, &["checkout", "-q", "main"]);
    ok(at(&env, &t(3), &["edit", &a, "--status", "failed"]));
    ok(at(&env, &t(1), &["edit", &b, "--status", "complete"]));
    let e = spec("epsilon", 2);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "main"]);

    // A clean merge first: a copy of main without the conflicting change to c.
    git(&repo, &["checkout", "-qb", "clean"]);
    let out = std::process::Command::new("git")
        .current_dir(&repo)
        .env("GIT_CONFIG_GLOBAL", env.home().join(".gitconfig"))
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .args(["merge", "-q", "--no-edit", "feature"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let show = |id: &str| json(&ok(env.run(&["show", id, "--json"])));
    assert_eq!(show(&a)["status"], "failed", "the newer edit wins");
    assert_eq!(show(&b)["status"], "complete");
    assert_eq!(show(&c)["title"], "gamma (feature)");
    show(&d);
    show(&e);
    assert_eq!(
        ok(env.run(&["store", "check"])).stdout.lines().last(),
        Some("ok")
    );

    // Now main also changes c at the same millisecond as feature did: a conflict.
    git(&repo, &["checkout", "-q", "main"]);
    ok(at(&env, &t(5), &["edit", &c, "--title", "gamma (main)"]));
    git(&repo, &["commit", "-qam", "main edits c"]);
    let out = std::process::Command::new("git")
        .current_dir(&repo)
        .env("GIT_CONFIG_GLOBAL", env.home().join(".gitconfig"))
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .args(["merge", "-q", "--no-edit", "feature"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "the merge must stop on the conflict");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "both versions are kept between conflict markers: {c}"
        )),
        "{stderr}"
    );
    let specs = std::fs::read_to_string(repo.join(".taskdaemon/store/specs.jsonl")).unwrap();
    assert!(
        specs.contains("<<<<<<< ours\n")
            && specs.contains("gamma (main)")
            && specs.contains("gamma (feature)"),
        "{specs}"
    );
    // Everything else merged per record.
    assert_eq!(show(&a)["status"], "failed");
    for id in [&b, &d, &e] {
        show(id);
    }
    let r = env.run(&["store", "check"]);
    assert_eq!(r.code, 1);
    assert!(r.stdout.contains("merge conflict marker"), "{}", r.stdout);
    assert!(
        git(&repo, &["status", "--porcelain"]).contains("UU .taskdaemon/store/specs.jsonl"),
        "git shows the conflict"
    );
}

fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut rng = fastrand::Rng::with_seed(seed);
    move || rng.u64(..)
}

/// Start the stress writer; its stdout lines are collected by a thread until it exits.
fn spawn_writer(
    env: &Env,
    args: &[&str],
) -> (std::process::Child, std::thread::JoinHandle<Vec<String>>) {
    let mut child = env
        .cmd()
        .arg("__store-stress")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        let mut r = BufReader::new(stdout);
        let mut buf = String::new();
        // Only whole lines: a line cut by the kill was never fully acknowledged to us.
        while r.read_line(&mut buf).unwrap_or(0) > 0 {
            if buf.ends_with('\n') {
                lines.push(buf.trim_end().to_string());
            }
            buf.clear();
        }
        lines
    });
    (child, reader)
}

#[test]
fn a_writer_killed_with_sigkill_at_random_moments_loses_no_acknowledged_write() {
    let env = Env::new();
    let mut rnd = xorshift(0x2545F4914F6CDD1D);
    let mut created: HashSet<String> = HashSet::new();
    let mut revs: HashMap<String, u64> = HashMap::new();
    let (mut creates, mut updates) = (0, 0);
    // At least 60 kills and 2,000 acknowledged writes: a loaded machine writes less per
    // round, so it gets more rounds rather than a weaker test (no timed assertion).
    let (min_kills, min_writes, max_kills) = (60, 2000, 1000);
    let mut kills = 0;
    while kills < min_kills || creates + updates < min_writes {
        assert!(
            kills < max_kills,
            "only {creates} creates and {updates} updates acknowledged in {kills} kills"
        );
        let round = kills;
        kills += 1;
        // Every other round writes batches (bigger writes: more chances to cut one short).
        let batch = if round % 2 == 0 { "1" } else { "4" };
        let (mut child, reader) =
            spawn_writer(&env, &["--count", "1000000", "--updates", "--batch", batch]);
        // From right after start (often while it opens the store) to well into writing.
        std::thread::sleep(Duration::from_millis(rnd() % 250));
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        let status = child.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9),
            "round {round}: the writer ended on its own"
        );
        for line in reader.join().unwrap() {
            let parts: Vec<&str> = line.split(' ').collect();
            match parts[..] {
                ["C", id] => {
                    created.insert(id.to_string());
                    creates += 1;
                }
                ["U", id, n] => {
                    let n: u64 = n.parse().unwrap();
                    let e = revs.entry(id.to_string()).or_default();
                    *e = (*e).max(n);
                    updates += 1;
                }
                _ => panic!("round {round}: unexpected line {line:?}"),
            }
        }
        // The store opens, and every acknowledged write is in it.
        let stored = plans(&env);
        for id in &created {
            assert!(
                stored.contains_key(id),
                "round {round}: acknowledged create {id} is missing"
            );
        }
        for (id, n) in &revs {
            let title = stored[id]["title"].as_str().unwrap();
            let have: u64 = title.rsplit_once(" rev ").unwrap().1.parse().unwrap();
            assert!(
                have >= *n,
                "round {round}: {id} has rev {have}, rev {n} was acknowledged"
            );
        }
    }
    eprintln!("{kills} kills; acknowledged: {creates} creates, {updates} updates");
    assert!(updates > 0 && creates > 0);
    let r = env.run(&["store", "check", "--json"]);
    let v = json(&r);
    // A kill can only cut a line short in the middle of a write; any such line is named,
    // and the next writer started a fresh line after it.
    let bad = v["bad_lines"].as_array().unwrap();
    eprintln!("lines cut short by a kill: {}", bad.len());
    for issue in bad {
        assert!(issue["line"].as_u64().unwrap() > 0);
        assert!(
            ["corrupt", "torn-tail"].contains(&issue["kind"].as_str().unwrap()),
            "{issue}"
        );
    }
}

#[test]
fn two_processes_creating_5000_records_each_make_10000() {
    let env = Env::new();
    let (mut a, ra) = spawn_writer(&env, &["--count", "5000", "--prefix", "a"]);
    let (mut b, rb) = spawn_writer(&env, &["--count", "5000", "--prefix", "b"]);
    assert!(a.wait().unwrap().success());
    assert!(b.wait().unwrap().success());
    let mut printed: Vec<String> = ra.join().unwrap();
    printed.extend(rb.join().unwrap());
    assert_eq!(printed.len(), 10_000);
    let stored = plans(&env);
    assert_eq!(stored.len(), 10_000);
    for line in printed {
        let id = line.strip_prefix("C ").unwrap();
        assert!(stored.contains_key(id), "{id}");
    }
    let check = json(&env.run(&["store", "check", "--json"]));
    assert_eq!(check["bad_lines"].as_array().unwrap().len(), 0);
}
