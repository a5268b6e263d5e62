//! Process groups a daemon started, recorded on disk so that a daemon restarted after a
//! crash (`kill -9`) can end what the dead one left running before it resumes the runs.
//!
//! Once [`track_process_groups`] is called, every group the runner starts gets a fresh token
//! in its environment (`TASKDAEMON_GROUP`), is recorded as `<dir>/<pgid>` holding that token
//! and its run id, and the record is removed when the group is gone. Only processes that
//! still carry the token are ever signalled, so a recycled pid is safe. The children also get a parent-death signal (KILL), which ends the
//! direct child at once when the daemon dies; the record ends the rest of its group.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

static DIR: OnceLock<PathBuf> = OnceLock::new();

/// Record every process group started from now on in `dir` (once per process).
pub fn track_process_groups(dir: PathBuf) -> std::io::Result<()> {
    std::fs::create_dir_all(&dir)?;
    let _ = DIR.set(dir);
    Ok(())
}

/// The variable that marks a tracked group's processes.
pub const GROUP_VAR: &str = "TASKDAEMON_GROUP";

/// A fresh token for a group about to start, when tracking is on.
pub(crate) fn token() -> Option<String> {
    DIR.get().map(|_| uuid::Uuid::new_v4().simple().to_string())
}

/// The record of one group; removed on drop.
pub(crate) struct Record(Option<PathBuf>);

pub(crate) fn record(pgid: i32, token: Option<&str>, env: &[(OsString, OsString)]) -> Record {
    let (Some(dir), Some(token)) = (DIR.get(), token) else {
        return Record(None);
    };
    if pgid <= 0 {
        return Record(None);
    }
    let run = env
        .iter()
        .find(|(k, _)| k == "TASKDAEMON_RUN_ID")
        .map(|(_, v)| v.to_string_lossy().into_owned())
        .unwrap_or_default();
    let path = dir.join(pgid.to_string());
    match crate::fsutil::write_atomic(&path, format!("{token}\n{run}").as_bytes()) {
        Ok(()) => Record(Some(path)),
        Err(_) => Record(None),
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// A group a dead daemon left behind, and what was done to it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Leftover {
    pub pgid: i32,
    pub run_id: String,
    /// Processes of the group found alive.
    pub processes: usize,
    /// Still alive after TERM, grace and KILL (uninterruptible).
    pub survived: bool,
}

/// End every group recorded in `dir` whose processes still carry its token: TERM to all,
/// one `grace` for all, then KILL to what is left. Records are removed. Linux (`/proc`).
pub fn end_leftover_groups(dir: &Path, grace: Duration) -> Vec<Leftover> {
    let mut found: Vec<(PathBuf, i32, String, String, usize)> = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    for e in entries.flatten() {
        let path = e.path();
        let Some(pgid) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.parse::<i32>().ok())
            .filter(|p| *p > 1)
        else {
            continue;
        };
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let (token, run_id) = text.split_once('\n').unwrap_or((text.as_str(), ""));
        let (token, run_id) = (token.trim().to_string(), run_id.trim().to_string());
        let n = if token.is_empty() {
            0
        } else {
            members_of(pgid, &token).len()
        };
        if n == 0 {
            let _ = std::fs::remove_file(&path);
            continue;
        }
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGTERM);
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGCONT);
        found.push((path, pgid, token, run_id, n));
    }
    let alive = |found: &[(PathBuf, i32, String, String, usize)]| {
        found
            .iter()
            .any(|(_, pgid, token, _, _)| !members_of(*pgid, token).is_empty())
    };
    let until = Instant::now() + grace;
    while Instant::now() < until && alive(&found) {
        std::thread::sleep(Duration::from_millis(20));
    }
    if alive(&found) {
        for (_, pgid, token, _, _) in &found {
            if !members_of(*pgid, token).is_empty() {
                let _ = killpg(Pid::from_raw(*pgid), Signal::SIGKILL);
            }
        }
        let until = Instant::now() + Duration::from_secs(2);
        while Instant::now() < until && alive(&found) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    found
        .into_iter()
        .map(|(path, pgid, token, run_id, processes)| {
            let survived = !members_of(pgid, &token).is_empty();
            let _ = std::fs::remove_file(path);
            Leftover {
                pgid,
                run_id,
                processes,
                survived,
            }
        })
        .collect()
}

/// Live (not zombie) processes in group `pgid` whose environment has
/// `TASKDAEMON_GROUP=token`.
fn members_of(pgid: i32, token: &str) -> Vec<i32> {
    if matches!(killpg(Pid::from_raw(pgid), None), Err(Errno::ESRCH)) {
        return Vec::new();
    }
    let want = format!("{GROUP_VAR}={token}");
    let mut found = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return found;
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(p.path().join("stat")) else {
            continue;
        };
        // Fields after the command (which may hold spaces) start after the last ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // state is field 3, pgrp field 5 of stat: here indexes 0 and 2.
        if fields.first() == Some(&"Z") || fields.get(2) != Some(&pgid.to_string().as_str()) {
            continue;
        }
        let Ok(environ) = std::fs::read(p.path().join("environ")) else {
            continue;
        };
        if environ.split(|b| *b == 0).any(|kv| kv == want.as_bytes()) {
            found.push(pid);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_group_is_ended_and_a_stranger_is_left_alone() {
        let d = tempfile::tempdir().unwrap();
        let spawn = |token: &str| {
            use std::os::unix::process::CommandExt;
            let mut c = std::process::Command::new("sh");
            c.args(["-c", "sleep 30 & sleep 30; wait"])
                .env(GROUP_VAR, token)
                .process_group(0);
            c.spawn().unwrap()
        };
        let mut ours = spawn("t-a");
        let mut other = spawn("t-b");
        // A record for `other`'s group with another token: a recycled pid, not ours to end.
        std::fs::write(d.path().join(ours.id().to_string()), "t-a\nrun-a").unwrap();
        std::fs::write(d.path().join(other.id().to_string()), "t-x\nrun-x").unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let ended = end_leftover_groups(d.path(), Duration::from_secs(2));
        assert_eq!(ended.len(), 1, "{ended:?}");
        assert_eq!(ended[0].run_id, "run-a");
        assert!(ended[0].processes >= 2, "{ended:?}");
        assert!(!ended[0].survived);
        let _ = ours.wait();
        assert!(
            other.try_wait().unwrap().is_none(),
            "the stranger was killed"
        );
        let _ = killpg(Pid::from_raw(other.id() as i32), Signal::SIGKILL);
        let _ = other.wait();
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    }
}
