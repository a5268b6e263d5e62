//! One collection in memory: the bytes read from its file, the latest version of each
//! record, indexes over the indexed fields, and the lines that could not be read.
//!
//! The file's bytes are kept as read, in segments (one per read), and each record points
//! at its latest line. Reading more of the file (`refresh`) parses only the new bytes
//! unless the file was replaced, shrank or changed under us, in which case it is read
//! again from the start.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use crate::base::{Base, Choice};
use crate::error::{Error, Result};
use crate::file::{FileId, Locked, open_locked, read_range};
use crate::filter::{Filter, FilterOp, matches};
use crate::line::{IndexValue, LineMeta, excerpt, is_conflict_marker, parse_meta};
use crate::record::CollectionDef;
use crate::store::StoreOptions;

/// A line that could not be read as a record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LineIssue {
    pub file: PathBuf,
    /// 1-based.
    pub line: u64,
    pub kind: IssueKind,
    pub message: String,
    pub excerpt: String,
    /// The whole line, for `compact --drop-corrupt`.
    #[serde(skip)]
    pub raw: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum IssueKind {
    /// Not a valid record (bad JSON, missing id or updated-at, glued lines).
    Corrupt,
    /// A git conflict marker: a merge left a conflict to resolve.
    ConflictMarker,
    /// The last line has no newline and is incomplete: a write cut short.
    TornTail,
}

impl std::fmt::Display for LineIssue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}: {}: {}",
            self.file.display(),
            self.line,
            self.message,
            self.excerpt
        )
    }
}

/// How a record changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChangeKind {
    Created,
    Updated,
    Deleted,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    pub collection: String,
    pub id: String,
    pub kind: ChangeKind,
}

#[derive(Debug, Clone)]
pub(crate) struct Slot {
    pub id: Arc<str>,
    pub updated_at: i64,
    pub deleted: bool,
    /// Where its latest line is in the file (byte offsets, the newline excluded).
    pub start: u64,
    pub end: u64,
    pub line: u64,
    /// FNV-1a of the latest line (telling an unchanged record from a changed one after a
    /// reload without reading either).
    pub hash: u64,
    pub values: Box<[IndexValue]>,
    /// Its place in the order of first appearance in the file.
    pub ord: u64,
    /// When this version replaces a record of the saved index (`base`): whether that one
    /// was a tombstone.
    pub base: Option<bool>,
}

/// A record's latest version, from memory or from the saved index.
#[derive(Debug, Clone)]
pub(crate) struct SlotRef<'a> {
    pub id: &'a str,
    pub updated_at: i64,
    pub deleted: bool,
    pub start: u64,
    pub end: u64,
    pub line: u64,
    pub hash: u64,
    pub ord: u64,
    pub vals: Vals<'a>,
}

/// Indexed values: in memory, or encoded in the saved index (with the field count).
#[derive(Debug, Clone)]
pub(crate) enum Vals<'a> {
    Mem(&'a [IndexValue]),
    Enc(&'a [u8], usize),
}

impl<'a> SlotRef<'a> {
    pub fn values(&self) -> std::borrow::Cow<'a, [IndexValue]> {
        match self.vals {
            Vals::Mem(v) => std::borrow::Cow::Borrowed(v),
            Vals::Enc(_, _) if self.deleted => std::borrow::Cow::Borrowed(&[]),
            Vals::Enc(b, n) => std::borrow::Cow::Owned(
                crate::index_file::decode_values(b, n)
                    .unwrap_or_default()
                    .into_vec(),
            ),
        }
    }

    fn of(s: &'a Slot) -> SlotRef<'a> {
        SlotRef {
            id: &s.id,
            updated_at: s.updated_at,
            deleted: s.deleted,
            start: s.start,
            end: s.end,
            line: s.line,
            hash: s.hash,
            ord: s.ord,
            vals: Vals::Mem(&s.values),
        }
    }
}

/// The records (slot numbers) under one index key; most keys of a unique-ish field have one.
#[derive(Debug, Clone)]
enum Ids {
    One(u32),
    Many(BTreeSet<u32>),
}

type Index = BTreeMap<IndexValue, Ids>;

const TAIL: usize = 64;
/// Loads bigger than this are parsed on several threads.
const PARALLEL_BYTES: usize = 8 << 20;

/// One line, parsed (possibly on another thread) before it is applied in file order.
enum Parsed {
    Record(LineMeta),
    Marker,
    Bad(String),
}

struct ParsedLine {
    /// Line number within the parsed region, from 1.
    rel: u64,
    start: usize,
    end: usize,
    what: Parsed,
}

pub(crate) struct Collection {
    pub def: CollectionDef,
    pub path: PathBuf,
    /// The file the slots point into (kept open: a file replaced since still reads as it
    /// was when it was parsed).
    pub(crate) file: Option<Arc<std::fs::File>>,
    pub(crate) file_id: Option<FileId>,
    pub(crate) known_len: u64,
    /// The last bytes consumed, to notice a file rewritten in place.
    pub(crate) tail: Vec<u8>,
    /// Lines consumed so far (the last one may lack its newline: `mid_line`).
    pub(crate) lines: u64,
    pub(crate) mid_line: bool,
    /// The records the saved index covers (when loaded from it); `slots` then holds only
    /// what was read after it (new records, and new versions of the base's).
    pub(crate) base: Option<Base>,
    /// Every id seen past the base (deleted ones too), in order of first appearance.
    pub(crate) slots: Vec<Slot>,
    by_id: BTreeMap<Arc<str>, u32>,
    /// Ids not in the base, one after the other, for substring search; `id_at` says where
    /// each starts and its slot.
    id_text: Vec<u8>,
    id_at: Vec<(usize, u32)>,
    /// How many ids `slots` added to the base's.
    new_ids: u64,
    indexes: Vec<Index>,
    pub issues: Vec<LineIssue>,
    /// An incomplete last line, not consumed: a writer will terminate it.
    pub pending: Option<LineIssue>,
    pub superseded: u64,
    /// Size of the file when last loaded whole, when over the warning threshold.
    pub large: Option<u64>,
    /// How much of the file the saved index (`index_file`) covers.
    pub(crate) indexed_len: u64,
    /// Whether the last load came from the saved index (else the file was parsed whole).
    pub(crate) from_index: bool,
}

/// The saved index is written again when this many bytes were read past what it covers.
const REINDEX_BYTES: u64 = 256 * 1024;

impl Collection {
    pub fn new(def: CollectionDef, dir: &Path) -> Collection {
        let path = dir.join(def.file_name());
        let n = def.indexed.len();
        Collection {
            def,
            path,
            file: None,
            file_id: None,
            known_len: 0,
            tail: Vec::new(),
            lines: 0,
            mid_line: false,
            base: None,
            slots: Vec::new(),
            by_id: BTreeMap::new(),
            new_ids: 0,
            id_text: Vec::new(),
            id_at: Vec::new(),
            indexes: vec![Index::new(); n],
            issues: Vec::new(),
            pending: None,
            superseded: 0,
            large: None,
            indexed_len: 0,
            from_index: false,
        }
    }

    pub fn file_len(&self) -> u64 {
        self.known_len
    }

    pub fn line_count(&self) -> u64 {
        self.lines
    }

    /// The latest version of an id (live or a tombstone).
    pub fn slot(&self, id: &str) -> Option<SlotRef<'_>> {
        if let Some(n) = self.by_id.get(id) {
            return Some(SlotRef::of(&self.slots[*n as usize]));
        }
        let base = self.base.as_ref()?;
        base.slot(base.find(id)?)
    }

    /// Every id (live and deleted) in id order.
    pub fn sorted(&self) -> Vec<SlotRef<'_>> {
        self.with_prefix("")
    }

    /// Ids starting with `prefix`, in id order.
    pub fn with_prefix(&self, prefix: &str) -> Vec<SlotRef<'_>> {
        let mut mem = self
            .by_id
            .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, n)| SlotRef::of(&self.slots[*n as usize]))
            .peekable();
        let Some(base) = &self.base else {
            return mem.collect();
        };
        let mut out = Vec::new();
        for b in base
            .with_prefix(prefix)
            .into_iter()
            .filter(|b| !self.by_id.contains_key(b.id))
        {
            while let Some(m) = mem.next_if(|m| m.id < b.id) {
                out.push(m);
            }
            out.push(b);
        }
        out.extend(mem);
        out
    }

    /// Every id (live and deleted) in order of first appearance.
    pub fn in_order(&self) -> Vec<SlotRef<'_>> {
        let mut out = Vec::with_capacity(self.slots.len());
        if let Some(base) = &self.base {
            for ord in 0..base.n {
                let Some(b) = base.slot(ord) else { continue };
                match self.by_id.get(b.id) {
                    Some(n) => out.push(SlotRef::of(&self.slots[*n as usize])),
                    None => out.push(b),
                }
            }
        }
        out.extend(
            self.slots
                .iter()
                .filter(|s| s.base.is_none())
                .map(SlotRef::of),
        );
        out
    }

    pub fn count(&self) -> (usize, usize) {
        let (mut live, mut dead) = self
            .base
            .as_ref()
            .map_or((0, 0), |b| (b.live as usize, (b.n - b.live) as usize));
        for s in &self.slots {
            match s.base {
                Some(true) => dead = dead.saturating_sub(1),
                Some(false) => live = live.saturating_sub(1),
                None => {}
            }
            if s.deleted {
                dead += 1;
            } else {
                live += 1;
            }
        }
        (live, dead)
    }

    /// Live ids containing `needle`, with every byte offset where it occurs in the id, in
    /// order of first appearance.
    pub fn search_ids(&self, needle: &str) -> Vec<(&str, Vec<usize>)> {
        let mut out: Vec<(&str, Vec<usize>)> = Vec::new();
        if needle.is_empty() {
            return out;
        }
        let mut push = |key: (bool, u32), id, deleted: bool, offset, last: &mut Option<_>| {
            if deleted {
                return;
            }
            if *last == Some(key) {
                if let Some(e) = out.last_mut() {
                    e.1.push(offset);
                }
            } else {
                out.push((id, vec![offset]));
                *last = Some(key);
            }
        };
        let mut last = None;
        if let Some(base) = &self.base {
            for (ord, offset) in base.search(needle.as_bytes()) {
                let Some(b) = base.slot(ord) else { continue };
                let deleted = match self.by_id.get(b.id) {
                    Some(n) => self.slots[*n as usize].deleted,
                    None => b.deleted,
                };
                push((true, ord), b.id, deleted, offset, &mut last);
            }
        }
        for hit in memchr::memmem::find_iter(&self.id_text, needle.as_bytes()) {
            // The id that starts at or before the hit.
            let k = self.id_at.partition_point(|(at, _)| *at <= hit) - 1;
            let (at, n) = self.id_at[k];
            let slot = &self.slots[n as usize];
            let offset = hit - at;
            if offset + needle.len() <= slot.id.len() {
                push((false, n), &*slot.id, slot.deleted, offset, &mut last);
            }
        }
        out
    }

    /// Catch up with the file: read it under a shared lock (unless `held` is a lock we
    /// already hold on it).
    pub fn refresh(
        &mut self,
        held: Option<&Locked>,
        opts: &StoreOptions,
        changes: &mut Vec<Change>,
    ) -> Result<()> {
        let own;
        let locked = match held {
            Some(l) => l,
            None => match open_locked(&self.path, false).map_err(Error::io(&self.path))? {
                Some(l) => {
                    own = l;
                    &own
                }
                None => {
                    // No file (never written, or removed by git): the collection is empty.
                    if self.file_id.is_some() || !self.slots.is_empty() {
                        let fresh = Collection::new(self.def.clone(), self.dir());
                        let old = std::mem::replace(self, fresh);
                        self.diff_from(&old, changes);
                    }
                    return Ok(());
                }
            },
        };
        let len = locked.file.metadata().map_err(Error::io(&self.path))?.len();
        let same_file = self.file_id == Some(locked.id) && len >= self.known_len;
        if same_file && self.tail_unchanged(locked)? {
            if self.file.is_none() {
                self.file = Some(Arc::new(
                    crate::file::reopen(locked, &self.path).map_err(Error::io(&self.path))?,
                ));
            }
            if len > self.known_len {
                let bytes =
                    read_range(&locked.file, self.known_len, len).map_err(Error::io(&self.path))?;
                self.ingest(bytes, Some(changes));
                self.save_index(opts, false);
            }
            return Ok(());
        }
        self.reload(locked, len, opts, Some(changes))?;
        self.save_index(opts, true);
        Ok(())
    }

    fn dir(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new("."))
    }

    fn tail_unchanged(&self, locked: &Locked) -> Result<bool> {
        if self.tail.is_empty() {
            return Ok(true);
        }
        let start = self.known_len - self.tail.len() as u64;
        let now = read_range(&locked.file, start, self.known_len).map_err(Error::io(&self.path))?;
        Ok(now == self.tail)
    }

    /// Read the whole file again (the size guard first).
    fn reload(
        &mut self,
        locked: &Locked,
        len: u64,
        opts: &StoreOptions,
        changes: Option<&mut Vec<Change>>,
    ) -> Result<()> {
        self.guard(len, opts)?;
        let bytes = read_range(&locked.file, 0, len).map_err(Error::io(&self.path))?;
        let fresh = Collection::new(self.def.clone(), self.dir());
        let old = std::mem::replace(self, fresh);
        self.file_id = Some(locked.id);
        self.file = Some(Arc::new(
            crate::file::reopen(locked, &self.path).map_err(Error::io(&self.path))?,
        ));
        self.large = (len > opts.warn_bytes).then_some(len);
        self.ingest(bytes, None);
        if let Some(changes) = changes {
            self.diff_from(&old, changes);
        }
        Ok(())
    }

    /// Load from scratch (at open, and for rebuild-indexes): from the saved index and the
    /// bytes appended since when `use_index` and the index is valid, else by parsing the
    /// whole file (then the index is saved again).
    pub fn load(&mut self, opts: &StoreOptions, use_index: bool) -> Result<()> {
        match open_locked(&self.path, false).map_err(Error::io(&self.path))? {
            Some(l) => {
                let len = l.file.metadata().map_err(Error::io(&self.path))?.len();
                let dir = self.dir().to_path_buf();
                *self = Collection::new(self.def.clone(), &dir);
                if use_index && opts.index && self.guard(len, opts).is_ok() {
                    if crate::index_file::load(self, &dir, &l) {
                        self.indexed_len = self.known_len;
                        self.from_index = true;
                        self.large = (len > opts.warn_bytes).then_some(len);
                        let mut ignored = Vec::new();
                        return self.refresh(Some(&l), opts, &mut ignored);
                    }
                    // A stale or corrupt index: parsed again below, saved again after.
                    *self = Collection::new(self.def.clone(), &dir);
                }
                self.reload(&l, len, opts, None)?;
                self.save_index(opts, true);
                Ok(())
            }
            None => {
                *self = Collection::new(self.def.clone(), self.dir());
                Ok(())
            }
        }
    }

    fn guard(&self, len: u64, opts: &StoreOptions) -> Result<()> {
        match opts.max_bytes {
            Some(max) if len > max => Err(Error::TooLarge {
                path: self.path.clone(),
                mb: len / (1024 * 1024),
                limit_mb: max / (1024 * 1024),
            }),
            _ => Ok(()),
        }
    }

    /// Save the index when `always` or when it lags far behind what was read.
    pub(crate) fn save_index(&mut self, opts: &StoreOptions, always: bool) {
        if !opts.index || self.file.is_none() {
            return;
        }
        if always || self.known_len.abs_diff(self.indexed_len) >= REINDEX_BYTES {
            crate::index_file::save(self, self.dir());
            self.indexed_len = self.known_len;
        }
    }

    /// Record what differs between `old` and the current state (after a reload).
    pub(crate) fn diff_from(&self, old: &Collection, changes: &mut Vec<Change>) {
        let live = |c: &'_ Collection, id: &str| -> Option<u64> {
            c.slot(id).filter(|s| !s.deleted).map(|s| s.hash)
        };
        let (mine, theirs) = (self.sorted(), old.sorted());
        let mut ids: BTreeSet<&str> = mine.iter().map(|s| s.id).collect();
        ids.extend(theirs.iter().map(|s| s.id));
        for id in ids {
            let kind = match (live(old, id), live(self, id)) {
                (None, Some(_)) => ChangeKind::Created,
                (Some(_), None) => ChangeKind::Deleted,
                (Some(a), Some(b)) if a != b => ChangeKind::Updated,
                _ => continue,
            };
            changes.push(self.change(id, kind));
        }
    }

    fn change(&self, id: &str, kind: ChangeKind) -> Change {
        Change {
            collection: self.def.name.clone(),
            id: id.to_string(),
            kind,
        }
    }

    /// Parse bytes read from the file at `known_len` onwards. Complete lines are consumed;
    /// an incomplete last line is consumed only if it is a valid record.
    pub(crate) fn ingest(&mut self, mut data: Vec<u8>, mut changes: Option<&mut Vec<Change>>) {
        let offset = self.known_len;
        let mut pos = 0;
        if self.mid_line {
            // Bytes after a last line that had no newline: normally just that newline.
            let end = memchr::memchr(b'\n', &data).unwrap_or(data.len());
            if !trim(&data[..end]).is_empty() {
                let raw = data[..end].to_vec();
                self.issue(
                    self.lines,
                    IssueKind::Corrupt,
                    "text glued to the end of a record (a write without the store's newline)"
                        .into(),
                    raw,
                );
            }
            if end < data.len() {
                self.mid_line = false;
                pos = end + 1;
            } else {
                pos = end;
            }
        }
        // Complete lines: parsed (in parallel when there are many), applied in order.
        let complete_end = memchr::memrchr(b'\n', &data[pos..]).map(|i| pos + i + 1);
        if let Some(end) = complete_end {
            let (parsed, count) = parse_region(&data, pos, end, &self.def.indexed);
            let base = self.lines;
            for p in parsed {
                let line = base + p.rel;
                self.lines = line;
                match p.what {
                    Parsed::Record(meta) => {
                        let at = (offset + p.start as u64, offset + p.end as u64);
                        let hash = fnv(trim(&data[p.start..p.end]));
                        self.apply(meta, at, hash, changes.as_deref_mut())
                    }
                    Parsed::Marker => {
                        let raw = trim(&data[p.start..p.end]).to_vec();
                        self.issue(
                            line,
                            IssueKind::ConflictMarker,
                            "merge conflict marker: keep one version of the record between the markers, delete the rest".into(),
                            raw,
                        );
                    }
                    Parsed::Bad(reason) => {
                        let raw = trim(&data[p.start..p.end]).to_vec();
                        self.issue(line, IssueKind::Corrupt, reason, raw);
                    }
                }
            }
            self.lines = base + count;
            pos = end;
        }
        let mut consumed = pos;
        self.pending = None;
        if pos < data.len() {
            let rest = trim(&data[pos..]);
            if rest.is_empty() {
                consumed = data.len();
                self.mid_line = true;
            } else {
                match parse_meta(rest, &self.def.indexed) {
                    Ok(meta) => {
                        self.lines += 1;
                        let end = data.len();
                        let at = (offset + pos as u64, offset + end as u64);
                        self.apply(meta, at, fnv(rest), changes);
                        consumed = end;
                        self.mid_line = true;
                    }
                    Err(reason) => {
                        self.pending = Some(LineIssue {
                            file: self.path.clone(),
                            line: self.lines + 1,
                            kind: IssueKind::TornTail,
                            message: format!(
                                "incomplete last line (no newline; a write cut short?): {reason}"
                            ),
                            excerpt: excerpt(rest),
                            raw: rest.to_vec(),
                        });
                    }
                }
            }
        }
        data.truncate(consumed);
        self.known_len += consumed as u64;
        if data.len() >= TAIL {
            self.tail = data[data.len() - TAIL..].to_vec();
        } else {
            self.tail.extend_from_slice(&data);
            let cut = self.tail.len().saturating_sub(TAIL);
            self.tail.drain(..cut);
        }
    }

    fn issue(&mut self, line: u64, kind: IssueKind, message: String, raw: Vec<u8>) {
        self.issues.push(LineIssue {
            file: self.path.clone(),
            line,
            kind,
            message,
            excerpt: excerpt(&raw),
            raw,
        });
    }

    fn apply(
        &mut self,
        meta: LineMeta,
        (start, end): (u64, u64),
        hash: u64,
        changes: Option<&mut Vec<Change>>,
    ) {
        let n = match self.by_id.get(meta.id.as_str()) {
            Some(n) => Some(*n),
            None => self.copy_base(&meta.id),
        };
        let (n, was_live) = match n {
            Some(n) => {
                let old = &self.slots[n as usize];
                self.superseded += 1;
                if meta.updated_at < old.updated_at {
                    // An older version arriving later (a merge, clock skew): the newer stays.
                    return;
                }
                (n, Some(!old.deleted))
            }
            None => {
                let Ok(next) = u32::try_from(self.slots.len()) else {
                    return;
                };
                let id: Arc<str> = Arc::from(meta.id);
                self.by_id.insert(id.clone(), next);
                self.id_at.push((self.id_text.len(), next));
                self.id_text.extend_from_slice(id.as_bytes());
                self.id_text.push(b'\n');
                let ord = self.base.as_ref().map_or(0, |b| u64::from(b.n)) + self.new_ids;
                self.new_ids += 1;
                self.slots.push(Slot {
                    id,
                    updated_at: meta.updated_at,
                    deleted: true,
                    start,
                    end,
                    line: self.lines,
                    hash,
                    values: Box::new([]),
                    ord,
                    base: None,
                });
                (next, None)
            }
        };
        let now_live = !meta.deleted;
        if was_live == Some(true) {
            let old = std::mem::take(&mut self.slots[n as usize].values);
            self.index(n, &old, false);
        }
        let slot = &mut self.slots[n as usize];
        slot.updated_at = meta.updated_at;
        slot.deleted = meta.deleted;
        slot.start = start;
        slot.end = end;
        slot.line = self.lines;
        slot.hash = hash;
        slot.values = meta.values;
        if now_live {
            let values = std::mem::take(&mut self.slots[n as usize].values);
            self.index(n, &values, true);
            self.slots[n as usize].values = values;
        }
        let kind = match (was_live.unwrap_or(false), now_live) {
            (false, true) => ChangeKind::Created,
            (true, true) => ChangeKind::Updated,
            (true, false) => ChangeKind::Deleted,
            (false, false) => return,
        };
        if let Some(c) = changes {
            let id = self.slots[n as usize].id.clone();
            c.push(self.change(&id, kind));
        }
    }

    /// Copy the saved index's version of `id` (if it has one) into `slots`, where the
    /// line being applied will update it; its slot number.
    fn copy_base(&mut self, id: &str) -> Option<u32> {
        let base = self.base.as_ref()?;
        let b = base.slot(base.find(id)?)?;
        let next = u32::try_from(self.slots.len()).ok()?;
        let slot = Slot {
            id: Arc::from(b.id),
            updated_at: b.updated_at,
            deleted: b.deleted,
            start: b.start,
            end: b.end,
            line: b.line,
            hash: b.hash,
            values: b.values().into_owned().into(),
            ord: b.ord,
            base: Some(b.deleted),
        };
        let values = slot.values.clone();
        self.by_id.insert(slot.id.clone(), next);
        let live = !slot.deleted;
        self.slots.push(slot);
        if live {
            self.index(next, &values, true);
        }
        Some(next)
    }

    /// Add (or remove) record `n` under each key of each indexed value.
    fn index(&mut self, n: u32, values: &[IndexValue], add: bool) {
        for (idx, value) in self.indexes.iter_mut().zip(values) {
            let keys: &[IndexValue] = match value {
                IndexValue::List(items) => items,
                v => std::slice::from_ref(v),
            };
            for k in keys {
                if add {
                    match idx.get_mut(k) {
                        None => {
                            idx.insert(k.clone(), Ids::One(n));
                        }
                        Some(Ids::One(one)) if *one == n => {}
                        Some(entry @ Ids::One(_)) => {
                            if let Ids::One(first) = *entry {
                                *entry = Ids::Many(BTreeSet::from([first, n]));
                            }
                        }
                        Some(Ids::Many(set)) => {
                            set.insert(n);
                        }
                    }
                } else {
                    let empty = match idx.get_mut(k) {
                        Some(Ids::One(one)) => *one == n,
                        Some(Ids::Many(set)) => {
                            set.remove(&n);
                            set.is_empty()
                        }
                        None => false,
                    };
                    if empty {
                        idx.remove(k);
                    }
                }
            }
        }
    }

    /// A record's latest line, read from the file.
    pub fn bytes(&self, slot: &SlotRef) -> Result<Vec<u8>> {
        let Some(file) = &self.file else {
            return Err(Error::io(&self.path)(std::io::Error::other(
                "the collection's file is not open",
            )));
        };
        let mut b = read_range(file, slot.start, slot.end).map_err(Error::io(&self.path))?;
        let t = trim(&b);
        if t.len() != b.len() {
            b = t.to_vec();
        }
        Ok(b)
    }

    /// The latest line of a live record.
    pub fn get(&self, id: &str) -> Result<Option<(Vec<u8>, SlotRef<'_>)>> {
        match self.slot(id).filter(|s| !s.deleted) {
            Some(s) => Ok(Some((self.bytes(&s)?, s))),
            None => Ok(None),
        }
    }

    pub fn field_index(&self, field: &str) -> Result<usize> {
        self.def
            .indexed
            .iter()
            .position(|f| f == field)
            .ok_or_else(|| Error::NotIndexed {
                collection: self.def.name.clone(),
                field: field.to_string(),
                indexed: if self.def.indexed.is_empty() {
                    "(none)".into()
                } else {
                    self.def.indexed.join(", ")
                },
            })
    }

    /// Live records passing every filter, in the order they first appeared in the file.
    pub fn list(&self, filters: &[Filter]) -> Result<Vec<SlotRef<'_>>> {
        let mut resolved = Vec::with_capacity(filters.len());
        for f in filters {
            resolved.push((
                self.field_index(&f.field)?,
                f.op,
                IndexValue::from_json(&f.value),
            ));
        }
        let passes = |slot: &SlotRef| {
            !slot.deleted && {
                let values = slot.values();
                resolved
                    .iter()
                    .all(|(i, op, t)| values.get(*i).is_some_and(|v| matches(v, *op, t)))
            }
        };
        let Some(choice) = choose(&resolved) else {
            return Ok(self.in_order().into_iter().filter(passes).collect());
        };
        let mut out: Vec<SlotRef> = self
            .candidates(&choice)
            .into_iter()
            .map(|n| SlotRef::of(&self.slots[n as usize]))
            .collect();
        if let Some(base) = &self.base {
            out.extend(
                base.candidates(&choice)
                    .into_iter()
                    .filter_map(|ord| base.slot(ord))
                    .filter(|b| !self.by_id.contains_key(b.id)),
            );
        }
        out.retain(passes);
        out.sort_unstable_by_key(|s| s.ord);
        Ok(out)
    }

    /// The records in `slots` the choice allows (a superset of the answer).
    fn candidates(&self, choice: &Choice) -> Vec<u32> {
        let mut out: Vec<u32> = Vec::new();
        let mut push = |ids: &Ids| match ids {
            Ids::One(n) => out.push(*n),
            Ids::Many(set) => out.extend(set.iter().copied()),
        };
        match choice {
            Choice::Eq(i, t) => {
                if let Some(ids) = self.indexes[*i].get(t) {
                    push(ids);
                }
            }
            Choice::Contains(i, t) => {
                for (k, ids) in &self.indexes[*i] {
                    let hit = k == t
                        || matches!((k, t), (IndexValue::Str(s), IndexValue::Str(n)) if s.contains(&**n));
                    if hit {
                        push(ids);
                    }
                }
            }
            Choice::Range(i, op, t) => {
                let (lo, hi) = kind_bounds(t);
                let range = match op {
                    FilterOp::Lt => (lo, Bound::Excluded(t.clone())),
                    FilterOp::Le => (lo, Bound::Included(t.clone())),
                    FilterOp::Gt => (Bound::Excluded(t.clone()), hi),
                    _ => (Bound::Included(t.clone()), hi),
                };
                for (_, ids) in self.indexes[*i].range(range) {
                    push(ids);
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }
}

/// The most selective usable filter: an equality, else a `contains`, else a range on a
/// scalar; `None` when no index helps.
fn choose(filters: &[(usize, FilterOp, IndexValue)]) -> Option<Choice> {
    let pick = |want: &dyn Fn(FilterOp, &IndexValue) -> bool| {
        filters.iter().find(|(_, op, t)| want(*op, t))
    };
    if let Some((i, _, t)) = pick(&|op, t| op == FilterOp::Eq && !matches!(t, IndexValue::List(_)))
    {
        return Some(Choice::Eq(*i, t.clone()));
    }
    if let Some((i, _, t)) = pick(&|op, _| op == FilterOp::Contains) {
        return Some(Choice::Contains(*i, t.clone()));
    }
    let (i, op, t) = pick(&|op, t| {
        matches!(
            op,
            FilterOp::Lt | FilterOp::Le | FilterOp::Gt | FilterOp::Ge
        ) && matches!(
            t,
            IndexValue::Int(_) | IndexValue::Str(_) | IndexValue::Bool(_)
        )
    })?;
    Some(Choice::Range(*i, *op, t.clone()))
}

/// Parse the complete lines of `data[from..to]` (`to` just after a newline): on several
/// threads when it is big, in file order either way. Returns the parsed non-empty lines
/// and the number of lines.
fn parse_region(data: &[u8], from: usize, to: usize, indexed: &[String]) -> (Vec<ParsedLine>, u64) {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(8);
    if to - from < PARALLEL_BYTES || threads < 2 {
        return parse_lines(data, from, to, indexed);
    }
    // Cut at newlines into roughly equal chunks.
    let mut cuts = vec![from];
    for t in 1..threads {
        let guess = from + (to - from) * t / threads;
        let at = memchr::memchr(b'\n', &data[guess..to]).map_or(to, |i| guess + i + 1);
        if at > *cuts.last().unwrap_or(&from) && at < to {
            cuts.push(at);
        }
    }
    cuts.push(to);
    let parts: Vec<(Vec<ParsedLine>, u64)> = std::thread::scope(|s| {
        // A chunk whose thread cannot be started is parsed here instead.
        let started: Vec<_> = cuts
            .windows(2)
            .map(|w| {
                let (a, b) = (w[0], w[1]);
                let handle = std::thread::Builder::new()
                    .spawn_scoped(s, move || parse_lines(data, a, b, indexed))
                    .ok();
                (a, b, handle)
            })
            .collect();
        started
            .into_iter()
            .map(|(a, b, h)| match h {
                Some(h) => h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)),
                None => parse_lines(data, a, b, indexed),
            })
            .collect()
    });
    let mut all = Vec::new();
    let mut lines = 0;
    for (part, count) in parts {
        all.extend(part.into_iter().map(|mut p| {
            p.rel += lines;
            p
        }));
        lines += count;
    }
    (all, lines)
}

fn parse_lines(data: &[u8], from: usize, to: usize, indexed: &[String]) -> (Vec<ParsedLine>, u64) {
    let mut out = Vec::new();
    let mut start = from;
    let mut rel = 0;
    for nl in memchr::memchr_iter(b'\n', &data[from..to]) {
        let end = from + nl;
        rel += 1;
        let text = trim(&data[start..end]);
        if !text.is_empty() {
            let what = if is_conflict_marker(text) {
                Parsed::Marker
            } else {
                match parse_meta(text, indexed) {
                    Ok(meta) => Parsed::Record(meta),
                    Err(reason) => Parsed::Bad(reason),
                }
            };
            out.push(ParsedLine {
                rel,
                start,
                end,
                what,
            });
        }
        start = end + 1;
    }
    (out, rel)
}

/// The whole range of keys of the same kind as `t`.
fn kind_bounds(t: &IndexValue) -> (Bound<IndexValue>, Bound<IndexValue>) {
    match t {
        IndexValue::Int(_) => (
            Bound::Included(IndexValue::Int(i64::MIN)),
            Bound::Included(IndexValue::Int(i64::MAX)),
        ),
        IndexValue::Bool(_) => (
            Bound::Included(IndexValue::Bool(false)),
            Bound::Included(IndexValue::Bool(true)),
        ),
        _ => (
            Bound::Included(IndexValue::Str("".into())),
            Bound::Excluded(IndexValue::List(Box::new([]))),
        ),
    }
}

/// FNV-1a, 64 bits.
pub(crate) fn fnv(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for x in b {
        h ^= u64::from(*x);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Without surrounding ASCII whitespace (a `\r` from CRLF checkouts, stray spaces).
pub(crate) fn trim(b: &[u8]) -> &[u8] {
    b.trim_ascii()
}
