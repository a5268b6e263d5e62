//! Tree diffs (`diff-tree --raw`): one pair of trees, or several pairs in one process
//! (`diff-tree --stdin`, which a rollback uses for its two diffs: the captured work tree
//! against the snapshot's, and the snapshot's work tree against its index).

use super::{RawChange, SnapshotError, Snapshots};
use crate::git::GitError;

const ARGS: &[&str] = &["diff-tree", "-r", "-z", "--no-renames", "--raw"];

impl Snapshots {
    /// `diff-tree --raw` between two trees: modes, status and path of each change.
    pub(super) fn raw_diff(&self, from: &str, to: &str) -> Result<Vec<RawChange>, SnapshotError> {
        let mut args = ARGS.to_vec();
        args.extend([from, to]);
        let out = self.git.call(&args).bytes()?;
        Ok(parse(&out).into_iter().flat_map(|(_, c)| c).collect())
    }

    /// The diffs of several pairs of trees (full object ids), in their order, from one
    /// `diff-tree --stdin`; a pair of equal trees is empty without asking.
    pub(super) fn raw_diffs(
        &self,
        pairs: &[(&str, &str)],
    ) -> Result<Vec<Vec<RawChange>>, SnapshotError> {
        let asked: Vec<&(&str, &str)> = pairs.iter().filter(|(a, b)| a != b).collect();
        if asked.is_empty() {
            return Ok(vec![Vec::new(); pairs.len()]);
        }
        let input: String = asked.iter().map(|(a, b)| format!("{a} {b}\n")).collect();
        let mut args = ARGS.to_vec();
        args.push("--stdin");
        let out = self.git.call(&args).input(input.into_bytes()).bytes()?;
        let groups = parse(&out);
        pairs
            .iter()
            .map(|(a, b)| {
                if a == b {
                    return Ok(Vec::new());
                }
                let header = format!("{a} {b}");
                match groups.iter().find(|(h, _)| h.as_deref() == Some(&header)) {
                    Some((_, changes)) => Ok(changes.clone()),
                    None => Err(GitError::Failed {
                        args: "diff-tree --stdin".into(),
                        dir: self.top.clone(),
                        stderr: format!("no diff of {header} in its output"),
                    }
                    .into()),
                }
            })
            .collect()
    }
}

/// The changes of `diff-tree -z --raw` output, grouped under the `FROM TO` line
/// `--stdin` prints before each pair's changes (`None`: the changes before any such line).
fn parse(out: &[u8]) -> Vec<(Option<String>, Vec<RawChange>)> {
    let mut groups: Vec<(Option<String>, Vec<RawChange>)> = vec![(None, Vec::new())];
    let mut rest = out;
    while !rest.is_empty() {
        if rest[0] != b':' {
            let end = rest.iter().position(|b| *b == b'\n').unwrap_or(rest.len());
            let header = String::from_utf8_lossy(&rest[..end]).trim().to_string();
            if !header.is_empty() {
                groups.push((Some(header), Vec::new()));
            }
            rest = rest.get(end + 1..).unwrap_or_default();
            continue;
        }
        let mut fields = rest.splitn(3, |b| *b == 0);
        let (Some(meta), Some(path)) = (fields.next(), fields.next()) else {
            break;
        };
        rest = fields.next().unwrap_or_default();
        if let Some(c) = change(meta, path)
            && let Some(last) = groups.last_mut()
        {
            last.1.push(c);
        }
    }
    groups
}

/// One change from its `:MODE MODE OID OID STATUS` field and its path.
fn change(meta: &[u8], path: &[u8]) -> Option<RawChange> {
    let meta = String::from_utf8_lossy(meta);
    let mut f = meta.trim_start_matches(':').split(' ');
    let (Some(src_mode), Some(dst_mode), _, Some(dst_oid), Some(status)) =
        (f.next(), f.next(), f.next(), f.next(), f.next())
    else {
        return None;
    };
    Some(RawChange {
        src_mode: src_mode.to_string(),
        dst_mode: dst_mode.to_string(),
        dst_oid: dst_oid.to_string(),
        status: status.chars().next().unwrap_or('M'),
        path: path.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn stdin_output_is_grouped_by_pair() {
        let z = "0".repeat(40);
        let (a, b) = ("a".repeat(40), "b".repeat(40));
        let out = format!(
            "{a} {b}\n:100644 100644 {a} {b} M\0x y\0:000000 100644 {z} {b} A\0n\0{b} {a}\n{a} {a}\n"
        );
        let g = parse(out.as_bytes());
        assert_eq!(g.len(), 4);
        assert_eq!(g[1].0.as_deref(), Some(format!("{a} {b}").as_str()));
        let paths: Vec<&[u8]> = g[1].1.iter().map(|c| c.path.as_slice()).collect();
        assert_eq!(paths, [&b"x y"[..], b"n"]);
        assert_eq!(g[1].1[1].status, 'A');
        assert!(g[2].1.is_empty() && g[3].1.is_empty());
        let plain = format!(":100644 000000 {a} {z} D\0gone\0");
        let g = parse(plain.as_bytes());
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].1[0].dst_mode, "000000");
    }
}
