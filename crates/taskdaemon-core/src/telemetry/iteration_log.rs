//! `.ralph/logs/iteration-NNN.log`: everything the agent printed, as it printed it, plus the
//! harness's notes (lines starting with `[taskdaemon]`).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::agent::Stream;

#[derive(Debug)]
pub struct IterationLog {
    path: PathBuf,
    out: BufWriter<File>,
}

impl IterationLog {
    pub fn create(path: &Path) -> std::io::Result<IterationLog> {
        let f = crate::fsutil::open_append(path)?;
        Ok(IterationLog {
            path: path.to_path_buf(),
            out: BufWriter::new(f),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A line of the agent's (or validation's) output; stderr lines are marked.
    pub fn output(&mut self, stream: Stream, line: &[u8]) {
        if stream == Stream::Stderr {
            let _ = self.out.write_all(b"[stderr] ");
        }
        let _ = self.out.write_all(line);
        let _ = self.out.write_all(b"\n");
    }

    /// A note of the harness.
    pub fn note(&mut self, text: &str) {
        for l in text.lines() {
            let _ = writeln!(self.out, "[taskdaemon] {l}");
        }
    }

    /// Flush and sync: called at the end of every iteration.
    pub fn finish(mut self) -> std::io::Result<()> {
        self.out.flush()?;
        self.out.get_ref().sync_data()
    }
}
