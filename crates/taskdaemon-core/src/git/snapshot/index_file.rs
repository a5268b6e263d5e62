//! A git index file read without git (issue 16): the path, mode and the two flags a
//! snapshot needs (assume-unchanged, skip-worktree) of each entry, from index versions 2,
//! 3 and 4. Anything else answers `None` and the caller asks git as before: a split index
//! (its entries live in another file), a sparse index (directory entries), another
//! version, entries out of order, or a file that does not parse to its end.

use std::ops::Range;

/// `S_IFMT` and a directory's mode (a sparse index's directory entry).
const S_IFMT: u32 = 0o170000;
const S_IFDIR: u32 = 0o040000;
/// The stat data before the object id: ctime, mtime, dev, ino, mode, uid, gid, size.
const STAT_BYTES: usize = 40;
const ASSUME_VALID: u16 = 0x8000;
const EXTENDED: u16 = 0x4000;
const SKIP_WORKTREE: u16 = 0x4000;

/// One entry of an index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    name: Range<usize>,
    pub mode: u32,
    pub assume_unchanged: bool,
    pub skip_worktree: bool,
}

/// The entries of an index, in its order (sorted by path, then stage).
#[derive(Debug, Default)]
pub(super) struct Entries {
    names: Vec<u8>,
    entries: Vec<Entry>,
}

impl Entries {
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &Entry)> {
        self.entries
            .iter()
            .map(|e| (&self.names[e.name.clone()], e))
    }

    /// The paths, each once, in order.
    pub fn paths(&self) -> impl Iterator<Item = &[u8]> {
        let mut last: Option<&[u8]> = None;
        self.iter().map(|(p, _)| p).filter(move |p| {
            let new = last != Some(*p);
            last = Some(*p);
            new
        })
    }

    pub fn contains(&self, path: &[u8]) -> bool {
        self.entries
            .binary_search_by(|e| self.names[e.name.clone()].cmp(path))
            .is_ok()
    }

    /// The paths of `self` that `other` lacks (both sorted: one merge walk).
    pub fn missing_from<'a>(&'a self, other: &Entries) -> Vec<&'a [u8]> {
        let mut theirs = other.paths().peekable();
        let mut out = Vec::new();
        for p in self.paths() {
            while theirs.next_if(|t| *t < p).is_some() {}
            if theirs.peek() != Some(&p) {
                out.push(p);
            }
        }
        out
    }
}

/// The entries of the index file `bytes`, whose object ids are `oid_len` bytes long.
pub(super) fn parse(bytes: &[u8], oid_len: usize) -> Option<Entries> {
    let (version, count, body) = header(bytes, oid_len)?;
    let mut out = Entries {
        names: Vec::with_capacity(body.len() / 4),
        entries: Vec::with_capacity(count.min(body.len() / 62)),
    };
    let mut at = 12;
    let mut prev: Range<usize> = 0..0;
    for _ in 0..count {
        let raw = RawEntry::at(body, at, oid_len, version, prev.len())?;
        if raw.is_dir() {
            return None; // a sparse index: a directory stands for its files
        }
        // The name: what it keeps of the previous one (version 4), then its own bytes.
        let start = out.names.len();
        let keep = raw.name_len - raw.suffix.len();
        out.names.extend_from_within(prev.start..prev.start + keep);
        out.names.extend_from_slice(&body[raw.suffix.clone()]);
        let name = start..out.names.len();
        if !prev.is_empty() && out.names[prev.clone()] > out.names[name.clone()] {
            return None;
        }
        out.entries.push(Entry {
            name: name.clone(),
            mode: raw.mode,
            assume_unchanged: raw.assume_unchanged,
            skip_worktree: raw.skip_worktree,
        });
        (prev, at) = (name, raw.next);
    }
    plain_extensions(body, at, oid_len)?;
    Some(out)
}

/// Whether no entry of the index file `bytes` is marked assume-unchanged or skip-worktree,
/// found by stepping over the entries without copying their names (a first save asks it of
/// an index of 100k entries, where [`parse`] took ~12 ms): `Some(true)` when none is,
/// `Some(false)` when one is, `None` where [`parse`] checks a name or an extension and
/// would refuse the file (another version, a directory entry, a name length the flags do
/// not say, a split or sparse index, a short file). Entries out of order are left to git.
pub(super) fn none_flagged(bytes: &[u8], oid_len: usize) -> Option<bool> {
    match step(bytes, oid_len, |raw| {
        raw.assume_unchanged || raw.skip_worktree
    })? {
        Stepped::StoppedAt => Some(false),
        Stepped::ToTheEnd { .. } => Some(true),
    }
}

/// The tree of the whole index file `bytes` (hex), when its cache-tree extension has it
/// valid: what `write-tree` would answer without computing anything. Found by stepping over
/// the entries as [`none_flagged`] does, without copying their names (a save asks it of
/// the user's index whenever that changed: after every commit of an agent). `None` also
/// where [`parse`] would refuse the file, but for entries out of order: the tree is the one
/// git recorded for the index, and the caller takes it only when it is stored.
pub(super) fn root_tree_of(bytes: &[u8], oid_len: usize) -> Option<String> {
    match step(bytes, oid_len, |_| false)? {
        Stepped::StoppedAt => None,
        Stepped::ToTheEnd { root_tree } => root_tree,
    }
}

/// How a [`step`] over an index's entries ended.
enum Stepped {
    /// At an entry the caller stopped at.
    StoppedAt,
    /// Past every entry and the extensions, with the cache-tree's valid root tree.
    ToTheEnd { root_tree: Option<String> },
}

/// Step over the entries of the index file `bytes` without copying their names until
/// `stop` says so, then over its extensions; `None` where [`parse`] checks a name or an
/// extension and would refuse the file (another version, a directory entry, a name length
/// the flags do not say, a split or sparse index, a short file). Entries out of order are
/// left to git.
fn step(bytes: &[u8], oid_len: usize, stop: impl Fn(&RawEntry) -> bool) -> Option<Stepped> {
    let (version, count, body) = header(bytes, oid_len)?;
    let (mut at, mut prev_len) = (12, 0);
    for _ in 0..count {
        let raw = RawEntry::at(body, at, oid_len, version, prev_len)?;
        if raw.is_dir() {
            return None;
        }
        if stop(&raw) {
            return Some(Stepped::StoppedAt);
        }
        (at, prev_len) = (raw.next, raw.name_len);
    }
    let root_tree = plain_extensions(body, at, oid_len)?;
    Some(Stepped::ToTheEnd { root_tree })
}

/// The version, the entry count and the bytes before the checksum of an index file of
/// versions 2–4.
fn header(bytes: &[u8], oid_len: usize) -> Option<(u32, usize, &[u8])> {
    if bytes.get(..4)? != b"DIRC" {
        return None;
    }
    let version = be32(bytes, 4)?;
    if !(2..=4).contains(&version) {
        return None;
    }
    let count = be32(bytes, 8)? as usize;
    let body = bytes.get(..bytes.len().checked_sub(oid_len)?)?;
    Some((version, count, body))
}

/// The longest entry name read here (`PATH_MAX` is 4096 on Linux).
const MAX_NAME: usize = 4096;

/// One entry, its name not copied: what a snapshot reads of it, the length of its name
/// and where the name's own bytes lie (in version 4 they follow what it keeps of the
/// previous name), and the offset after it.
struct RawEntry {
    mode: u32,
    assume_unchanged: bool,
    skip_worktree: bool,
    name_len: usize,
    suffix: Range<usize>,
    next: usize,
}

impl RawEntry {
    /// The entry at `at` of `body`, after one whose name is `prev_len` bytes long; `None`
    /// when it does not read plainly: an empty name, a name length the flags do not say
    /// (capped at 0xFFF) or one longer than any path here (a v4 prefix could otherwise
    /// grow without bound), extended flags before version 3, or bytes past the end.
    fn at(body: &[u8], at: usize, oid_len: usize, version: u32, prev_len: usize) -> Option<Self> {
        let mode = be32(body, at + 24)?;
        let flags_at = at + STAT_BYTES + oid_len;
        let flags = be16(body, flags_at)?;
        let mut name_at = flags_at + 2;
        let mut skip_worktree = false;
        if flags & EXTENDED != 0 {
            if version < 3 {
                return None;
            }
            skip_worktree = be16(body, name_at)? & SKIP_WORKTREE != 0;
            name_at += 2;
        }
        let (keep, suffix_at) = if version == 4 {
            let (strip, suffix_at) = varint(body, name_at)?;
            (prev_len.checked_sub(strip)?, suffix_at)
        } else {
            (0, name_at)
        };
        let len = body.get(suffix_at..)?.iter().position(|b| *b == 0)?;
        let suffix = suffix_at..suffix_at + len;
        let next = if version == 4 {
            suffix.end + 1
        } else {
            // Padded with 1–8 NULs to a multiple of eight bytes.
            at + ((name_at - at + len + 8) & !7)
        };
        let name_len = keep + len;
        let plain = name_len > 0
            && usize::from(flags & 0xFFF) == name_len.min(0xFFF)
            && name_len <= MAX_NAME
            && next <= body.len();
        plain.then_some(RawEntry {
            mode,
            assume_unchanged: flags & ASSUME_VALID != 0,
            skip_worktree,
            name_len,
            suffix,
            next,
        })
    }

    /// A sparse index's directory entry.
    fn is_dir(&self) -> bool {
        self.mode & S_IFMT == S_IFDIR
    }
}

/// The extensions from `at` to the end, when they fill it exactly and none of them makes
/// the entries incomplete (`link`: a split index) or stand for others (`sdir`: sparse):
/// with the valid root tree of the cache-tree extension (`TREE`), if any.
fn plain_extensions(body: &[u8], mut at: usize, oid_len: usize) -> Option<Option<String>> {
    let mut root = None;
    while at < body.len() {
        let sig = body.get(at..at + 4)?;
        let size = be32(body, at + 4)? as usize;
        // A signature not starting with `A`–`Z` is one a reader must understand (git
        // refuses an index with one it does not know): `link` (a split index), `sdir`
        // (sparse), or a newer one.
        if !sig[0].is_ascii_uppercase() {
            return None;
        }
        let end = (at + 8).checked_add(size).filter(|n| *n <= body.len())?;
        if sig == b"TREE" {
            root = root_tree(&body[at + 8..end], oid_len);
        }
        at = end;
    }
    Some(root)
}

/// The root entry of a cache-tree extension: an empty path, NUL, the entry count (`-1`:
/// invalid), a space, the number of subtrees, LF, then (when valid) the tree's id.
fn root_tree(ext: &[u8], oid_len: usize) -> Option<String> {
    let rest = ext.strip_prefix(b"\0")?;
    let nl = rest.iter().position(|b| *b == b'\n')?;
    let counts = std::str::from_utf8(&rest[..nl]).ok()?;
    let (entries, _) = counts.split_once(' ')?;
    if entries.parse::<i64>().ok()? < 0 {
        return None;
    }
    let id = rest.get(nl + 1..nl + 1 + oid_len)?;
    Some(id.iter().map(|b| format!("{b:02x}")).collect())
}

/// Git's offset varint (`decode_varint`), with the offset after it.
fn varint(b: &[u8], mut at: usize) -> Option<(usize, usize)> {
    let mut c = *b.get(at)?;
    at += 1;
    let mut val = usize::from(c & 127);
    while c & 128 != 0 {
        c = *b.get(at)?;
        at += 1;
        val = val
            .checked_add(1)?
            .checked_mul(128)?
            .checked_add(usize::from(c & 127))?;
    }
    Some((val, at))
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::testrepo::{commit_all, git, init};
    use std::path::Path;

    /// What `ls-files -s -v` says: (tag, mode, path) per entry.
    fn git_view(dir: &Path) -> Vec<(String, u32, Vec<u8>)> {
        let out = git(dir, &["ls-files", "-s", "-v", "-z"]);
        out.split('\0')
            .filter(|l| !l.is_empty())
            .map(|l| {
                let (meta, path) = l.split_once('\t').unwrap();
                let mut f = meta.split(' ');
                let tag = f.next().unwrap().to_string();
                let mode = u32::from_str_radix(f.next().unwrap(), 8).unwrap();
                (tag, mode, path.as_bytes().to_vec())
            })
            .collect()
    }

    fn ours(dir: &Path) -> Option<Vec<(String, u32, Vec<u8>)>> {
        let bytes = std::fs::read(dir.join(".git/index")).unwrap();
        let e = parse(&bytes, 20)?;
        Some(
            e.iter()
                .map(|(p, e)| {
                    let tag = if e.skip_worktree { "S" } else { "H" };
                    let tag = if e.assume_unchanged {
                        tag.to_lowercase()
                    } else {
                        tag.to_string()
                    };
                    (tag, e.mode, p.to_vec())
                })
                .collect(),
        )
    }

    /// A repository whose files (not committed) have names that sort and nest unevenly.
    fn repo_of_names() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        init(d.path());
        for p in ["a", "b/c d", "b/c/e", "b/ca", "z/y/x/w", "zz", "é"] {
            let f = d.path().join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(&f, p).unwrap();
        }
        d
    }

    #[test]
    fn every_version_reads_as_git_lists_it() {
        let d = repo_of_names();
        std::os::unix::fs::symlink("a", d.path().join("link")).unwrap();
        commit_all(d.path(), "one");
        git(d.path(), &["update-index", "--assume-unchanged", "a"]);
        for v in ["4", "2", "3"] {
            git(d.path(), &["update-index", "--index-version", v]);
            if v == "3" {
                git(d.path(), &["update-index", "--skip-worktree", "zz"]);
            }
            let view = ours(d.path()).unwrap_or_else(|| panic!("version {v}"));
            assert_eq!(view, git_view(d.path()), "version {v}");
        }
        let bytes = std::fs::read(d.path().join(".git/index")).unwrap();
        let e = parse(&bytes, 20).unwrap();
        assert!(e.contains(b"b/c d") && !e.contains(b"b"));
        // Marking entries invalidated the cache-tree's root; `write-tree` makes it whole
        // again, staging a change invalidates it.
        assert_eq!(root_tree_of(&bytes, 20), None);
        let tree = git(d.path(), &["write-tree"]);
        let written = std::fs::read(d.path().join(".git/index")).unwrap();
        assert_eq!(root_tree_of(&written, 20), Some(tree.clone()));
        for v in ["2", "3", "4"] {
            git(d.path(), &["update-index", "--index-version", v]);
            let bytes = std::fs::read(d.path().join(".git/index")).unwrap();
            assert_eq!(root_tree_of(&bytes, 20), Some(tree.clone()), "version {v}");
            let cut = &bytes[..bytes.len() - 30];
            assert_eq!(root_tree_of(cut, 20), None, "version {v}, cut");
        }
        std::fs::write(d.path().join("b/c/e"), "changed").unwrap();
        git(d.path(), &["add", "b/c/e"]);
        let staged = std::fs::read(d.path().join(".git/index")).unwrap();
        assert_eq!(root_tree_of(&staged, 20), None);
        let mut other = parse(&bytes, 20).unwrap();
        other.entries.retain(|x| x.mode != 0o120000);
        assert_eq!(e.missing_from(&other), [&b"link"[..]]);
        assert!(other.missing_from(&e).is_empty());
    }

    #[test]
    fn flagged_entries_are_seen_without_reading_names_in_every_version() {
        let d = repo_of_names();
        commit_all(d.path(), "one");
        let index = || std::fs::read(d.path().join(".git/index")).unwrap();
        for v in ["2", "3", "4"] {
            git(d.path(), &["update-index", "--index-version", v]);
            assert_eq!(none_flagged(&index(), 20), Some(true), "version {v}");
            for (on, off) in [
                ("--assume-unchanged", "--no-assume-unchanged"),
                ("--skip-worktree", "--no-skip-worktree"),
            ] {
                // The last entry, so every other is stepped over first.
                git(d.path(), &["update-index", on, "é"]);
                assert_eq!(none_flagged(&index(), 20), Some(false), "{v} {on}");
                git(d.path(), &["update-index", off, "é"]);
            }
            let bytes = index();
            assert_eq!(none_flagged(&bytes, 20), Some(true));
            for cut in [0, 5, 12, 40, bytes.len() - 21] {
                assert_eq!(none_flagged(&bytes[..cut], 20), None, "{v}: cut at {cut}");
            }
        }
        // The first entry's flags say a name length other than its name's ("a": 1), as
        // `parse` refuses it.
        git(d.path(), &["update-index", "--index-version", "2"]);
        let mut wrong = index();
        wrong[12 + STAT_BYTES + 20 + 1] = 2;
        assert_eq!(none_flagged(&wrong, 20), None, "name length");
        assert!(parse(&wrong, 20).is_none());
        git(d.path(), &["update-index", "--split-index"]);
        assert_eq!(none_flagged(&index(), 20), None, "a split index");
    }

    #[test]
    fn anything_unusual_is_left_to_git() {
        let d = tempfile::tempdir().unwrap();
        init(d.path());
        std::fs::write(d.path().join("a"), "1").unwrap();
        commit_all(d.path(), "one");
        let bytes = std::fs::read(d.path().join(".git/index")).unwrap();
        assert!(parse(&bytes, 20).is_some());
        for cut in [0, 5, 12, 40, bytes.len() - 21] {
            assert!(parse(&bytes[..cut], 20).is_none(), "cut at {cut}");
        }
        // The first entry's flags say a name length other than its name's ("a": 1).
        let flags = 12 + STAT_BYTES + 20;
        let mut wrong = bytes.clone();
        wrong[flags + 1] = 2;
        assert!(parse(&wrong, 20).is_none(), "name length");
        // An extension a reader must understand (lowercase), before the checksum.
        let mut ext = bytes[..bytes.len() - 20].to_vec();
        ext.extend_from_slice(b"abcd\0\0\0\0");
        ext.extend_from_slice(&bytes[bytes.len() - 20..]);
        assert!(parse(&ext, 20).is_none(), "mandatory extension");
        let mut optional = ext.clone();
        optional[bytes.len() - 20] = b'A';
        assert!(parse(&optional, 20).is_some(), "optional extension");
        assert!(parse(&bytes, 32).is_none(), "another object format");
        git(d.path(), &["update-index", "--split-index"]);
        let split = std::fs::read(d.path().join(".git/index")).unwrap();
        assert!(parse(&split, 20).is_none(), "a split index");
    }
}
