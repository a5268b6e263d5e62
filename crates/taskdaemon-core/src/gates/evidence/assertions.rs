//! Assertions that can never fail (`assert True`, `assert!(true)`, `expect(1).toBe(1)`,
//! `assert_eq!(x, x)`), which weaken a test while keeping its count of assertions.

fn comment(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("//") || t.starts_with('#') && !t.starts_with("#[") || t.starts_with("--")
}

/// A line without its whitespace and a trailing `;`, lowercased.
fn normal(line: &str) -> String {
    let s: String = line.chars().filter(|c| !c.is_whitespace()).collect();
    s.trim_end_matches(';').to_lowercase()
}

/// The assertions of `text` that can never fail: (1-based line, the line as written).
pub fn trivial(text: &str) -> Vec<(u32, String)> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !comment(l) && always_true(&normal(l)))
        .map(|(i, l)| (i as u32 + 1, l.trim().to_string()))
        .collect()
}

/// Forms that assert a constant.
const CONSTANT: &[&str] = &[
    "asserttrue",
    "assert1",
    "assertnotfalse",
    "assert(true)",
    "assert!(true)",
    "assert!(!false)",
    "assert.ok(true)",
    "asserttrue(true)",
    "self.asserttrue(true)",
    "self.asserttrue(1)",
    "self.assertfalse(false)",
    "assertfalse(false)",
    "assert.true(t,true)",
    "expect(true).tobe(true)",
    "expect(true).tobetruthy()",
    "expect(true).toequal(true)",
    "expect(false).tobefalsy()",
    "xctasserttrue(true)",
];

/// Calls that compare their two arguments.
const COMPARE: &[&str] = &[
    "assert_eq!(",
    "assert_ne!(",
    "self.assertequal(",
    "assertequal(",
    "assertequals(",
    "assert.equal(",
    "assert.strictequal(",
    "assert.deepequal(",
    "assert.equal(t,",
    "xctassertequal(",
];

fn always_true(n: &str) -> bool {
    if CONSTANT.contains(&n) {
        return true;
    }
    // `assert X == X`, `assert!(X == X)`.
    let bare = n
        .strip_prefix("assert!(")
        .and_then(|r| r.strip_suffix(')'))
        .or_else(|| n.strip_prefix("assert"));
    if let Some(e) = bare
        && let Some((a, b)) = e.split_once("==")
        && !a.is_empty()
        && a == b
    {
        return true;
    }
    // `expect(X).toBe(X)` / `.toEqual(X)`.
    if let Some(r) = n.strip_prefix("expect(") {
        for m in [").tobe(", ").toequal(", ").tostrictequal("] {
            if let Some((a, b)) = r.split_once(m)
                && b.strip_suffix(')') == Some(a)
                && !a.is_empty()
            {
                return true;
            }
        }
    }
    COMPARE.iter().any(|c| {
        n.strip_prefix(c)
            .and_then(|r| r.strip_suffix(')'))
            .and_then(|args| args.split_once(','))
            .is_some_and(|(a, b)| !a.is_empty() && a == b && !b.contains(','))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_and_self_comparing_assertions_are_trivial() {
        let text = "def test_a():\n    assert True\n    assert add(2, 3) == 5\n    assert x == x\n# assert True\n";
        assert_eq!(
            trivial(text),
            [
                (2, "assert True".to_string()),
                (4, "assert x == x".to_string())
            ]
        );
        assert_eq!(
            trivial("assert!(true);\nassert_eq!(1, 1);\nassert_eq!(add(1, 1), 2);\n").len(),
            2
        );
        assert_eq!(
            trivial("expect(1).toBe(1);\nexpect(add(1, 1)).toBe(2);\n").len(),
            1
        );
        assert!(trivial("self.assertEqual(add(1, 2), 3)\n").is_empty());
    }
}
