//! Words and the small vocabularies the rules read messages with.

/// A word of a message: its text as written and a lowercase form without the punctuation
/// around it (paths, flags and contractions keep theirs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Word {
    pub text: String,
    pub lower: String,
}

/// Split on whitespace; strip quotes, brackets and sentence punctuation around each word.
/// One `Word` per whitespace-separated token (its `lower` is empty when it was only
/// punctuation), so word `i` is token `i` of the text.
pub(crate) fn words(s: &str) -> Vec<Word> {
    s.split_whitespace()
        .map(|w| {
            let core = w.trim_matches(|c: char| {
                matches!(
                    c,
                    '"' | '\''
                        | '`'
                        | '('
                        | ')'
                        | '['
                        | ']'
                        | '{'
                        | '}'
                        | ','
                        | '!'
                        | '?'
                        | ';'
                        | ':'
                        | '‘'
                        | '’'
                        | '“'
                        | '”'
                        | '*'
                        | '_'
                )
            });
            let core = core.trim_end_matches('.');
            Word {
                text: core.to_string(),
                lower: core.to_lowercase().replace('’', "'"),
            }
        })
        .collect()
}

/// `s` without its first `n` whitespace-separated tokens.
pub(crate) fn drop_tokens(s: &str, n: usize) -> &str {
    let mut rest = s.trim_start();
    for _ in 0..n {
        match rest.find(char::is_whitespace) {
            Some(i) => rest = rest[i..].trim_start(),
            None => return "",
        }
    }
    rest
}

/// Shorten to `max` characters at a word boundary, with `…`.
pub(crate) fn shorten(s: &str, max: usize) -> String {
    let s = s.trim();
    if s.chars().count() <= max {
        return s.to_string();
    }
    let cut: String = s.chars().take(max.saturating_sub(1)).collect();
    let cut = match cut.rfind(' ') {
        Some(i) if i > max / 2 => cut[..i].to_string(),
        _ => cut,
    };
    format!("{}…", cut.trim_end_matches([',', ';', ':', ' ']))
}

/// Capitalize the first letter, unless the first word is a path or an identifier
/// (`tests/cli.rs`, `a.txt`, `--pretty`, `userId`), which keeps its spelling.
pub(crate) fn capitalize(s: &str) -> String {
    let first = s.split_whitespace().next().unwrap_or("");
    let literal = first.contains(['.', '/', '_', '-', '`', '\''])
        || first.chars().skip(1).any(char::is_uppercase);
    if literal {
        return s.to_string();
    }
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// A crude stem for matching words with file names: `flavors` → `flavor`,
/// `categories` → `category`, `boxes` → `box`.
pub(crate) fn stem(w: &str) -> String {
    let w = w.trim_end_matches("'s");
    let n = w.chars().count();
    if n > 4 && w.ends_with("ies") {
        return format!("{}y", &w[..w.len() - 3]);
    }
    if n > 4
        && w.ends_with("es")
        && (w.ends_with("xes") || w.ends_with("ches") || w.ends_with("shes") || w.ends_with("sses"))
    {
        return w[..w.len() - 2].to_string();
    }
    if n > 3 && w.ends_with('s') && !w.ends_with("ss") && !w.ends_with("us") && !w.ends_with("is") {
        return w[..w.len() - 1].to_string();
    }
    w.to_string()
}

/// The plural of a noun for a PRESERVE line (`mood` → `moods`).
pub(crate) fn plural(noun: &str) -> String {
    let n = noun.trim();
    if n.ends_with('s') {
        n.to_string()
    } else if n.ends_with('y')
        && !n.ends_with("ay")
        && !n.ends_with("ey")
        && !n.ends_with("oy")
        && n.len() > 2
    {
        format!("{}ies", &n[..n.len() - 1])
    } else if n.ends_with("ch") || n.ends_with("sh") || n.ends_with('x') {
        format!("{n}es")
    } else {
        format!("{n}s")
    }
}

/// A number written as digits or a word, with the words it took.
pub(crate) fn number_at(ws: &[Word], i: usize) -> Option<(u32, usize)> {
    let w = ws.get(i)?.lower.as_str();
    let next = |k: usize| ws.get(i + k).map(|w| w.lower.as_str());
    if w.len() <= 4 && w.chars().all(|c| c.is_ascii_digit()) {
        return w.parse().ok().map(|n| (n, 1));
    }
    let simple = match w {
        "one" => Some(1),
        "two" => Some(2),
        "three" => Some(3),
        "four" => Some(4),
        "five" => Some(5),
        "six" => Some(6),
        "seven" => Some(7),
        "eight" => Some(8),
        "nine" => Some(9),
        "ten" => Some(10),
        "eleven" => Some(11),
        "twelve" => Some(12),
        "fifteen" => Some(15),
        "twenty" => Some(20),
        "dozen" => Some(12),
        "another" => Some(1),
        _ => None,
    };
    if let Some(n) = simple {
        return Some((n, 1));
    }
    match (w, next(1), next(2)) {
        ("a" | "an", Some("couple" | "pair"), Some("of")) => Some((2, 3)),
        ("a" | "an", Some("couple" | "pair"), _) => Some((2, 2)),
        ("a", Some("dozen"), _) => Some((12, 2)),
        ("couple" | "pair", Some("of"), _) => Some((2, 2)),
        _ => None,
    }
}

/// Words that open a request without being part of it.
pub(crate) const FILLERS: &[&str] = &[
    "please",
    "pls",
    "plz",
    "also",
    "and",
    "then",
    "plus",
    "now",
    "next",
    "finally",
    "lastly",
    "additionally",
    "oh",
    "ok",
    "okay",
    "so",
    "but",
    "first",
    "firstly",
    "second",
    "secondly",
    "third",
    "thirdly",
    "just",
    "quickly",
    "maybe",
    "probably",
    "definitely",
    "really",
    "kindly",
    "ideally",
    "hey",
    "hi",
    "ah",
    "btw",
    "lets",
    "let's",
];

/// Multi-word openings dropped before the verb.
pub(crate) const FILLER_PHRASES: &[&[&str]] = &[
    &["can", "you"],
    &["could", "you"],
    &["would", "you"],
    &["will", "you"],
    &["can", "we"],
    &["could", "we"],
    &["let", "us"],
    &["i'd", "like", "you", "to"],
    &["i", "would", "like", "you", "to"],
    &["i", "want", "you", "to"],
    &["i", "need", "you", "to"],
    &["we", "need", "to"],
    &["you", "need", "to"],
    &["we", "have", "to"],
    &["you", "have", "to"],
    &["we", "should"],
    &["you", "should"],
    &["need", "to"],
    &["try", "to"],
    &["go", "ahead", "and"],
    &["on", "top", "of", "that"],
    &["in", "addition"],
    &["as", "well"],
    &["while", "you're", "at", "it"],
];

pub(crate) const ADD_VERBS: &[&str] = &[
    "add",
    "create",
    "build",
    "rebuild",
    "implement",
    "introduce",
    "include",
    "insert",
    "append",
    "write",
    "generate",
    "support",
    "provide",
    "allow",
    "enable",
    "scaffold",
    "bootstrap",
    "integrate",
    "attach",
    "embed",
    "offer",
    "setup",
    "document",
    "develop",
    "design",
    "prepare",
    "code",
    "put",
    // Verbs of new behaviour: "log the URL at startup", "cache the results".
    "log",
    "track",
    "validate",
    "handle",
    "notify",
    "send",
    "export",
    "import",
    "store",
    "save",
    "record",
    "display",
    "print",
    "emit",
    "expose",
    "measure",
    "monitor",
    "test",
    "warn",
    "alert",
    "paginate",
    "sync",
    "upload",
    "download",
    "schedule",
    "retry",
    "throttle",
    "rate-limit",
    "authenticate",
    "authorize",
    "encrypt",
    "compress",
    "cache",
];

pub(crate) const MODIFY_VERBS: &[&str] = &[
    "refine",
    "change",
    "update",
    "modify",
    "improve",
    "adjust",
    "tweak",
    "rename",
    "move",
    "refactor",
    "restyle",
    "rewrite",
    "redesign",
    "rework",
    "redo",
    "convert",
    "replace",
    "polish",
    "simplify",
    "increase",
    "decrease",
    "reduce",
    "shorten",
    "lengthen",
    "extend",
    "expand",
    "reorder",
    "sort",
    "swap",
    "switch",
    "upgrade",
    "bump",
    "optimize",
    "optimise",
    "translate",
    "reword",
    "rephrase",
    "edit",
    "turn",
    "use",
    "migrate",
    "tidy",
    "reorganize",
    "reorganise",
    "restructure",
    "align",
    "center",
    "centre",
    "resize",
    "recolor",
    "recolour",
    "style",
    "format",
    "normalize",
    "standardize",
    "harden",
    "tighten",
    "loosen",
    "darken",
    "lighten",
    "enlarge",
    "widen",
    "narrow",
    "raise",
    "lower",
    "limit",
    "shrink",
    "soften",
    "streamline",
    "unify",
    "merge",
    "split",
    "consolidate",
    "customize",
    "customise",
    "localize",
    "deprecate",
    "disable",
    "hide",
    "show",
    "make",
    "set",
    "clean",
    "speed",
    "tone",
    "revise",
    "revamp",
    "modernize",
    "spruce",
    "retitle",
    "relabel",
    "rearrange",
    "reposition",
    "restrict",
    "parallelize",
    "port",
];

pub(crate) const FIX_VERBS: &[&str] = &[
    "fix",
    "repair",
    "debug",
    "resolve",
    "correct",
    "patch",
    "troubleshoot",
    "unbreak",
    "restore",
    "investigate",
];

pub(crate) const REMOVE_VERBS: &[&str] = &[
    "remove",
    "delete",
    "drop",
    "scrap",
    "eliminate",
    "strip",
    "ditch",
    "purge",
    "erase",
    "trash",
    "nuke",
    "axe",
    "cut",
    "kill",
    "uninstall",
    "discard",
    "retire",
];

/// Multi-word verbs, checked before single words.
pub(crate) const PHRASAL_VERBS: &[(&[&str], super::Marker)] = &[
    (&["get", "rid", "of"], super::Marker::Remove),
    (&["take", "out"], super::Marker::Remove),
    (&["rip", "out"], super::Marker::Remove),
    (&["throw", "away"], super::Marker::Remove),
    (&["throw", "out"], super::Marker::Remove),
    (&["set", "up"], super::Marker::Add),
    (&["come", "up", "with"], super::Marker::Add),
    (&["hook", "up"], super::Marker::Add),
    (&["wire", "up"], super::Marker::Add),
    (&["clean", "up"], super::Marker::Modify),
    (&["speed", "up"], super::Marker::Modify),
    (&["tone", "down"], super::Marker::Modify),
    (&["spruce", "up"], super::Marker::Modify),
    (&["sort", "out"], super::Marker::Fix),
    (&["look", "into"], super::Marker::Fix),
    (&["do", "something", "about"], super::Marker::Modify),
    (&["start", "over"], super::Marker::Add),
    (&["start", "again"], super::Marker::Add),
];

/// Words that say something is broken.
pub(crate) const PROBLEM_WORDS: &[&str] = &[
    "broken",
    "broke",
    "breaks",
    "bug",
    "bugs",
    "buggy",
    "crash",
    "crashes",
    "crashed",
    "crashing",
    "fails",
    "failing",
    "failed",
    "fail",
    "errors",
    "erroring",
    "throws",
    "exception",
    "panic",
    "panics",
    "panicked",
    "panicking",
    "hangs",
    "hanging",
    "freezes",
    "frozen",
    "stuck",
    "overlap",
    "overlaps",
    "overlapping",
    "misaligned",
    "wrong",
    "incorrect",
    "incorrectly",
    "ignores",
    "ignored",
    "regression",
    "typo",
    "typos",
    "glitch",
    "glitches",
    "glitchy",
    "flicker",
    "flickers",
    "flickering",
    "leak",
    "leaks",
    "leaking",
    "404",
    "500",
    "nan",
    "undefined",
    "doesn't",
    "don't",
    "isn't",
    "aren't",
    "won't",
    "can't",
    "cannot",
    "never",
    "unresponsive",
    "unusable",
    "truncated",
    "clipped",
    "missing",
    "disappears",
    "disappeared",
    "vanishes",
    "timeout",
    "timeouts",
    "twice",
    "duplicate",
    "duplicated",
    "duplicates",
    "flaky",
    "flakey",
    "outdated",
    "stale",
    "obsolete",
    "blurry",
    "pixelated",
    "distorted",
    "stretched",
    "squashed",
    "invisible",
    "unreadable",
    "illegible",
    "laggy",
    "janky",
    "jumpy",
    "unreachable",
];

/// Phrases that say something is broken.
pub(crate) const PROBLEM_PHRASES: &[&[&str]] = &[
    &["not", "working"],
    &["not", "work"],
    &["does", "not"],
    &["do", "not", "work"],
    &["is", "not"],
    &["are", "not"],
    &["no", "longer"],
    &["stopped", "working"],
    &["instead", "of"],
    &["an", "error"],
    &["cut", "off"],
    &["off", "by", "one"],
    &["off-by-one"],
    &["times", "out"],
    &["timed", "out"],
    &["is", "blank"],
    &["goes", "blank"],
    &["blank", "page"],
    &["blank", "screen"],
    &["does", "nothing"],
    &["do", "nothing"],
    &["nothing", "happens"],
    &["out", "of", "date"],
];

/// Words that point at something without naming it.
pub(crate) const VAGUE_OBJECTS: &[&str] = &[
    "it",
    "this",
    "that",
    "them",
    "those",
    "these",
    "things",
    "thing",
    "stuff",
    "something",
    "anything",
    "same",
    "ones",
    "whatever",
];

/// Judgements that do not say what to change ("make it better").
pub(crate) const VAGUE_PREDICATES: &[&str] = &[
    "better", "nicer", "good", "great", "cool", "best", "awesome", "prettier", "perfect",
    "fancier", "right", "properly", "work", "again", "pop",
];

/// Verbs that need more than an object to say what to do ("change the drinks": how?).
pub(crate) const GENERIC_VERBS: &[&str] = &[
    "change", "modify", "update", "improve", "redo", "rework", "tweak", "adjust", "edit", "revise",
    "revamp", "make", "clean", "polish",
];

/// Words that ask for more of something that exists.
pub(crate) const MORE_WORDS: &[&str] = &["more", "additional", "extra", "further", "another"];

/// Words that ask to keep something.
pub(crate) const KEEP_VERBS: &[&str] = &["keep", "preserve", "retain", "leave"];

/// Words without meaning for matching files.
pub(crate) const STOPWORDS: &[&str] = &[
    "the",
    "a",
    "an",
    "to",
    "of",
    "for",
    "in",
    "on",
    "at",
    "by",
    "with",
    "and",
    "or",
    "from",
    "into",
    "as",
    "is",
    "are",
    "be",
    "been",
    "it",
    "its",
    "it's",
    "this",
    "that",
    "these",
    "those",
    "them",
    "they",
    "their",
    "my",
    "our",
    "your",
    "we",
    "i",
    "you",
    "me",
    "us",
    "more",
    "less",
    "new",
    "some",
    "all",
    "any",
    "each",
    "every",
    "very",
    "too",
    "so",
    "not",
    "no",
    "but",
    "if",
    "when",
    "then",
    "than",
    "instead",
    "after",
    "before",
    "while",
    "about",
    "like",
    "just",
    "only",
    "also",
    "please",
    "still",
    "again",
    "existing",
    "current",
    "bit",
    "lot",
    "way",
    "thing",
    "things",
    "stuff",
    "should",
    "would",
    "could",
    "can",
    "will",
    "do",
    "does",
    "did",
    "get",
    "have",
    "has",
    "let",
    "up",
    "down",
    "out",
    "over",
    "under",
    "there",
    "here",
    "what",
    "which",
    "who",
    "how",
    "why",
    "where",
    "since",
    "last",
    "first",
    "next",
    "now",
    "one",
    "ones",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "another",
    "other",
    "others",
    "same",
    "want",
    "need",
    "needs",
    "feel",
    "look",
    "looks",
    "make",
    "keep",
    "both",
    "much",
    "many",
    "few",
    "several",
    "whole",
    "currently",
    "again",
    "nobody",
    "anyone",
    "someone",
    "using",
    "uses",
    "used",
    "work",
    "works",
    "working",
    "via",
    "per",
    "don't",
    "doesn't",
    "isn't",
    "can't",
    "won't",
    "never",
    "always",
    "because",
    "though",
    "although",
    "whichever",
    "whatever",
    "either",
    "neither",
    "nor",
    "yet",
    "etc",
    "e.g",
    "i.e",
    "ok",
    "okay",
    "hmm",
    "thanks",
    "thank",
];

pub(crate) fn is_in(w: &str, list: &[&str]) -> bool {
    list.contains(&w)
}

/// Whether `ws[i..]` starts with `phrase`.
pub(crate) fn starts_with_phrase(ws: &[Word], i: usize, phrase: &[&str]) -> bool {
    phrase.len() <= ws.len().saturating_sub(i)
        && phrase
            .iter()
            .zip(&ws[i..])
            .all(|(p, w)| w.lower == *p || (p.ends_with("'re") && w.lower == p.replace('\'', "")))
}

/// Whether the words contain `phrase` anywhere.
pub(crate) fn contains_phrase(ws: &[Word], phrase: &[&str]) -> bool {
    (0..ws.len()).any(|i| starts_with_phrase(ws, i, phrase))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_keep_paths_and_contractions() {
        let ws: Vec<String> = words("Fix 'src/data/flavors.ts', it doesn't load!")
            .into_iter()
            .map(|w| w.lower)
            .collect();
        assert_eq!(ws, ["fix", "src/data/flavors.ts", "it", "doesn't", "load"]);
    }

    #[test]
    fn numbers_and_stems() {
        let ws = words("a couple of drinks and 12 more");
        assert_eq!(number_at(&ws, 0), Some((2, 3)));
        assert_eq!(number_at(&ws, 5), Some((12, 1)));
        assert_eq!(stem("flavors"), "flavor");
        assert_eq!(stem("categories"), "category");
        assert_eq!(stem("boxes"), "box");
        assert_eq!(stem("status"), "status");
        assert_eq!(plural("mood"), "moods");
        assert_eq!(plural("category"), "categories");
        assert_eq!(shorten("one two three four", 10), "one two…");
    }
}
