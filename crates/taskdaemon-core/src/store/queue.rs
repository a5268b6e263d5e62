//! The shared queue's coordination API (issue 19): claiming ready runs with a lease,
//! renewing and releasing it, taking over runs whose lease expired, iteration logs and
//! merges stored once, advisory locks across machines and notifications.
//!
//! On PostgreSQL each call is one transaction; claims and takeovers hold the project's
//! advisory lock (as every record write does) and lock the rows they take with `FOR
//! UPDATE SKIP LOCKED`. On the JSONL store (one daemon) the same calls keep one code path
//! in the daemon: `claim` marks runs running, `renew` is always true, nothing expires,
//! logs and merges are not stored here (local files as before), `lock` is a file lock and
//! there is no listener.

use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use postgres::Client;
use postgres::fallible_iterator::FallibleIterator;
use serde::Serialize;
use taskstore::{Op, Record};

use super::pg::{CHANNEL, PgStore};
use super::pg_conn::{QueueConfig, QueueError, connect, connect_only};
use super::{AnyRecord, LoopRun, Records, Result, RunStatus, StoreError};

/// The bounded size of one iteration's log in the queue: its last 256 KiB.
pub const LOG_LIMIT: usize = 256 * 1024;

/// Who holds a lease: one daemon process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Holder {
    pub host: String,
    pub pid: u32,
    /// `host:pid:start-ms` (a restarted daemon with a reused pid is another holder).
    pub id: String,
}

impl Holder {
    /// This process, started at `start_ms`.
    pub fn new(host: &str, pid: u32, start_ms: i64) -> Holder {
        Holder {
            host: host.to_string(),
            pid,
            id: format!("{host}:{pid}:{start_ms}"),
        }
    }

    /// The holder named `id` (`host:pid:start-ms`, as [`Holder::new`] makes it): for
    /// writes kept under a lease and made later (see the daemon's journal).
    pub fn from_id(id: &str) -> Holder {
        let mut parts = id.rsplitn(3, ':');
        let (_start, pid, host) = (parts.next(), parts.next(), parts.next());
        Holder {
            host: host.unwrap_or(id).to_string(),
            pid: pid.and_then(|p| p.parse().ok()).unwrap_or(0),
            id: id.to_string(),
        }
    }

    /// This process on this machine (its host name), started now.
    pub fn this_process() -> Holder {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
            .unwrap_or_else(|| "localhost".into());
        Holder::new(
            &host,
            std::process::id(),
            crate::clock::now().as_millisecond(),
        )
    }
}

/// A run's lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Lease {
    pub run_id: String,
    pub holder: String,
    pub host: String,
    pub pid: u32,
    /// Unix ms (the server's clock).
    pub expires_at: i64,
    /// Whether it had expired when read.
    pub expired: bool,
}

fn secs(ttl: Duration) -> f64 {
    ttl.as_secs_f64()
}

const UPSERT_LEASE: &str = "insert into leases (project, run_id, holder, host, pid, expires_at)
     values ($1, $2, $3, $4, $5, now() + $6::float8 * interval '1 second')
     on conflict (project, run_id) do update set holder = excluded.holder,
       host = excluded.host, pid = excluded.pid, expires_at = excluded.expires_at";

impl PgStore {
    fn exec(
        &self,
        what: &str,
        sql: &str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<u64> {
        self.shared()
            .client()
            .execute(sql, params)
            .map_err(self.sql_err(what))
    }

    fn rows(
        &self,
        what: &str,
        sql: &str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<Vec<postgres::Row>> {
        self.shared()
            .client()
            .query(sql, params)
            .map_err(self.sql_err(what))
    }

    fn write_leases(&self, ids: &[String], holder: &Holder, ttl: Duration) -> Result<()> {
        let pid = holder.pid as i32;
        for id in ids {
            self.exec(
                "writing a lease",
                UPSERT_LEASE,
                &[
                    &self.config().project,
                    id,
                    &holder.id,
                    &holder.host,
                    &pid,
                    &secs(ttl),
                ],
            )?;
        }
        Ok(())
    }
}

impl Records {
    /// Atomically claim those of `candidates` (run ids found ready) that are still pending
    /// and not leased by a live holder: their status becomes `running` and a lease
    /// (expiring after `ttl`) names `holder`, in one transaction. The claimed ids, in the
    /// order given.
    pub fn claim(
        &mut self,
        candidates: &[String],
        holder: &Holder,
        ttl: Duration,
    ) -> Result<Vec<String>> {
        self.claim_within(candidates, holder, ttl, None)
    }

    /// [`Records::claim`], leaving at most `limit` runs `running` in the project (all
    /// machines: `queue-max-loops`): the running ones are counted under the project's write
    /// lock, so two daemons claiming at once cannot both take the last free place.
    pub fn claim_within(
        &mut self,
        candidates: &[String],
        holder: &Holder,
        ttl: Duration,
        limit: Option<usize>,
    ) -> Result<Vec<String>> {
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        let lock = self.store.lock()?;
        self.catch_up()?;
        let room = match limit {
            Some(max) => {
                let running = [taskstore::Filter::eq("status", "running")];
                max.saturating_sub(self.store.list_ids(LoopRun::COLLECTION, &running)?.len())
            }
            None => candidates.len(),
        };
        let free: Vec<String> = match self.store.postgres() {
            Some(p) => p
                .rows(
                    "finding claimable runs",
                    "select r.id from records r
                     where r.project = $1 and r.collection = $2 and r.id = any($3)
                       and not r.deleted and r.body->>'status' = 'pending'
                       and not exists (select 1 from leases l where l.project = r.project
                                       and l.run_id = r.id and l.expires_at > now())
                     for update of r skip locked",
                    &[&p.config().project, &LoopRun::COLLECTION, &candidates],
                )?
                .iter()
                .map(|r| r.get::<_, String>(0))
                .collect(),
            None => candidates.to_vec(),
        };
        let now = crate::clock::now().as_millisecond();
        let mut ops = Vec::new();
        let mut got = Vec::new();
        for id in candidates.iter().filter(|c| free.contains(c)) {
            if got.len() == room {
                break;
            }
            if got.contains(id) {
                continue;
            }
            let Some(mut run) = self.store.get_as::<LoopRun>(id)? else {
                continue;
            };
            if run.status != RunStatus::Pending {
                continue;
            }
            run.status = RunStatus::Running;
            run.updated_at = now.max(run.updated_at);
            ops.push(Op::update(&run)?);
            got.push(id.clone());
        }
        if !ops.is_empty() {
            let ch = self.store.apply(LoopRun::COLLECTION, ops)?;
            self.changes.extend(ch);
        }
        if let Some(p) = self.store.postgres() {
            p.write_leases(&got, holder, ttl)?;
        }
        lock.commit()?;
        Ok(got)
    }

    /// Extend the lease of `run_id` by `ttl` from now. `Ok(false)`: the lease is no
    /// longer `holder`'s (taken over): the run must stop at once, writing nothing else.
    pub fn renew(&mut self, run_id: &str, holder: &Holder, ttl: Duration) -> Result<bool> {
        let Some(p) = self.store.postgres() else {
            return Ok(true);
        };
        let n = p.exec(
            "renewing a lease",
            "update leases set expires_at = now() + $4::float8 * interval '1 second'
             where project = $1 and run_id = $2 and holder = $3",
            &[&p.config().project, &run_id, &holder.id, &secs(ttl)],
        )?;
        Ok(n == 1)
    }

    /// Give up the lease of `run_id` (if it is still `holder`'s).
    pub fn release(&mut self, run_id: &str, holder: &Holder) -> Result<()> {
        if let Some(p) = self.store.postgres() {
            p.exec(
                "releasing a lease",
                "delete from leases where project = $1 and run_id = $2 and holder = $3",
                &[&p.config().project, &run_id, &holder.id],
            )?;
        }
        Ok(())
    }

    /// Give up every lease `holder_id` holds (a dead daemon's, known to be dead): its runs
    /// are taken over at once instead of when the leases expire. The number released.
    pub fn release_holder(&mut self, holder_id: &str) -> Result<u64> {
        let Some(p) = self.store.postgres() else {
            return Ok(0);
        };
        p.exec(
            "releasing a dead daemon's leases",
            "delete from leases where project = $1 and holder = $2",
            &[&p.config().project, &holder_id],
        )
    }

    /// Runs marked running whose lease expired (or that have none): leased to `holder` in
    /// one transaction, at most `limit`, oldest first. The runs taken over.
    pub fn take_over_expired(
        &mut self,
        holder: &Holder,
        ttl: Duration,
        limit: usize,
    ) -> Result<Vec<LoopRun>> {
        if self.store.postgres().is_none() || limit == 0 {
            return Ok(Vec::new());
        }
        let lock = self.store.lock()?;
        self.catch_up()?;
        let Some(p) = self.store.postgres() else {
            return Ok(Vec::new());
        };
        let ids: Vec<String> = p
            .rows(
                "finding expired leases",
                "select r.id from records r
                 left join leases l on l.project = r.project and l.run_id = r.id
                 where r.project = $1 and r.collection = $2 and not r.deleted
                   and r.body->>'status' = 'running'
                   and (l.run_id is null or l.expires_at <= now())
                 order by r.first_seq limit $3
                 for update of r skip locked",
                &[
                    &p.config().project,
                    &LoopRun::COLLECTION,
                    &(limit.min(i64::MAX as usize) as i64),
                ],
            )?
            .iter()
            .map(|r| r.get::<_, String>(0))
            .collect();
        p.write_leases(&ids, holder, ttl)?;
        lock.commit()?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(AnyRecord::Run(r)) = self.get(&id)? {
                out.push(r);
            }
        }
        Ok(out)
    }

    /// Every lease of the project (for `status`: "held by host:pid").
    pub fn leases(&self) -> Result<Vec<Lease>> {
        let Some(p) = self.store.postgres() else {
            return Ok(Vec::new());
        };
        Ok(p.rows(
            "reading leases",
            "select run_id, holder, host, pid,
                    (extract(epoch from expires_at) * 1000)::bigint,
                    expires_at <= now()
             from leases where project = $1 order by run_id",
            &[&p.config().project],
        )?
        .iter()
        .map(|r| Lease {
            run_id: r.get(0),
            holder: r.get(1),
            host: r.get(2),
            pid: r.get::<_, i32>(3).max(0) as u32,
            expires_at: r.get(4),
            expired: r.get(5),
        })
        .collect())
    }

    /// Store the log of one iteration (its last [`LOG_LIMIT`] bytes), replacing an
    /// earlier upload of the same iteration. Not stored on the JSONL store.
    pub fn put_log(&mut self, run_id: &str, iteration: u32, text: &str) -> Result<()> {
        let Some(p) = self.store.postgres() else {
            return Ok(());
        };
        let tail = log_tail(text);
        p.exec(
            "storing a log",
            "insert into run_logs (project, run_id, iteration, text) values ($1, $2, $3, $4)
             on conflict (project, run_id, iteration) do update set text = excluded.text",
            &[
                &p.config().project,
                &run_id,
                &(iteration.min(i32::MAX as u32) as i32),
                &tail,
            ],
        )?;
        Ok(())
    }

    /// The stored logs of a run, by iteration.
    pub fn logs(&self, run_id: &str) -> Result<Vec<(u32, String)>> {
        let Some(p) = self.store.postgres() else {
            return Ok(Vec::new());
        };
        Ok(p.rows(
            "reading logs",
            "select iteration, text from run_logs where project = $1 and run_id = $2
             order by iteration",
            &[&p.config().project, &run_id],
        )?
        .iter()
        .map(|r| (r.get::<_, i32>(0).max(0) as u32, r.get(1)))
        .collect())
    }

    /// Record that `run_id` was merged into `target` as `commit`: `Ok(false)` when a merge
    /// of it was already recorded (by anyone), which is kept. JSONL: always `true`.
    pub fn record_merge(&mut self, run_id: &str, target: &str, commit: &str) -> Result<bool> {
        let Some(p) = self.store.postgres() else {
            return Ok(true);
        };
        let n = p.exec(
            "recording a merge",
            "insert into merges (project, run_id, target, commit) values ($1, $2, $3, $4)
             on conflict (project, run_id) do nothing",
            &[&p.config().project, &run_id, &target, &commit],
        )?;
        Ok(n == 1)
    }

    /// The commit a recorded merge of `run_id` made.
    pub fn merged(&self, run_id: &str) -> Result<Option<String>> {
        let Some(p) = self.store.postgres() else {
            return Ok(None);
        };
        Ok(p.rows(
            "reading merges",
            "select commit from merges where project = $1 and run_id = $2",
            &[&p.config().project, &run_id],
        )?
        .first()
        .map(|r| r.get(0)))
    }

    /// An exclusive lock named `key` for this project: across machines on the queue (a
    /// session advisory lock), else a file lock under `.git/taskdaemon/locks/`. Waits
    /// until it is free; held until dropped.
    pub fn exclusive(&self, key: &str) -> Result<AdvisoryLock> {
        match self.queue() {
            Some(q) => lock(q, key),
            None => file_lock(&self.project, key),
        }
    }
}

/// The last [`LOG_LIMIT`] bytes of `text`, cut at a character boundary.
fn log_tail(text: &str) -> &str {
    if text.len() <= LOG_LIMIT {
        return text;
    }
    let mut start = text.len() - LOG_LIMIT;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// An exclusive lock, held until dropped.
pub enum AdvisoryLock {
    /// A session advisory lock on a connection of its own (closing it releases it).
    Postgres(Box<Client>),
    /// `flock` on a file.
    File(std::fs::File),
}

impl std::fmt::Debug for AdvisoryLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AdvisoryLock::Postgres(_) => "AdvisoryLock::Postgres",
            AdvisoryLock::File(_) => "AdvisoryLock::File",
        })
    }
}

/// A session-level advisory lock per (project, key), on its own connection; for the
/// per-target-branch merge lock across machines. Waits until it is free.
pub fn lock(queue: &QueueConfig, key: &str) -> Result<AdvisoryLock> {
    let mut client = connect_only(queue)?;
    client
        .execute(
            "select pg_advisory_lock(hashtextextended('taskdaemon:' || $1 || ':' || $2, 0))",
            &[&queue.project, &key],
        )
        .map_err(|e| StoreError::from(QueueError::sql(queue, "taking a lock", e)))?;
    Ok(AdvisoryLock::Postgres(Box::new(client)))
}

fn file_lock(project: &std::path::Path, key: &str) -> Result<AdvisoryLock> {
    let safe: String = key
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let dir: PathBuf = project.join(".git").join("taskdaemon").join("locks");
    let path = dir.join(format!("{safe}.lock"));
    let io = |e: std::io::Error| {
        StoreError::Store(taskstore::Error::Io {
            path: path.clone(),
            source: e,
        })
    };
    std::fs::create_dir_all(&dir).map_err(io)?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io)?;
    // SAFETY: flock on a descriptor we own; no memory is involved.
    let rc = unsafe { nix::libc::flock(file.as_raw_fd(), nix::libc::LOCK_EX) };
    if rc != 0 {
        return Err(io(std::io::Error::last_os_error()));
    }
    Ok(AdvisoryLock::File(file))
}

/// A connection listening on the `taskdaemon` channel for this project's writes.
pub struct Listener {
    client: Client,
    queue: QueueConfig,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("queue", &self.queue.shown())
            .finish()
    }
}

impl Listener {
    /// Wait until a write of this project is committed (true) or `timeout` passes (false).
    pub fn wait(&mut self, timeout: Duration) -> Result<bool> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let mut n = self.client.notifications();
            let got = n
                .timeout_iter(left)
                .next()
                .map_err(|e| StoreError::from(QueueError::sql(&self.queue, "listening", e)))?;
            match got {
                Some(note) if note.payload() == self.queue.project => return Ok(true),
                Some(_) if !left.is_zero() => continue,
                _ => return Ok(false),
            }
        }
    }
}

/// A connection `LISTEN`ing on the channel every committed write notifies.
pub fn listener(queue: &QueueConfig) -> Result<Listener> {
    let mut client = connect(queue)?;
    client
        .batch_execute(&format!("listen {CHANNEL}"))
        .map_err(|e| StoreError::from(QueueError::sql(queue, "listening", e)))?;
    Ok(Listener {
        client,
        queue: queue.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_keep_their_tail_on_a_char_boundary() {
        let text = format!("{}{}", "é".repeat(LOG_LIMIT), "end");
        let t = log_tail(&text);
        assert!(t.len() <= LOG_LIMIT);
        assert!(t.ends_with("end"));
        assert_eq!(log_tail("short"), "short");
    }

    #[test]
    fn a_holder_is_read_back_from_its_id() {
        let h = Holder::new("vm:a", 42, 7);
        assert_eq!(Holder::from_id(&h.id), h);
        assert_eq!(Holder::from_id("odd").id, "odd");
    }

    #[test]
    fn holder_ids_name_host_pid_and_start() {
        let h = Holder::new("m1", 42, 1000);
        assert_eq!(h.id, "m1:42:1000");
    }
}
