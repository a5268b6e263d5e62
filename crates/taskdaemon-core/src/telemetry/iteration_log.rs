//! `.ralph/logs/iteration-NNN.log`: everything the agent and the validation printed, as they
//! printed it, plus the harness's notes (lines starting with `[taskdaemon]`).
//!
//! Bounded: the agent's output takes at most 3/4 of the cap, the validation's (a new
//! [`IterationLog::section`]) what is left. In each section, output past the section's head
//! part is held in a tail buffer of fixed size; what falls out of it is counted, and the
//! file gets one note saying how many lines and bytes were dropped where. The harness's
//! notes are never dropped. So a log holds at most the cap plus the notes, and memory at
//! most one tail, whatever the agent prints.
//!
//! Lines of the head part and notes are written (and flushed) as they come, so `logs
//! --follow` sees them at once and a killed harness leaves them; [`IterationLog::finish`]
//! syncs the file.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::agent::Stream;
use crate::fsutil::PendingSyncs;

/// The default cap of one iteration's log (`max-log-size`).
pub const DEFAULT_LOG_CAP: u64 = 50 * 1024 * 1024;
/// The smallest cap accepted.
pub const MIN_LOG_CAP: u64 = 16 * 1024;
/// At most this much of the cap is the tail (kept in memory until the iteration ends).
const MAX_TAIL: u64 = 4 * 1024 * 1024;

const OUT: u8 = b'o';
const NOTE: u8 = b'n';

#[derive(Debug)]
pub struct IterationLog {
    path: PathBuf,
    out: BufWriter<File>,
    cap: u64,
    /// Bytes in the file (of earlier attempts too) and output written to it.
    used: u64,
    /// Output bytes the section's head may still take.
    head_left: u64,
    tail_cap: usize,
    /// Entries past the head: a tag byte (output or note), the line, `\n`; `start` is where
    /// the oldest entry begins (compacted now and then).
    tail: Vec<u8>,
    start: usize,
    dropped_lines: u64,
    dropped_bytes: u64,
    /// Files of this iteration the log puts back at [`IterationLog::finish`] if the agent
    /// deleted them (its prompt).
    kept: Vec<(PathBuf, Vec<u8>)>,
}

impl IterationLog {
    /// Open (append: an iteration done again after a kill adds to its log) with a cap of
    /// `cap` bytes of output.
    pub fn create(path: &Path, cap: u64) -> std::io::Result<IterationLog> {
        let f = crate::fsutil::open_append(path)?;
        let earlier = f.metadata().map(|m| m.len()).unwrap_or(0);
        let cap = cap.max(MIN_LOG_CAP);
        let mut log = IterationLog {
            path: path.to_path_buf(),
            out: BufWriter::new(f),
            cap,
            used: earlier,
            head_left: 0,
            tail_cap: 0,
            tail: Vec::new(),
            start: 0,
            dropped_lines: 0,
            dropped_bytes: 0,
            kept: Vec::new(),
        };
        log.budget(cap / 4 * 3);
        if earlier > 0 {
            log.note(
                "this iteration starts again: the output of an earlier attempt (a killed harness, or a wait for the agent's limits) is above",
            );
        }
        Ok(log)
    }

    /// Give the next output `bytes` (less what the file holds already), at least a little.
    fn budget(&mut self, bytes: u64) {
        let b = bytes.saturating_sub(self.used).max(MIN_LOG_CAP / 2);
        let tail = (b / 2).min(MAX_TAIL);
        self.tail_cap = tail as usize;
        self.head_left = b - tail;
    }

    /// A new section of output (the validation's): what is held of the last one is
    /// written, and the new one gets the rest of the cap.
    pub fn section(&mut self) {
        self.flush_tail();
        self.budget(self.cap);
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A line of the agent's (or validation's) output; stderr lines are marked.
    pub fn output(&mut self, stream: Stream, line: &[u8]) {
        let mark: &[u8] = if stream == Stream::Stderr {
            b"[stderr] "
        } else {
            b""
        };
        let len = (mark.len() + line.len() + 1) as u64;
        if self.tail.is_empty() && len <= self.head_left {
            self.head_left -= len;
            self.used += len;
            let _ = self.out.write_all(mark);
            let _ = self.out.write_all(line);
            let _ = self.out.write_all(b"\n");
            // Line by line: a killed harness leaves what was printed.
            let _ = self.out.flush();
            return;
        }
        self.head_left = 0;
        self.tail.push(OUT);
        self.tail.extend_from_slice(mark);
        // A line longer than the whole tail keeps only its end.
        let room = self.tail_cap.saturating_sub(mark.len() + 2).max(1);
        if line.len() > room {
            self.dropped_bytes += (line.len() - room) as u64;
            self.tail.extend_from_slice(&line[line.len() - room..]);
        } else {
            self.tail.extend_from_slice(line);
        }
        self.tail.push(b'\n');
        self.trim();
    }

    /// A note of the harness.
    pub fn note(&mut self, text: &str) {
        for l in text.lines() {
            if self.tail.is_empty() {
                let _ = writeln!(self.out, "[taskdaemon] {l}");
                let _ = self.out.flush();
            } else {
                self.tail.push(NOTE);
                self.tail.extend_from_slice(l.as_bytes());
                self.tail.push(b'\n');
                self.trim();
            }
        }
    }

    /// Drop the oldest output until the tail fits; notes that fall out are written.
    fn trim(&mut self) {
        while self.tail.len() - self.start > self.tail_cap {
            let Some(end) = self.tail[self.start..].iter().position(|b| *b == b'\n') else {
                break;
            };
            let entry = self.start..self.start + end + 1;
            if self.tail[entry.start] == NOTE {
                self.write_dropped();
                let text = self.tail[entry.start + 1..entry.end].to_vec();
                let _ = self.out.write_all(b"[taskdaemon] ");
                let _ = self.out.write_all(&text);
            } else {
                self.dropped_lines += 1;
                self.dropped_bytes += (entry.len() - 1) as u64;
            }
            self.start = entry.end;
        }
        if self.start > self.tail_cap {
            self.tail.drain(..self.start);
            self.start = 0;
        }
    }

    /// The note of what was dropped since the last one, if anything was.
    fn write_dropped(&mut self) {
        if self.dropped_lines == 0 && self.dropped_bytes == 0 {
            return;
        }
        let _ = writeln!(
            self.out,
            "[taskdaemon] output cut: {} line(s), {} bytes dropped here (the log keeps its first and last part; max-log-size)",
            self.dropped_lines, self.dropped_bytes
        );
        self.dropped_lines = 0;
        self.dropped_bytes = 0;
    }

    /// Write what the tail holds, after the note of what was dropped.
    fn flush_tail(&mut self) {
        self.write_dropped();
        let tail = std::mem::take(&mut self.tail);
        for entry in tail[self.start..].split_inclusive(|b| *b == b'\n') {
            let Some((tag, rest)) = entry.split_first() else {
                continue;
            };
            if *tag == NOTE {
                let _ = self.out.write_all(b"[taskdaemon] ");
            } else {
                self.used += rest.len() as u64;
            }
            let _ = self.out.write_all(rest);
        }
        self.start = 0;
        self.head_left = 0;
    }

    /// Put `contents` back at `path` at [`IterationLog::finish`] if it is gone by then.
    pub fn keep(&mut self, path: &Path, contents: &[u8]) {
        self.kept.push((path.to_path_buf(), contents.to_vec()));
    }

    /// Write the tail, flush and sync: called at the end of every iteration. An agent that
    /// deleted or replaced the log (`rm -rf .ralph/logs`) took only its name: the open file
    /// still holds the iteration, and it is written back under that name, as is every file
    /// [`IterationLog::keep`] was given.
    pub fn finish(self) -> std::io::Result<()> {
        self.finish_with(None)
    }

    /// [`IterationLog::finish`] whose sync waits for the next
    /// [`crate::fsutil::write_atomic_after`] of `pending` (the run state's save).
    pub fn finish_deferred(self, pending: &mut PendingSyncs) -> std::io::Result<()> {
        self.finish_with(Some(pending))
    }

    fn finish_with(mut self, pending: Option<&mut PendingSyncs>) -> std::io::Result<()> {
        self.flush_tail();
        self.out.flush()?;
        match pending {
            Some(p) => p.push(&self.path, self.out.get_ref().try_clone()?),
            None => self.out.get_ref().sync_data()?,
        }
        self.put_back_if_gone()?;
        for (path, contents) in &self.kept {
            if std::fs::symlink_metadata(path).is_err() {
                put_back(path, contents)?;
            }
        }
        Ok(())
    }

    fn put_back_if_gone(&self) -> std::io::Result<()> {
        use std::io::Read as _;
        use std::os::fd::AsRawFd as _;
        use std::os::unix::fs::MetadataExt as _;
        let ours = self.out.get_ref().metadata()?;
        let named = std::fs::symlink_metadata(&self.path);
        if named.is_ok_and(|m| m.dev() == ours.dev() && m.ino() == ours.ino()) {
            return Ok(());
        }
        // The file opened again through this process's descriptor: it reads even once
        // unlinked (the descriptor itself was opened to append only).
        let fd = format!("/proc/self/fd/{}", self.out.get_ref().as_raw_fd());
        let mut contents = Vec::new();
        File::open(fd)?.read_to_end(&mut contents)?;
        put_back(&self.path, &contents)
    }
}

/// Write `contents` at `path`, its directory made again when gone (inside the work tree).
fn put_back(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        crate::fsutil::create_dir_confined(dir)?;
    }
    crate::fsutil::write_atomic(path, contents)
}

/// Parse a size: `52428800`, `50MB`, `50M`, `512KB`, `1GB`, `1.5GB` (powers of 1024).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u64 = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1024,
        "M" | "MB" | "MIB" => 1024 * 1024,
        "G" | "GB" | "GIB" => 1024 * 1024 * 1024,
        u => {
            return Err(format!(
                "unknown size unit `{u}` in `{text}`; use B, KB, MB or GB"
            ));
        }
    };
    let not_a_size = || format!("`{text}` is not a size; use e.g. 50MB, 512KB, 1.5GB");
    if let Ok(n) = num.parse::<u64>() {
        return n
            .checked_mul(mult)
            .ok_or_else(|| format!("`{text}` is too large"));
    }
    let x: f64 = num.parse().map_err(|_| not_a_size())?;
    let bytes = (x * mult as f64).round();
    if !x.is_finite() || bytes >= u64::MAX as f64 {
        return Err(format!("`{text}` is too large"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_keeps_head_tail_and_every_note_within_the_cap() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("iteration-001.log");
        let cap = 64 * 1024;
        let mut log = IterationLog::create(&p, cap).unwrap();
        log.note("started");
        for i in 0..100_000u32 {
            log.output(Stream::Stdout, format!("line {i}").as_bytes());
            if i == 30_000 {
                log.note("a note amid the flood");
            }
            if i == 50_000 {
                log.output(Stream::Stdout, b"agent end");
                log.section();
                log.note("validation: $ flood");
            }
        }
        log.output(Stream::Stderr, b"the very end");
        log.note("ended");
        log.finish().unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.len() as u64 <= cap + 1024, "{}", text.len());
        assert!(text.starts_with("[taskdaemon] started\nline 0\nline 1\n"));
        assert!(text.contains("[taskdaemon] a note amid the flood\n"));
        assert!(text.contains("agent end\n[taskdaemon] validation: $ flood\nline 50001\n"));
        assert!(text.ends_with("line 99999\n[stderr] the very end\n[taskdaemon] ended\n"));
        let cuts: Vec<&str> = text.lines().filter(|l| l.contains("output cut")).collect();
        assert_eq!(
            cuts.len(),
            3,
            "before the kept note and before each tail: {cuts:?}"
        );
        // Every line is either kept or counted.
        let kept = text.lines().filter(|l| l.starts_with("line ")).count() as u64;
        let dropped: u64 = cuts
            .iter()
            .map(|c| c.split_whitespace().nth(3).unwrap().parse::<u64>().unwrap())
            .sum();
        assert_eq!(kept + dropped, 100_000);
        let validation = text.split("validation: $ flood").nth(1).unwrap();
        assert!(
            validation.len() as u64 > cap / 8,
            "the validation got its share"
        );
    }

    #[test]
    fn a_deferred_finish_writes_everything_and_leaves_the_sync_pending() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("iteration-001.log");
        let mut log = IterationLog::create(&p, 64 * 1024).unwrap();
        log.output(Stream::Stdout, b"agent says hi");
        log.note("iteration 1 ended");
        let mut pending = PendingSyncs::default();
        log.finish_deferred(&mut pending).unwrap();
        assert_eq!(pending.len(), 1);
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(
            text.contains("agent says hi") && text.contains("iteration 1 ended"),
            "{text}"
        );
    }

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_size("50MB"), Ok(50 * 1024 * 1024));
        assert_eq!(parse_size("512k"), Ok(512 * 1024));
        assert_eq!(parse_size("100"), Ok(100));
        assert!(parse_size("5 parsecs").is_err());
        assert!(parse_size("99999999999999999999GB").is_err());
        assert_eq!(parse_size("1.5MB"), Ok(1536 * 1024));
        assert_eq!(parse_size("0.5k"), Ok(512));
        for bad in [".", "1..5MB", "1e9", "-1MB", "1.5.5"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }
}
