//! The daemon: one per repository. A dispatcher task owns the record store and every
//! decision (the nextest dispatcher shape); runs, merges and socket clients talk to it by
//! channels.
//!
//! Each pass: sync the store, [`scheduler::advance`] the cascade, start merges it asks for,
//! [`scheduler::pick`] runs to start within the limits. Passes happen after anything that
//! can change what is ready (a run finished, a merge ended, a request) and on a tick (new
//! work written to the store by `taskdaemon submit` while no one pokes the socket).
//!
//! Crash recovery is the same path as a normal start: process groups a dead daemon left are
//! ended (see `agent::tracked`), runs still marked `running` are started first, and each
//! resumes from the run state in its worktree (iteration, progress, stuck count).

pub mod control;
pub mod events;
pub mod executor;
pub mod governor;
pub mod ipc;
mod journal;
pub mod local;
mod paths;
mod reports;
pub mod shared_queue;
pub mod status;
pub mod submit;
mod subscriber;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixListener;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

pub use events::{DaemonEvent, Subject};
pub use paths::{DaemonInfo, DaemonPaths};
pub use shared_queue::QueueOptions;

use self::control::StopAs;
use self::executor::{Launch, Report, Shared};
use self::ipc::{Request, Response};
use self::shared_queue::iterations_recorded;
use crate::engine::Outcome;
use crate::git::integrate::{MergeResult, merge_into};
use crate::git::worktree::Worktrees;
use crate::scheduler::cascade::{self, Action, MergeEnd};
use crate::scheduler::context;
use crate::scheduler::{Limits, pick};
use crate::store::{AnyRecord, LoopKind, LoopRun, Records, RunStatus, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(
        "a daemon already runs for this repository (pid {pid})\n  hint: `taskdaemon daemon status` shows it; `taskdaemon daemon stop` stops it"
    )]
    AlreadyRunning { pid: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Worktree(#[from] crate::git::worktree::WorktreeError),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> DaemonError {
    let what = what.into();
    move |source| DaemonError::Io { what, source }
}

/// How the daemon runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// The taskdaemon executable.
    pub script_runner: PathBuf,
    /// Where worktrees live (relative: from the repository's top level).
    pub worktrees_dir: PathBuf,
    /// Merge target when a plan or run names none.
    pub default_target: String,
    pub limits: Limits,
    /// The agent of runs that name none (over the config files' `agent`).
    pub default_agent: Option<String>,
    /// The sandbox of runs that name none (the daemon's `--sandbox`, over the config files).
    pub default_sandbox: Option<crate::sandbox::SandboxKind>,
    /// A settings file used instead of the project's (`--config`).
    pub config: Option<PathBuf>,
    /// The agent kind of runs that name no agent (for the per-agent limits).
    pub default_agent_kind: String,
    /// Time between passes when nothing happens.
    pub tick: Duration,
    /// TERM → KILL for process groups left by a dead daemon.
    pub grace: Duration,
    /// The shared queue's settings (used only when the records live in one: `queue:`).
    pub queue: QueueOptions,
}

/// The kind of an agent spec, for per-agent limits: `claude`, `cmd`, `script`, …
pub fn agent_kind(spec: &str) -> String {
    spec.split(':').next().unwrap_or(spec).trim().to_string()
}

struct Active {
    cancel: CancellationToken,
    /// Cancelled: the run stops when its iteration ends (a graceful pause).
    pause: CancellationToken,
    agent: String,
    stop_as: Option<StopAs>,
    /// Its worktree (the branch pushed to the shared remote).
    worktree: String,
    /// Its lease is lost (shared queue): it stops and writes nothing more.
    lost: bool,
    /// Its lease could not be renewed (shared queue, the database does not answer): it
    /// stops, and goes on here once the database answers if the lease is still ours.
    held: bool,
}

/// How many events a subscriber may fall behind before it is sent `lagged`.
pub const EVENT_BUFFER: usize = 4096;

/// Where the daemon's events go: the log (every event a person reads, never dropped) and
/// the socket's subscribers (every event; a slow one lags, never blocks the daemon).
#[derive(Debug, Clone)]
pub struct Publisher {
    log: mpsc::UnboundedSender<DaemonEvent>,
    bus: broadcast::Sender<DaemonEvent>,
}

impl Publisher {
    pub fn new(log: mpsc::UnboundedSender<DaemonEvent>) -> Publisher {
        Publisher {
            log,
            bus: broadcast::channel(EVENT_BUFFER).0,
        }
    }

    pub fn emit(&self, e: DaemonEvent) {
        if e.logged() {
            let _ = self.log.send(e.clone());
        }
        // No subscriber is no error.
        let _ = self.bus.send(e);
    }

    pub fn subscribe(&self) -> broadcast::Receiver<DaemonEvent> {
        self.bus.subscribe()
    }
}

struct Dispatcher {
    paths: DaemonPaths,
    opts: Options,
    shared: Arc<Shared>,
    records: Records,
    active: BTreeMap<String, Active>,
    /// Merges under way: record id → (branch, target).
    merging: BTreeMap<String, (String, String)>,
    /// The shared queue (none: the JSONL store, one daemon).
    queue: Option<shared_queue::QueueSide>,
    /// Shared queue: when the cascade last found nothing to do with the records as they
    /// were then (no change since: the next pass skips it, and its lock across machines).
    cascade_idle: Option<Instant>,
    /// When held work was last looked for in its targets: a person's merge, looked for
    /// every [`HOLDS_EVERY`] (each look reads every spec and run record).
    holds_checked: Option<Instant>,
    shutting_down: bool,
    started_at: String,
    events: Publisher,
    reports: mpsc::UnboundedSender<Report>,
    merges: mpsc::UnboundedSender<MergeDone>,
    /// Shared queue: runs' ends whose work was put on the remote (off the loop), to record.
    ends: mpsc::UnboundedSender<EndPushed>,
    /// Time in scheduling passes and in recording what runs report, for the stop line.
    pass_time: Duration,
    passes: u64,
    /// Worktree removals under way: waited for before the daemon exits.
    removals: Vec<tokio::task::JoinHandle<()>>,
    record_time: Duration,
    launched: u64,
    /// What was last said about the repository's untrusted config (`warn_untrusted`).
    untrusted_said: Option<String>,
}

/// A merge's end: the record, how it ended, and (shared queue) what to record.
type MergeDone = (String, MergeEnd, Option<shared_queue::QueueMerge>);

/// A run's end on the shared queue once its work was pushed: its id, its `Finished`
/// report, and why its work is not on the remote (if so).
type EndPushed = (String, Report, Option<String>);

fn now_ms() -> i64 {
    crate::clock::now().as_millisecond()
}

/// Run the daemon until `shutdown` is cancelled or a client asks it to stop. What it does
/// goes to `log` as events (those a person reads, see [`DaemonEvent::logged`]), and every
/// event to the socket's subscribers.
pub async fn run(
    paths: DaemonPaths,
    opts: Options,
    log: mpsc::UnboundedSender<DaemonEvent>,
    shutdown: CancellationToken,
) -> Result<(), DaemonError> {
    paths
        .prepare_dir()
        .map_err(io(format!("creating {}", paths.dir.display())))?;
    let lock = acquire_lock(&paths).await?;
    let events = Publisher::new(log);
    let _notifier =
        crate::notify::start_for_daemon(&events, &paths.project, opts.config.as_deref());
    let repo = paths.project.clone();
    let note = |s: String| {
        events.emit(DaemonEvent::Note {
            repo: repo.clone(),
            warning: false,
            message: s,
        })
    };

    // What a dead daemon left running ends before anything resumes; then the ref locks its
    // killed git calls left (a fetch or push of a run's branch) are moved aside.
    end_leftover_groups(&paths, opts.grace, &note)?;
    if let Ok(facts) = crate::git::Git::new(&paths.project).facts() {
        for m in crate::git::stale_locks::clear_daemon_refs(&facts, std::time::SystemTime::now()) {
            note(format!(
                "moved a lock file a killed git left aside: {} (kept as {})",
                m.from.display(),
                m.to.display()
            ));
        }
    }

    let (socket, listener, started_at) = listen_and_publish(&paths)?;

    let registry = executor_registry(&paths.project);
    // A shared queue's client blocks on its own runtime: never on an async worker.
    let mut records = off_the_workers(|| Records::open(&paths.project))?.with_loop_types(registry);
    let worktrees = Worktrees::open(&paths.project, &opts.worktrees_dir)?;
    let queue = off_the_workers(|| {
        shared_queue::QueueSide::open(
            &mut records,
            &worktrees,
            opts.queue.clone(),
            &paths.dir,
            &note,
        )
    })
    .map_err(|e| DaemonError::Io {
        what: "joining the shared queue".into(),
        source: std::io::Error::other(e),
    })?;
    let shared = Arc::new(Shared {
        remote: queue.as_ref().map(|q| q.remote.clone()),
        paths: paths.clone(),
        worktrees,
        script_runner: opts.script_runner.clone(),
        default_agent: opts.default_agent.clone(),
        default_sandbox: opts.default_sandbox,
        config: opts.config.clone(),
        events: events.clone(),
    });
    let (rtx, rrx) = mpsc::unbounded_channel();
    let (mtx, mrx) = mpsc::unbounded_channel();
    let (etx, erx) = mpsc::unbounded_channel();
    let (itx, irx) = mpsc::channel::<(Request, oneshot::Sender<Response>)>(64);
    let server = tokio::spawn(serve(listener, itx, events.clone()));

    let mut d = Dispatcher {
        paths: paths.clone(),
        opts,
        shared,
        records,
        active: BTreeMap::new(),
        merging: BTreeMap::new(),
        queue,
        cascade_idle: None,
        holds_checked: None,
        shutting_down: false,
        started_at,
        events: events.clone(),
        reports: rtx,
        merges: mtx,
        ends: etx,
        pass_time: Duration::ZERO,
        passes: 0,
        removals: Vec::new(),
        record_time: Duration::ZERO,
        launched: 0,
        untrusted_said: None,
    };
    events.emit(DaemonEvent::DaemonStarted {
        repo: paths.project.clone(),
        pid: std::process::id(),
        max_loops: d.opts.limits.max_loops,
        socket: socket.clone(),
    });
    d.warn_untrusted();
    off_the_workers(|| d.resume_running())?;
    off_the_workers(|| d.remove_stale_worktrees());
    d.serve_until_stopped(rrx, mrx, erx, irx, shutdown).await;
    server.abort();
    for h in std::mem::take(&mut d.removals) {
        let _ = h.await;
    }
    note(d.timing_line());
    let _ = std::fs::remove_file(&socket);
    let _ = std::fs::remove_file(paths.info());
    events.emit(DaemonEvent::DaemonStopped {
        repo: paths.project.clone(),
    });
    // Subscribers write what they have (the stop included), then go. (A shared queue's
    // connection closes blocking.)
    off_the_workers(|| drop(d));
    let until = Instant::now() + Duration::from_secs(2);
    while events.bus.receiver_count() > 0 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(lock);
    Ok(())
}

impl Dispatcher {
    /// The dispatcher's loop: reports, merges, requests, the stop signal and the tick.
    async fn serve_until_stopped(
        &mut self,
        mut rrx: mpsc::UnboundedReceiver<Report>,
        mut mrx: mpsc::UnboundedReceiver<MergeDone>,
        mut erx: mpsc::UnboundedReceiver<EndPushed>,
        mut irx: mpsc::Receiver<(Request, oneshot::Sender<Response>)>,
        shutdown: CancellationToken,
    ) {
        let d = self;
        let mut tick = tokio::time::interval(d.opts.tick);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut dirty = true;
        let shared_queue = d.queue.is_some();
        let lease = d
            .queue
            .as_ref()
            .map(|q| q.opts.lease)
            .unwrap_or(d.opts.tick);
        let mut lease_tick = tokio::time::interval((lease / 3).max(Duration::from_millis(100)));
        lease_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The queue's notifications (another daemon or `submit` wrote) wake an idle daemon.
        let (wtx, mut wrx) = mpsc::unbounded_channel::<()>();
        if let Some(q) = &d.queue {
            shared_queue::listen(q.config.clone(), d.opts.tick, move |notified| {
                if notified {
                    wtx.send(()).is_ok()
                } else {
                    !wtx.is_closed()
                }
            });
        } else {
            drop(wtx);
        }
        loop {
            if d.shutting_down && d.active.is_empty() && d.merging.is_empty() {
                break;
            }
            if dirty && !d.shutting_down {
                let t = Instant::now();
                if let Err(e) = off_the_workers(|| d.pass()) {
                    d.note(format!("scheduling pass failed: {e}"));
                }
                d.pass_time += t.elapsed();
                d.passes += 1;
                dirty = false;
            }
            tokio::select! {
                Some(r) = rrx.recv() => {
                    let t = Instant::now();
                    off_the_workers(|| {
                        let mut batch = vec![r];
                        while let Ok(r) = rrx.try_recv() {
                            batch.push(r);
                        }
                        dirty |= d.on_reports(batch);
                    });
                    d.record_time += t.elapsed();
                }
                Some((id, report, unpushed)) = erx.recv() => {
                    let t = Instant::now();
                    off_the_workers(|| dirty |= d.record_end_shared(id, report, unpushed));
                    d.record_time += t.elapsed();
                }
                Some((id, end, commit)) = mrx.recv() => {
                    let t = Instant::now();
                    off_the_workers(|| d.on_merged(&id, end, commit));
                    d.record_time += t.elapsed();
                    dirty = true;
                }
                Some((req, reply)) = irx.recv() => {
                    // Only what can change the store or what is ready asks for a pass.
                    dirty |= matches!(req, Request::Wake | Request::Control { .. });
                    let resp = off_the_workers(|| d.on_request(req));
                    let _ = reply.send(resp);
                }
                _ = shutdown.cancelled(), if !d.shutting_down => {
                    d.begin_shutdown("a signal");
                }
                _ = tick.tick() => { dirty = true; }
                Some(()) = wrx.recv(), if shared_queue => {
                    while wrx.try_recv().is_ok() {}
                    dirty = true;
                }
                _ = lease_tick.tick(), if shared_queue => {
                    off_the_workers(|| d.renew_leases());
                }
            }
        }
    }
}

/// How often a pass looks for held work a person has taken into its target.
const HOLDS_EVERY: Duration = Duration::from_secs(2);

/// Run `f` (store reads and writes with their fsyncs, git) where it blocks no async worker:
/// the other tasks of this worker move to another thread meanwhile. On a single-threaded
/// runtime (tests) it simply runs.
fn off_the_workers<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

/// Take the daemon lock of the repository; a daemon already holding it is an error.
async fn acquire_lock(paths: &DaemonPaths) -> Result<std::fs::File, DaemonError> {
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(paths.lock())
        .map_err(io(format!("opening {}", paths.lock().display())))?;
    // A client probing whether a daemon runs holds the lock for an instant: try a while.
    let mut locked = lock.try_lock().is_ok();
    for _ in 0..40 {
        if locked {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
        locked = lock.try_lock().is_ok();
    }
    if !locked {
        let pid = paths
            .read_info()
            .map(|i| i.pid.to_string())
            .unwrap_or_else(|| "unknown".into());
        return Err(DaemonError::AlreadyRunning { pid });
    }
    Ok(lock)
}

/// A forced stop (a second Ctrl-C): every process tree the daemon's runs started is ended
/// now, without the grace period. What was ended, as a line; the caller exits after it.
/// Runs stay `running` in the store and resume on the next start.
pub fn force_stop(groups: &Path) -> String {
    match crate::agent::tracked::take_over(groups.to_path_buf(), Duration::ZERO) {
        Ok(left) => format!(
            "ended {} process tree(s) of {} run(s)",
            left.len(),
            left.iter()
                .map(|l| l.run_id.as_str())
                .collect::<HashSet<_>>()
                .len()
        ),
        Err(e) => format!("ending the agents' processes: {e}"),
    }
}

/// End the process groups a dead daemon left, with a line for each.
fn end_leftover_groups(
    paths: &DaemonPaths,
    grace: Duration,
    note: &dyn Fn(String),
) -> Result<(), DaemonError> {
    let groups = paths.groups();
    let left = crate::agent::tracked::take_over(groups, grace)
        .map_err(io("creating the process-group records"))?;
    for l in &left {
        note(format!(
            "ended {} leftover process(es) of run {} (token {}) from a daemon that stopped without cleaning up{}",
            l.processes,
            l.run_id,
            l.token,
            if l.survived {
                "; some survived KILL"
            } else {
                ""
            }
        ));
    }
    Ok(())
}

/// Bind the socket and write the daemon info; the socket path, its listener and the start
/// time.
fn listen_and_publish(paths: &DaemonPaths) -> Result<(PathBuf, UnixListener, String), DaemonError> {
    let socket = paths.prepare_socket().map_err(|e| DaemonError::Io {
        what: "preparing the socket".into(),
        source: std::io::Error::other(e.to_string()),
    })?;
    let listener =
        UnixListener::bind(&socket).map_err(io(format!("listening on {}", socket.display())))?;
    paths::restrict_socket(&socket).map_err(io(format!("securing {}", socket.display())))?;
    let started_at = crate::clock::now_rfc3339();
    let info = DaemonInfo {
        pid: std::process::id(),
        socket: socket.clone(),
        started_at: started_at.clone(),
        project: paths.project.clone(),
    };
    let info_json = serde_json::to_vec_pretty(&info).map_err(|e| DaemonError::Io {
        what: "writing daemon info".into(),
        source: std::io::Error::other(e),
    })?;
    crate::fsutil::write_atomic(&paths.info(), &info_json)
        .map_err(io(format!("writing {}", paths.info().display())))?;
    Ok((socket, listener, started_at))
}

impl Dispatcher {
    /// The stop line: runs launched and the time spent scheduling and recording.
    fn timing_line(&self) -> String {
        let per_run = |t: Duration| t.as_secs_f64() * 1000.0 / self.launched.max(1) as f64;
        format!(
            "dispatcher: {} runs launched; {} scheduling passes took {:.1} ms ({:.2} ms per run); recording their reports took {:.1} ms ({:.2} ms per run)",
            self.launched,
            self.passes,
            self.pass_time.as_secs_f64() * 1000.0,
            per_run(self.pass_time),
            self.record_time.as_secs_f64() * 1000.0,
            per_run(self.record_time)
        )
    }
}

fn executor_registry(project: &Path) -> Vec<String> {
    crate::loops::Registry::for_repo(project)
        .map(|r| r.entries().map(|e| e.name.clone()).collect())
        .unwrap_or_else(|_| {
            crate::loops::Registry::builtin()
                .entries()
                .map(|e| e.name.clone())
                .collect()
        })
}

type Requests = mpsc::Sender<(Request, oneshot::Sender<Response>)>;

/// Accept clients; each sends one request line and gets one reply line, or subscribes.
async fn serve(listener: UnixListener, tx: Requests, events: Publisher) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of file descriptors or similar: do not spin.
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let tx = tx.clone();
        let events = events.clone();
        tokio::spawn(async move {
            // Only the daemon's owner (or root) may talk to it, whatever the socket's mode.
            let owner = nix::unistd::geteuid().as_raw();
            let peer = stream.peer_cred().map(|c| c.uid()).unwrap_or(u32::MAX);
            let (r, mut w) = stream.into_split();
            if !ipc::peer_allowed(peer, owner) {
                let _ = write_line(&mut w, &ipc::refused_peer(peer, owner)).await;
                return;
            }
            let mut line = String::new();
            // A request is small; a client cannot make the daemon hold more than this.
            let mut reader = BufReader::new(r.take(64 * 1024));
            if reader.read_line(&mut line).await.is_err() {
                return;
            }
            let resp = match serde_json::from_str::<Request>(&line) {
                Ok(Request::Subscribe) => {
                    // Subscribed before the snapshot is taken: nothing falls in between.
                    let rx = events.subscribe();
                    drop(events);
                    return subscriber::stream_events(reader, w, rx, &tx).await;
                }
                Ok(req) => ask(&tx, req).await,
                Err(e) => Response::err(format!("bad request: {e}")),
            };
            let _ = write_line(&mut w, &resp).await;
        });
    }
}

/// Hand a request to the dispatcher and wait for its answer.
async fn ask(tx: &Requests, req: Request) -> Response {
    let (otx, orx) = oneshot::channel();
    if tx.send((req, otx)).await.is_err() {
        return Response::err("the daemon is stopping");
    }
    orx.await
        .unwrap_or_else(|_| Response::err("the daemon is stopping"))
}

async fn write_line(
    w: &mut tokio::net::unix::OwnedWriteHalf,
    v: &impl serde::Serialize,
) -> std::io::Result<()> {
    let mut out = serde_json::to_string(v).map_err(std::io::Error::other)?;
    out.push('\n');
    w.write_all(out.as_bytes()).await
}

impl Dispatcher {
    /// Say what the repository's untrusted config has that the runs go without: once, and
    /// again when that changes (the file is read at every launch, so a `taskdaemon trust`
    /// applies from the next run on).
    fn warn_untrusted(&mut self) {
        let said = crate::config::load_layers(&self.paths.project, self.opts.config.as_deref())
            .ok()
            .and_then(|l| l.untrusted)
            .map(|u| u.to_string());
        if said.is_some() && said != self.untrusted_said {
            self.emit(DaemonEvent::Note {
                repo: self.paths.project.clone(),
                warning: true,
                message: said.clone().unwrap_or_default(),
            });
        }
        self.untrusted_said = said;
    }

    fn note(&self, s: String) {
        self.emit(DaemonEvent::Note {
            repo: self.paths.project.clone(),
            warning: false,
            message: s,
        });
    }

    fn emit(&self, e: DaemonEvent) {
        self.events.emit(e);
    }

    fn subject(&self, id: &str) -> Subject {
        status::subject_of_id(&self.records, id, &self.paths.project)
    }

    /// The daemon's own state, for `daemon status` and snapshots.
    fn state(&self) -> status::DaemonState {
        status::DaemonState {
            pid: std::process::id(),
            started_at: self.started_at.clone(),
            project: self.paths.project.clone(),
            active: self.active.keys().cloned().collect(),
            merging: self.merging.keys().cloned().collect(),
            max_loops: self.opts.limits.max_loops,
            quota_governor: governor::global().status(),
            api_scheduler: serde_json::to_value(crate::agent::api::scheduler::status())
                .unwrap_or_default(),
        }
    }

    /// Runs still marked running belonged to a daemon that stopped (or crashed): they
    /// start first, whatever the limits, and resume from their saved state.
    fn resume_running(&mut self) -> Result<(), DaemonError> {
        if self.queue.is_some() {
            // Shared queue: runs marked running may be another machine's; those whose
            // lease expired are taken over by the passes.
            return Ok(());
        }
        let running =
            crate::scheduler::runs(&self.records, &[taskstore::Filter::eq("status", "running")])?;
        for run in running {
            self.note(format!(
                "resuming run {} ({}) after iteration {}",
                run.id,
                run.loop_type,
                run.iteration.saturating_sub(1)
            ));
            self.launch(run);
        }
        Ok(())
    }

    /// At start: the worktrees of work that finished go, their `.ralph/` kept first (a
    /// daemon stopped while it removed one left it, and its kept copy maybe half made).
    /// Shared queue: also work finished elsewhere (a run taken over while this daemon was
    /// dead), after what only they hold is kept.
    fn remove_stale_worktrees(&mut self) {
        let (names, lines) = match &self.queue {
            Some(q) => shared_queue::stale_worktrees(
                &self.records,
                &q.remote,
                &self.shared.worktrees,
                &self.opts.default_target,
            ),
            None => {
                let finished =
                    shared_queue::finished_worktrees(&self.records, &self.shared.worktrees, false);
                (finished.into_iter().map(|w| w.name).collect(), Vec::new())
            }
        };
        for l in lines {
            self.note(l);
        }
        if !names.is_empty() {
            self.note(format!(
                "{} stale worktree(s) of finished work: removing",
                names.len()
            ));
        }
        self.act(
            names
                .into_iter()
                .map(|name| Action::RemoveWorktree { name })
                .collect(),
        );
    }

    fn pass(&mut self) -> Result<(), DaemonError> {
        self.records.sync()?;
        if self.queue.is_some() {
            // Nothing changed since the cascade last had nothing to do: it would do nothing
            // again (looked at anyway every few seconds).
            let changed = !self.records.take_changes().is_empty();
            let idle = self
                .cascade_idle
                .is_some_and(|t| t.elapsed() < Duration::from_secs(5));
            if !changed && idle {
                return self.pass_shared();
            }
            self.cascade_idle = None;
        }
        // On the shared queue the cascade advances under one lock across machines, on the
        // records as they are once it is held.
        let cascade_lock = if self.queue.is_some() {
            let l = self.records.exclusive("cascade")?;
            self.records.sync()?;
            let notes = match self.queue.as_mut() {
                Some(q) => q.fetch_spec_documents(&self.records, &self.paths.project),
                None => Vec::new(),
            };
            for n in notes {
                self.note(n);
            }
            Some(l)
        } else {
            None
        };
        let step = cascade::advance(&mut self.records, now_ms(), &self.opts.default_target)?;
        for n in step.notes {
            self.note(n);
        }
        if self
            .holds_checked
            .is_none_or(|t| t.elapsed() >= HOLDS_EVERY)
        {
            self.holds_checked = Some(Instant::now());
            for n in status::clear_taken_holds(&mut self.records, &self.paths.project, now_ms())? {
                self.note(n);
            }
        }
        drop(cascade_lock);
        if self.queue.is_some() && step.actions.is_empty() && self.records.take_changes().is_empty()
        {
            self.cascade_idle = Some(Instant::now());
        }
        self.act(step.actions);
        if self.queue.is_some() {
            return self.pass_shared();
        }
        for run in self.pick_ready()? {
            self.launch(run);
        }
        Ok(())
    }

    /// The shared queue's half of a pass: runs whose holder died are taken over, then the
    /// ready runs within this machine's limits are claimed; only what this daemon got starts.
    fn pass_shared(&mut self) -> Result<(), DaemonError> {
        let room = self.opts.limits.max_loops.saturating_sub(self.active.len());
        let mut lines = Vec::new();
        let taken = match self.queue.as_mut() {
            Some(q) => q.take_over(&mut self.records, room).unwrap_or_else(|e| {
                lines.push(e);
                Vec::new()
            }),
            None => Vec::new(),
        };
        for run in taken {
            lines.push(format!(
                "taking over run {} ({}) after iteration {}: the lease of the daemon that ran it expired",
                run.id,
                run.loop_type,
                iterations_recorded(&run)
            ));
            self.launch_with(run, false, true);
        }
        let picked = self.pick_ready()?;
        let claimed = match self.queue.as_mut() {
            Some(q) => q.claim(&mut self.records, picked).unwrap_or_else(|e| {
                lines.push(e);
                Vec::new()
            }),
            None => Vec::new(),
        };
        let changed = !claimed.is_empty();
        for (run, requeued) in claimed {
            self.launch_with(run, requeued, false);
        }
        for l in lines {
            self.note(l);
        }
        // Who holds what, kept for a `status` asked while the queue does not answer.
        if let Some(q) = self.queue.as_mut()
            && (q.holders_due() || changed)
        {
            status::keep_holders(&self.records, &self.paths.queue_holders());
        }
        Ok(())
    }

    /// The lease tick of the shared queue: the writes kept while the database did not
    /// answer are made, the leases of the runs this daemon runs renewed (those whose lease
    /// is lost stop at once, writing nothing more), and the runs that stopped waiting for
    /// the database go on if their lease is still ours.
    fn renew_leases(&mut self) {
        let mut lines = match self.queue.as_mut() {
            Some(q) => q.finished_pushes(),
            None => return,
        };
        if let Some(q) = self.queue.as_mut() {
            lines.extend(q.replay(&mut self.records));
        }
        for w in lines {
            self.note(w);
        }
        let ids: Vec<String> = self
            .active
            .iter()
            .filter(|(_, a)| !a.lost && !a.held)
            .map(|(id, _)| id.clone())
            .collect();
        self.renew_for(&ids);
        self.take_up_waiting();
    }

    /// Runs that stopped because their lease could not be renewed: those still ours now
    /// that the database answers go on here.
    fn take_up_waiting(&mut self) {
        let Some(q) = self.queue.as_mut() else { return };
        if q.waiting.is_empty() {
            return;
        }
        let (ours, lines) = q.still_ours(&mut self.records);
        for l in lines {
            self.note(l);
        }
        for id in ours {
            if self.queue.as_ref().is_some_and(|q| q.journal.holds(&id)) {
                // Its record is not written yet: it waits for the next tick.
                if let Some(q) = self.queue.as_mut() {
                    q.waiting.insert(id);
                }
                continue;
            }
            match self.records.get(&id) {
                Ok(Some(AnyRecord::Run(run))) if run.status == RunStatus::Running => {
                    self.note(format!(
                        "run {id} goes on here: the queue answers again and its lease is still this daemon's"
                    ));
                    self.launch_with(run, false, false);
                }
                _ => {
                    if let Some(w) = self
                        .queue
                        .as_mut()
                        .and_then(|q| q.release(&mut self.records, &id))
                    {
                        self.note(w);
                    }
                }
            }
        }
    }

    /// Renew the leases of `ids`; stop at once those whose lease is lost, or could not be
    /// renewed for too long.
    fn renew_for(&mut self, ids: &[String]) {
        let Some(q) = self.queue.as_mut() else { return };
        let (stops, warnings) = q.renew(&mut self.records, ids);
        for w in warnings {
            self.note(w);
        }
        for (id, stop) in stops {
            if let Some(a) = self.active.get_mut(&id) {
                match stop {
                    shared_queue::Stop::Lost(_) => a.lost = true,
                    shared_queue::Stop::Unreachable(_) => a.held = true,
                }
                a.cancel.cancel();
            }
            self.events.emit(DaemonEvent::Note {
                repo: self.paths.project.clone(),
                warning: true,
                message: format!("run {id} stops here: {}", stop.why()),
            });
        }
    }

    /// The ready runs to start within this machine's limits.
    fn pick_ready(&self) -> Result<Vec<LoopRun>, DaemonError> {
        let running: BTreeMap<String, String> = self
            .active
            .iter()
            .map(|(id, a)| (id.clone(), a.agent.clone()))
            .collect();
        let default_kind = self.opts.default_agent_kind.clone();
        let agent_of = |agent: Option<&str>| {
            agent
                .filter(|a| !a.is_empty())
                .map(agent_kind)
                .unwrap_or_else(|| default_kind.clone())
        };
        Ok(pick(
            &self.records,
            &running,
            &self.opts.limits,
            &agent_of,
            &HashSet::new(),
        )?)
    }

    fn act(&mut self, actions: Vec<Action>) {
        for a in actions {
            match a {
                Action::Merge {
                    id,
                    worktree,
                    branch,
                    target,
                } => {
                    if self.merging.contains_key(&id) {
                        continue;
                    }
                    self.merging
                        .insert(id.clone(), (branch.clone(), target.clone()));
                    self.note(format!("merging {branch} into {target} ({id})"));
                    let shared = self.shared.clone();
                    let tx = self.merges.clone();
                    let title = self
                        .records
                        .get(&id)
                        .ok()
                        .flatten()
                        .map(|r| r.title().to_string())
                        .unwrap_or_default();
                    if let Some(q) = &self.queue {
                        self.merge_shared(q, id, worktree, branch, target, title);
                        continue;
                    }
                    tokio::task::spawn_blocking(move || {
                        let end = merge(&shared, &id, &worktree, &branch, &target, &title);
                        let _ = tx.send((id, end, None));
                    });
                }
                Action::RemoveWorktree { name } => {
                    let shared = self.shared.clone();
                    let events = self.events.clone();
                    let repo = self.paths.project.clone();
                    self.removals.retain(|h| !h.is_finished());
                    self.removals.push(tokio::task::spawn_blocking(move || {
                        let message = remove_worktree(&shared, &name);
                        events.emit(DaemonEvent::Note {
                            repo,
                            warning: false,
                            message,
                        });
                    }));
                }
            }
        }
    }

    /// A run is input (its record may come from another clone): its paths must resolve
    /// inside the repository, and its commands must be ones this machine made or the local
    /// user configured (see `store::trust`).
    fn admit(&self, run: &LoopRun) -> Result<(), String> {
        for (field, path) in AnyRecord::Run(run.clone()).paths() {
            crate::store::paths::inside(&path, &self.shared.paths.project)
                .map_err(|why| format!("not started: {field}: {why}"))?;
        }
        if self.queue.is_some() {
            // The shared queue is the team's: whoever may write records there is trusted as
            // the local user is (docs/multi-machine.md); paths are still checked above.
            return Ok(());
        }
        let user = crate::config::user_config_dir()
            .and_then(|d| crate::config::load_file(&d.join("config.yaml")).ok())
            .unwrap_or_default();
        let configured: Vec<String> = [self.opts.default_agent.clone(), user.agent, user.validate]
            .into_iter()
            .flatten()
            .collect();
        self.records
            .check_commands(run, &configured)
            .map_err(|e| e.to_string())?
    }

    fn launch(&mut self, run: LoopRun) {
        // Queued again by a person (resume/start), as opposed to relaunched after a stop.
        let requeued = run.status == RunStatus::Pending;
        self.launch_with(run, requeued, false);
    }

    /// Start `run`; `from_elsewhere`: it ran on another machine (or in an earlier daemon
    /// here) until its lease expired: it goes on at the record's counters.
    fn launch_with(&mut self, mut run: LoopRun, requeued: bool, from_elsewhere: bool) {
        if self.active.contains_key(&run.id) || self.shutting_down {
            return;
        }
        if let Err(why) = self.admit(&run) {
            self.note(format!("run {}: {why}", run.id));
            run.status = RunStatus::Blocked;
            run.note = Some(why);
            if let Err(e) = self.records.update(AnyRecord::Run(run.clone()), now_ms()) {
                self.note(format!("cannot block run {}: {e}", run.id));
            }
            if let Some(w) = self
                .queue
                .as_mut()
                .and_then(|q| q.release(&mut self.records, &run.id))
            {
                self.note(w);
            }
            return;
        }
        self.warn_untrusted();
        // Shared queue: its plan's documents, as the machine that ran its last step left
        // them, are taken from the remote before it starts (off this loop).
        let documents = self
            .queue
            .as_ref()
            .filter(|_| run.loop_type.is_cascade())
            .and_then(|_| shared_queue::plan_of(&self.records, &run))
            .map(|plan| executor::Documents {
                plan_id: plan.id,
                overwrite: matches!(run.loop_type, LoopKind::Plan | LoopKind::Spec),
            });
        let (worktree, start) = self.placement(&run);
        let agent = context::RunContext::get(&run.context.agent)
            .map(agent_kind)
            .unwrap_or_else(|| self.opts.default_agent_kind.clone());
        // Going on after a daemon stop: the note that said so is no longer true.
        if run.status != RunStatus::Running
            || run.note.as_deref() == Some(INTERRUPTED_NOTE)
            || control::is_pausing(run.note.as_deref())
        {
            run.status = RunStatus::Running;
            run.note = None;
            match self.records.update(AnyRecord::Run(run.clone()), now_ms()) {
                Ok(AnyRecord::Run(r)) => run = r,
                Ok(_) => {}
                Err(e) => {
                    self.note(format!("cannot start run {}: {e}", run.id));
                    return;
                }
            }
        }
        self.launched += 1;
        let (cancel, pause) = (CancellationToken::new(), CancellationToken::new());
        self.active.insert(
            run.id.clone(),
            Active {
                cancel: cancel.clone(),
                pause: pause.clone(),
                agent,
                stop_as: None,
                worktree: worktree.clone(),
                lost: false,
                held: false,
            },
        );
        let subject = status::subject_of(&self.records, &run, &self.paths.project);
        let l = Launch {
            run,
            worktree,
            start,
            requeued,
            subject,
            from_elsewhere,
            documents,
        };
        tokio::spawn(executor::execute(
            self.shared.clone(),
            l,
            cancel,
            pause,
            self.reports.clone(),
        ));
    }

    /// The worktree a run works in, and the branch a new one starts from.
    fn placement(&self, run: &LoopRun) -> (String, String) {
        let default = self.opts.default_target.clone();
        let plan_target = |plan_id: &str| match self.records.get(plan_id) {
            Ok(Some(AnyRecord::Plan(p))) => p.target_branch.unwrap_or_else(|| default.clone()),
            _ => default.clone(),
        };
        match run.loop_type {
            LoopKind::Phase => {
                let spec_id = context::RunContext::get(&run.context.spec_id)
                    .or(run.parent.as_deref())
                    .unwrap_or(&run.id)
                    .to_string();
                let start = match self.records.get(&spec_id) {
                    Ok(Some(AnyRecord::Spec(s))) => plan_target(&s.parent),
                    _ => default.clone(),
                };
                (spec_id, start)
            }
            LoopKind::Plan | LoopKind::Spec => {
                let plan_id = context::RunContext::get(&run.context.plan_id)
                    .or(run.parent.as_deref())
                    .unwrap_or(&run.id)
                    .to_string();
                let start = plan_target(&plan_id);
                (plan_id, start)
            }
            _ => (
                run.id.clone(),
                context::RunContext::get(&run.context.target_branch)
                    .unwrap_or(&default)
                    .to_string(),
            ),
        }
    }

    /// Apply runs' reports (all that were waiting) to their records. Whether the
    /// scheduler should look again.
    fn on_reports(&mut self, reports: Vec<Report>) -> bool {
        let now = now_ms();
        if self.queue.is_some() {
            let mut more = false;
            for r in reports {
                more |= self.on_report_shared(r, now);
            }
            return more;
        }
        self.apply_reports(reports, now)
    }

    /// [`Self::on_report`] on the shared queue: a run whose lease is lost writes nothing
    /// more; each finished iteration's branch is pushed and its log stored; a run's end is
    /// recorded only once its branch is on the remote, then its lease is released.
    fn on_report_shared(&mut self, r: Report, now: i64) -> bool {
        let run_id = match &r {
            Report::Started { run_id, .. }
            | Report::Iteration { run_id, .. }
            | Report::Finished { run_id, .. } => run_id.clone(),
        };
        // A report writes the record: first make sure the lease is still ours (the ticker
        // may not have run since another machine took the run over).
        if !matches!(r, Report::Started { .. })
            && self.active.get(&run_id).is_some_and(|a| !a.lost && !a.held)
        {
            self.renew_for(std::slice::from_ref(&run_id));
        }
        let Some((worktree, lost, held)) = self
            .active
            .get(&run_id)
            .map(|a| (a.worktree.clone(), a.lost, a.held))
        else {
            return matches!(r, Report::Finished { .. });
        };
        if held
            && let Report::Finished {
                result: Ok(Outcome::Interrupted),
                ..
            } = &r
        {
            self.active.remove(&run_id);
            if let Some(q) = self.queue.as_mut() {
                q.waiting.insert(run_id.clone());
            }
            self.note(format!(
                "run {run_id} stopped here, its record untouched: it goes on here once the queue answers, if its lease is still this daemon's"
            ));
            return true;
        }
        if lost {
            if matches!(r, Report::Finished { .. }) {
                self.active.remove(&run_id);
                self.note(format!(
                    "run {run_id} stopped here without writing anything more (its lease was lost)"
                ));
                return true;
            }
            return false;
        }
        let iteration_done = match &r {
            Report::Iteration {
                iteration,
                finished: Some(_),
                ..
            } => Some(*iteration),
            _ => None,
        };
        if matches!(r, Report::Finished { .. }) {
            self.push_end_then_record(run_id, worktree, r);
            return false;
        }
        let more = self.apply_report(r, now);
        if let Some(n) = iteration_done {
            self.after_iteration_shared(&run_id, &worktree, n);
        }
        more
    }

    /// A run's end on the shared queue: its work is put on the remote off the loop (a slow
    /// remote must not hold it), then [`Self::record_end_shared`] records the end. The run
    /// stays active (its lease renewed) meanwhile.
    fn push_end_then_record(&mut self, run_id: String, worktree: String, r: Report) {
        let Some(q) = self.queue.as_mut() else { return };
        let earlier = q.take_push(&worktree);
        let mark = q.take_mark(&worktree).filter(|m| m.run_id == run_id);
        let remote = q.remote.clone();
        let plan = plan_run_plan(&self.records, &run_id);
        let (project, tx) = (self.paths.project.clone(), self.ends.clone());
        let work = move || {
            let unpushed = shared_queue::push_at_end(
                &remote,
                &project,
                &worktree,
                plan.as_ref(),
                earlier,
                mark.as_ref(),
            );
            let _ = tx.send((run_id, r, unpushed));
        };
        match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn_blocking(work);
            }
            Err(_) => work(),
        }
    }

    /// Record a run's end once its work was pushed (`unpushed`: why it is not on the
    /// remote: a completed run is recorded blocked), then give up its lease. Nothing is
    /// written when the lease was lost meanwhile.
    fn record_end_shared(&mut self, run_id: String, r: Report, unpushed: Option<String>) -> bool {
        if self.active.get(&run_id).is_some_and(|a| !a.lost && !a.held) {
            self.renew_for(std::slice::from_ref(&run_id));
        }
        if self.active.get(&run_id).is_none_or(|a| a.lost) {
            self.active.remove(&run_id);
            self.note(format!(
                "run {run_id} stopped here without writing anything more (its lease was lost)"
            ));
            return true;
        }
        let mut r = r;
        if let Some(w) = unpushed
            && let Report::Finished { result, .. } = &mut r
            && matches!(result, Ok(Outcome::Complete { .. }))
        {
            *result = Ok(Outcome::Blocked { reason: w });
        }
        let more = self.apply_report(r, now_ms());
        if let Some(w) = self
            .queue
            .as_mut()
            .and_then(|q| q.release(&mut self.records, &run_id))
        {
            self.note(w);
        }
        more
    }

    /// An iteration finished: its branch to the remote (a failure is a warning: the next
    /// iteration pushes again), its log into the queue.
    fn after_iteration_shared(&mut self, run_id: &str, worktree: &str, iteration: u32) {
        if self.queue.is_none() {
            return;
        }
        // On a thread of its own: a slow remote must not hold this loop.
        let documents =
            plan_run_plan(&self.records, run_id).map(|plan| (self.paths.project.clone(), plan));
        let Some(q) = self.queue.as_mut() else { return };
        let mark = crate::git::remote::marks::Mark {
            run_id: run_id.to_string(),
            iteration,
        };
        let mut lines = q.push_in_background(worktree, documents, mark);
        let log = crate::workspace::Workspace::new(&self.shared.worktrees.path_for(worktree))
            .iteration_log(iteration);
        lines.extend(q.upload_log(&mut self.records, run_id, iteration, &log));
        for l in lines {
            self.events.emit(DaemonEvent::Note {
                repo: self.paths.project.clone(),
                warning: true,
                message: l,
            });
        }
    }

    /// A merge on the shared queue: one already recorded (by any daemon) is done; else
    /// under the lock of its target across machines, against the remote's target.
    fn merge_shared(
        &self,
        q: &shared_queue::QueueSide,
        id: String,
        worktree: String,
        branch: String,
        target: String,
        title: String,
    ) {
        let tx = self.merges.clone();
        if let Ok(Some(_)) = self.records.merged(&id) {
            let _ = tx.send((
                id,
                MergeEnd::Done {
                    note: None,
                    held: None,
                },
                Some(shared_queue::QueueMerge::AlreadyRecorded),
            ));
            return;
        }
        let queue = q.config.clone();
        let remote = q.remote.clone();
        let tries = q.opts.merge_tries;
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || {
            let message =
                format!("taskdaemon: merge {branch} ({title})\n\nTaskdaemon-Record: {id}");
            let (end, queued) = shared_queue::merge(
                &queue,
                &remote,
                &shared.worktrees,
                &worktree,
                &target,
                &message,
                tries,
            );
            let _ = tx.send((id, end, queued));
        });
    }

    fn on_merged(&mut self, id: &str, end: MergeEnd, queued: Option<shared_queue::QueueMerge>) {
        let (branch, target) = self.merging.remove(id).unwrap_or_default();
        // Shared queue: the merge is recorded once; only the daemon that records it says
        // "merged" (another one found it done).
        let ours = match &queued {
            None => true,
            Some(shared_queue::QueueMerge::ToRecord(c)) => {
                match self.records.record_merge(id, &target, c) {
                    Ok(true) => true,
                    Ok(false) => false,
                    Err(e) => {
                        self.note(format!("recording the merge of {id} in the queue: {e}"));
                        true
                    }
                }
            }
            Some(shared_queue::QueueMerge::AlreadyRecorded) => false,
        };
        let subject = self.subject(id);
        match &end {
            MergeEnd::Done { .. } if !ours => self.note(format!(
                "{id}: already in {target} (merged and recorded by another daemon)"
            )),
            MergeEnd::Done { note, held } => {
                self.emit(DaemonEvent::Merged {
                    subject: subject.clone(),
                    branch: branch.clone(),
                    target: target.clone(),
                    held_on: note
                        .as_ref()
                        .map(|_| crate::git::integrate::held_branch(&target)),
                });
                if let (Some(n), Some(h)) = (note, held) {
                    self.emit(DaemonEvent::MergeHeld {
                        subject,
                        branch,
                        target: target.clone(),
                        integration_branch: h.integration_branch.clone(),
                        checkout: h.checkout.clone(),
                        message: n.clone(),
                        action: take_held(&h.checkout, &h.integration_branch),
                    });
                }
            }
            MergeEnd::Conflict { note } => self.emit(DaemonEvent::MergeConflict {
                subject,
                target,
                message: note.clone(),
                action: format!("`taskdaemon resume {id}` once resolved"),
            }),
            MergeEnd::Failed { note } => self.emit(DaemonEvent::Failed {
                subject,
                reason: note.clone(),
                action: format!("`taskdaemon resume {id}` retries the merge"),
                facts: events::RunFacts::default(),
            }),
        }
        match cascade::merged(&mut self.records, id, end, now_ms()) {
            Ok(step) => {
                for n in step.notes {
                    self.note(n);
                }
                self.act(step.actions);
            }
            Err(e) => self.note(format!("recording the merge of {id}: {e}")),
        }
    }

    fn begin_shutdown(&mut self, why: &str) {
        self.shutting_down = true;
        self.emit(DaemonEvent::DaemonStopping {
            repo: self.paths.project.clone(),
            reason: why.to_string(),
            interrupted: self.active.len(),
        });
        for a in self.active.values() {
            a.cancel.cancel();
        }
    }

    fn on_request(&mut self, req: Request) -> Response {
        match req {
            Request::Ping => Response::ok("pong", serde_json::json!({"pid": std::process::id()})),
            Request::Wake => Response::ok("looking at the store", serde_json::Value::Null),
            Request::Status => Response::ok(
                format!("{} run(s) active", self.active.len()),
                serde_json::to_value(self.state()).unwrap_or_default(),
            ),
            Request::Snapshot | Request::Subscribe => {
                let _ = self.records.sync();
                let cache = self.paths.queue_holders();
                match status::snapshot(&self.records, Some(self.state()), Some(&cache)) {
                    Ok(s) => Response::ok("snapshot", serde_json::to_value(s).unwrap_or_default()),
                    Err(e) => Response::err(format!("reading the store: {e}")),
                }
            }
            Request::Stop => {
                let n = self.active.len();
                self.begin_shutdown("asked to");
                Response::ok(
                    format!("stopping: {n} run(s) interrupted; they resume on the next start"),
                    serde_json::Value::Null,
                )
            }
            Request::Control {
                action,
                reference,
                force,
            } => self.on_control(action, &reference, force),
        }
    }

    /// `start | pause | resume | cancel REF`: change the records, stop or start processes.
    /// `force`: a pause stops live runs at once rather than when their iteration ends.
    fn on_control(&mut self, action: control::Action, reference: &str, force: bool) -> Response {
        let _ = self.records.sync();
        let active: HashSet<String> = self.active.keys().cloned().collect();
        let scope = control::Scope {
            now: now_ms(),
            active: &|id| active.contains(id),
            force,
        };
        let applied = match control::apply(&mut self.records, action, reference, &scope) {
            Ok(applied) => applied,
            Err(e) => return Response::err(e.to_string()),
        };
        for (id, how) in &applied.stop {
            if let Some(act) = self.active.get_mut(id) {
                act.stop_as = Some(*how);
                act.cancel.cancel();
            }
        }
        for id in &applied.pause_after {
            if let Some(act) = self.active.get_mut(id) {
                act.stop_as = Some(StopAs::Paused);
                act.pause.cancel();
            }
        }
        for id in &applied.start_now {
            if let Ok(Some(AnyRecord::Run(run))) = self.records.get(id)
                && matches!(self.records.readiness(&AnyRecord::Run(run.clone())), Ok(r) if r.ready)
            {
                self.launch(run);
            }
        }
        for l in &applied.lines {
            self.note(l.clone());
        }
        // A live run that stops says so when its process ended.
        if let Ok(rec) = self.records.find(reference)
            && !applied.stop.iter().any(|(id, _)| id == rec.id())
            && !applied.pause_after.iter().any(|id| id == rec.id())
        {
            let subject = self.subject(rec.id());
            self.emit(match action {
                control::Action::Pause => DaemonEvent::Paused { subject },
                control::Action::Cancel => DaemonEvent::Cancelled { subject },
                control::Action::Start | control::Action::Resume => {
                    DaemonEvent::Resumed { subject }
                }
            });
        }
        Response::ok(applied.lines.join("\n"), serde_json::Value::Null)
    }
}

/// The note of a run a daemon stop interrupted (still `running`: it goes on at the next
/// start, which clears it).
const INTERRUPTED_NOTE: &str = "interrupted by a daemon stop; resumes on the next start";

/// A run's status and note once it ended with `result`.
fn end_status(
    result: &Result<Outcome, String>,
    stop_as: Option<StopAs>,
    run: &LoopRun,
) -> (RunStatus, Option<String>) {
    let standalone = !run.loop_type.is_cascade();
    match result {
        Ok(Outcome::Complete { .. }) if standalone => (RunStatus::Rebasing, None),
        Ok(Outcome::Complete { .. }) => (RunStatus::Complete, None),
        Ok(Outcome::Interrupted) => match stop_as {
            Some(StopAs::Paused) => (RunStatus::Paused, None),
            Some(StopAs::Stopped) => (
                RunStatus::Stopped,
                Some("cancelled by a person".to_string()),
            ),
            None => (RunStatus::Running, Some(INTERRUPTED_NOTE.to_string())),
        },
        Ok(Outcome::Blocked { reason }) => (RunStatus::Blocked, Some(format!("BLOCKED: {reason}"))),
        Ok(Outcome::Decide { question }) => (
            RunStatus::Blocked,
            Some(format!("DECIDE: {question} ({})", decide_action(run))),
        ),
        Ok(o) => (RunStatus::Failed, Some(failure_note(o, &run.id))),
        Err(e) => (RunStatus::Failed, Some(e.clone())),
    }
}

/// The commands that answer a run's DECIDE.
fn decide_action(run: &LoopRun) -> String {
    format!(
        "answer with `taskdaemon -C {} answer \"…\"`, then `taskdaemon resume {}`",
        run.worktree.as_deref().unwrap_or("<worktree>"),
        run.id
    )
}

/// The event that says how a run ended (`facts`: its figures then).
fn end_event(
    subject: Subject,
    result: &Result<Outcome, String>,
    stop_as: Option<StopAs>,
    run: &LoopRun,
    facts: events::RunFacts,
) -> DaemonEvent {
    let id = &run.id;
    let logs = format!("see `taskdaemon logs {id}`, then `taskdaemon resume {id}`");
    match result {
        Ok(o @ Outcome::Complete { .. }) => DaemonEvent::Complete {
            subject,
            reason: crate::notify::reason_of(o),
            facts,
            merge_follows: !run.loop_type.is_cascade(),
        },
        Ok(Outcome::Interrupted) => match stop_as {
            Some(StopAs::Paused) => DaemonEvent::Paused { subject },
            Some(StopAs::Stopped) => DaemonEvent::Cancelled { subject },
            None => DaemonEvent::Interrupted { subject },
        },
        Ok(Outcome::Blocked { reason }) => DaemonEvent::Blocked {
            subject,
            reason: reason.clone(),
            action: format!(
                "deal with it, then `taskdaemon -C {} unblock` and `taskdaemon resume {id}`",
                run.worktree.as_deref().unwrap_or("<worktree>")
            ),
            facts,
        },
        Ok(Outcome::Decide { question }) => DaemonEvent::Decide {
            subject,
            question: question.clone(),
            action: decide_action(run),
            facts,
        },
        Ok(Outcome::Stuck { iterations }) => DaemonEvent::Stuck {
            subject,
            iterations: *iterations,
            action: logs,
            facts,
        },
        Ok(o @ Outcome::LimitReached { .. }) => DaemonEvent::Failed {
            subject,
            reason: crate::notify::reason_of(o),
            action: format!("raise it in .taskdaemon/config.yaml, then `taskdaemon resume {id}`"),
            facts,
        },
        Ok(o) => DaemonEvent::Failed {
            subject,
            reason: crate::notify::reason_of(o),
            action: logs,
            facts,
        },
        Err(e) => DaemonEvent::Failed {
            subject,
            reason: e.clone(),
            action: logs,
            facts,
        },
    }
}

/// Why a run failed, and what a person can do, in the daemon's terms.
fn failure_note(o: &Outcome, id: &str) -> String {
    match o {
        Outcome::LimitReached { limit } => format!(
            "LIMIT: {} reached before completion; raise it in .taskdaemon/config.yaml, then `taskdaemon resume {id}`",
            limit.describe()
        ),
        Outcome::Stuck { iterations } => format!(
            "STUCK: no new commit in {iterations} consecutive iterations; see `taskdaemon logs {id}`, then `taskdaemon resume {id}`"
        ),
        Outcome::Failed { reason } => format!("FAILED: {reason}"),
        o => format!("{}: {}", o.label(), o.detail()),
    }
}

fn merge(
    shared: &Shared,
    id: &str,
    worktree: &str,
    branch: &str,
    target: &str,
    title: &str,
) -> MergeEnd {
    let message = format!("taskdaemon: merge {branch} ({title})\n\nTaskdaemon-Record: {id}");
    match merge_into(&shared.worktrees, branch, target, &message) {
        Ok(MergeResult::Merged { .. }) | Ok(MergeResult::UpToDate { .. }) => MergeEnd::Done {
            note: None,
            held: None,
        },
        Ok(MergeResult::Held {
            integration_branch,
            checked_out_at,
            ..
        }) => MergeEnd::Done {
            note: Some(format!(
                "held on {integration_branch}: {target} is checked out in {}, whose files taskdaemon never rewrites; take the work there with `{}`",
                checked_out_at.display(),
                take_held(&checked_out_at, &integration_branch)
            )),
            held: Some(cascade::Held {
                integration_branch,
                checkout: checked_out_at,
            }),
        },
        Ok(MergeResult::Conflict { files }) => MergeEnd::Conflict {
            note: format!(
                "merge conflict with {target} in: {}; resolve it in {}: `git merge {target}`, fix the files, commit; then `taskdaemon resume {id}`",
                files.join(", "),
                shared.worktrees.path_for(worktree).display()
            ),
        },
        Err(e) => MergeEnd::Failed {
            note: format!("merge failed: {e}"),
        },
    }
}

/// The command that takes a held merge: a merge in the checkout that has the target.
fn take_held(checkout: &Path, integration_branch: &str) -> String {
    format!(
        "git -C {} merge --no-edit {}",
        crate::shell::quote(&checkout.display().to_string()),
        crate::shell::quote(integration_branch)
    )
}

/// Keep the worktree's `.ralph/` (logs, state) in the daemon dir, then remove it and its
/// merged branch.
fn remove_worktree(shared: &Shared, name: &str) -> String {
    let path = shared.worktrees.path_for(name);
    let ralph = path.join(".ralph");
    let keep = shared.paths.kept_logs(name);
    // A real directory only: a link is removed with the worktree, its target untouched.
    let real_dir = std::fs::symlink_metadata(&ralph).is_ok_and(|m| m.is_dir());
    if real_dir && let Err(e) = move_dir(&ralph, &keep) {
        return format!(
            "worktree {} kept: saving its .ralph/ to {} failed: {e}",
            path.display(),
            keep.display()
        );
    }
    match shared.worktrees.remove(name, true, true) {
        Ok(()) => format!(
            "worktree {} removed (its .ralph/ is kept in {})",
            path.display(),
            keep.display()
        ),
        Err(e) => format!("worktree {} kept: {e}", path.display()),
    }
}

/// Move `from` to `to`: renamed when `to` does not exist yet and both are on one file
/// system (one step: the directory is in one place or the other at any moment), copied
/// into `to` otherwise (the worktree's removal then deletes `from`).
fn move_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)?;
    }
    if std::fs::symlink_metadata(to).is_err() && std::fs::rename(from, to).is_ok() {
        return Ok(());
    }
    copy_dir(from, to)
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let ty = e.file_type()?;
        let dest = to.join(e.file_name());
        if ty.is_dir() {
            copy_dir(&e.path(), &dest)?;
        } else if ty.is_file() {
            std::fs::copy(e.path(), dest)?;
        }
    }
    Ok(())
}

/// The plan whose documents run `run_id` writes (outside git): a plan or spec run's.
fn plan_run_plan(records: &Records, run_id: &str) -> Option<crate::store::Plan> {
    match records.get(run_id) {
        Ok(Some(AnyRecord::Run(run)))
            if matches!(run.loop_type, LoopKind::Plan | LoopKind::Spec) =>
        {
            shared_queue::plan_of(records, &run)
        }
        _ => None,
    }
}
