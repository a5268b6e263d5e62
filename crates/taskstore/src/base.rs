//! The records a saved index covers, answered from the index's bytes without building
//! per-record maps: a fixed-width slot table in first-appearance order (id, time, where
//! the latest line is, the encoded indexed values), the ids sorted (binary search, prefix
//! ranges), the ids one after the other (substring search) and, per indexed field, the
//! sorted keys with their postings (slot numbers). See `index_file` for the layout and
//! the validation; every offset was bounds-checked when the index was opened.

use std::ops::Range;

use crate::collection::{SlotRef, Vals};
use crate::filter::{FilterOp, matches};
use crate::line::IndexValue;

pub(crate) const SLOT_BYTES: usize = 64;
pub(crate) const KEY_BYTES: usize = 16;

/// How an indexed field narrows a list.
#[derive(Debug, Clone)]
pub(crate) enum Choice {
    Eq(usize, IndexValue),
    Contains(usize, IndexValue),
    Range(usize, FilterOp, IndexValue),
}

/// One indexed field's keys and postings (ranges of `Base::data`).
#[derive(Debug)]
pub(crate) struct Postings {
    pub keys: Range<usize>,
    pub heap: Range<usize>,
    pub ords: Range<usize>,
}

#[derive(Debug)]
pub(crate) struct Base {
    /// The index file as read.
    pub data: Vec<u8>,
    pub n: u32,
    pub live: u32,
    pub fields: usize,
    pub table: Range<usize>,
    pub ids: Range<usize>,
    pub sorted: Range<usize>,
    pub vals: Range<usize>,
    pub postings: Vec<Postings>,
}

pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

impl Base {
    fn row(&self, ord: u32) -> &[u8] {
        let at = self.table.start + ord as usize * SLOT_BYTES;
        self.data.get(at..at + SLOT_BYTES).unwrap_or(&[])
    }

    /// The id bytes of slot `ord` (without its newline).
    fn id_bytes(&self, ord: u32) -> &[u8] {
        let r = self.row(ord);
        let (off, len) = (u32_at(r, 0) as usize, u32_at(r, 4) as usize);
        let at = self.ids.start + off;
        self.data.get(at..at + len).unwrap_or(&[])
    }

    pub fn slot(&self, ord: u32) -> Option<SlotRef<'_>> {
        if ord >= self.n {
            return None;
        }
        let r = self.row(ord);
        let id = std::str::from_utf8(self.id_bytes(ord)).ok()?;
        let (voff, vlen) = (u32_at(r, 8) as usize, u32_at(r, 12) as usize);
        let at = self.vals.start + voff;
        Some(SlotRef {
            id,
            updated_at: u64_at(r, 16) as i64,
            start: u64_at(r, 24),
            end: u64_at(r, 32),
            line: u64_at(r, 40),
            hash: u64_at(r, 48),
            deleted: u32_at(r, 56) != 0,
            ord: u64::from(ord),
            vals: Vals::Enc(self.data.get(at..at + vlen).unwrap_or(&[]), self.fields),
        })
    }

    fn sorted_at(&self, i: usize) -> u32 {
        u32_at(&self.data, self.sorted.start + i * 4)
    }

    /// The first position in the sorted ids whose id is not below `key`.
    fn lower_bound(&self, key: &[u8]) -> usize {
        let (mut lo, mut hi) = (0usize, self.n as usize);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.id_bytes(self.sorted_at(mid)) < key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// The slot number of an id.
    pub fn find(&self, id: &str) -> Option<u32> {
        let at = self.lower_bound(id.as_bytes());
        let ord = self.sorted_at(at);
        (at < self.n as usize && self.id_bytes(ord) == id.as_bytes()).then_some(ord)
    }

    /// Slots whose id starts with `prefix`, in id order.
    pub fn with_prefix(&self, prefix: &str) -> Vec<SlotRef<'_>> {
        (self.lower_bound(prefix.as_bytes())..self.n as usize)
            .map(|i| self.sorted_at(i))
            .take_while(|o| self.id_bytes(*o).starts_with(prefix.as_bytes()))
            .filter_map(|o| self.slot(o))
            .collect()
    }

    /// Every (slot, offset in its id) where `needle` occurs in an id, in slot order.
    pub fn search(&self, needle: &[u8]) -> Vec<(u32, usize)> {
        let text = self.data.get(self.ids.clone()).unwrap_or(&[]);
        let mut out = Vec::new();
        for hit in memchr::memmem::find_iter(text, needle) {
            // The slot whose id starts at or before the hit (ids are laid out in order).
            let (mut lo, mut hi) = (0u32, self.n);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if (u32_at(self.row(mid), 0) as usize) <= hit {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            let Some(ord) = lo.checked_sub(1) else {
                continue;
            };
            let r = self.row(ord);
            let offset = hit - u32_at(r, 0) as usize;
            if offset + needle.len() <= u32_at(r, 4) as usize {
                out.push((ord, offset));
            }
        }
        out
    }

    fn key(&self, p: &Postings, k: usize) -> Option<(IndexValue, Range<usize>)> {
        let at = p.keys.start + k * KEY_BYTES;
        let (koff, klen) = (
            u32_at(&self.data, at) as usize,
            u32_at(&self.data, at + 4) as usize,
        );
        let (poff, plen) = (
            u32_at(&self.data, at + 8) as usize,
            u32_at(&self.data, at + 12) as usize,
        );
        let bytes = self
            .data
            .get(p.heap.start + koff..p.heap.start + koff + klen)?;
        let value = crate::index_file::decode_value(bytes)?;
        let start = p.ords.start + poff * 4;
        Some((value, start..start + plen * 4))
    }

    fn push_ords(&self, r: Range<usize>, out: &mut Vec<u32>) {
        out.extend(
            self.data
                .get(r)
                .unwrap_or(&[])
                .chunks_exact(4)
                .map(|c| u32_at(c, 0)),
        );
    }

    /// The live slots (of the base alone) the choice allows: a superset of the answer.
    pub fn candidates(&self, choice: &Choice) -> Vec<u32> {
        let field = match choice {
            Choice::Eq(i, _) | Choice::Contains(i, _) | Choice::Range(i, _, _) => *i,
        };
        let Some(p) = self.postings.get(field) else {
            return Vec::new();
        };
        let count = p.keys.len() / KEY_BYTES;
        let mut out = Vec::new();
        match choice {
            Choice::Eq(_, t) => {
                let (mut lo, mut hi) = (0, count);
                while lo < hi {
                    let mid = (lo + hi) / 2;
                    match self.key(p, mid) {
                        Some((k, _)) if &k < t => lo = mid + 1,
                        _ => hi = mid,
                    }
                }
                if let Some((k, r)) = self.key(p, lo).filter(|_| lo < count)
                    && &k == t
                {
                    self.push_ords(r, &mut out);
                }
                return out;
            }
            Choice::Contains(_, t) => {
                for (k, r) in (0..count).filter_map(|i| self.key(p, i)) {
                    let hit = &k == t
                        || matches!((&k, t), (IndexValue::Str(s), IndexValue::Str(n)) if s.contains(&**n));
                    if hit {
                        self.push_ords(r, &mut out);
                    }
                }
            }
            Choice::Range(_, op, t) => {
                for (k, r) in (0..count).filter_map(|i| self.key(p, i)) {
                    if matches(&k, *op, t) {
                        self.push_ords(r, &mut out);
                    }
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }
}
