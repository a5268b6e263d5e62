//! The orphans the harness inherits as the subreaper, reaped.
//!
//! A harness that runs agents is the child subreaper of their trees ([`super::become_subreaper`]),
//! so every process an agent leaves behind is re-parented to it. The runner ends and reaps
//! what it finds of a tree when the tree's first process exits; a process that outlives
//! that look and exits later on its own — git's automatic maintenance, which an agent's
//! `git commit` starts detached (`fork` and `setsid`), is the common one — would stay a
//! zombie of the harness forever (issue 42: one or more per run of a queue daemon, until
//! the machine runs out of pids).
//!
//! So a thread of the subreaper looks once a second whether a child has exited, and reaps
//! each exited child that is not one the harness itself waits for. Those are told apart by
//! their session: a process the harness spawned and waits for (a git, a validation, the
//! watchdog's first fork) is in the harness's session, except an agent's first process,
//! which leads a session of its own and is named here by the runner ([`Leader`]) from
//! before its spawn until it is reaped. A re-parented orphan is in its tree's session, or
//! one it made.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

/// The first processes of the agents' trees now running: the runner waits for them.
static LEADERS: Mutex<Vec<i32>> = Mutex::new(Vec::new());

/// How often the thread looks.
const EVERY: Duration = Duration::from_secs(1);

/// An agent's first process, named from its spawn until it is reaped (drop this after the
/// runner's wait for it returned).
pub(crate) struct Leader(i32);

impl Leader {
    /// Spawn with `spawn` while no orphan can be reaped, and name the child's pid (given
    /// by `pid`) as one the runner waits for.
    pub(crate) fn spawn<T>(
        spawn: impl FnOnce() -> std::io::Result<T>,
        pid: impl Fn(&T) -> Option<u32>,
    ) -> std::io::Result<(T, Leader)> {
        let mut leaders = LEADERS.lock().unwrap_or_else(|p| p.into_inner());
        let child = spawn()?;
        let id = pid(&child).map_or(0, |p| p as i32);
        leaders.push(id);
        Ok((child, Leader(id)))
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        let mut leaders = LEADERS.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = leaders.iter().position(|p| *p == self.0) {
            leaders.swap_remove(i);
        }
    }
}

/// Start the thread that reaps this process's orphans (once; the caller is the subreaper).
pub(crate) fn start_reaping() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        let _ = std::thread::Builder::new()
            .name("orphan reaper".into())
            .spawn(|| {
                loop {
                    std::thread::sleep(EVERY);
                    reap();
                }
            });
    });
}

/// Reap every exited child that nothing of ours waits for; the number reaped.
pub(crate) fn reap() -> usize {
    #[cfg(target_os = "linux")]
    {
        use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid, waitpid};
        // Cheap first: has any child exited at all? (Nothing is reaped by this look.)
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
        if matches!(waitid(Id::All, flags), Ok(WaitStatus::StillAlive) | Err(_)) {
            return 0;
        }
        let Ok(own_session) = nix::unistd::getsid(None) else {
            return 0;
        };
        // Held while reaping: no agent is spawned meanwhile, so every leader is named.
        let leaders = LEADERS.lock().unwrap_or_else(|p| p.into_inner());
        let mut reaped = 0;
        for (pid, session) in exited_children() {
            if leaders.contains(&pid) || session == own_session.as_raw() {
                continue;
            }
            let p = nix::unistd::Pid::from_raw(pid);
            if matches!(waitpid(p, Some(WaitPidFlag::WNOHANG)), Ok(s) if s != WaitStatus::StillAlive)
            {
                reaped += 1;
            }
        }
        reaped
    }
    #[cfg(not(target_os = "linux"))]
    0
}

/// The (pid, session) of every child of this process that has exited (a zombie), read
/// from each thread's `children` list (or, on a kernel without those, from every process's
/// parent).
#[cfg(target_os = "linux")]
fn exited_children() -> Vec<(i32, i32)> {
    let me = std::process::id() as i32;
    let mut pids = HashSet::new();
    let mut listed = false;
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for task in tasks.flatten() {
            if let Ok(list) = std::fs::read_to_string(task.path().join("children")) {
                listed = true;
                pids.extend(
                    list.split_whitespace()
                        .filter_map(|p| p.parse::<i32>().ok()),
                );
            }
        }
    }
    if !listed && let Ok(all) = std::fs::read_dir("/proc") {
        pids.extend(
            all.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok()),
        );
    }
    pids.into_iter()
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // After the name, which may hold anything: state, ppid, pgrp, session.
            let (_, rest) = stat.rsplit_once(')')?;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let ours = fields.get(1)?.parse::<i32>().ok()? == me;
            (ours && fields.first() == Some(&"Z")).then_some(())?;
            Some((pid, fields.get(3)?.parse().ok()?))
        })
        .collect()
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::process::Command;
    use std::time::Instant;

    fn zombie(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        })
    }

    fn exists(pid: i32) -> bool {
        std::path::Path::new(&format!("/proc/{pid}")).exists()
    }

    #[test]
    fn a_detached_orphan_is_reaped_and_a_child_we_wait_for_is_left_to_us() {
        let _ = crate::agent::become_subreaper();
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        // As git's detached maintenance: a fork that leads its own session, outlives its
        // parent (so it is re-parented to us) and then exits.
        let script = format!(
            "setsid sh -c 'echo $$ > {}; sleep 0.3' & exit 0",
            pid_file.display()
        );
        let mut parent = Command::new("sh").args(["-c", &script]).spawn().unwrap();
        parent.wait().unwrap();
        // A child of ours in our session, exited and not yet waited for.
        let mut ours = Command::new("sh").args(["-c", "exit 7"]).spawn().unwrap();
        let ours_pid = ours.id() as i32;
        let t = Instant::now();
        let orphan: i32 = loop {
            if let Some(p) = std::fs::read_to_string(&pid_file)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                break p;
            }
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "the orphan never started"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        while exists(orphan) && t.elapsed() < Duration::from_secs(10) {
            reap();
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            !exists(orphan),
            "the orphan is still there (a zombie: {})",
            zombie(orphan)
        );
        assert!(
            zombie(ours_pid) || exists(ours_pid),
            "our own child was reaped by someone else"
        );
        assert_eq!(
            ours.wait().unwrap().code(),
            Some(7),
            "our own wait gets its status"
        );
    }
}
