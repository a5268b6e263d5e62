//! YAML parsing with errors a person can act on: file, line, column, the field, and a
//! suggestion when a key is misspelt.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// A YAML file that could not be read into the expected shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct YamlError {
    pub file: PathBuf,
    pub line: Option<u64>,
    pub column: Option<u64>,
    /// The parser's message, first line only.
    pub message: String,
    /// What to do about it.
    pub hint: Option<String>,
}

impl fmt::Display for YamlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let (Some(l), Some(c)) = (self.line, self.column) {
            write!(f, ":{l}:{c}")?;
        }
        write!(f, ": {}", self.message)?;
        if let Some(h) = &self.hint {
            write!(f, "\n  hint: {h}")?;
        }
        Ok(())
    }
}

impl std::error::Error for YamlError {}

/// Between a value check's message and its own hint (`"max-loops is 0, so …; hint: write
/// 1 or more"`): the check knows better what to do than [`hint_for`]'s guesses.
pub const HINT_SEP: &str = "; hint: ";

/// A check's message with its [`HINT_SEP`] hint on a line of its own, as every other
/// error shows its hint (for the same check of a flag's value).
pub fn hinted(message: &str) -> String {
    match message.split_once(HINT_SEP) {
        Some((what, hint)) => format!("{what}\n  hint: {hint}"),
        None => message.to_string(),
    }
}

/// Parse `text` (read from `file`) as `T`. An empty document or one of only comments is
/// `None`.
pub fn parse<T: DeserializeOwned>(file: &Path, text: &str) -> Result<Option<T>, YamlError> {
    match serde_saphyr::from_str::<Option<T>>(text) {
        Ok(v) => Ok(v),
        Err(e) => {
            let loc = e.location();
            let full = e.to_string();
            // serde-saphyr renders a snippet after the first line; keep the message only.
            let first = full.lines().next().unwrap_or("invalid YAML").to_string();
            let message = strip_location_prefix(&first);
            let (message, hint) = match message.split_once(HINT_SEP) {
                Some((what, hint)) => (what.to_string(), Some(hint.to_string())),
                None => {
                    let hint = hint_for(&message);
                    (message, hint)
                }
            };
            Err(YamlError {
                file: file.to_path_buf(),
                line: loc.as_ref().map(|l| l.line()),
                column: loc.as_ref().map(|l| l.column()),
                message,
                hint,
            })
        }
    }
}

fn strip_location_prefix(line: &str) -> String {
    let line = line.strip_prefix("error: ").unwrap_or(line);
    // "line 3 column 19: invalid u32" -> "invalid u32"
    if line.starts_with("line ")
        && let Some((_, rest)) = line.split_once(": ")
    {
        return rest.to_string();
    }
    line.to_string()
}

/// For "unknown field `promt`, expected one of a, b" suggest the nearest known field.
fn hint_for(message: &str) -> Option<String> {
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let (field, tail) = rest.split_once('`')?;
        let expected: Vec<&str> = tail
            .split_once("expected one of ")
            .or_else(|| tail.split_once("expected "))
            .map(|(_, list)| {
                list.split(',')
                    .map(|s| s.trim().trim_matches('`'))
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        return Some(match nearest(field, &expected) {
            Some(best) => format!(
                "did you mean `{best}`? known fields: {}",
                expected.join(", ")
            ),
            None => format!("remove `{field}`; known fields: {}", expected.join(", ")),
        });
    }
    if message.starts_with("missing field") {
        return Some("add the field; see `taskdaemon loops --help` or the commented defaults written by `taskdaemon init`".into());
    }
    if message.starts_with("invalid") {
        return Some("check the value's type (a number, a string in quotes, true/false)".into());
    }
    // The syntax itself: a bracket, quote or indentation gone wrong.
    Some("fix the YAML at that line and column (an unclosed bracket or quote, a tab, an indentation that does not line up); a value with `:`, `#`, `{` or `[` in it goes in quotes".into())
}

/// The candidate closest to `word`, if it is close enough to be a typo.
pub fn nearest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    suggestions(word, candidates.iter().copied(), 1).pop()
}

/// Did-you-mean, the one used everywhere (config fields, loop names, template variables,
/// snapshot tags): up to `n` candidates within a typo's reach of `word` (Damerau–Levenshtein
/// distance at most a third of the longer word, at least 2), nearest first.
pub fn suggestions<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
    n: usize,
) -> Vec<&'a str> {
    let mut scored: Vec<(usize, &str)> = candidates
        .into_iter()
        .map(|c| (strsim::damerau_levenshtein(word, c), c))
        .filter(|(d, c)| *d <= (c.chars().count().max(word.chars().count()) / 3).max(2))
        .collect();
    scored.sort();
    scored.into_iter().take(n).map(|(_, c)| c).collect()
}

/// A value as YAML a person can read and paste into a file (multi-line strings as block
/// scalars).
pub fn to_yaml<T: serde::Serialize>(value: &T) -> Result<String, String> {
    serde_saphyr::to_string(value).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "kebab-case")]
    #[allow(dead_code)]
    struct T {
        prompt_template: String,
        max_iterations: u32,
    }

    #[test]
    fn unknown_field_has_location_and_suggestion() {
        let e = parse::<T>(
            Path::new("x.yaml"),
            "prompt-template: a\nmax-iteratons: 3\n",
        )
        .unwrap_err();
        assert_eq!((e.line, e.column), (Some(2), Some(1)));
        assert!(e.message.contains("max-iteratons"), "{e}");
        assert!(
            e.hint
                .as_deref()
                .unwrap_or("")
                .contains("did you mean `max-iterations`"),
            "{e}"
        );
        assert!(e.to_string().starts_with("x.yaml:2:1: "), "{e}");
    }

    #[test]
    fn broken_syntax_says_where_and_what_to_do() {
        let e = parse::<T>(Path::new("x.yaml"), "{bad\n").unwrap_err();
        assert_eq!(e.line, Some(1), "{e}");
        assert!(e.to_string().contains("\n  hint: fix the YAML"), "{e}");
    }

    #[test]
    fn empty_document_is_none() {
        assert!(parse::<T>(Path::new("x"), "# nothing\n").unwrap().is_none());
    }

    #[test]
    fn nearest_rejects_far_words() {
        assert_eq!(nearest("zzzzzzzz", &["agent", "loop"]), None);
        assert_eq!(nearest("agnet", &["agent", "loop"]), Some("agent"));
    }
}
