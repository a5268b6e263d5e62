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

/// Remove verbatim copies of the prompt from plain-text output, so an agent that echoes its
/// prompt (which mentions the tags) does not promise anything by it.
pub fn strip_prompt_echo(words: &str, prompt: &str) -> String {
    // Output lines lose their `\r` on the way in; compare without them.
    let prompt = prompt.replace("\r\n", "\n");
    let prompt = prompt.trim();
    if prompt.len() < 16 || !words.contains(prompt) {
        return words.to_string();
    }
    words.replace(prompt, "")
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
    fn echoed_prompt_does_not_count() {
        let prompt = "Say <promise>COMPLETE</promise> when done with the task.";
        let words = format!("{prompt}\nworking on it");
        assert_eq!(
            scan(&strip_prompt_echo(&words, prompt), "COMPLETE").signal,
            None
        );
    }
}
