//! Counting items in a source file, language-agnostic and heuristic (spec 1 §7): it must
//! tell "added 2 to 8" from "converted 4 of 8", not parse every language. The count of a
//! file is the largest of: the elements of its largest array literal (JSON, JS/TS, Rust,
//! Python…), its markdown list items, and the occurrences of its most repeated element tag.

/// The item count of `text` (`path` chooses the markdown rules).
pub fn count_items(path: &str, text: &str) -> usize {
    let arrays = largest_array(text);
    let lists = if path.ends_with(".md") || path.ends_with(".markdown") {
        list_items(text)
    } else {
        0
    };
    arrays.max(lists).max(repeated_elements(text))
}

/// Elements of the array literal with the most top-level elements, skipping strings and
/// comments. `[]` counts 0; a trailing comma does not add an element.
fn largest_array(text: &str) -> usize {
    let b = text.as_bytes();
    // A stack of open brackets: (kind, elements so far, seen content since the last comma).
    let mut stack: Vec<(u8, usize, bool)> = Vec::new();
    let mut best = 0;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b'"' | b'\'' | b'`' => {
                i = skip_string(b, i);
                if let Some(top) = stack.last_mut() {
                    top.2 = true;
                }
                continue;
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i += 2;
                continue;
            }
            b'[' | b'{' | b'(' => {
                if let Some(top) = stack.last_mut() {
                    top.2 = true;
                }
                stack.push((c, 0, false));
            }
            b']' | b'}' | b')' => {
                if let Some((kind, n, pending)) = stack.pop()
                    && kind == b'['
                {
                    best = best.max(n + usize::from(pending));
                }
            }
            b',' => {
                if let Some(top) = stack.last_mut()
                    && top.2
                {
                    top.1 += 1;
                    top.2 = false;
                }
            }
            c if !c.is_ascii_whitespace() => {
                if let Some(top) = stack.last_mut() {
                    top.2 = true;
                }
            }
            _ => {}
        }
        i += 1;
    }
    best
}

fn skip_string(b: &[u8], start: usize) -> usize {
    let q = b[start];
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

fn list_items(text: &str) -> usize {
    text.lines()
        .map(str::trim_start)
        .filter(|l| {
            l.starts_with("- ")
                || l.starts_with("* ")
                || l.split_once(". ")
                    .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()))
        })
        .count()
}

/// Occurrences of the most frequent capitalized element tag (`<FlavorCard`, `<li`
/// excluded: only component-like repeats count).
fn repeated_elements(text: &str) -> usize {
    let mut counts = std::collections::HashMap::<&str, usize>::new();
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
        assert_eq!(count_items("f.json", "{\"items\": [1, 2, 3, 4,]}"), 4);
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
}
