//! Each test's lines, so an edit inside an existing test is seen even when it keeps the
//! test's name, markers and number of assertions (`assert add(2, 3) == 5` → `assert
//! add(2, 3) is not None`, a `return` at its top, `#[should_panic]`). A test's body runs
//! from the line that names it to the line before the next test's; trailing attribute,
//! decorator and closing-bracket lines are dropped (they belong to what follows). A body
//! counts as kept when the test's lines now *start with* its lines then, whitespace aside:
//! new tests written after it, or between two tests, keep every body.

use crate::fingerprint::{FNV_OFFSET, fnv1a};

/// One test's lines, as fingerprints (whitespace removed, blank lines skipped).
pub type Body = Vec<u64>;

/// The bodies of `names` (a scan's tests, in order) in `text`; a name not found on a line
/// has an empty body (never reported as changed).
pub fn bodies(text: &str, names: &[String]) -> Vec<Body> {
    let lines: Vec<&str> = text.lines().collect();
    let mut starts: Vec<Option<usize>> = Vec::with_capacity(names.len());
    let mut from = 0;
    for n in names {
        let needle = n.rsplit("::").next().unwrap_or(n);
        let at = (!needle.is_empty())
            .then(|| {
                lines
                    .iter()
                    .skip(from)
                    .position(|l| l.contains(needle))
                    .map(|p| p + from)
            })
            .flatten();
        if let Some(a) = at {
            from = a + 1;
        }
        starts.push(at);
    }
    let found: Vec<usize> = starts.iter().flatten().copied().collect();
    starts
        .iter()
        .map(|s| match s {
            Some(a) => {
                let end = found.iter().copied().find(|f| f > a).unwrap_or(lines.len());
                body(&lines[*a..end])
            }
            None => Vec::new(),
        })
        .collect()
}

fn body(lines: &[&str]) -> Body {
    let mut kept: Vec<String> = lines
        .iter()
        .map(|l| l.chars().filter(|c| !c.is_whitespace()).collect::<String>())
        .filter(|l| !l.is_empty())
        .collect();
    while kept.last().is_some_and(|l| trailing(l)) {
        kept.pop();
    }
    kept.iter()
        .map(|l| fnv1a(FNV_OFFSET, l.as_bytes()))
        .collect()
}

/// A line that belongs to what follows a test, or only closes it.
fn trailing(l: &str) -> bool {
    l.starts_with('@')
        || l.starts_with("#[")
        || l.starts_with('[')
        || l == "end"
        || l.chars().all(|c| matches!(c, '}' | ')' | ']' | ';' | ','))
}

/// Whether `now` keeps `before`: it starts with every line of it.
pub fn keeps(before: &Body, now: &Body) -> bool {
    now.starts_with(before)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    const PY: &str = "import calc\n\ndef test_add():\n    assert calc.add(2, 3) == 5\n\n@pytest.mark.parametrize('x', [1])\ndef test_sub(x):\n    assert calc.sub(3, 2) == 1\n";

    #[test]
    fn an_edit_inside_a_test_changes_its_body_new_tests_do_not() {
        let n = names(&["test_add", "test_sub"]);
        let before = bodies(PY, &n);
        let weak = PY.replace("== 5", "is not None");
        let now = bodies(&weak, &n);
        assert!(!keeps(&before[0], &now[0]));
        assert!(keeps(&before[1], &now[1]));
        // A test added between the two and one at the end keep both bodies.
        let more = PY.replace(
            "\n\n@pytest",
            "\n\ndef test_mul():\n    assert calc.mul(2, 3) == 6\n\n@pytest",
        ) + "\ndef test_div():\n    assert calc.div(6, 3) == 2\n";
        let n3 = names(&["test_add", "test_mul", "test_sub", "test_div"]);
        let now = bodies(&more, &n3);
        assert!(keeps(&before[0], &now[0]) && keeps(&before[1], &now[2]));
        // Whitespace is not a change; an early return is.
        assert!(keeps(
            &before[0],
            &bodies(&PY.replace("(2, 3)", "(2,3)"), &n)[0]
        ));
        let early = PY.replace("def test_add():\n", "def test_add():\n    return\n");
        assert!(!keeps(&before[0], &bodies(&early, &n)[0]));
    }

    #[test]
    fn rust_attributes_of_the_next_test_are_not_the_previous_tests() {
        let rs = "#[cfg(test)]\nmod tests {\n    #[test]\n    fn a() {\n        assert_eq!(1 + 1, 2);\n    }\n\n    #[test]\n    fn b() {\n        assert!(true);\n    }\n}\n";
        let n = names(&["a", "b"]);
        let before = bodies(rs, &n);
        let panics = rs.replace(
            "    #[test]\n    fn b",
            "    #[test]\n    #[should_panic]\n    fn b",
        );
        let now = bodies(&panics, &n);
        assert!(keeps(&before[0], &now[0]) && keeps(&before[1], &now[1]));
        let panics_a = rs.replacen("    fn a() {\n", "    fn a() {\n        panic!();\n", 1);
        assert!(!keeps(&before[0], &bodies(&panics_a, &n)[0]));
    }
}
