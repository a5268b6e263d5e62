//! Nothing lost (issue 37): a new run replaces an unfinished one only when it can start.
//! Real git, real processes.

use crate::harness::Env;

#[test]
fn a_new_run_whose_agent_cannot_start_keeps_the_unfinished_run() {
    let env = Env::new();
    let r = env.run(&[
        "run",
        "first task",
        "--agent",
        "cmd:true",
        "--validate",
        "false",
        "--max-iterations",
        "1",
    ]);
    assert_eq!(r.code, 1, "a limit: resumable: {}", r.stderr);
    let state = |env: &Env| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(env.repo().join(".ralph/run.json")).unwrap())
            .unwrap()
    };
    let first = state(&env)["run_id"].as_str().unwrap().to_string();
    let r = env.run(&["run", "second task", "--agent", "cmd:/nonexistent/agent"]);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(
        r.stderr
            .contains(&format!("the unfinished run {first} is kept"))
            && r.stderr.contains("/nonexistent/agent")
            && r.stderr.contains("taskdaemon run --resume"),
        "{}",
        r.stderr
    );
    assert_eq!(
        state(&env)["run_id"],
        first.as_str(),
        "run.json is untouched"
    );
    assert!(
        env.repo().join(".ralph/logs/iteration-001.log").exists(),
        "its logs were not set aside"
    );
    let r = env.run(&["run", "--resume", "--max-iterations", "2"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("resuming at iteration 2"), "{}", r.stderr);
}
