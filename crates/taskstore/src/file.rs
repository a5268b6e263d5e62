//! Locked access to a collection file, positioned reads, atomic replacement.
//!
//! Locks are `flock` locks on the collection file itself (std `File::lock`): writers hold
//! an exclusive lock while they append, readers a shared one while they read. A file can be
//! replaced (compaction, `git checkout`, a merge): after taking the lock we check that the
//! path still names the file we locked and start over if not.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

/// Which file a path named when we read it: (device, inode).
pub(crate) type FileId = (u64, u64);

pub(crate) struct Locked {
    pub file: File,
    pub id: FileId,
}

/// Open and lock `path`. Shared locks do not create the file (`None` when absent);
/// exclusive locks do.
pub(crate) fn open_locked(path: &Path, exclusive: bool) -> io::Result<Option<Locked>> {
    loop {
        let opened = if exclusive {
            OpenOptions::new()
                .read(true)
                .append(true)
                .create(true)
                .open(path)
        } else {
            File::open(path)
        };
        let file = match opened {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound && !exclusive => return Ok(None),
            Err(e) => return Err(e),
        };
        if exclusive {
            file.lock()?;
        } else {
            file.lock_shared()?;
        }
        let held = file.metadata()?;
        match fs::metadata(path) {
            Ok(now) if now.dev() == held.dev() && now.ino() == held.ino() => {
                return Ok(Some(Locked {
                    id: (held.dev(), held.ino()),
                    file,
                }));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound && !exclusive => return Ok(None),
            // Replaced or removed while we waited for the lock: try the new file.
            _ => continue,
        }
    }
}

/// A second, independent descriptor of the locked file for reading later (a `dup` would
/// share the open file description, and with it the lock, for as long as it stays open).
pub(crate) fn reopen(locked: &Locked, path: &Path) -> io::Result<File> {
    use std::os::fd::AsRawFd;
    let same = |f: File| -> io::Result<File> {
        let m = f.metadata()?;
        if (m.dev(), m.ino()) == locked.id {
            Ok(f)
        } else {
            Err(io::Error::other(
                "the file was replaced while it was being read",
            ))
        }
    };
    match File::open(format!("/proc/self/fd/{}", locked.file.as_raw_fd())) {
        Ok(f) => same(f),
        Err(_) => same(File::open(path)?),
    }
}

pub(crate) fn read_range(file: &File, start: u64, end: u64) -> io::Result<Vec<u8>> {
    let len = usize::try_from(end.saturating_sub(start))
        .map_err(|_| io::Error::other("file too large for this platform"))?;
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, start)?;
    Ok(buf)
}

pub(crate) fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Replace `path` with `contents`: temp file in the same directory, fsync, rename, fsync
/// of the directory. Readers see the old file or the new one, never a mix.
pub(crate) fn write_atomic(path: &Path, contents: &[u8]) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".taskstore-")
        .tempfile_in(dir)?;
    tmp.write_all(contents)?;
    tmp.as_file().sync_all()?;
    if let Ok(m) = fs::metadata(path) {
        let _ = fs::set_permissions(tmp.path(), m.permissions());
    }
    tmp.persist(path).map_err(|e| e.error)?;
    sync_dir(dir);
    Ok(())
}

/// An exclusive lock on the store directory, for changes that must see a consistent
/// store across collections (check, then write). Released on drop.
#[derive(Debug)]
pub struct StoreLock {
    _dir: File,
}

pub(crate) fn lock_dir(dir: &Path) -> io::Result<StoreLock> {
    fs::create_dir_all(dir)?;
    let d = File::open(dir)?;
    d.lock()?;
    Ok(StoreLock { _dir: d })
}
