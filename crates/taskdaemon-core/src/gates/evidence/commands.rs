//! What a validation command goes through: the scripts it runs and the entries of the
//! build files that define it (a `package.json` script, a Makefile or justfile recipe, the
//! test settings of `Cargo.toml`, pytest's configuration, tox and nox files). These are the
//! evidence's own files: an agent that edits them changes what it is judged by.
//!
//! Only what runs *as a program* is followed: `sh test.sh` makes `test.sh` evidence, but
//! `sh test.sh calc.sh` does not make `calc.sh` evidence (it is the code under test).

use std::path::Path;

/// One piece of evidence a command goes through: a whole file, or one entry of it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Source {
    /// Repository-relative path.
    pub path: String,
    pub entry: Entry,
}

/// Which part of a file is the evidence.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(tag = "kind", content = "name", rename_all = "kebab-case")]
pub enum Entry {
    /// The whole file (a script the command runs, a tool's configuration file).
    Whole,
    /// `scripts.NAME` of a package.json.
    Script(String),
    /// A Makefile target's rule and recipe.
    MakeTarget(String),
    /// A justfile recipe.
    Recipe(String),
    /// A `[section]` of an INI or TOML file (`tool.pytest.ini_options`, `tool:pytest`, `pytest`).
    Section(String),
    /// The test settings of a Cargo.toml: `[[test]]` blocks and `test`/`harness`/`autotests` keys.
    CargoTests,
}

impl Entry {
    /// How a message names it: "the `test` script of package.json".
    pub fn describe(&self, path: &str) -> String {
        match self {
            Entry::Whole => format!("`{path}`"),
            Entry::Script(n) => format!("the `{n}` script of `{path}`"),
            Entry::MakeTarget(t) => format!("the `{t}` target of `{path}`"),
            Entry::Recipe(r) => format!("the `{r}` recipe of `{path}`"),
            Entry::Section(s) => format!("the `[{s}]` section of `{path}`"),
            Entry::CargoTests => format!("the test settings of `{path}`"),
        }
    }
}

/// At most this many sources per command, and this deep through scripts and recipes.
const MAX_SOURCES: usize = 32;
const MAX_DEPTH: usize = 4;

/// The sources `command` goes through in the repository at `root` (that exist now).
pub fn sources(command: &str, root: &Path) -> Vec<Source> {
    let mut out = Vec::new();
    walk(command, root, "", 0, &mut out);
    out.sort();
    out.dedup();
    out.truncate(MAX_SOURCES);
    out
}

/// One command line, run in `dir` (repository-relative, "" for the top).
fn walk(line: &str, root: &Path, dir: &str, depth: usize, out: &mut Vec<Source>) {
    if depth > MAX_DEPTH || out.len() >= MAX_SOURCES {
        return;
    }
    for words in simple_commands(line) {
        let words = strip_wrappers(&words);
        let Some((prog, args)) = words.split_first() else {
            continue;
        };
        program(prog, args, root, dir, depth, out);
    }
}

fn program(
    prog: &str,
    args: &[String],
    root: &Path,
    dir: &str,
    depth: usize,
    out: &mut Vec<Source>,
) {
    let base = prog.rsplit('/').next().unwrap_or(prog);
    match base {
        "sh" | "bash" | "dash" | "zsh" | "ksh" => {
            if let Some(i) = args.iter().position(|a| a == "-c") {
                if let Some(inner) = args.get(i + 1) {
                    walk(inner, root, dir, depth + 1, out);
                }
                return;
            }
            script_arg(args, root, dir, out);
        }
        "python" | "python3" | "node" | "ruby" | "perl" | "php" | "deno" | "bun" | "tsx"
        | "ts-node" | "bats" | "Rscript" => {
            if let Some(i) = args.iter().position(|a| a == "-m") {
                if let Some(module) = args.get(i + 1) {
                    tool(module, &args[i + 2..], root, dir, out);
                }
                return;
            }
            if (base == "bun" || base == "deno")
                && let Some(first) = args.first()
                && (first == "test" || first == "run")
            {
                if first == "run" && args.len() > 1 {
                    package_script(&args[1], root, dir, depth, out);
                }
                return;
            }
            script_arg(args, root, dir, out);
        }
        "make" | "gmake" => make(args, root, dir, depth, out),
        "just" => just(args, root, dir, depth, out),
        "npm" | "pnpm" | "yarn" => {
            let (first, rest) = match args.split_first() {
                Some((f, r)) => (f.as_str(), r),
                None => ("", &[][..]),
            };
            let name = match first {
                "test" | "t" | "tst" => Some("test"),
                "run" | "run-script" | "exec" => rest.first().map(String::as_str),
                "" => None,
                other if base != "npm" && !other.starts_with('-') => Some(other),
                _ => None,
            };
            if let Some(n) = name {
                package_script(n, root, dir, depth, out);
            }
        }
        _ => {
            if prog.contains('/') {
                push_file(prog, root, dir, out);
            }
            tool(base, args, root, dir, out);
        }
    }
    // CI configuration a command names (`act -W .github/workflows/ci.yml`) is evidence.
    for a in args.iter().filter(|a| ci_config(a)) {
        push_file(a, root, dir, out);
    }
}

/// A path of a CI system's configuration.
fn ci_config(path: &str) -> bool {
    let p = path.trim_start_matches("./");
    p.starts_with(".github/workflows/")
        || p.starts_with(".circleci/")
        || p.starts_with(".buildkite/")
        || p == ".gitlab-ci.yml"
        || p == ".travis.yml"
        || p == "azure-pipelines.yml"
        || p == "Jenkinsfile"
}

/// The first argument that is not a flag: the script the interpreter runs.
fn script_arg(args: &[String], root: &Path, dir: &str, out: &mut Vec<Source>) {
    if let Some(a) = args.iter().find(|a| !a.starts_with('-')) {
        push_file(a, root, dir, out);
    }
}

/// A runner's own configuration files.
fn tool(name: &str, args: &[String], root: &Path, dir: &str, out: &mut Vec<Source>) {
    let files: &[&str] = match name {
        "pytest" | "py.test" => {
            push_entry(
                "pyproject.toml",
                Entry::Section("tool.pytest.ini_options".into()),
                root,
                dir,
                out,
            );
            push_entry(
                "setup.cfg",
                Entry::Section("tool:pytest".into()),
                root,
                dir,
                out,
            );
            push_entry("tox.ini", Entry::Section("pytest".into()), root, dir, out);
            &["pytest.ini", "conftest.py"]
        }
        "tox" => &["tox.ini"],
        "nox" => &["noxfile.py"],
        "vitest" => &[
            "vite.config.ts",
            "vite.config.js",
            "vitest.config.ts",
            "vitest.config.js",
            "vitest.config.mts",
            "vitest.config.mjs",
            "vitest.workspace.ts",
        ],
        "jest" => &[
            "jest.config.js",
            "jest.config.ts",
            "jest.config.mjs",
            "jest.config.cjs",
            "jest.config.json",
        ],
        "mocha" => &[
            ".mocharc.yml",
            ".mocharc.yaml",
            ".mocharc.json",
            ".mocharc.js",
            ".mocharc.cjs",
        ],
        "rspec" => &[".rspec"],
        "phpunit" => &["phpunit.xml", "phpunit.xml.dist"],
        "cargo" => {
            if args.first().is_some_and(|a| a == "test" || a == "nextest") {
                push_entry("Cargo.toml", Entry::CargoTests, root, dir, out);
            }
            &[
                ".config/nextest.toml",
                ".cargo/config.toml",
                ".cargo/config",
            ]
        }
        "unittest" => &[],
        _ => &[],
    };
    // A configuration file that is not there now is recorded too: one made later changes
    // how the tests run.
    for f in files {
        push_candidate(f, root, dir, out);
    }
}

/// Add `path` (relative to `dir`) whether or not it exists, unless it leads out of the
/// repository.
fn push_candidate(path: &str, root: &Path, dir: &str, out: &mut Vec<Source>) {
    let Some(rel) = relative(path, dir) else {
        return;
    };
    if std::fs::symlink_metadata(root.join(&rel)).is_ok() {
        push_file(path, root, dir, out);
    } else {
        out.push(Source {
            path: rel,
            entry: Entry::Whole,
        });
    }
}

fn make(args: &[String], root: &Path, dir: &str, depth: usize, out: &mut Vec<Source>) {
    let mut dir = dir.to_string();
    let mut file: Option<String> = None;
    let mut targets = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-C" | "--directory" => dir = join(&dir, it.next().map(String::as_str).unwrap_or("")),
            "-f" | "--file" | "--makefile" => file = it.next().cloned(),
            a if a.starts_with('-') || a.contains('=') => {}
            a => targets.push(a.to_string()),
        }
    }
    let file = file.unwrap_or_else(|| {
        ["GNUmakefile", "makefile", "Makefile"]
            .iter()
            .find(|f| root.join(join(&dir, f)).is_file())
            .map(|f| f.to_string())
            .unwrap_or_else(|| "Makefile".into())
    });
    let path = join(&dir, &file);
    let Some(text) = read(root, &path) else {
        return;
    };
    if targets.is_empty()
        && let Some(first) = make_targets(&text).into_iter().next()
    {
        targets.push(first);
    }
    for t in targets {
        let Some(rule) = make_rule(&text, &t) else {
            continue;
        };
        out.push(Source {
            path: path.clone(),
            entry: Entry::MakeTarget(t.clone()),
        });
        for line in rule.lines().skip(1) {
            let line = line.trim().trim_start_matches(['@', '-', '+']);
            let line = line.replace("$(MAKE)", "make").replace("${MAKE}", "make");
            walk(&line, root, &dir, depth + 1, out);
        }
    }
}

/// The targets of a Makefile, in order (not special ones like `.PHONY`, not patterns).
fn make_targets(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.starts_with('\t') && !l.starts_with('#'))
        .filter_map(|l| {
            let (head, rest) = l.split_once(':')?;
            (!rest.starts_with('=')).then_some(head)
        })
        .flat_map(str::split_whitespace)
        .filter(|t| !t.starts_with('.') && !t.contains('%') && !t.contains('$'))
        .map(String::from)
        .collect()
}

/// A target's rule line and its recipe lines (tab-indented), as written.
pub fn make_rule(text: &str, target: &str) -> Option<String> {
    let mut lines = text.lines();
    while let Some(l) = lines.next() {
        if l.starts_with('\t') || l.starts_with('#') {
            continue;
        }
        let Some((head, rest)) = l.split_once(':') else {
            continue;
        };
        if rest.starts_with('=') || !head.split_whitespace().any(|t| t == target) {
            continue;
        }
        let mut rule = l.to_string();
        for r in lines.by_ref() {
            if !r.starts_with('\t') && !r.trim().is_empty() {
                break;
            }
            rule.push('\n');
            rule.push_str(r);
        }
        return Some(rule.trim_end().to_string());
    }
    None
}

fn just(args: &[String], root: &Path, dir: &str, depth: usize, out: &mut Vec<Source>) {
    let path = ["justfile", "Justfile", ".justfile"]
        .iter()
        .map(|f| join(dir, f))
        .find(|p| root.join(p).is_file());
    let Some(path) = path else {
        return;
    };
    let Some(text) = read(root, &path) else {
        return;
    };
    let name = args
        .iter()
        .find(|a| !a.starts_with('-'))
        .cloned()
        .or_else(|| just_recipes(&text).into_iter().next());
    let Some(name) = name else {
        return;
    };
    if let Some(body) = just_recipe(&text, &name) {
        out.push(Source {
            path: path.clone(),
            entry: Entry::Recipe(name),
        });
        for line in body.lines().skip(1) {
            walk(
                line.trim().trim_start_matches(['@', '-']),
                root,
                dir,
                depth + 1,
                out,
            );
        }
    }
}

fn just_recipes(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.starts_with([' ', '\t', '#']) && !l.contains(":="))
        .filter_map(|l| l.split_once(':').map(|(h, _)| h))
        .filter_map(|h| h.split_whitespace().next())
        .map(|h| h.trim_start_matches('@').to_string())
        .collect()
}

/// A justfile recipe's header and indented body.
pub fn just_recipe(text: &str, name: &str) -> Option<String> {
    let mut lines = text.lines();
    while let Some(l) = lines.next() {
        if l.starts_with([' ', '\t', '#']) || l.contains(":=") {
            continue;
        }
        let Some((head, _)) = l.split_once(':') else {
            continue;
        };
        if head
            .split_whitespace()
            .next()
            .map(|h| h.trim_start_matches('@'))
            != Some(name)
        {
            continue;
        }
        let mut body = l.to_string();
        for r in lines.by_ref() {
            if !r.starts_with([' ', '\t']) && !r.trim().is_empty() {
                break;
            }
            body.push('\n');
            body.push_str(r);
        }
        return Some(body.trim_end().to_string());
    }
    None
}

fn package_script(name: &str, root: &Path, dir: &str, depth: usize, out: &mut Vec<Source>) {
    let path = join(dir, "package.json");
    let Some(text) = read(root, &path) else {
        return;
    };
    for n in [
        format!("pre{name}"),
        name.to_string(),
        format!("post{name}"),
    ] {
        let Some(script) = package_entry(&text, &n) else {
            continue;
        };
        out.push(Source {
            path: path.clone(),
            entry: Entry::Script(n.clone()),
        });
        walk(&script, root, dir, depth + 1, out);
    }
    // Jest's configuration, when the package.json holds it.
    if package_key(&text, "jest").is_some() {
        out.push(Source {
            path: path.clone(),
            entry: Entry::Section("jest".into()),
        });
    }
}

/// `scripts.NAME` of a package.json text.
pub fn package_entry(text: &str, name: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    v.get("scripts")?.get(name)?.as_str().map(String::from)
}

/// A package.json's top-level key, as JSON text.
pub fn package_key(text: &str, key: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    v.get(key).map(|x| x.to_string())
}

/// The lines of `[section]` in an INI or TOML text, header included.
pub fn section(text: &str, name: &str) -> Option<String> {
    let header = |l: &str| {
        let t = l.trim();
        (t.starts_with('[') && !t.starts_with("[[")).then(|| {
            t.trim_start_matches('[')
                .trim_end_matches(']')
                .trim()
                .to_string()
        })
    };
    let mut lines = text.lines();
    while let Some(l) = lines.next() {
        if header(l).as_deref() != Some(name) {
            continue;
        }
        let mut s = l.to_string();
        for r in lines.by_ref() {
            if r.trim().starts_with('[') {
                break;
            }
            s.push('\n');
            s.push_str(r);
        }
        return Some(s.trim_end().to_string());
    }
    None
}

/// The test settings of a Cargo.toml: its `[[test]]` blocks and the keys that turn tests
/// off or change how they run.
pub fn cargo_tests(text: &str) -> String {
    let mut out = String::new();
    let mut in_test = false;
    for l in text.lines() {
        let t = l.trim();
        if t.starts_with('[') {
            in_test = t == "[[test]]";
        }
        let key = t.split('=').next().unwrap_or("").trim();
        if in_test || matches!(key, "test" | "harness" | "autotests" | "doctest") {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

fn push_file(path: &str, root: &Path, dir: &str, out: &mut Vec<Source>) {
    push_entry(path, Entry::Whole, root, dir, out);
}

/// `path` (relative to `dir`) as a repository path, unless it names no plain place inside
/// the repository (absolute, `~`, a variable, `..`, `.git`).
fn relative(path: &str, dir: &str) -> Option<String> {
    if path.starts_with('/') || path.starts_with('~') || path.contains('$') {
        return None;
    }
    let rel = join(dir, path);
    (!rel.split('/').any(|c| c == ".." || c == ".git")).then_some(rel)
}

/// Add `path` (relative to `dir`) when it is a file inside the repository.
fn push_entry(path: &str, entry: Entry, root: &Path, dir: &str, out: &mut Vec<Source>) {
    let Some(rel) = relative(path, dir) else {
        return;
    };
    let full = root.join(&rel);
    let inside = full
        .canonicalize()
        .ok()
        .zip(root.canonicalize().ok())
        .is_some_and(|(f, r)| f.starts_with(r));
    if !inside || !full.is_file() {
        return;
    }
    if entry != Entry::Whole
        && text_of(
            &Source {
                path: rel.clone(),
                entry: entry.clone(),
            },
            root,
        )
        .is_none()
    {
        return;
    }
    out.push(Source { path: rel, entry });
}

/// The text of a source now: the whole file or its entry (`None`: gone).
pub fn text_of(s: &Source, root: &Path) -> Option<String> {
    let text = read(root, &s.path)?;
    match &s.entry {
        Entry::Whole => Some(text),
        Entry::Script(n) => package_entry(&text, n),
        Entry::Section(n) if s.path.ends_with("package.json") => package_key(&text, n),
        Entry::Section(n) => section(&text, n),
        Entry::MakeTarget(t) => make_rule(&text, t),
        Entry::Recipe(r) => just_recipe(&text, r),
        Entry::CargoTests => Some(cargo_tests(&text)),
    }
}

fn read(root: &Path, rel: &str) -> Option<String> {
    let bytes = std::fs::read(root.join(rel)).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// `dir/path`, normalised (`./` dropped).
fn join(dir: &str, path: &str) -> String {
    let path = path.trim_start_matches("./");
    let joined = if dir.is_empty() {
        path.to_string()
    } else {
        format!("{}/{path}", dir.trim_end_matches('/'))
    };
    joined
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect::<Vec<_>>()
        .join("/")
}

/// Drop what only wraps the real program: variable assignments, `env`, `time`, `exec`,
/// `timeout N`, `npx`, `uv run`, `poetry run`, `bundle exec` and the like.
fn strip_wrappers(words: &[String]) -> Vec<String> {
    let mut w: &[String] = words;
    loop {
        let Some(first) = w.first() else {
            return Vec::new();
        };
        let f = first.as_str();
        let skip = if is_assignment(f)
            || matches!(
                f,
                "env"
                    | "time"
                    | "exec"
                    | "command"
                    | "nice"
                    | "npx"
                    | "bunx"
                    | "xvfb-run"
                    | "nohup"
                    | "!"
            ) {
            1
        } else if f == "timeout" {
            w.iter()
                .skip(1)
                .position(|a| !a.starts_with('-'))
                .map(|p| p + 2)
                .unwrap_or(1)
        } else if matches!(f, "uv" | "poetry" | "pipenv" | "pdm" | "hatch" | "rye")
            && w.get(1).is_some_and(|a| a == "run")
            || f == "bundle" && w.get(1).is_some_and(|a| a == "exec")
        {
            2
        } else if f.starts_with('-') && words.len() != w.len() {
            1
        } else {
            0
        };
        if skip == 0 {
            return w.to_vec();
        }
        w = &w[skip.min(w.len())..];
    }
}

fn is_assignment(w: &str) -> bool {
    w.split_once('=').is_some_and(|(k, _)| {
        !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// A command line cut into simple commands (at `;`, `&&`, `||`, `|`, `&`, newlines and
/// parentheses), each as its words with quotes removed.
pub fn simple_commands(line: &str) -> Vec<Vec<String>> {
    let mut cmds = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    let end_word = |word: &mut String, in_word: &mut bool, words: &mut Vec<String>| {
        if *in_word {
            words.push(std::mem::take(word));
            *in_word = false;
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    word.push(q);
                }
            }
            '"' => {
                in_word = true;
                while let Some(q) = chars.next() {
                    match q {
                        '"' => break,
                        '\\' => {
                            if let Some(n) = chars.next() {
                                word.push(n);
                            }
                        }
                        q => word.push(q),
                    }
                }
            }
            '\\' => {
                if let Some(n) = chars.next() {
                    in_word = true;
                    word.push(n);
                }
            }
            '#' if !in_word => {
                for q in chars.by_ref() {
                    if q == '\n' {
                        break;
                    }
                }
                end_word(&mut word, &mut in_word, &mut words);
                cmds.push(std::mem::take(&mut words));
            }
            ';' | '&' | '|' | '\n' | '(' | ')' | '`' => {
                end_word(&mut word, &mut in_word, &mut words);
                cmds.push(std::mem::take(&mut words));
            }
            '<' | '>' => {
                // A redirection's target is not a program's argument, nor its fd (`2>`).
                if in_word && word.bytes().all(|b| b.is_ascii_digit()) {
                    word.clear();
                    in_word = false;
                }
                end_word(&mut word, &mut in_word, &mut words);
                while chars.peek().is_some_and(|c| matches!(c, '>' | '&' | ' ')) {
                    chars.next();
                }
                while chars
                    .peek()
                    .is_some_and(|c| !c.is_whitespace() && !matches!(c, ';' | '&' | '|'))
                {
                    chars.next();
                }
            }
            c if c.is_whitespace() => end_word(&mut word, &mut in_word, &mut words),
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    end_word(&mut word, &mut in_word, &mut words);
    cmds.push(words);
    cmds.retain(|w| !w.is_empty());
    cmds
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(files: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (p, t) in files {
            let f = d.path().join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, t).unwrap();
        }
        d
    }

    fn names(s: &[Source]) -> Vec<String> {
        s.iter().map(|s| s.entry.describe(&s.path)).collect()
    }

    #[test]
    fn a_script_the_shell_runs_is_evidence_its_arguments_are_not() {
        let d = repo(&[("test.sh", "sh calc.sh add 2 3"), ("calc.sh", "echo 5")]);
        assert_eq!(names(&sources("sh test.sh", d.path())), ["`test.sh`"]);
        assert_eq!(
            names(&sources("./test.sh calc.sh", d.path())),
            ["`test.sh`"]
        );
        assert_eq!(
            names(&sources("bash -c 'cd . && sh ./test.sh'", d.path())),
            ["`test.sh`"]
        );
        assert!(sources("sh missing.sh; echo ok > test.sh", d.path()).is_empty());
        let d = repo(&[(".github/workflows/ci.yml", "on: push")]);
        assert_eq!(
            names(&sources("act -W .github/workflows/ci.yml", d.path())),
            ["`.github/workflows/ci.yml`"]
        );
    }

    #[test]
    fn package_scripts_make_targets_and_just_recipes() {
        let d = repo(&[
            (
                "package.json",
                r#"{"scripts": {"test": "vitest run", "pretest": "node scripts/gen.js"}}"#,
            ),
            ("scripts/gen.js", "1"),
            (
                "Makefile",
                "all: build\n\nbuild:\n\tcc x.c\n\ntest: build\n\t@sh run-tests.sh\n\t$(MAKE) lint\nlint:\n\ttrue\n",
            ),
            ("run-tests.sh", "true"),
            ("justfile", "check:\n    sh run-tests.sh\n"),
        ]);
        let n = names(&sources("npm test", d.path()));
        assert!(
            n.contains(&"the `test` script of `package.json`".to_string()),
            "{n:?}"
        );
        assert!(
            n.contains(&"the `pretest` script of `package.json`".to_string()),
            "{n:?}"
        );
        assert!(n.contains(&"`scripts/gen.js`".to_string()), "{n:?}");
        let n = names(&sources("make test", d.path()));
        assert_eq!(
            n,
            [
                "the `lint` target of `Makefile`",
                "the `test` target of `Makefile`",
                "`run-tests.sh`"
            ],
        );
        let n = names(&sources("just check", d.path()));
        assert_eq!(n, ["the `check` recipe of `justfile`", "`run-tests.sh`"]);
        let text = std::fs::read_to_string(d.path().join("Makefile")).unwrap();
        assert_eq!(
            make_rule(&text, "test").unwrap(),
            "test: build\n\t@sh run-tests.sh\n\t$(MAKE) lint"
        );
    }

    #[test]
    fn runner_configuration() {
        let d = repo(&[
            (
                "pyproject.toml",
                "[project]\nname='x'\n\n[tool.pytest.ini_options]\naddopts = \"-q\"\n",
            ),
            (
                "Cargo.toml",
                "[package]\nname='x'\n[lib]\ntest = false\n[[test]]\nname = \"it\"\n",
            ),
        ]);
        let n = names(&sources("python -m pytest -q tests", d.path()));
        // pytest.ini and conftest.py are not there: recorded as absent (made later, a change).
        assert_eq!(
            n,
            [
                "`conftest.py`",
                "the `[tool.pytest.ini_options]` section of `pyproject.toml`",
                "`pytest.ini`"
            ]
        );
        let n = names(&sources("cargo test --quiet", d.path()));
        assert_eq!(
            n,
            [
                "`.cargo/config`",
                "`.cargo/config.toml`",
                "`.config/nextest.toml`",
                "the test settings of `Cargo.toml`"
            ]
        );
        let text = std::fs::read_to_string(d.path().join("Cargo.toml")).unwrap();
        assert_eq!(
            cargo_tests(&text),
            "test = false\n[[test]]\nname = \"it\"\n"
        );
    }

    #[test]
    fn words_quotes_and_operators() {
        assert_eq!(
            simple_commands("A=1 sh 'a b.sh' && echo \"x;y\" | wc -l # c\nmake"),
            [
                vec!["A=1", "sh", "a b.sh"],
                vec!["echo", "x;y"],
                vec!["wc", "-l"],
                vec!["make"]
            ]
        );
        assert_eq!(
            simple_commands("sh t.sh > out.txt 2>&1"),
            [vec!["sh", "t.sh"]]
        );
        assert_eq!(
            strip_wrappers(&["timeout".into(), "60".into(), "sh".into(), "t.sh".into()]),
            ["sh", "t.sh"]
        );
    }
}
