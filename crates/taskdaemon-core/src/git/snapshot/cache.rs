//! Facts a save would otherwise ask git for, each in its own process (issue 16):
//!
//! - HEAD's branch and commit, read from the `HEAD` file and the ref files (a loose ref or
//!   its line in `packed-refs`); git is asked only when they do not say it plainly
//!   (reftable, a symbolic ref chain, a per-worktree ref);
//! - the tree of the user's index and the snapshot commit made of it (parent: HEAD), kept
//!   in `<git-dir>/taskdaemon/index.cache` while that index file is the same one (device,
//!   inode, size, times and its trailing checksum) and HEAD has not moved. They are used
//!   only while that commit is still there as a loose object (a `git gc` packs or prunes
//!   it: then it is made again); the commit keeps its tree reachable (HEAD's tree is
//!   usually packed, so the tree itself is not looked for).

use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::{SnapshotError, Snapshots, io};

/// The identity of one version of the user's index file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct IndexKey(String);

/// What `index.cache` remembers of the user's index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CachedIndex {
    pub key: IndexKey,
    /// HEAD when it was written (`None`: unborn).
    pub head: Option<String>,
    pub tree: String,
    /// The snapshot's index commit: `tree` with `head` as its parent.
    pub commit: String,
}

fn is_oid(s: &str) -> bool {
    matches!(s.len(), 40 | 64) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

impl IndexKey {
    /// The key of the open index file `f`; `None` when it carries no checksum
    /// (`index.skipHash`): its identity would rest on the file's times alone.
    pub fn of(f: &mut File) -> std::io::Result<Option<IndexKey>> {
        let m = f.metadata()?;
        if m.len() < 64 {
            return Ok(None);
        }
        let mut tail = [0u8; 32];
        f.seek(SeekFrom::End(-32))?;
        f.read_exact(&mut tail)?;
        f.rewind()?;
        if tail[12..].iter().all(|b| *b == 0) {
            return Ok(None);
        }
        // Not its ctime: a first save's second link to the file (`link_or_copy`) changes
        // it, and the checksum already stands for the contents.
        let hex: String = tail.iter().map(|b| format!("{b:02x}")).collect();
        Ok(Some(IndexKey(format!(
            "{}:{}:{}:{}.{}:{hex}",
            m.dev(),
            m.ino(),
            m.len(),
            m.mtime(),
            m.mtime_nsec(),
        ))))
    }
}

impl Snapshots {
    fn index_cache_path(&self) -> PathBuf {
        self.private_dir().join("index.cache")
    }

    /// The cached tree and commit of the user's index with key `key` and HEAD `head`, if
    /// the commit is still a loose object.
    pub(super) fn cached_index(&self, key: &IndexKey, head: Option<&str>) -> Option<CachedIndex> {
        let text = fs::read_to_string(self.index_cache_path()).ok()?;
        let mut l = text.lines();
        let (Some(k), Some(h), Some(tree), Some(commit)) = (l.next(), l.next(), l.next(), l.next())
        else {
            return None;
        };
        let cached_head = (h != "unborn").then(|| h.to_string());
        let fits = k == key.0 && cached_head.as_deref() == head && is_oid(tree) && is_oid(commit);
        (fits && self.is_loose(commit)).then(|| CachedIndex {
            key: key.clone(),
            head: cached_head,
            tree: tree.to_string(),
            commit: commit.to_string(),
        })
    }

    /// Remember the tree and commit made of the user's index (best effort: a cache, so
    /// not synced to disk; a torn file reads as no entry).
    pub(super) fn remember_index(&self, c: &CachedIndex) {
        let text = format!(
            "{}\n{}\n{}\n{}\n",
            c.key.0,
            c.head.as_deref().unwrap_or("unborn"),
            c.tree,
            c.commit
        );
        write_cache(&self.index_cache_path(), text.as_bytes());
    }

    pub(super) fn is_loose(&self, oid: &str) -> bool {
        let (dir, rest) = oid.split_at(2);
        self.common_dir
            .join("objects")
            .join(dir)
            .join(rest)
            .is_file()
    }

    /// Whether the object `oid` is stored here: loose, or in a pack whose index (version
    /// 2) lists it and whose pack file is there. Anything this does not read plainly (an
    /// alternate object store, an index of another version) is simply not found, and the
    /// caller asks git.
    pub(super) fn is_stored(&self, oid: &str) -> bool {
        if !is_oid(oid) {
            return false;
        }
        if self.is_loose(oid) {
            return true;
        }
        let Some(id) = hex_bytes(oid) else {
            return false;
        };
        let packs = self.common_dir.join("objects").join("pack");
        let Ok(dir) = fs::read_dir(&packs) else {
            return false;
        };
        dir.filter_map(Result::ok).any(|e| {
            let path = e.path();
            path.extension().is_some_and(|x| x == "idx")
                && path.with_extension("pack").is_file()
                && pack_index_lists(&path, &id).unwrap_or(false)
        })
    }

    /// HEAD's branch (`refs/heads/…`, `None` when detached) and commit (`None` on an
    /// unborn branch), from the files when they say it plainly, else from git.
    pub(super) fn head_and_branch(
        &self,
    ) -> Result<(Option<String>, Option<String>), SnapshotError> {
        let path = self.git_dir.join("HEAD");
        let text = fs::read_to_string(&path).map_err(io(&path))?;
        let text = text.trim_end();
        if is_oid(text) {
            return Ok((Some(text.to_string()), None));
        }
        let branch = match text.strip_prefix("ref: ") {
            Some(r) if r.starts_with("refs/heads/") && r != "refs/heads/.invalid" => r,
            _ => return Ok((self.rev("HEAD^{commit}")?, self.branch()?)),
        };
        match read_ref(&self.common_dir, branch) {
            Some(head) => Ok((head, Some(branch.to_string()))),
            None => Ok((self.rev("HEAD^{commit}")?, Some(branch.to_string()))),
        }
    }
}

/// A branch's commit from its loose ref file or `packed-refs`: `Some(None)` when neither
/// has it (unborn), `None` when they do not say it plainly.
fn read_ref(common_dir: &Path, name: &str) -> Option<Option<String>> {
    match fs::read_to_string(common_dir.join(name)) {
        Ok(text) => {
            let text = text.trim_end();
            return is_oid(text).then(|| Some(text.to_string()));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(_) => return None,
    }
    let packed = match fs::read_to_string(common_dir.join("packed-refs")) {
        Ok(p) => p,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Some(None),
        Err(_) => return None,
    };
    for line in packed.lines() {
        if let Some((oid, n)) = line.split_once(' ')
            && n == name
        {
            return is_oid(oid).then(|| Some(oid.to_string()));
        }
    }
    Some(None)
}

/// The bytes of the hex object id `hex`.
fn hex_bytes(hex: &str) -> Option<Vec<u8>> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Whether the pack index `idx` (version 2: magic, version, a fan-out table of 256
/// cumulative counts, then the sorted ids) lists the object `id`. Read with positioned
/// reads: the fan-out table, then only the ids that start with `id`'s first byte. `None`:
/// not a version 2 index, or one whose counts do not fit its size.
fn pack_index_lists(idx: &Path, id: &[u8]) -> Option<bool> {
    use std::os::unix::fs::FileExt;
    const HEADER: u64 = 8;
    const FANOUT: u64 = 256 * 4;
    let f = File::open(idx).ok()?;
    let len = f.metadata().ok()?.len();
    let mut head = [0u8; (HEADER + FANOUT) as usize];
    f.read_exact_at(&mut head, 0).ok()?;
    if head[..8] != [0xff, b't', b'O', b'c', 0, 0, 0, 2] {
        return None;
    }
    let count = |i: usize| -> u64 {
        let at = HEADER as usize + i * 4;
        u64::from(u32::from_be_bytes([
            head[at],
            head[at + 1],
            head[at + 2],
            head[at + 3],
        ]))
    };
    let first = usize::from(*id.first()?);
    let (lo, hi, total) = (
        if first == 0 { 0 } else { count(first - 1) },
        count(first),
        count(255),
    );
    let width = id.len() as u64;
    if lo > hi || hi > total || HEADER + FANOUT + total * width > len {
        return None;
    }
    let mut ids = vec![0u8; usize::try_from((hi - lo) * width).ok()?];
    f.read_exact_at(&mut ids, HEADER + FANOUT + lo * width)
        .ok()?;
    let ids: Vec<&[u8]> = ids.chunks_exact(id.len()).collect();
    Some(ids.binary_search(&id).is_ok())
}

/// Replace the cache file `path` with `bytes`, best effort: a temp file of its own (two
/// writers never share one, so neither can rename the other's half-written text into
/// place), renamed over it; on any failure the old file stays or none is left.
pub(super) fn write_cache(path: &std::path::Path, bytes: &[u8]) {
    use std::io::Write;
    let Some(dir) = path.parent() else { return };
    let made = tempfile::Builder::new()
        .prefix(".cache-")
        .tempfile_in(dir)
        .and_then(|mut tmp| tmp.write_all(bytes).map(|()| tmp));
    if let Ok(tmp) = made {
        let _ = tmp.persist(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::testrepo::{commit_all, git, init};

    #[test]
    fn objects_are_found_loose_and_in_packs() {
        let d = tempfile::tempdir().unwrap();
        init(d.path());
        for i in 0..40 {
            fs::write(d.path().join(format!("f{i}")), format!("{i}\n")).unwrap();
        }
        commit_all(d.path(), "one");
        let snaps = Snapshots::open(d.path()).unwrap();
        let tree = git(d.path(), &["rev-parse", "HEAD^{tree}"]);
        let blobs: Vec<String> = git(d.path(), &["ls-files", "-s"])
            .lines()
            .map(|l| l.split(' ').nth(1).unwrap().to_string())
            .collect();
        assert!(snaps.is_loose(&tree) && snaps.is_stored(&tree));
        git(d.path(), &["gc", "-q"]);
        assert!(!snaps.is_loose(&tree), "packed by gc");
        assert!(snaps.is_stored(&tree), "found in the pack's index");
        assert!(blobs.iter().all(|b| snaps.is_stored(b)));
        for absent in ["0".repeat(40), "f".repeat(40), format!("{}0", &tree[..39])] {
            if absent != tree {
                assert!(!snaps.is_stored(&absent), "{absent}");
            }
        }
        assert!(!snaps.is_stored("not an id"));
        // A pack index cut short, or without its pack, lists nothing.
        let packs = d.path().join(".git/objects/pack");
        let idx = fs::read_dir(&packs)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|x| x == "idx"))
            .unwrap();
        let bytes = fs::read(&idx).unwrap();
        let mut perms = fs::metadata(&idx).unwrap().permissions();
        #[allow(clippy::permissions_set_readonly_false)]
        perms.set_readonly(false);
        fs::set_permissions(&idx, perms).unwrap();
        fs::write(&idx, &bytes[..1100]).unwrap();
        assert!(!snaps.is_stored(&tree), "a truncated index");
        fs::write(&idx, &bytes).unwrap();
        assert!(snaps.is_stored(&tree));
        fs::rename(idx.with_extension("pack"), packs.join("moved")).unwrap();
        assert!(!snaps.is_stored(&tree), "an index without its pack");
    }

    #[test]
    fn refs_are_read_from_loose_files_and_packed_refs() {
        let d = tempfile::tempdir().unwrap();
        let a = "a".repeat(40);
        let b = "b".repeat(40);
        fs::create_dir_all(d.path().join("refs/heads")).unwrap();
        fs::write(d.path().join("refs/heads/main"), format!("{a}\n")).unwrap();
        fs::write(
            d.path().join("packed-refs"),
            format!("# pack-refs with: peeled fully-peeled sorted\n{b} refs/heads/dev\n"),
        )
        .unwrap();
        assert_eq!(read_ref(d.path(), "refs/heads/main"), Some(Some(a)));
        assert_eq!(read_ref(d.path(), "refs/heads/dev"), Some(Some(b)));
        assert_eq!(read_ref(d.path(), "refs/heads/none"), Some(None));
        fs::write(d.path().join("refs/heads/sym"), "ref: refs/heads/main\n").unwrap();
        assert_eq!(read_ref(d.path(), "refs/heads/sym"), None, "asks git");
    }
}
