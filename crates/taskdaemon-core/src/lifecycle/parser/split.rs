//! Cutting a message into pieces that may each be one concern: lines (list items),
//! sentences, inline enumerations ("1. … 2. …"), colon heads, and clauses joined by
//! "and", commas, "also", "then". Cutting is generous; the rules join a piece that asks
//! for nothing on its own back onto its neighbour.

/// How a piece was separated from the one before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cut {
    /// The first piece.
    Start,
    /// A new line or list item.
    Line,
    /// A sentence end (`.`, `!`, `?`, `;`) or an enumeration number.
    Sentence,
    /// After `head:`.
    Colon,
    /// A clause separator, as written (", and ", " also ").
    Clause(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Piece {
    pub text: String,
    pub cut: Cut,
    /// The sentence ended with `?`.
    pub question: bool,
    /// The piece ended with `:` (a lead-in such as "three things:").
    pub ends_with_colon: bool,
}

/// Separators between clauses, longest first.
const CLAUSE_SEPARATORS: &[&str] = &[
    ", and also ",
    ", and then ",
    " and also ",
    " and then ",
    ", as well as ",
    " as well as ",
    ", and ",
    ", also ",
    ", then ",
    ", plus ",
    ", but ",
    " also ",
    " and ",
    " plus ",
    ", ",
];

const ABBREVIATIONS: &[&str] = &["e.g", "i.e", "etc", "vs", "approx", "incl", "no", "cf"];

/// The pieces of `message`, in order. Fenced code blocks are left out (they are context,
/// not requests).
pub(crate) fn pieces(message: &str) -> Vec<Piece> {
    let mut out = Vec::new();
    let mut in_fence = false;
    let mut first_line = true;
    for raw in message.lines() {
        let line = raw.trim();
        if line.starts_with("```") || line.starts_with("~~~") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence || line.is_empty() {
            continue;
        }
        let line = strip_bullet(line.trim_start_matches('#').trim());
        if line.is_empty() {
            continue;
        }
        for (si, (sentence, question)) in sentences(line).into_iter().enumerate() {
            let sentence_cut = if si == 0 {
                if first_line { Cut::Start } else { Cut::Line }
            } else {
                Cut::Sentence
            };
            first_line = false;
            let mut cut = sentence_cut;
            for (head, head_colon) in colon_parts(&sentence) {
                for (ci, (clause, sep)) in clauses(&head).into_iter().enumerate() {
                    let c = if ci == 0 {
                        cut.clone()
                    } else {
                        Cut::Clause(sep)
                    };
                    out.push(Piece {
                        text: clause,
                        cut: c,
                        question,
                        ends_with_colon: false,
                    });
                }
                if head_colon && let Some(last) = out.last_mut() {
                    last.ends_with_colon = true;
                }
                cut = Cut::Colon;
            }
        }
    }
    out
}

/// `- x`, `* x`, `• x`, `+ x`, `1. x`, `1) x`, `(1) x`, `a) x`, `[ ] x` → `x`.
fn strip_bullet(line: &str) -> &str {
    let l = line.trim_start();
    for b in [
        "- [ ] ", "- [x] ", "* [ ] ", "[ ] ", "- ", "* ", "• ", "+ ", "– ",
    ] {
        if let Some(rest) = l.strip_prefix(b) {
            return rest.trim_start();
        }
    }
    enumeration_prefix(l).map_or(l, |n| l[n..].trim_start())
}

/// The length of a leading `12.`, `12)`, `(12)` or `a)` followed by a space.
fn enumeration_prefix(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let mut i = 0;
    let paren = b.first() == Some(&b'(');
    if paren {
        i = 1;
    }
    let start = i;
    while i < b.len() && i - start < 2 && b[i].is_ascii_digit() {
        i += 1;
    }
    if i == start {
        // A single letter list marker: `a)`.
        if b.len() > start + 1 && b[start].is_ascii_lowercase() && b[start + 1] == b')' {
            i = start + 1;
        } else {
            return None;
        }
    }
    match b.get(i) {
        Some(b'.') | Some(b')') if b.get(i + 1) == Some(&b' ') => Some(i + 2),
        _ => None,
    }
}

/// Sentences of one line, and whether each ended with `?`. Inline enumerations
/// ("1. a 2. b") count as sentence ends when the line has at least two of them.
fn sentences(line: &str) -> Vec<(String, bool)> {
    let chars: Vec<(usize, char)> = line.char_indices().collect();
    let enum_marks = inline_enumerations(line);
    let mut out = Vec::new();
    let mut start = 0;
    let mut k = 0;
    while k < chars.len() {
        let (i, c) = chars[k];
        if let Some(&(mark_at, mark_len)) = enum_marks.iter().find(|(at, _)| *at == i) {
            push_sentence(&mut out, &line[start..mark_at], false);
            start = mark_at + mark_len;
            while k < chars.len() && chars[k].0 < start {
                k += 1;
            }
            continue;
        }
        if matches!(c, '.' | '!' | '?' | ';') {
            let next = chars.get(k + 1).map(|(_, c)| *c);
            let at_end = next.is_none() || next.is_some_and(char::is_whitespace);
            let mut end = k;
            // Runs like "?!" or "...".
            while chars
                .get(end + 1)
                .is_some_and(|(_, c)| matches!(c, '.' | '!' | '?'))
            {
                end += 1;
            }
            let run_end_next = chars.get(end + 1).map(|(_, c)| *c);
            let run_at_end =
                run_end_next.is_none() || run_end_next.is_some_and(char::is_whitespace);
            if (at_end || run_at_end) && !(c == '.' && is_abbreviation(&line[start..i])) {
                let question =
                    line[i..chars.get(end + 1).map_or(line.len(), |(j, _)| *j)].contains('?');
                push_sentence(&mut out, &line[start..i], question);
                start = chars.get(end + 1).map_or(line.len(), |(j, _)| *j);
                k = end + 1;
                continue;
            }
        }
        k += 1;
    }
    push_sentence(&mut out, &line[start..], false);
    out
}

fn push_sentence(out: &mut Vec<(String, bool)>, s: &str, question: bool) {
    let t = s.trim();
    if !t.is_empty() {
        out.push((t.to_string(), question));
    }
}

fn is_abbreviation(before: &str) -> bool {
    let last = before
        .rsplit(|c: char| c.is_whitespace() || c == '(')
        .next()
        .unwrap_or("")
        .to_lowercase();
    ABBREVIATIONS.contains(&last.as_str())
        // A single letter ("A. Smith") or a number with a dot inside ("v1.2.").
        || (last.chars().count() == 1 && last.chars().all(char::is_alphabetic))
}

/// Byte offsets and lengths of inline enumeration marks (" 2. ", " 3) ") when a line
/// holds at least two, numbered upward.
fn inline_enumerations(line: &str) -> Vec<(usize, usize)> {
    let b = line.as_bytes();
    let mut marks = Vec::new();
    let mut last_n = 0u32;
    for i in 0..b.len() {
        let preceded = i == 0 || b[i - 1] == b' ' || b[i - 1] == b':';
        if !preceded || !b[i].is_ascii_digit() {
            continue;
        }
        let mut j = i;
        while j < b.len() && j - i < 2 && b[j].is_ascii_digit() {
            j += 1;
        }
        if !matches!(b.get(j), Some(b'.') | Some(b')')) || b.get(j + 1) != Some(&b' ') {
            continue;
        }
        let n: u32 = line[i..j].parse().unwrap_or(0);
        if n == last_n + 1 {
            marks.push((i, j + 2 - i));
            last_n = n;
        }
    }
    if marks.len() >= 2 { marks } else { Vec::new() }
}

/// `head: rest` → [(head, true), (rest, false)] when the colon is followed by a space and
/// is not part of a URL or a time.
fn colon_parts(sentence: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut rest = sentence;
    while let Some(i) = rest.find(": ") {
        let head = rest[..i].trim();
        if !head.is_empty() {
            out.push((head.to_string(), true));
        }
        rest = &rest[i + 2..];
    }
    if let Some(last) = out.last_mut()
        && rest.trim().is_empty()
    {
        // "Three things:" at the end of a line stays a lead-in.
        last.1 = true;
    }
    let tail = rest.trim().trim_end_matches(':').trim();
    if !tail.is_empty() {
        out.push((tail.to_string(), rest.trim_end().ends_with(':')));
    }
    out
}

/// Clauses of a sentence with the separator before each (empty for the first).
fn clauses(s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut sep_before = String::new();
    let mut i = 0;
    let mut quote: Option<char> = None;
    while i < s.len() {
        if !s.is_char_boundary(i) {
            i += 1;
            continue;
        }
        let c = s[i..].chars().next().unwrap_or(' ');
        // Quoted text ("rename 'Save and exit'") is never cut.
        if matches!(c, '"' | '“' | '”') || (c == '\'' && quote_opens_or_closes(s, i, quote)) {
            quote = match quote {
                Some(_) => None,
                None => Some(c),
            };
            i += c.len_utf8();
            continue;
        }
        if quote.is_none()
            && let Some(sep) = CLAUSE_SEPARATORS.iter().find(|sep| {
                s.get(i..i + sep.len())
                    .is_some_and(|t| t.eq_ignore_ascii_case(sep))
            })
        {
            let piece = s[start..i].trim();
            if !piece.is_empty() {
                out.push((piece.to_string(), std::mem::take(&mut sep_before)));
            }
            sep_before = s[i..i + sep.len()].to_string();
            i += sep.len();
            start = i;
            continue;
        }
        i += c.len_utf8();
    }
    let piece = s[start..].trim();
    if !piece.is_empty() {
        out.push((piece.to_string(), sep_before));
    }
    out
}

/// An apostrophe quotes when it starts a word (`'Voltage'`) or ends a quoted one; inside a
/// word (`doesn't`) it does not.
fn quote_opens_or_closes(s: &str, i: usize, open: Option<char>) -> bool {
    let before = s[..i].chars().next_back();
    let after = s[i + 1..].chars().next();
    match open {
        Some('\'') => !after.is_some_and(char::is_alphanumeric),
        Some(_) => false,
        None => {
            !before.is_some_and(char::is_alphanumeric) && after.is_some_and(|c| !c.is_whitespace())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(m: &str) -> Vec<String> {
        pieces(m).into_iter().map(|p| p.text).collect()
    }

    #[test]
    fn lines_sentences_and_clauses() {
        assert_eq!(
            texts(
                "refine ad copy! less generic, more adult.\ntwo moods not working. add 2 more drinks for nighttime."
            ),
            [
                "refine ad copy",
                "less generic",
                "more adult",
                "two moods not working",
                "add 2 more drinks for nighttime"
            ]
        );
        assert_eq!(
            texts("- add a section\n* make cards rounded\n3. remove the video"),
            ["add a section", "make cards rounded", "remove the video"]
        );
    }

    #[test]
    fn inline_enumerations_and_lead_ins() {
        let p = pieces("Three things: 1. the badge overlaps 2. add a label 3. remove the timer");
        let t: Vec<&str> = p.iter().map(|p| p.text.as_str()).collect();
        assert_eq!(
            t,
            [
                "Three things",
                "the badge overlaps",
                "add a label",
                "remove the timer"
            ]
        );
        assert!(p[0].ends_with_colon);
    }

    #[test]
    fn dots_inside_words_and_quotes_do_not_cut() {
        assert_eq!(
            texts("Refactor FlavorGrid to read src/data/flavors.ts, e.g. the list. Done?"),
            [
                "Refactor FlavorGrid to read src/data/flavors.ts",
                "e.g. the list",
                "Done"
            ]
        );
        assert_eq!(
            texts("rename 'Save and exit' to 'Done' and doesn't break"),
            ["rename 'Save and exit' to 'Done'", "doesn't break"]
        );
        let p = pieces("can you add a box? also fix it");
        assert!(p[0].question && !p[1].question);
    }

    #[test]
    fn code_fences_are_left_out() {
        assert_eq!(
            texts("fix this:\n```\nlet x = 1. and y\n```\nthanks"),
            ["fix this", "thanks"]
        );
    }
}
