//! Counting the items of a file for the `[ADD] N` / `[REMOVE]` checks (spec 1 §7): it must
//! tell "added 2 to 8" from "converted 4 of 8", and say plainly when it cannot measure. The
//! file's extension chooses the rules:
//!
//! - plain text (`.txt`, no extension, anything not named below): non-blank lines that are
//!   not `#` comments;
//! - markdown: the larger of its list items and the rows of its largest table, outside
//!   fenced code;
//! - CSV / TSV: data rows (records minus the header);
//! - JSON / YAML: the largest array or object reachable from the root through object
//!   keys (an array's elements are records: nothing inside them competes); an empty file
//!   is 0;
//! - TOML: the most repeated `[[name]]`, the largest inline array, or the keys of the
//!   largest `[table]`;
//! - source code: the largest array literal, brace literal or enum, Go `const (`/`var (`
//!   block, Python `Enum` class, or most repeated capitalised element tag.
//!
//! A structured file that does not parse is [`Measure::Unparsable`], one that is not text
//! [`Measure::Binary`], and text with nothing countable [`Measure::NoList`].

use std::collections::HashMap;

/// What a count is made of, for messages ("expected 5 lines, found 4").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Lines,
    ListItems,
    TableRows,
    Rows,
    Elements,
    Entries,
    Tags,
}

impl Unit {
    /// The unit's plural, as a message says it: "lines", "list items", "table rows"…
    pub fn plural(self) -> &'static str {
        match self {
            Unit::Lines => "lines",
            Unit::ListItems => "list items",
            Unit::TableRows => "table rows",
            Unit::Rows => "rows",
            Unit::Elements | Unit::Tags => "elements",
            Unit::Entries => "entries",
        }
    }
}

/// The measure of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Measure {
    /// `count` items of the file's collection, of kind `unit`.
    Items { count: usize, unit: Unit },
    /// Text, but no list, array, map, table, enum or repeated element the harness can count.
    NoList,
    /// A structured file (by its extension: .json, .yaml/.yml, .csv/.tsv, .toml) that does
    /// not parse: the parser's message, with line (and column when known), e.g.
    /// "line 3, column 5: expected `,`".
    Unparsable(String),
    /// Not text (a NUL byte in the first 8 KiB, or not UTF-8): the harness cannot count in it.
    Binary,
}

impl Measure {
    /// The item count, when the file could be measured.
    pub fn count(&self) -> Option<usize> {
        match self {
            Measure::Items { count, .. } => Some(*count),
            _ => None,
        }
    }
}

/// Measure `bytes`, the content of the file at `path` (its extension chooses the rules).
pub fn measure(path: &str, bytes: &[u8]) -> Measure {
    let Some(text) = as_text(bytes) else {
        return Measure::Binary;
    };
    match Kind::of(path) {
        Kind::Text => plain_lines(text),
        Kind::Markdown => markdown(text),
        Kind::Delimited(delimiter) => delimited(text, delimiter),
        Kind::Json => json(text),
        Kind::Yaml => yaml(text),
        Kind::Toml => toml(text),
        Kind::Code(lang) => code(text, lang),
    }
}

/// The old entry point, kept for callers that only want a number: the count of
/// [`measure`], 0 otherwise.
pub fn count_items(path: &str, text: &str) -> usize {
    measure(path, text.as_bytes()).count().unwrap_or(0)
}

/// `bytes` as text without a byte-order mark, or `None` for binary content.
fn as_text(bytes: &[u8]) -> Option<&str> {
    if bytes.iter().take(8192).any(|&b| b == 0) {
        return None;
    }
    let text = std::str::from_utf8(bytes).ok()?;
    Some(text.strip_prefix('\u{feff}').unwrap_or(text))
}

/// Which rules a file is measured by.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Text,
    Markdown,
    Delimited(u8),
    Json,
    Yaml,
    Toml,
    Code(Lang),
}

impl Kind {
    fn of(path: &str) -> Kind {
        let ext = std::path::Path::new(path)
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .unwrap_or_default();
        match ext.as_str() {
            "md" | "markdown" => Kind::Markdown,
            "csv" => Kind::Delimited(b','),
            "tsv" => Kind::Delimited(b'\t'),
            "json" => Kind::Json,
            "yaml" | "yml" => Kind::Yaml,
            "toml" => Kind::Toml,
            other => Lang::of(other).map_or(Kind::Text, Kind::Code),
        }
    }
}

/// The few language traits the code scanner needs.
#[derive(Debug, Clone, Copy, Default)]
struct Lang {
    /// `#` starts a comment (Python, Ruby, Elixir).
    hash_comments: bool,
    /// `'a` is a lifetime, not a string.
    rust: bool,
    /// `T{…}` composite literals and `const (` blocks.
    go: bool,
    /// `= (…)` tuples and `class X(Enum):`.
    python: bool,
    /// Only array literals count (TOML values).
    arrays_only: bool,
}

const CODE_EXTENSIONS: &[&str] = &[
    "rs", "ts", "tsx", "mts", "cts", "js", "jsx", "mjs", "cjs", "py", "pyi", "go", "java", "kt",
    "kts", "swift", "c", "h", "cc", "cpp", "cxx", "hh", "hpp", "hxx", "cs", "rb", "php", "scala",
    "ex", "exs", "lua", "dart", "vue", "svelte",
];

impl Lang {
    fn of(ext: &str) -> Option<Lang> {
        if !CODE_EXTENSIONS.contains(&ext) {
            return None;
        }
        let python = matches!(ext, "py" | "pyi");
        Some(Lang {
            hash_comments: python || matches!(ext, "rb" | "ex" | "exs"),
            rust: ext == "rs",
            go: ext == "go",
            python,
            arrays_only: false,
        })
    }
}

/// The best count so far and its unit.
type Best = Option<(usize, Unit)>;

/// Keep `(count, unit)` if it beats `best`; on a tie an array's elements win.
fn keep(best: &mut Best, count: usize, unit: Unit) {
    let wins = best.is_none_or(|(n, u)| {
        count > n || (count == n && unit == Unit::Elements && u != Unit::Elements)
    });
    if wins {
        *best = Some((count, unit));
    }
}

fn found(best: Best) -> Measure {
    best.map_or(Measure::NoList, |(count, unit)| Measure::Items {
        count,
        unit,
    })
}

// ---- plain text ----------------------------------------------------------------------

/// One entry per line: non-blank lines that are not `#` comments.
fn plain_lines(text: &str) -> Measure {
    let count = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .count();
    Measure::Items {
        count,
        unit: Unit::Lines,
    }
}

// ---- markdown ------------------------------------------------------------------------

/// The larger of the list items and the rows of the largest table, outside fenced code.
fn markdown(text: &str) -> Measure {
    let lines = outside_fences(text);
    let items = lines.iter().filter(|l| is_list_item(l)).count();
    let mut best = (items > 0).then_some((items, Unit::ListItems));
    if let Some(rows) = largest_table(&lines)
        && best.is_none_or(|(n, _)| rows > n)
    {
        best = Some((rows, Unit::TableRows));
    }
    found(best)
}

/// The lines of `text` that are not inside a ``` or ~~~ fenced code block (nor its fences).
fn outside_fences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut fence: Option<(char, usize)> = None;
    for line in text.lines() {
        let t = line.trim();
        match (fence, fence_marker(t)) {
            (None, Some(marker)) => fence = Some(marker),
            (Some((c, n)), Some((c2, n2))) if c == c2 && n2 >= n && t.len() == n2 => fence = None,
            (None, None) => out.push(line),
            _ => {}
        }
    }
    out
}

/// The fence character and length when `t` opens or closes a fenced code block.
fn fence_marker(t: &str) -> Option<(char, usize)> {
    let c = t.chars().next().filter(|&c| c == '`' || c == '~')?;
    let n = t.chars().take_while(|&x| x == c).count();
    (n >= 3).then_some((c, n))
}

/// `- a`, `* a`, `+ a`, `1. a`, `1) a`, at any indentation; not a `- - -` rule.
fn is_list_item(line: &str) -> bool {
    let t = line.trim_start();
    if is_thematic_break(t) {
        return false;
    }
    let after_marker = if let Some(rest) = t.strip_prefix(['-', '*', '+']) {
        rest
    } else {
        let digits = t.bytes().take_while(u8::is_ascii_digit).count();
        if !(1..=9).contains(&digits) {
            return false;
        }
        match t[digits..].strip_prefix(['.', ')']) {
            Some(rest) => rest,
            None => return false,
        }
    };
    after_marker.starts_with([' ', '\t'])
}

fn is_thematic_break(t: &str) -> bool {
    let marks: Vec<char> = t.chars().filter(|c| !c.is_whitespace()).collect();
    marks.len() >= 3
        && ['-', '*', '_']
            .iter()
            .any(|&m| marks.iter().all(|&c| c == m))
}

/// The rows of the largest table (a `|` line, then a `|---|` separator, then rows).
fn largest_table(lines: &[&str]) -> Option<usize> {
    let mut best = None;
    let mut i = 0;
    while i + 1 < lines.len() {
        if lines[i].contains('|') && is_table_separator(lines[i + 1]) {
            let rows = lines[i + 2..]
                .iter()
                .take_while(|l| !l.trim().is_empty() && l.contains('|'))
                .count();
            best = best.max(Some(rows));
            i += 2 + rows;
        } else {
            i += 1;
        }
    }
    best
}

fn is_table_separator(line: &str) -> bool {
    let t = line.trim();
    t.contains('|')
        && t.contains('-')
        && t.chars().all(|c| matches!(c, '|' | '-' | ':' | ' ' | '\t'))
}

// ---- CSV / TSV -----------------------------------------------------------------------

/// Data rows: records minus the header, blank ones ignored.
fn delimited(text: &str, delimiter: u8) -> Measure {
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .flexible(true)
        .has_headers(true)
        .from_reader(text.as_bytes());
    let mut count = 0;
    for record in reader.records() {
        match record {
            Ok(r) if r.iter().all(|f| f.trim().is_empty()) => {}
            Ok(_) => count += 1,
            Err(e) => return Measure::Unparsable(csv_message(&e)),
        }
    }
    Measure::Items {
        count,
        unit: Unit::Rows,
    }
}

fn csv_message(e: &csv::Error) -> String {
    match e.position() {
        Some(p) => format!("line {}: {e}", p.line()),
        None => e.to_string(),
    }
}

// ---- JSON / YAML ---------------------------------------------------------------------

fn json(text: &str) -> Measure {
    if text.trim().is_empty() {
        return empty_collection();
    }
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(value) => found(largest_collection(&value)),
        Err(e) => {
            let full = e.to_string();
            let suffix = format!(" at line {} column {}", e.line(), e.column());
            let message = full.strip_suffix(&suffix).unwrap_or(&full);
            Measure::Unparsable(format!(
                "line {}, column {}: {message}",
                e.line(),
                e.column()
            ))
        }
    }
}

/// An empty structured file: a collection with nothing in it yet.
fn empty_collection() -> Measure {
    Measure::Items {
        count: 0,
        unit: Unit::Elements,
    }
}

/// The largest of the documents' collections.
fn yaml(text: &str) -> Measure {
    match serde_saphyr::from_multiple::<serde_json::Value>(text) {
        Ok(docs) if docs.iter().all(serde_json::Value::is_null) => empty_collection(),
        Ok(docs) => {
            let mut best = None;
            for (count, unit) in docs.iter().filter_map(largest_collection) {
                keep(&mut best, count, unit);
            }
            found(best)
        }
        Err(e) => Measure::Unparsable(yaml_message(&e)),
    }
}

fn yaml_message(e: &serde_saphyr::Error) -> String {
    let full = e.to_string();
    let first = full.lines().next().unwrap_or("invalid YAML");
    let first = first.strip_prefix("error: ").unwrap_or(first);
    // "line 3 column 19: did not find expected key" -> "did not find expected key"
    let message = match first.split_once(": ") {
        Some((loc, rest)) if loc.starts_with("line ") => rest,
        _ => first,
    };
    match e.location() {
        Some(l) => format!("line {}, column {}: {message}", l.line(), l.column()),
        None => message.to_string(),
    }
}

/// The largest array or object reachable from `root` through object values (an array's
/// elements are records: neither they nor what they hold compete).
fn largest_collection(root: &serde_json::Value) -> Best {
    use serde_json::Value;
    let mut best = None;
    let mut stack = vec![root];
    while let Some(value) = stack.pop() {
        match value {
            Value::Array(a) => keep(&mut best, a.len(), Unit::Elements),
            Value::Object(o) => {
                keep(&mut best, o.len(), Unit::Entries);
                stack.extend(o.values());
            }
            _ => {}
        }
    }
    best
}

// ---- TOML ----------------------------------------------------------------------------

/// The most repeated `[[name]]`, the largest inline array, or the key lines of the
/// largest `[table]` (the top level is one); counted by lines, never unparsable.
fn toml(text: &str) -> Measure {
    let mut scan = TomlScan {
        keys: Some(0),
        ..TomlScan::default()
    };
    for line in text.lines() {
        scan.line(line);
    }
    scan.finish()
}

#[derive(Default)]
struct TomlScan {
    /// Open `[` of a multi-line value.
    depth: usize,
    /// The closing delimiter of an open multi-line string.
    in_string: Option<&'static str>,
    /// How often each `[[name]]` header occurs.
    array_tables: HashMap<String, usize>,
    /// Key lines of the current table; `None` inside an `[[name]]` record.
    keys: Option<usize>,
    best_table: usize,
    /// Every value, for the array scan.
    values: String,
}

impl TomlScan {
    fn line(&mut self, line: &str) {
        let Some(line) = self.outside_string(line) else {
            return;
        };
        let (code, opens) = toml_strip(line);
        if let Some(delim) = opens {
            self.in_string = Some(delim);
        }
        let t = code.trim();
        if self.depth == 0 && t.starts_with('[') {
            self.header(t);
            return;
        }
        let value = match t.split_once('=') {
            Some((key, value)) if self.depth == 0 && is_toml_key(key) => {
                if let Some(k) = self.keys.as_mut() {
                    *k += 1;
                }
                value
            }
            _ => t,
        };
        self.depth = bracket_depth(self.depth, value);
        self.values.push_str(value);
        self.values.push('\n');
    }

    /// The part of `line` after a multi-line string that ends on it, or `None` if the
    /// whole line is inside one.
    fn outside_string<'a>(&mut self, line: &'a str) -> Option<&'a str> {
        let Some(delim) = self.in_string else {
            return Some(line);
        };
        let end = line.find(delim)?;
        self.in_string = None;
        Some(&line[end + delim.len()..])
    }

    fn header(&mut self, t: &str) {
        self.close_table();
        if let Some(name) = t.strip_prefix("[[").and_then(|r| r.strip_suffix("]]")) {
            *self
                .array_tables
                .entry(name.trim().to_string())
                .or_default() += 1;
            self.keys = None;
        } else if let Some(name) = t.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            let name = name.trim();
            let in_record = self.array_tables.keys().any(|a| {
                name.strip_prefix(a.as_str())
                    .is_some_and(|r| r.starts_with('.'))
            });
            self.keys = (!in_record).then_some(0);
        }
    }

    fn close_table(&mut self) {
        if let Some(k) = self.keys.take() {
            self.best_table = self.best_table.max(k);
        }
    }

    fn finish(mut self) -> Measure {
        self.close_table();
        let mut best = Some((self.best_table, Unit::Entries));
        if let Some(&n) = self.array_tables.values().max() {
            keep(&mut best, n, Unit::Elements);
        }
        let lang = Lang {
            arrays_only: true,
            ..Lang::default()
        };
        if let Some((n, unit)) = Scan::new(&self.values, lang).run() {
            keep(&mut best, n, unit);
        }
        found(best)
    }
}

/// `line` without its `#` comment (outside strings), and the delimiter of a multi-line
/// string that opens on it and does not close.
fn toml_strip(line: &str) -> (&str, Option<&'static str>) {
    let b = line.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'#' => return (&line[..i], None),
            q @ (b'"' | b'\'') => {
                let delim = if q == b'"' { "\"\"\"" } else { "'''" };
                if line[i..].starts_with(delim) {
                    match line[i + 3..].find(delim) {
                        Some(end) => i += 3 + end + 3,
                        None => return (&line[..i], Some(delim)),
                    }
                } else {
                    i = skip_string(b, i);
                }
            }
            _ => i += 1,
        }
    }
    (line, None)
}

/// `name`, `"quoted name"`, `a.b`: the left side of a key line.
fn is_toml_key(key: &str) -> bool {
    let key = key.trim();
    !key.is_empty()
        && (key.starts_with(['"', '\''])
            || key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ' ')))
}

/// The `[` depth after `value`, starting from `depth` (strings skipped).
fn bracket_depth(mut depth: usize, value: &str) -> usize {
    let b = value.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' | b'\'' => {
                i = skip_string(b, i);
                continue;
            }
            b'[' => depth += 1,
            b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    depth
}

// ---- source code ---------------------------------------------------------------------

/// The largest array literal, brace literal or enum, Go block, Python enum or repeated tag.
fn code(text: &str, lang: Lang) -> Measure {
    let mut best = Scan::new(text, lang).run();
    if lang.go
        && let Some(n) = go_blocks(text)
    {
        keep(&mut best, n, Unit::Entries);
    }
    if lang.python
        && let Some(n) = python_enums(text)
    {
        keep(&mut best, n, Unit::Entries);
    }
    let tags = repeated_elements(text);
    if tags > 0 {
        keep(&mut best, tags, Unit::Tags);
    }
    found(best)
}

/// One open bracket of the scan.
#[derive(Debug, Default)]
struct Frame {
    open: u8,
    /// What the bracket's items are, when it is a collection literal.
    unit: Option<Unit>,
    /// The body of an `enum Name {`.
    enum_body: bool,
    /// A `({` that may be a parameter pattern (`({ a, b }) =>`).
    after_paren: bool,
    /// Top-level commas after content.
    items: usize,
    /// Content since the last comma.
    pending: bool,
    /// Top-level `case` words (Swift enums).
    cases: usize,
    /// The count at the first top-level `;` (Java enums end their constants there).
    frozen: Option<usize>,
    /// A top-level `;`: a block of statements, not a literal.
    statements: bool,
}

impl Frame {
    fn size(&self) -> Option<usize> {
        let listed = self.items + usize::from(self.pending);
        if self.enum_body {
            let n = if self.cases > 0 {
                self.cases + self.items
            } else {
                listed
            };
            return Some(self.frozen.unwrap_or(n));
        }
        if self.statements && self.open == b'{' {
            return None;
        }
        Some(listed)
    }
}

/// A scan of code for its collection literals, skipping strings and comments.
struct Scan<'a> {
    b: &'a [u8],
    lang: Lang,
    stack: Vec<Frame>,
    best: Best,
}

impl<'a> Scan<'a> {
    fn new(text: &'a str, lang: Lang) -> Self {
        Scan {
            b: text.as_bytes(),
            lang,
            stack: Vec::new(),
            best: None,
        }
    }

    fn run(mut self) -> Best {
        let mut i = 0;
        while i < self.b.len() {
            i = self.step(i);
        }
        self.best
    }

    /// Consume the token at `i`; the index after it.
    fn step(&mut self, i: usize) -> usize {
        let b = self.b;
        let next = b.get(i + 1).copied();
        match b[i] {
            b'\'' if self.lang.rust && is_lifetime(b, i) => {
                self.content();
                i + 1
            }
            b'"' | b'\'' | b'`' => {
                self.content();
                skip_string(b, i)
            }
            b'#' if self.lang.hash_comments => skip_line(b, i),
            // Python's `//` is floor division.
            b'/' if next == Some(b'/') && !self.lang.hash_comments => skip_line(b, i),
            b'/' if next == Some(b'*') && !self.lang.hash_comments => skip_block_comment(b, i),
            b'[' | b'{' | b'(' => {
                self.open(i);
                i + 1
            }
            b']' | b'}' | b')' => {
                self.close(i);
                i + 1
            }
            b',' => {
                if let Some(top) = self.stack.last_mut()
                    && top.pending
                {
                    top.items += 1;
                    top.pending = false;
                }
                i + 1
            }
            b';' => {
                self.semicolon();
                i + 1
            }
            c if is_ident(c) => self.word(i),
            c if !c.is_ascii_whitespace() => {
                self.content();
                i + 1
            }
            _ => i + 1,
        }
    }

    fn content(&mut self) {
        if let Some(top) = self.stack.last_mut() {
            top.pending = true;
        }
    }

    /// An identifier or number: content, and a `case` of a Swift enum.
    fn word(&mut self, i: usize) -> usize {
        let end = word_end(self.b, i);
        if &self.b[i..end] == b"case"
            && let Some(top) = self.stack.last_mut()
            && top.enum_body
        {
            top.cases += 1;
        }
        self.content();
        end
    }

    fn semicolon(&mut self) {
        if let Some(top) = self.stack.last_mut() {
            if top.enum_body && top.frozen.is_none() {
                top.frozen = Some(top.items + usize::from(top.pending));
            }
            top.statements = true;
        }
    }

    fn open(&mut self, i: usize) {
        self.content();
        let open = self.b[i];
        let enum_body = open == b'{' && !self.lang.arrays_only && enum_header(self.b, i);
        let unit = match open {
            b'[' => array_literal(self.b, i).then_some(Unit::Elements),
            _ if self.lang.arrays_only => None,
            b'{' => (enum_body || self.brace_literal(i)).then_some(Unit::Entries),
            _ => self.paren_literal(i).then_some(Unit::Elements),
        };
        let after_paren = open == b'{' && prev_significant(self.b, i).map(|(_, c)| c) == Some(b'(');
        self.stack.push(Frame {
            open,
            unit,
            enum_body,
            after_paren,
            ..Frame::default()
        });
    }

    fn close(&mut self, i: usize) {
        let Some(frame) = self.stack.pop() else {
            return;
        };
        let Some(unit) = frame.unit else {
            return;
        };
        // `[]string`, `[3]int`: a type, not a literal.
        if frame.open == b'[' && self.b.get(i + 1).is_some_and(|&c| is_ident(c)) {
            return;
        }
        if frame.after_paren && is_parameter_pattern(self.b, i) {
            return;
        }
        if let Some(n) = frame.size() {
            keep(&mut self.best, n, unit);
        }
    }

    /// `= {`, `: {`, `({`, `return {`, `default {`, `%{`, `[] {`, Go's `T{`: an object,
    /// dict, map, set or initializer literal.
    fn brace_literal(&self, i: usize) -> bool {
        let b = self.b;
        if self.lang.go && i > 0 && (is_ident(b[i - 1]) || b[i - 1] == b']') {
            return true;
        }
        let Some((j, c)) = prev_significant(b, i) else {
            return false;
        };
        let before = j.checked_sub(1).map(|k| b[k]);
        match c {
            b'=' => !matches!(before, Some(b'=' | b'!' | b'<' | b'>')),
            b':' => before != Some(b':'),
            // `new int[] {1, 2}`, `new[] { a, b }`
            b'(' | b'%' | b']' => true,
            c if is_ident(c) => matches!(word_before(b, j + 1), b"return" | b"default" | b"yield"),
            _ => false,
        }
    }

    /// A Python tuple `= (a, b)`, or a list constructor `listOf(…)`, `List.of(…)`,
    /// `array(…)`.
    fn paren_literal(&self, i: usize) -> bool {
        let b = self.b;
        if self.lang.python
            && let Some((j, b'=')) = prev_significant(b, i)
        {
            return !matches!(
                j.checked_sub(1).map(|k| b[k]),
                Some(b'=' | b'!' | b'<' | b'>')
            );
        }
        let word = word_before(b, i);
        let start = i - word.len();
        match word {
            b"of" => start > 0 && b[start - 1] == b'.',
            w => LIST_CALLS.iter().any(|c| c.as_bytes() == w),
        }
    }
}

/// Calls whose arguments are the elements of a collection.
const LIST_CALLS: &[&str] = &[
    "listOf",
    "mutableListOf",
    "arrayListOf",
    "arrayOf",
    "intArrayOf",
    "setOf",
    "mutableSetOf",
    "hashSetOf",
    "mapOf",
    "mutableMapOf",
    "hashMapOf",
    "sequenceOf",
    "asList",
    "array",
    "List",
    "Seq",
    "Vector",
    "Set",
    "Map",
];

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80
}

fn word_end(b: &[u8], start: usize) -> usize {
    b[start..]
        .iter()
        .position(|&c| !is_ident(c))
        .map_or(b.len(), |n| start + n)
}

/// The identifier that ends right before `end`.
fn word_before(b: &[u8], end: usize) -> &[u8] {
    let start = b[..end]
        .iter()
        .rposition(|&c| !is_ident(c))
        .map_or(0, |p| p + 1);
    &b[start..end]
}

/// The last non-whitespace byte before `i`, and its index.
fn prev_significant(b: &[u8], i: usize) -> Option<(usize, u8)> {
    b[..i]
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map(|j| (j, b[j]))
}

/// `[` that opens a literal, not an index (`a[0]`, `f()[1]`), a type (`string[]`) or an
/// attribute (`#[derive]`).
fn array_literal(b: &[u8], i: usize) -> bool {
    match i.checked_sub(1).map(|k| b[k]) {
        None => true,
        Some(c) => {
            !(is_ident(c) || matches!(c, b')' | b']' | b'}' | b'#' | b'"' | b'\'' | b'`' | b'.'))
        }
    }
}

/// The line of the `{` at `i` (or the line above, for a brace on a line of its own) names
/// an `enum`. Only the last [`HEADER_WINDOW`] bytes are looked at, so that a minified
/// file's one long line stays linear.
fn enum_header(b: &[u8], i: usize) -> bool {
    let window = &b[i.saturating_sub(HEADER_WINDOW)..i];
    let line = window
        .rsplit(|&c| c == b'\n')
        .find(|l| !l.iter().all(u8::is_ascii_whitespace))
        .unwrap_or_default();
    line.split(|&c| !(c.is_ascii_alphanumeric() || c == b'_'))
        .any(|w| w == b"enum")
}

const HEADER_WINDOW: usize = 256;

/// After the `}` at `i`: `}: Props`, `} = {}`, `}) =>`, `}) {`: a destructuring
/// parameter, not an object.
fn is_parameter_pattern(b: &[u8], i: usize) -> bool {
    let next = |from: usize| {
        b[from..]
            .iter()
            .position(|c| !c.is_ascii_whitespace())
            .map(|n| from + n)
    };
    let Some(j) = next(i + 1) else {
        return false;
    };
    match b[j] {
        b':' | b'=' => true,
        b')' => next(j + 1).is_some_and(|k| {
            b[k] == b'{' || b[k] == b':' || (b[k] == b'=' && b.get(k + 1) == Some(&b'>'))
        }),
        _ => false,
    }
}

/// `'a` (a lifetime or label), not `'a'` (a char).
fn is_lifetime(b: &[u8], i: usize) -> bool {
    b.get(i + 1)
        .is_some_and(|&c| c.is_ascii_alphabetic() || c == b'_')
        && b.get(i + 2) != Some(&b'\'')
}

fn skip_line(b: &[u8], i: usize) -> usize {
    b[i..]
        .iter()
        .position(|&c| c == b'\n')
        .map_or(b.len(), |n| i + n)
}

fn skip_block_comment(b: &[u8], i: usize) -> usize {
    let body = i + 2;
    b.get(body..)
        .and_then(|rest| rest.windows(2).position(|w| w == b"*/"))
        .map_or(b.len(), |n| body + n + 2)
}

/// The index after the string opening at `start` (a quote, backquote or triple quote);
/// a one-line string also ends at the line's end.
fn skip_string(b: &[u8], start: usize) -> usize {
    let q = b[start];
    if q != b'`' && b.get(start + 1) == Some(&q) && b.get(start + 2) == Some(&q) {
        let body = start + 3;
        let close = [q, q, q];
        return b
            .get(body..)
            .and_then(|rest| rest.windows(3).position(|w| w == close))
            .map_or(b.len(), |n| body + n + 3);
    }
    let mut i = start + 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            c if c == q => return i + 1,
            b'\n' if q != b'`' => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

/// The largest Go `const (` / `var (` block: its non-blank, non-comment lines.
fn go_blocks(text: &str) -> Option<usize> {
    let mut best = None;
    let mut open: Option<usize> = None;
    for line in text.lines() {
        let t = line.split("//").next().unwrap_or("").trim();
        match open {
            None if t == "const (" || t == "var (" => open = Some(0),
            None => {}
            Some(n) if t.starts_with(')') => {
                best = best.max(Some(n));
                open = None;
            }
            Some(n) if !t.is_empty() && !t.starts_with("/*") => open = Some(n + 1),
            Some(_) => {}
        }
    }
    best
}

/// The members of the largest Python `class X(Enum):` (`IntEnum`, `StrEnum`, `Flag`…).
fn python_enums(text: &str) -> Option<usize> {
    let lines: Vec<&str> = text.lines().collect();
    lines
        .iter()
        .enumerate()
        .filter(|(_, l)| is_enum_class(l))
        .map(|(i, l)| enum_members(&lines[i + 1..], indent(l)))
        .max()
}

fn is_enum_class(line: &str) -> bool {
    let Some(rest) = line.trim_start().strip_prefix("class ") else {
        return false;
    };
    let Some((_, bases)) = rest.split_once('(') else {
        return false;
    };
    let bases = bases.split(')').next().unwrap_or("");
    bases.split(',').any(|base| {
        let name = base.trim().rsplit('.').next().unwrap_or("");
        matches!(name, "Enum" | "IntEnum" | "StrEnum" | "Flag" | "IntFlag")
    })
}

/// `NAME = value` lines at the indentation of the class body that follows.
fn enum_members(body: &[&str], class_indent: usize) -> usize {
    let mut body_indent = None;
    let mut n = 0;
    for line in body {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let ind = indent(line);
        if ind <= class_indent {
            break;
        }
        if ind == *body_indent.get_or_insert(ind) && is_member(t) {
            n += 1;
        }
    }
    n
}

fn is_member(t: &str) -> bool {
    let Some((name, value)) = t.split_once('=') else {
        return false;
    };
    let name = name.trim();
    !value.starts_with('=')
        && name.starts_with(|c: char| c.is_alphabetic())
        && name.chars().all(|c| c.is_alphanumeric() || c == '_')
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// Occurrences of the most frequent capitalized element tag (`<FlavorCard`, `<li`
/// excluded: only component-like repeats count).
fn repeated_elements(text: &str) -> usize {
    let mut counts = HashMap::<&str, usize>::new();
    let mut rest = text;
    while let Some(i) = rest.find('<') {
        rest = &rest[i + 1..];
        let name_len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '_'))
            .unwrap_or(rest.len());
        let name = &rest[..name_len];
        if name.starts_with(|c: char| c.is_ascii_uppercase()) {
            *counts.entry(name).or_default() += 1;
        }
    }
    counts.into_values().max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_in_code_and_json() {
        let ts = "export const flavors = [\n  { name: 'Volt', tags: ['a', 'b', 'c'] },\n  { name: \"Chrome, Ice\" },\n  // { name: 'commented' },\n  { name: `x` },\n];\n";
        assert_eq!(count_items("src/flavors.ts", ts), 3);
        assert_eq!(count_items("f.json", "{\"items\": [1, 2, 3, 4]}"), 4);
        assert_eq!(count_items("f.json", "[]"), 0);
        assert_eq!(
            count_items("a.rs", "let v = vec![1, 2];\nlet w = [[1, 2, 3], [4]];"),
            3
        );
    }

    #[test]
    fn markdown_lists_and_repeated_elements() {
        assert_eq!(
            count_items("notes.md", "# x\n- a\n- b\n  * c\n1. d\nnot 2. e\n"),
            4
        );
        let jsx =
            "<Grid>\n<FlavorCard a />\n<FlavorCard b />\n<FlavorCard c />\n<Other />\n</Grid>";
        assert_eq!(count_items("Grid.tsx", jsx), 3);
    }

    fn items(count: usize, unit: Unit) -> Measure {
        Measure::Items { count, unit }
    }

    fn m(path: &str, text: &str) -> Measure {
        measure(path, text.as_bytes())
    }

    #[test]
    fn units_say_their_plural() {
        assert_eq!(Unit::Lines.plural(), "lines");
        assert_eq!(Unit::ListItems.plural(), "list items");
        assert_eq!(Unit::TableRows.plural(), "table rows");
        assert_eq!(Unit::Rows.plural(), "rows");
        assert_eq!(Unit::Elements.plural(), "elements");
        assert_eq!(Unit::Entries.plural(), "entries");
        assert_eq!(Unit::Tags.plural(), "elements");
    }

    #[test]
    fn plain_text_is_one_entry_per_line() {
        let fruits = "apple\nbanana\ncherry\n";
        assert_eq!(m("items.txt", fruits), items(3, Unit::Lines));
        assert_eq!(m("items.txt", ""), items(0, Unit::Lines));
        assert_eq!(m("items.txt", "\n  \n"), items(0, Unit::Lines));
        assert_eq!(count_items("items.txt", fruits), 3);
        for path in [
            "fruits",
            "a.list",
            "a.lst",
            "CODEOWNERS",
            ".gitignore",
            "x.ini",
        ] {
            assert_eq!(m(path, fruits), items(3, Unit::Lines), "{path}");
        }
        let owners = "# owners\n*.rs   @rust-team\n\n  # indented comment\n/docs/ @docs\r\n";
        assert_eq!(m("CODEOWNERS", owners), items(2, Unit::Lines));
        let commands = "# command name                        category [category]\ngit-add                 mainporcelain           worktree\ngit-am                  mainporcelain\n";
        assert_eq!(m("command-list.txt", commands), items(2, Unit::Lines));
    }

    #[test]
    fn binary_content_is_not_counted() {
        assert_eq!(
            measure("logo.png", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"),
            Measure::Binary
        );
        assert_eq!(measure("items.txt", b"apple\n\xff\xfe\n"), Measure::Binary);
        assert_eq!(measure("a.json", b"[1, 2]\0"), Measure::Binary);
        let mut late_nul = vec![b'a'; 9000];
        late_nul.push(0);
        assert_eq!(measure("a.txt", &late_nul), items(1, Unit::Lines));
        assert_eq!(count_items("a.txt", "a\0b"), 0);
        assert_eq!(
            measure("a.txt", "\u{feff}a\nb\n".as_bytes()),
            items(2, Unit::Lines)
        );
    }

    #[test]
    fn markdown_lists() {
        let md = "# Fruits\n\n- apple\n* banana\n+ cherry\n  - nested\n1. one\n2) two\n10. ten\n\nnot - a list\n-not either\n---\n* * *\n";
        assert_eq!(m("notes.md", md), items(7, Unit::ListItems));
        assert_eq!(m("notes.markdown", "- a\n- b\n"), items(2, Unit::ListItems));
        assert_eq!(m("README.md", "# Title\n\nJust prose.\n"), Measure::NoList);
        assert_eq!(m("README.md", ""), Measure::NoList);
    }

    #[test]
    fn markdown_skips_fenced_code() {
        let md = "- a\n```sh\n- not an item\n| x | y |\n|---|---|\n| 1 | 2 |\n```\n~~~~\n- nor this\n~~~\n- still fenced\n~~~~\n- b\n";
        assert_eq!(m("a.md", md), items(2, Unit::ListItems));
        assert_eq!(m("a.md", "```\n- a\n- b\n"), Measure::NoList);
    }

    #[test]
    fn markdown_tables() {
        let md = "# Fruits\n\n| name | color |\n|------|:-----:|\n| apple | red |\n| banana | yellow |\n| cherry | red |\n\n- note\n\n| a |\n| - |\n| 1 |\n";
        assert_eq!(m("a.md", md), items(3, Unit::TableRows));
        assert_eq!(
            m("a.md", "a | b\n--- | ---\n1 | 2\n3 | 4\n"),
            items(2, Unit::TableRows)
        );
        assert_eq!(
            m("a.md", "| a | b |\n|---|---|\n"),
            items(0, Unit::TableRows)
        );
        // No separator: not a table.
        assert_eq!(
            m("a.md", "| a | b |\n| 1 | 2 |\n| 3 | 4 |\n"),
            Measure::NoList
        );
        // More list items than rows: the list wins.
        let both = "| a |\n|---|\n| 1 |\n\n- x\n- y\n";
        assert_eq!(m("a.md", both), items(2, Unit::ListItems));
    }

    #[test]
    fn csv_and_tsv_rows() {
        let csv = "name,color\napple,red\n\nbanana,yellow\n\"cherry, sour\",\"dark\nred\"\n";
        assert_eq!(m("fruits.csv", csv), items(3, Unit::Rows));
        assert_eq!(m("fruits.csv", "name,color\n"), items(0, Unit::Rows));
        assert_eq!(m("fruits.csv", ""), items(0, Unit::Rows));
        assert_eq!(m("ragged.csv", "a,b\n1\n2,3,4\n"), items(2, Unit::Rows));
        let tsv = "name\tcolor\napple\tred\nbanana, ripe\tyellow\n";
        assert_eq!(m("fruits.tsv", tsv), items(2, Unit::Rows));
        assert_eq!(m("FRUITS.CSV", "h\n1\n2\n"), items(2, Unit::Rows));
    }

    #[test]
    fn json_largest_collection() {
        assert_eq!(m("a.json", "[1, 2, 3]"), items(3, Unit::Elements));
        assert_eq!(m("a.json", "{}"), items(0, Unit::Entries));
        assert_eq!(m("a.json", "[]"), items(0, Unit::Elements));
        assert_eq!(
            m("a.json", "{\"fruits\": [\"apple\", \"banana\"]}"),
            items(2, Unit::Elements)
        );
        assert_eq!(
            m("a.json", "{\"a\": 1, \"b\": 2, \"c\": [1, 2]}"),
            items(3, Unit::Entries)
        );
        let nested = "{\"name\": \"x\", \"deps\": {\"a\": \"1\", \"b\": \"2\", \"c\": \"3\"}}";
        assert_eq!(m("package.json", nested), items(3, Unit::Entries));
        assert_eq!(m("a.json", "\"just a string\""), Measure::NoList);
        assert_eq!(m("a.json", "  \n"), items(0, Unit::Elements));
    }

    #[test]
    fn json_records_in_an_array_do_not_compete() {
        // Two records of four fields, one with three tags: the array's 2 is the count.
        let records = r#"[{"id": 1, "name": "Volt", "color": "red", "tags": ["a", "b", "c"]},
                          {"id": 2, "name": "Chrome", "color": "grey", "tags": []}]"#;
        assert_eq!(m("flavors.json", records), items(2, Unit::Elements));
        let wrapped = format!("{{\"flavors\": {records}}}");
        assert_eq!(m("flavors.json", &wrapped), items(2, Unit::Elements));
    }

    #[test]
    fn invalid_json_is_unparsable_with_its_position() {
        assert_eq!(
            m("a.json", "{\"items\": [1, 2, 3, 4,]}"),
            Measure::Unparsable("line 1, column 23: trailing comma".into())
        );
        assert_eq!(
            m("a.json", "[\n  1,\n  2\n  3\n]"),
            Measure::Unparsable("line 4, column 3: expected `,` or `]`".into())
        );
        assert_eq!(count_items("a.json", "[1, 2"), 0);
    }

    #[test]
    fn yaml_largest_collection() {
        let fruits = "- apple\n- banana\n- cherry\n";
        assert_eq!(m("fruits.yaml", fruits), items(3, Unit::Elements));
        assert_eq!(m("fruits.yml", fruits), items(3, Unit::Elements));
        let config = "name: x\nfruits:\n  - apple\n  - banana\n";
        assert_eq!(m("c.yaml", config), items(2, Unit::Elements));
        let map = "a: 1\nb: 2\nc: 3\n1: one\n";
        assert_eq!(m("c.yaml", map), items(4, Unit::Entries));
        let records =
            "- name: Volt\n  color: red\n  price: 3\n- name: Chrome\n  color: grey\n  price: 4\n";
        assert_eq!(m("flavors.yaml", records), items(2, Unit::Elements));
        assert_eq!(m("c.yaml", "just a scalar\n"), Measure::NoList);
        assert_eq!(m("c.yaml", ""), items(0, Unit::Elements));
        assert_eq!(m("c.yaml", "# only a comment\n"), items(0, Unit::Elements));
        assert_eq!(m("c.yaml", "[]"), items(0, Unit::Elements));
        let tagged = "base: &b\n  x: 1\nother:\n  <<: *b\n  y: !Ref z\n  w: !!str 3\n";
        assert_eq!(m("t.yaml", tagged), items(3, Unit::Entries));
    }

    #[test]
    fn yaml_documents_all_count() {
        let docs = "- a\n---\n- b\n- c\n- d\n---\nx: 1\n";
        assert_eq!(m("multi.yaml", docs), items(3, Unit::Elements));
    }

    #[test]
    fn invalid_yaml_is_unparsable_with_its_line() {
        let r = m("bad.yaml", "a: 1\nb: [1, 2\nc: 3\n");
        let Measure::Unparsable(msg) = r else {
            panic!("expected Unparsable: {r:?}");
        };
        assert_eq!(msg, "line 3, column 2: illegal placement of ':' indicator");
        let r = m("bad.yml", "fruits:\n  - apple\n - banana\n");
        let Measure::Unparsable(msg) = r else {
            panic!("expected Unparsable: {r:?}");
        };
        assert!(msg.starts_with("line 3, column 2: "), "{msg}");
    }

    #[test]
    fn toml_counts_by_lines() {
        let fruits = "title = \"x\"\n\n[[fruit]]\nname = \"apple\"\ncolor = \"red\"\nprice = 1\n\n[fruit.physical]\nshape = \"round\"\nsize = 1\nweight = 2\nkind = 3\n\n[[fruit]]\nname = \"banana\"\ncolor = \"yellow\"\nprice = 2\n";
        assert_eq!(m("fruits.toml", fruits), items(2, Unit::Elements));
        let cargo = "[package]\nname = \"x\"\nversion = \"1\"\n\n[dependencies]\na = \"1\"\nb = { version = \"1\", features = [\"x\"] }\nc = \"1\"\n# d = \"1\"\n";
        assert_eq!(m("Cargo.toml", cargo), items(3, Unit::Entries));
        let array = "# [not, a, table]\nfruits = [\n  \"apple\", # a comment, with commas\n  \"banana\",\n  \"cherry\",\n  \"[x]\",\n]\nother = 1\n";
        assert_eq!(m("f.toml", array), items(4, Unit::Elements));
        let strings = "a = \"\"\"\nb = 1\nc = 2\nd = 3\n\"\"\"\ne = 'x # y'\n";
        assert_eq!(m("f.toml", strings), items(2, Unit::Entries));
        assert_eq!(m("f.toml", ""), items(0, Unit::Entries));
        assert_eq!(m("f.toml", "[[[[ not = toml"), items(0, Unit::Entries));
    }

    #[test]
    fn code_arrays_skip_indexes_types_and_comments() {
        let py = "import os\n\n\ndef first(xs):\n    return xs[0]\n\n\ndef name(d):\n    # a [comment, with, items]\n    return d[\"name\"]\n";
        assert_eq!(m("util.py", py), Measure::NoList);
        assert_eq!(
            m("a.py", "xs = [n // 2, m]  # two\n"),
            items(2, Unit::Elements)
        );
        let doc = "def f():\n    \"\"\"Return [a, b, c, d] for 'x'.\"\"\"\n    return [1, 2]\n";
        assert_eq!(m("f.py", doc), items(2, Unit::Elements));
        let rs = "#[derive(Debug, Clone, Copy)]\nstruct S<'a> { x: &'a str }\nfn f(v: &[u8]) -> u8 { v[0] }\nconst A: [u8; 3] = [1, 2, 3];\n";
        assert_eq!(m("a.rs", rs), items(3, Unit::Elements));
        let go = "var fruits = []string{\"apple\", \"banana\"}\nfunc f(xs []string) int { return len(xs) }\n";
        assert_eq!(m("a.go", go), items(2, Unit::Entries));
        assert_eq!(
            m("a.ts", "const xs: string[] = [];\n"),
            items(0, Unit::Elements)
        );
    }

    #[test]
    fn code_object_literals_count_entries() {
        let ts = "const prices = {\n  apple: 1,\n  banana: 2,\n  cherry: { small: 1, large: 2 },\n};\nexport default { a, b };\n";
        assert_eq!(m("prices.ts", ts), items(3, Unit::Entries));
        let py = "PRICES = {\n    \"apple\": 1,\n    \"banana\": 2,\n}\n\ndef f():\n    return {\"a\": 1}\n";
        assert_eq!(m("p.py", py), items(2, Unit::Entries));
        let call = "setState({ a: 1, b: 2, c: 3 });\n";
        assert_eq!(m("a.js", call), items(3, Unit::Entries));
        let c = "static const int primes[] = {2, 3, 5, 7};\n";
        assert_eq!(m("a.c", c), items(4, Unit::Entries));
    }

    #[test]
    fn function_bodies_and_parameters_do_not_count() {
        let js = "function f(a, b) {\n  const x = g(a, b);\n  return x;\n}\nconst h = () => {\n  a(1, 2, 3)\n  b(4, 5)\n};\n";
        assert_eq!(m("a.js", js), Measure::NoList);
        let tsx = "export function Card({ name, color, price, tagline }: Props) {\n  return <div>{name}</div>;\n}\nconst Row = ({ a, b, c }) => <p />;\n";
        assert_eq!(m("Card.tsx", tsx), Measure::NoList);
        let rs = "fn main() {\n    let (a, b) = (1, 2);\n    println!(\"{a}, {b}\");\n}\n";
        assert_eq!(m("main.rs", rs), Measure::NoList);
        let go = "func f(a, b int) {\n\tx, y := a, b\n\tg(x, y)\n}\n";
        assert_eq!(m("f.go", go), Measure::NoList);
    }

    #[test]
    fn enums_count_variants() {
        let rs = "/// Fruits.\n#[derive(Debug)]\npub enum Fruit {\n    Apple,\n    /// Yellow.\n    Banana { ripe: bool, size: u8 },\n    Cherry(u8, u8),\n}\n";
        assert_eq!(m("fruit.rs", rs), items(3, Unit::Entries));
        let ts = "export enum Fruit { Apple = 'apple', Banana = 'banana', }\n";
        assert_eq!(m("fruit.ts", ts), items(2, Unit::Entries));
        let java = "public enum Fruit {\n    APPLE(1), BANANA(2), CHERRY(3);\n    private final int n;\n    Fruit(int n) { this.n = n; }\n}\n";
        assert_eq!(m("Fruit.java", java), items(3, Unit::Entries));
        let cs = "enum Fruit\n{\n    Apple,\n    Banana\n}\n";
        assert_eq!(m("Fruit.cs", cs), items(2, Unit::Entries));
        let c = "enum fruit { APPLE, BANANA, CHERRY, DATE };\n";
        assert_eq!(m("fruit.h", c), items(4, Unit::Entries));
        let swift = "enum Fruit {\n    case apple\n    case banana, cherry\n    func f() -> Int { return 1 }\n}\n";
        assert_eq!(m("Fruit.swift", swift), items(3, Unit::Entries));
        let kt = "enum class Fruit(val n: Int) { APPLE(1), BANANA(2); fun f() = n }\n";
        assert_eq!(m("Fruit.kt", kt), items(2, Unit::Entries));
    }

    #[test]
    fn go_const_and_var_blocks() {
        let go = "package fruit\n\nconst (\n\tApple Fruit = iota // the first\n\tBanana\n\n\t// comment\n\tCherry\n)\n\nvar (\n\ta = 1\n)\n";
        assert_eq!(m("fruit.go", go), items(3, Unit::Entries));
    }

    #[test]
    fn python_enum_members() {
        let py = "from enum import Enum, IntEnum\n\n\nclass Fruit(Enum):\n    \"\"\"Fruits.\"\"\"\n\n    APPLE = 1\n    BANANA = 2\n    CHERRY = 3\n    _ignore_ = []\n\n    def label(self):\n        x = 1\n        return self.name\n\n\nclass Size(enum.IntEnum):\n    S = 1\n\nclass Plain:\n    A = 1\n    B = 2\n    C = 3\n    D = 4\n";
        assert_eq!(m("fruit.py", py), items(3, Unit::Entries));
    }

    #[test]
    fn python_tuples_and_list_calls() {
        assert_eq!(
            m("a.py", "FRUITS = (\"a\", \"b\", \"c\")\n"),
            items(3, Unit::Elements)
        );
        assert_eq!(m("a.py", "if x == (1, 2):\n    pass\n"), Measure::NoList);
        let kt = "val fruits = listOf(\"apple\", \"banana\")\nval m = mapOf(1 to 2)\n";
        assert_eq!(m("a.kt", kt), items(2, Unit::Elements));
        let java = "List<String> f = List.of(\"a\", \"b\", \"c\");\n";
        assert_eq!(m("A.java", java), items(3, Unit::Elements));
        let php = "<?php\n$fruits = array('apple', 'banana');\n";
        assert_eq!(m("a.php", php), items(2, Unit::Elements));
        let scala = "val fruits = List(\"a\", \"b\", \"c\")\n";
        assert_eq!(m("a.scala", scala), items(3, Unit::Elements));
        let java = "int[] xs = new int[] {1, 2, 3, 4};\n";
        assert_eq!(m("A.java", java), items(4, Unit::Entries));
    }

    #[test]
    fn a_long_minified_line_is_linear() {
        let line = "x={a:1,b:[2,3]};".repeat(100_000);
        let start = std::time::Instant::now();
        assert_eq!(m("app.min.js", &line), items(2, Unit::Elements));
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn repeated_tags_still_count() {
        let jsx = "export const Grid = () => (\n  <Grid>\n    <FlavorCard a />\n    <FlavorCard b />\n  </Grid>\n);\n";
        assert_eq!(m("Grid.jsx", jsx), items(2, Unit::Tags));
    }

    #[test]
    fn code_never_counts_fewer_than_the_old_array_rule() {
        let ts = "export const flavors = [\n  { name: \"Volt\" },\n  { name: \"Chrome\" },\n];\n";
        assert_eq!(m("src/flavors.ts", ts), items(2, Unit::Elements));
        assert_eq!(m("a.js", "x = [1, 2, 3,]"), items(3, Unit::Elements));
        assert_eq!(m("a.js", "f([1, 2, 3])"), items(3, Unit::Elements));
        assert_eq!(
            m("a.py", "xs = [\n    1,\n    2,\n]\n"),
            items(2, Unit::Elements)
        );
    }

    const EXTENSIONS: &[&str] = &[
        "a.txt", "a", "a.md", "a.csv", "a.tsv", "a.json", "a.yaml", "a.yml", "a.toml", "a.rs",
        "a.ts", "a.tsx", "a.py", "a.go", "a.java", "a.swift", "a.c", "a.rb", "a.kt", "a.php",
    ];

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
        /// Any bytes and any text, under every extension, measure without panicking.
        #[test]
        fn measure_never_panics(
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
            text in "\\PC{0,200}",
            code in "[\\[\\]{}()\"'`,;:=#|<>/*~+!%. \n\ta-zA-Z0-9_-]{0,200}",
        ) {
            for path in EXTENSIONS {
                let _ = measure(path, &bytes);
                let _ = measure(path, text.as_bytes());
                let _ = measure(path, code.as_bytes());
                let _ = count_items(path, &code);
            }
        }
    }
}
