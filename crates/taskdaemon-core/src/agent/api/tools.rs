//! The tools a direct API agent gets, every one confined to the run's work tree: read a
//! file (a range of lines), write a file, edit by exact replacement, list files (glob),
//! grep (fixed text), run a shell command (own process group, the iteration's remaining
//! time as its timeout, bounded output) and save a snapshot. A refused path or a failing
//! tool is an error result the model sees, never an error of the harness. Results are
//! bounded (head and tail), so one call cannot blow the context.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::agent::runner::{ProcessSpec, run_process};
use crate::fsutil;
use crate::sandbox::SandboxPlan;

/// The most a tool result can hold (head and tail kept).
pub const MAX_RESULT: usize = 16 * 1024;
const MAX_LIST: usize = 2000;
const MAX_GREP: usize = 200;
const MAX_READ: u64 = 4 * 1024 * 1024;

/// What the tools need from the iteration.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The work tree, canonical.
    pub root: PathBuf,
    /// The agent's environment (run_command and the validation get the same).
    pub env: Vec<(OsString, OsString)>,
    /// The taskdaemon binary (for `snapshot save`).
    pub harness: PathBuf,
    /// What `run_command` is confined by (a CLI agent of the run gets the same).
    pub sandbox: SandboxPlan,
    pub deadline: Option<Instant>,
    pub grace: Duration,
    pub cancel: CancellationToken,
}

/// One tool's result as the model sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    pub content: String,
    pub is_error: bool,
}

impl ToolOutput {
    fn ok(s: impl Into<String>) -> ToolOutput {
        ToolOutput {
            content: fsutil::bound_text(&s.into(), MAX_RESULT),
            is_error: false,
        }
    }
    fn err(s: impl Into<String>) -> ToolOutput {
        ToolOutput {
            content: fsutil::bound_text(&s.into(), MAX_RESULT),
            is_error: true,
        }
    }
}

/// The tools' names, descriptions and JSON schemas (provider-neutral).
pub fn definitions() -> Vec<(&'static str, &'static str, Value)> {
    let path = json!({"type": "string", "description": "path relative to the work tree"});
    vec![
        (
            "read_file",
            "Read a text file of the work tree, with line numbers. Optional 1-based start_line and end_line (inclusive) read a range.",
            json!({"type": "object", "properties": {"path": path, "start_line": {"type": "integer"}, "end_line": {"type": "integer"}}, "required": ["path"]}),
        ),
        (
            "write_file",
            "Write a whole file of the work tree (created with its directories, or replaced).",
            json!({"type": "object", "properties": {"path": path, "content": {"type": "string"}}, "required": ["path", "content"]}),
        ),
        (
            "edit_file",
            "Replace exact text in a file. old_text must occur exactly once unless replace_all is true.",
            json!({"type": "object", "properties": {"path": path, "old_text": {"type": "string"}, "new_text": {"type": "string"}, "replace_all": {"type": "boolean"}}, "required": ["path", "old_text", "new_text"]}),
        ),
        (
            "list_files",
            "List files of the work tree matching a glob (`**/*.rs`, `src/*`; default all), .git excluded.",
            json!({"type": "object", "properties": {"pattern": {"type": "string"}}}),
        ),
        (
            "grep",
            "Search files for a fixed text (case-sensitive); prints path:line: text. Optional glob narrows the files.",
            json!({"type": "object", "properties": {"text": {"type": "string"}, "glob": {"type": "string"}}, "required": ["text"]}),
        ),
        (
            "run_command",
            "Run a shell command (sh -c) in the work tree: build, test, git. Output is bounded; the iteration's remaining time is its timeout.",
            json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}),
        ),
        (
            "snapshot",
            "Save a snapshot of the whole work tree (a rollback point) with a message.",
            json!({"type": "object", "properties": {"message": {"type": "string"}}}),
        ),
    ]
}

/// A one-line summary of a call for people (log, events, stall guard's recent tools).
pub fn detail(name: &str, input: &Value) -> String {
    let s = |k: &str| input.get(k).and_then(Value::as_str).unwrap_or_default();
    let d = match name {
        "run_command" => s("command").to_string(),
        "grep" => s("text").to_string(),
        "list_files" => s("pattern").to_string(),
        "snapshot" => s("message").to_string(),
        _ => s("path").to_string(),
    };
    d.chars().take(200).collect()
}

/// Run one tool call.
pub async fn run(ctx: &ToolContext, name: &str, input: &Value) -> ToolOutput {
    let r = match name {
        "read_file" => read_file(ctx, input),
        "write_file" => write_file(ctx, input),
        "edit_file" => edit_file(ctx, input),
        "list_files" => list_files(ctx, input),
        "grep" => grep(ctx, input),
        "run_command" => return run_command(ctx, input).await,
        "snapshot" => return snapshot(ctx, input).await,
        other => Err(format!(
            "unknown tool `{other}`; the tools are read_file, write_file, edit_file, list_files, grep, run_command, snapshot"
        )),
    };
    match r {
        Ok(s) => ToolOutput::ok(s),
        Err(e) => ToolOutput::err(e),
    }
}

fn arg<'a>(input: &'a Value, key: &str) -> Result<&'a str, String> {
    input
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("missing string argument `{key}`"))
}

/// Resolve `p` inside `root` (canonical): `..`, absolute paths elsewhere and symbolic
/// links leading out are refused with a message for the model.
pub fn confine(root: &Path, p: &str) -> Result<PathBuf, String> {
    if p.trim().is_empty() {
        return Err("empty path".into());
    }
    let given = Path::new(p);
    let joined = if given.is_absolute() {
        given.to_path_buf()
    } else {
        root.join(given)
    };
    let lexical = fsutil::normalize(&joined);
    if !lexical.starts_with(root) {
        return Err(format!(
            "refused: `{p}` is outside the work tree {}; use paths inside it",
            root.display()
        ));
    }
    // The deepest part that exists, resolved (links followed), must stay inside.
    let mut existing = lexical.clone();
    let mut rest: Vec<OsString> = Vec::new();
    while std::fs::symlink_metadata(&existing).is_err() {
        match (existing.file_name(), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name.to_owned());
                existing = parent.to_path_buf();
            }
            _ => break,
        }
    }
    let real = std::fs::canonicalize(&existing)
        .map_err(|_| format!("refused: `{p}` goes through a symbolic link that leads nowhere"))?;
    if !real.starts_with(root) {
        return Err(format!(
            "refused: `{p}` leads to {} through a symbolic link, outside the work tree",
            real.display()
        ));
    }
    Ok(rest.into_iter().rev().fold(real, |acc, c| acc.join(c)))
}

/// For writes: confined, and never into `.git`.
fn confine_write(root: &Path, p: &str) -> Result<PathBuf, String> {
    let path = confine(root, p)?;
    let rel = path.strip_prefix(root).unwrap_or(&path);
    if matches!(rel.components().next(), Some(Component::Normal(c)) if c == ".git") {
        return Err(format!(
            "refused: `{p}` is inside .git; use git commands (run_command) instead"
        ));
    }
    Ok(path)
}

fn read_text(path: &Path, p: &str) -> Result<String, String> {
    let f = fsutil::open_read(path).map_err(|e| format!("cannot read `{p}`: {e}"))?;
    let mut bytes = Vec::new();
    f.take(MAX_READ + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read `{p}`: {e}"))?;
    if bytes.len() as u64 > MAX_READ {
        return Err(format!(
            "`{p}` is larger than 4 MiB; read it with run_command (head, sed -n)"
        ));
    }
    if bytes.contains(&0) {
        return Err(format!("`{p}` is a binary file ({} bytes)", bytes.len()));
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

fn read_file(ctx: &ToolContext, input: &Value) -> Result<String, String> {
    let p = arg(input, "path")?;
    let path = confine(&ctx.root, p)?;
    let text = read_text(&path, p)?;
    let start = input
        .get("start_line")
        .and_then(Value::as_u64)
        .unwrap_or(1)
        .max(1);
    let end = input
        .get("end_line")
        .and_then(Value::as_u64)
        .unwrap_or(u64::MAX);
    let mut out = String::new();
    for (i, line) in text.lines().enumerate() {
        let n = i as u64 + 1;
        if n >= start && n <= end {
            out.push_str(&format!("{n:>6}\t{line}\n"));
        }
    }
    if out.is_empty() {
        out = format!(
            "(`{p}` has no lines in that range; it has {} lines)",
            text.lines().count()
        );
    }
    Ok(out)
}

fn write_file(ctx: &ToolContext, input: &Value) -> Result<String, String> {
    let p = arg(input, "path")?;
    let content = arg(input, "content")?;
    let path = confine_write(&ctx.root, p)?;
    fsutil::write_atomic(&path, content.as_bytes())
        .map_err(|e| format!("cannot write `{p}`: {e}"))?;
    Ok(format!("wrote {} bytes to {p}", content.len()))
}

fn edit_file(ctx: &ToolContext, input: &Value) -> Result<String, String> {
    let p = arg(input, "path")?;
    let old = arg(input, "old_text")?;
    let new = arg(input, "new_text")?;
    let all = input
        .get("replace_all")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if old.is_empty() {
        return Err("old_text is empty; give the exact text to replace".into());
    }
    let path = confine_write(&ctx.root, p)?;
    let text = read_text(&path, p)?;
    let n = text.matches(old).count();
    if n == 0 {
        return Err(format!(
            "old_text does not occur in `{p}`; read the file and copy the text exactly"
        ));
    }
    if n > 1 && !all {
        return Err(format!(
            "old_text occurs {n} times in `{p}`; give more surrounding text, or replace_all: true"
        ));
    }
    let edited = if all {
        text.replace(old, new)
    } else {
        text.replacen(old, new, 1)
    };
    fsutil::write_atomic(&path, edited.as_bytes())
        .map_err(|e| format!("cannot write `{p}`: {e}"))?;
    Ok(format!(
        "replaced {} occurrence(s) in {p}",
        if all { n } else { 1 }
    ))
}

/// Every file of the work tree (relative paths, sorted), .git skipped, links not followed.
fn walk(root: &Path, limit: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            let Ok(ft) = e.file_type() else { continue };
            if e.file_name() == ".git" {
                continue;
            }
            if ft.is_dir() {
                dirs.push(path);
            } else if let Ok(rel) = path.strip_prefix(root) {
                out.push(rel.to_string_lossy().into_owned());
                if out.len() >= limit * 4 {
                    break;
                }
            }
        }
    }
    out.sort();
    out
}

/// A glob: `*` and `?` within a path component, `**` across components.
pub fn glob_match(pattern: &str, path: &str) -> bool {
    fn rec(p: &[u8], s: &[u8]) -> bool {
        match p.first() {
            None => s.is_empty(),
            Some(b'*') if p.get(1) == Some(&b'*') => {
                let rest = p[2..].strip_prefix(b"/").unwrap_or(&p[2..]);
                if rest.is_empty() {
                    return true;
                }
                (0..=s.len()).any(|i| (i == 0 || s[i - 1] == b'/') && rec(rest, &s[i..]))
                    || rec(&p[2..], s)
            }
            Some(b'*') => (0..=s.len())
                .take_while(|&i| i == 0 || s[i - 1] != b'/')
                .any(|i| rec(&p[1..], &s[i..])),
            Some(b'?') => !s.is_empty() && s[0] != b'/' && rec(&p[1..], &s[1..]),
            Some(c) => s.first() == Some(c) && rec(&p[1..], &s[1..]),
        }
    }
    rec(pattern.as_bytes(), path.as_bytes())
}

fn list_files(ctx: &ToolContext, input: &Value) -> Result<String, String> {
    let pattern = input.get("pattern").and_then(Value::as_str).unwrap_or("**");
    let pattern = if pattern.trim().is_empty() {
        "**"
    } else {
        pattern.trim_start_matches("./")
    };
    let files: Vec<String> = walk(&ctx.root, MAX_LIST)
        .into_iter()
        .filter(|f| glob_match(pattern, f))
        .collect();
    if files.is_empty() {
        return Ok(format!("no files match `{pattern}`"));
    }
    let more = files.len().saturating_sub(MAX_LIST);
    let mut out = files
        .into_iter()
        .take(MAX_LIST)
        .collect::<Vec<_>>()
        .join("\n");
    if more > 0 {
        out.push_str(&format!("\n… and {more} more"));
    }
    Ok(out)
}

fn grep(ctx: &ToolContext, input: &Value) -> Result<String, String> {
    let text = arg(input, "text")?;
    if text.is_empty() {
        return Err("text is empty".into());
    }
    let glob = input.get("glob").and_then(Value::as_str).unwrap_or("**");
    let mut hits = Vec::new();
    for rel in walk(&ctx.root, MAX_LIST * 10)
        .into_iter()
        .filter(|f| glob_match(glob, f))
    {
        let Ok(content) = read_text(&ctx.root.join(&rel), &rel) else {
            continue;
        };
        for (i, line) in content.lines().enumerate() {
            if line.contains(text) {
                let line: String = line.chars().take(300).collect();
                hits.push(format!("{rel}:{}: {line}", i + 1));
                if hits.len() >= MAX_GREP {
                    hits.push(format!("… stopped at {MAX_GREP} matches"));
                    return Ok(hits.join("\n"));
                }
            }
        }
    }
    if hits.is_empty() {
        return Ok(format!("no matches for `{text}`"));
    }
    Ok(hits.join("\n"))
}

/// A program in its own process group, the iteration's remaining time as its timeout.
async fn spawn(
    ctx: &ToolContext,
    program: OsString,
    args: Vec<OsString>,
    sandboxed: bool,
) -> ToolOutput {
    let timeout = ctx
        .deadline
        .map(|d| d.saturating_duration_since(Instant::now()));
    if timeout.is_some_and(|t| t.is_zero()) {
        return ToolOutput::err("the iteration's time is up");
    }
    let spec = ProcessSpec {
        program,
        args,
        cwd: ctx.root.clone(),
        env: ctx.env.clone(),
        stdin: None,
        timeout,
        grace: ctx.grace,
        after_stop: None,
    };
    let spec = if sandboxed {
        crate::sandbox::wrap(spec, &ctx.sandbox)
    } else {
        spec
    };
    let mut out = String::new();
    let r = run_process(&spec, &ctx.cancel, |_, line| {
        // Keep what bound_text needs: the head and a rolling tail.
        if out.len() < 8 * MAX_RESULT {
            out.push_str(&String::from_utf8_lossy(line));
            out.push('\n');
        } else {
            out.push_str(&String::from_utf8_lossy(line));
            out.push('\n');
            let cut = out.len() - 4 * MAX_RESULT;
            let mut keep = String::with_capacity(8 * MAX_RESULT);
            keep.push_str(&out[..floor(&out, MAX_RESULT)]);
            keep.push_str("\n… [output omitted] …\n");
            keep.push_str(&out[floor(&out, cut)..]);
            out = keep;
        }
    })
    .await;
    match r {
        Err(e) => ToolOutput::err(format!("could not run: {e}")),
        Ok(res) => {
            let code = res.status.code();
            let mut text = fsutil::bound_text(out.trim_end(), MAX_RESULT - 200);
            if res.timed_out {
                text.push_str("\n(stopped: the iteration's time ran out)");
            }
            text.push_str(&format!("\n(exit code {code})"));
            ToolOutput {
                content: text,
                is_error: code != 0 || res.timed_out,
            }
        }
    }
}

fn floor(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

async fn run_command(ctx: &ToolContext, input: &Value) -> ToolOutput {
    match arg(input, "command") {
        Ok(c) => spawn(ctx, "sh".into(), vec!["-c".into(), c.into()], true).await,
        Err(e) => ToolOutput::err(e),
    }
}

async fn snapshot(ctx: &ToolContext, input: &Value) -> ToolOutput {
    let msg = input
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("saved by the agent");
    // The work tree's repository, whatever the message says: after `--` it is the
    // message, never an option (`-C/other/repo`, `--help`).
    let args = vec![
        "-C".into(),
        ctx.root.clone().into_os_string(),
        "snapshot".into(),
        "save".into(),
        "--".into(),
        msg.into(),
    ];
    // The harness itself, outside the sandbox: it writes the snapshot's refs in .git.
    spawn(ctx, ctx.harness.as_os_str().to_owned(), args, false).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("**", "a/b/c.rs"));
        assert!(glob_match("**/*.rs", "a/b/c.rs"));
        assert!(glob_match("**/*.rs", "c.rs"));
        assert!(glob_match("src/*", "src/x"));
        assert!(!glob_match("src/*", "src/a/x"));
        assert!(glob_match("?.txt", "a.txt"));
        assert!(!glob_match("*.txt", "d/a.txt"));
    }

    fn ctx(root: &Path) -> ToolContext {
        ToolContext {
            root: root.to_path_buf(),
            env: Vec::new(),
            harness: PathBuf::from("taskdaemon"),
            sandbox: SandboxPlan::default(),
            deadline: None,
            grace: Duration::from_secs(1),
            cancel: CancellationToken::new(),
        }
    }

    #[tokio::test]
    async fn file_tools_read_edit_list_grep() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        let c = ctx(&root);
        let w = run(
            &c,
            "write_file",
            &json!({"path": "src/a.txt", "content": "one\ntwo\ntwo\n"}),
        )
        .await;
        assert!(!w.is_error, "{w:?}");
        let r = run(
            &c,
            "read_file",
            &json!({"path": "src/a.txt", "start_line": 2, "end_line": 2}),
        )
        .await;
        assert_eq!(r.content, "     2\ttwo\n");
        let e = run(
            &c,
            "edit_file",
            &json!({"path": "src/a.txt", "old_text": "two", "new_text": "2"}),
        )
        .await;
        assert!(e.is_error && e.content.contains("occurs 2 times"), "{e:?}");
        let e = run(
            &c,
            "edit_file",
            &json!({"path": "src/a.txt", "old_text": "one", "new_text": "1"}),
        )
        .await;
        assert!(!e.is_error, "{e:?}");
        assert_eq!(
            std::fs::read_to_string(root.join("src/a.txt")).unwrap(),
            "1\ntwo\ntwo\n"
        );
        let l = run(&c, "list_files", &json!({"pattern": "**/*.txt"})).await;
        assert_eq!(l.content, "src/a.txt");
        let g = run(&c, "grep", &json!({"text": "two"})).await;
        assert_eq!(g.content, "src/a.txt:2: two\nsrc/a.txt:3: two");
        let x = run(&c, "rm_rf", &json!({})).await;
        assert!(x.is_error && x.content.contains("unknown tool"));
        let m = run(&c, "write_file", &json!({"path": "b.txt"})).await;
        assert!(m.is_error && m.content.contains("missing string argument `content`"));
    }

    #[tokio::test]
    async fn command_output_is_bounded_head_and_tail() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        let o = run(
            &ctx(&root),
            "run_command",
            &json!({"command": "echo first; seq 1 200000; echo last; exit 3"}),
        )
        .await;
        assert!(o.is_error);
        assert!(o.content.len() <= MAX_RESULT + 200, "{}", o.content.len());
        assert!(o.content.starts_with("first\n"));
        assert!(
            o.content.contains("last\n(exit code 3)"),
            "{}",
            &o.content[o.content.len() - 100..]
        );
        assert!(o.content.contains("omitted"));
    }

    #[test]
    fn confine_refuses_the_ways_out() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap().join("w");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::os::unix::fs::symlink("/etc", root.join("out")).unwrap();
        std::os::unix::fs::symlink("sub", root.join("in")).unwrap();
        assert!(
            confine(&root, "../x")
                .unwrap_err()
                .contains("outside the work tree")
        );
        assert!(confine(&root, "/etc/passwd").is_err());
        assert!(confine(&root, "sub/../../x").is_err());
        assert!(
            confine(&root, "out/passwd")
                .unwrap_err()
                .contains("symbolic link")
        );
        assert_eq!(
            confine(&root, "in/new.txt").unwrap(),
            root.join("sub/new.txt")
        );
        assert_eq!(confine(&root, "a/b/c").unwrap(), root.join("a/b/c"));
        let abs = root.join("sub").display().to_string();
        assert_eq!(confine(&root, &abs).unwrap(), root.join("sub"));
        assert!(confine_write(&root, ".git/hooks/x").is_err());
    }
}
