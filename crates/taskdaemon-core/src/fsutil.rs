//! Durable file writes. Every file the harness writes goes through here: whole files are
//! written to a temp file in the same directory, fsynced and renamed over the target;
//! append-only logs append one complete record per `write` call and sync it.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

/// Write `contents` to `path` atomically: a reader sees the old file or the new one, never
/// a torn mix, and after a crash the new contents are on disk once this returned.
pub fn write_atomic(path: &Path, contents: &[u8]) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    fs::create_dir_all(dir)?;
    let mut tmp = tempfile::Builder::new().prefix(".tmp-").tempfile_in(dir)?;
    tmp.write_all(contents)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    // Make the rename itself durable.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Append one complete record (a CSV row, a log block) with a single `write` call and
/// sync its data, so a crash leaves either the whole record or none of it.
pub fn append_record(path: &Path, record: &[u8], sync: bool) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    let mut f = OpenOptions::new().create(true).append(true).open(path)?;
    f.write_all(record)?;
    if sync {
        f.sync_data()?;
    }
    Ok(())
}

/// Read a file that may not exist: `Ok(None)` when it is absent.
pub fn read_optional(path: &Path) -> io::Result<Option<String>> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Keep the head and the tail of a long text, with a note of what was left out. Cuts only
/// at character boundaries.
pub fn bound_text(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let half = max / 2;
    let mut head_end = half;
    while !text.is_char_boundary(head_end) {
        head_end -= 1;
    }
    let mut tail_start = text.len() - half;
    while !text.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    format!(
        "{}\n… [{} bytes omitted] …\n{}",
        &text[..head_end],
        tail_start - head_end,
        &text[tail_start..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a/b.txt");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "two");
        let names: Vec<_> = fs::read_dir(p.parent().unwrap()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn bound_text_keeps_head_and_tail_on_char_boundaries() {
        let s = "é".repeat(100);
        let b = bound_text(&s, 51);
        assert!(b.starts_with('é') && b.ends_with('é'));
        assert!(b.contains("bytes omitted"));
        assert_eq!(bound_text("short", 10), "short");
    }
}
