//! Durable file writes. Every file the harness writes goes through here: whole files are
//! written to a temp file in the same directory, fsynced and renamed over the target
//! (`write_atomic_volatile`: the same without the syncs, only for files whose meaning ends
//! with the processes that wrote them or that nothing is decided on after a crash of the
//! machine); append-only logs append one complete record per `write` call and sync it.
//!
//! **Symbolic links.** A repository is untrusted input: a committed `.ralph/run.lock ->
//! ~/somefile` must not make the harness write into the user's files. Every function here
//! refuses a path whose last component is a symbolic link (`O_NOFOLLOW`), and a path whose
//! directories resolve outside the work tree it lies in ([`confine`]). Links inside the
//! work tree that stay inside it (a `.ralph` pointing at another directory of the same
//! repository) are followed.
//!
//! **Modes.** A rewritten file keeps its permissions; a new one gets the umask's default
//! (`0666 & !umask`), as an editor or `git` would give it.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The error for a path the harness refuses to follow; names the path and what to do.
fn refused(path: &Path, why: &str) -> io::Error {
    refused_with(
        path,
        why,
        &format!(
            "taskdaemon never follows a symbolic link out of the repository; remove the link (`rm {}`) and run again",
            path.display()
        ),
    )
}

fn refused_with(path: &Path, why: &str, hint: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        Refused {
            path: path.to_path_buf(),
            why: why.to_string(),
            hint: hint.to_string(),
        },
    )
}

/// A path the harness refuses to follow (a symbolic link, or directories that resolve out
/// of the work tree): the repository's to fix, not the harness failing (exit 64). Carried
/// inside the `io::Error` the functions here return ([`is_refused_link`], [`refusal_in`]).
#[derive(Debug, thiserror::Error)]
#[error("refusing to use {}: {why}\n  hint: {hint}", path.display())]
pub struct Refused {
    pub path: PathBuf,
    pub why: String,
    pub hint: String,
}

/// Whether `err` is a refusal of [`confine`] or `O_NOFOLLOW` (for callers that report it).
pub fn is_refused_link(err: &io::Error) -> bool {
    err.get_ref().is_some_and(|e| e.is::<Refused>())
}

/// Whether a refusal ([`Refused`]) is `err` or one of its causes: an error that wraps the
/// `io::Error` of a refused path, however deep.
pub fn refusal_in(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if e.is::<Refused>() || e.downcast_ref::<io::Error>().is_some_and(is_refused_link) {
            return true;
        }
        cur = e.source();
    }
    false
}

/// The work tree `path` lies in: the nearest ancestor that holds a `.git` and is not
/// itself a symbolic link (git never checks out a `.git` entry, so a repository cannot
/// plant one). `None` outside any work tree.
fn work_tree_of(path: &Path) -> Option<PathBuf> {
    let mut cur = path.parent();
    while let Some(dir) = cur {
        let is_link = fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink());
        if !is_link && fs::symlink_metadata(dir.join(".git")).is_ok() {
            return Some(dir.to_path_buf());
        }
        cur = dir.parent();
    }
    None
}

/// Refuse `path` when its last component is a symbolic link, or when the directories it
/// lies in (as far as they exist) resolve outside the work tree that contains it.
/// Missing files and directories are fine: nothing is created here.
pub fn confine(path: &Path) -> io::Result<()> {
    let path = std::path::absolute(path)?;
    if fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(refused(&path, "it is a symbolic link"));
    }
    let Some(root) = work_tree_of(&path) else {
        return Ok(());
    };
    let Ok(root_real) = root_real_path(&root) else {
        return Ok(());
    };
    let mut dir = path.parent();
    while let Some(d) = dir {
        if let Ok(real) = real_path(d) {
            if !real.starts_with(&root_real) {
                return Err(refused_with(
                    &path,
                    &format!(
                        "{} leads to {}, outside the work tree {}",
                        d.display(),
                        real.display(),
                        root.display()
                    ),
                    "taskdaemon never writes out of the repository through a symbolic link or `..`; if a link leads there, remove it",
                ));
            }
            return Ok(());
        }
        if fs::symlink_metadata(d).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(refused(
                &path,
                &format!("{} is a link to nowhere", d.display()),
            ));
        }
        dir = d.parent();
    }
    Ok(())
}

/// What an existing directory resolves to, every link followed (`realpath`): the path the
/// kernel gives the directory it opened (`/proc/self/fd/N`), one open instead of a
/// `readlink` per component; `fs::canonicalize` when that answer is not a plain path (no
/// `/proc`) or the open failed for another reason than a missing path (`ENOTDIR`: a file,
/// which `realpath` resolves).
fn real_path(dir: &Path) -> io::Result<PathBuf> {
    use std::os::fd::AsRawFd;
    let opened = OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_PATH | nix::libc::O_DIRECTORY)
        .open(dir);
    match opened {
        Ok(f) => {
            if let Ok(p) = fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd()))
                && p.is_absolute()
                && !p.as_os_str().as_encoded_bytes().ends_with(b" (deleted)")
            {
                return Ok(p);
            }
        }
        // Not there (or a link to nowhere): `realpath` would only find the same.
        Err(e) if e.raw_os_error() == Some(nix::libc::ENOENT) => return Err(e),
        Err(_) => {}
    }
    fs::canonicalize(dir)
}

/// [`real_path`] of a work tree's top, remembered for the process: the directories below
/// it are resolved at each check, so a top moved or replaced since (by a link) only makes
/// them fail to resolve inside it, a refusal.
fn root_real_path(root: &Path) -> io::Result<PathBuf> {
    type Known = std::sync::Mutex<Vec<(PathBuf, PathBuf)>>;
    static KNOWN: Known = std::sync::Mutex::new(Vec::new());
    if let Some(real) = KNOWN.lock().ok().and_then(|k| {
        k.iter()
            .find(|(r, _)| r == root)
            .map(|(_, real)| real.clone())
    }) {
        return Ok(real);
    }
    let real = real_path(root)?;
    if let Ok(mut k) = KNOWN.lock()
        && k.len() < 64
    {
        k.push((root.to_path_buf(), real.clone()));
    }
    Ok(real)
}

/// Create `dir` (and its parents) after checking that it stays inside its work tree.
pub fn create_dir_confined(dir: &Path) -> io::Result<()> {
    confine(&dir.join(".probe"))?;
    fs::create_dir_all(dir)?;
    // Created now: check again what the new directories resolve to.
    confine(&dir.join(".probe"))
}

/// The directory of a file [`confine`] has just passed: when it exists, that check has
/// resolved it inside the work tree already; a missing one is created and checked.
fn ensure_parent(dir: &Path) -> io::Result<()> {
    if fs::metadata(dir).is_ok_and(|m| m.is_dir()) {
        return Ok(());
    }
    create_dir_confined(dir)
}

/// Write `contents` to `path` atomically: a reader sees the old file or the new one, never
/// a torn mix, and after a crash the new contents are on disk once this returned. An
/// existing file keeps its mode; a new one gets `0666 & !umask`.
pub fn write_atomic(path: &Path, contents: &[u8]) -> io::Result<()> {
    replace(path, contents, Some(PendingSyncs::default())).map(drop)
}

/// [`write_atomic`] without the syncs: a reader, and a process killed at any moment, see
/// the old file or the new one, but a crash of the machine may lose the new one. Only for
/// files whose meaning ends with the processes that wrote them (the records of running
/// process trees: after a reboot none of those processes exists), or that nothing is
/// decided on after such a crash (a run's start record, an iteration's prompt copy).
pub fn write_atomic_volatile(path: &Path, contents: &[u8]) -> io::Result<()> {
    replace(path, contents, None).map(drop)
}

/// [`write_atomic`] in two steps, for a writer with other work to do while the disk
/// catches up: the new file is in place when this returns (a reader, and a process killed
/// at any moment, see the old file or the new one), and on disk once [`Unsynced::sync`]
/// has returned. A crash of the machine before that may leave the old file, the new one,
/// or the new name with its contents missing: only for a file whose reader takes
/// contents it cannot read as no file.
pub fn write_atomic_sync_later(path: &Path, contents: &[u8]) -> io::Result<Unsynced> {
    replace(path, contents, None)
}

/// A file [`write_atomic_sync_later`] has put in place, not yet on disk.
#[derive(Debug)]
pub struct Unsynced {
    file: File,
    /// The directory whose entry changed (`None`: written in place, the name stayed).
    dir: Option<PathBuf>,
}

impl Unsynced {
    /// The file's contents, then its name in its directory, on disk. The directory's sync
    /// is done as [`write_atomic`] does it: where the file system refuses it (some answer
    /// `EINVAL` to a directory), the contents are still synced.
    pub fn sync(self) -> io::Result<()> {
        let Some(dir) = self.dir else {
            return self.file.sync_data();
        };
        self.file.sync_all()?;
        if let Ok(d) = File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

/// A short record (a counter) written over an existing file of at most its length, in one
/// `pwrite` at its start, so no file is made and none freed; `None` when there is no such
/// file (missing, longer, not a regular file) and the caller writes it atomically instead.
/// For a file read only under the lock its writer holds, whose reader refuses what it
/// cannot parse: a crash of the machine before [`Unsynced::sync`] may leave the old record
/// or an unreadable one (one sector's write is taken to be whole or not at all).
pub fn overwrite_short_sync_later(path: &Path, contents: &[u8]) -> io::Result<Option<Unsynced>> {
    use std::os::unix::fs::FileExt;
    if contents.len() > 512 {
        return Ok(None);
    }
    confine(path)?;
    let f = match OpenOptions::new()
        .write(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(f) => f,
        // A link is refused as every write refuses it; anything else (missing, not
        // writable by us) is left to the atomic replace.
        Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => {
            return Err(nofollow_error(path, e));
        }
        Err(_) => return Ok(None),
    };
    let m = f.metadata()?;
    // A second name (a hard link) would see the write too: replace instead.
    if !m.is_file() || m.nlink() != 1 || m.len() > contents.len() as u64 {
        return Ok(None);
    }
    f.write_all_at(contents, 0)?;
    Ok(Some(Unsynced { file: f, dir: None }))
}

/// `e`, saying which file it was about.
fn named(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("syncing {}: {e}", path.display()))
}

/// Data written to files (appended records, a log) whose sync a later durable write waits
/// for: [`write_atomic_after`] syncs them together with its own contents, so one wait for
/// the disk serves all of them, and makes its file visible only after.
#[derive(Debug, Default)]
pub struct PendingSyncs(Vec<(PathBuf, File)>);

impl PendingSyncs {
    /// `f`, open on `path` (named in an error of its sync).
    pub fn push(&mut self, path: &Path, f: File) {
        self.0.push((path.to_path_buf(), f));
    }

    /// Sync each one now (a run that ends on an error between its writes and its save).
    pub fn sync_now(self) -> io::Result<()> {
        self.0
            .iter()
            .try_for_each(|(p, f)| f.sync_data().map_err(|e| named(p, e)))
    }

    /// How many files wait for their sync.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Sync each one's data and `also` (all of it), each on its own thread: the disk
    /// sees the flushes at once. The first error, after all have ended.
    fn sync_with(self, also: &File) -> io::Result<()> {
        if self.0.is_empty() {
            return also.sync_all();
        }
        std::thread::scope(|s| {
            // A thread that cannot be made (a process limit reached): that file is synced
            // here instead.
            let others: Vec<_> = self
                .0
                .iter()
                .map(|(p, f)| {
                    let sync = move || f.sync_data().map_err(|e| named(p, e));
                    std::thread::Builder::new()
                        .spawn_scoped(s, sync)
                        .map_err(|_| sync())
                })
                .collect();
            let mine = also.sync_all();
            let theirs: Vec<io::Result<()>> = others
                .into_iter()
                .map(|h| match h {
                    Ok(h) => h
                        .join()
                        .unwrap_or_else(|_| Err(io::Error::other("a sync thread panicked"))),
                    Err(done) => done,
                })
                .collect();
            theirs.into_iter().chain([mine]).collect()
        })
    }
}

/// [`write_atomic`] once `pending` is on disk: their data and the new contents are synced
/// at the same time, then the new file takes its name and the directory is synced. So after
/// a crash of the machine `path` is the old file, or the new one with every pending file's
/// data there before it.
pub fn write_atomic_after(path: &Path, contents: &[u8], pending: PendingSyncs) -> io::Result<()> {
    replace(path, contents, Some(pending)).map(drop)
}

/// `durable`: sync the contents (with these pending files) before the rename, and the
/// directory after it; `None` syncs nothing.
fn replace(path: &Path, contents: &[u8], durable: Option<PendingSyncs>) -> io::Result<Unsynced> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    confine(path)?;
    ensure_parent(dir)?;
    let existing_mode = fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.permissions().mode() & 0o7777);
    let mut tmp = tempfile::Builder::new()
        .prefix(".tmp-")
        .permissions(fs::Permissions::from_mode(0o666))
        .tempfile_in(dir)?;
    if let Some(mode) = existing_mode {
        tmp.as_file()
            .set_permissions(fs::Permissions::from_mode(mode))?;
    }
    tmp.write_all(contents)?;
    let durable = match durable {
        Some(pending) => {
            pending.sync_with(tmp.as_file())?;
            true
        }
        None => false,
    };
    let file = tmp.persist(path).map_err(|e| e.error)?;
    // Make the rename itself durable.
    if durable && let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(Unsynced {
        file,
        dir: Some(dir.to_path_buf()),
    })
}

/// Open `path` for appending (created with the umask's default mode when missing), never
/// through a symbolic link and never outside its work tree.
pub fn open_append(path: &Path) -> io::Result<File> {
    confine(path)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        ensure_parent(dir)?;
    }
    OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| nofollow_error(path, e))
}

/// Open `path` for reading and writing without truncating (a lock file), never through a symbolic link
/// and never outside its work tree.
pub fn open_lock_file(path: &Path) -> io::Result<File> {
    confine(path)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        ensure_parent(dir)?;
    }
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| nofollow_error(path, e))
}

/// Open `path` for reading, never through a symbolic link and never outside its work tree.
pub fn open_read(path: &Path) -> io::Result<File> {
    confine(path)?;
    OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| nofollow_error(path, e))
}

/// `ELOOP` from `O_NOFOLLOW` (a link appeared after the check) as the same clear refusal.
fn nofollow_error(path: &Path, e: io::Error) -> io::Error {
    if e.raw_os_error() == Some(nix::libc::ELOOP) {
        refused(path, "it is a symbolic link")
    } else {
        e
    }
}

/// Append one complete record (a CSV row, a log block) with a single `write` call and
/// sync its data, so a crash leaves either the whole record or none of it.
pub fn append_record(path: &Path, record: &[u8], sync: bool) -> io::Result<()> {
    let f = appended(path, record)?;
    if sync {
        f.sync_data()?;
    }
    Ok(())
}

/// `record` appended to `path` with one `write`: the file, not synced.
fn appended(path: &Path, record: &[u8]) -> io::Result<File> {
    let mut f = open_append(path)?;
    f.write_all(record)?;
    Ok(f)
}

/// [`append_record`] whose sync waits for a later [`write_atomic_after`] with `pending`.
pub fn append_record_deferred(
    path: &Path,
    record: &[u8],
    pending: &mut PendingSyncs,
) -> io::Result<()> {
    pending.push(path, appended(path, record)?);
    Ok(())
}

/// Read a file that may not exist: `Ok(None)` when it is absent.
/// Never through a symbolic link, never outside its work tree.
pub fn read_optional(path: &Path) -> io::Result<Option<String>> {
    let mut f = match open_read(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut bytes = Vec::new();
    io::Read::read_to_end(&mut f, &mut bytes)?;
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}

/// Keep the head and the tail of a long text, with a note of what was left out. Cuts only
/// at character boundaries.
pub fn bound_text(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let half = max / 2;
    let mut head_end = half;
    while !text.is_char_boundary(head_end) {
        head_end -= 1;
    }
    let mut tail_start = text.len() - half;
    while !text.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    format!(
        "{}\n… [{} bytes omitted] …\n{}",
        &text[..head_end],
        tail_start - head_end,
        &text[tail_start..]
    )
}

/// `a/./b/../c` → `a/c`: `.` dropped, `..` popped, without touching the file system.
pub fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_real_path_is_what_canonicalize_says() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a/b");
        fs::create_dir_all(&a).unwrap();
        std::os::unix::fs::symlink(d.path().join("a"), d.path().join("link")).unwrap();
        std::os::unix::fs::symlink("b", d.path().join("a/rel")).unwrap();
        for p in [
            a.clone(),
            d.path().join("link/b"),
            d.path().join("link/rel"),
            d.path().join("a/./b/.."),
        ] {
            assert_eq!(
                real_path(&p).unwrap(),
                fs::canonicalize(&p).unwrap(),
                "{p:?}"
            );
        }
        assert!(real_path(&d.path().join("missing")).is_err());
        fs::write(d.path().join("file"), "").unwrap();
        assert_eq!(
            real_path(&d.path().join("file")).unwrap(),
            fs::canonicalize(d.path().join("file")).unwrap()
        );
    }

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a/b.txt");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "two");
        let names: Vec<_> = fs::read_dir(p.parent().unwrap()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn a_write_after_pending_appends_keeps_them_and_replaces_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let (csv, log, state) = (
            dir.path().join("logs/summary.csv"),
            dir.path().join("logs/iteration-001.log"),
            dir.path().join("run.json"),
        );
        write_atomic(&state, b"{\"n\":0}").unwrap();
        let mut pending = PendingSyncs::default();
        append_record_deferred(&csv, b"1,a\n", &mut pending).unwrap();
        append_record_deferred(&log, b"iteration 1\n", &mut pending).unwrap();
        append_record_deferred(&csv, b"2,b\n", &mut pending).unwrap();
        assert_eq!(pending.len(), 3);
        write_atomic_after(&state, b"{\"n\":2}", pending).unwrap();
        assert_eq!(fs::read_to_string(&csv).unwrap(), "1,a\n2,b\n");
        assert_eq!(fs::read_to_string(&log).unwrap(), "iteration 1\n");
        assert_eq!(fs::read_to_string(&state).unwrap(), "{\"n\":2}");
        // Nothing pending: a plain durable write; no temp file left either way.
        write_atomic_after(&state, b"{}", PendingSyncs::default()).unwrap();
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        // Refused like every write: never through a link out of the work tree.
        fs::create_dir_all(dir.path().join(".git")).unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).unwrap();
        let e = write_atomic_after(
            &dir.path().join("out/run.json"),
            b"x",
            PendingSyncs::default(),
        )
        .unwrap_err();
        assert!(is_refused_link(&e), "{e}");
    }

    #[test]
    fn a_short_record_is_written_in_place_only_over_a_file_no_longer() {
        let (_d, repo, outside) = tree();
        let p = repo.join(".git/taskdaemon/snapshot.seq");
        // Missing: the caller writes it atomically.
        assert!(overwrite_short_sync_later(&p, b"1\n").unwrap().is_none());
        write_atomic(&p, b"9\n").unwrap();
        let ino = fs::metadata(&p).unwrap().ino();
        overwrite_short_sync_later(&p, b"10\n")
            .unwrap()
            .unwrap()
            .sync()
            .unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "10\n");
        assert_eq!(fs::metadata(&p).unwrap().ino(), ino, "the same file");
        // Shorter than the file: not in place (it would leave the old tail).
        assert!(overwrite_short_sync_later(&p, b"7\n").unwrap().is_none());
        assert_eq!(fs::read_to_string(&p).unwrap(), "10\n");
        // A link is refused, and what it points at untouched.
        let target = outside.join("seq");
        fs::write(&target, "1\n").unwrap();
        fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink(&target, &p).unwrap();
        let e = overwrite_short_sync_later(&p, b"11\n").unwrap_err();
        assert!(is_refused_link(&e), "{e}");
        assert_eq!(fs::read_to_string(&target).unwrap(), "1\n");
    }

    fn umask() -> u32 {
        let status = fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("Umask:")).unwrap();
        u32::from_str_radix(line.split_whitespace().nth(1).unwrap(), 8).unwrap()
    }

    #[test]
    fn atomic_write_keeps_the_mode_and_new_files_get_the_umask_default() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.yaml");
        write_atomic(&p, b"one").unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&p), 0o666 & !umask());
        fs::set_permissions(&p, fs::Permissions::from_mode(0o640)).unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(mode(&p), 0o640);
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        write_atomic(&p, b"three").unwrap();
        assert_eq!(mode(&p), 0o755);
    }

    /// A work tree (a `.git` directory is enough) and a directory outside it.
    fn tree() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path().join("repo");
        let outside = d.path().join("outside");
        fs::create_dir_all(repo.join(".git")).unwrap();
        fs::create_dir_all(&outside).unwrap();
        (d, repo, outside)
    }

    #[test]
    fn a_symlinked_file_is_refused_and_its_target_untouched() {
        let (_d, repo, outside) = tree();
        let target = outside.join("somefile");
        fs::write(&target, "precious").unwrap();
        fs::create_dir_all(repo.join(".ralph")).unwrap();
        let link = repo.join(".ralph/run.lock");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        for r in [
            open_lock_file(&link).map(drop),
            append_record(&link, b"x", false),
            write_atomic(&link, b"x"),
            read_optional(&link).map(drop),
        ] {
            let e = r.unwrap_err();
            assert!(is_refused_link(&e), "{e}");
            assert!(e.to_string().contains("run.lock"), "{e}");
        }
        assert_eq!(fs::read_to_string(&target).unwrap(), "precious");
        // A link inside the tree is refused as a last component too (a lock would truncate).
        fs::write(repo.join("inner"), "x").unwrap();
        let inner = repo.join(".ralph/progress.md");
        std::os::unix::fs::symlink(repo.join("inner"), &inner).unwrap();
        assert!(is_refused_link(
            &append_record(&inner, b"y", false).unwrap_err()
        ));
    }

    #[test]
    fn a_refusal_is_found_under_the_errors_that_wrap_it_and_nothing_else_is() {
        #[derive(Debug, thiserror::Error)]
        #[error("writing: {source}")]
        struct Outer {
            source: io::Error,
        }
        let (_d, repo, outside) = tree();
        fs::create_dir_all(repo.join(".ralph")).unwrap();
        std::os::unix::fs::symlink(outside.join("f"), repo.join(".ralph/run.json")).unwrap();
        let e = write_atomic(&repo.join(".ralph/run.json"), b"x").unwrap_err();
        assert!(e.to_string().contains("\n  hint: "), "{e}");
        assert!(refusal_in(&Outer { source: e }));
        let denied = io::Error::new(io::ErrorKind::PermissionDenied, "refusing to use x");
        assert!(!is_refused_link(&denied), "a message alike is no refusal");
        assert!(!refusal_in(&Outer { source: denied }));
    }

    #[test]
    fn a_symlinked_directory_leading_outside_is_refused() {
        let (_d, repo, outside) = tree();
        std::os::unix::fs::symlink(&outside, repo.join(".ralph")).unwrap();
        let e = write_atomic(&repo.join(".ralph/logs/summary.csv"), b"x").unwrap_err();
        assert!(is_refused_link(&e), "{e}");
        assert!(e.to_string().contains("outside the work tree"), "{e}");
        assert!(fs::read_dir(&outside).unwrap().next().is_none());
        // .ralph real, .ralph/logs a link out.
        fs::remove_file(repo.join(".ralph")).unwrap();
        fs::create_dir_all(repo.join(".ralph")).unwrap();
        std::os::unix::fs::symlink(&outside, repo.join(".ralph/logs")).unwrap();
        let e = append_record(&repo.join(".ralph/logs/summary.csv"), b"x", false).unwrap_err();
        assert!(is_refused_link(&e), "{e}");
        assert!(read_optional(&repo.join(".ralph/logs/summary.csv")).is_err());
        assert!(fs::read_dir(&outside).unwrap().next().is_none());
    }

    #[test]
    fn a_directory_swapped_for_a_link_out_after_a_write_is_refused() {
        let (_d, repo, outside) = tree();
        // Written once through the real directory, then the directory becomes a link.
        write_atomic(&repo.join(".ralph/logs/summary.csv"), b"x").unwrap();
        append_record(&repo.join(".ralph/logs/summary.csv"), b"y", false).unwrap();
        fs::remove_dir_all(repo.join(".ralph/logs")).unwrap();
        std::os::unix::fs::symlink(&outside, repo.join(".ralph/logs")).unwrap();
        let e = append_record(&repo.join(".ralph/logs/summary.csv"), b"z", false).unwrap_err();
        assert!(is_refused_link(&e), "{e}");
        let e = write_atomic(&repo.join(".ralph/logs/summary.csv"), b"z").unwrap_err();
        assert!(e.to_string().contains("outside the work tree"), "{e}");
        assert!(fs::read_dir(&outside).unwrap().next().is_none());
    }

    #[test]
    fn a_work_tree_made_inside_another_after_a_write_bounds_the_next_one() {
        // A linked worktree inside the main checkout (`.taskdaemon/worktrees/<id>`):
        // written to before its `.git` exists, then made a work tree of its own.
        let (_d, repo, _outside) = tree();
        let wt = repo.join("wt");
        write_atomic(&wt.join(".ralph/logs/x"), b"x").unwrap();
        fs::create_dir_all(wt.join(".git")).unwrap();
        fs::create_dir_all(repo.join("other")).unwrap();
        fs::remove_dir_all(wt.join(".ralph/logs")).unwrap();
        std::os::unix::fs::symlink(repo.join("other"), wt.join(".ralph/logs")).unwrap();
        let e = write_atomic(&wt.join(".ralph/logs/x"), b"y").unwrap_err();
        assert!(e.to_string().contains("outside the work tree"), "{e}");
        assert!(fs::read_dir(repo.join("other")).unwrap().next().is_none());
    }

    #[test]
    fn a_dangling_directory_link_is_refused() {
        let (_d, repo, outside) = tree();
        std::os::unix::fs::symlink(outside.join("not-yet"), repo.join(".ralph")).unwrap();
        let e = write_atomic(&repo.join(".ralph/logs/x"), b"x").unwrap_err();
        assert!(is_refused_link(&e), "{e}");
        assert!(!outside.join("not-yet").exists());
    }

    #[test]
    fn a_directory_link_inside_the_tree_is_followed() {
        let (_d, repo, _outside) = tree();
        fs::create_dir_all(repo.join("state")).unwrap();
        std::os::unix::fs::symlink(repo.join("state"), repo.join(".ralph")).unwrap();
        write_atomic(&repo.join(".ralph/a.txt"), b"x").unwrap();
        assert_eq!(fs::read_to_string(repo.join("state/a.txt")).unwrap(), "x");
    }

    #[test]
    fn bound_text_keeps_head_and_tail_on_char_boundaries() {
        let s = "é".repeat(100);
        let b = bound_text(&s, 51);
        assert!(b.starts_with('é') && b.ends_with('é'));
        assert!(b.contains("bytes omitted"));
        assert_eq!(bound_text("short", 10), "short");
    }
}
