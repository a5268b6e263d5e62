//! The selected run's iteration log, followed as it grows.

use std::io::{BufRead, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use taskdaemon_core::agent::readable::LogReader;

/// Lines kept in memory; older ones scroll out.
const KEEP: usize = 5000;
/// The most read from a log at once (the tail of a huge log).
const CHUNK: u64 = 1 << 20;

#[derive(Default)]
pub struct LogPane {
    pub path: Option<PathBuf>,
    offset: u64,
    partial: String,
    pub lines: Vec<String>,
    /// Lines from the bottom the view is scrolled up (0: following).
    pub scroll: usize,
    pub search: Option<String>,
    /// Lines pushed by the daemon, shown instead of the file while the file lags.
    pub live: Option<Vec<String>>,
    /// The log read as everywhere else: the agent's words, one line per tool call.
    reader: LogReader,
}

impl LogPane {
    /// Follow `path` (a new one starts over); read what was appended.
    pub fn follow(&mut self, path: Option<PathBuf>) {
        if path != self.path {
            *self = LogPane {
                path,
                search: self.search.take(),
                ..LogPane::default()
            };
        }
        let Some(p) = self.path.clone() else { return };
        self.read_more(&p);
    }

    fn read_more(&mut self, p: &Path) {
        let Ok(mut f) = std::fs::File::open(p) else {
            return;
        };
        let Ok(len) = f.metadata().map(|m| m.len()) else {
            return;
        };
        if len < self.offset {
            // Rewritten: start over.
            self.offset = 0;
            self.lines.clear();
            self.partial.clear();
            self.reader = LogReader::new();
        }
        if len == self.offset {
            return;
        }
        let start = self.offset.max(len.saturating_sub(CHUNK));
        if self.offset == 0 && start > 0 {
            // Only the tail is read: its header names the agent's output format.
            let mut first = String::new();
            let _ = std::io::BufReader::new(&mut f)
                .take(4096)
                .read_line(&mut first);
            let _ = self.reader.line(first.trim_end());
        }
        if f.seek(SeekFrom::Start(start)).is_err() {
            return;
        }
        let mut buf = Vec::new();
        if f.take(len - start).read_to_end(&mut buf).is_err() {
            return;
        }
        self.offset = start + buf.len() as u64;
        self.partial.push_str(&String::from_utf8_lossy(&buf));
        let text = std::mem::take(&mut self.partial);
        let mut parts: Vec<&str> = text.split('\n').collect();
        if let Some(last) = parts.pop() {
            self.partial = last.to_string();
        }
        for part in parts {
            let line = part.trim_end_matches('\r');
            for l in self.reader.line(line) {
                self.lines.push(l.replace('\t', "    "));
            }
        }
        if self.lines.len() > KEEP {
            let cut = self.lines.len() - KEEP;
            self.lines.drain(..cut);
        }
    }

    /// Show the lines the daemon pushed when the file has fewer (it is written in blocks).
    pub fn prefer_live(&mut self, live: &[String]) {
        self.live = (live.len() > self.lines.len()).then(|| live.to_vec());
    }

    /// Every line, the unfinished last one included.
    pub fn all(&self) -> Vec<&str> {
        if let Some(live) = &self.live {
            return live.iter().map(String::as_str).collect();
        }
        let mut v: Vec<&str> = self.lines.iter().map(String::as_str).collect();
        if !self.partial.is_empty() {
            v.push(&self.partial);
        }
        v
    }

    /// Scroll to the next line (upwards from the view's bottom) matching the search.
    pub fn find_next(&mut self) -> bool {
        let Some(term) = self.search.clone().filter(|t| !t.is_empty()) else {
            return false;
        };
        let term = term.to_lowercase();
        let all = self.all();
        let n = all.len();
        let from = self.scroll + 1;
        for back in (from..n).chain(0..from.min(n)) {
            let i = n - 1 - back;
            if all[i].to_lowercase().contains(&term) {
                self.scroll = back;
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_appends_and_finds() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("iteration-001.log");
        std::fs::write(&p, "one\ntwo\nthr").unwrap();
        let mut l = LogPane::default();
        l.follow(Some(p.clone()));
        assert_eq!(l.all(), vec!["one", "two", "thr"]);
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        std::io::Write::write_all(&mut f, b"ee\nfour TWO\n").unwrap();
        l.follow(Some(p.clone()));
        assert_eq!(l.all(), vec!["one", "two", "three", "four TWO"]);
        l.search = Some("two".into());
        assert!(l.find_next());
        assert_eq!(l.scroll, 2);
        assert!(l.find_next());
        assert_eq!(l.scroll, 0);
    }
}
