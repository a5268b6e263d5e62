//! Domain records on taskstore: Plan, Spec and LoopRun (spec 3 §6), their ids and
//! resolution (§7), file paths (§8) and dependency rules. (The StateManager actor of §3 is
//! the daemon's dispatcher, which owns the store; see `daemon`.)
//!
//! The store lives in `<project>/.taskdaemon/store/` (`plans.jsonl`, `specs.jsonl`,
//! `runs.jsonl`), tracked in git. Every change takes the store-wide lock, catches up with
//! the files, checks the rules (parent and deps exist, no dependency cycle, unique hex),
//! then writes: two processes cannot both pass the checks on a stale view.

pub mod backend;
pub mod check;
pub mod ids;
mod kind;
pub mod migrate;
pub mod migrate_tables;
pub mod paths;
pub mod pg;
pub mod pg_conn;
pub mod pg_schema;
pub mod queue;
pub mod records;
pub mod trust;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use taskstore::{Change, Filter, Op, Record, Store, StoreOptions};

pub use backend::{Backend, WriteLock};
pub use pg_conn::{QueueConfig, QueueError};
pub use queue::{Holder, Lease};

use ids::IdSource;
pub use ids::Resolution;
pub use kind::LoopKind;
pub use records::{
    AnyRecord, Kind, LoopRun, Phase, Plan, PlanStatus, RunStatus, Spec, SpecStatus, TITLE_MAX,
};

/// Where a project's store lives.
pub fn store_dir(project: &Path) -> PathBuf {
    project.join(".taskdaemon").join("store")
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Store(#[from] taskstore::Error),
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error("no record matches \"{reference}\"{}\n  hint: `taskdaemon list` shows every id; a reference can be the id, its hex, or part of its name",
        if nearest.is_empty() { String::new() } else { format!("; nearest: {}", nearest.join(", ")) })]
    NotFound {
        reference: String,
        nearest: Vec<String>,
    },
    #[error("ambiguous reference \"{reference}\" matches:\n{}\n  hint: use more of the id, or its hex",
        candidates.iter().map(|c| format!("  - {c}")).collect::<Vec<_>>().join("\n"))]
    Ambiguous {
        reference: String,
        candidates: Vec<String>,
    },
    #[error("{field}: {reason}\n  hint: {hint}")]
    Invalid {
        field: String,
        reason: String,
        hint: String,
    },
    #[error(
        "{field}: {id} does not exist\n  hint: create it first, or check the id with `taskdaemon list`"
    )]
    Missing { field: String, id: String },
    #[error("deps would make a cycle: {}\n  hint: a record cannot wait, directly or through others, for itself; drop one of these deps",
        cycle.join(" -> "))]
    Cycle { cycle: Vec<String> },
    #[error("{id} is still referenced by {}\n  hint: change or delete those first", by.join(", "))]
    InUse { id: String, by: Vec<String> },
    #[error(
        "{id} was changed by someone else since it was read (updated-at {read}, now {stored}); nothing was written\n  hint: read it again and redo the change"
    )]
    Changed { id: String, read: i64, stored: i64 },
    #[error("the store's actor has stopped")]
    Stopped,
}

impl StoreError {
    /// The shared queue's server could not be reached: the write may be made later.
    pub fn is_connection_lost(&self) -> bool {
        matches!(self, StoreError::Queue(q) if q.is_connection_lost())
    }

    /// Whether the person can fix it (bad input, a corrupt or oversized file) rather than
    /// an internal failure (I/O).
    pub fn is_user_fault(&self) -> bool {
        !matches!(
            self,
            StoreError::Store(taskstore::Error::Io { .. } | taskstore::Error::Encode(_))
                | StoreError::Stopped
        ) && !matches!(self, StoreError::Queue(q) if !q.is_user_fault())
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// A new plan. Ids and timestamps are assigned on creation.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct NewPlan {
    pub title: String,
    /// Absolute; default `<project>/.taskdaemon/plans/<id>.md`.
    #[serde(default)]
    pub file: Option<String>,
    #[serde(default)]
    pub parent: Option<String>,
    #[serde(default)]
    pub deps: Vec<String>,
    #[serde(default)]
    pub status: Option<PlanStatus>,
    #[serde(default)]
    pub target_branch: Option<String>,
    /// The agent of the spec run the cascade queues for it.
    #[serde(default)]
    pub agent: Option<String>,
    /// The priority of that spec run.
    #[serde(default)]
    pub priority: i64,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct NewSpec {
    pub title: String,
    pub parent: String,
    /// Absolute; default `<project>/.taskdaemon/specs/<id>.md`.
    #[serde(default)]
    pub file: Option<String>,
    #[serde(default)]
    pub deps: Vec<String>,
    #[serde(default)]
    pub phases: Vec<Phase>,
    #[serde(default)]
    pub status: Option<SpecStatus>,
    #[serde(default)]
    pub priority: i64,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct NewRun {
    pub loop_type: String,
    /// Words for the id's slug; default the loop type.
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub parent: Option<String>,
    #[serde(default)]
    pub deps: Vec<String>,
    #[serde(default)]
    pub status: Option<RunStatus>,
    #[serde(default)]
    pub worktree: Option<String>,
    #[serde(default)]
    pub iteration: Option<u32>,
    #[serde(default)]
    pub progress: String,
    #[serde(default)]
    pub context: Box<crate::scheduler::context::RunContext>,
    #[serde(default)]
    pub priority: i64,
}

#[derive(Debug, Clone)]
pub enum NewRecord {
    Plan(NewPlan),
    Spec(NewSpec),
    Run(NewRun),
}

impl NewRecord {
    pub fn kind(&self) -> Kind {
        match self {
            NewRecord::Plan(_) => Kind::Plan,
            NewRecord::Spec(_) => Kind::Spec,
            NewRecord::Run(_) => Kind::Run,
        }
    }

    /// Read the fields of a new record of `kind` from JSON (the actor's generic Create).
    pub fn from_json(kind: Kind, v: Value) -> Result<NewRecord> {
        let bad = |e: serde_json::Error| StoreError::Invalid {
            field: kind.tag().into(),
            reason: e.to_string(),
            hint: "fields are kebab-case; id and timestamps are assigned by the store".into(),
        };
        Ok(match kind {
            Kind::Plan => NewRecord::Plan(serde_json::from_value(v).map_err(bad)?),
            Kind::Spec => NewRecord::Spec(serde_json::from_value(v).map_err(bad)?),
            Kind::Run => NewRecord::Run(serde_json::from_value(v).map_err(bad)?),
        })
    }
}

/// Whether a record may start: every dep complete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Readiness {
    pub ready: bool,
    /// Deps not complete yet, with their status (`missing` if gone).
    pub waiting: Vec<(String, String)>,
}

/// The domain store.
pub struct Records {
    store: Backend,
    project: PathBuf,
    loop_types: Option<BTreeSet<String>>,
    changes: Vec<Change>,
}

impl std::fmt::Debug for Records {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Records")
            .field("project", &self.project)
            .finish()
    }
}

impl Records {
    pub fn open(project: &Path) -> Result<Records> {
        Records::open_with(project, StoreOptions::default())
    }

    /// The project's records: in PostgreSQL when a queue is configured (`queue:` or
    /// `TASKDAEMON_QUEUE`), else in the JSONL files (no connection is ever opened then).
    pub fn open_with(project: &Path, opts: StoreOptions) -> Result<Records> {
        match QueueConfig::resolve(project)? {
            Some(q) => Records::open_queue(project, q),
            None => Records::open_jsonl(project, opts),
        }
    }

    fn defs() -> Vec<taskstore::CollectionDef> {
        vec![
            Plan::collection_def(),
            Spec::collection_def(),
            LoopRun::collection_def(),
        ]
    }

    /// The JSONL store of the project, whatever the config says.
    pub fn open_jsonl(project: &Path, opts: StoreOptions) -> Result<Records> {
        Ok(Records::with_backend(
            project,
            Backend::Jsonl(Store::open(store_dir(project), Records::defs(), opts)?),
        ))
    }

    /// The project's records in the shared queue `queue`.
    pub fn open_queue(project: &Path, queue: QueueConfig) -> Result<Records> {
        Ok(Records::with_backend(
            project,
            Backend::Postgres(pg::PgStore::open(queue, Records::defs())?),
        ))
    }

    fn with_backend(project: &Path, store: Backend) -> Records {
        Records {
            store,
            project: project.to_path_buf(),
            loop_types: None,
            changes: Vec::new(),
        }
    }

    /// The shared queue the records live in (none: the JSONL store).
    pub fn queue(&self) -> Option<&QueueConfig> {
        self.store.queue()
    }

    /// Only these loop types are accepted for new runs (the loop registry's names).
    pub fn with_loop_types(mut self, names: impl IntoIterator<Item = String>) -> Records {
        self.loop_types = Some(names.into_iter().collect());
        self
    }

    pub fn store(&self) -> &Backend {
        &self.store
    }

    pub fn store_mut(&mut self) -> &mut Backend {
        &mut self.store
    }

    pub fn project(&self) -> &Path {
        &self.project
    }

    /// Changes seen since the last call (ours, and other processes' found on the way).
    pub fn take_changes(&mut self) -> Vec<Change> {
        std::mem::take(&mut self.changes)
    }

    // ---- reading ----

    /// A live record by full id.
    pub fn get(&self, id: &str) -> Result<Option<AnyRecord>> {
        let kinds: Vec<Kind> = match ids::kind_of(id) {
            Some(k) => vec![k],
            None => Kind::ALL.to_vec(),
        };
        for k in kinds {
            let found = match k {
                Kind::Plan => self.store.get_as::<Plan>(id)?.map(AnyRecord::Plan),
                Kind::Spec => self.store.get_as::<Spec>(id)?.map(AnyRecord::Spec),
                Kind::Run => self.store.get_as::<LoopRun>(id)?.map(AnyRecord::Run),
            };
            if let Some(r) = found {
                return Ok(Some(self.localized(r)));
            }
        }
        Ok(None)
    }

    fn is_live(&self, id: &str) -> bool {
        let kinds: &[Kind] = match ids::kind_of(id) {
            Some(Kind::Plan) => &[Kind::Plan],
            Some(Kind::Spec) => &[Kind::Spec],
            Some(Kind::Run) => &[Kind::Run],
            None => &Kind::ALL,
        };
        kinds
            .iter()
            .any(|k| matches!(self.store.status_of(k.collection(), id), Ok(Some(false))))
    }

    /// How a reference (id, hex, slug prefix or part) resolves, without failing.
    pub fn resolution(&self, reference: &str) -> Resolution {
        ids::resolve(reference, self)
    }

    /// The id a reference names; not found and ambiguous are errors that list ids (the
    /// candidates oldest first; at most 50, then how many more).
    pub fn resolve(&self, reference: &str) -> Result<String> {
        match self.resolution(reference) {
            Resolution::Found(id) => Ok(id),
            Resolution::Ambiguous(mut candidates) => {
                const SHOWN: usize = 50;
                let more = candidates.len().saturating_sub(SHOWN);
                if more == 0 {
                    let created = |id: &str| self.get(id).ok().flatten().map(|r| r.created_at());
                    candidates.sort_by_cached_key(|id| (created(id), id.clone()));
                } else {
                    candidates.truncate(SHOWN);
                    candidates.push(format!("… and {more} more"));
                }
                Err(StoreError::Ambiguous {
                    reference: reference.to_string(),
                    candidates,
                })
            }
            Resolution::NotFound { nearest } => Err(StoreError::NotFound {
                reference: reference.to_string(),
                nearest,
            }),
        }
    }

    /// Resolve and fetch.
    pub fn find(&self, reference: &str) -> Result<AnyRecord> {
        let id = self.resolve(reference)?;
        self.get(&id)?.ok_or(StoreError::NotFound {
            reference: reference.to_string(),
            nearest: vec![],
        })
    }

    /// Live records of a kind passing the filters, oldest first (created-at, then id).
    pub fn list(&self, kind: Kind, filters: &[Filter]) -> Result<Vec<AnyRecord>> {
        let mut out: Vec<AnyRecord> = match kind {
            Kind::Plan => self
                .store
                .list_as::<Plan>(filters)?
                .into_iter()
                .map(AnyRecord::Plan)
                .collect(),
            Kind::Spec => self
                .store
                .list_as::<Spec>(filters)?
                .into_iter()
                .map(AnyRecord::Spec)
                .collect(),
            Kind::Run => self
                .store
                .list_as::<LoopRun>(filters)?
                .into_iter()
                .map(AnyRecord::Run)
                .collect(),
        };
        out.sort_by(|a, b| {
            a.created_at()
                .cmp(&b.created_at())
                .then_with(|| a.id().cmp(b.id()))
        });
        Ok(out.into_iter().map(|r| self.localized(r)).collect())
    }

    /// Every dep complete?
    pub fn readiness(&self, record: &AnyRecord) -> Result<Readiness> {
        let mut waiting = Vec::new();
        for d in record.deps() {
            match self.get(d)? {
                Some(r) if r.is_complete() => {}
                Some(r) => waiting.push((d.clone(), r.status().to_string())),
                None => waiting.push((d.clone(), "missing".into())),
            }
        }
        Ok(Readiness {
            ready: waiting.is_empty(),
            waiting,
        })
    }

    pub fn is_ready(&self, record: &AnyRecord) -> Result<bool> {
        Ok(self.readiness(record)?.ready)
    }

    /// Live records whose parent or deps name `id`.
    pub fn referencing(&self, id: &str) -> Result<Vec<String>> {
        let mut by = BTreeSet::new();
        for k in Kind::ALL {
            for field in ["parent", "deps"] {
                let f = if field == "parent" {
                    Filter::eq(field, id)
                } else {
                    Filter::contains(field, id)
                };
                for (rid, _) in self.store.list_raw(k.collection(), &[f])? {
                    by.insert(rid.to_string());
                }
            }
        }
        Ok(by.into_iter().collect())
    }

    // ---- writing ----

    fn catch_up(&mut self) -> Result<()> {
        let ch = self.store.sync()?;
        self.changes.extend(ch);
        Ok(())
    }

    /// Sync with the files (other processes, git).
    pub fn sync(&mut self) -> Result<()> {
        self.catch_up()
    }

    fn hex_taken(&self, hex: &str) -> bool {
        let prefix = format!("{hex}-");
        Kind::ALL.iter().any(|k| {
            self.store
                .ids_with_prefix(k.collection(), &prefix)
                .is_ok_and(|v| !v.is_empty())
        })
    }

    pub fn create(&mut self, new: NewRecord, now_ms: i64) -> Result<AnyRecord> {
        let mut made = self.create_batch(vec![new], now_ms)?;
        made.pop().ok_or_else(|| StoreError::Invalid {
            field: "record".into(),
            reason: "nothing was created".into(),
            hint: "report this as a bug".into(),
        })
    }

    pub fn create_plan(&mut self, new: NewPlan, now_ms: i64) -> Result<Plan> {
        match self.create(NewRecord::Plan(new), now_ms)? {
            AnyRecord::Plan(p) => Ok(p),
            _ => unreachable!("a plan was asked for"),
        }
    }

    pub fn create_spec(&mut self, new: NewSpec, now_ms: i64) -> Result<Spec> {
        match self.create(NewRecord::Spec(new), now_ms)? {
            AnyRecord::Spec(s) => Ok(s),
            _ => unreachable!("a spec was asked for"),
        }
    }

    pub fn create_run(&mut self, new: NewRun, now_ms: i64) -> Result<LoopRun> {
        match self.create(NewRecord::Run(new), now_ms)? {
            AnyRecord::Run(r) => Ok(r),
            _ => unreachable!("a run was asked for"),
        }
    }

    /// Create records, checked together (a later one may depend on an earlier one) and
    /// written with one fsync per collection. All are checked before anything is written.
    pub fn create_batch(&mut self, news: Vec<NewRecord>, now_ms: i64) -> Result<Vec<AnyRecord>> {
        let lock = self.store.lock()?;
        self.catch_up()?;
        let mut made: Vec<AnyRecord> = Vec::with_capacity(news.len());
        let mut new_hex: HashSet<String> = HashSet::new();
        let mut new_ids: BTreeMap<String, usize> = BTreeMap::new();
        for new in news {
            let record = self.build(new, now_ms, &new_hex)?;
            if let Some((hex, _, _)) = ids::split(record.id()) {
                new_hex.insert(hex.to_string());
            }
            record.validate()?;
            let known = |id: &str| new_ids.contains_key(id) || self.is_live(id);
            if let Some(p) = record.parent()
                && !known(p)
            {
                return Err(StoreError::Missing {
                    field: "parent".into(),
                    id: p.to_string(),
                });
            }
            for d in record.deps() {
                if !known(d) {
                    return Err(StoreError::Missing {
                        field: "deps".into(),
                        id: d.clone(),
                    });
                }
            }
            // A new id is in nobody's deps yet, so it cannot close a cycle; deps are
            // still checked for the graph (a self-dependency is refused in validate).
            new_ids.insert(record.id().to_string(), made.len());
            made.push(record);
        }
        for r in &made {
            self.check_paths_inside(r, None)?;
        }
        let mut by_kind: BTreeMap<Kind, Vec<Op>> = BTreeMap::new();
        for r in &made {
            let r = &self.portable(r.clone());
            let op = match r {
                AnyRecord::Plan(p) => Op::create(p),
                AnyRecord::Spec(s) => Op::create(s),
                AnyRecord::Run(l) => Op::create(l),
            }?;
            by_kind.entry(r.kind()).or_default().push(op);
        }
        // Made on this machine: remembered outside git (see `trust`).
        self.mark_local(made.iter().map(AnyRecord::id))?;
        for (kind, ops) in by_kind {
            let ch = self.store.apply(kind.collection(), ops)?;
            self.changes.extend(ch);
        }
        lock.commit()?;
        Ok(made)
    }

    fn build(&self, new: NewRecord, now: i64, batch_hex: &HashSet<String>) -> Result<AnyRecord> {
        let kind = new.kind();
        let title = match &new {
            NewRecord::Plan(p) => p.title.clone(),
            NewRecord::Spec(s) => s.title.clone(),
            NewRecord::Run(r) => r.name.clone().unwrap_or_else(|| r.loop_type.clone()),
        };
        if kind != Kind::Run {
            records::check_title(&title)?;
        }
        let id = ids::new_id(kind, &title, &|h| {
            batch_hex.contains(h) || self.hex_taken(h)
        });
        let default_file = |dir: &str| {
            self.project
                .join(".taskdaemon")
                .join(dir)
                .join(format!("{id}.md"))
                .display()
                .to_string()
        };
        let dedup = |mut v: Vec<String>| {
            let mut seen = HashSet::new();
            v.retain(|d| seen.insert(d.clone()));
            v
        };
        Ok(match new {
            NewRecord::Plan(p) => AnyRecord::Plan(Plan {
                parent: p.parent,
                deps: dedup(p.deps),
                title: p.title,
                status: p.status.unwrap_or(PlanStatus::Draft),
                file: p.file.unwrap_or_else(|| default_file("plans")),
                target_branch: p.target_branch,
                agent: p.agent,
                priority: p.priority,
                note: None,
                created_at: now,
                updated_at: now,
                id,
            }),
            NewRecord::Spec(s) => AnyRecord::Spec(Spec {
                parent: s.parent,
                title: s.title,
                status: s.status.unwrap_or(SpecStatus::Pending),
                deps: dedup(s.deps),
                file: s.file.unwrap_or_else(|| default_file("specs")),
                phases: s.phases,
                priority: s.priority,
                note: None,
                created_at: now,
                updated_at: now,
                id,
            }),
            NewRecord::Run(r) => {
                if let Some(known) = &self.loop_types
                    && !known.contains(&r.loop_type)
                {
                    return Err(StoreError::Invalid {
                        field: "loop-type".into(),
                        reason: format!("no loop type named `{}`", r.loop_type),
                        hint: format!(
                            "known: {} (`taskdaemon loops`)",
                            known.iter().cloned().collect::<Vec<_>>().join(", ")
                        ),
                    });
                }
                AnyRecord::Run(LoopRun {
                    loop_type: LoopKind::parse(&r.loop_type),
                    parent: r.parent,
                    deps: dedup(r.deps),
                    status: r.status.unwrap_or(RunStatus::Pending),
                    worktree: r.worktree,
                    iteration: r.iteration.unwrap_or(1),
                    progress: r.progress,
                    context: r.context,
                    elapsed_ms: 0,
                    cost_usd: None,
                    priority: r.priority,
                    note: None,
                    created_at: now,
                    updated_at: now,
                    id,
                })
            }
        })
    }

    /// Store a new version of an existing record: checked like a new one, plus the
    /// dependency graph (its deps must not lead back to it). `updated-at` becomes
    /// `max(now, stored)`; `id` and `created-at` cannot change. The record must have been
    /// read from the current version: if the stored one is newer than the `updated-at` it
    /// carries, someone else changed it meanwhile and the update is refused rather than
    /// silently undoing their change (within one millisecond this cannot be told).
    pub fn update(&mut self, record: AnyRecord, now_ms: i64) -> Result<AnyRecord> {
        let lock = self.store.lock()?;
        self.catch_up()?;
        let record = self.checked_update(record, now_ms)?;
        let written = self.portable(record.clone());
        let ch = match &written {
            AnyRecord::Plan(p) => self.store.update_record(p),
            AnyRecord::Spec(s) => self.store.update_record(s),
            AnyRecord::Run(r) => self.store.update_record(r),
        }?;
        self.changes.extend(ch);
        lock.commit()?;
        Ok(record)
    }

    /// [`Self::update`] of several records at once: each checked as `update` checks it,
    /// then written with one durable write per collection (JSONL: one append and one
    /// fsync; Postgres: one transaction). All or nothing: when one is refused, none is
    /// written. An id may appear once.
    pub fn update_batch(&mut self, records: Vec<AnyRecord>, now_ms: i64) -> Result<Vec<AnyRecord>> {
        let mut seen = HashSet::new();
        if let Some(r) = records.iter().find(|r| !seen.insert(r.id().to_string())) {
            return Err(StoreError::Invalid {
                field: "id".into(),
                reason: format!("{} appears twice in one batch", r.id()),
                hint: "change a record once per batch".into(),
            });
        }
        let lock = self.store.lock()?;
        self.catch_up()?;
        let mut checked = Vec::with_capacity(records.len());
        let mut ops: BTreeMap<&'static str, Vec<Op>> = BTreeMap::new();
        for record in records {
            let record = self.checked_update(record, now_ms)?;
            let (collection, op) = match self.portable(record.clone()) {
                AnyRecord::Plan(p) => (Plan::COLLECTION, Op::update(&p)),
                AnyRecord::Spec(s) => (Spec::COLLECTION, Op::update(&s)),
                AnyRecord::Run(r) => (LoopRun::COLLECTION, Op::update(&r)),
            };
            ops.entry(collection).or_default().push(op?);
            checked.push(record);
        }
        for (collection, ops) in ops {
            let ch = self.store.apply(collection, ops)?;
            self.changes.extend(ch);
        }
        lock.commit()?;
        Ok(checked)
    }

    /// `record` checked against the stored version (under the write lock, caught up) and
    /// stamped, ready to be written.
    fn checked_update(&self, mut record: AnyRecord, now_ms: i64) -> Result<AnyRecord> {
        let stored = self.get(record.id())?.ok_or_else(|| StoreError::Missing {
            field: "id".into(),
            id: record.id().to_string(),
        })?;
        if stored.kind() != record.kind() || stored.created_at() != record.created_at() {
            return Err(StoreError::Invalid {
                field: "created-at".into(),
                reason: "the kind and created-at of a record cannot change".into(),
                hint: "start from the stored record (`taskdaemon show --json`)".into(),
            });
        }
        if record.updated_at() < stored.updated_at() {
            return Err(StoreError::Changed {
                id: record.id().to_string(),
                read: record.updated_at(),
                stored: stored.updated_at(),
            });
        }
        let mut seen = HashSet::new();
        record.deps_mut().retain(|d| seen.insert(d.clone()));
        record.set_updated_at(now_ms.max(stored.updated_at()));
        record.validate()?;
        if let Some(p) = record.parent()
            && stored.parent() != Some(p)
            && !self.is_live(p)
        {
            return Err(StoreError::Missing {
                field: "parent".into(),
                id: p.to_string(),
            });
        }
        for d in record.deps() {
            if !self.is_live(d) {
                return Err(StoreError::Missing {
                    field: "deps".into(),
                    id: d.clone(),
                });
            }
        }
        if let Some(cycle) = self.cycle_through(record.id(), record.deps())? {
            return Err(StoreError::Cycle { cycle });
        }
        self.check_paths_inside(&record, Some(&stored))?;
        Ok(record)
    }

    /// The in-memory form of a stored record: relative paths made absolute.
    fn localized(&self, mut r: AnyRecord) -> AnyRecord {
        r.map_paths(|p| paths::local(p, &self.project));
        r
    }

    /// The stored form: paths inside the repository relative to its top level.
    fn portable(&self, mut r: AnyRecord) -> AnyRecord {
        r.map_paths(|p| paths::portable(p, &self.project));
        r
    }

    /// Every path of `record` that is new (not in `before`) must resolve inside the
    /// repository. Unchanged old values are left to `store check` and to the daemon, which
    /// refuse to use them, so a status change of such a record still saves.
    fn check_paths_inside(&self, record: &AnyRecord, before: Option<&AnyRecord>) -> Result<()> {
        let old = before.map(AnyRecord::paths).unwrap_or_default();
        for (field, path) in record.paths() {
            if old.iter().any(|(f, p)| *f == field && *p == path) {
                continue;
            }
            if let Err(reason) = paths::inside(&path, &self.project) {
                return Err(StoreError::Invalid {
                    field,
                    reason,
                    hint: "keep plans and specs inside the repository".into(),
                });
            }
        }
        Ok(())
    }

    /// If `id` depended on `deps`, would a chain of deps lead back to `id`? The cycle,
    /// starting and ending at `id`.
    pub fn cycle_through(&self, id: &str, deps: &[String]) -> Result<Option<Vec<String>>> {
        // Depth-first from each dep; `from` remembers how we reached each record.
        let mut from: BTreeMap<String, String> = BTreeMap::new();
        let mut stack: Vec<String> = Vec::new();
        for d in deps {
            if d == id {
                return Ok(Some(vec![id.to_string(), id.to_string()]));
            }
            if !from.contains_key(d) {
                from.insert(d.clone(), id.to_string());
                stack.push(d.clone());
            }
        }
        while let Some(cur) = stack.pop() {
            let Some(rec) = self.get(&cur)? else { continue };
            for next in rec.deps() {
                if next == id {
                    let mut path = vec![id.to_string(), cur.clone()];
                    let mut at = cur.clone();
                    while let Some(prev) = from.get(&at) {
                        if prev == id {
                            break;
                        }
                        path.insert(1, prev.clone());
                        at = prev.clone();
                    }
                    path.push(id.to_string());
                    return Ok(Some(path));
                }
                if !from.contains_key(next) {
                    from.insert(next.clone(), cur.clone());
                    stack.push(next.clone());
                }
            }
        }
        Ok(None)
    }

    /// Delete a record (a tombstone). Refused while other live records name it as parent
    /// or dep.
    pub fn delete(&mut self, id: &str, now_ms: i64) -> Result<()> {
        let lock = self.store.lock()?;
        self.catch_up()?;
        let rec = self.get(id)?.ok_or_else(|| StoreError::Missing {
            field: "id".into(),
            id: id.to_string(),
        })?;
        let by: Vec<String> = self
            .referencing(id)?
            .into_iter()
            .filter(|r| r != id)
            .collect();
        if !by.is_empty() {
            return Err(StoreError::InUse {
                id: id.to_string(),
                by,
            });
        }
        let ch = self.store.delete(rec.kind().collection(), id, now_ms)?;
        self.changes.extend(ch);
        lock.commit()
    }
}

impl IdSource for Records {
    fn exact(&self, id: &str) -> bool {
        self.is_live(id)
    }

    fn by_hex(&self, hex: &str) -> Vec<String> {
        let prefix = format!("{hex}-");
        Kind::ALL
            .iter()
            .flat_map(|k| {
                self.store
                    .ids_with_prefix(k.collection(), &prefix)
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|(_, deleted)| !deleted)
                    .map(|(id, _)| id.to_string())
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    fn search(&self, needle: &str) -> Vec<(String, Vec<usize>)> {
        Kind::ALL
            .iter()
            .flat_map(|k| {
                self.store
                    .search_ids(k.collection(), needle)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(id, offs)| (id.to_string(), offs))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    fn all(&self) -> Vec<String> {
        Kind::ALL
            .iter()
            .flat_map(|k| {
                self.store
                    .ids(k.collection())
                    .map(|ids| ids.map(String::from).collect::<Vec<_>>())
                    .unwrap_or_default()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_763_726_400_000;

    fn run(r: &mut Records, name: &str) -> LoopRun {
        r.create_run(
            NewRun {
                loop_type: "ralph".into(),
                name: Some(name.into()),
                ..NewRun::default()
            },
            T0,
        )
        .unwrap()
    }

    /// Several runs changed in one batch: one durable write, each change checked as
    /// `update` checks it, all or nothing.
    #[test]
    fn a_batch_is_one_write_and_all_or_nothing() {
        let d = tempfile::tempdir().unwrap();
        let mut r = Records::open(d.path()).unwrap();
        let (a, b) = (run(&mut r, "a"), run(&mut r, "b"));
        let fsyncs = |r: &Records| r.store().jsonl().unwrap().fsyncs();
        let before = fsyncs(&r);
        let mut a2 = a.clone();
        a2.iteration = 3;
        let mut b2 = b.clone();
        b2.progress = "iteration 1: continue".into();
        let done = r
            .update_batch(vec![AnyRecord::Run(a2), AnyRecord::Run(b2)], T0 + 5)
            .unwrap();
        assert_eq!(done.len(), 2);
        assert_eq!(fsyncs(&r), before + 1);
        let got = |r: &Records, id: &str| match r.get(id).unwrap() {
            Some(AnyRecord::Run(run)) => run,
            other => panic!("{other:?}"),
        };
        assert_eq!(got(&r, &a.id).iteration, 3);
        assert_eq!(got(&r, &a.id).updated_at, T0 + 5);
        assert_eq!(got(&r, &b.id).progress, "iteration 1: continue");
        // Another process sees both.
        let other = Records::open(d.path()).unwrap();
        assert_eq!(got(&other, &a.id).iteration, 3);
        // A stale record refuses the whole batch: the other change is not written either.
        let mut stale = a.clone();
        stale.iteration = 9;
        let mut fresh = got(&r, &b.id);
        let was = fresh.iteration;
        fresh.iteration = was + 7;
        let e = r
            .update_batch(
                vec![AnyRecord::Run(fresh.clone()), AnyRecord::Run(stale)],
                T0 + 9,
            )
            .unwrap_err();
        assert!(matches!(e, StoreError::Changed { .. }), "{e}");
        assert_eq!(got(&r, &b.id).iteration, was);
        // One id twice is refused.
        let e = r
            .update_batch(
                vec![AnyRecord::Run(fresh.clone()), AnyRecord::Run(fresh)],
                T0 + 9,
            )
            .unwrap_err();
        assert!(matches!(e, StoreError::Invalid { .. }), "{e}");
    }
}
