//! Table tests: one row per rule of [`decide`].

use super::*;

fn policy() -> Policy {
    Policy {
        max_iterations: 10,
        max_cost: None,
        max_stuck: 3,
        max_stall: 3,
        promise_required: false,
        has_validation: true,
    }
}

fn ev() -> Evidence {
    Evidence {
        iteration: 1,
        head_before: Some("a".into()),
        head_after: Some("a".into()),
        ..Evidence::default()
    }
}

fn failed_validation() -> ValidationEvidence {
    ValidationEvidence::Failed {
        command: "make test".into(),
        exit_code: 1,
        timed_out: false,
        expected: 0,
        output: "1 failed\n".into(),
    }
}

struct Row {
    name: &'static str,
    ev: Evidence,
    st: Counters,
    policy: Policy,
    outcome: IterationOutcome,
    run: Option<&'static str>,
    stuck: u32,
}

fn row(name: &'static str, f: impl FnOnce(&mut Evidence, &mut Counters, &mut Policy)) -> Row {
    let (mut e, mut s, mut p) = (ev(), Counters::default(), policy());
    f(&mut e, &mut s, &mut p);
    Row {
        name,
        ev: e,
        st: s,
        policy: p,
        outcome: IterationOutcome::Continue,
        run: None,
        stuck: 0,
    }
}

impl Row {
    fn want(mut self, outcome: IterationOutcome, run: Option<&'static str>, stuck: u32) -> Row {
        self.outcome = outcome;
        self.run = run;
        self.stuck = stuck;
        self
    }
}

/// Every rule of the decision, in groups a reader can find a rule by.
fn table() -> Vec<Row> {
    [
        counting_rows(),
        secret_rows(),
        claim_rows(),
        stall_and_limit_rows(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Stuck, interrupted, timed out, crashed: how an iteration counts.
fn counting_rows() -> Vec<Row> {
    use IterationOutcome as O;
    vec![
        row("no commit counts toward stuck", |_, _, _| {}).want(O::Continue, None, 1),
        row("a commit resets stuck", |e, s, _| {
            e.head_after = Some("b".into());
            s.stuck = 2;
        })
        .want(O::Continue, None, 0),
        row(
            "the third iteration without a commit is stuck",
            |_, s, _| s.stuck = 2,
        )
        .want(O::Stuck, Some("STUCK"), 3),
        row("max-stuck 0 never sticks", |_, s, p| {
            s.stuck = 50;
            p.max_stuck = 0;
        })
        .want(O::Continue, None, 51),
        row("interrupted ends the loop and does not count", |e, s, _| {
            e.interrupted = true;
            s.stuck = 2;
        })
        .want(O::Interrupted, Some("INTERRUPTED"), 2),
        row("a timeout counts and says so", |e, _, _| e.timed_out = true).want(O::Timeout, None, 1),
        row("a timeout at the runtime limit ends the loop", |e, _, _| {
            e.timed_out = true;
            e.cut_by_runtime = true;
        })
        .want(O::Timeout, Some("LIMIT"), 0),
        row("a crashed agent never completes", |e, _, _| {
            e.no_work = Some("exit 1, no tool calls".into());
            e.signal = Some(Signal::Complete);
            e.validation = Some(ValidationEvidence::Passed);
        })
        .want(O::Crashed, None, 1),
    ]
}

/// Files that look like secrets in the run's commits.
fn secret_rows() -> Vec<Row> {
    use IterationOutcome as O;
    vec![
        row(
            "a commit adding a secret rejects a passing completion",
            |e, _, _| {
                e.signal = Some(Signal::Complete);
                e.validation = Some(ValidationEvidence::Passed);
                e.gates = Some(GateVerdict::Complete);
                e.head_after = Some("b".into());
                e.secrets = vec![".env".into()];
            },
        )
        .want(O::Rejected, None, 0),
        row(
            "a work list's accepted claim with a secret committed is rejected",
            |e, _, _| {
                e.work = Some(WorkVerdict {
                    claim: Claim::Accepted,
                    complete: true,
                });
                e.head_after = Some("b".into());
                e.secrets = vec!["id_rsa".into()];
            },
        )
        .want(O::Rejected, None, 0),
        row(
            "a secret in the run's commits does not hide BLOCKED",
            |e, _, _| {
                e.signal = Some(Signal::Blocked("no key".into()));
                e.secrets = vec![".env".into()];
            },
        )
        .want(O::Blocked, Some("BLOCKED"), 0),
    ]
}

/// BLOCKED, DECIDE, the promise, the validation and the gates.
fn claim_rows() -> Vec<Row> {
    use IterationOutcome as O;
    vec![
        row("BLOCKED ends the loop", |e, _, _| {
            e.signal = Some(Signal::Blocked("no key".into()))
        })
        .want(O::Blocked, Some("BLOCKED"), 0),
        row("DECIDE ends the loop", |e, _, _| {
            e.signal = Some(Signal::Decide("which db?".into()))
        })
        .want(O::Decide, Some("DECIDE"), 0),
        row(
            "promise + passing validation + gates complete",
            |e, _, _| {
                e.signal = Some(Signal::Complete);
                e.validation = Some(ValidationEvidence::Passed);
                e.gates = Some(GateVerdict::Complete);
            },
        )
        .want(O::Complete, Some("COMPLETE"), 0),
        row("promise + failing validation is rejected", |e, _, _| {
            e.signal = Some(Signal::Complete);
            e.validation = Some(failed_validation());
        })
        .want(O::Rejected, None, 1),
        row(
            "passing validation without the required promise waits",
            |e, _, p| {
                p.promise_required = true;
                e.validation = Some(ValidationEvidence::Passed);
            },
        )
        .want(O::Continue, None, 1),
        row(
            "passing validation alone completes by default",
            |e, _, _| {
                e.validation = Some(ValidationEvidence::Passed);
            },
        )
        .want(O::Complete, Some("COMPLETE"), 0),
        row(
            "a promise without validation completes unverified",
            |e, _, p| {
                p.has_validation = false;
                e.signal = Some(Signal::Complete);
            },
        )
        .want(O::Complete, Some("COMPLETE"), 0),
        row("validation missing ends the loop", |e, _, _| {
            e.validation = Some(ValidationEvidence::Missing {
                command: "nope".into(),
                output: "not found".into(),
            })
        })
        .want(O::ValidationMissing, Some("VALIDATION-MISSING"), 0),
        row("gates reject the claim", |e, _, _| {
            e.signal = Some(Signal::Complete);
            e.validation = Some(ValidationEvidence::Passed);
            e.gates = Some(GateVerdict::Rejected { tampered: false });
        })
        .want(O::Rejected, None, 1),
        row("gates abort", |e, _, _| {
            e.validation = Some(ValidationEvidence::Passed);
            e.gates = Some(GateVerdict::Abort {
                reason: "3 gate failures".into(),
            });
        })
        .want(O::Failed, Some("FAILED"), 0),
        row("plan phase swallows the claim", |e, _, _| {
            e.signal = Some(Signal::Complete);
            e.validation = Some(ValidationEvidence::Passed);
            e.gates = Some(GateVerdict::Swallowed);
        })
        .want(O::PlanPhase, None, 1),
    ]
}

/// The stall guard and the iteration and cost limits.
fn stall_and_limit_rows() -> Vec<Row> {
    use IterationOutcome as O;
    vec![
        row("the first stall recovers and clears stuck", |e, s, _| {
            e.tool_signature = Some("sig".into());
            s.last_signature = Some("sig".into());
            s.stall = 2;
            s.stuck = 2;
        })
        .want(O::StallRecovery, None, 0),
        row("the second stall fails", |e, s, _| {
            e.tool_signature = Some("sig".into());
            s.last_signature = Some("sig".into());
            s.stall = 2;
            s.stall_recoveries = 1;
        })
        .want(O::Failed, Some("FAILED"), 0),
        row("the last iteration reaches the limit", |e, _, _| {
            e.iteration = 10
        })
        .want(O::Continue, Some("LIMIT"), 1),
        row("a passing last iteration still completes", |e, _, _| {
            e.iteration = 10;
            e.validation = Some(ValidationEvidence::Passed);
        })
        .want(O::Complete, Some("COMPLETE"), 0),
        row("the cost limit", |e, _, p| {
            p.max_cost = Some(1.0);
            e.cost_usd = 1.5;
            e.head_after = Some("b".into());
        })
        .want(O::Continue, Some("LIMIT"), 0),
    ]
}

#[test]
fn every_rule_of_the_table() {
    for r in table() {
        let d = decide(&r.ev, &r.st, &r.policy);
        assert_eq!(d.outcome, r.outcome, "{}", r.name);
        assert_eq!(
            d.run_outcome.as_ref().map(Outcome::label),
            r.run,
            "{}",
            r.name
        );
        assert_eq!(d.counters.stuck, r.stuck, "{}", r.name);
    }
}

#[test]
fn feedback_and_csv_labels() {
    let mut e = ev();
    e.signal = Some(Signal::Complete);
    e.validation = Some(failed_validation());
    let d = decide(&e, &Counters::default(), &policy());
    assert_eq!(d.validation.label(), "false");
    assert_eq!(d.outcome.label(), "rejected");
    assert!(d.rejected.is_some());
    match d.feedback {
        Feedback::Set(t) => {
            assert!(t.starts_with("$ make test\n(exit code 1, expected 0)\n1 failed"))
        }
        other => panic!("{other:?}"),
    }
    e.validation = Some(ValidationEvidence::Passed);
    e.gates = Some(GateVerdict::Complete);
    let d = decide(&e, &Counters::default(), &policy());
    assert_eq!(d.feedback, Feedback::Clear);
    assert_eq!(d.validation.label(), "true");
    assert_eq!(
        serde_json::to_string(&IterationOutcome::StallRecovery).unwrap(),
        "\"stall-recovery\""
    );
}

#[test]
fn a_work_list_follows_the_commit_based_stuck_rule() {
    let work = |claim, complete, before: &str, after: &str| Evidence {
        work: Some(WorkVerdict { claim, complete }),
        head_before: Some(before.into()),
        head_after: Some(after.into()),
        ..ev()
    };
    let c = |stuck| Counters {
        stuck,
        ..Counters::default()
    };
    let mut p = policy();
    p.max_stuck = 2;
    let d = decide(&work(Claim::Rejected, false, "a", "a"), &c(1), &p);
    assert_eq!(d.run_outcome.map(|o| o.exit_code()), Some(4));
    let d = decide(&work(Claim::Accepted, false, "a", "a"), &c(1), &p);
    assert_eq!(
        d.run_outcome.map(|o| o.exit_code()),
        Some(4),
        "accepted without a commit is no progress (spec 2 §2)"
    );
    let d = decide(&work(Claim::Rejected, false, "a", "b"), &c(1), &p);
    assert_eq!(
        (d.counters.stuck, d.outcome),
        (0, IterationOutcome::Rejected)
    );
    let d = decide(&work(Claim::Tampered, false, "a", "b"), &c(1), &p);
    assert_eq!(
        d.run_outcome.map(|o| o.exit_code()),
        Some(4),
        "a commit that changed the evidence is no progress"
    );
    let d = decide(&work(Claim::Accepted, true, "a", "b"), &c(1), &p);
    assert_eq!(d.outcome, IterationOutcome::Complete);
    assert_eq!(d.validation.label(), "true");
}

#[test]
fn changed_git_files_reject_the_iteration_whatever_it_claimed_and_count_for_stuck() {
    let p = policy();
    let tampered = Evidence {
        signal: Some(Signal::Complete),
        validation: Some(ValidationEvidence::Passed),
        head_after: Some("b".into()),
        git_tampered: Some(".git/config (changed, restored)".into()),
        ..ev()
    };
    let d = decide(&tampered, &Counters::default(), &p);
    assert_eq!(d.outcome, IterationOutcome::Rejected);
    assert_eq!(
        d.run_outcome, None,
        "a commit and a passing validation do not complete"
    );
    assert_eq!(d.counters.stuck, 1, "no progress, whatever it committed");
    let Feedback::Set(f) = &d.feedback else {
        panic!("the next prompt is told: {:?}", d.feedback);
    };
    assert!(f.contains(".git/config (changed, restored)"), "{f}");
    assert!(d.note.contains("git's own files changed"), "{}", d.note);
    // An interrupted iteration stays interrupted (not counted).
    let stopped = Evidence {
        interrupted: true,
        ..tampered
    };
    assert_eq!(
        decide(&stopped, &Counters::default(), &p).outcome,
        IterationOutcome::Interrupted
    );
}

#[test]
fn a_secret_in_the_commits_is_named_in_the_next_prompt_before_the_validation() {
    let mut e = ev();
    e.signal = Some(Signal::Complete);
    e.validation = Some(failed_validation());
    e.secrets = vec![".env".into(), "keys/id_rsa".into()];
    let d = decide(&e, &Counters::default(), &policy());
    assert_eq!(d.outcome, IterationOutcome::Rejected);
    assert!(
        d.rejected
            .as_deref()
            .is_some_and(|r| r.contains(".env, keys/id_rsa"))
    );
    match d.feedback {
        Feedback::Set(t) => {
            assert!(
                t.starts_with("Your commits add files that look like secrets: .env, keys/id_rsa."),
                "{t}"
            );
            assert!(t.contains("git rm --cached -- .env"), "{t}");
            assert!(t.contains("$ make test"), "{t}");
        }
        other => panic!("{other:?}"),
    }
}
