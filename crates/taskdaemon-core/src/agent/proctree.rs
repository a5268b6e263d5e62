//! The processes of one spawn's tree, read from `/proc` (Linux): the processes that carry
//! its token (see [`super::tracked`]), the members of its process group, and everything
//! below those.
//!
//! Two ways to look:
//! - every process of the machine ([`carriers`]; [`tree`] when the harness may not be the
//!   reaper of the whole tree). `/proc` is listed by pid number, so a process that lives
//!   through the listing is in it, whatever else comes and goes;
//! - only the harness's own descendants ([`tree`] with `below_us`), down the
//!   `/proc/PID/task/TID/children` files. Those lists are not exact while they change: a
//!   list read while a process leaves it may skip another (the kernel says so), and a
//!   process re-parented while the walk runs may move from a list not read yet to one
//!   already read. So every list a walk read is read again afterwards: when one changed
//!   (or a process lost a thread, which hands its children to another), the walk is done
//!   again, and after [`WALK_TRIES`] the whole machine is read.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::tracked::GROUP_VAR;

/// One process as `/proc` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Proc {
    pub pid: i32,
    pub ppid: i32,
    pub pgid: i32,
    pub zombie: bool,
    /// When it started (clock ticks after boot): with the pid, it names one process, even
    /// once the pid is used again.
    pub start: u64,
}

/// `f` of the fields of `/proc/PID/stat` from the third on (the state; proc(5) counts
/// from 1), after the command, which may hold spaces and parentheses.
fn with_stat<T>(dir: &Path, f: impl FnOnce(&[&str]) -> Option<T>) -> Option<T> {
    let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    f(&fields)
}

fn read_stat(dir: &Path, pid: i32) -> Option<Proc> {
    with_stat(dir, |f| {
        Some(Proc {
            pid,
            zombie: *f.first()? == "Z",
            ppid: f.get(1)?.parse().ok()?,
            pgid: f.get(2)?.parse().ok()?,
            start: f.get(19)?.parse().ok()?,
        })
    })
}

fn proc_dir(pid: i32) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}"))
}

/// The process `pid` as it is now; `None` when there is none.
pub(crate) fn read_proc(pid: i32) -> Option<Proc> {
    read_stat(&proc_dir(pid), pid)
}
/// How long [`has_token`] waits for a process in the middle of an `exec` (or of its exit)
/// to have an environment again.
const EXEC_WAIT: Duration = Duration::from_millis(100);

/// Whether the process at `dir` carries `want` (`NAME=value`, a whole entry) in its
/// environment.
pub(crate) fn has_token(dir: &Path, want: &[u8]) -> bool {
    read_env(dir).is_some_and(|env| env.split(|b| *b == 0).any(|kv| kv == want))
}

/// What a process says of the tree it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    /// It carries the token looked for.
    Ours,
    /// It carries the token of another spawn.
    Theirs,
    /// It carries none (or its environment cannot be read).
    Unmarked,
}

/// [`Mark`] of the process at `dir`; `want` is `GROUP_VAR=token`.
fn mark(dir: &Path, want: &[u8]) -> Mark {
    let Some(env) = read_env(dir) else {
        return Mark::Unmarked;
    };
    let names_group =
        |kv: &&[u8]| kv.starts_with(GROUP_VAR.as_bytes()) && kv.get(GROUP_VAR.len()) == Some(&b'=');
    match env.split(|b| *b == 0).find(names_group) {
        Some(kv) if kv == want => Mark::Ours,
        Some(_) => Mark::Theirs,
        None => Mark::Unmarked,
    }
}

/// The environment of the process at `dir` (`NAME=value` entries, each ended by a NUL);
/// `None` when it has none to read: gone, a zombie, a kernel thread, emptied on purpose,
/// or not readable by us.
///
/// Two things make a plain read of `environ` miss what is there (measured on a process
/// that `exec`s in a loop: 27% of `std::fs::read`s missed the token, none of 80,000 now):
/// - the file is read from the memory the process had when it was opened, and a read split
///   in several calls ends early when an `exec` replaces that memory in between: so it is
///   read in one call ([`read_whole`]);
/// - it reads empty when opened just before an `exec`, between the two halves of one (the
///   new memory has no environment yet) or while the process exits. So an empty `environ`
///   is asked again, until `stat` shows an empty environment twice (then it was emptied on
///   purpose, as by `env -i`), the process is gone, a zombie or a kernel thread, or
///   [`EXEC_WAIT`] has passed.
fn read_env(dir: &Path) -> Option<Vec<u8>> {
    let until = Instant::now() + EXEC_WAIT;
    let mut emptied = 0;
    loop {
        match read_whole(&dir.join("environ")) {
            Some(env) if !env.is_empty() => return Some(env),
            Some(_) => {}
            None => return None,
        }
        match env_span(dir) {
            None => return None,
            Some((start, end)) if end != 0 && start == end => {
                emptied += 1;
                if emptied == 2 {
                    return None;
                }
            }
            // No environment yet (an `exec` or an exit under way), or one that was not
            // there when `environ` was opened: ask again.
            Some(_) => {}
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// `PF_KTHREAD` in the flags of `stat`: a kernel thread, which has no memory of its own
/// (older kernels read its `environ` as empty, as in the middle of an `exec`).
const PF_KTHREAD: u64 = 0x0020_0000;

/// Where the environment of the process at `dir` lies in its memory now (`env_start`,
/// `env_end` of `stat`: 0 while an `exec` sets up new memory); `None` when it is gone, a
/// zombie or a kernel thread.
fn env_span(dir: &Path) -> Option<(u64, u64)> {
    // Fields 3 (state), 9 (flags), 50 and 51 (env_start, env_end).
    with_stat(dir, |f| {
        let flags: u64 = f.get(6)?.parse().ok()?;
        if *f.first()? == "Z" || flags & PF_KTHREAD != 0 {
            return None;
        }
        Some((f.get(47)?.parse().ok()?, f.get(48)?.parse().ok()?))
    })
}

/// A `/proc/PID` file read from offset 0 in one `read` (the kernel holds the process's
/// memory for the whole call, so the content is from one moment); a larger buffer is tried
/// when it comes back full. `None` when it cannot be opened or read.
fn read_whole(path: &Path) -> Option<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(path).ok()?;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = f.read_at(&mut buf, 0).ok()?;
        if n < buf.len() {
            buf.truncate(n);
            return Some(buf);
        }
        buf.resize(buf.len() * 4, 0);
    }
}

/// Every process of the machine but this one: its pid and its `/proc/PID` directory.
pub(crate) fn other_processes() -> impl Iterator<Item = (i32, PathBuf)> {
    let me = std::process::id() as i32;
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(move |e| {
            let pid = e.file_name().to_str()?.parse::<i32>().ok()?;
            (pid != me).then(|| (pid, e.path()))
        })
}

/// Every process on the system, and whether it carries `want` (zombies have no
/// environment to read).
fn scan(want: &[u8]) -> Vec<(Proc, bool)> {
    other_processes()
        .filter_map(|(pid, dir)| {
            let p = read_stat(&dir, pid)?;
            let marked = !p.zombie && has_token(&dir, want);
            Some((p, marked))
        })
        .collect()
}

fn token_entry(token: &str) -> Vec<u8> {
    format!("{GROUP_VAR}={token}").into_bytes()
}

/// Live processes that carry `token`.
pub(crate) fn carriers(token: &str) -> Vec<i32> {
    scan(&token_entry(token))
        .into_iter()
        .filter(|(p, marked)| *marked && !p.zombie)
        .map(|(p, _)| p.pid)
        .collect()
}

/// The tree of one spawn: processes that carry `token`, members of process group `pgid`,
/// and every descendant of those (a child that emptied its environment is still found
/// while its parent lives). Zombies are included (to be reaped), marked as such.
///
/// `known`: processes (pid, start time) seen in the tree before, which count as members
/// with everything below them even once they no longer carry the token.
///
/// `below_us`: this process has been the subreaper since before the spawn and the token
/// was given to no process outside the tree, so every member is a descendant of ours (a
/// member whose parent exits is re-parented to a subreaper above it: a member, or us):
/// only our descendants are read ([`Walk`]). Otherwise every process of the machine is.
pub(crate) fn tree(token: &str, pgid: i32, below_us: bool, known: &[(i32, u64)]) -> Vec<Proc> {
    let want = token_entry(token);
    let rooted = Rooted {
        want: &want,
        pgid,
        known,
    };
    if below_us && let Some(found) = below_us_checked(&rooted) {
        return found;
    }
    let all = scan(&want);
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for (p, _) in &all {
        children.entry(p.ppid).or_default().push(p.pid);
    }
    let mut inside: HashSet<i32> = all
        .iter()
        .filter(|(p, marked)| *marked || rooted.roots(p))
        .map(|(p, _)| p.pid)
        .collect();
    let mut todo: Vec<i32> = inside.iter().copied().collect();
    while let Some(pid) = todo.pop() {
        for c in children.get(&pid).into_iter().flatten() {
            if inside.insert(*c) {
                todo.push(*c);
            }
        }
    }
    all.into_iter()
        .map(|(p, _)| p)
        .filter(|p| inside.contains(&p.pid))
        .collect()
}

/// How many walks down our descendants are tried before the whole machine is read.
const WALK_TRIES: usize = 4;

/// What makes a process a member by itself: its token, its group, or being known.
struct Rooted<'a> {
    want: &'a [u8],
    pgid: i32,
    known: &'a [(i32, u64)],
}

impl Rooted<'_> {
    /// A member by its group or as a process seen in the tree before.
    fn roots(&self, p: &Proc) -> bool {
        (self.pgid > 1 && p.pgid == self.pgid) || self.known.contains(&(p.pid, p.start))
    }
}

/// The tree among our descendants from a walk whose lists all read the same afterwards;
/// `None` when the kernel has no `children` files or no walk of [`WALK_TRIES`] held.
fn below_us_checked(rooted: &Rooted<'_>) -> Option<Vec<Proc>> {
    for _ in 0..WALK_TRIES {
        let walk = Walk::read(rooted)?;
        if walk.lists.iter().all(Seen::still_holds) {
            return Some(walk.found);
        }
    }
    None
}

/// One walk down this process's children: what it found and every list it read.
struct Walk {
    found: Vec<Proc>,
    lists: Vec<Seen>,
}

/// A list a walk read, as it read it.
enum Seen {
    /// The threads of a process: one that is gone handed its children to another.
    Threads(PathBuf, Vec<i32>),
    /// The children of one thread (`None`: it could not be read, the thread was gone).
    Children(PathBuf, Option<Vec<u8>>),
}

impl Seen {
    /// Whether the list still reads as the walk read it (a thread list: with every thread
    /// it had; new ones have no child that was there during the walk).
    fn still_holds(&self) -> bool {
        match self {
            Seen::Threads(dir, had) => {
                thread_ids(dir).is_some_and(|now| had.iter().all(|t| now.contains(t)))
            }
            Seen::Children(path, had) => read_whole(path) == *had,
        }
    }
}

impl Walk {
    /// Down from our children: a process that carries the token, is in the group or is
    /// known is a member, and so is everything below a member. Below a process that
    /// carries another spawn's token nothing is read: a member's parent is a member or a
    /// process of no tree (one that dropped the token after it forked, or us), never one
    /// of another tree, as a member whose parent exits goes to the nearest subreaper above
    /// it. `None` when this process has no `children` file (a kernel without them).
    fn read(rooted: &Rooted<'_>) -> Option<Walk> {
        let mut walk = Walk {
            found: Vec::new(),
            lists: Vec::new(),
        };
        let me = std::process::id() as i32;
        // The main thread lives as long as the process: its file says whether there are any.
        let main = proc_dir(me)
            .join("task")
            .join(me.to_string())
            .join("children");
        if !main.exists() {
            return None;
        }
        // (pid, whether it is below a member)
        let mut todo: Vec<(i32, bool)> =
            walk.children(me).into_iter().map(|c| (c, false)).collect();
        let mut seen = HashSet::new();
        while let Some((pid, below_member)) = todo.pop() {
            let dir = proc_dir(pid);
            if !seen.insert(pid) {
                continue;
            }
            let Some(p) = read_stat(&dir, pid) else {
                continue;
            };
            let member = below_member
                || rooted.roots(&p)
                || match mark(&dir, rooted.want) {
                    Mark::Ours => true,
                    Mark::Theirs => continue,
                    Mark::Unmarked => false,
                };
            if member {
                walk.found.push(p);
            }
            todo.extend(walk.children(pid).into_iter().map(|c| (c, member)));
        }
        Some(walk)
    }

    /// The children of every thread of `pid`, each list kept to be read again.
    fn children(&mut self, pid: i32) -> Vec<i32> {
        let tasks = proc_dir(pid).join("task");
        let tids = thread_ids(&tasks).unwrap_or_default();
        let mut kids = Vec::new();
        for tid in &tids {
            let path = tasks.join(tid.to_string()).join("children");
            let text = read_whole(&path);
            kids.extend(
                String::from_utf8_lossy(text.as_deref().unwrap_or_default())
                    .split_whitespace()
                    .filter_map(|c| c.parse::<i32>().ok()),
            );
            self.lists.push(Seen::Children(path, text));
        }
        self.lists.push(Seen::Threads(tasks, tids));
        kids
    }
}

/// The thread ids listed in a `/proc/PID/task` directory; `None` when it cannot be read.
fn thread_ids(tasks: &Path) -> Option<Vec<i32>> {
    let entries = std::fs::read_dir(tasks).ok()?;
    Some(
        entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect(),
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::agent::tracked::signal_all;
    use nix::sys::signal::Signal;

    /// Whether this kernel has the `children` files the walk reads.
    fn children_files() -> bool {
        let nothing = Rooted {
            want: b"",
            pgid: 0,
            known: &[],
        };
        Walk::read(&nothing).is_some()
    }

    /// `sh -c script` with `token`, leading a group of its own.
    pub(crate) fn spawn(token: &str, script: &str) -> std::process::Child {
        use std::os::unix::process::CommandExt;
        let mut c = std::process::Command::new("sh");
        c.args(["-c", script])
            .env(GROUP_VAR, token)
            .process_group(0);
        c.spawn().unwrap()
    }

    #[test]
    fn our_descendants_are_found_as_a_walk_of_every_process_finds_them() {
        if !children_files() {
            return; // No `children` files in this kernel: the walk is used.
        }
        let mut c = spawn(
            "t-below",
            "setsid sleep 30 & env -u TASKDAEMON_GROUP sleep 30 & wait",
        );
        let t = Instant::now();
        let pids = |below: bool| {
            let mut v: Vec<i32> = tree("t-below", 0, below, &[])
                .iter()
                .map(|p| p.pid)
                .collect();
            v.sort();
            v
        };
        while pids(false).len() < 3 && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let everywhere = pids(false);
        assert_eq!(everywhere.len(), 3, "{everywhere:?}");
        assert_eq!(pids(true), everywhere);
        signal_all(&everywhere, Signal::SIGKILL);
        let _ = c.wait();
    }

    #[test]
    fn a_process_in_the_middle_of_an_exec_still_carries_its_token() {
        // It runs `exec` 2000 times over (each is a moment with no environment to read),
        // then sleeps: every read until then must find the token.
        let script = r#"n=${N:-0}; if [ "$n" -lt 2000 ]; then export N=$((n+1)); exec /bin/sh -c "$S"; fi; exec sleep 30"#;
        let mut c = std::process::Command::new("/bin/sh");
        c.args(["-c", script])
            .env(GROUP_VAR, "t-exec")
            .env("S", script);
        let mut c = c.spawn().unwrap();
        let dir = PathBuf::from(format!("/proc/{}", c.id()));
        let want = format!("{GROUP_VAR}=t-exec");
        let asleep = |dir: &Path| {
            std::fs::read(dir.join("cmdline")).unwrap_or_default() == b"sleep\x0030\x00"
        };
        let (mut reads, mut missed) = (0, 0);
        while !asleep(&dir) {
            if !has_token(&dir, want.as_bytes()) {
                missed += 1;
            }
            reads += 1;
        }
        assert!(reads > 100, "only {reads} reads");
        assert_eq!(missed, 0, "{missed} of {reads} reads missed the token");
        assert!(has_token(&dir, want.as_bytes()));
        let _ = c.kill();
        let _ = c.wait();
        // An environment emptied on purpose carries nothing.
        let mut e = spawn("t-exec", "exec env -i sleep 30");
        let dir = PathBuf::from(format!("/proc/{}", e.id()));
        let t = Instant::now();
        while !asleep(&dir) && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(!has_token(&dir, want.as_bytes()));
        let _ = e.kill();
        let _ = e.wait();
    }

    #[test]
    fn the_tree_holds_descendants_without_the_token() {
        let mut c = spawn("t-tree", "env -u TASKDAEMON_GROUP sleep 30 & wait");
        let leader = c.id() as i32;
        let t = Instant::now();
        let mut found = Vec::new();
        while found.len() < 2 && t.elapsed() < Duration::from_secs(5) {
            // Not by its group: only by token and parentage.
            found = tree("t-tree", 0, false, &[]);
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(found.iter().any(|p| p.pid == leader), "{found:?}");
        assert_eq!(found.len(), 2, "{found:?}");
        signal_all(
            &found.iter().map(|p| p.pid).collect::<Vec<_>>(),
            Signal::SIGKILL,
        );
        let _ = c.wait();
    }

    fn sleeper(token: Option<&str>) -> std::process::Child {
        let mut c = std::process::Command::new("sleep");
        c.arg("30");
        if let Some(t) = token {
            c.env(GROUP_VAR, t);
        }
        c.spawn().unwrap()
    }

    #[test]
    fn a_carrier_below_a_process_that_dropped_the_token_is_found() {
        // X forks a carrier, then drops the token (`exec env -u`); once X's parent exits, X
        // is our child (we are the subreaper) and carries nothing: the carrier below it is
        // in the tree all the same, as a walk of every process finds it.
        let _ = crate::agent::become_subreaper();
        if !children_files() {
            return;
        }
        let script = "setsid sh -c 'sleep 30 & exec env -u TASKDAEMON_GROUP sleep 30' & sleep 0.3";
        let mut c = spawn("t-dropped", script);
        let _ = c.wait();
        let t = Instant::now();
        let mut found = carriers("t-dropped");
        while found.len() != 1 && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
            found = carriers("t-dropped");
        }
        assert_eq!(found.len(), 1, "{found:?}");
        let x = read_proc(found[0]).unwrap().ppid;
        assert_eq!(read_proc(x).unwrap().ppid, std::process::id() as i32);
        let pids = |below: bool| {
            let v: Vec<i32> = tree("t-dropped", 0, below, &[])
                .iter()
                .map(|p| p.pid)
                .collect();
            v
        };
        assert_eq!(pids(false), found);
        assert_eq!(pids(true), found);
        // Known (seen in the tree before), X counts with what is below it.
        let x_start = read_proc(x).unwrap().start;
        let mut with_x = tree("t-dropped", 0, true, &[(x, x_start)]);
        with_x.sort_by_key(|p| p.pid);
        let mut expected = vec![x, found[0]];
        expected.sort();
        assert_eq!(with_x.iter().map(|p| p.pid).collect::<Vec<_>>(), expected);
        signal_all(&expected, Signal::SIGKILL);
        for p in expected {
            let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(p), None);
        }
    }

    #[test]
    fn a_kernel_thread_is_not_waited_for_as_a_process_in_an_exec() {
        // As older kernels show one: `environ` reads empty and `stat` has no environment,
        // as in the middle of an `exec`; only its flags tell.
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("environ"), "").unwrap();
        let stat = |flags: u64| {
            let mut f = vec!["S".to_string(), "0".into(), "0".into(), "0".into()];
            f.extend(["0".into(), "-1".into(), flags.to_string()]);
            f.resize(52, "0".into());
            format!("2 (kthreadd) {}\n", f.join(" "))
        };
        // A process in an exec: asked again until EXEC_WAIT has passed.
        std::fs::write(d.path().join("stat"), stat(0x40)).unwrap();
        assert_eq!(env_span(d.path()), Some((0, 0)));
        assert!(!has_token(d.path(), b"TASKDAEMON_GROUP=x"));
        // A kernel thread: nothing to wait for (`None` ends the asking at once).
        std::fs::write(d.path().join("stat"), stat(PF_KTHREAD | 0x40)).unwrap();
        assert_eq!(env_span(d.path()), None);
        assert!(!has_token(d.path(), b"TASKDAEMON_GROUP=x"));
    }

    #[test]
    fn a_walk_is_not_trusted_once_a_list_it_read_has_changed() {
        if !children_files() {
            return;
        }
        let want = token_entry("t-changed");
        let holds = |w: &Walk| w.lists.iter().all(Seen::still_holds);
        let rooted = Rooted {
            want: &want,
            pgid: 0,
            known: &[],
        };
        let before = Walk::read(&rooted).unwrap();
        // A process that joins a list already read (as one re-parented to us would).
        let mut late = sleeper(Some("t-changed"));
        assert!(!holds(&before));
        let with = Walk::read(&rooted).unwrap();
        assert!(with.found.iter().any(|p| p.pid == late.id() as i32));
        // One that leaves it (a list read while it did may have skipped another).
        let _ = late.kill();
        let _ = late.wait();
        assert!(!holds(&with));
    }

    #[test]
    fn members_are_found_while_other_children_of_ours_come_and_go() {
        // Children of ours leave the lists the members are in while they are read (as
        // other loops' processes do in a daemon): no walk may miss a member.
        let (mut others, mut members) = (Vec::new(), Vec::new());
        for _ in 0..300 {
            others.push(sleeper(None));
            members.push(sleeper(Some("t-churn")));
        }
        let t = Instant::now();
        while tree("t-churn", 0, true, &[]).len() < members.len() {
            assert!(t.elapsed() < Duration::from_secs(5), "not all started");
        }
        // Several at once: the lists change faster than one process can be reaped.
        let pids: Vec<u32> = others.iter().map(|o| o.id()).collect();
        let reapers: Vec<_> = pids
            .chunks(pids.len().div_ceil(4))
            .map(|chunk| {
                let chunk = chunk.to_vec();
                std::thread::spawn(move || {
                    for pid in chunk {
                        let pid = nix::unistd::Pid::from_raw(pid as i32);
                        let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
                        let _ = nix::sys::wait::waitpid(pid, None);
                    }
                })
            })
            .collect();
        let (mut walks, mut missed) = (0, 0);
        while reapers.iter().any(|r| !r.is_finished()) {
            missed += members.len() - tree("t-churn", 0, true, &[]).len();
            walks += 1;
        }
        for m in &mut members {
            let _ = m.kill();
            let _ = m.wait();
        }
        assert!(walks > 0);
        assert_eq!(missed, 0, "{missed} members missed in {walks} walks");
    }
}
