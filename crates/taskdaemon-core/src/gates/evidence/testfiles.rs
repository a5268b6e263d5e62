//! Which files are tests, and what each holds: the tests it defines, its skip/focus
//! markers, and its assertion count. Heuristic, per language by extension, not a parser.
//!
//! A test file has a code extension and either a test directory among its parents
//! (`tests`, `test`, `__tests__`, `spec`, `t`; not `specs`) or its ecosystem's test name
//! (`test_*.py`, `*_test.go`, `*.test.ts`, `*_spec.rb`, `*Test.java`, `*.bats`, …); a Rust
//! file only when it lives under `tests/` or holds test attributes.
//!
//! Comments and the contents of string literals are blanked before markers and assertions
//! are looked for: line comments (`//`, or `#` where `#` starts a comment), `/* */` blocks,
//! Python docstrings, and lines that start with `* ` or `-- `. Test names are read from the
//! original text (a JS test's name is its first string argument).

use serde::{Deserialize, Serialize};

/// Whether `path` is a test file by its ecosystem's conventions. `text` is its content when
/// known (a Rust file counts only when it holds `#[test]`/`#[cfg(test)]`/`#[tokio::test]`-style attributes or lives in a `tests/` directory).
pub fn is_test_file(path: &str, text: Option<&str>) -> bool {
    let path = path.replace('\\', "/");
    let mut parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let Some((stem, ext)) = parts.pop().and_then(|name| name.rsplit_once('.')) else {
        return false;
    };
    let ext = ext.to_ascii_lowercase();
    if !CODE_EXTS.contains(&ext.as_str()) {
        return false;
    }
    let under = |dirs: &[&str]| {
        parts
            .iter()
            .any(|p| dirs.iter().any(|d| p.eq_ignore_ascii_case(d)))
    };
    if ext == "rs" {
        return under(&["tests"]) || text.is_some_and(rust_has_tests);
    }
    under(&["tests", "test", "__tests__", "spec", "t"]) || test_name(stem, &ext)
}

/// A cheap first look at a path's bytes: whether it has a code extension at all (only such
/// a file can be a test).
pub fn may_be_test(path: &[u8]) -> bool {
    let name = path.rsplit(|b| *b == b'/').next().unwrap_or(path);
    let Some(dot) = name.iter().rposition(|b| *b == b'.') else {
        return false;
    };
    let ext = &name[dot + 1..];
    ext.len() <= 6
        && CODE_EXTS
            .iter()
            .any(|e| e.as_bytes().eq_ignore_ascii_case(ext))
}

const CODE_EXTS: &[&str] = &[
    "rs", "py", "go", "js", "jsx", "ts", "tsx", "mjs", "cjs", "mts", "cts", "rb", "java", "kt",
    "kts", "scala", "groovy", "php", "cs", "fs", "ex", "exs", "bats", "t", "sh", "bash", "zsh",
    "pl", "pm", "swift", "c", "cc", "cpp", "cxx", "m", "mm", "lua", "dart", "hs", "ml", "clj",
    "erl", "r", "jl",
];

/// Whether a file named `stem.ext` is a test by its name alone.
fn test_name(stem: &str, ext: &str) -> bool {
    let ends = |suffixes: &[&str]| suffixes.iter().any(|s| stem.ends_with(s));
    match ext {
        "py" => stem.starts_with("test_") || stem.ends_with("_test") || stem == "conftest",
        "go" => stem.ends_with("_test"),
        "js" | "jsx" | "ts" | "tsx" | "mjs" | "cjs" | "mts" | "cts" => ends(&[".test", ".spec"]),
        "rb" => stem.starts_with("test_") || ends(&["_spec", "_test"]),
        "java" | "kt" | "cs" | "swift" => ends(&["Test", "Tests"]),
        "scala" => ends(&["Test", "Spec", "Suite"]),
        "php" => ends(&["Test"]),
        "exs" => ends(&["_test"]),
        "bats" | "t" => true,
        _ => false,
    }
}

/// A skip, ignore, todo or focus marker.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Skip {
    /// 1-based.
    pub line: u32,
    /// As written, e.g. `@pytest.mark.skip`, `#[ignore]`, `it.skip`, `t.Skip`.
    pub marker: String,
}

/// What a test file holds.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct TestScan {
    /// The names of the tests the file defines, in order (duplicates kept).
    pub tests: Vec<String>,
    /// Skip, ignore, todo and focus (`.only`, `fit`, `fdescribe`: they skip every other test) markers.
    pub skips: Vec<Skip>,
    /// Assertions (assert/expect/should-style calls) outside comments.
    pub assertions: u32,
}

/// What the test file at `path` holds (its extension chooses the rules).
pub fn scan(path: &str, text: &str) -> TestScan {
    let Some(lang) = lang_of(path) else {
        return TestScan::default();
    };
    let src = Src::new(text, lang.syntax);
    let skips = find_all(&src.code, lang.skips)
        .into_iter()
        .map(|(at, end, pat)| Skip {
            line: src.line_no(at),
            marker: match pat.show {
                "" => src.raw(at, end).trim_end_matches('(').trim().to_string(),
                show => show.to_string(),
            },
        })
        .collect();
    let assertions = find_all(&src.code, lang.asserts).len();
    TestScan {
        tests: (lang.names)(&src, path),
        skips,
        assertions: u32::try_from(assertions).unwrap_or(u32::MAX),
    }
}

/// A language's rules: how to blank its comments and strings, its markers and assertions,
/// and how to read its test names.
struct Lang {
    syntax: &'static Syntax,
    skips: &'static [Pat],
    asserts: &'static [Pat],
    names: fn(&Src, &str) -> Vec<String>,
}

fn lang_of(path: &str) -> Option<&'static Lang> {
    let ext = path.rsplit_once('.')?.1.to_ascii_lowercase();
    Some(match ext.as_str() {
        "rs" => &RUST,
        "py" => &PYTHON,
        "js" | "jsx" | "ts" | "tsx" | "mjs" | "cjs" | "mts" | "cts" => &JS,
        "go" => &GO,
        "java" | "kt" | "kts" | "scala" | "groovy" => &JAVA,
        "rb" => &RUBY,
        "php" => &PHP,
        "cs" => &CSHARP,
        "ex" | "exs" => &ELIXIR,
        "bats" | "t" | "sh" | "bash" | "zsh" => &SHELL,
        _ => return None,
    })
}

// ---- Blanking comments and strings ----

/// How a language writes comments and string literals.
struct Syntax {
    line_comments: &'static [&'static str],
    block_comments: bool,
    /// Openers longest first.
    quotes: &'static [Quote],
    /// `'x'` is a char literal and `'a` a lifetime (Rust).
    rust_chars: bool,
    /// `#[` opens an attribute, not a comment (PHP).
    hash_attrs: bool,
}

#[derive(Clone, Copy)]
struct Quote {
    open: &'static str,
    close: &'static str,
    multiline: bool,
    escapes: bool,
}

const fn q(open: &'static str, close: &'static str, multiline: bool, escapes: bool) -> Quote {
    Quote {
        open,
        close,
        multiline,
        escapes,
    }
}

/// A file's text and its code: the same bytes with comments and string contents blanked
/// (newlines and string delimiters kept, so offsets and line numbers agree).
struct Src<'a> {
    text: &'a str,
    code: Vec<u8>,
    newlines: Vec<usize>,
}

impl<'a> Src<'a> {
    fn new(text: &'a str, syntax: &Syntax) -> Src<'a> {
        let code = mask(text, syntax);
        let newlines = code
            .iter()
            .enumerate()
            .filter(|(_, c)| **c == b'\n')
            .map(|(i, _)| i);
        Src {
            text,
            newlines: newlines.collect(),
            code,
        }
    }

    fn line_no(&self, at: usize) -> u32 {
        let before = self.newlines.partition_point(|&n| n < at);
        u32::try_from(before + 1).unwrap_or(u32::MAX)
    }

    fn raw(&self, from: usize, to: usize) -> &'a str {
        self.text.get(from..to).unwrap_or("")
    }

    /// Each line of code as (offset of its first non-blank byte, its end).
    fn lines(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let mut start = 0;
        self.code.split(|&c| c == b'\n').map(move |line| {
            let first = start + line.iter().take_while(|c| c.is_ascii_whitespace()).count();
            let end = start + line.len();
            start = end + 1;
            (first, end)
        })
    }

    /// The string literal whose opening quote is at `at`: its text and the offset after it.
    fn string_at(&self, at: usize) -> Option<(String, usize)> {
        let quote = *self.code.get(at).filter(|c| b"\"'`".contains(c))?;
        let rest = self.code.get(at + 1..)?;
        let close = rest
            .iter()
            .position(|&c| c == quote || (c == b'\n' && quote != b'`'));
        let close = at + 1 + close.unwrap_or(rest.len());
        Some((self.raw(at + 1, close).to_string(), close + 1))
    }
}

fn mask(text: &str, syn: &Syntax) -> Vec<u8> {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    while i < b.len() {
        i = if syn.block_comments && b[i..].starts_with(b"/*") {
            let end = find(b, i + 2, b"*/").map_or(b.len(), |e| e + 2);
            blank(&mut out, i, end);
            end
        } else if line_comment_at(syn, b, i) {
            let end = find(b, i, b"\n").unwrap_or(b.len());
            blank(&mut out, i, end);
            end
        } else if syn.rust_chars && b[i] == b'\'' {
            rust_char_end(b, i).map_or(i + 1, |end| {
                blank(&mut out, i + 1, end - 1);
                end
            })
        } else if let Some(quote) = quote_at(syn, b, i) {
            let from = i + quote.open.len();
            let (content_end, end) = string_end(b, from, quote);
            blank(&mut out, from, content_end);
            end
        } else {
            i + 1
        };
    }
    blank_comment_lines(&mut out);
    out
}

fn find(b: &[u8], from: usize, pat: &[u8]) -> Option<usize> {
    let pos = b.get(from..)?.windows(pat.len()).position(|w| w == pat)?;
    Some(from + pos)
}

/// Spaces over `from..to`, newlines kept.
fn blank(out: &mut [u8], from: usize, to: usize) {
    for c in out.get_mut(from..to).unwrap_or_default() {
        if *c != b'\n' {
            *c = b' ';
        }
    }
}

fn line_comment_at(syn: &Syntax, b: &[u8], i: usize) -> bool {
    let prev = i.checked_sub(1).and_then(|p| b.get(p));
    syn.line_comments.iter().any(|open| {
        b[i..].starts_with(open.as_bytes())
            && !(*open == "#"
                && (matches!(prev, Some(b'$' | b'{'))
                    || (syn.hash_attrs && b.get(i + 1) == Some(&b'['))))
    })
}

/// The end of the Rust char literal at `i`, or `None` for a lifetime.
fn rust_char_end(b: &[u8], i: usize) -> Option<usize> {
    let first = *b.get(i + 1)?;
    if first == b'\\' {
        let close = b
            .get(i + 3..)?
            .iter()
            .take(10)
            .position(|&c| c == b'\'' || c == b'\n')?;
        let end = i + 3 + close;
        return (b.get(end) == Some(&b'\'')).then_some(end + 1);
    }
    let len = match first {
        b'\'' | b'\n' => return None,
        0..0x80 => 1,
        0xf0.. => 4,
        0xe0.. => 3,
        _ => 2,
    };
    (b.get(i + 1 + len) == Some(&b'\'')).then_some(i + 2 + len)
}

fn quote_at(syn: &Syntax, b: &[u8], i: usize) -> Option<&'static Quote> {
    let prev = i.checked_sub(1).and_then(|p| b.get(p)).copied();
    syn.quotes.iter().find(|q| {
        let prefixed = q.open.starts_with(|c: char| c.is_ascii_alphabetic());
        b[i..].starts_with(q.open.as_bytes())
            && !(prefixed && prev.is_some_and(|p| is_ident(p) && p != b'b' && p != b'c'))
    })
}

/// Where the string whose content starts at `from` ends: (content end, end).
fn string_end(b: &[u8], from: usize, quote: &Quote) -> (usize, usize) {
    let mut j = from;
    while j < b.len() {
        if b[j] == b'\n' && !quote.multiline {
            return (j, j);
        }
        if quote.escapes && b[j] == b'\\' {
            j += 2;
            continue;
        }
        if b[j..].starts_with(quote.close.as_bytes()) {
            return (j, j + quote.close.len());
        }
        j += 1;
    }
    (b.len(), b.len())
}

/// Blanks the lines whose first non-blank text is `* ` or `-- ` (comment continuations).
fn blank_comment_lines(out: &mut [u8]) {
    let mut start = 0;
    while start < out.len() {
        let end = find(out, start, b"\n").unwrap_or(out.len());
        let line = &out[start..end];
        let first = line.iter().position(|c| !c.is_ascii_whitespace());
        if let Some(f) = first {
            let rest = &line[f..];
            let after = |n: usize| rest.get(n).is_none_or(|c| c.is_ascii_whitespace());
            if (rest[0] == b'*' && (after(1) || rest.get(1) == Some(&b'/')))
                || (rest.starts_with(b"--") && after(2))
            {
                blank(out, start, end);
            }
        }
        start = end + 1;
    }
}

// ---- Markers and assertions ----

/// A marker or assertion to find in code.
struct Pat {
    lit: &'static str,
    /// `Ident(then)`: identifier characters may follow the literal, then one of `then`'s
    /// bytes (any byte when empty). `Exact`: a literal that ends in a word character must
    /// not be followed by another.
    tail: Tail,
    /// The marker to report; empty: the text matched, without a trailing `(`.
    show: &'static str,
}

#[derive(Clone, Copy)]
enum Tail {
    Exact,
    Ident(&'static str),
}

const fn p(lit: &'static str) -> Pat {
    Pat {
        lit,
        tail: Tail::Exact,
        show: "",
    }
}

const fn shown(lit: &'static str, show: &'static str) -> Pat {
    Pat {
        lit,
        tail: Tail::Exact,
        show,
    }
}

const fn prefix(lit: &'static str, then: &'static str) -> Pat {
    Pat {
        lit,
        tail: Tail::Ident(then),
        show: "",
    }
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// A character that joins a word: no marker starts or ends next to one.
fn is_word(c: u8) -> bool {
    is_ident(c) || c == b'-' || c == b'$'
}

/// The end of `pat` matched at `i`. A literal that starts with a word character must not
/// follow one, nor follow a `.` unless the literal holds a `.` itself (`it.skip` may follow
/// `test.describe.`, `fit(` may not follow `model.`).
fn pat_at(code: &[u8], i: usize, pat: &Pat) -> Option<usize> {
    let lit = pat.lit.as_bytes();
    if !code.get(i..)?.starts_with(lit) {
        return None;
    }
    if lit.first().is_some_and(|&c| is_ident(c))
        && let Some(&prev) = i.checked_sub(1).and_then(|p| code.get(p))
        && (is_word(prev) || (prev == b'.' && !pat.lit.contains('.')))
    {
        return None;
    }
    let mut end = i + lit.len();
    match pat.tail {
        Tail::Exact => {
            let joined = lit.last().is_some_and(|&c| is_ident(c))
                && code.get(end).is_some_and(|&c| is_word(c));
            (!joined).then_some(end)
        }
        Tail::Ident(then) => {
            end += code
                .get(end..)?
                .iter()
                .take_while(|&&c| is_ident(c))
                .count();
            let ok = then.is_empty() || code.get(end).is_some_and(|c| then.as_bytes().contains(c));
            ok.then_some(end)
        }
    }
}

/// Each match of `pats` in `code`, left to right, not overlapping: (start, end, pattern).
fn find_all<'p>(code: &[u8], pats: &'p [Pat]) -> Vec<(usize, usize, &'p Pat)> {
    let mut found = Vec::new();
    let mut i = 0;
    while i < code.len() {
        match pats
            .iter()
            .find_map(|p| pat_at(code, i, p).map(|end| (end, p)))
        {
            Some((end, pat)) => {
                found.push((i, end, pat));
                i = end.max(i + 1);
            }
            None => i += 1,
        }
    }
    found
}

// ---- Reading names ----

fn skip_ws(code: &[u8], mut i: usize) -> usize {
    while code.get(i).is_some_and(|c| c.is_ascii_whitespace()) {
        i += 1;
    }
    i
}

/// The identifier at `i` and the offset after it (empty when there is none).
fn ident_at(src: &Src, i: usize) -> (String, usize) {
    let len = src
        .code
        .get(i..)
        .unwrap_or_default()
        .iter()
        .take_while(|&&c| is_ident(c))
        .count();
    (src.raw(i, i + len).to_string(), i + len)
}

/// Whether `word` is at `i`, not inside a longer identifier.
fn word_at(code: &[u8], i: usize, word: &str) -> bool {
    code.get(i..)
        .is_some_and(|r| r.starts_with(word.as_bytes()))
        && !i
            .checked_sub(1)
            .and_then(|p| code.get(p))
            .is_some_and(|&c| is_ident(c))
        && !code.get(i + word.len()).is_some_and(|&c| is_ident(c))
}

/// The offset after the bracketed group that opens at `i` (`(`, `[` or `{`).
fn skip_group(code: &[u8], i: usize) -> usize {
    let mut depth = 0usize;
    for (j, &c) in code.iter().enumerate().skip(i) {
        match c {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return j + 1;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// The string literal at `i`, after blanks, if one starts there.
fn string_after(src: &Src, i: usize) -> Option<String> {
    src.string_at(skip_ws(&src.code, i)).map(|(s, _)| s)
}

fn rust_names(src: &Src, _path: &str) -> Vec<String> {
    let code = &src.code;
    let (mut names, mut pending, mut i) = (Vec::new(), false, 0);
    while i < code.len() {
        if let Some((attr, end)) = rust_attr_at(src, i) {
            pending |= is_rust_test_attr(&attr);
            i = end;
        } else if word_at(code, i, "fn") {
            let (name, end) = ident_at(src, skip_ws(code, i + 2));
            if pending && !name.is_empty() {
                names.push(name);
            }
            pending = false;
            i = end.max(i + 2);
        } else {
            i += 1;
        }
    }
    names
}

/// The path of the attribute at `i` (`#[tokio::test(…)]` → `tokio::test`) and the offset
/// after the path.
fn rust_attr_at(src: &Src, i: usize) -> Option<(String, usize)> {
    let rest = src.code.get(i..)?;
    let open = if rest.starts_with(b"#[") {
        2
    } else if rest.starts_with(b"#![") {
        3
    } else {
        return None;
    };
    let from = skip_ws(&src.code, i + open);
    let len = src
        .code
        .get(from..)?
        .iter()
        .take_while(|&&c| is_ident(c) || c == b':')
        .count();
    Some((src.raw(from, from + len).to_string(), from + len))
}

fn is_rust_test_attr(path: &str) -> bool {
    let last = path.rsplit("::").next().unwrap_or(path);
    matches!(last, "test" | "rstest" | "test_case" | "wasm_bindgen_test")
}

/// Whether Rust `text` holds a test attribute or `#[cfg(test)]` outside comments and strings.
fn rust_has_tests(text: &str) -> bool {
    let src = Src::new(text, &RUST_SYNTAX);
    (0..src.code.len()).any(|i| match rust_attr_at(&src, i) {
        Some((attr, end)) if attr == "cfg" => {
            let args = src
                .code
                .get(end..skip_group(&src.code, end))
                .unwrap_or_default();
            (0..args.len()).any(|j| word_at(args, j, "test"))
        }
        Some((attr, _)) => is_rust_test_attr(&attr),
        None => false,
    })
}

/// `def test…` and `async def test…`, as `Class::name` inside a class.
fn python_names(src: &Src, _path: &str) -> Vec<String> {
    let code = &src.code;
    let mut classes: Vec<(usize, String)> = Vec::new();
    let mut names = Vec::new();
    let mut line_start = 0;
    for (first, end) in src.lines() {
        let indent = first - line_start;
        line_start = end + 1;
        if first >= end {
            continue;
        }
        while classes.last().is_some_and(|(d, _)| *d >= indent) {
            classes.pop();
        }
        if word_at(code, first, "class") {
            classes.push((indent, ident_at(src, skip_ws(code, first + 5)).0));
            continue;
        }
        let def = if word_at(code, first, "async") {
            skip_ws(code, first + 5)
        } else {
            first
        };
        if !word_at(code, def, "def") {
            continue;
        }
        let (name, _) = ident_at(src, skip_ws(code, def + 3));
        if name.starts_with("test") {
            names.push(match classes.last() {
                Some((_, class)) => format!("{class}::{name}"),
                None => name,
            });
        }
    }
    names
}

const JS_CALLS: &[&str] = &["it", "test", "xit", "xtest", "fit", "specify"];
const JS_MODIFIERS: &[&str] = &[
    "skip",
    "only",
    "todo",
    "fixme",
    "concurrent",
    "failing",
    "fails",
    "sequential",
    "serial",
    "each",
    "skipIf",
    "runIf",
];

/// `it(…)`, `test.skip(…)`, `it.each(…)(…)`: the first argument when it is a string, else
/// its source text.
fn js_names(src: &Src, _path: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut i = 0;
    while i < src.code.len() {
        match js_test_at(src, i) {
            Some((name, next)) => {
                names.push(name);
                i = next;
            }
            None => i += 1,
        }
    }
    names
}

fn js_test_at(src: &Src, i: usize) -> Option<(String, usize)> {
    let code = &src.code;
    let prev = i.checked_sub(1).and_then(|p| code.get(p)).copied();
    if prev.is_some_and(|c| is_word(c) || b".>:".contains(&c)) {
        return None;
    }
    let call = JS_CALLS.iter().find(|w| word_at(code, i, w))?;
    let before = src.raw(0, i).trim_end();
    if before.ends_with("function") || before.ends_with("def") {
        return None;
    }
    let mut j = skip_ws(code, i + call.len());
    loop {
        match code.get(j) {
            Some(b'.') => {
                let (modifier, end) = ident_at(src, skip_ws(code, j + 1));
                if !JS_MODIFIERS.contains(&modifier.as_str()) {
                    return None;
                }
                j = skip_ws(code, end);
                if matches!(modifier.as_str(), "each" | "skipIf" | "runIf") {
                    j = match code.get(j) {
                        Some(b'(') => skip_ws(code, skip_group(code, j)),
                        Some(b'`') => skip_ws(code, src.string_at(j)?.1),
                        _ => return None,
                    };
                }
            }
            Some(b'(') => break,
            _ => return None,
        }
    }
    let arg = skip_ws(code, j + 1);
    let name = string_after(src, arg).unwrap_or_else(|| {
        let len = code
            .get(arg..)
            .unwrap_or_default()
            .iter()
            .take_while(|c| !b",)\n".contains(c))
            .count();
        src.raw(arg, arg + len).trim().to_string()
    });
    Some((name, arg))
}

/// `func TestXxx(…)`, `func ExampleXxx()`, `func FuzzXxx(…)`, and suite methods
/// `func (s *S) TestXxx()`.
fn go_names(src: &Src, _path: &str) -> Vec<String> {
    let code = &src.code;
    let mut names = Vec::new();
    for (first, _) in src.lines() {
        if !word_at(code, first, "func") {
            continue;
        }
        let mut at = skip_ws(code, first + 4);
        if code.get(at) == Some(&b'(') {
            at = skip_ws(code, skip_group(code, at));
        }
        let (name, _) = ident_at(src, at);
        if is_go_test_name(&name) {
            names.push(name);
        }
    }
    names
}

fn is_go_test_name(name: &str) -> bool {
    name != "TestMain"
        && ["Test", "Example", "Fuzz"].iter().any(|p| {
            name.strip_prefix(p)
                .is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_lowercase()))
        })
}

const JAVA_TESTS: &[&str] = &[
    "Test",
    "ParameterizedTest",
    "RepeatedTest",
    "TestFactory",
    "TestTemplate",
];
const CSHARP_TESTS: &[&str] = &[
    "Fact",
    "Theory",
    "Test",
    "TestMethod",
    "DataTestMethod",
    "TestCase",
    "TestCaseSource",
    "SkippableFact",
    "SkippableTheory",
];

fn java_names(src: &Src, _path: &str) -> Vec<String> {
    annotated_names(src, b'@', JAVA_TESTS)
}

fn csharp_names(src: &Src, _path: &str) -> Vec<String> {
    annotated_names(src, b'[', CSHARP_TESTS)
}

/// The methods after a test annotation (`@Test`, Java and Kotlin) or attribute (`[Fact]`,
/// C#, at the start of a line): the first identifier (or Kotlin backticked name) followed
/// by `(`, before any `{`, `;` or `=`.
fn annotated_names(src: &Src, opener: u8, tests: &[&str]) -> Vec<String> {
    let code = &src.code;
    let (mut names, mut pending, mut line_start, mut i) = (Vec::new(), false, true, 0);
    while i < code.len() {
        let c = code[i];
        if c == opener && (opener == b'@' || line_start) {
            let (marked, end) = annotation_at(src, i, tests);
            pending |= marked;
            line_start = false;
            i = end.max(i + 1);
            continue;
        }
        let named = match c {
            b'`' if pending => src.string_at(i),
            _ if pending && is_ident(c) && !i.checked_sub(1).is_some_and(|p| is_ident(code[p])) => {
                Some(ident_at(src, i))
            }
            _ => None,
        };
        if let Some((name, end)) = named {
            if code.get(skip_ws(code, end)) == Some(&b'(') {
                names.push(name);
                pending = false;
            }
            line_start = false;
            i = end.max(i + 1);
            continue;
        }
        if b"{;=".contains(&c) {
            pending = false;
        }
        if c == b'\n' {
            line_start = true;
        } else if !c.is_ascii_whitespace() {
            line_start = false;
        }
        i += 1;
    }
    names
}

/// Whether the annotation at `i` (`@a.b.Test(…)`, or `[Test, Category("x")]`) is one of
/// `tests`, and the offset after it.
fn annotation_at(src: &Src, i: usize, tests: &[&str]) -> (bool, usize) {
    let code = &src.code;
    let name_at = |at: usize| {
        let len = code
            .get(at..)
            .unwrap_or_default()
            .iter()
            .take_while(|&&c| is_ident(c) || c == b'.' || c == b'\\')
            .count();
        let name = src.raw(at, at + len);
        let last = name.rsplit(['.', '\\']).next().unwrap_or(name);
        let last = last.strip_suffix("Attribute").unwrap_or(last);
        (tests.contains(&last), at + len)
    };
    if code.get(i) == Some(&b'@') {
        let (marked, end) = name_at(i + 1);
        let end = if code.get(end) == Some(&b'(') {
            skip_group(code, end)
        } else {
            end
        };
        return (marked, end);
    }
    let (mut marked, mut j) = (false, i + 1);
    loop {
        let (is_test, end) = name_at(skip_ws(code, j));
        marked |= is_test;
        j = skip_ws(code, end);
        if code.get(j) == Some(&b'(') {
            j = skip_ws(code, skip_group(code, j));
        }
        match code.get(j) {
            Some(b',') => j += 1,
            Some(b']') => return (marked, j + 1),
            _ => return (false, i + 1),
        }
    }
}

const RUBY_CALLS: &[&str] = &[
    "it", "specify", "example", "scenario", "xit", "xspecify", "fit", "test",
];

/// `it "…"`, `specify`, `test "…"` (Rails) at the start of a line, and `def test_…`.
fn ruby_names(src: &Src, _path: &str) -> Vec<String> {
    let code = &src.code;
    let mut names = Vec::new();
    for (first, _) in src.lines() {
        if word_at(code, first, "def") {
            let (name, _) = ident_at(src, skip_ws(code, first + 3));
            if name.starts_with("test_") {
                names.push(name);
            }
            continue;
        }
        let Some(call) = RUBY_CALLS.iter().find(|w| word_at(code, first, w)) else {
            continue;
        };
        let after = first + call.len();
        if !code.get(after).is_none_or(|c| b" \t\r\n({".contains(c)) {
            continue;
        }
        let arg = skip_ws(code, after);
        let arg = if code.get(arg) == Some(&b'(') {
            arg + 1
        } else {
            arg
        };
        match string_after(src, arg) {
            Some(name) => names.push(name),
            None if *call != "test" => names.push((*call).to_string()),
            None => {}
        }
    }
    names
}

/// `function test…(`, methods after `@test` (in a doc comment) or `#[Test]`, and Pest's
/// `it('…')` / `test('…')`.
fn php_names(src: &Src, _path: &str) -> Vec<String> {
    let (code, raw) = (&src.code, src.text.as_bytes());
    let (mut names, mut pending, mut i) = (Vec::new(), false, 0);
    while i < code.len() {
        if code[i] == b' '
            && raw.get(i..).is_some_and(|r| r.starts_with(b"@test"))
            && !raw.get(i + 5).is_some_and(|&c| is_ident(c))
        {
            pending = true;
        } else if code.get(i..).is_some_and(|r| r.starts_with(b"#[")) {
            pending |= annotation_at(src, i + 1, &["Test"]).0;
        } else if word_at(code, i, "function") {
            let (name, end) = ident_at(src, skip_ws(code, i + 8));
            if pending || name.starts_with("test") {
                names.push(name);
            }
            pending = false;
            i = end.max(i + 1);
            continue;
        } else if let Some((name, next)) = js_test_at(src, i) {
            names.push(name);
            i = next;
            continue;
        }
        i += 1;
    }
    names
}

/// ExUnit `test "…"` and StreamData `property "…"` at the start of a line.
fn elixir_names(src: &Src, _path: &str) -> Vec<String> {
    let code = &src.code;
    src.lines()
        .filter_map(|(first, _)| {
            let call = ["test", "property"]
                .into_iter()
                .find(|w| word_at(code, first, w))?;
            string_after(src, first + call.len())
        })
        .collect()
}

/// bats `@test "…"`; any other shell or TAP file is one test, named by its path.
fn shell_names(src: &Src, path: &str) -> Vec<String> {
    if !path.to_ascii_lowercase().ends_with(".bats") {
        return vec![path.to_string()];
    }
    let code = &src.code;
    src.lines()
        .filter(|&(first, _)| code.get(first..).is_some_and(|r| r.starts_with(b"@test")))
        .filter_map(|(first, _)| string_after(src, first + 5))
        .collect()
}

// ---- The languages ----

const DQ: Quote = q("\"", "\"", false, true);
const SQ: Quote = q("'", "'", false, true);
const C_QUOTES: &[Quote] = &[DQ, SQ];

const RUST_SYNTAX: Syntax = Syntax {
    line_comments: &["//"],
    block_comments: true,
    quotes: &[
        q("r###\"", "\"###", true, false),
        q("r##\"", "\"##", true, false),
        q("r#\"", "\"#", true, false),
        q("r\"", "\"", true, false),
        q("\"", "\"", true, true),
    ],
    rust_chars: true,
    hash_attrs: false,
};

const RUST: Lang = Lang {
    syntax: &RUST_SYNTAX,
    skips: &[
        shown("#[ignore", "#[ignore]"),
        shown("ignore)]", "#[cfg_attr(…, ignore)]"),
        shown("#[should_panic", "#[should_panic]"),
        shown("#![cfg(", "#![cfg(…)]"),
        shown("#[cfg(any())]", "#[cfg(any())]"),
    ],
    asserts: &[
        prefix("debug_assert", "!"),
        prefix("prop_assert", "!"),
        prefix("assert", "!"),
    ],
    names: rust_names,
};

const PYTHON: Lang = Lang {
    syntax: &Syntax {
        line_comments: &["#"],
        block_comments: false,
        quotes: &[
            q("\"\"\"", "\"\"\"", true, true),
            q("'''", "'''", true, true),
            DQ,
            SQ,
        ],
        rust_chars: false,
        hash_attrs: false,
    },
    skips: &[
        p("@pytest.mark.skipif"),
        p("@pytest.mark.skip"),
        p("@pytest.mark.xfail"),
        p("pytest.mark.skipif"),
        p("pytest.mark.skip"),
        p("pytest.mark.xfail"),
        p("@unittest.skipIf"),
        p("@unittest.skipUnless"),
        p("@unittest.skip"),
        p("@unittest.expectedFailure"),
        p("pytest.skip("),
        p("pytest.xfail("),
        p("self.skipTest("),
        p("pytest.importorskip("),
        p("SkipTest"),
        p("@skip("),
    ],
    asserts: &[prefix("self.assert", "("), p("pytest.raises("), p("assert")],
    names: python_names,
};

const JS: Lang = Lang {
    syntax: &Syntax {
        line_comments: &["//"],
        block_comments: true,
        quotes: &[q("`", "`", true, true), DQ, SQ],
        rust_chars: false,
        hash_attrs: false,
    },
    skips: &[
        p("describe.skipIf"),
        p("describe.skip"),
        p("describe.only"),
        p("describe.todo"),
        p("it.concurrent.skip"),
        p("it.concurrent.only"),
        p("test.concurrent.skip"),
        p("test.concurrent.only"),
        p("it.skipIf"),
        p("it.skip"),
        p("it.only"),
        p("it.todo"),
        p("test.skipIf"),
        p("test.skip"),
        p("test.only"),
        p("test.todo"),
        p("test.fixme"),
        p("test.failing"),
        p("it.failing"),
        p("it.fails"),
        p("test.fails"),
        p("xit("),
        p("xtest("),
        p("xdescribe("),
        p("fit("),
        p("fdescribe("),
        p("this.skip("),
    ],
    asserts: &[p("expect("), p("assert("), p("assert."), p(".should")],
    names: js_names,
};

const GO: Lang = Lang {
    syntax: &Syntax {
        line_comments: &["//"],
        block_comments: true,
        quotes: &[q("`", "`", true, false), DQ, SQ],
        rust_chars: false,
        hash_attrs: false,
    },
    skips: &[p("t.SkipNow("), p("t.Skipf("), p("t.Skip(")],
    asserts: &[
        p("t.Errorf("),
        p("t.Error("),
        p("t.Fatalf("),
        p("t.Fatal("),
        p("assert."),
        p("require."),
    ],
    names: go_names,
};

const JAVA: Lang = Lang {
    syntax: &Syntax {
        line_comments: &["//"],
        block_comments: true,
        quotes: &[
            q("\"\"\"", "\"\"\"", true, true),
            DQ,
            SQ,
            q("`", "`", false, false),
        ],
        rust_chars: false,
        hash_attrs: false,
    },
    skips: &[prefix("@Disabled", ""), p("@Ignore")],
    asserts: &[prefix(".assert", "(<"), prefix("assert", "(<")],
    names: java_names,
};

const RUBY: Lang = Lang {
    syntax: &Syntax {
        line_comments: &["#"],
        block_comments: false,
        quotes: C_QUOTES,
        rust_chars: false,
        hash_attrs: false,
    },
    skips: &[
        p("skip"),
        p("pending"),
        p("xit"),
        p("xspecify"),
        p("xdescribe"),
        p("xcontext"),
        p("fit"),
        p("fdescribe"),
        p("fcontext"),
        p("focus"),
        p("omit"),
        p("pend"),
    ],
    asserts: &[
        prefix("assert", " ("),
        prefix("refute", " ("),
        p("expect"),
        p("is_expected"),
        p(".should"),
    ],
    names: ruby_names,
};

const PHP: Lang = Lang {
    syntax: &Syntax {
        line_comments: &["//", "#"],
        block_comments: true,
        quotes: C_QUOTES,
        rust_chars: false,
        hash_attrs: true,
    },
    skips: &[
        p("markTestSkipped("),
        p("markTestIncomplete("),
        p("})->skip("),
        p("})->todo("),
        p("})->only("),
    ],
    asserts: &[
        prefix("->assert", "("),
        prefix("::assert", "("),
        p("expect("),
    ],
    names: php_names,
};

const CSHARP: Lang = Lang {
    syntax: &Syntax {
        line_comments: &["//"],
        block_comments: true,
        quotes: &[
            q("@\"", "\"", true, false),
            q("\"\"\"", "\"\"\"", true, false),
            DQ,
            SQ,
        ],
        rust_chars: false,
        hash_attrs: false,
    },
    skips: &[
        p("Skip ="),
        shown("Skip=", "Skip ="),
        shown("[Ignore", "[Ignore]"),
    ],
    asserts: &[p("Assert."), p(".Should(")],
    names: csharp_names,
};

const ELIXIR: Lang = Lang {
    syntax: &Syntax {
        line_comments: &["#"],
        block_comments: false,
        quotes: &[
            q("\"\"\"", "\"\"\"", true, true),
            q("'''", "'''", true, true),
            DQ,
            SQ,
        ],
        rust_chars: false,
        hash_attrs: false,
    },
    skips: &[
        p("@tag :skip"),
        p("@tag skip:"),
        p("@moduletag :skip"),
        p("@describetag :skip"),
    ],
    asserts: &[prefix("assert", " ("), prefix("refute", " (")],
    names: elixir_names,
};

const SHELL: Lang = Lang {
    syntax: &Syntax {
        line_comments: &["#"],
        block_comments: false,
        quotes: &[DQ, q("'", "'", false, false)],
        rust_chars: false,
        hash_attrs: false,
    },
    skips: &[p("skip_all"), p("skip")],
    asserts: &[],
    names: shell_names,
};

#[cfg(test)]
mod tests {
    use super::*;

    fn skips(scan: &TestScan) -> Vec<(u32, &str)> {
        scan.skips
            .iter()
            .map(|s| (s.line, s.marker.as_str()))
            .collect()
    }

    #[test]
    fn test_files_by_directory_and_name() {
        for path in [
            "tests/it.py",
            "pkg/test/helpers.js",
            "src/__tests__/a.tsx",
            "spec/models/user_spec.rb",
            "spec/support/helpers.rb",
            "t/basic.t",
            "t/setup.sh",
            "test_math.py",
            "pkg/math_test.py",
            "conftest.py",
            "pkg/math_test.go",
            "src/a.test.ts",
            "src/a.spec.mjs",
            "src/b.test.cts",
            "lib/x_test.rb",
            "test_x.rb",
            "src/main/java/FooTest.java",
            "FooTests.java",
            "FooTest.kt",
            "FooTest.php",
            "FooTest.cs",
            "FooTests.cs",
            "math_test.exs",
            "cli.bats",
            "a.t",
            "tests\\win.py",
            "tests/integration.rs",
        ] {
            assert!(is_test_file(path, None), "{path}");
        }
        for path in [
            "specs/01-loop.md",
            "specs/plan.py",
            "tests/fixtures/data.json",
            "tests/fixtures/config.yaml",
            "tests/README.md",
            "test/notes.txt",
            "src/math.py",
            "src/testing.py",
            "src/contest.go",
            "src/a.tests.ts",
            "src/lib.rs",
            "Makefile",
            "tests",
            "",
        ] {
            assert!(!is_test_file(path, None), "{path}");
        }
    }

    #[test]
    fn rust_files_count_by_their_attributes() {
        let with = "pub fn f() {}\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn t() {}\n}\n";
        assert!(is_test_file("src/lib.rs", Some(with)));
        assert!(is_test_file(
            "src/a.rs",
            Some("#[tokio::test(flavor = \"multi_thread\")]\nasync fn t() {}\n")
        ));
        assert!(is_test_file(
            "src/a.rs",
            Some("#![cfg(test)]\nuse super::*;\n")
        ));
        let mentions =
            "// #[test] is how you mark one\nconst DOC: &str = \"#[test]\";\npub fn f() {}\n";
        assert!(!is_test_file("src/a.rs", Some(mentions)));
        assert!(!is_test_file(
            "src/a.rs",
            Some("#[cfg(feature = \"x\")]\nfn f() {}\n")
        ));
        assert!(is_test_file(
            "tests/common/mod.rs",
            Some("pub fn helper() {}\n")
        ));
    }

    #[test]
    fn rust_tests_skips_and_assertions() {
        let text = r##"
use super::*;

#[test]
fn adds() {
    assert_eq!(add(1, 2), 3);
    assert!(true, "assert_eq!(in a string)");
    // assert_ne!(commented, out);
}

#[test]
#[ignore = "slow"]
#[should_panic]
fn slow_one() {
    debug_assert_ne!(1, 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn async_one() {
    let s = r#"#[test] fn not_a_test() { assert!(x) }"#;
    let c = '"';
    prop_assert!(s.len() > 0);
}

#[rstest]
#[case(1)]
fn cases(#[case] n: u32) { assert_matches!(n, 1); }

#[test_case(1 ; "one")]
#[test_case(2 ; "two")]
fn tc(n: u32) {}

/* #[test]
   fn in_block_comment() { assert!(false) } */
#[test] #[ignore] fn one_line() {}
#[cfg_attr(miri, ignore)]
#[test]
fn not_under_miri() {}

fn helper<'a>(x: &'a str) -> &'a str { x }
macro_rules! t { ($n:ident) => { #[test] fn $n() {} }; }
fn not_a_test_after_the_macro() {}
"##;
        let found = scan("src/math.rs", text);
        assert_eq!(
            found.tests,
            [
                "adds",
                "slow_one",
                "async_one",
                "cases",
                "tc",
                "one_line",
                "not_under_miri"
            ]
        );
        assert_eq!(
            skips(&found),
            [
                (12, "#[ignore]"),
                (13, "#[should_panic]"),
                (35, "#[ignore]"),
                (36, "#[cfg_attr(…, ignore)]")
            ]
        );
        assert_eq!(found.assertions, 5);
    }

    #[test]
    fn python_tests_skips_and_assertions() {
        let text = r#"import pytest
import unittest

def test_adds():
    assert add(1, 2) == 3
    print("use @pytest.mark.skip")  # @pytest.mark.skip in a comment

@pytest.mark.skip(reason="later")
def test_later():
    pass

@pytest.mark.skipif(sys.platform == "win32", reason="posix")
async def test_async():
    with pytest.raises(ValueError):
        parse("x")

def helper():
    """
    @pytest.mark.xfail
    assert nothing
    """
    assertion_count = 1

class TestMath(unittest.TestCase):
    @unittest.skip("broken")
    def test_sub(self):
        self.assertEqual(sub(2, 1), 1)
        self.skipTest("no")

    def helper(self):
        pass

def test_after_class():
    pytest.skip("not here")
"#;
        let found = scan("tests/test_math.py", text);
        assert_eq!(
            found.tests,
            [
                "test_adds",
                "test_later",
                "test_async",
                "TestMath::test_sub",
                "test_after_class"
            ]
        );
        assert_eq!(
            skips(&found),
            [
                (8, "@pytest.mark.skip"),
                (12, "@pytest.mark.skipif"),
                (25, "@unittest.skip"),
                (28, "self.skipTest"),
                (34, "pytest.skip"),
            ]
        );
        assert_eq!(found.assertions, 3);
    }

    #[test]
    fn js_tests_skips_and_assertions() {
        let text = r#"import { describe, it, expect } from "vitest";

describe("math", () => {
  it("adds two", () => {
    expect(add(1, 2)).toBe(3);
  });
  it.skip('subtracts', () => {
    assert.equal(sub(2, 1), 1);
  });
  test.each([
    [1, 1],
    [2, 2],
  ])("identity %i", (a, b) => {
    expect(a).toBe(b);
  });
  it.todo("divides");
  xit(`multiplies`, () => {});
  // it.only("commented", () => {});
  /* fit("block", () => {}) */
  test.only("focused", () => { x.should.equal(1); });
  const re = /a/; re.test("a"); model.fit(data);
  it(
    "on the next line",
    () => { assert(true); console.log("expect(not counted)"); },
  );
});
fdescribe("focused suite", () => {});
it.concurrent.skip("in parallel", () => {});
"#;
        let found = scan("src/math.test.ts", text);
        assert_eq!(
            found.tests,
            [
                "adds two",
                "subtracts",
                "identity %i",
                "divides",
                "multiplies",
                "focused",
                "on the next line",
                "in parallel"
            ]
        );
        assert_eq!(
            skips(&found),
            [
                (7, "it.skip"),
                (16, "it.todo"),
                (17, "xit"),
                (20, "test.only"),
                (27, "fdescribe"),
                (28, "it.concurrent.skip")
            ]
        );
        assert_eq!(found.assertions, 5);
    }

    #[test]
    fn go_tests_skips_and_assertions() {
        let text = "package math\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif add(1, 2) != 3 {\n\t\tt.Errorf(\"got %d\", add(1, 2))\n\t}\n\tt.Run(\"sub\", func(t *testing.T) { t.Skip(\"later\") })\n}\n\nfunc TestMain(m *testing.M) {}\nfunc Testing() {}\nfunc helper() {}\nfunc ExampleAdd() {}\nfunc FuzzAdd(f *testing.F) {}\nfunc (s *Suite) TestSuiteCase() {\n\trequire.NoError(s.T(), err)\n\tassert.Equal(s.T(), 1, 1)\n\t// t.Fatal(\"commented\")\n\ts := `t.SkipNow()`\n}\n";
        let found = scan("math_test.go", text);
        assert_eq!(
            found.tests,
            ["TestAdd", "ExampleAdd", "FuzzAdd", "TestSuiteCase"]
        );
        assert_eq!(skips(&found), [(9, "t.Skip")]);
        assert_eq!(found.assertions, 3);
    }

    #[test]
    fn java_and_kotlin_tests() {
        let java = r#"class MathTest {
    @Test
    void adds() {
        assertEquals(3, add(1, 2));
        Assertions.assertThat(x).isTrue();
    }

    @Disabled("later")
    @Test
    public void subtracts() throws Exception { }

    @ParameterizedTest
    @CsvSource({"1, 1", "2, 2"})
    void identity(int a, int b) { assertTrue(a == b); }

    @TestInstance(Lifecycle.PER_CLASS)
    void notATest() {}

    @Ignore @org.junit.Test public void old() {}
}
"#;
        let found = scan("src/test/java/MathTest.java", java);
        assert_eq!(found.tests, ["adds", "subtracts", "identity", "old"]);
        assert_eq!(skips(&found), [(8, "@Disabled"), (19, "@Ignore")]);
        assert_eq!(found.assertions, 3);
        let kotlin = "class MathTest {\n    @Test\n    fun `adds two`() = assertEquals(3, add(1, 2))\n\n    @Test fun plain() {}\n    @DisabledOnOs(OS.WINDOWS) @Test fun posix() {}\n}\n";
        let found = scan("MathTest.kt", kotlin);
        assert_eq!(found.tests, ["adds two", "plain", "posix"]);
        assert_eq!(skips(&found), [(6, "@DisabledOnOs")]);
        assert_eq!(found.assertions, 1);
    }

    #[test]
    fn ruby_tests() {
        let rspec = "RSpec.describe Math do\n  it \"adds two\" do\n    expect(add(1, 2)).to eq(3)\n  end\n\n  it 'subtracts', skip: true do\n  end\n\n  xit \"multiplies\" do\n    skip \"later\"\n  end\n\n  it { is_expected.to be_valid }\n  # pending \"comment\"\n  specify { expect { boom }.to raise_error }\nend\n";
        let found = scan("spec/math_spec.rb", rspec);
        assert_eq!(
            found.tests,
            ["adds two", "subtracts", "multiplies", "it", "specify"]
        );
        assert_eq!(skips(&found), [(6, "skip"), (9, "xit"), (10, "skip")]);
        assert_eq!(found.assertions, 3);
        let minitest = "class MathTest < Minitest::Test\n  def test_adds\n    assert_equal 3, add(1, 2)\n  end\n\n  def test_later\n    skip \"not yet\"\n    refute_nil x\n  end\n\n  test \"rails style\" do\n    assert true\n  end\nend\n";
        let found = scan("test/math_test.rb", minitest);
        assert_eq!(found.tests, ["test_adds", "test_later", "rails style"]);
        assert_eq!(skips(&found), [(7, "skip")]);
        assert_eq!(found.assertions, 3);
    }

    #[test]
    fn php_tests() {
        let text = r#"<?php
final class MathTest extends TestCase
{
    public function testAdds(): void
    {
        $this->assertSame(3, add(1, 2));
    }

    /**
     * @test
     */
    public function it_subtracts(): void
    {
        $this->markTestSkipped('later');
        self::assertTrue(true);
    }

    #[Test]
    #[DataProvider('cases')]
    public function identity(int $n): void {}

    #[\PHPUnit\Framework\Attributes\Test]
    public function qualified(): void { $this->markTestIncomplete(); }

    # $this->assertTrue(false);
    private function helper(): void {}
}

test('pest style', function () {
    expect(1)->toBe(1);
})->skip();
"#;
        let found = scan("tests/MathTest.php", text);
        assert_eq!(
            found.tests,
            [
                "testAdds",
                "it_subtracts",
                "identity",
                "qualified",
                "pest style"
            ]
        );
        assert_eq!(
            skips(&found),
            [
                (14, "markTestSkipped"),
                (23, "markTestIncomplete"),
                (31, "})->skip")
            ]
        );
        assert_eq!(found.assertions, 3);
    }

    #[test]
    fn csharp_tests() {
        let text = "public class MathTests\n{\n    [Fact]\n    public void Adds() => Assert.Equal(3, Add(1, 2));\n\n    [Fact(Skip = \"later\")]\n    public async Task Subtracts() { result.Should().Be(1); }\n\n    [Theory]\n    [InlineData(1)]\n    public void Identity(int n) { }\n\n    [Test, Ignore(\"x\")]\n    public void NUnitOne() { }\n\n    [TestMethod]\n    [Ignore]\n    public void MsTestOne() { }\n\n    public void Helper() { var a = new[] { 1 }; }\n}\n";
        let found = scan("MathTests.cs", text);
        assert_eq!(
            found.tests,
            ["Adds", "Subtracts", "Identity", "NUnitOne", "MsTestOne"]
        );
        assert_eq!(skips(&found), [(6, "Skip ="), (17, "[Ignore]")]);
        assert_eq!(found.assertions, 2);
    }

    #[test]
    fn shell_elixir_and_tap() {
        let bats = "#!/usr/bin/env bats\n\n@test \"adds two\" {\n  run add 1 2\n  [ \"$output\" = 3 ]\n}\n\n@test 'later' {\n  skip \"not yet\"\n  echo \"skip in a string\" --skip-x # skip in a comment\n}\n";
        let found = scan("test/math.bats", bats);
        assert_eq!(found.tests, ["adds two", "later"]);
        assert_eq!(skips(&found), [(9, "skip")]);
        assert_eq!(found.assertions, 0);
        let tap =
            "use Test::More;\nok(1, 'one');\nSKIP: {\n  skip 'no network', 1;\n}\ndone_testing;\n";
        let found = scan("t/net.t", tap);
        assert_eq!(found.tests, ["t/net.t"]);
        assert_eq!(skips(&found), [(4, "skip")]);
        let exs = "defmodule MathTest do\n  use ExUnit.Case\n\n  test \"adds two\" do\n    assert add(1, 2) == 3\n    refute nil\n  end\n\n  @tag :skip\n  test \"later\", %{conn: conn} do\n  end\nend\n";
        let found = scan("test/math_test.exs", exs);
        assert_eq!(found.tests, ["adds two", "later"]);
        assert_eq!(skips(&found), [(9, "@tag :skip")]);
        assert_eq!(found.assertions, 2);
    }

    #[test]
    fn unknown_languages_hold_nothing() {
        assert_eq!(
            scan("tests/data.json", "{\"it\": \"skip\"}"),
            TestScan::default()
        );
        assert_eq!(scan("README", "it('x')"), TestScan::default());
    }

    #[test]
    fn scan_round_trips_through_json() {
        let found = scan("a_test.go", "func TestA(t *testing.T) { t.Skip() }\n");
        let json = serde_json::to_string(&found).unwrap();
        assert_eq!(
            json,
            r#"{"tests":["TestA"],"skips":[{"line":1,"marker":"t.Skip"}],"assertions":0}"#
        );
        assert_eq!(serde_json::from_str::<TestScan>(&json).unwrap(), found);
    }

    #[test]
    fn this_file_scans_as_its_own_tests() {
        let text = include_str!("testfiles.rs");
        assert!(is_test_file(
            "crates/taskdaemon-core/src/gates/evidence/testfiles.rs",
            Some(text)
        ));
        let found = scan("testfiles.rs", text);
        assert!(
            found
                .tests
                .contains(&"this_file_scans_as_its_own_tests".to_string())
        );
        assert!(found.skips.is_empty(), "{:?}", found.skips);
    }

    const EXTS: &[&str] = &[
        "rs", "py", "ts", "go", "java", "kt", "rb", "php", "cs", "exs", "bats", "t", "sh", "txt",
    ];

    const CODE_BITS: &[&str] = &[
        "#[",
        "#![",
        "]",
        "test",
        "fn ",
        "def ",
        "class ",
        "func ",
        "it",
        ".skip",
        ".each",
        "(",
        ")",
        "{",
        "}",
        "[",
        "'",
        "\"",
        "`",
        "\"\"\"",
        "r#\"",
        "\"#",
        "/*",
        "*/",
        "//",
        "#",
        "@Test",
        "@test",
        "[Fact",
        "function ",
        "* ",
        "-- ",
        "\\",
        "\n",
        "\r",
        " ",
        "a",
        "é",
        "\u{1F600}",
        "assert",
        "!",
        "@",
        "t.Skip(",
        "$",
        ".",
        ",",
        "skip",
    ];

    /// Text made of up to 80 bits of code, in any order.
    fn tokens() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::strategy::Strategy;
        proptest::collection::vec(proptest::sample::select(CODE_BITS), 0..80)
            .prop_map(|v| v.concat())
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        #[test]
        fn never_panics_on_any_text(text in "\\PC{0,300}", ext in 0..EXTS.len(), dir in "[a-z_/.\\\\]{0,12}") {
            let path = format!("{dir}x.{}", EXTS[ext]);
            let _ = is_test_file(&path, Some(&text));
            let _ = is_test_file(&text, None);
            let _ = scan(&path, &text);
        }

        #[test]
        fn never_panics_on_code_like_text(text in tokens(), ext in 0..EXTS.len()) {
            let path = format!("tests/x.{}", EXTS[ext]);
            let found = scan(&path, &text);
            let lines = u32::try_from(text.split('\n').count()).unwrap_or(u32::MAX);
            for skip in &found.skips {
                proptest::prop_assert!(skip.line >= 1 && skip.line <= lines);
            }
        }
    }
}
