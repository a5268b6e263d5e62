//! How many tests a validation ran, read from the summary lines well-known test runners
//! print: cargo test and nextest, pytest and unittest, `go test -v` and gotestsum, jest,
//! vitest, node's runner (TAP and spec), mocha, RSpec, minitest and test-unit, PHPUnit,
//! prove, bats and ExUnit, Maven Surefire, `dotnet test`, and a plain `N passed, N failed`.
//!
//! ANSI colour codes are stripped and `\r` ends a line as `\n` does. Every summary a runner
//! prints is summed (a cargo workspace prints one `test result:` per test binary), but only
//! its summaries: per-file lines that a total repeats are not read (vitest's `Test Files`,
//! Surefire's per-class `Tests run: …, Time elapsed`), and `--- PASS:` lines are not read
//! when gotestsum's `DONE` line counts them. `ran` is passed + failed; skipped, ignored,
//! pending, todo and xfailed tests are skipped; errors count as failed.

use serde::{Deserialize, Serialize};

/// The tests a validation's output reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Tally {
    pub ran: u64,
    pub passed: u64,
    pub failed: u64,
    pub skipped: u64,
}

impl Tally {
    fn new(passed: u64, failed: u64, skipped: u64) -> Tally {
        Tally {
            ran: passed.saturating_add(failed),
            passed,
            failed,
            skipped,
        }
    }

    /// From a total that includes the failed and skipped tests.
    fn of_total(total: u64, failed: u64, skipped: u64) -> Tally {
        let passed = total.saturating_sub(failed).saturating_sub(skipped);
        Tally::new(passed, failed, skipped)
    }

    fn plus(self, other: Tally) -> Tally {
        Tally::new(
            self.passed.saturating_add(other.passed),
            self.failed.saturating_add(other.failed),
            self.skipped.saturating_add(other.skipped),
        )
    }
}

/// The tests the well-known runners' summary lines in `output` report, summed over every
/// summary found (a cargo workspace prints one `test result:` per test binary); `None`
/// when no known summary line is there (the harness then cannot count, and says nothing).
pub fn tally(output: &str) -> Option<Tally> {
    let text = strip_ansi(output);
    let lines = lines(&text);
    RUNNERS
        .iter()
        .filter_map(|(_, parse)| parse(&lines))
        .reduce(Tally::plus)
}

/// The runner names whose summaries were found, for messages ("cargo test", "pytest", …).
pub fn runners(output: &str) -> Vec<&'static str> {
    let text = strip_ansi(output);
    let lines = lines(&text);
    RUNNERS
        .iter()
        .filter(|(_, parse)| parse(&lines).is_some())
        .map(|(name, _)| *name)
        .collect()
}

type Parse = fn(&[&str]) -> Option<Tally>;

/// Each runner with the parser of its summaries, over the trimmed lines of the output.
const RUNNERS: &[(&str, Parse)] = &[
    ("cargo test", |l| each(l, cargo)),
    ("cargo nextest", |l| each(l, nextest)),
    ("pytest", |l| each(l, pytest)),
    ("unittest", unittest),
    ("go test", go_verbose),
    ("gotestsum", |l| each(l, gotestsum)),
    ("jest", |l| each(l, jest)),
    ("vitest", |l| each(l, vitest)),
    ("node test runner", node),
    ("mocha", mocha),
    ("rspec", |l| each(l, rspec)),
    ("minitest", |l| each(l, minitest)),
    ("phpunit", |l| each(l, phpunit)),
    ("prove", prove),
    ("bats", |l| each(l, bats)),
    ("maven surefire", |l| each(l, surefire)),
    ("dotnet test", dotnet),
    ("plain summary", |l| each(l, plain)),
];

/// `text` without ANSI escape sequences (CSI, OSC and two-byte escapes).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('[') => {
                for c in chars.by_ref() {
                    if ('\u{40}'..='\u{7e}').contains(&c) {
                        break;
                    }
                }
            }
            Some(']') => {
                while let Some(c) = chars.next() {
                    if c == '\u{7}' {
                        break;
                    }
                    if c == '\u{1b}' {
                        chars.next_if_eq(&'\\');
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// The trimmed lines of `text`, `\r` ending a line as `\n` does.
fn lines(text: &str) -> Vec<&str> {
    text.split(['\n', '\r']).map(str::trim).collect()
}

/// The sum of `parse` over the lines it recognises.
fn each(lines: &[&str], parse: fn(&str) -> Option<Tally>) -> Option<Tally> {
    lines.iter().filter_map(|l| parse(l)).reduce(Tally::plus)
}

fn add(sum: Option<Tally>, t: Tally) -> Option<Tally> {
    Some(sum.map_or(t, |s| s.plus(t)))
}

/// `"5 passed"` → `(5, "passed")`; the word is what follows the number, trimmed.
fn count_word(item: &str) -> Option<(u64, &str)> {
    let (n, word) = item.trim().split_once(' ')?;
    let word = word.trim();
    (!word.is_empty()).then_some(())?;
    Some((n.parse().ok()?, word))
}

/// `"Failures: 1"` → `("Failures", 1)`: the first word of the value is the number.
fn key_count(item: &str, sep: char) -> Option<(&str, u64)> {
    let (key, value) = item.split_once(sep)?;
    let n = value.split_whitespace().next()?.parse().ok()?;
    Some((key.trim(), n))
}

/// `text` without its parenthesised parts.
fn without_parens(text: &str) -> String {
    let mut depth = 0usize;
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// A counted item's word, singular or plural.
fn is(word: &str, singular: &str) -> bool {
    word.strip_prefix(singular)
        .is_some_and(|rest| rest.is_empty() || rest == "s")
}

/// Failed, passed and skipped counts, for the summaries that list them by word.
#[derive(Default)]
struct Counts {
    passed: u64,
    failed: u64,
    skipped: u64,
}

impl Counts {
    fn tally(&self) -> Tally {
        Tally::new(self.passed, self.failed, self.skipped)
    }
}

fn bump(field: &mut u64, n: u64) {
    *field = field.saturating_add(n);
}

/// `test result: ok. 5 passed; 0 failed; 2 ignored; 0 measured; 0 filtered out; …`
fn cargo(line: &str) -> Option<Tally> {
    let rest = line.strip_prefix("test result:")?.trim_start();
    let rest = rest
        .strip_prefix("ok.")
        .or_else(|| rest.strip_prefix("FAILED."))?;
    let (mut passed, mut failed, mut ignored) = (None, None, 0);
    for (n, word) in rest.split(';').filter_map(count_word) {
        match word {
            "passed" => passed = Some(n),
            "failed" => failed = Some(n),
            "ignored" => ignored = n,
            _ => {}
        }
    }
    Some(Tally::new(passed?, failed?, ignored))
}

/// `Summary [   0.012s] 5 tests run: 4 passed (1 slow), 1 failed, 1 skipped`
fn nextest(line: &str) -> Option<Tally> {
    let rest = line
        .strip_prefix("Summary")?
        .trim_start()
        .strip_prefix('[')?;
    let (_, rest) = rest.split_once(']')?;
    let (head, counts) = rest.split_once(" run:")?;
    let head = head.trim();
    if !(head.ends_with(" tests") || head.ends_with(" test")) {
        return None;
    }
    let mut c = Counts::default();
    for item in without_parens(counts).split(',') {
        let (n, word) = count_word(item)?;
        match word {
            "passed" => bump(&mut c.passed, n),
            "skipped" => bump(&mut c.skipped, n),
            w if w.ends_with("failed") || w == "timed out" => bump(&mut c.failed, n),
            _ => {}
        }
    }
    Some(c.tally())
}

/// `===== 3 failed, 5 passed, 1 skipped, 2 deselected in 0.12s =====`, with or without the
/// bars; `no tests ran in 0.01s`.
fn pytest(line: &str) -> Option<Tally> {
    let line = line.trim_matches(|c: char| c == '=' || c.is_whitespace());
    let (counts, time) = line.rsplit_once(" in ")?;
    let secs = time.split_whitespace().next()?;
    if !secs.starts_with(|c: char| c.is_ascii_digit()) || !secs.ends_with('s') {
        return None;
    }
    let mut c = Counts::default();
    let mut known = false;
    for item in counts.split(", ") {
        if item.trim() == "no tests ran" {
            known = true;
            continue;
        }
        let (n, word) = count_word(item)?;
        match word {
            "passed" | "xpassed" => bump(&mut c.passed, n),
            "failed" | "error" | "errors" => bump(&mut c.failed, n),
            "skipped" | "xfailed" => bump(&mut c.skipped, n),
            w if is(w, "deselected") || is(w, "warning") || is(w, "rerun") => {}
            _ => continue,
        }
        known = true;
    }
    known.then(|| c.tally())
}

/// `Ran 5 tests in 0.001s`, then `OK`, `OK (skipped=2)` or
/// `FAILED (failures=1, errors=1, skipped=2)` within the next few lines.
fn unittest(lines: &[&str]) -> Option<Tally> {
    let mut sum = None;
    for (i, line) in lines.iter().enumerate() {
        let Some(total) = unittest_ran(line) else {
            continue;
        };
        let rest = lines.get(i + 1..).unwrap_or_default();
        let status = rest
            .iter()
            .filter(|l| !l.is_empty())
            .take(3)
            .find_map(|l| unittest_status(l));
        let (failed, skipped) = status.unwrap_or((0, 0));
        sum = add(sum, Tally::of_total(total, failed, skipped));
    }
    sum
}

fn unittest_ran(line: &str) -> Option<u64> {
    let (n, rest) = line.strip_prefix("Ran ")?.split_once(' ')?;
    let (word, _) = rest.split_once(" in ")?;
    is(word, "test").then_some(())?;
    n.parse().ok()
}

/// `OK (skipped=2)` → `(0, 2)`: the failed and skipped counts of a unittest status line.
fn unittest_status(line: &str) -> Option<(u64, u64)> {
    let rest = line
        .strip_prefix("OK")
        .or_else(|| line.strip_prefix("FAILED"))?
        .trim();
    if rest.is_empty() {
        return Some((0, 0));
    }
    let inner = rest.strip_prefix('(')?.strip_suffix(')')?;
    let (mut failed, mut skipped) = (0u64, 0u64);
    for item in inner.split(',') {
        let (key, n) = key_count(item, '=')?;
        match key {
            "failures" | "errors" | "unexpected successes" => bump(&mut failed, n),
            "skipped" | "expected failures" => bump(&mut skipped, n),
            _ => {}
        }
    }
    Some((failed, skipped))
}

/// `go test -v`: one `--- PASS:` / `--- FAIL:` / `--- SKIP:` line per test and subtest,
/// unless gotestsum's `DONE` line already counts them.
fn go_verbose(lines: &[&str]) -> Option<Tally> {
    if lines.iter().any(|l| gotestsum(l).is_some()) {
        return None;
    }
    let mut c = Counts::default();
    let mut found = false;
    for line in lines {
        let field = if line.starts_with("--- PASS:") {
            &mut c.passed
        } else if line.starts_with("--- FAIL:") {
            &mut c.failed
        } else if line.starts_with("--- SKIP:") {
            &mut c.skipped
        } else {
            continue;
        };
        bump(field, 1);
        found = true;
    }
    found.then(|| c.tally())
}

/// `DONE 5 tests, 1 skipped, 2 failures in 0.5s` (`2 runs, ` first after reruns).
fn gotestsum(line: &str) -> Option<Tally> {
    let (counts, _) = line.strip_prefix("DONE ")?.rsplit_once(" in ")?;
    let (mut total, mut failed, mut skipped, mut errors) = (None, 0, 0, 0);
    for item in counts.split(", ") {
        let (n, word) = count_word(item)?;
        match word {
            w if is(w, "test") => total = Some(n),
            "skipped" => skipped = n,
            w if is(w, "failure") => failed = n,
            w if is(w, "error") => errors = n,
            w if is(w, "run") => {}
            _ => return None,
        }
    }
    let t = Tally::of_total(total?, failed, skipped);
    Some(Tally::new(
        t.passed,
        t.failed.saturating_add(errors),
        t.skipped,
    ))
}

/// `Tests:       1 failed, 1 skipped, 5 passed, 7 total`; `No tests found, exiting …`.
fn jest(line: &str) -> Option<Tally> {
    if line.starts_with("No tests found, exiting with code") {
        return Some(Tally::default());
    }
    let items: Vec<&str> = line.strip_prefix("Tests:")?.split(',').collect();
    let (last, counted) = items.split_last()?;
    if count_word(last)?.1 != "total" {
        return None;
    }
    let mut c = Counts::default();
    for item in counted {
        let (n, word) = count_word(item)?;
        match word {
            "passed" => bump(&mut c.passed, n),
            "failed" => bump(&mut c.failed, n),
            "skipped" | "todo" | "pending" => bump(&mut c.skipped, n),
            _ => {}
        }
    }
    Some(c.tally())
}

/// `Tests  2 failed | 3 passed | 1 skipped (6)`; `No test files found`. The
/// `Test Files  1 passed (1)` line counts files, not tests.
fn vitest(line: &str) -> Option<Tally> {
    if line.starts_with("No test files found") {
        return Some(Tally::default());
    }
    let rest = line.strip_prefix("Tests")?;
    if !rest.starts_with(char::is_whitespace) {
        return None;
    }
    let (counts, total) = rest.trim().rsplit_once('(')?;
    total.strip_suffix(')')?.trim().parse::<u64>().ok()?;
    let mut c = Counts::default();
    for item in counts.split('|') {
        let (n, word) = count_word(item)?;
        match word {
            "passed" => bump(&mut c.passed, n),
            "failed" => bump(&mut c.failed, n),
            "skipped" | "todo" => bump(&mut c.skipped, n),
            _ => {}
        }
    }
    Some(c.tally())
}

/// node's runner: `# tests 5`, then `# pass 4`, `# fail 1`, `# skipped 0`… (TAP), or the
/// same after `ℹ` (spec reporter); a block ends at the first other non-blank line.
fn node(lines: &[&str]) -> Option<Tally> {
    let mut sum = None;
    let mut block: Option<Counts> = None;
    for line in lines.iter().filter(|l| !l.is_empty()) {
        let Some((key, value)) = node_stat(line) else {
            if let Some(c) = block.take() {
                sum = add(sum, c.tally());
            }
            continue;
        };
        if key == "tests" {
            if let Some(c) = block.replace(Counts::default()) {
                sum = add(sum, c.tally());
            }
            continue;
        }
        let (Some(c), Ok(n)) = (block.as_mut(), value.parse::<u64>()) else {
            continue;
        };
        match key {
            "pass" => bump(&mut c.passed, n),
            "fail" | "cancelled" => bump(&mut c.failed, n),
            "skipped" | "todo" => bump(&mut c.skipped, n),
            _ => {}
        }
    }
    match block {
        Some(c) => add(sum, c.tally()),
        None => sum,
    }
}

/// `# pass 4` / `ℹ pass 4` → `("pass", "4")`.
fn node_stat(line: &str) -> Option<(&str, &str)> {
    let rest = line.strip_prefix('#').or_else(|| line.strip_prefix('ℹ'))?;
    let mut words = rest.split_whitespace();
    let (key, value) = (words.next()?, words.next()?);
    let is_key = key.chars().all(|c| c.is_ascii_lowercase() || c == '_');
    (is_key && words.next().is_none()).then_some((key, value))
}

/// mocha: `5 passing (10ms)`, then `1 pending` and `2 failing` on the lines after it.
fn mocha(lines: &[&str]) -> Option<Tally> {
    let mut sum = None;
    let mut block: Option<Counts> = None;
    for line in lines.iter().filter(|l| !l.is_empty()) {
        let stat = count_word(line).map(|(n, w)| (n, w.split(" (").next().unwrap_or(w)));
        match (stat, block.as_mut()) {
            (Some((n, "passing")), _) => {
                let old = block.replace(Counts {
                    passed: n,
                    ..Counts::default()
                });
                if let Some(c) = old {
                    sum = add(sum, c.tally());
                }
            }
            (Some((n, "pending")), Some(c)) => bump(&mut c.skipped, n),
            (Some((n, "failing")), Some(c)) => bump(&mut c.failed, n),
            _ => {
                if let Some(c) = block.take() {
                    sum = add(sum, c.tally());
                }
            }
        }
    }
    match block {
        Some(c) => add(sum, c.tally()),
        None => sum,
    }
}

/// RSpec: `5 examples, 1 failure, 2 pending`.
fn rspec(line: &str) -> Option<Tally> {
    let mut items = line.split(", ");
    let (total, word) = count_word(items.next()?)?;
    let (failed, word2) = count_word(items.next()?)?;
    if !is(word, "example") || !is(word2, "failure") {
        return None;
    }
    let pending = items
        .filter_map(count_word)
        .find(|(_, w)| *w == "pending")
        .map_or(0, |(n, _)| n);
    Some(Tally::of_total(total, failed, pending))
}

/// minitest: `5 runs, 9 assertions, 1 failures, 0 errors, 2 skips`; test-unit:
/// `5 tests, 9 assertions, 1 failures, 0 errors, 0 pendings, 0 omissions, 0 notifications`.
fn minitest(line: &str) -> Option<Tally> {
    let mut items = line.split(", ");
    let (total, word) = count_word(items.next()?)?;
    let (_, word2) = count_word(items.next()?)?;
    if !(is(word, "run") || is(word, "test")) || !is(word2, "assertion") {
        return None;
    }
    let (mut failed, mut skipped) = (0, 0);
    for item in items {
        let (n, w) = count_word(item)?;
        if is(w, "failure") || is(w, "error") {
            bump(&mut failed, n);
        } else if is(w, "skip") || is(w, "pending") || is(w, "omission") {
            bump(&mut skipped, n);
        }
    }
    Some(Tally::of_total(total, failed, skipped))
}

/// PHPUnit: `OK (5 tests, 10 assertions)`; `Tests: 5, Assertions: 10, Failures: 1, Skipped: 1.`;
/// `No tests executed!`.
fn phpunit(line: &str) -> Option<Tally> {
    if line.starts_with("No tests executed!") {
        return Some(Tally::default());
    }
    if let Some(inner) = line.strip_prefix("OK (").and_then(|r| r.strip_suffix(')')) {
        let (tests, rest) = inner.split_once(',')?;
        let (n, word) = count_word(tests)?;
        let asserted = count_word(rest).is_some_and(|(_, w)| is(w, "assertion"));
        return (is(word, "test") && asserted).then(|| Tally::new(n, 0, 0));
    }
    let mut items = line.strip_suffix('.').unwrap_or(line).split(',');
    let (key, total) = key_count(items.next()?, ':')?;
    let (key2, _) = key_count(items.next()?, ':')?;
    if key != "Tests" || key2 != "Assertions" {
        return None;
    }
    let (mut failed, mut skipped) = (0, 0);
    for item in items {
        match key_count(item, ':')? {
            ("Failures" | "Errors", n) => bump(&mut failed, n),
            ("Skipped" | "Incomplete", n) => bump(&mut skipped, n),
            _ => {}
        }
    }
    Some(Tally::of_total(total, failed, skipped))
}

/// prove: `Files=2, Tests=10, …` after the `Failed 1/5 subtests` lines of its failed files.
fn prove(lines: &[&str]) -> Option<Tally> {
    let mut sum = None;
    let mut failed = 0u64;
    for line in lines {
        if let Some(n) = prove_failed(line) {
            bump(&mut failed, n);
        } else if let Some(total) = prove_files(line) {
            sum = add(sum, Tally::of_total(total, failed.min(total), 0));
            failed = 0;
        }
    }
    sum
}

fn prove_files(line: &str) -> Option<u64> {
    let (_, rest) = line.strip_prefix("Files=")?.split_once(", Tests=")?;
    rest.split(',').next()?.trim().parse().ok()
}

/// `t/a.t .. Failed 1/5 subtests` → 1.
fn prove_failed(line: &str) -> Option<u64> {
    let rest = line.strip_suffix("subtests")?.trim_end();
    let (head, fraction) = rest.rsplit_once(' ')?;
    if !head.ends_with("Failed") {
        return None;
    }
    fraction.split_once('/')?.0.parse().ok()
}

/// bats: `5 tests, 1 failure, 1 skipped`; ExUnit: `1 doctest, 5 tests, 0 failures, 2 excluded`.
fn bats(line: &str) -> Option<Tally> {
    let (mut total, mut failed, mut skipped) = (0u64, 0u64, 0u64);
    let (mut tests, mut failures) = (false, false);
    for item in line.split(", ") {
        let (n, word) = count_word(item)?;
        tests |= is(word, "test");
        failures |= is(word, "failure");
        match word {
            w if is(w, "test") || is(w, "doctest") || w == "property" || w == "properties" => {
                bump(&mut total, n)
            }
            w if is(w, "failure") || w == "invalid" => bump(&mut failed, n),
            "skipped" | "excluded" | "not run" => bump(&mut skipped, n),
            _ => return None,
        }
    }
    (tests && failures).then(|| Tally::of_total(total, failed, skipped))
}

/// Maven Surefire's results: `[INFO] Tests run: 5, Failures: 1, Errors: 0, Skipped: 1`
/// exactly; the per-class lines (`…, Time elapsed: …`) repeat it and are not read.
fn surefire(line: &str) -> Option<Tally> {
    let line = match line.strip_prefix('[') {
        Some(rest) => rest.split_once(']')?.1.trim_start(),
        None => line,
    };
    let items: Vec<&str> = line.split(',').collect();
    let [run, failures, errors, skipped] = items[..] else {
        return None;
    };
    let keyed =
        |item: &str, want: &str| key_count(item, ':').and_then(|(k, n)| (k == want).then_some(n));
    let total = keyed(run, "Tests run")?;
    let f = keyed(failures, "Failures")?;
    let e = keyed(errors, "Errors")?;
    let s = keyed(skipped, "Skipped")?;
    Some(Tally::of_total(total, f.saturating_add(e), s))
}

/// `dotnet test`: `Test summary: total: 5, failed: 0, succeeded: 5, skipped: 0, …` (the
/// terminal logger) or else each `Passed!  - Failed: 0, Passed: 5, Skipped: 0, Total: 5, …`.
fn dotnet(lines: &[&str]) -> Option<Tally> {
    each(lines, |l| {
        dotnet_counts(l.strip_prefix("Test summary:")?, "succeeded")
    })
    .or_else(|| {
        each(lines, |l| {
            let rest = l
                .strip_prefix("Passed!")
                .or_else(|| l.strip_prefix("Failed!"))?;
            dotnet_counts(rest.trim_start().strip_prefix('-')?, "passed")
        })
    })
}

fn dotnet_counts(items: &str, passed_key: &str) -> Option<Tally> {
    let (mut c, mut found) = (Counts::default(), false);
    for (key, n) in items.split(',').filter_map(|i| key_count(i, ':')) {
        match key.to_ascii_lowercase().as_str() {
            "failed" => bump(&mut c.failed, n),
            "skipped" => bump(&mut c.skipped, n),
            k if k == passed_key => {
                bump(&mut c.passed, n);
                found = true;
            }
            _ => {}
        }
    }
    found.then(|| c.tally())
}

/// `N passed, N failed` alone on a line, then optionally `, N skipped`, and optionally one
/// word and a colon before (`tests: 5 passed, 0 failed`).
fn plain(line: &str) -> Option<Tally> {
    let rest = match line.split_once(':') {
        Some((word, rest)) if is_word(word) => rest,
        Some(_) => return None,
        None => line,
    };
    let items: Vec<(u64, &str)> = rest.split(',').map(count_word).collect::<Option<_>>()?;
    match items[..] {
        [(p, "passed"), (f, "failed")] => Some(Tally::new(p, f, 0)),
        [(p, "passed"), (f, "failed"), (s, "skipped")] => Some(Tally::new(p, f, s)),
        _ => None,
    }
}

fn is_word(text: &str) -> bool {
    !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ran: u64, passed: u64, failed: u64, skipped: u64) -> Option<Tally> {
        Some(Tally {
            ran,
            passed,
            failed,
            skipped,
        })
    }

    #[test]
    fn cargo_test_sums_every_binary() {
        let out = "   Compiling foo v0.1.0\n    Finished `test` profile\n     Running unittests src/lib.rs (target/debug/deps/foo-1)\n\nrunning 7 tests\ntest a ... ok\ntest b ... ignored\n\ntest result: ok. 5 passed; 0 failed; 2 ignored; 0 measured; 0 filtered out; finished in 0.00s\n\n     Running tests/it.rs (target/debug/deps/it-2)\n\nrunning 4 tests\ntest c ... FAILED\n\nfailures:\n\ntest result: FAILED. 3 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s\n\n   Doc-tests foo\n\nrunning 0 tests\n\ntest result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n";
        assert_eq!(tally(out), t(9, 8, 1, 2));
        assert_eq!(runners(out), vec!["cargo test"]);
    }

    #[test]
    fn cargo_test_with_no_tests_ran_none() {
        let out = "running 0 tests\n\ntest result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n";
        assert_eq!(tally(out), t(0, 0, 0, 0));
    }

    #[test]
    fn ansi_colours_and_carriage_returns_are_tolerated() {
        let out = "test result: \u{1b}[32mok\u{1b}[0m. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\r\n\u{1b}]8;;http://x\u{7}link\u{1b}]8;;\u{1b}\\\r\n";
        assert_eq!(tally(out), t(2, 2, 0, 0));
        let pytest = "\u{1b}[32m\u{1b}[1m5 passed\u{1b}[0m\u{1b}[32m in 0.01s\u{1b}[0m\r";
        assert_eq!(tally(pytest), t(5, 5, 0, 0));
    }

    #[test]
    fn nextest_summary() {
        let out = "    Starting 6 tests across 2 binaries (1 test skipped)\n        PASS [   0.004s] foo tests::a\n------------\n     Summary [   0.012s] 5 tests run: 5 passed, 1 skipped\n";
        assert_eq!(tally(out), t(5, 5, 0, 1));
        let failed = "     Summary [   0.020s] 5 tests run: 4 passed (1 slow, 1 flaky), 1 failed, 1 skipped\n        FAIL [   0.003s] foo tests::b\n";
        assert_eq!(tally(failed), t(5, 4, 1, 1));
        assert_eq!(runners(failed), vec!["cargo nextest"]);
        let one = "     Summary [   0.001s] 1 test run: 1 passed, 0 skipped";
        assert_eq!(tally(one), t(1, 1, 0, 0));
    }

    #[test]
    fn pytest_final_line() {
        let out = "============================= test session starts ==============================\nplatform linux -- Python 3.12.1, pytest-8.0.0\ncollected 12 items / 2 deselected / 10 selected\n\ntests/test_a.py ..F.s.x.FE                                               [100%]\n\n=========================== short test summary info ============================\nFAILED tests/test_a.py::test_b - assert 1 == 2\n===== 2 failed, 5 passed, 1 skipped, 2 deselected, 1 xfailed, 1 error in 0.12s =====\n";
        assert_eq!(tally(out), t(8, 5, 3, 2));
        assert_eq!(runners(out), vec!["pytest"]);
        assert_eq!(tally("5 passed in 0.01s\n"), t(5, 5, 0, 0));
        assert_eq!(
            tally("=== 3 passed, 2 warnings in 125.32s (0:02:05) ==="),
            t(3, 3, 0, 0)
        );
        assert_eq!(
            tally(
                "============================ no tests ran in 0.01s ============================="
            ),
            t(0, 0, 0, 0)
        );
        assert_eq!(tally("no tests ran in 0.01s"), t(0, 0, 0, 0));
        assert_eq!(tally("it was found in 5s"), None);
    }

    #[test]
    fn python_unittest() {
        let out = "..F.s\n======================================================================\nFAIL: test_b (test_m.T.test_b)\n----------------------------------------------------------------------\nRan 5 tests in 0.001s\n\nFAILED (failures=1, errors=1, skipped=2)\n";
        assert_eq!(tally(out), t(3, 1, 2, 2));
        let ok = "Ran 5 tests in 0.001s\n\nOK\n";
        assert_eq!(tally(ok), t(5, 5, 0, 0));
        let skipped = "Ran 1 test in 0.000s\n\nOK (skipped=1)\n";
        assert_eq!(tally(skipped), t(0, 0, 0, 1));
        assert_eq!(runners(ok), vec!["unittest"]);
    }

    #[test]
    fn go_test_verbose_counts_tests_and_subtests() {
        let out = "=== RUN   TestAdd\n--- PASS: TestAdd (0.00s)\n=== RUN   TestSub\n=== RUN   TestSub/neg\n    --- FAIL: TestSub/neg (0.00s)\n    --- PASS: TestSub/pos (0.00s)\n--- FAIL: TestSub (0.00s)\n=== RUN   TestSkip\n    x_test.go:9: not now\n--- SKIP: TestSkip (0.00s)\nFAIL\nFAIL\texample.com/m\t0.003s\n";
        assert_eq!(tally(out), t(4, 2, 2, 1));
        assert_eq!(runners(out), vec!["go test"]);
        assert_eq!(tally("ok  \texample.com/m\t0.01s\n"), None);
        assert_eq!(tally("?   \texample.com/m/cmd\t[no test files]\n"), None);
    }

    #[test]
    fn gotestsum_done_line_is_not_double_counted() {
        let out = "=== RUN   TestA\n--- PASS: TestA (0.00s)\n\nDONE 5 tests, 1 skipped, 2 failures in 0.5s\n";
        assert_eq!(tally(out), t(4, 2, 2, 1));
        assert_eq!(runners(out), vec!["gotestsum"]);
        assert_eq!(
            tally("DONE 2 runs, 8 tests, 1 error in 1.0s"),
            t(9, 8, 1, 0)
        );
    }

    #[test]
    fn jest_summary() {
        let out = "PASS src/a.test.js\nFAIL src/b.test.js\n\nTest Suites: 1 failed, 1 passed, 2 total\nTests:       1 failed, 1 skipped, 5 passed, 7 total\nSnapshots:   0 total\nTime:        1.2 s\nRan all test suites.\n";
        assert_eq!(tally(out), t(6, 5, 1, 1));
        assert_eq!(runners(out), vec!["jest"]);
        assert_eq!(
            tally(
                "No tests found, exiting with code 1\nRun with `--passWithNoTests` to exit with code 0"
            ),
            t(0, 0, 0, 0)
        );
    }

    #[test]
    fn vitest_summary_counts_tests_not_files() {
        let out = " ❯ src/a.test.ts (6 tests | 2 failed | 1 skipped) 5ms\n\n Test Files  1 failed | 1 passed (2)\n      Tests  2 failed | 3 passed | 1 skipped (6)\n   Start at  10:00:00\n   Duration  1.20s\n";
        assert_eq!(tally(out), t(5, 3, 2, 1));
        assert_eq!(runners(out), vec!["vitest"]);
        assert_eq!(
            tally(" Test Files  1 passed (1)\n      Tests  5 passed (5)\n"),
            t(5, 5, 0, 0)
        );
        assert_eq!(
            tally("No test files found, exiting with code 1\n"),
            t(0, 0, 0, 0)
        );
    }

    #[test]
    fn node_test_runner_tap_and_spec() {
        let tap = "TAP version 13\n# Subtest: adds\nok 1 - adds\n  ---\n  duration_ms: 0.4\n  ...\nnot ok 2 - subs\n1..5\n# tests 5\n# suites 0\n# pass 4\n# fail 1\n# cancelled 0\n# skipped 0\n# todo 0\n# duration_ms 40.12\n";
        assert_eq!(tally(tap), t(5, 4, 1, 0));
        assert_eq!(runners(tap), vec!["node test runner"]);
        let spec = "✔ adds (0.5ms)\n﹣ later (0.1ms) # SKIP\nℹ tests 5\nℹ suites 0\nℹ pass 4\nℹ fail 0\nℹ cancelled 0\nℹ skipped 1\nℹ todo 0\nℹ duration_ms 41.5\n";
        assert_eq!(tally(spec), t(4, 4, 0, 1));
    }

    #[test]
    fn mocha_summary() {
        let out = "  math\n    ✓ adds\n    - later\n    1) subs\n\n\n  5 passing (10ms)\n  1 pending\n  2 failing\n\n  1) math\n       subs:\n     AssertionError: expected 1 to equal 2\n";
        assert_eq!(tally(out), t(7, 5, 2, 1));
        assert_eq!(runners(out), vec!["mocha"]);
        assert_eq!(tally("  3 passing (4ms)\n"), t(3, 3, 0, 0));
    }

    #[test]
    fn rspec_and_minitest() {
        let rspec = "..F**\n\nFinished in 0.01 seconds (files took 0.1 seconds to load)\n5 examples, 1 failure, 2 pending\n";
        assert_eq!(tally(rspec), t(3, 2, 1, 2));
        assert_eq!(runners(rspec), vec!["rspec"]);
        let minitest = "Finished in 0.001s, 1000 runs/s\n\n5 runs, 9 assertions, 1 failures, 0 errors, 2 skips\n";
        assert_eq!(tally(minitest), t(3, 2, 1, 2));
        assert_eq!(runners(minitest), vec!["minitest"]);
        let test_unit =
            "5 tests, 9 assertions, 0 failures, 1 errors, 1 pendings, 0 omissions, 0 notifications";
        assert_eq!(tally(test_unit), t(4, 3, 1, 1));
    }

    #[test]
    fn phpunit_summaries() {
        let ok = "PHPUnit 10.5.0 by Sebastian Bergmann and contributors.\n\n.....  5 / 5 (100%)\n\nTime: 00:00.010, Memory: 8.00 MB\n\nOK (5 tests, 10 assertions)\n";
        assert_eq!(tally(ok), t(5, 5, 0, 0));
        assert_eq!(runners(ok), vec!["phpunit"]);
        let failed = "FAILURES!\nTests: 5, Assertions: 10, Failures: 1, Skipped: 1.\n";
        assert_eq!(tally(failed), t(4, 3, 1, 1));
        assert_eq!(tally("OK (1 test, 1 assertion)"), t(1, 1, 0, 0));
    }

    #[test]
    fn prove_summary() {
        let ok = "t/a.t .. ok\nt/b.t .. ok\nAll tests successful.\nFiles=2, Tests=10,  0 wallclock secs ( 0.01 usr  0.00 sys +  0.03 cusr  0.01 csys =  0.05 CPU)\nResult: PASS\n";
        assert_eq!(tally(ok), t(10, 10, 0, 0));
        assert_eq!(runners(ok), vec!["prove"]);
        let failed = "t/a.t .. 1/5 \n#   Failed test 'x'\nt/a.t .. Failed 1/5 subtests \nt/b.t .. ok\n\nTest Summary Report\n-------------------\nt/a.t (Wstat: 256 (exited 1) Tests: 5 Failed: 1)\n  Failed test:  3\nFiles=2, Tests=10,  0 wallclock secs\nResult: FAIL\n";
        assert_eq!(tally(failed), t(10, 9, 1, 0));
    }

    #[test]
    fn bats_exunit_surefire_dotnet() {
        let bats = "✓ adds\n- later (skipped)\n✗ subs\n\n3 tests, 1 failure, 1 skipped\n";
        assert_eq!(tally(bats), t(2, 1, 1, 1));
        let exunit = "Finished in 0.05 seconds (0.03s async, 0.02s sync)\n1 doctest, 5 tests, 0 failures, 2 excluded\n";
        assert_eq!(tally(exunit), t(4, 4, 0, 2));
        let maven = "[INFO] Tests run: 3, Failures: 1, Errors: 0, Skipped: 0, Time elapsed: 0.05 s <<< FAILURE! -- in com.x.ATest\n[INFO] Tests run: 2, Failures: 0, Errors: 0, Skipped: 1, Time elapsed: 0.01 s -- in com.x.BTest\n[INFO] \n[INFO] Results:\n[ERROR] Tests run: 5, Failures: 1, Errors: 0, Skipped: 1\n";
        assert_eq!(tally(maven), t(4, 3, 1, 1));
        assert_eq!(runners(maven), vec!["maven surefire"]);
        let dotnet = "Passed!  - Failed:     0, Passed:     5, Skipped:     1, Total:     6, Duration: 12 ms - A.Tests.dll (net8.0)\nFailed!  - Failed:     1, Passed:     2, Skipped:     0, Total:     3, Duration: 9 ms - B.Tests.dll (net8.0)\n";
        assert_eq!(tally(dotnet), t(8, 7, 1, 1));
        let terminal =
            "Test summary: total: 6, failed: 1, succeeded: 4, skipped: 1, duration: 1.2s\n";
        assert_eq!(tally(terminal), t(5, 4, 1, 1));
    }

    #[test]
    fn plain_summary_line() {
        assert_eq!(tally("5 passed, 1 failed"), t(6, 5, 1, 0));
        assert_eq!(tally("tests: 5 passed, 0 failed"), t(5, 5, 0, 0));
        assert_eq!(
            tally("Results: 3 passed, 0 failed, 2 skipped\n"),
            t(3, 3, 0, 2)
        );
        assert_eq!(runners("5 passed, 1 failed"), vec!["plain summary"]);
        assert_eq!(tally("two words: 5 passed, 1 failed"), None);
        assert_eq!(tally("5 passed, 1 failed, and more"), None);
    }

    #[test]
    fn no_summary_is_none() {
        assert_eq!(tally(""), None);
        assert_eq!(tally("error: could not compile `foo`\nBuild failed"), None);
        assert_eq!(runners("hello"), Vec::<&str>::new());
    }

    #[test]
    fn different_runners_add_up() {
        let out = "test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n==== 3 passed in 0.10s ====\n";
        assert_eq!(tally(out), t(5, 5, 0, 0));
        assert_eq!(runners(out), vec!["cargo test", "pytest"]);
    }

    #[test]
    fn tally_round_trips_through_json() {
        let t = Tally::new(3, 1, 2);
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(json, r#"{"ran":4,"passed":3,"failed":1,"skipped":2}"#);
        assert_eq!(serde_json::from_str::<Tally>(&json).unwrap(), t);
    }

    /// Text made of up to 60 of `bits`, in any order.
    fn tokens(bits: &'static [&'static str]) -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::strategy::Strategy;
        proptest::collection::vec(proptest::sample::select(bits), 0..60).prop_map(|v| v.concat())
    }

    const SUMMARY_BITS: &[&str] = &[
        "test result: ",
        "ok.",
        "FAILED.",
        "Summary [",
        "]",
        " run:",
        "Tests:",
        "Tests ",
        "Ran ",
        "DONE ",
        " in ",
        "0",
        "7",
        "18446744073709551615",
        "99999999999999999999",
        " passed",
        " failed",
        " skipped",
        " total",
        " passing",
        " pending",
        " failing",
        " examples",
        " failure",
        " runs",
        " assertions",
        "Tests=",
        "Files=",
        "Failed ",
        " subtests",
        "/",
        "(",
        ")",
        "=",
        ":",
        ", ",
        "; ",
        " | ",
        "# ",
        "ℹ ",
        "--- PASS: ",
        "--- FAIL: ",
        "[INFO] ",
        "Passed! - ",
        "OK",
        "\u{1b}[",
        "\u{1b}]",
        "\n",
        "\r",
        " ",
        "é",
    ];

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        #[test]
        fn never_panics_on_any_text(text in "\\PC{0,300}") {
            let _ = tally(&text);
            let _ = runners(&text);
        }

        #[test]
        fn never_panics_on_summary_like_text(text in tokens(SUMMARY_BITS)) {
            let sum = tally(&text);
            if let Some(t) = sum {
                proptest::prop_assert_eq!(t.ran, t.passed.saturating_add(t.failed));
            }
            proptest::prop_assert_eq!(sum.is_some(), !runners(&text).is_empty());
        }
    }
}
