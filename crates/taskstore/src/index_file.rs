//! The persistent index of a collection: what a load of `NAME.jsonl` found (per id the
//! offsets of its latest line, its time, the indexed values; the unreadable lines; how far
//! the file was read), saved in `<store>/.index/NAME.idx` so the next process reads the
//! index and only the bytes appended since instead of parsing the whole file.
//!
//! The JSONL file stays the truth. The index is a cache that is never trusted blindly: it
//! is used only when it names the same file (device, inode), the file is at least as long
//! as what it covers, and the bytes just before that point are the ones it remembers
//! (the last 64 bytes, and an FNV-1a hash of the last 4 KiB); its own contents carry a
//! checksum. Anything else (a file git rewrote, a compaction, a file cut short, a torn or
//! corrupt index, another format version) makes the caller parse the file again and
//! write a fresh index. A failure to write it is ignored: the next load parses again.
//! The directory holds a `.gitignore` of `*`, so git never sees it.
//!
//! Layout (format 2, little-endian): magic; collection name and indexed fields; the
//! validation fields (device, inode, size, mtime, covered length, tail hash); line count,
//! superseded count, mid-line flag, last 64 bytes; the unreadable lines; then the tables
//! `base::Base` answers from without building maps: slot count and live count; the slot
//! table (64 bytes per id in order of first appearance: id offset/length, values
//! offset/length, updated-at, start, end, line, hash, deleted); the ids one after the other
//! (each ending in a newline); the slot numbers sorted by id; the encoded values; per
//! indexed field the sorted keys (offset/length of the key, offset/count of its postings),
//! the key bytes and the postings (ascending slot numbers of live records). Last, a
//! word-wise checksum of everything before it. At open every offset is bounds-checked.

use std::fs::File;
use std::io::Write as _;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::collections::BTreeMap;
use std::ops::Range;

use crate::base::{Base, KEY_BYTES, Postings, SLOT_BYTES, u32_at, u64_at};
use crate::collection::{Collection, IssueKind, LineIssue};
use crate::file::read_range;
use crate::line::IndexValue;

const MAGIC: &[u8; 8] = b"TSIDX\x00\x00\x02";
/// How much of the file before the covered length is hashed.
const TAIL_HASH: u64 = 4096;

/// `<store>/.index/`.
pub(crate) fn dir_of(store: &Path) -> PathBuf {
    store.join(".index")
}

pub(crate) fn path_of(store: &Path, collection: &str) -> PathBuf {
    dir_of(store).join(format!("{collection}.idx"))
}

fn tail_hash(file: &File, len: u64) -> Option<u64> {
    let b = read_range(file, len.saturating_sub(TAIL_HASH), len).ok()?;
    Some(crate::collection::fnv(&b))
}

// ---- writing ----

struct W(Vec<u8>);
impl W {
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.0.extend_from_slice(b);
    }
    fn value(&mut self, v: &IndexValue) {
        match v {
            IndexValue::Null => self.0.push(0),
            IndexValue::Bool(b) => self.0.extend_from_slice(&[1, u8::from(*b)]),
            IndexValue::Int(i) => {
                self.0.push(2);
                self.i64(*i);
            }
            IndexValue::Str(s) => {
                self.0.push(3);
                self.bytes(s.as_bytes());
            }
            IndexValue::List(items) => {
                self.0.push(4);
                self.u64(items.len() as u64);
                for i in items {
                    self.value(i);
                }
            }
            IndexValue::Other(s) => {
                self.0.push(5);
                self.bytes(s.as_bytes());
            }
        }
    }
}

/// Save what `c` knows about its file. Errors are ignored (the index is a cache).
pub(crate) fn save(c: &Collection, store: &Path) {
    let (Some(file), Some((dev, ino))) = (&c.file, c.file_id) else {
        return;
    };
    let Some(hash) = tail_hash(file, c.known_len) else {
        return;
    };
    let Ok(meta) = file.metadata() else {
        return;
    };
    let mut w = W(Vec::with_capacity(64 * 1024));
    w.0.extend_from_slice(MAGIC);
    w.bytes(c.def.name.as_bytes());
    w.bytes(c.def.indexed.join("\n").as_bytes());
    for v in [dev, ino, meta.len(), mtime_ns(&meta), c.known_len, hash] {
        w.u64(v);
    }
    for v in [c.lines, c.superseded] {
        w.u64(v);
    }
    w.0.push(u8::from(c.mid_line));
    w.bytes(&c.tail);
    w.u64(c.issues.len() as u64);
    for i in &c.issues {
        w.u64(i.line);
        w.0.push(match i.kind {
            IssueKind::Corrupt => 0,
            IssueKind::ConflictMarker => 1,
            IssueKind::TornTail => 2,
        });
        w.bytes(i.message.as_bytes());
        w.bytes(&i.raw);
    }
    if tables(c, &mut w).is_none() {
        return;
    }
    let sum = sum64(&w.0);
    w.u64(sum);
    let _ = write(store, &c.def.name, &w.0);
}

fn u32_of(n: usize) -> Option<[u8; 4]> {
    u32::try_from(n).ok().map(u32::to_le_bytes)
}

/// The slot table, the ids (laid out, and sorted), the values and the postings; `None`
/// when a table would not fit its 32-bit offsets.
fn tables(c: &Collection, w: &mut W) -> Option<()> {
    let all = c.in_order();
    let fields = c.def.indexed.len();
    let mut table = Vec::with_capacity(all.len() * SLOT_BYTES);
    let mut ids = Vec::new();
    let mut vals = W(Vec::new());
    let mut post: Vec<BTreeMap<IndexValue, Vec<u32>>> = vec![BTreeMap::new(); fields];
    let mut live = 0u64;
    for (ord, s) in all.iter().enumerate() {
        let ord32 = u32::try_from(ord).ok()?;
        let (id_off, v_off) = (ids.len(), vals.0.len());
        ids.extend_from_slice(s.id.as_bytes());
        ids.push(b'\n');
        if !s.deleted {
            live += 1;
            let values = s.values();
            if values.len() != fields {
                return None;
            }
            for (f, v) in values.iter().enumerate() {
                vals.value(v);
                let keys: &[IndexValue] = match v {
                    IndexValue::List(items) => items,
                    v => std::slice::from_ref(v),
                };
                for k in keys {
                    let list = post[f].entry(k.clone()).or_default();
                    if list.last() != Some(&ord32) {
                        list.push(ord32);
                    }
                }
            }
        }
        for n in [id_off, s.id.len(), v_off, vals.0.len() - v_off] {
            table.extend_from_slice(&u32_of(n)?);
        }
        for v in [s.updated_at as u64, s.start, s.end, s.line, s.hash] {
            table.extend_from_slice(&v.to_le_bytes());
        }
        table.extend_from_slice(&u32::from(s.deleted).to_le_bytes());
        table.extend_from_slice(&[0; 4]);
    }
    u32_of(ids.len())?;
    u32_of(vals.0.len())?;
    let mut sorted: Vec<u32> = (0..all.len() as u32).collect();
    sorted.sort_unstable_by(|a, b| all[*a as usize].id.cmp(all[*b as usize].id));
    w.u64(all.len() as u64);
    w.u64(live);
    w.bytes(&table);
    w.bytes(&ids);
    w.bytes(
        &sorted
            .iter()
            .flat_map(|o| o.to_le_bytes())
            .collect::<Vec<u8>>(),
    );
    w.bytes(&vals.0);
    for field in post {
        let (mut keys, mut heap, mut ords) = (Vec::new(), W(Vec::new()), Vec::new());
        for (k, list) in field {
            let (koff, poff) = (heap.0.len(), ords.len() / 4);
            heap.value(&k);
            for n in [koff, heap.0.len() - koff, poff, list.len()] {
                keys.extend_from_slice(&u32_of(n)?);
            }
            ords.extend(list.iter().flat_map(|o| o.to_le_bytes()));
        }
        u32_of(heap.0.len())?;
        w.bytes(&keys);
        w.bytes(&heap.0);
        w.bytes(&ords);
    }
    Some(())
}

/// A checksum of the index's bytes, eight at a time on four independent lanes (the index
/// is read whole at every open, so this must be cheap; it catches torn and damaged files,
/// not forgeries).
pub(crate) fn sum64(b: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let word = |w: &[u8]| u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
    let mut lanes = [
        0xcbf2_9ce4_8422_2325 ^ b.len() as u64,
        K,
        K.rotate_left(17),
        K.rotate_left(41),
    ];
    let mut blocks = b.chunks_exact(32);
    for block in &mut blocks {
        for (lane, w) in lanes.iter_mut().zip(block.chunks_exact(8)) {
            *lane = (*lane ^ word(w)).wrapping_mul(K).rotate_left(29);
        }
    }
    let mut h = lanes
        .iter()
        .fold(0u64, |h, l| (h ^ l).wrapping_mul(K).rotate_left(31));
    for x in blocks.remainder() {
        h = (h ^ u64::from(*x)).wrapping_mul(0x0100_0000_01b3);
    }
    h ^ (h >> 29)
}

fn write(store: &Path, name: &str, data: &[u8]) -> std::io::Result<()> {
    let dir = dir_of(store);
    std::fs::create_dir_all(&dir)?;
    // Never written through a symlink (a repository could ship one pointing elsewhere).
    if std::fs::symlink_metadata(&dir)?.file_type().is_symlink() {
        return Err(std::io::Error::other("the index directory is a symlink"));
    }
    let ignore = dir.join(".gitignore");
    if std::fs::symlink_metadata(&ignore).is_err() {
        // `create_new` fails on anything already there, a symlink included.
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&ignore)?;
        f.write_all(b"# taskstore's rebuildable index cache\n*\n")?;
    }
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}.idx."))
        .tempfile_in(&dir)?;
    tmp.write_all(data)?;
    tmp.persist(path_of(store, name)).map_err(|e| e.error)?;
    Ok(())
}

// ---- reading ----

struct R<'a>(&'a [u8]);
impl R<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn bytes(&mut self) -> Option<&[u8]> {
        let n = usize::try_from(self.u64()?).ok()?;
        self.take(n)
    }
    fn str(&mut self) -> Option<&str> {
        std::str::from_utf8(self.bytes()?).ok()
    }
    fn value(&mut self, depth: u8) -> Option<IndexValue> {
        Some(match self.u8()? {
            0 => IndexValue::Null,
            1 => IndexValue::Bool(self.u8()? != 0),
            2 => IndexValue::Int(self.i64()?),
            3 => IndexValue::Str(self.str()?.into()),
            4 if depth < 8 => {
                let n = self.count()?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.value(depth + 1)?);
                }
                IndexValue::List(items.into())
            }
            5 => IndexValue::Other(self.str()?.into()),
            _ => return None,
        })
    }
    /// A count no larger than the bytes left could hold.
    fn count(&mut self) -> Option<usize> {
        let n = usize::try_from(self.u64()?).ok()?;
        (n <= self.0.len()).then_some(n)
    }
}

/// One encoded value (a key of the postings, or a record's value).
pub(crate) fn decode_value(b: &[u8]) -> Option<IndexValue> {
    let mut r = R(b);
    let v = r.value(0)?;
    r.0.is_empty().then_some(v)
}

/// A record's encoded values (one per indexed field).
pub(crate) fn decode_values(b: &[u8], fields: usize) -> Option<Box<[IndexValue]>> {
    let mut r = R(b);
    let out: Option<Vec<IndexValue>> = (0..fields).map(|_| r.value(0)).collect();
    r.0.is_empty().then_some(out?.into())
}

/// Fill the empty collection `c` from its saved index if that index is valid for `file`
/// (open and locked by the caller). `false` (and `c` untouched) when it is missing, stale,
/// corrupt or foreign.
pub(crate) fn load(c: &mut Collection, store: &Path, locked: &crate::file::Locked) -> bool {
    let Ok(file) = crate::file::reopen(locked, &c.path) else {
        return false;
    };
    let Ok(data) = read_whole(&path_of(store, &c.def.name)) else {
        return false;
    };
    let Ok(meta) = file.metadata() else {
        return false;
    };
    match parse(c, data, &meta, file) {
        Some(fresh) => {
            *c = fresh;
            true
        }
        None => false,
    }
}

/// Below this an index is read into ordinary pages.
const HUGE_PAGE_MIN: usize = 4 << 20;

/// The whole file at `path`, like `std::fs::read`, but a large file is read into a buffer
/// advised to live in transparent huge pages: the index of 100,000 records is 22 MB, and
/// faulting that in 4 KiB at a time (each page zeroed by the kernel) was half of a
/// store command's time. Where huge pages are off the advice is ignored.
pub(crate) fn read_whole(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut f = File::open(path)?;
    let len = usize::try_from(f.metadata()?.len()).unwrap_or(usize::MAX);
    // The size is the file's word: a huge or sparse file is an error, never an abort.
    let mut data: Vec<u8> = Vec::new();
    data.try_reserve_exact(len.saturating_add(1))
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::OutOfMemory, e))?;
    if len >= HUGE_PAGE_MIN {
        advise_huge(&mut data);
    }
    f.read_to_end(&mut data)?;
    Ok(data)
}

/// Advise the kernel to back the page-aligned part of `v`'s spare capacity with huge pages.
fn advise_huge(v: &mut Vec<u8>) {
    const PAGE: usize = 4096;
    let spare = v.spare_capacity_mut();
    let start = spare.as_mut_ptr() as usize;
    let aligned = start.next_multiple_of(PAGE);
    let end = (start + spare.len()) / PAGE * PAGE;
    if end > aligned {
        // SAFETY: the range lies within the vector's own allocation, which lives until
        // the vector is dropped; madvise only changes how the kernel backs those pages
        // and never their contents or validity.
        unsafe {
            libc::madvise(
                aligned as *mut libc::c_void,
                end - aligned,
                libc::MADV_HUGEPAGE,
            );
        }
    }
}

fn mtime_ns(m: &std::fs::Metadata) -> u64 {
    (m.mtime() as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(m.mtime_nsec() as u64)
}

/// The header: whether the index belongs to this file as it is now, and what the load
/// found besides records (line count, the tail, the unreadable lines).
fn header(c: &Collection, r: &mut R, meta: &std::fs::Metadata, file: File) -> Option<Collection> {
    let (dev, ino, len) = (meta.dev(), meta.ino(), meta.len());
    if r.take(MAGIC.len())? != MAGIC
        || r.str()? != c.def.name
        || r.str()? != c.def.indexed.join("\n")
    {
        return None;
    }
    let (i_dev, i_ino, i_len, i_mtime) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
    let (known_len, hash) = (r.u64()?, r.u64()?);
    // Same file, not cut below what the index covers, not rewritten in place at the same
    // size (appends change the size), the same bytes before the covered end.
    if (i_dev, i_ino) != (dev, ino)
        || known_len > len
        || (len == i_len && mtime_ns(meta) != i_mtime)
        || tail_hash(&file, known_len)? != hash
    {
        return None;
    }
    let mut fresh = Collection::new(c.def.clone(), c.path.parent().unwrap_or(Path::new(".")));
    fresh.file_id = Some((dev, ino));
    fresh.known_len = known_len;
    fresh.lines = r.u64()?;
    fresh.superseded = r.u64()?;
    fresh.mid_line = r.u8()? != 0;
    fresh.tail = r.bytes()?.to_vec();
    if known_len < fresh.tail.len() as u64
        || read_range(&file, known_len - fresh.tail.len() as u64, known_len).ok()? != fresh.tail
    {
        return None;
    }
    // (`file` is our own descriptor, not the locked one: it shares no lock.)
    fresh.file = Some(Arc::new(file));
    for _ in 0..r.count()? {
        let line = r.u64()?;
        let kind = match r.u8()? {
            0 => IssueKind::Corrupt,
            1 => IssueKind::ConflictMarker,
            _ => IssueKind::TornTail,
        };
        let message = r.str()?.to_string();
        let raw = r.bytes()?.to_vec();
        fresh.issues.push(LineIssue {
            file: fresh.path.clone(),
            line,
            kind,
            message,
            excerpt: crate::line::excerpt(&raw),
            raw,
        });
    }
    Some(fresh)
}

fn parse(
    c: &Collection,
    data: Vec<u8>,
    meta: &std::fs::Metadata,
    file: File,
) -> Option<Collection> {
    let body_len = data.len().checked_sub(8)?;
    let (body, sum) = data.split_at_checked(body_len)?;
    if sum64(body) != u64::from_le_bytes(sum.try_into().ok()?) {
        return None;
    }
    let mut r = R(body);
    let mut fresh = header(c, &mut r, meta, file)?;
    let (n, live) = (r.u64()?, r.u64()?);
    let section = |r: &mut R| -> Option<Range<usize>> {
        let len = r.count()?;
        let start = body_len - r.0.len();
        r.take(len)?;
        Some(start..start + len)
    };
    let (table, ids, sorted, vals) = (
        section(&mut r)?,
        section(&mut r)?,
        section(&mut r)?,
        section(&mut r)?,
    );
    let mut postings = Vec::new();
    for _ in 0..c.def.indexed.len() {
        let (keys, heap, ords) = (section(&mut r)?, section(&mut r)?, section(&mut r)?);
        postings.push(Postings { keys, heap, ords });
    }
    if !r.0.is_empty() {
        return None;
    }
    let base = Base {
        n: u32::try_from(n).ok()?,
        live: u32::try_from(live).ok().filter(|l| u64::from(*l) <= n)?,
        fields: c.def.indexed.len(),
        table,
        ids,
        sorted,
        vals,
        postings,
        data,
    };
    if !consistent(&base, fresh.known_len) {
        return None;
    }
    fresh.base = Some(base);
    Some(fresh)
}

/// Every offset in the tables is within its section (so no lookup can read past one).
fn consistent(b: &Base, known_len: u64) -> bool {
    let n = b.n as usize;
    if b.table.len() != n * SLOT_BYTES || b.sorted.len() != n * 4 {
        return false;
    }
    let within = |off: u32, len: u32, r: &Range<usize>| (off as usize + len as usize) <= r.len();
    let rows = b.data[b.table.clone()].chunks_exact(SLOT_BYTES);
    for row in rows {
        let (start, end) = (u64_at(row, 24), u64_at(row, 32));
        if !within(u32_at(row, 0), u32_at(row, 4), &b.ids)
            || !within(u32_at(row, 8), u32_at(row, 12), &b.vals)
            || start > end
            || end > known_len
        {
            return false;
        }
    }
    if b.data[b.sorted.clone()]
        .chunks_exact(4)
        .any(|o| u32_at(o, 0) >= b.n)
    {
        return false;
    }
    b.postings.iter().all(|p| {
        p.keys.len() % KEY_BYTES == 0
            && p.ords.len() % 4 == 0
            && b.data[p.keys.clone()].chunks_exact(KEY_BYTES).all(|k| {
                within(u32_at(k, 0), u32_at(k, 4), &p.heap)
                    && (u32_at(k, 8) as usize + u32_at(k, 12) as usize) * 4 <= p.ords.len()
            })
            && b.data[p.ords.clone()]
                .chunks_exact(4)
                .all(|o| u32_at(o, 0) < b.n)
    })
}
