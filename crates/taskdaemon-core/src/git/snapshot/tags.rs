//! The snapshot tags, listed without a git process (issue 16): their names and ids come
//! from the ref files (loose refs under `refs/tags/`, then `packed-refs`), and what each
//! tag object says (the object it points at, its message) from `tags.cache` in the
//! private directory, keyed by the tag object's id: an object never changes, so an entry
//! is right as long as the object exists. Tag objects the cache lacks (tags made
//! elsewhere, or before it existed) are read with one `cat-file --batch`; a save adds its
//! own tag when it makes it. A reftable repository, a symbolic or unreadable ref file,
//! or anything else unusual: `for-each-ref` as before.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{Listing, Snapshot, SnapshotError, Snapshots, TAG_PATTERNS, parse_tag};

/// Name prefixes of the snapshot tag namespaces (`TAG_PATTERNS` without `refs/tags/` and
/// `*`; the patterns' `*` matches no `/`).
fn in_namespace(name: &str) -> bool {
    !name.contains('/')
        && TAG_PATTERNS.iter().any(|p| {
            p.strip_prefix("refs/tags/")
                .and_then(|p| p.strip_suffix('*'))
                .is_some_and(|prefix| name.starts_with(prefix))
        })
}

/// What a tag object says, as `for-each-ref` gives it: `%(*objectname)` (empty when the
/// ref names no tag object) and `%(contents)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct TagObject {
    pub peeled: String,
    pub contents: String,
    /// For a snapshot commit this repository's saves made: its tree and parents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub made: Option<MadeCommit>,
}

/// What a save knows of the snapshot commit it made (objects never change).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct MadeCommit {
    pub tree: String,
    pub parents: Vec<String>,
    /// The tree of its index parent.
    pub index_tree: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct TagCache {
    tags: BTreeMap<String, TagObject>,
}

/// One line of `tags.cache`: what the tag object `id` says. A save appends its own tag's
/// line (no rewrite of the others: the file grows by one line per snapshot, and a save's
/// cost must not grow with the number of snapshots); a listing that finds the file naming
/// tags that are gone, or lacking some, writes it again with one line per tag it lists.
#[derive(Debug, Serialize, Deserialize)]
struct CacheLine {
    id: String,
    tag: TagObject,
}

impl Snapshots {
    fn tag_cache_path(&self) -> PathBuf {
        self.private_dir().join("tags.cache")
    }

    /// Every snapshot (oldest first), and the names of all tags in the snapshot
    /// namespaces (a de-duplicated name must avoid them, snapshots or not).
    pub(super) fn tags(&self) -> Result<Listing, SnapshotError> {
        let listed = match self.tag_refs(&|_| true) {
            Some(refs) => self.described(refs)?,
            None => self.tags_from_git()?,
        };
        let mut names = BTreeSet::new();
        let mut snaps: Vec<Snapshot> = listed
            .into_iter()
            .filter_map(|(name, t)| {
                let s = parse_tag(&name, &t.peeled, &t.contents);
                names.insert(name);
                s
            })
            .collect();
        sort_by_saving(&mut snaps);
        Ok((snaps, names))
    }

    /// The snapshots whose tag name `wanted` takes (oldest first). The names are listed
    /// as for every snapshot (`refs/tags`, `packed-refs`), but only the wanted tags' ref
    /// files are read and only their lines of the cache decoded (a task's completion check
    /// asks for its `task-N-pre` at every iteration: the whole listing was ~10 ms at 1,000
    /// snapshots). A tag the cache lacks is read from git and its line added. Where the
    /// ref files do not say, the whole listing, filtered.
    pub(super) fn tags_named(
        &self,
        wanted: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<Snapshot>, SnapshotError> {
        let Some(refs) = self.tag_refs(wanted) else {
            let (all, _) = self.tags()?;
            return Ok(all.into_iter().filter(|s| wanted(&s.tag)).collect());
        };
        let ids: BTreeSet<&String> = refs.values().collect();
        let mut known = self.read_tag_cache_of(Some(&ids)).tags;
        let missing: BTreeSet<&String> = ids
            .iter()
            .copied()
            .filter(|id| !known.contains_key(*id))
            .collect();
        if !missing.is_empty() {
            for (id, tag) in self.read_tag_objects(&missing)? {
                self.append_tag_cache(&CacheLine {
                    id: id.clone(),
                    tag: tag.clone(),
                });
                known.insert(id, tag);
            }
        }
        let mut snaps: Vec<Snapshot> = refs
            .iter()
            .filter_map(|(name, id)| {
                let t = known.get(id)?;
                parse_tag(name, &t.peeled, &t.contents)
            })
            .collect();
        sort_by_saving(&mut snaps);
        Ok(snaps)
    }

    /// `for-each-ref` over the snapshot namespaces: each tag's name and object.
    fn tags_from_git(&self) -> Result<Vec<(String, TagObject)>, SnapshotError> {
        let mut args = vec![
            "for-each-ref",
            "--format=%(refname:lstrip=2)%00%(*objectname)%00%(contents)%00",
        ];
        args.extend_from_slice(TAG_PATTERNS);
        let out = self.git.call(&args).bytes()?;
        let text = String::from_utf8_lossy(&out);
        let fields: Vec<&str> = text.split('\0').collect();
        Ok(fields
            .chunks_exact(3)
            .map(|c| {
                let name = c[0].trim_start_matches('\n').to_string();
                let t = TagObject {
                    peeled: c[1].to_string(),
                    contents: c[2].to_string(),
                    made: None,
                };
                (name, t)
            })
            .collect())
    }

    /// The tags of the snapshot namespaces and their ids from the ref files, sorted by
    /// name; `None` when git must be asked. Loose refs are read first and win, as git reads
    /// them: `pack-refs` writes the new `packed-refs` before it deletes the loose files, so
    /// a tag being packed meanwhile is in one or the other.
    fn tag_refs(&self, wanted: &dyn Fn(&str) -> bool) -> Option<BTreeMap<String, String>> {
        if self.common_dir.join("reftable").exists() {
            return None;
        }
        let mut refs = self.loose_tags(wanted)?;
        match fs::read_to_string(self.common_dir.join("packed-refs")) {
            Ok(packed) => {
                for line in packed.lines() {
                    if line.starts_with('#') || line.starts_with('^') {
                        continue;
                    }
                    let (id, name) = line.split_once(' ')?;
                    if let Some(name) = name.strip_prefix("refs/tags/")
                        && in_namespace(name)
                        && wanted(name)
                        && !refs.contains_key(name)
                    {
                        refs.insert(name.to_string(), self.object_id(id)?);
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(_) => return None,
        }
        Some(refs)
    }

    /// The loose tag refs of the snapshot namespaces whose name `wanted` takes; `None` when
    /// git must be asked.
    fn loose_tags(&self, wanted: &dyn Fn(&str) -> bool) -> Option<BTreeMap<String, String>> {
        let mut refs = BTreeMap::new();
        let dir = self.common_dir.join("refs/tags");
        let entries = match fs::read_dir(&dir) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Some(refs),
            Err(_) => return None,
        };
        for e in entries {
            let e = e.ok()?;
            let name = e.file_name().into_string().ok()?;
            if !in_namespace(&name)
                || name.ends_with(".lock")
                || name.starts_with('.')
                || !wanted(&name)
            {
                continue;
            }
            if !e.file_type().ok()?.is_file() {
                return None; // a directory `task-x/` holds no ref the patterns match
            }
            match fs::read_to_string(e.path()) {
                Ok(text) => refs.insert(name, self.object_id(text.trim_end())?),
                // Deleted since it was listed (packed meanwhile: then `packed-refs`,
                // read after this, has it).
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(_) => return None,
            };
        }
        Some(refs)
    }

    /// `text` when it is a full object id of this repository (lowercase hex).
    fn object_id(&self, text: &str) -> Option<String> {
        (text.len() == self.oid_len * 2
            && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .then(|| text.to_string())
    }

    /// Each tag with what its object says: from the cache, the rest from one `cat-file
    /// --batch` (then remembered). The cache keeps only the objects still named.
    fn described(
        &self,
        refs: BTreeMap<String, String>,
    ) -> Result<Vec<(String, TagObject)>, SnapshotError> {
        let mut cache = self.read_tag_cache();
        let missing: BTreeSet<&String> = refs
            .values()
            .filter(|id| !cache.tags.contains_key(*id))
            .collect();
        let mut changed = cache.tags.len() != refs.len();
        if !missing.is_empty() {
            let read = self.read_tag_objects(&missing)?;
            changed = true;
            cache.tags.extend(read);
        }
        let ids: BTreeSet<&String> = refs.values().collect();
        cache.tags.retain(|id, _| ids.contains(id));
        let listed = refs
            .iter()
            .filter_map(|(name, id)| Some((name.clone(), cache.tags.get(id)?.clone())))
            .collect();
        if changed {
            self.write_tag_cache(&cache);
        }
        Ok(listed)
    }

    /// What the objects `ids` say, from one `cat-file --batch`.
    fn read_tag_objects(
        &self,
        ids: &BTreeSet<&String>,
    ) -> Result<BTreeMap<String, TagObject>, SnapshotError> {
        let input: String = ids.iter().map(|id| format!("{id}\n")).collect();
        let out = self
            .git
            .call(&["cat-file", "--batch"])
            .input(input.into_bytes())
            .bytes()?;
        let mut read = BTreeMap::new();
        let mut rest = out.as_slice();
        for id in ids {
            let end = rest.iter().position(|b| *b == b'\n').unwrap_or(rest.len());
            let header = String::from_utf8_lossy(&rest[..end]).into_owned();
            rest = rest.get(end + 1..).unwrap_or_default();
            let mut f = header.split(' ');
            let (Some(_), Some(kind), Some(size)) = (f.next(), f.next(), f.next()) else {
                continue; // `<id> missing`: a ref to nothing, which git lists with nothing
            };
            let size: usize = size.parse().map_err(|_| bad_batch(&header))?;
            let body = rest.get(..size).ok_or_else(|| bad_batch(&header))?;
            rest = rest.get(size + 1..).unwrap_or_default();
            read.insert((*id).clone(), tag_object(kind, body));
        }
        Ok(read)
    }

    /// The cache's lines, later ones over earlier ones; a line that does not read (torn
    /// by a kill) is skipped. A whole-file map (the format before lines) reads too.
    fn read_tag_cache(&self) -> TagCache {
        self.read_tag_cache_of(None)
    }

    /// [`Snapshots::read_tag_cache`], of the tag objects `only` when given: a line that
    /// begins with another id is not decoded.
    fn read_tag_cache_of(&self, only: Option<&BTreeSet<&String>>) -> TagCache {
        let Ok(bytes) = fs::read(self.tag_cache_path()) else {
            return TagCache::default();
        };
        let mut cache = TagCache::default();
        for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            if let (Some(only), Some(id)) = (only, line_id(line))
                && !only.iter().any(|w| w.as_bytes() == id)
            {
                continue;
            }
            if let Ok(l) = serde_json::from_slice::<CacheLine>(line) {
                cache.tags.insert(l.id, l.tag);
            } else if let Ok(old) = serde_json::from_slice::<TagCache>(line) {
                cache.tags.extend(old.tags);
            }
        }
        cache
    }

    /// Best effort, like `index.cache`: a cache entry lost is read again from git.
    fn write_tag_cache(&self, cache: &TagCache) {
        let mut text = Vec::new();
        for (id, tag) in &cache.tags {
            if let Ok(line) = serde_json::to_vec(&CacheLine {
                id: id.clone(),
                tag: tag.clone(),
            }) {
                text.extend_from_slice(&line);
                text.push(b'\n');
            }
        }
        super::cache::write_cache(&self.tag_cache_path(), &text);
    }

    /// Add one line to the cache (one `write` in append mode, never through a link).
    fn append_tag_cache(&self, line: &CacheLine) {
        let Ok(mut text) = serde_json::to_vec(line) else {
            return;
        };
        text.push(b'\n');
        let _ = crate::fsutil::append_record(&self.tag_cache_path(), &text, false);
    }

    /// Remember what the tag `name` this save just made says, and its commit.
    pub(super) fn remember_tag(&self, name: &str, contents: &str, made: (&str, MadeCommit)) {
        let path = self.common_dir.join("refs/tags").join(name);
        let Some(id) = fs::read_to_string(path)
            .ok()
            .and_then(|t| self.object_id(t.trim_end()))
        else {
            return;
        };
        let tag = TagObject {
            peeled: made.0.to_string(),
            contents: contents.to_string(),
            made: Some(made.1),
        };
        self.append_tag_cache(&CacheLine { id, tag });
    }

    /// What a save of this repository remembered of the snapshot commit `commit`.
    pub(super) fn made_commit(&self, commit: &str) -> Option<MadeCommit> {
        self.read_tag_cache()
            .tags
            .into_values()
            .filter(|t| t.peeled == commit)
            .find_map(|t| t.made)
    }
}

/// Oldest first: the sequence number is the order of saving (`seq.rs`), across work trees.
fn sort_by_saving(snaps: &mut [Snapshot]) {
    snaps.sort_by(|a, b| (a.seq, a.time_ms, &a.tag).cmp(&(b.seq, b.time_ms, &b.tag)));
}

/// The id a cache line is about, read from its start as [`CacheLine`] writes it
/// (`{"id":"<hex>",`); `None` for a line of another shape (decoded whole).
fn line_id(line: &[u8]) -> Option<&[u8]> {
    let rest = line.strip_prefix(br#"{"id":""#)?;
    let end = rest.iter().position(|b| *b == b'"')?;
    let id = &rest[..end];
    (rest.get(end + 1) == Some(&b',') && id.iter().all(u8::is_ascii_hexdigit)).then_some(id)
}

fn bad_batch(header: &str) -> SnapshotError {
    SnapshotError::Git(crate::git::GitError::Failed {
        args: "cat-file --batch".into(),
        dir: PathBuf::new(),
        stderr: format!("unexpected output after `{header}`"),
    })
}

/// What `for-each-ref` would say of an object of type `kind` with content `body`: a tag
/// object's target (`object` header) and its message; nothing for another object.
fn tag_object(kind: &str, body: &[u8]) -> TagObject {
    if kind != "tag" {
        return TagObject {
            peeled: String::new(),
            contents: String::new(),
            made: None,
        };
    }
    let text = String::from_utf8_lossy(body);
    let (headers, message) = text.split_once("\n\n").unwrap_or((&text, ""));
    let peeled = headers
        .lines()
        .find_map(|l| l.strip_prefix("object "))
        .unwrap_or_default();
    TagObject {
        peeled: peeled.to_string(),
        contents: message.to_string(),
        made: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_match_as_the_patterns_do() {
        for yes in [
            "task-1-pre",
            "manual-17",
            "stall-2-recovery",
            "pre-rollback-9",
        ] {
            assert!(in_namespace(yes), "{yes}");
        }
        for no in ["v1", "task", "task-1/x", "xmanual-1", "pre-rollbac"] {
            assert!(!in_namespace(no), "{no}");
        }
    }

    /// The listing `for-each-ref` gives, parsed as `tags` parses it.
    fn from_git(s: &Snapshots) -> Listing {
        let mut names = BTreeSet::new();
        let mut snaps: Vec<Snapshot> = s
            .tags_from_git()
            .unwrap()
            .into_iter()
            .filter_map(|(n, t)| {
                let snap = parse_tag(&n, &t.peeled, &t.contents);
                names.insert(n);
                snap
            })
            .collect();
        snaps.sort_by(|a, b| (a.seq, a.time_ms, &a.tag).cmp(&(b.seq, b.time_ms, &b.tag)));
        (snaps, names)
    }

    #[test]
    fn the_files_and_the_cache_list_what_for_each_ref_lists() {
        use crate::git::testrepo::{commit_all, git, init};
        let d = tempfile::tempdir().unwrap();
        init(d.path());
        std::fs::write(d.path().join("a"), "1").unwrap();
        commit_all(d.path(), "one");
        let s = Snapshots::open(d.path()).unwrap();
        for (i, kind) in [super::super::Kind::Manual, super::super::Kind::TaskPre]
            .into_iter()
            .enumerate()
        {
            std::fs::write(d.path().join("a"), format!("{i}")).unwrap();
            let req = super::super::SaveRequest {
                kind,
                task: Some(1),
                message: "a save",
                time_ms: 1_000 + i as i64,
            };
            s.save(&req).unwrap();
        }
        // Not snapshots, but names a new snapshot must avoid; and tags outside.
        git(d.path(), &["tag", "-a", "-m", "someone's", "manual-5"]);
        git(d.path(), &["tag", "task-9-pre"]);
        git(d.path(), &["tag", "-a", "-m", "v", "v1"]);
        let listed = s.tags().unwrap();
        assert_eq!(listed.0.len(), 2);
        assert!(listed.1.contains("manual-5") && listed.1.contains("task-9-pre"));
        assert!(!listed.1.contains("v1"));
        assert_eq!(listed, from_git(&s), "loose refs, cached objects");
        git(d.path(), &["pack-refs", "--all"]);
        assert_eq!(s.tags().unwrap(), from_git(&s), "packed refs");
        std::fs::remove_file(s.tag_cache_path()).unwrap();
        assert_eq!(s.tags().unwrap(), from_git(&s), "objects read by cat-file");
        assert!(s.tag_cache_path().exists(), "and remembered");
        // A save made from the cache takes the next sequence number and a free name.
        let next = super::super::SaveRequest {
            kind: super::super::Kind::Manual,
            task: None,
            message: "third",
            time_ms: 5_000,
        };
        let third = s.save(&next).unwrap();
        assert_eq!((third.seq, third.tag.as_str()), (3, "manual-5-2"));
        assert_eq!(s.tags().unwrap(), from_git(&s));
    }

    #[test]
    fn a_cache_line_names_its_object_at_its_start() {
        let line = CacheLine {
            id: "0a1b".repeat(10),
            tag: TagObject {
                peeled: "c".repeat(40),
                contents: "{\"id\":\"ffff\",".into(),
                made: None,
            },
        };
        let bytes = serde_json::to_vec(&line).unwrap();
        assert_eq!(line_id(&bytes), Some("0a1b".repeat(10).as_bytes()));
        // Another shape is decoded whole.
        assert_eq!(line_id(br#"{"tags":{}}"#), None);
        assert_eq!(line_id(br#"{"id":"not hex","tag":{}}"#), None);
        assert_eq!(line_id(br#"{"id":"abc"}"#), None);
    }

    #[test]
    fn a_task_start_is_found_by_its_names_alone_as_the_whole_listing_finds_it() {
        use super::super::Kind;
        use crate::git::testrepo::{commit_all, git, init};
        let d = tempfile::tempdir().unwrap();
        init(d.path());
        std::fs::write(d.path().join("a"), "0").unwrap();
        commit_all(d.path(), "one");
        let s = Snapshots::open(d.path()).unwrap();
        let saves = [
            (Kind::TaskPre, Some(1)),
            (Kind::TaskPre, Some(12)),
            (Kind::Manual, None),
            (Kind::TaskPre, Some(1)), // again: `task-1-pre-2`
            (Kind::TaskPost, Some(1)),
            (Kind::TaskPre, Some(2)),
        ];
        for (i, (kind, task)) in saves.into_iter().enumerate() {
            std::fs::write(d.path().join("a"), format!("{i}")).unwrap();
            let req = super::super::SaveRequest {
                kind,
                task,
                message: "a save",
                time_ms: 1_000 * (i as i64 + 1),
            };
            s.save(&req).unwrap();
        }
        // Names a person made: not snapshots of the task, whatever they look like.
        git(d.path(), &["tag", "-a", "-m", "someone's", "task-1-pre-x"]);
        git(d.path(), &["tag", "task-1-pre-9"]);
        let whole = |n: u32| {
            s.list()
                .unwrap()
                .into_iter()
                .rfind(|x| x.kind == Kind::TaskPre && x.task == Some(n))
        };
        let check = |why: &str| {
            for n in [1, 2, 3, 12] {
                assert_eq!(s.task_pre(n).unwrap(), whole(n), "task {n}, {why}");
            }
        };
        check("loose refs, cached objects");
        assert_eq!(s.task_pre(1).unwrap().unwrap().tag, "task-1-pre-2");
        assert!(s.task_pre(3).unwrap().is_none());
        let cache = std::fs::read(s.tag_cache_path()).unwrap();
        git(d.path(), &["pack-refs", "--all"]);
        check("packed refs");
        std::fs::remove_file(s.tag_cache_path()).unwrap();
        assert_eq!(s.task_pre(1).unwrap().unwrap().tag, "task-1-pre-2");
        let added = std::fs::read_to_string(s.tag_cache_path()).unwrap();
        // Both task-1 starts, and the person's lightweight `task-1-pre-9` (a commit).
        assert_eq!(
            added.lines().count(),
            3,
            "the lines of what it read: {added}"
        );
        check("objects read by cat-file");
        std::fs::write(s.tag_cache_path(), &cache).unwrap();
        check("the cache again");
    }

    #[test]
    fn a_save_appends_its_line_and_a_torn_or_old_cache_still_reads() {
        use crate::git::testrepo::{commit_all, init};
        use std::os::unix::fs::MetadataExt;
        let d = tempfile::tempdir().unwrap();
        init(d.path());
        std::fs::write(d.path().join("a"), "0").unwrap();
        commit_all(d.path(), "one");
        let s = Snapshots::open(d.path()).unwrap();
        let path = s.tag_cache_path();
        let mut inode = None;
        for i in 1..=3 {
            std::fs::write(d.path().join("a"), format!("{i}")).unwrap();
            super::super::manual_save(&s, i * 1_000);
            let ino = std::fs::metadata(&path).unwrap().ino();
            assert_eq!(*inode.get_or_insert(ino), ino, "appended to, not replaced");
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 3, "one line per save: {text}");
        assert_eq!(s.tags().unwrap(), from_git(&s));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        assert_eq!(
            std::fs::metadata(&path).unwrap().ino(),
            inode.unwrap(),
            "a listing that finds every tag rewrites nothing"
        );

        // A line torn by a kill is skipped; its tag is read from git and the file written
        // again whole.
        let torn = &text[..text.len() - 20];
        std::fs::write(&path, torn).unwrap();
        assert_eq!(s.tags().unwrap(), from_git(&s));
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 3);

        // The format before lines: one map of every tag.
        let cache = s.read_tag_cache();
        std::fs::write(&path, serde_json::to_vec(&cache).unwrap()).unwrap();
        assert_eq!(s.read_tag_cache().tags, cache.tags);
        assert_eq!(s.tags().unwrap(), from_git(&s));
    }

    #[test]
    fn tag_objects_read_as_for_each_ref_gives_them() {
        let a = "a".repeat(40);
        let body = format!("object {a}\ntype commit\ntag t\ntagger x <x> 1 +0000\n\nmsg\n\nX: y\n");
        let t = tag_object("tag", body.as_bytes());
        assert_eq!(t.peeled, a);
        assert_eq!(t.contents, "msg\n\nX: y\n");
        assert_eq!(tag_object("commit", b"tree x\n\nm").peeled, "");
    }
}
