//! Table tests of the cascade: one record set per row, one pass of [`advance`] (or one
//! [`merged`]), and what the records and the asked-for actions are afterwards.

use serde_json::json;
use taskstore::StoreOptions;

use super::*;
use crate::store::{LoopKind, NewPlan, NewRun, NewSpec, Phase};

const T0: i64 = 1_763_726_400_000;
const TARGET: &str = "main";

/// The records of one row: a plan, its specs, runs; ids by role.
struct World {
    _dir: tempfile::TempDir,
    r: Records,
    plan: String,
    specs: Vec<String>,
    runs: Vec<String>,
}

impl World {
    fn new(plan_status: PlanStatus) -> World {
        let dir = tempfile::tempdir().unwrap();
        let mut r = Records::open_with(
            dir.path(),
            StoreOptions {
                fsync: false,
                ..Default::default()
            },
        )
        .unwrap();
        let plan = r
            .create_plan(
                NewPlan {
                    title: "widgets".into(),
                    status: Some(plan_status),
                    ..Default::default()
                },
                T0,
            )
            .unwrap()
            .id;
        World {
            _dir: dir,
            r,
            plan,
            specs: Vec::new(),
            runs: Vec::new(),
        }
    }

    fn spec(&mut self, status: SpecStatus, deps: &[usize], phases: usize) -> &mut World {
        let deps = deps.iter().map(|i| self.specs[*i].clone()).collect();
        let phases = (1..=phases)
            .map(|n| Phase::parse(&format!("Phase {n}: step {n}")).unwrap())
            .collect();
        let s = self
            .r
            .create_spec(
                NewSpec {
                    title: format!("spec {}", self.specs.len()),
                    parent: self.plan.clone(),
                    deps,
                    phases,
                    status: Some(status),
                    ..Default::default()
                },
                T0,
            )
            .unwrap();
        self.specs.push(s.id);
        self
    }

    /// A run of `kind` under `parent` (`None`: standalone) in `status`.
    fn run(
        &mut self,
        kind: &str,
        parent: Option<String>,
        status: RunStatus,
        phase_index: u64,
    ) -> &mut World {
        let run = self
            .r
            .create_run(
                NewRun {
                    loop_type: kind.into(),
                    parent,
                    status: Some(status),
                    context: Box::new(
                        json!({ "phase-index": phase_index, "task": "t" })
                            .as_object()
                            .cloned()
                            .unwrap_or_default()
                            .into(),
                    ),
                    ..NewRun::default()
                },
                T0,
            )
            .unwrap();
        self.runs.push(run.id);
        self
    }

    fn plan_run(&mut self, status: RunStatus) -> &mut World {
        let p = Some(self.plan.clone());
        self.run("plan", p, status, 0)
    }

    fn phase(&mut self, spec: usize, index: u64, status: RunStatus) -> &mut World {
        let s = Some(self.specs[spec].clone());
        self.run("phase", s, status, index)
    }

    fn set_note(&mut self, id: &str, note: &str) {
        let mut rec = self.r.get(id).unwrap().unwrap();
        match &mut rec {
            AnyRecord::Plan(p) => p.note = Some(note.into()),
            AnyRecord::Spec(s) => s.note = Some(note.into()),
            AnyRecord::Run(r) => r.note = Some(note.into()),
        }
        self.r.update(rec, T0).unwrap();
    }

    fn plan_now(&self) -> Plan {
        match self.r.get(&self.plan).unwrap() {
            Some(AnyRecord::Plan(p)) => p,
            other => panic!("{other:?}"),
        }
    }

    fn spec_now(&self, i: usize) -> Spec {
        match self.r.get(&self.specs[i]).unwrap() {
            Some(AnyRecord::Spec(s)) => s,
            other => panic!("{other:?}"),
        }
    }

    fn run_now(&self, i: usize) -> LoopRun {
        match self.r.get(&self.runs[i]).unwrap() {
            Some(AnyRecord::Run(r)) => r,
            other => panic!("{other:?}"),
        }
    }

    /// Runs of `kind` under `parent`, oldest first.
    fn runs_of(&self, parent: &str, kind: LoopKind) -> Vec<LoopRun> {
        runs(&self.r, &[Filter::eq("parent", parent)])
            .unwrap()
            .into_iter()
            .filter(|r| r.loop_type == kind)
            .collect()
    }
}

fn merges(step: &Step) -> Vec<(&str, &str)> {
    step.actions
        .iter()
        .filter_map(|a| match a {
            Action::Merge { id, target, .. } => Some((id.as_str(), target.as_str())),
            _ => None,
        })
        .collect()
}

type Setup = fn(&mut World);
type Check = fn(&World, &Step);

/// One row: a name, the plan's status, the rest of the records, and what must hold after
/// one pass.
const ADVANCE: &[(&str, PlanStatus, Setup, Check)] = &[
    (
        "a draft plan whose plan run completed is ready",
        PlanStatus::Draft,
        |w| {
            w.plan_run(RunStatus::Complete);
        },
        |w, _| assert_eq!(w.plan_now().status, PlanStatus::Ready),
    ),
    (
        "a draft plan whose plan run failed fails, with the reason",
        PlanStatus::Draft,
        |w| {
            w.plan_run(RunStatus::Failed);
            let id = w.runs[0].clone();
            w.set_note(&id, "FAILED: no agent");
        },
        |w, _| {
            let p = w.plan_now();
            assert_eq!(p.status, PlanStatus::Failed);
            assert!(p.note.unwrap().contains("no agent"));
        },
    ),
    (
        "a draft plan whose plan run is blocked stays draft with the block as its note",
        PlanStatus::Draft,
        |w| {
            w.plan_run(RunStatus::Blocked);
            let id = w.runs[0].clone();
            w.set_note(&id, "BLOCKED: which database?");
        },
        |w, _| {
            let p = w.plan_now();
            assert_eq!(p.status, PlanStatus::Draft);
            assert!(p.note.unwrap().contains("which database?"));
        },
    ),
    (
        "a draft plan whose plan run still runs is left alone",
        PlanStatus::Draft,
        |w| {
            w.plan_run(RunStatus::Running);
        },
        |w, step| {
            assert_eq!(w.plan_now().status, PlanStatus::Draft);
            assert!(step.actions.is_empty() && step.notes.is_empty(), "{step:?}");
        },
    ),
    (
        "a ready plan gets one spec run and is in progress",
        PlanStatus::Ready,
        |w| {
            w.plan_run(RunStatus::Complete);
        },
        |w, _| {
            assert_eq!(w.plan_now().status, PlanStatus::InProgress);
            let spec_runs = w.runs_of(&w.plan, LoopKind::Spec);
            assert_eq!(spec_runs.len(), 1);
            assert_eq!(spec_runs[0].status, RunStatus::Pending);
        },
    ),
    (
        "a plan paused in an old store (by its note) becomes paused, and nothing starts",
        PlanStatus::Ready,
        |w| {
            let id = w.plan.clone();
            w.set_note(&id, PAUSED);
        },
        |w, _| {
            let p = w.plan_now();
            assert_eq!((p.status, p.note), (PlanStatus::Paused, None));
            assert!(w.runs_of(&w.plan, LoopKind::Spec).is_empty());
        },
    ),
    (
        "a paused plan is left alone",
        PlanStatus::Paused,
        |w| {
            w.plan_run(RunStatus::Complete);
        },
        |w, step| {
            assert_eq!(w.plan_now().status, PlanStatus::Paused);
            assert!(w.runs_of(&w.plan, LoopKind::Spec).is_empty());
            assert!(step.notes.is_empty(), "{step:?}");
        },
    ),
    (
        "a plan whose specs are all complete is complete",
        PlanStatus::InProgress,
        |w| {
            w.spec(SpecStatus::Complete, &[], 1)
                .spec(SpecStatus::Complete, &[0], 1);
        },
        |w, _| assert_eq!(w.plan_now().status, PlanStatus::Complete),
    ),
    (
        "a plan with a failed spec says which",
        PlanStatus::InProgress,
        |w| {
            w.spec(SpecStatus::Failed, &[], 1)
                .spec(SpecStatus::Complete, &[], 1);
        },
        |w, _| {
            let p = w.plan_now();
            assert_eq!(p.status, PlanStatus::InProgress);
            assert_eq!(p.note, Some(format!("failed: {}", w.specs[0])));
        },
    ),
    (
        "a pending spec without deps starts its first phase",
        PlanStatus::InProgress,
        |w| {
            w.spec(SpecStatus::Pending, &[], 2);
        },
        |w, _| {
            assert_eq!(w.spec_now(0).status, SpecStatus::Running);
            let phases = w.runs_of(&w.specs[0], LoopKind::Phase);
            assert_eq!(phases.len(), 1);
            assert_eq!(phases[0].context.phase_index, Some(0));
        },
    ),
    (
        "a pending spec waits for a dep that is not complete",
        PlanStatus::InProgress,
        |w| {
            w.spec(SpecStatus::Running, &[], 1)
                .spec(SpecStatus::Pending, &[0], 1)
                .phase(0, 0, RunStatus::Running);
        },
        |w, _| {
            assert_eq!(w.spec_now(1).status, SpecStatus::Pending);
            assert!(w.runs_of(&w.specs[1], LoopKind::Phase).is_empty());
        },
    ),
    (
        "a pending spec whose dep failed is blocked, naming it",
        PlanStatus::InProgress,
        |w| {
            w.spec(SpecStatus::Failed, &[], 1)
                .spec(SpecStatus::Pending, &[0], 1);
        },
        |w, _| {
            let s = w.spec_now(1);
            assert_eq!(s.status, SpecStatus::Blocked);
            assert_eq!(s.note, Some(format!("dep {} failed", w.specs[0])));
        },
    ),
    (
        "a spec blocked on a dep is pending again once the dep is only waiting",
        PlanStatus::InProgress,
        |w| {
            w.spec(SpecStatus::Running, &[], 1)
                .phase(0, 0, RunStatus::Running)
                .spec(SpecStatus::Blocked, &[0], 1);
            let id = w.specs[1].clone();
            w.set_note(&id, "dep x failed");
        },
        |w, _| {
            let s = w.spec_now(1);
            assert_eq!(s.status, SpecStatus::Pending);
            assert_eq!(s.note, None);
        },
    ),
    (
        "a spec paused in an old store (by its note) becomes paused and starts nothing",
        PlanStatus::InProgress,
        |w| {
            w.spec(SpecStatus::Blocked, &[], 1);
            let id = w.specs[0].clone();
            w.set_note(&id, PAUSED);
        },
        |w, _| {
            let s = w.spec_now(0);
            assert_eq!((s.status, s.note), (SpecStatus::Paused, None));
            assert!(w.runs_of(&w.specs[0], LoopKind::Phase).is_empty());
        },
    ),
    (
        "a paused spec starts nothing",
        PlanStatus::InProgress,
        |w| {
            w.spec(SpecStatus::Paused, &[], 1);
        },
        |w, _| {
            assert_eq!(w.spec_now(0).status, SpecStatus::Paused);
            assert!(w.runs_of(&w.specs[0], LoopKind::Phase).is_empty());
        },
    ),
    (
        "a completed phase queues the next one",
        PlanStatus::InProgress,
        |w| {
            w.spec(SpecStatus::Running, &[], 2)
                .phase(0, 0, RunStatus::Complete);
        },
        |w, step| {
            let phases = w.runs_of(&w.specs[0], LoopKind::Phase);
            assert_eq!(phases.len(), 2);
            assert_eq!(phases[1].context.phase_index, Some(1));
            assert!(merges(step).is_empty());
        },
    ),
    (
        "the last phase complete asks for the spec's merge into the target",
        PlanStatus::InProgress,
        |w| {
            w.spec(SpecStatus::Running, &[], 1)
                .phase(0, 0, RunStatus::Complete);
        },
        |w, step| {
            assert_eq!(merges(step), vec![(w.specs[0].as_str(), TARGET)]);
            assert_eq!(w.spec_now(0).status, SpecStatus::Running);
        },
    ),
    (
        "a failed phase fails its spec",
        PlanStatus::InProgress,
        |w| {
            w.spec(SpecStatus::Running, &[], 2)
                .phase(0, 0, RunStatus::Failed);
        },
        |w, _| assert_eq!(w.spec_now(0).status, SpecStatus::Failed),
    ),
    (
        "a blocked phase blocks its spec",
        PlanStatus::InProgress,
        |w| {
            w.spec(SpecStatus::Running, &[], 2)
                .phase(0, 0, RunStatus::Blocked);
        },
        |w, _| assert_eq!(w.spec_now(0).status, SpecStatus::Blocked),
    ),
    (
        "a standalone run waiting in rebasing asks for its merge",
        PlanStatus::Complete,
        |w| {
            w.run("ralph", None, RunStatus::Rebasing, 0);
        },
        |w, step| assert_eq!(merges(step), vec![(w.runs[0].as_str(), TARGET)]),
    ),
    (
        "a pending run whose dep failed is blocked, and pending again once it recovers",
        PlanStatus::Complete,
        |w| {
            w.run("ralph", None, RunStatus::Failed, 0);
            let dep = w.runs[0].clone();
            let run =
                w.r.create_run(
                    NewRun {
                        loop_type: "ralph".into(),
                        deps: vec![dep],
                        ..NewRun::default()
                    },
                    T0,
                )
                .unwrap();
            w.runs.push(run.id);
        },
        |w, _| {
            let r = w.run_now(1);
            assert_eq!(r.status, RunStatus::Blocked);
            assert_eq!(r.note, Some(format!("dep {} failed", w.runs[0])));
        },
    ),
];

#[test]
fn advance_over_record_sets() {
    for (name, plan_status, setup, check) in ADVANCE {
        let mut w = World::new(*plan_status);
        setup(&mut w);
        let step = advance(&mut w.r, T0 + 1, TARGET).unwrap_or_else(|e| panic!("{name}: {e}"));
        eprintln!("case: {name}");
        check(&w, &step);
    }
}

#[test]
fn a_run_blocked_on_a_dep_is_pending_again_once_the_dep_is_resumed() {
    let mut w = World::new(PlanStatus::Complete);
    (ADVANCE.last().unwrap().2)(&mut w);
    advance(&mut w.r, T0 + 1, TARGET).unwrap();
    let mut dep = w.run_now(0);
    dep.status = RunStatus::Pending;
    w.r.update(AnyRecord::Run(dep), T0 + 2).unwrap();
    advance(&mut w.r, T0 + 3, TARGET).unwrap();
    let r = w.run_now(1);
    assert_eq!((r.status, r.note), (RunStatus::Pending, None));
}

/// How a merge ended, and what the merged record is afterwards.
/// A row: its name, the merge's end, the spec's status after, whether its worktree goes.
type MergedRow = (&'static str, fn() -> MergeEnd, SpecStatus, bool);

const MERGED: &[MergedRow] = &[
    (
        "done: complete, its worktree removed",
        || MergeEnd::Done {
            note: None,
            held: None,
        },
        SpecStatus::Complete,
        true,
    ),
    (
        "held: complete, with the note",
        || MergeEnd::Done {
            note: Some("held on taskdaemon/integration/main: …".into()),
            held: None,
        },
        SpecStatus::Complete,
        true,
    ),
    (
        "conflict: blocked with the files",
        || MergeEnd::Conflict {
            note: "merge conflict with main in: a.txt".into(),
        },
        SpecStatus::Blocked,
        false,
    ),
    (
        "failed: blocked, retried on resume",
        || MergeEnd::Failed {
            note: "merge failed: git".into(),
        },
        SpecStatus::Blocked,
        false,
    ),
];

#[test]
fn merged_records_the_end_of_a_spec_merge() {
    for (name, end, status, removed) in MERGED {
        let mut w = World::new(PlanStatus::InProgress);
        w.spec(SpecStatus::Running, &[], 1)
            .phase(0, 0, RunStatus::Complete);
        let end = end();
        let note = match &end {
            MergeEnd::Done { note, .. } => note.clone(),
            MergeEnd::Conflict { note } | MergeEnd::Failed { note } => Some(note.clone()),
        };
        let id = w.specs[0].clone();
        let step = merged(&mut w.r, &id, end, T0 + 1).unwrap();
        let s = w.spec_now(0);
        assert_eq!(s.status, *status, "{name}");
        assert_eq!(s.note, note, "{name}");
        let removes = step
            .actions
            .iter()
            .any(|a| matches!(a, Action::RemoveWorktree { name } if *name == id));
        assert_eq!(removes, *removed, "{name}");
    }
}

#[test]
fn merged_records_the_end_of_a_standalone_run_merge() {
    for (end, status) in [
        (
            MergeEnd::Done {
                note: None,
                held: None,
            },
            RunStatus::Complete,
        ),
        (
            MergeEnd::Conflict {
                note: "conflict".into(),
            },
            RunStatus::Blocked,
        ),
    ] {
        let mut w = World::new(PlanStatus::Complete);
        w.run("ralph", None, RunStatus::Rebasing, 0);
        let id = w.runs[0].clone();
        merged(&mut w.r, &id, end, T0 + 1).unwrap();
        assert_eq!(w.run_now(0).status, status);
    }
    let mut w = World::new(PlanStatus::Complete);
    assert!(
        merged(
            &mut w.r,
            "nothing-here",
            MergeEnd::Done {
                note: None,
                held: None,
            },
            T0
        )
        .is_err()
    );
}

#[test]
fn pause_and_resume_of_a_plan_and_a_spec_are_statuses() {
    use crate::daemon::control::{Action as Control, Scope, apply};
    let scope = |now| Scope {
        now,
        active: &|_| false,
        force: false,
    };
    let mut w = World::new(PlanStatus::InProgress);
    w.spec(SpecStatus::Pending, &[], 1);
    let plan = w.plan.clone();
    let applied = apply(&mut w.r, Control::Pause, &plan, &scope(T0 + 1)).unwrap();
    assert!(
        applied.lines.iter().any(|l| l.ends_with("-> paused")),
        "{applied:?}"
    );
    assert_eq!(w.plan_now().status, PlanStatus::Paused);
    assert_eq!(w.spec_now(0).status, SpecStatus::Paused);
    advance(&mut w.r, T0 + 2, TARGET).unwrap();
    assert!(w.runs_of(&w.specs[0], LoopKind::Phase).is_empty());
    apply(&mut w.r, Control::Resume, &plan, &scope(T0 + 3)).unwrap();
    assert_eq!(w.plan_now().status, PlanStatus::InProgress);
    assert_eq!(w.spec_now(0).status, SpecStatus::Pending);
    advance(&mut w.r, T0 + 4, TARGET).unwrap();
    assert_eq!(w.runs_of(&w.specs[0], LoopKind::Phase).len(), 1);
}
