//! The record store at scale: 200,000 specs of about 1 KB (plus 100 plans). Prints
//! figures; asserts nothing (machines here are shared and noisy).
//!
//! `cargo bench -p taskdaemon-core --bench store` (env: BENCH_RECORDS; BENCH_DIR keeps the
//! store in that directory and reuses it when it is already there)
//!
//! The store is built by this process with batches of 10,000 creates; everything else is
//! measured in a fresh child process (this binary again), so that its peak memory is that
//! of opening the store and using it, not of building it. The files are in the page cache
//! (they were just written): "open" is parsing and indexing, not disk reads.

use std::path::Path;
use std::time::{Duration, Instant};

use taskdaemon_core::store::{Kind, NewPlan, NewRecord, NewSpec, Phase, Records, SpecStatus};
use taskstore::{Filter, StoreOptions};

const T0: i64 = 1_763_726_400_000;
const PLANS: usize = 100;
const BATCH: usize = 10_000;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--measure") {
        measure(Path::new(&args[i + 1]));
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--op") {
        let targets = (args[i + 4].clone(), args[i + 5].clone());
        op(
            &args[i + 1],
            Path::new(&args[i + 2]),
            args[i + 3] == "1",
            targets,
        );
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--targets") {
        targets(Path::new(&args[i + 1]));
        return;
    }
    let n: usize = std::env::var("BENCH_RECORDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    let tmp = tempfile::tempdir().expect("temp dir");
    let kept = std::env::var_os("BENCH_DIR").map(std::path::PathBuf::from);
    let project = kept.as_deref().unwrap_or(tmp.path());
    if project.join(".taskdaemon/store/specs.jsonl").exists() {
        return run_child(project);
    }
    let mut records = Records::open_with(project, StoreOptions::default()).expect("open");

    let plans = records
        .create_batch(
            (0..PLANS)
                .map(|i| {
                    NewRecord::Plan(NewPlan {
                        title: format!("Plan number {i:03} for the benchmark"),
                        ..Default::default()
                    })
                })
                .collect(),
            T0,
        )
        .expect("plans");
    let plan_ids: Vec<String> = plans.iter().map(|p| p.id().to_string()).collect();

    let mut batch_times = Vec::new();
    let mut made = 0;
    while made < n {
        let k = BATCH.min(n - made);
        let news = (made..made + k).map(|i| new_spec(i, &plan_ids)).collect();
        let t = Instant::now();
        records.create_batch(news, T0 + made as i64).expect("batch");
        batch_times.push(t.elapsed());
        made += k;
    }
    let stats = records.store().stats();
    let specs = stats
        .iter()
        .find(|s| s.collection == "specs")
        .expect("specs");
    println!(
        "store: {} specs in {:.1} MB ({:.0} bytes per record), {} plans",
        specs.live,
        specs.bytes as f64 / 1e6,
        specs.bytes as f64 / specs.live.max(1) as f64,
        PLANS
    );
    batch_times.sort();
    println!(
        "{BATCH} creates in one batch (while building, {} batches): median {}, slowest {}",
        batch_times.len(),
        ms(batch_times[batch_times.len() / 2]),
        ms(batch_times[batch_times.len() - 1])
    );
    drop(records);
    run_child(project);
}

fn run_child(project: &Path) {
    let exe = std::env::current_exe().expect("current exe");
    let status = std::process::Command::new(&exe)
        .arg("--measure")
        .arg(project)
        .status()
        .expect("run the measuring child");
    assert!(status.success());
    commands(&exe, project);
}

/// What one command does to the store, each in a fresh process (open included), with the
/// persistent index and without it (the baseline: the whole file parsed), rounds
/// alternating. Prints medians, min–max and the ratio indexed / parsed.
fn commands(exe: &Path, project: &Path) {
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    // The record and plan the commands name, found once (not part of any timing).
    let out = std::process::Command::new(exe)
        .arg("--targets")
        .arg(project)
        .output()
        .expect("run the targets child");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut words = text.split_whitespace();
    let (spec, plan) = (
        words.next().expect("a spec id").to_string(),
        words.next().expect("a plan id").to_string(),
    );
    // The index is saved by the first open after the build; later opens use it.
    let run = |op: &str, index: bool| -> (f64, f64) {
        let out = std::process::Command::new(exe)
            .args(["--op", op])
            .arg(project)
            .arg(if index { "1" } else { "0" })
            .args([&spec, &plan])
            .output()
            .expect("run an op child");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let mut f = text
            .split_whitespace()
            .map(|w| w.parse::<f64>().unwrap_or(0.0));
        (f.next().unwrap_or(0.0), f.next().unwrap_or(0.0))
    };
    run("show", true);
    println!("commands, each a fresh process (open + the work; median [min-max] of {rounds}):");
    let goals = [
        ("show", 20.0),
        ("plan-new", 20.0),
        ("submit", 20.0),
        ("list-status", 50.0),
        ("status-plan", 50.0),
        ("pass", 10.0),
    ];
    for (op, goal) in goals {
        let (mut with, mut without, mut rss) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            let (t, r) = run(op, true);
            with.push(t);
            rss.push(r);
            without.push(run(op, false).0);
        }
        let (m, w) = (mid(&mut with), mid(&mut without));
        println!(
            "  {op:<12} indexed {m:7.1} ms [{:.1}-{:.1}]  parsed (baseline) {w:7.1} ms [{:.1}-{:.1}]  ratio {:.3}  goal <= {goal} ms  peak RSS {:.1} MB (goal <= 30)",
            with[0],
            with[with.len() - 1],
            without[0],
            without[without.len() - 1],
            m / w,
            mid(&mut rss)
        );
    }
}

fn mid(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Prints a running spec's id and the 10th plan's id (what the commands work on; not
/// the plan `measure` added 10,200 specs to).
fn targets(project: &Path) {
    let records = Records::open_with(project, StoreOptions::default()).expect("open");
    let some_spec = records
        .store()
        .list_ids("specs", &[Filter::eq("status", "running")])
        .expect("ids")
        .first()
        .map(|s| s.to_string())
        .expect("a running spec");
    let plan = records
        .store()
        .ids("plans")
        .expect("plans")
        .nth(9)
        .map(str::to_string)
        .expect("a plan");
    println!("{some_spec} {plan}");
}

/// One command's store work in this fresh process; prints "ms peak-RSS-MB". `pass` is the
/// daemon's scheduling pass on a store it already holds open (sync, then pick).
fn op(what: &str, project: &Path, index: bool, (some_spec, plan): (String, String)) {
    let opts = StoreOptions {
        index,
        ..StoreOptions::default()
    };
    let t = Instant::now();
    let mut records = Records::open_with(project, opts).expect("open");
    let elapsed = match what {
        "show" => {
            let hex = some_spec.split('-').next().unwrap_or("").to_string();
            std::hint::black_box(records.find(&hex).expect("show"));
            t.elapsed()
        }
        "plan-new" => {
            let p = NewPlan {
                title: "One more plan".into(),
                ..Default::default()
            };
            std::hint::black_box(records.create_plan(p, T0).expect("plan new"));
            t.elapsed()
        }
        "submit" => {
            let r = taskdaemon_core::store::NewRun {
                loop_type: "ralph".into(),
                name: Some("submitted".into()),
                ..Default::default()
            };
            std::hint::black_box(records.create_run(r, T0).expect("submit"));
            t.elapsed()
        }
        "list-status" => {
            let f = [Filter::eq("status", "running")];
            std::hint::black_box(records.list(Kind::Spec, &f).expect("list"));
            t.elapsed()
        }
        "status-plan" => {
            let f = [Filter::eq("parent", plan.as_str())];
            let specs = records.list(Kind::Spec, &f).expect("specs of the plan");
            let runs = records.list(Kind::Run, &f).expect("runs of the plan");
            std::hint::black_box((specs, runs));
            t.elapsed()
        }
        _ => {
            let t = Instant::now();
            records.sync().expect("sync");
            let limits = taskdaemon_core::scheduler::pick::Limits::default();
            let picked = taskdaemon_core::scheduler::pick::pick(
                &records,
                &Default::default(),
                &limits,
                &|_| "claude".to_string(),
                &Default::default(),
            )
            .expect("pick");
            std::hint::black_box(picked);
            t.elapsed()
        }
    };
    println!("{:.3} {:.1}", elapsed.as_secs_f64() * 1000.0, peak_rss_mb());
}

fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

fn new_spec(i: usize, plans: &[String]) -> NewRecord {
    let desc = |n: usize| {
        format!(
            "Phase {n} of feature {i:07}: implement the change, write the tests, keep docs in step, verify with the validation."
        )
    };
    let status = match i % 100 {
        0 => SpecStatus::Running,
        1..=30 => SpecStatus::Complete,
        _ => SpecStatus::Pending,
    };
    NewRecord::Spec(NewSpec {
        title: format!("Feature {i:07} endpoint and storage work"),
        parent: plans[i % plans.len()].clone(),
        phases: (1..=4)
            .map(|n| Phase {
                name: format!("Phase {n}"),
                description: desc(n),
            })
            .collect(),
        status: Some(status),
        ..Default::default()
    })
}

fn measure(project: &Path) {
    // Three opens (the machine is shared: the spread says how noisy it is).
    let mut opens = Vec::new();
    let mut records = None;
    for _ in 0..3 {
        drop(records.take());
        let t = Instant::now();
        records = Some(Records::open_with(project, StoreOptions::default()).expect("open"));
        opens.push(t.elapsed());
    }
    let Some(mut records) = records else { return };
    if std::env::var_os("BENCH_OPEN_ONLY").is_some() {
        println!(
            "open: {}",
            opens.iter().map(|d| ms(*d)).collect::<Vec<_>>().join(", ")
        );
        return;
    }
    let ids: Vec<String> = records
        .store()
        .ids("specs")
        .expect("ids")
        .map(String::from)
        .collect();
    println!(
        "open with indexes: {} ({} records; runs: {})   goal <= 1.5 s",
        ms(median(opens.clone())),
        ids.len(),
        opens.iter().map(|d| ms(*d)).collect::<Vec<_>>().join(", ")
    );

    // get by id: typed (decoded into a Spec) and the stored line only.
    let mut rng = fastrand::Rng::with_seed(0x9e3779b97f4a7c15);
    let mut rnd = move || rng.usize(..);
    let picks: Vec<&str> = (0..100_000)
        .map(|_| ids[rnd() % ids.len()].as_str())
        .collect();
    let t = Instant::now();
    for id in &picks {
        std::hint::black_box(records.get(id).expect("get"));
    }
    let typed = t.elapsed() / picks.len() as u32;
    let t = Instant::now();
    for id in &picks {
        std::hint::black_box(records.store().get_raw("specs", id).expect("get"));
    }
    let raw = t.elapsed() / picks.len() as u32;
    println!(
        "get by id: {} decoded, {} the stored line (mean of 100,000)       goal <= 10 us",
        us(typed),
        us(raw)
    );

    // Resolve partial ids: hex, slug prefix, slug substring (a full scan).
    let target = &ids[ids.len() / 2];
    let hex = target.split('-').next().unwrap_or("").to_string();
    let slug = target.split_once('-').map(|(_, s)| s).unwrap_or("");
    let number = slug.split('-').nth(2).unwrap_or("").to_string();
    let prefix: String = slug.split('-').take(3).collect::<Vec<_>>().join("-");
    for (what, reference) in [
        ("hex", hex.as_str()),
        ("slug prefix", &prefix),
        ("slug substring", &number),
    ] {
        let times: Vec<Duration> = (0..20)
            .map(|_| {
                let t = Instant::now();
                let got = records.resolve(reference).expect("resolves");
                assert_eq!(&got, target);
                t.elapsed()
            })
            .collect();
        println!(
            "resolve {what:<15} {reference:<26} median {}    goal <= 5 ms",
            ms(median(times))
        );
    }

    // List with an indexed filter.
    let plan = records.list(Kind::Plan, &[]).expect("plans")[7]
        .id()
        .to_string();
    for (what, filter) in [
        ("parent = one plan", Filter::eq("parent", plan.as_str())),
        ("status = running", Filter::eq("status", "running")),
    ] {
        let mut found = 0;
        let times: Vec<Duration> = (0..10)
            .map(|_| {
                let t = Instant::now();
                found = records
                    .list(Kind::Spec, std::slice::from_ref(&filter))
                    .expect("list")
                    .len();
                t.elapsed()
            })
            .collect();
        println!(
            "list specs, {what:<18} {found} records, median {} (decoded, sorted)   goal <= 20 ms",
            ms(median(times))
        );
    }

    // Durable creates.
    let plan_ids = vec![plan.clone()];
    let mut times = Vec::new();
    for i in 0..200 {
        let t = Instant::now();
        records
            .create(new_spec(900_000_000 + i, &plan_ids), T0 + 1)
            .expect("create");
        times.push(t.elapsed());
    }
    println!(
        "one durable create (append + fdatasync): median {} of 200",
        ms(median(times))
    );
    let news = (0..BATCH)
        .map(|i| new_spec(800_000_000 + i, &plan_ids))
        .collect();
    let t = Instant::now();
    records.create_batch(news, T0 + 2).expect("batch");
    println!(
        "{BATCH} creates in one batch (one fdatasync), on the full store: {}   goal <= 1 s",
        ms(t.elapsed())
    );
    println!(
        "peak memory (VmHWM) of this process: {}",
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| s
                .lines()
                .find(|l| l.starts_with("VmHWM:"))
                .map(|l| l["VmHWM:".len()..].trim().to_string()))
            .unwrap_or_else(|| "unknown".into())
    );
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn us(d: Duration) -> String {
    format!("{:.2} us", d.as_secs_f64() * 1e6)
}
