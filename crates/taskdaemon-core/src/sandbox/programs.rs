//! What an agent's program needs to start inside a bwrap sandbox besides `PATH`'s
//! directories: the real file behind a symlink (npm's `node_modules/.bin/claude` →
//! `../@anthropic-ai/claude-code/bin/claude.exe`), its package, and the `#!` interpreter
//! it names. Only what lies under `/tmp` needs binding (the sandbox's `/tmp` is private;
//! the rest of the filesystem is visible read-only).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// How many `#!` interpreters are followed (a script run by a script run by a binary).
const DEPTH: usize = 3;

/// How much of a file is read for its `#!` line.
const SHEBANG_MAX: usize = 256;

/// The directories under `/tmp` (not `/tmp` itself, nothing in or around `cwd`) that
/// `program`, found as `execvp` finds it on `path` from `cwd`, needs to start.
pub fn needed_under_tmp(program: &OsStr, path: Option<&OsStr>, cwd: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    collect(program, path, cwd, DEPTH, &mut out);
    let tmp = Path::new("/tmp");
    out.retain(|p| p.starts_with(tmp) && p != tmp && !p.starts_with(cwd) && !cwd.starts_with(p));
    out.sort();
    out.dedup();
    // A directory inside another one bound comes with it.
    let all = out.clone();
    out.retain(|p| !all.iter().any(|q| q != p && p.starts_with(q)));
    out
}

fn collect(
    program: &OsStr,
    path: Option<&OsStr>,
    cwd: &Path,
    depth: usize,
    out: &mut Vec<PathBuf>,
) {
    let Some(found) = lookup(program, path, cwd) else {
        return;
    };
    let Ok(real) = found.canonicalize() else {
        return;
    };
    out.extend(found.parent().and_then(|d| d.canonicalize().ok()));
    out.push(package_root(&real));
    if depth > 0
        && let Some(interpreter) = shebang(&real)
    {
        collect(interpreter.as_os_str(), path, cwd, depth - 1, out);
    }
}

/// `program` as `execvp` finds it: a path (with a `/`) from `cwd`, else the first
/// executable file of that name in `path`'s directories.
fn lookup(program: &OsStr, path: Option<&OsStr>, cwd: &Path) -> Option<PathBuf> {
    let p = Path::new(program);
    if program.as_encoded_bytes().contains(&b'/') {
        return Some(cwd.join(p));
    }
    std::env::split_paths(path?)
        .map(|d| d.join(p))
        .find(|c| is_executable(c))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// What a program file belongs to: the outermost `node_modules` holding it (the package
/// and its dependencies), else the nearest directory above with a `package.json`, else
/// its own directory.
fn package_root(real: &Path) -> PathBuf {
    let parent = real.parent().unwrap_or(real);
    if let Some(nm) = real
        .ancestors()
        .filter(|a| a.file_name() == Some(OsStr::new("node_modules")))
        .last()
    {
        return nm.to_path_buf();
    }
    parent
        .ancestors()
        .take_while(|a| *a != Path::new("/tmp") && a.parent().is_some())
        .find(|a| a.join("package.json").is_file())
        .unwrap_or(parent)
        .to_path_buf()
}

/// The interpreter a `#!` line names: the program `env` is asked to run (looked up on
/// `PATH`), else the interpreter's path.
fn shebang(file: &Path) -> Option<PathBuf> {
    use std::io::Read as _;
    let mut head = [0u8; SHEBANG_MAX];
    let n = std::fs::File::open(file).ok()?.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split_whitespace();
    let interpreter = words.next()?;
    if Path::new(interpreter).file_name() != Some(OsStr::new("env")) {
        return Some(PathBuf::from(interpreter));
    }
    words
        .find(|w| !w.starts_with('-') && !w.contains('='))
        .map(PathBuf::from)
}

/// The program a `sh -c COMMAND` runs first (a `cmd:` agent, a validation command): the
/// first word when it is a plain name or path.
pub fn shell_command_program(program: &OsStr, args: &[std::ffi::OsString]) -> Option<PathBuf> {
    if Path::new(program).file_name() != Some(OsStr::new("sh")) || args.first()? != "-c" {
        return None;
    }
    let command = args.get(1)?.to_str()?;
    let first = command
        .split_whitespace()
        .find(|w| !w.contains('='))?
        .trim_matches(['\'', '"']);
    let rewritten = first.is_empty() || first.contains(['$', '`', '\\', '(', '{', '~']);
    (!rewritten).then(|| PathBuf::from(first))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exe(p: &Path, text: &str) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }

    #[test]
    fn an_npm_link_binds_its_node_modules_and_the_interpreter_env_finds() {
        let t = tempfile::Builder::new().tempdir_in("/tmp").unwrap();
        let root = t.path().canonicalize().unwrap();
        let nm = root.join("proj/node_modules");
        exe(
            &nm.join("pkg/bin/agent.js"),
            "#!/usr/bin/env -S mynode --flag\n",
        );
        std::fs::create_dir_all(nm.join(".bin")).unwrap();
        std::os::unix::fs::symlink("../pkg/bin/agent.js", nm.join(".bin/agent")).unwrap();
        exe(&root.join("node/lib/node"), "\x7fELF");
        std::fs::create_dir_all(root.join("node/bin")).unwrap();
        std::os::unix::fs::symlink("../lib/node", root.join("node/bin/mynode")).unwrap();
        let path = std::env::join_paths([nm.join(".bin"), root.join("node/bin")]).unwrap();
        let cwd = root.join("repo");
        let got = needed_under_tmp(OsStr::new("agent"), Some(&path), &cwd);
        assert_eq!(
            got,
            [root.join("node/bin"), root.join("node/lib"), nm.clone()]
        );
        // Nothing outside /tmp, nothing for a program that is not there.
        assert!(needed_under_tmp(OsStr::new("sh"), Some(OsStr::new("/bin")), &cwd).is_empty());
        assert!(needed_under_tmp(OsStr::new("nope"), Some(&path), &cwd).is_empty());
    }

    #[test]
    fn the_first_program_of_a_shell_command() {
        let c = |s: &str| shell_command_program(OsStr::new("sh"), &["-c".into(), s.into()]);
        assert_eq!(c("A=1 fakeagent --x"), Some(PathBuf::from("fakeagent")));
        assert_eq!(c("'/p/agent' x"), Some(PathBuf::from("/p/agent")));
        assert_eq!(c("$AGENT"), None);
        assert_eq!(
            shell_command_program(OsStr::new("claude"), &["-c".into()]),
            None
        );
    }
}
