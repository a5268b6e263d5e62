//! Promise tags in the agent's own words (spec 2 §1): `<promise>COMPLETE</promise>` (text
//! configurable), `<promise>BLOCKED:reason</promise>`, `<promise>DECIDE:question</promise>`.
//! The last valid tag wins: it is the agent's final word. Empty reasons or questions are
//! ignored (the loop goes on).

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "signal", content = "text", rename_all = "snake_case")]
pub enum Signal {
    Complete,
    Blocked(String),
    Decide(String),
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scan {
    /// The signal that counts (the last valid one).
    pub signal: Option<Signal>,
    /// Tags that were present but ignored, with why.
    pub ignored: Vec<String>,
}

/// Find promise tags in `words`.
pub fn scan(words: &str, completion_text: &str) -> Scan {
    let mut out = Scan::default();
    let mut rest = words;
    while let Some(start) = rest.find("<promise>") {
        let after = &rest[start + "<promise>".len()..];
        let Some(end) = after.find("</promise>") else {
            break;
        };
        let inner = after[..end].trim();
        rest = &after[end + "</promise>".len()..];
        if inner == completion_text.trim() {
            out.signal = Some(Signal::Complete);
        } else if let Some(reason) = strip_kind(inner, "BLOCKED") {
            match reason {
                // The prompt's own example (`BLOCKED:reason`) quoted back is not a signal.
                Some(r) if r == "reason" => out
                    .ignored
                    .push("BLOCKED with the placeholder `reason`".into()),
                Some(r) => out.signal = Some(Signal::Blocked(r)),
                None => out.ignored.push("BLOCKED with an empty reason".into()),
            }
        } else if let Some(q) = strip_kind(inner, "DECIDE") {
            match q {
                Some(q) if q == "question" => out
                    .ignored
                    .push("DECIDE with the placeholder `question`".into()),
                Some(q) => out.signal = Some(Signal::Decide(q)),
                None => out.ignored.push("DECIDE with an empty question".into()),
            }
        } else {
            out.ignored.push(format!(
                "unknown promise `{}`",
                inner.chars().take(60).collect::<String>()
            ));
        }
    }
    out
}

/// `Some(None)` for `KIND:` with nothing after it, `Some(Some(text))` for `KIND:text`.
fn strip_kind(inner: &str, kind: &str) -> Option<Option<String>> {
    let rest = inner.strip_prefix(kind)?.trim_start().strip_prefix(':')?;
    let text = rest.trim();
    Some((!text.is_empty()).then(|| text.to_string()))
}

/// Remove copies of the prompt from plain-text output, so an agent that echoes its prompt
/// (which mentions the tags) does not promise anything by it: verbatim copies of the whole
/// prompt, and lines that repeat part of one of its lines holding a tag, re-indented,
/// quoted (`> `, `│ `) or wrapped, as CLIs print a prompt back.
pub fn strip_prompt_echo(words: &str, prompt: &str) -> String {
    // Output lines lose their `\r` on the way in; compare without them.
    let prompt = prompt.replace("\r\n", "\n");
    let prompt = prompt.trim();
    let words = if prompt.len() >= 16 && words.contains(prompt) {
        words.replace(prompt, "")
    } else {
        words.to_string()
    };
    let tagged: Vec<&str> = prompt.lines().filter(|l| l.contains("<promise>")).collect();
    if tagged.is_empty() || !words.contains("<promise>") {
        return words;
    }
    let echoed = |line: &str| {
        let core = line
            .trim_start_matches(|c: char| c.is_whitespace() || matches!(c, '>' | '|' | '│' | '┃'))
            .trim_end();
        core.contains("<promise>")
            && untagged_len(core) >= 8
            && tagged.iter().any(|p| p.contains(core))
    };
    let kept: Vec<&str> = words.lines().filter(|l| !echoed(l)).collect();
    kept.join("\n")
}

/// Non-space characters of `line` outside its promise tags.
fn untagged_len(line: &str) -> usize {
    let mut n = 0;
    let mut rest = line;
    while let Some(start) = rest.find("<promise>") {
        n += rest[..start].chars().filter(|c| !c.is_whitespace()).count();
        match rest[start..].find("</promise>") {
            Some(end) => rest = &rest[start + end + "</promise>".len()..],
            None => return n,
        }
    }
    n + rest.chars().filter(|c| !c.is_whitespace()).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_valid_tag_wins() {
        let s = scan(
            "<promise>BLOCKED:x</promise> later <promise>COMPLETE</promise>",
            "COMPLETE",
        );
        assert_eq!(s.signal, Some(Signal::Complete));
        let s = scan(
            "<promise>COMPLETE</promise>\n<promise>DECIDE: A or B? </promise>",
            "COMPLETE",
        );
        assert_eq!(s.signal, Some(Signal::Decide("A or B?".into())));
    }

    #[test]
    fn empty_reason_is_ignored() {
        let s = scan(
            "<promise>BLOCKED:</promise> <promise>DECIDE:  </promise>",
            "COMPLETE",
        );
        assert_eq!(s.signal, None);
        assert_eq!(s.ignored.len(), 2);
    }

    #[test]
    fn custom_completion_text_and_unclosed_tags() {
        assert_eq!(
            scan("<promise>DONE</promise>", "DONE").signal,
            Some(Signal::Complete)
        );
        assert_eq!(scan("<promise>COMPLETE</promise>", "DONE").signal, None);
        assert_eq!(scan("<promise>COMPLETE", "COMPLETE").signal, None);
    }

    #[test]
    fn the_prompts_placeholders_are_not_signals() {
        let s = scan(
            "- `<promise>BLOCKED:reason</promise>`: … `<promise>DECIDE:question</promise>`",
            "COMPLETE",
        );
        assert_eq!(s.signal, None);
        assert_eq!(s.ignored.len(), 2);
    }

    #[test]
    fn echoed_crlf_prompt_does_not_count() {
        let prompt = "Task\r\nSay <promise>COMPLETE</promise> when done with the task.";
        let words = "Task\nSay <promise>COMPLETE</promise> when done with the task.\nok";
        assert_eq!(
            scan(&strip_prompt_echo(words, prompt), "COMPLETE").signal,
            None
        );
    }

    #[test]
    fn a_reindented_quoted_or_wrapped_echo_does_not_count_but_the_agents_own_word_does() {
        let prompt = "Task: fix it.\n\nSignals:\n    - `<promise>COMPLETE</promise>`: the whole task is done and verified.\n    - `<promise>BLOCKED:reason</promise>`: you cannot go on.";
        for echo in [
            "  - `<promise>COMPLETE</promise>`: the whole task is done and verified.",
            "> - `<promise>COMPLETE</promise>`: the whole task is done and verified.",
            "│     - `<promise>COMPLETE</promise>`: the whole task",
        ] {
            let words = format!("Reading the prompt:\n{echo}\nworking on it");
            assert_eq!(
                scan(&strip_prompt_echo(&words, prompt), "COMPLETE").signal,
                None,
                "{echo}"
            );
            let words = format!("{echo}\nAll done.\n<promise>COMPLETE</promise>");
            assert_eq!(
                scan(&strip_prompt_echo(&words, prompt), "COMPLETE").signal,
                Some(Signal::Complete),
                "{echo}"
            );
        }
        let own = "Done, tests pass. <promise>COMPLETE</promise>";
        assert_eq!(
            scan(&strip_prompt_echo(own, prompt), "COMPLETE").signal,
            Some(Signal::Complete)
        );
        assert_eq!(
            scan(
                &strip_prompt_echo("`<promise>COMPLETE</promise>`", prompt),
                "COMPLETE"
            )
            .signal,
            Some(Signal::Complete),
            "a bare tag is the agent's word, even one the prompt holds"
        );
    }

    #[test]
    fn echoed_prompt_does_not_count() {
        let prompt = "Say <promise>COMPLETE</promise> when done with the task.";
        let words = format!("{prompt}\nworking on it");
        assert_eq!(
            scan(&strip_prompt_echo(&words, prompt), "COMPLETE").signal,
            None
        );
    }
}
