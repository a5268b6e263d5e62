//! Evidence that the sandbox held: the denied writes the agent's own output shows.

use std::path::{Path, PathBuf};

/// Counts lines of the agent's output that report a write refused by the sandbox: a
/// read-only file system (`Read-only file system`, `EROFS`), or `Permission denied` on a
/// path outside the work tree.
#[derive(Debug, Clone, Default)]
pub struct DeniedWrites {
    workdir: PathBuf,
    count: u32,
}

impl DeniedWrites {
    pub fn new(workdir: &Path) -> DeniedWrites {
        DeniedWrites {
            workdir: workdir.to_path_buf(),
            count: 0,
        }
    }

    pub fn line(&mut self, text: &str) {
        if text.contains("Read-only file system")
            || text.contains("EROFS")
            || (text.contains("Permission denied") && self.names_outside_path(text))
        {
            self.count = self.count.saturating_add(1);
        }
    }

    fn names_outside_path(&self, text: &str) -> bool {
        let tree = self.workdir.to_string_lossy();
        text.split(|c: char| c.is_whitespace() || matches!(c, '\'' | '"' | '`' | ':'))
            .filter(|w| w.starts_with('/') || w.starts_with("~/"))
            .any(|w| !w.starts_with(tree.as_ref()))
    }

    pub fn count(&self) -> u32 {
        self.count
    }

    /// The log note, when there was any.
    pub fn note(&self) -> Option<String> {
        (self.count > 0).then(|| {
            format!(
                "sandbox: {} write(s) outside the work tree denied (seen in the agent's output)",
                self.count
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_and_outside_permission_errors_count() {
        let mut d = DeniedWrites::new(Path::new("/w/tree"));
        d.line("touch: cannot touch '/root/x': Read-only file system");
        d.line("Error: EROFS: read-only file system, open '/home/u/.bashrc'");
        d.line("rm: cannot remove '/srv/other/a': Permission denied");
        d.line("sh: /w/tree/build.sh: Permission denied");
        d.line("all good");
        assert_eq!(d.count(), 3);
        assert!(d.note().unwrap().contains("3 write(s)"));
        assert_eq!(DeniedWrites::new(Path::new("/w")).note(), None);
    }
}
