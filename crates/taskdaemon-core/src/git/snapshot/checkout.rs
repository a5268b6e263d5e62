//! A rollback's checkout of only the paths that differ (issue 16): the private index
//! holds the captured work tree and matched the disk when `git status` scanned it, so the
//! paths the tree diff names are all that must change. Files the snapshot lacks are
//! deleted (and the directories they leave empty), the index entries are set with one
//! `update-index --index-info`, and the new contents written by one `checkout-index`,
//! with no walk of the whole tree.
//!
//! Nothing unsaved may be overwritten: a path whose inode changed (`ctime`) after the scan
//! began, a path the capture did not see, a directory where a file goes, a submodule or
//! anything unexpected makes [`Snapshots::checkout_changed`] do nothing and answer
//! `false`; the caller then uses `read-tree -m -u`, which compares contents ("not
//! uptodate") before it writes.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{RawChange, SnapshotError, Snapshots, join_z};

/// File times come from the kernel's coarse clock, up to a tick behind the real one: the
/// tick is that clock's resolution (`clock_getres`: 4 ms at HZ=250, 1 ms at HZ=1000), or
/// 10 ms (HZ=100, the longest) when the kernel does not say it plainly.
fn clock_tick() -> Duration {
    const LONGEST: Duration = Duration::from_millis(10);
    let mut ts = nix::libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `clock_getres` writes one `timespec` through a valid pointer to ours.
    let rc = unsafe { nix::libc::clock_getres(nix::libc::CLOCK_REALTIME_COARSE, &mut ts) };
    let (Ok(secs), Ok(nanos)) = (u64::try_from(ts.tv_sec), u32::try_from(ts.tv_nsec)) else {
        return LONGEST;
    };
    let tick = Duration::new(secs, nanos);
    if rc != 0 || tick.is_zero() || tick > LONGEST {
        LONGEST
    } else {
        tick
    }
}

const NONE: &str = "000000";
const GITLINK: &str = "160000";

impl Snapshots {
    /// Move the work tree and the private index along `raw` (from the captured tree to
    /// the snapshot's), if every path is as the scan at `scanned` saw it; `false` (and
    /// nothing touched) otherwise.
    pub(super) fn checkout_changed(
        &self,
        raw: &[RawChange],
        scanned: SystemTime,
    ) -> Result<bool, SnapshotError> {
        let Some(limit) = scanned
            .checked_sub(clock_tick())
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        else {
            return Ok(false);
        };
        if !self.all_as_scanned(raw, limit) {
            return Ok(false);
        }
        for c in raw.iter().filter(|c| c.dst_mode == NONE) {
            let path = self.top.join(OsStr::from_bytes(&c.path));
            fs::remove_file(&path).map_err(super::io(&path))?;
            self.remove_empty_parents(&path);
        }
        self.private
            .call(&["update-index", "--add", "--replace", "-z", "--index-info"])
            .env("GIT_INDEX_FILE", self.work_index())
            .input(super::journal::index_info(raw))
            .bytes()?;
        let written: Vec<&[u8]> = raw
            .iter()
            .filter(|c| c.dst_mode != NONE)
            .map(|c| c.path.as_slice())
            .collect();
        if !written.is_empty() {
            self.private
                .call(&["checkout-index", "-u", "-f", "-z", "--stdin"])
                .env("GIT_INDEX_FILE", self.work_index())
                .input(join_z(written.into_iter()))
                .bytes()?;
        }
        Ok(true)
    }

    /// Whether every path of `raw` is on disk as the scan saw it: unchanged since `limit`
    /// (inode change time) where the captured tree has it, absent where it does not, and
    /// no file but one the rollback deletes on the way to a new one.
    fn all_as_scanned(&self, raw: &[RawChange], limit: Duration) -> bool {
        let deleted: BTreeSet<&[u8]> = raw
            .iter()
            .filter(|c| c.dst_mode == NONE)
            .map(|c| c.path.as_slice())
            .collect();
        raw.iter().all(|c| {
            if c.src_mode == GITLINK || c.dst_mode == GITLINK {
                return false;
            }
            let path = self.top.join(OsStr::from_bytes(&c.path));
            match (c.src_mode == NONE, fs::symlink_metadata(&path)) {
                (true, Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                    self.way_is_clear(&c.path, &deleted)
                }
                (false, Ok(m)) => {
                    let changed = Duration::new(m.ctime().max(0) as u64, m.ctime_nsec() as u32);
                    let kind_fits = if c.src_mode == "120000" {
                        m.file_type().is_symlink()
                    } else {
                        m.file_type().is_file()
                    };
                    kind_fits && changed < limit
                }
                _ => false,
            }
        })
    }

    /// No file or symlink stands where a new path needs a directory, unless the rollback
    /// deletes it first.
    fn way_is_clear(&self, path: &[u8], deleted: &BTreeSet<&[u8]>) -> bool {
        let mut up = Path::new(OsStr::from_bytes(path)).to_path_buf();
        while up.pop() && !up.as_os_str().is_empty() {
            match fs::symlink_metadata(self.top.join(&up)) {
                Ok(m) if m.is_dir() => return true,
                Ok(_) => return deleted.contains(up.as_os_str().as_bytes()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(_) => return false,
            }
        }
        true
    }

    /// Remove the directories a deletion left empty, up to the top.
    fn remove_empty_parents(&self, path: &Path) {
        let mut dir = path.parent();
        while let Some(d) = dir {
            if d == self.top || !d.starts_with(&self.top) || fs::remove_dir(d).is_err() {
                break;
            }
            dir = d.parent();
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_clock_tick_is_the_coarse_clocks_resolution_at_most_ten_ms() {
        let tick = super::clock_tick();
        assert!(!tick.is_zero() && tick <= super::Duration::from_millis(10));
    }
}
