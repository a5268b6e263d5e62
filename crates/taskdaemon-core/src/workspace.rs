//! Typed access to the `.ralph/` files that agent and harness share. Every write is atomic.

use std::path::{Path, PathBuf};

use crate::fsutil::{create_dir_confined, read_optional, write_atomic};

/// Files in `.ralph/` that git must ignore: logs, escalations, runtime state. `init` puts
/// them in `.gitignore`; `run` puts any that are missing in `.git/info/exclude`, so an
/// agent's `git add -A` never commits them.
pub const IGNORED: &[&str] = &[
    ".ralph/logs/",
    ".ralph/blocked.txt",
    ".ralph/decide.txt",
    ".ralph/run.json",
    ".ralph/run.lock",
    ".ralph/requirements.json",
    ".ralph/status.txt",
    ".ralph/iteration.txt",
    // Logs exported from `watch` (`e`).
    ".ralph/exports/",
    // `archive` moves the same runtime files aside: they stay out of commits there too.
    ".ralph/archive/*/logs/",
    ".ralph/archive/*/blocked.txt",
    ".ralph/archive/*/decide.txt",
    ".ralph/archive/*/run.json",
    ".ralph/archive/*/requirements.json",
    ".ralph/archive/*/status.txt",
    ".ralph/archive/*/iteration.txt",
];

/// Paths of one work tree's `.ralph/` directory.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// A refused link says its path already (`refusing to use PATH: …`).
    #[error("{}", if crate::fsutil::is_refused_link(.source) { source.to_string() } else { format!("{}: {source}", path.display()) })]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "a loop is already running in {dir} (lock {lock} is held)\n  hint: wait for it, or stop it with Ctrl-C in its terminal"
    )]
    Busy { dir: PathBuf, lock: PathBuf },
    #[error(
        "nothing to answer: {0} does not exist\n  hint: `taskdaemon answer` replies to a DECIDE question the agent asked"
    )]
    NoQuestion(PathBuf),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> WorkspaceError + '_ {
    move |source| WorkspaceError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl Workspace {
    /// The workspace of the work tree at `dir`.
    pub fn new(dir: &Path) -> Workspace {
        Workspace {
            root: dir.join(".ralph"),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn logs_dir(&self) -> PathBuf {
        self.root.join("logs")
    }
    /// `exports/`: logs a person exported from `watch` (ignored by git).
    pub fn exports_dir(&self) -> PathBuf {
        self.root.join("exports")
    }
    /// `logs/runs/`: a directory per earlier run, out of `logs/` itself, which a run's start
    /// lists (a long-lived project has thousands of earlier runs).
    pub fn earlier_runs_dir(&self) -> PathBuf {
        earlier_runs_in(&self.logs_dir())
    }
    /// Where the earlier run `name` (a plain name, [`is_plain_name`]) keeps its logs and
    /// state: `logs/runs/<name>/`, and `logs/<name>/` where a build before that layout put
    /// them (the existing ones, in that order).
    pub fn earlier_run_logs(&self, name: &str) -> Vec<PathBuf> {
        earlier_run_dirs(&self.logs_dir(), name)
    }
    /// Move the `iteration-*` files of an earlier run into `logs/runs/<name>/`, so the next
    /// run's logs start fresh and nothing is overwritten, and remove the temporary files of
    /// atomic writes (`.tmp-*`) a kill left there: one listing of `logs/`, at a new run's
    /// start, under its lock. `name` is an earlier run's id, read from a file in the
    /// repository: one that is not a plain name ([`is_plain_name`]) is refused.
    pub fn set_aside_logs(&self, name: &str) -> std::io::Result<SetAside> {
        let dest = self.set_aside_dir(name)?;
        // Nothing is moved or removed through a link that leads out of the repository.
        crate::fsutil::confine(&self.logs_dir().join(".probe"))?;
        let mut done = SetAside::default();
        for e in std::fs::read_dir(self.logs_dir())
            .into_iter()
            .flatten()
            .flatten()
        {
            let file = e.file_name();
            let bytes = file.as_encoded_bytes();
            if bytes.starts_with(b"iteration-") {
                if !done.moved {
                    crate::fsutil::create_dir_confined(&dest)?;
                }
                std::fs::rename(e.path(), dest.join(&file))?;
                done.moved = true;
            } else if is_temp_file(&e) && std::fs::remove_file(e.path()).is_ok() {
                done.removed_temps += 1;
            }
        }
        Ok(done)
    }

    /// Remove the temporary files of atomic writes (`.tmp-*`) a kill left in `logs/` (a
    /// new run with no earlier one to set aside, or a resumed one). How many went.
    pub fn remove_log_temps(&self) -> usize {
        remove_temps_in(&self.logs_dir())
    }

    /// The same in `.ralph/` itself.
    pub fn remove_root_temps(&self) -> usize {
        remove_temps_in(&self.root)
    }

    /// Move `run.json` (an earlier run's, `name` its id) beside that run's logs, as
    /// `logs/runs/<name>/run.json`: the next run's first record then takes a free name
    /// instead of replacing (and freeing) a file.
    pub fn set_aside_state(&self, name: &str) -> std::io::Result<()> {
        let dest = self.set_aside_dir(name)?;
        crate::fsutil::create_dir_confined(&dest)?;
        std::fs::rename(self.run_state(), dest.join("run.json"))
    }

    fn set_aside_dir(&self, name: &str) -> std::io::Result<PathBuf> {
        if !is_plain_name(name) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("`{name}` is not a run id (a run id is one plain file name)"),
            ));
        }
        Ok(self.earlier_runs_dir().join(name))
    }

    pub fn summary_csv(&self) -> PathBuf {
        self.logs_dir().join("summary.csv")
    }
    pub fn iteration_log(&self, n: u32) -> PathBuf {
        self.logs_dir().join(format!("iteration-{n:03}.log"))
    }
    pub fn prompt_file(&self, n: u32) -> PathBuf {
        self.logs_dir().join(format!("iteration-{n:03}.prompt.md"))
    }
    pub fn blocked_file(&self) -> PathBuf {
        self.root.join("blocked.txt")
    }
    pub fn decide_file(&self) -> PathBuf {
        self.root.join("decide.txt")
    }
    pub fn decisions_dir(&self) -> PathBuf {
        self.root.join("decisions")
    }
    pub fn run_state(&self) -> PathBuf {
        self.root.join("run.json")
    }
    pub fn lock_file(&self) -> PathBuf {
        self.root.join("run.lock")
    }
    /// Notes the agent keeps for its next fresh iteration (`current-state`).
    pub fn progress_notes(&self) -> PathBuf {
        self.root.join("progress.md")
    }
    /// `.ralph/task.md`, as the task parser wrote it.
    pub fn read_task_md(&self) -> Result<Option<String>, WorkspaceError> {
        let p = self.root.join("task.md");
        read_optional(&p).map_err(io(&p))
    }
    /// The harness's feedback to the agent (gates, stall recovery).
    pub fn feedback_file(&self) -> PathBuf {
        self.root.join("feedback.md")
    }
    pub fn read_feedback(&self) -> Result<Option<String>, WorkspaceError> {
        let p = self.feedback_file();
        read_optional(&p).map_err(io(&p))
    }
    pub fn write_feedback(&self, text: &str) -> Result<(), WorkspaceError> {
        let p = self.feedback_file();
        write_atomic(&p, text.as_bytes()).map_err(io(&p))
    }
    pub fn archive_dir(&self) -> PathBuf {
        self.root.join("archive")
    }

    /// Hold the run lock of this directory; released when the returned guard drops. Two
    /// files are locked: `.ralph/run.lock`, which `cancel` and `status` read, and the same
    /// directory's lock in the git directory ([`Workspace::git_lock_file`]), which an agent
    /// that deletes `.ralph/` cannot take away: a second loop still finds the directory busy.
    pub fn lock(&self) -> Result<RunLock, WorkspaceError> {
        let path = self.lock_file();
        create_dir_confined(&self.root).map_err(io(&self.root))?;
        // Never through a link: a committed `run.lock -> ~/file` would be truncated.
        let lock = self.take(&path)?;
        let git = match self.git_lock_file() {
            Some(git) => Some(self.take(&git)?),
            None => None,
        };
        Ok(RunLock {
            _lock: lock,
            _git: git,
        })
    }

    fn take(&self, path: &Path) -> Result<crate::pidlock::PidLock, WorkspaceError> {
        match crate::pidlock::acquire(path) {
            Ok(l) => Ok(l),
            Err(crate::pidlock::LockError::Held(_)) => Err(WorkspaceError::Busy {
                dir: self.root.parent().unwrap_or(&self.root).to_path_buf(),
                lock: path.to_path_buf(),
            }),
            Err(crate::pidlock::LockError::Io(e)) => Err(io(path)(e)),
        }
    }

    /// The run lock of this directory in its repository's git directory:
    /// `<git-dir>/taskdaemon/run-locks/<hash of the directory>` ([`crate::git::keyed_private`];
    /// loops may run in several directories of one work tree). `None` outside a repository.
    pub fn git_lock_file(&self) -> Option<PathBuf> {
        let dir = self.root.parent()?;
        // Keyed by the real path: `sub`, `./sub/` and `/abs/sub` are one directory.
        let real = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
        crate::git::keyed_private(&real, &real, "run-locks").ok()
    }

    /// Whether a loop holds the lock right now.
    pub fn is_locked(&self) -> bool {
        self.holder().is_some()
    }

    /// The pid of the loop holding the lock (`Some(None)`: held, pid unreadable).
    pub fn holder(&self) -> Option<Option<i32>> {
        crate::pidlock::holder(&self.lock_file())
            .or_else(|| crate::pidlock::holder(&self.git_lock_file()?))
    }

    pub fn read_blocked(&self) -> Result<Option<String>, WorkspaceError> {
        let p = self.blocked_file();
        read_optional(&p).map_err(io(&p))
    }

    /// blocked.txt of `stopped`'s loop: the reason and the command that continues it.
    pub fn write_blocked(
        &self,
        stopped: StoppedLoop,
        reason: &str,
        iteration: u32,
        at: &str,
    ) -> Result<(), WorkspaceError> {
        let p = self.blocked_file();
        let text = format!(
            "BLOCKED (iteration {iteration}, {at})\nreason: {reason}\n\nResolve it, then run `taskdaemon unblock` and `{}`.\n",
            stopped.continue_command()
        );
        write_atomic(&p, text.as_bytes()).map_err(io(&p))
    }

    pub fn remove_blocked(&self) -> Result<Option<String>, WorkspaceError> {
        let old = self.read_blocked()?;
        if old.is_some() {
            let p = self.blocked_file();
            std::fs::remove_file(&p).map_err(io(&p))?;
        }
        Ok(old)
    }

    pub fn read_decide(&self) -> Result<Option<DecideFile>, WorkspaceError> {
        let p = self.decide_file();
        Ok(read_optional(&p)
            .map_err(io(&p))?
            .map(|t| DecideFile::parse(&t)))
    }

    /// The question in spec 2's format, with an empty answer section below `---`.
    /// A work list's heading also names its command (`of `taskdaemon implement``), so
    /// `answer` can say what continues it; a `run`'s keeps spec 2's plain heading.
    pub fn write_decide(
        &self,
        stopped: StoppedLoop,
        question: &str,
        iteration: u32,
        at: &str,
    ) -> Result<(), WorkspaceError> {
        let p = self.decide_file();
        let of = match stopped {
            StoppedLoop::Run => String::new(),
            other => format!(" of `{}`", other.continue_command()),
        };
        let text = format!(
            "## Question (from iteration {iteration}{of}, {at})\n{question}\n\n---\n## Answer\n"
        );
        write_atomic(&p, text.as_bytes()).map_err(io(&p))
    }

    /// The task parser's question about a new task's `message` (spec 1 §5
    /// needs-clarification), in the same format; the message is kept so that
    /// `taskdaemon task` can start it once the question is answered.
    pub fn write_parser_decide(
        &self,
        question: &str,
        message: &str,
        at: &str,
    ) -> Result<(), WorkspaceError> {
        let p = self.decide_file();
        let quoted: String = message
            .trim_end()
            .lines()
            .map(|l| format!("> {l}\n"))
            .collect();
        let text = format!(
            "{PARSER_QUESTION_HEADING}, {at})\n{question}\n\n{TASK_MESSAGE_HEADING}\n{quoted}\n---\n## Answer\n"
        );
        write_atomic(&p, text.as_bytes()).map_err(io(&p))
    }

    /// Write `answer` below the `---` of decide.txt (replacing an earlier answer).
    pub fn answer(&self, answer: &str) -> Result<DecideFile, WorkspaceError> {
        let p = self.decide_file();
        let Some(text) = read_optional(&p).map_err(io(&p))? else {
            return Err(WorkspaceError::NoQuestion(p));
        };
        let above = match text
            .rfind("\n---\n## Answer")
            .or_else(|| text.rfind("\n---\n"))
        {
            Some(i) => &text[..i],
            None => text.trim_end(),
        };
        let new = format!(
            "{}\n\n---\n## Answer\n{}\n",
            above.trim_end(),
            answer.trim()
        );
        write_atomic(&p, new.as_bytes()).map_err(io(&p))?;
        Ok(DecideFile::parse(&new))
    }

    /// Move an answered decide.txt into `.ralph/decisions/` (kept, tracked by git).
    pub fn archive_decide(&self, stamp: &str) -> Result<Option<PathBuf>, WorkspaceError> {
        let p = self.decide_file();
        let Some(text) = read_optional(&p).map_err(io(&p))? else {
            return Ok(None);
        };
        let dest = self.decisions_dir().join(format!("decide-{stamp}.md"));
        write_atomic(&dest, text.as_bytes()).map_err(io(&dest))?;
        std::fs::remove_file(&p).map_err(io(&p))?;
        Ok(Some(dest))
    }

    pub fn read_progress_notes(&self) -> Result<Option<String>, WorkspaceError> {
        let p = self.progress_notes();
        read_optional(&p).map_err(io(&p))
    }
}

/// A held run lock.
#[derive(Debug)]
pub struct RunLock {
    _lock: crate::pidlock::PidLock,
    _git: Option<crate::pidlock::PidLock>,
}

/// The loop that stopped BLOCKED or with a question: it decides which command continues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoppedLoop {
    /// `run`/`task` (the engine's own loop in this work tree).
    Run,
    /// `implement` (a spec's tasks.md).
    Implement,
    /// `stories` (a stories file).
    Stories,
}

impl StoppedLoop {
    /// The command's name (`run`, `implement`, `stories`).
    pub fn name(self) -> &'static str {
        match self {
            StoppedLoop::Run => "run",
            StoppedLoop::Implement => "implement",
            StoppedLoop::Stories => "stories",
        }
    }

    /// What a person runs to continue the loop once unblocked or answered.
    pub fn continue_command(self) -> &'static str {
        match self {
            StoppedLoop::Run => "taskdaemon run --resume",
            StoppedLoop::Implement => "taskdaemon implement",
            StoppedLoop::Stories => "taskdaemon stories",
        }
    }

    /// The loop whose blocked.txt or decide.txt `text` is (files written before the work
    /// lists named their command are `run`'s).
    pub fn of_file(text: &str) -> StoppedLoop {
        let first = text.lines().next().unwrap_or_default();
        let blocked_hint = text
            .lines()
            .rev()
            .find(|l| l.starts_with("Resolve it, then run"))
            .unwrap_or_default();
        [StoppedLoop::Implement, StoppedLoop::Stories]
            .into_iter()
            .find(|l| {
                let cmd = format!("`{}`", l.continue_command());
                first.contains(&cmd) || blocked_hint.contains(&cmd)
            })
            .unwrap_or(StoppedLoop::Run)
    }
}

/// How a question of the task parser starts.
const PARSER_QUESTION_HEADING: &str = "## Question (from the task parser";
/// Where the message of the task the parser asked about is quoted.
const TASK_MESSAGE_HEADING: &str = "### Task message";

/// decide.txt: the agent's (or the task parser's) question and, once a person wrote one,
/// the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecideFile {
    pub question: String,
    pub answer: Option<String>,
    /// Set when the task parser asked, before a task started: that task's message.
    pub task_message: Option<String>,
    /// The loop that asked (what continues it once answered).
    pub stopped: StoppedLoop,
}

impl DecideFile {
    pub fn parse(text: &str) -> DecideFile {
        // The question may contain `---` itself: split at the answer section the harness
        // wrote, else at the last separator.
        let split = text
            .rfind("\n---\n## Answer")
            .or_else(|| text.rfind("\n---\n"));
        let (above, below) = match split {
            Some(i) => (&text[..i], Some(&text[i + 5..])),
            None => (text, None),
        };
        let from_parser = above.starts_with(PARSER_QUESTION_HEADING);
        let (above, task_message) = match above.find(&format!("\n{TASK_MESSAGE_HEADING}\n")) {
            Some(i) if from_parser => {
                let quoted = &above[i + TASK_MESSAGE_HEADING.len() + 2..];
                let message = quoted
                    .lines()
                    .map(|l| {
                        l.strip_prefix("> ")
                            .or_else(|| l.strip_prefix('>'))
                            .unwrap_or(l)
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
                    .trim()
                    .to_string();
                (&above[..i], Some(message).filter(|m| !m.is_empty()))
            }
            _ => (above, None),
        };
        let question = above
            .lines()
            .filter(|l| !l.starts_with("## Question"))
            .collect::<Vec<_>>()
            .join("\n")
            .trim()
            .to_string();
        let answer = below
            .map(|b| {
                b.lines()
                    .filter(|l| l.trim() != "## Answer")
                    .collect::<Vec<_>>()
                    .join("\n")
                    .trim()
                    .to_string()
            })
            .filter(|a| !a.is_empty());
        DecideFile {
            question,
            answer,
            task_message,
            stopped: StoppedLoop::of_file(text),
        }
    }
}

/// What [`Workspace::set_aside_logs`] did: whether an earlier run's logs moved, and how
/// many temporary files of unfinished writes it removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SetAside {
    pub moved: bool,
    pub removed_temps: usize,
}

/// `<logs>/runs/`, where earlier runs' directories go (`logs` a `.ralph/logs/`, also one
/// kept elsewhere).
pub fn earlier_runs_in(logs: &Path) -> PathBuf {
    logs.join("runs")
}

/// The directories of the earlier run `name` under `logs` that exist: `runs/<name>/`, then
/// the `<name>/` of the layout before (a run set aside across an upgrade may have its
/// logs in one and its state in the other); none for a name that is not plain.
pub fn earlier_run_dirs(logs: &Path, name: &str) -> Vec<PathBuf> {
    if !is_plain_name(name) {
        return Vec::new();
    }
    [earlier_runs_in(logs).join(name), logs.join(name)]
        .into_iter()
        .filter(|d| std::fs::symlink_metadata(d).is_ok_and(|m| m.is_dir()))
        .collect()
}

/// A regular file named `.tmp-*`: what an atomic write leaves when killed before its rename.
fn is_temp_file(e: &std::fs::DirEntry) -> bool {
    e.file_name().as_encoded_bytes().starts_with(b".tmp-")
        && e.file_type().is_ok_and(|t| t.is_file())
}

fn remove_temps_in(dir: &Path) -> usize {
    // Never through a link that leads out of the repository (the run refuses it later).
    if crate::fsutil::confine(&dir.join(".probe")).is_err() {
        return 0;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| is_temp_file(e) && std::fs::remove_file(e.path()).is_ok())
        .count()
}

/// A name that is one plain path component: not empty, no `/`, not `.` or `..` and not
/// hidden (a run id read from a repository's files is untrusted).
pub fn is_plain_name(name: &str) -> bool {
    !name.is_empty() && !name.starts_with('.') && !name.contains(['/', '\0'])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_earlier_runs_logs_and_state_are_set_aside_under_its_plain_id_only() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join(".git")).unwrap();
        let ws = Workspace::new(d.path());
        std::fs::create_dir_all(ws.logs_dir()).unwrap();
        std::fs::write(ws.iteration_log(1), "log 1").unwrap();
        std::fs::write(ws.prompt_file(1), "prompt 1").unwrap();
        std::fs::write(ws.summary_csv(), "rows").unwrap();
        std::fs::write(ws.run_state(), "{}").unwrap();
        // What a killed atomic write left goes in the same listing; a directory so named
        // is no such file and stays.
        std::fs::write(ws.logs_dir().join(".tmp-a1"), "half").unwrap();
        std::fs::create_dir(ws.logs_dir().join(".tmp-dir")).unwrap();
        let done = ws.set_aside_logs("r1").unwrap();
        assert_eq!(
            done,
            SetAside {
                moved: true,
                removed_temps: 1
            }
        );
        assert!(!ws.logs_dir().join(".tmp-a1").exists());
        assert!(ws.logs_dir().join(".tmp-dir").is_dir());
        ws.set_aside_state("r1").unwrap();
        let dest = ws.logs_dir().join("runs/r1");
        assert_eq!(ws.earlier_run_logs("r1"), std::slice::from_ref(&dest));
        assert_eq!(
            std::fs::read_to_string(dest.join("iteration-001.log")).unwrap(),
            "log 1"
        );
        assert_eq!(
            std::fs::read_to_string(dest.join("run.json")).unwrap(),
            "{}"
        );
        assert!(!ws.run_state().exists() && !ws.iteration_log(1).exists());
        // What all runs share stays.
        assert_eq!(std::fs::read_to_string(ws.summary_csv()).unwrap(), "rows");
        // Nothing left to move: nothing moves, nothing is made.
        assert_eq!(ws.set_aside_logs("r2").unwrap(), SetAside::default());
        assert!(!ws.earlier_runs_dir().join("r2").exists());
        assert!(ws.earlier_run_logs("r2").is_empty());
        // A run a build before this layout set aside is found where it put it.
        std::fs::create_dir(ws.logs_dir().join("r0")).unwrap();
        assert_eq!(ws.earlier_run_logs("r0"), [ws.logs_dir().join("r0")]);
        std::fs::create_dir_all(ws.earlier_runs_dir().join("r0")).unwrap();
        assert_eq!(
            ws.earlier_run_logs("r0"),
            [ws.earlier_runs_dir().join("r0"), ws.logs_dir().join("r0")]
        );
        assert!(ws.earlier_run_logs("../r0").is_empty());
        // An id from a crafted run.json never leads elsewhere in the tree.
        std::fs::write(ws.iteration_log(1), "log 2").unwrap();
        std::fs::write(ws.run_state(), "{}").unwrap();
        for bad in ["../../src", "..", ".", "", "a/b", ".hidden"] {
            assert!(!is_plain_name(bad), "{bad}");
            assert!(ws.set_aside_logs(bad).is_err(), "{bad}");
            assert!(ws.set_aside_state(bad).is_err(), "{bad}");
        }
        assert!(ws.iteration_log(1).exists() && ws.run_state().exists());
        assert!(is_plain_name("20261129T103805-251b7888"));
    }

    #[test]
    fn each_loop_is_told_its_own_continue_command() {
        let d = tempfile::tempdir().unwrap();
        let ws = Workspace::new(d.path());
        for l in [
            StoppedLoop::Run,
            StoppedLoop::Implement,
            StoppedLoop::Stories,
        ] {
            ws.write_blocked(l, "no key", 2, "t").unwrap();
            let text = ws.read_blocked().unwrap().unwrap();
            assert!(text.contains(l.continue_command()), "{text}");
            assert_eq!(StoppedLoop::of_file(&text), l);
            ws.write_decide(l, "a or b?", 3, "t").unwrap();
            let d = ws.answer("a").unwrap();
            assert_eq!(d.stopped, l);
            assert_eq!(d.question, "a or b?");
        }
        // A run's question keeps spec 2's plain heading.
        ws.write_decide(StoppedLoop::Run, "q", 1, "t").unwrap();
        let text = std::fs::read_to_string(ws.decide_file()).unwrap();
        assert!(
            text.starts_with("## Question (from iteration 1, t)\n"),
            "{text}"
        );
    }

    #[test]
    fn decide_round_trip() {
        let d = tempfile::tempdir().unwrap();
        let ws = Workspace::new(d.path());
        ws.write_decide(
            StoppedLoop::Run,
            "WebSockets or polling?",
            7,
            "2026-11-21T12:00:00Z",
        )
        .unwrap();
        let f = ws.read_decide().unwrap().unwrap();
        assert_eq!(f.question, "WebSockets or polling?");
        assert_eq!(f.answer, None);
        ws.answer("Polling for now.").unwrap();
        let text = std::fs::read_to_string(ws.decide_file()).unwrap();
        assert!(text.starts_with("## Question (from iteration 7, 2026-11-21T12:00:00Z)\n"));
        assert!(text.contains("\n---\n## Answer\nPolling for now.\n"));
        assert_eq!(
            ws.read_decide().unwrap().unwrap().answer.as_deref(),
            Some("Polling for now.")
        );
        let dest = ws.archive_decide("1").unwrap().unwrap();
        assert!(dest.exists() && !ws.decide_file().exists());
    }

    #[test]
    fn a_question_with_a_rule_in_it_does_not_answer_itself() {
        let d = tempfile::tempdir().unwrap();
        let ws = Workspace::new(d.path());
        ws.write_decide(StoppedLoop::Run, "Option A\n---\nOption B", 1, "t")
            .unwrap();
        let f = ws.read_decide().unwrap().unwrap();
        assert_eq!(
            (f.question.as_str(), f.answer),
            ("Option A\n---\nOption B", None)
        );
        ws.answer("B").unwrap();
        let f = ws.read_decide().unwrap().unwrap();
        assert_eq!(
            (f.question.as_str(), f.answer.as_deref()),
            ("Option A\n---\nOption B", Some("B"))
        );
    }

    #[test]
    fn a_parser_question_keeps_the_task_message() {
        let d = tempfile::tempdir().unwrap();
        let ws = Workspace::new(d.path());
        ws.write_parser_decide("add or convert?", "make some drinks\nnighttime", "t")
            .unwrap();
        let text = std::fs::read_to_string(ws.decide_file()).unwrap();
        assert_eq!(
            text,
            "## Question (from the task parser, t)\nadd or convert?\n\n### Task message\n> make some drinks\n> nighttime\n\n---\n## Answer\n"
        );
        let f = ws.read_decide().unwrap().unwrap();
        assert_eq!(f.question, "add or convert?");
        assert_eq!(
            f.task_message.as_deref(),
            Some("make some drinks\nnighttime")
        );
        assert_eq!(f.answer, None);
        let f = ws.answer("add 2 new ones").unwrap();
        assert_eq!(f.answer.as_deref(), Some("add 2 new ones"));
        assert_eq!(
            f.task_message.as_deref(),
            Some("make some drinks\nnighttime")
        );
        // An agent's question is never read as the parser's.
        ws.write_decide(StoppedLoop::Run, "### Task message\n> x", 1, "t")
            .unwrap();
        assert_eq!(ws.read_decide().unwrap().unwrap().task_message, None);
    }

    #[test]
    fn a_symlinked_run_lock_leaves_its_target_untouched() {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path().join("repo");
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        std::fs::create_dir_all(repo.join(".ralph")).unwrap();
        let target = d.path().join("somefile");
        std::fs::write(&target, "precious\n").unwrap();
        std::os::unix::fs::symlink(&target, repo.join(".ralph/run.lock")).unwrap();
        let ws = Workspace::new(&repo);
        let e = ws.lock().unwrap_err().to_string();
        assert!(e.contains("run.lock") && e.contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious\n");
        std::fs::remove_file(repo.join(".ralph/run.lock")).unwrap();
        std::os::unix::fs::symlink(&target, repo.join(".ralph/progress.md")).unwrap();
        assert!(ws.read_progress_notes().is_err());
    }

    #[test]
    fn lock_is_exclusive() {
        let d = tempfile::tempdir().unwrap();
        let ws = Workspace::new(d.path());
        let held = ws.lock().unwrap();
        assert!(ws.is_locked());
        assert!(matches!(ws.lock(), Err(WorkspaceError::Busy { .. })));
        drop(held);
        assert!(!ws.is_locked());
        ws.lock().unwrap();
    }
}
