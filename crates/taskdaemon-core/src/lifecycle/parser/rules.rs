//! Option B: the deterministic, rule-based parser.
//!
//! 1. [`split`](super::split) cuts the message into pieces (lines, sentences, clauses).
//! 2. Each piece is read: a request (its marker from the verb, or from words that say
//!    something is broken), a "keep …" instruction, a lead-in, or a detail that belongs to
//!    its neighbour.
//! 3. Requests get counts ("2 more drinks" → ADD 2, keep the existing ones), the things an
//!    ADD adds to become PRESERVE lines, and ambiguous scope (convert or add? which of two
//!    alternatives? change how?) becomes a question.
//! 4. The type follows spec 1 §5's table; the files come from the repository's file list.

use super::split::{Cut, Piece, pieces};
use super::words::{
    ADD_VERBS, FILLER_PHRASES, FILLERS, FIX_VERBS, GENERIC_VERBS, KEEP_VERBS, MODIFY_VERBS,
    MORE_WORDS, PHRASAL_VERBS, PROBLEM_PHRASES, PROBLEM_WORDS, REMOVE_VERBS, STOPWORDS,
    VAGUE_OBJECTS, VAGUE_PREDICATES, Word, capitalize, contains_phrase, drop_tokens, is_in,
    number_at, plural, shorten, starts_with_phrase, words,
};
use super::{Marker, ParseInput, ParsedTask, Requirement, TaskKind, files, title_from};

/// At most this many requirements; the rest of a long message stays in Original Message.
const MAX_REQUIREMENTS: usize = 25;
/// A requirement's text is cut at this many characters (the message is quoted in full).
const MAX_TEXT: usize = 400;
/// Only this much of a message is read for requirements.
const MAX_MESSAGE: usize = 64 * 1024;

/// Phrases that ask for a new start (spec 1 §5: "start over" / "build me a…").
const FRESH_PHRASES: &[&[&str]] = &[
    &["start", "over"],
    &["starting", "over"],
    &["start", "again"],
    &["start", "fresh"],
    &["from", "scratch"],
    &["from", "the", "ground", "up"],
    &["build", "me", "a"],
    &["build", "me", "an"],
    &["make", "me", "a"],
    &["make", "me", "an"],
    &["create", "me", "a"],
    &["new", "project"],
    &["scrap", "everything"],
    &["rewrite", "everything"],
    &["clean", "slate"],
    &["blank", "slate"],
];

/// Words after which a clause is a complement of the one before, not a request.
const SUBORDINATORS: &[&str] = &[
    "which",
    "that",
    "who",
    "whom",
    "because",
    "since",
    "so",
    "when",
    "as",
    "where",
    "if",
    "though",
    "although",
    "while",
    "with",
    "without",
    "for",
    "to",
    "in",
    "on",
    "at",
    "from",
    "by",
    "into",
    "after",
    "before",
    "until",
    "unless",
    "like",
    "whichever",
    "or",
    "but",
    "especially",
    "including",
    "except",
    "than",
];

/// Words after a number that are units, not things to add.
const UNITS: &[&str] = &[
    "px", "%", "percent", "pixels", "pixel", "ms", "seconds", "second", "sec", "secs", "minutes",
    "minute", "min", "hours", "hour", "days", "day", "times", "columns", "column", "cols", "rows",
    "row", "em", "rem", "pt", "kb", "mb", "gb", "x",
];

/// Prepositions that name where an ADD goes.
const TARGET_PREPOSITIONS: &[&str] = &[
    "to", "into", "in", "on", "below", "above", "under", "inside",
];

/// What a piece of the message turned out to be.
#[derive(Debug)]
enum Reading {
    Request(Unit),
    /// "keep the existing ones": a PRESERVE line.
    Keep(String),
    /// A short head before a colon ("three things:", "bug:", "new flavor:"): a label for
    /// the request after it, or the request itself when only a detail follows. Holds its
    /// own request, if it makes one, and its text.
    LeadIn(Option<Unit>, String),
    /// A lead-in before its request: left out.
    Skip,
    /// Asks for nothing on its own; joins its neighbour.
    Detail(String),
}

#[derive(Debug, Clone)]
struct Unit {
    text: String,
    marker: Marker,
    count: Option<u32>,
    keep_existing: bool,
    /// What an ADD adds more of ("drinks").
    noun: Option<String>,
    /// Where an ADD goes ("the footer").
    target: Option<String>,
    /// Only a verb and a pronoun ("please fix", "fix it"): it belongs to its neighbour.
    pronoun_only: bool,
    /// Only a verb ("rename and move the file"): the next clause's object is its object.
    verb_only: bool,
    /// Why this request cannot be carried out as written: the question to ask.
    blocking: Option<String>,
    /// A reading the parser chose that the agent should know about.
    note: Option<String>,
    /// "… without breaking X": X must keep working.
    keep: Option<String>,
}

impl Unit {
    fn new(text: String, marker: Marker) -> Unit {
        Unit {
            text,
            marker,
            count: None,
            keep_existing: false,
            noun: None,
            target: None,
            pronoun_only: false,
            verb_only: false,
            blocking: None,
            note: None,
            keep: None,
        }
    }
}

/// The result of reading a whole message.
#[derive(Debug, Default)]
struct Read {
    units: Vec<Unit>,
    keeps: Vec<String>,
    details_without_request: Vec<String>,
    truncated: usize,
}

/// Parse `input` by the rules.
pub fn parse(input: &ParseInput) -> ParsedTask {
    let full = input.message.trim();
    let mut cut = full.len().min(MAX_MESSAGE);
    while !full.is_char_boundary(cut) {
        cut -= 1;
    }
    let message = &full[..cut];
    let mut read = read_message(message);
    let mut ambiguities: Vec<String> = Vec::new();
    if cut < full.len() {
        ambiguities.push(format!(
            "only the first {} KiB of the message were read for requirements; see Original Message for the rest",
            MAX_MESSAGE / 1024
        ));
    }

    let clarified = input.clarification.as_ref().map(|c| {
        let answer = read_message(c.answer.trim());
        (c.answer.trim().to_string(), answer)
    });
    let mut questions: Vec<String> = Vec::new();
    match clarified {
        Some((answer_text, answer)) => {
            read.keeps.extend(answer.keeps);
            let blocked = read.units.iter().any(|u| u.blocking.is_some());
            if read.units.is_empty() || blocked {
                let mut units = Vec::new();
                let mut replaced = false;
                for u in std::mem::take(&mut read.units) {
                    if u.blocking.is_none() {
                        units.push(u);
                    } else if !answer.units.is_empty() {
                        if !replaced {
                            units.extend(merged_answer(&answer.units, &u.text));
                            replaced = true;
                        }
                    } else {
                        let mut u = u;
                        u.text = format!("{} (clarified: {answer_text})", u.text);
                        u.blocking = None;
                        units.push(u);
                    }
                }
                if units.is_empty() {
                    units = merged_answer(&answer.units, &shorten(message, 200));
                }
                if units.is_empty() {
                    let mut u = Unit::new(
                        format!(
                            "{} (clarified: {answer_text})",
                            capitalize(&shorten(message, 200))
                        ),
                        Marker::Modify,
                    );
                    u.note = Some(
                        "neither the message nor the answer names a change the rules recognise; read both".into(),
                    );
                    units.push(u);
                }
                read.units = units;
            }
            ambiguities.push(format!("clarified by the person: {answer_text}"));
        }
        None => {
            questions.extend(read.units.iter().filter_map(|u| u.blocking.clone()));
            if read.units.is_empty() {
                let said = if read.details_without_request.is_empty() {
                    shorten(message, 120)
                } else {
                    shorten(&read.details_without_request.join(", "), 120)
                };
                questions.push(format!(
                    "\"{said}\" names no change to make. What should be added, changed, fixed or removed?"
                ));
            }
        }
    }
    for u in &read.units {
        if let Some(n) = &u.note {
            ambiguities.push(n.clone());
        }
    }
    if read.truncated > 0 {
        ambiguities.push(format!(
            "the message asks for more than {MAX_REQUIREMENTS} things; {} more are only in Original Message",
            read.truncated
        ));
    }

    let ctx = &input.context;
    let kind = if !questions.is_empty() {
        TaskKind::NeedsClarification
    } else if has_fresh_signal(message) || !ctx.has_existing_work() {
        TaskKind::Fresh
    } else if read.units.iter().all(|u| u.marker == Marker::Fix) {
        TaskKind::Bugfix
    } else {
        TaskKind::Mutation
    };

    let requirements: Vec<Requirement> = read
        .units
        .iter()
        .map(|u| Requirement {
            marker: u.marker,
            text: capitalize(&shorten(u.text.trim(), MAX_TEXT)),
            count: u.count,
            keep_existing: u.keep_existing,
        })
        .collect();
    let preserve = preserve_lines(&read, kind);
    let affected_files = files::affected(&requirements, &ctx.files);
    ParsedTask {
        kind,
        title: title_from(&requirements, message),
        question: (!questions.is_empty()).then(|| questions.join("\n")),
        requirements,
        preserve,
        affected_files,
        ambiguities,
    }
}

/// The last resort: the whole message as one requirement.
pub fn whole_message(input: &ParseInput, reason: &str) -> ParsedTask {
    let message = input.message.trim();
    let marker = if input.context.has_existing_work() {
        Marker::Modify
    } else {
        Marker::Add
    };
    let requirements = vec![Requirement {
        marker,
        text: "Do what the Original Message below asks; split it into steps while planning".into(),
        count: None,
        keep_existing: false,
    }];
    ParsedTask {
        kind: if input.context.has_existing_work() {
            TaskKind::Mutation
        } else {
            TaskKind::Fresh
        },
        title: shorten(message.lines().next().unwrap_or(""), 80),
        requirements,
        preserve: Vec::new(),
        affected_files: Vec::new(),
        question: None,
        ambiguities: vec![reason.to_string()],
    }
}

fn has_fresh_signal(message: &str) -> bool {
    let ws = words(message);
    FRESH_PHRASES.iter().any(|p| contains_phrase(&ws, p))
}

/// Read every piece, join details and pronoun-only requests to their neighbours.
fn read_message(message: &str) -> Read {
    let mut read = Read::default();
    let mut pending: Vec<String> = Vec::new();
    let mut carry: Option<Unit> = None;
    let pieces = pieces(message);
    let mut readings: Vec<Reading> = pieces.iter().map(read_piece).collect();
    // A lead-in labels the request after it ("bug: X is broken"); before a mere detail it
    // is the request itself ("new flavor: Arctic Mint").
    for i in 0..readings.len() {
        let next_is_request = matches!(readings.get(i + 1), Some(Reading::Request(_)));
        if let Reading::LeadIn(unit, text) = &mut readings[i] {
            readings[i] = match (unit.take(), next_is_request) {
                (_, true) => Reading::Skip,
                (Some(u), false) => Reading::Request(u),
                (None, false) => Reading::Detail(std::mem::take(text)),
            };
        }
    }
    for (piece, reading) in pieces.iter().zip(readings) {
        let joiner = match &piece.cut {
            Cut::Start => "",
            Cut::Line | Cut::Sentence => " — ",
            Cut::Colon => ": ",
            Cut::Clause(sep) => sep.as_str(),
        }
        .to_string();
        match reading {
            Reading::LeadIn(..) | Reading::Skip => {}
            Reading::Keep(text) => {
                let text = resolve_ones(&text, read.units.last());
                read.keeps.push(text);
            }
            Reading::Detail(text) => match read.units.last_mut() {
                Some(last) if carry.is_none() => {
                    last.text.push_str(&joiner);
                    last.text.push_str(&text);
                }
                _ => pending.push(text),
            },
            Reading::Request(mut unit) => {
                if let Some(c) = carry.take() {
                    // "rename and move the file": one request, the first verb's.
                    let mut merged = c;
                    merged.text = format!("{}{joiner}{}", merged.text, unit.text);
                    merged.verb_only = false;
                    merged.count = merged.count.or(unit.count);
                    merged.noun = merged.noun.or(unit.noun.take());
                    merged.target = merged.target.or(unit.target.take());
                    unit = merged;
                }
                if let Some(k) = unit.keep.take() {
                    read.keeps.push(k);
                }
                if unit.pronoun_only
                    && let Some(last) = read.units.last_mut()
                {
                    last.text.push_str(&joiner);
                    last.text.push_str(&unit.text);
                    continue;
                }
                if unit.pronoun_only && unit.blocking.is_none() {
                    unit.blocking = Some(vague_question(&unit.text));
                }
                if unit.verb_only && matches!(piece.cut, Cut::Start | Cut::Line | Cut::Sentence) {
                    carry = Some(unit);
                    continue;
                }
                if !pending.is_empty() {
                    // Context said before the first request: keep it with the request.
                    unit.text = format!("{} ({})", unit.text, pending.join(", "));
                    pending.clear();
                }
                if read.units.len() < MAX_REQUIREMENTS {
                    read.units.push(unit);
                } else {
                    read.truncated += 1;
                }
            }
        }
    }
    if let Some(mut c) = carry {
        if c.blocking.is_none() {
            c.blocking = Some(vague_question(&c.text));
        }
        read.units.push(c);
    }
    if read.units.is_empty() {
        read.details_without_request = pending;
    } else if !pending.is_empty()
        && let Some(last) = read.units.last_mut()
    {
        last.text = format!("{} — {}", last.text, pending.join(", "));
    }
    read
}

/// "Keep the existing ones" after "add 3 new flavors" → "Keep the existing flavors".
fn resolve_ones(text: &str, last: Option<&Unit>) -> String {
    let noun = last.and_then(|u| u.noun.as_deref());
    let t = capitalize(text.trim());
    match noun {
        Some(n) if t.contains(" ones") => t.replacen(" ones", &format!(" {}", plural(n)), 1),
        _ => t,
    }
}

/// Index of the first word after fillers ("please", "can you", "also", …).
fn skip_fillers(ws: &[Word]) -> usize {
    let mut i = 0;
    loop {
        if i >= ws.len() {
            return i;
        }
        if ws[i].lower.is_empty() || is_in(&ws[i].lower, FILLERS) {
            i += 1;
            continue;
        }
        if let Some(p) = FILLER_PHRASES.iter().find(|p| starts_with_phrase(ws, i, p)) {
            i += p.len();
            continue;
        }
        return i;
    }
}

fn has_problem(ws: &[Word]) -> bool {
    ws.iter().any(|w| is_in(&w.lower, PROBLEM_WORDS))
        || PROBLEM_PHRASES.iter().any(|p| contains_phrase(ws, p))
}

/// The marker of a verb at `ws[i]` and how many words it takes.
fn verb_at(ws: &[Word], i: usize) -> Option<(Marker, usize)> {
    if let Some((p, m)) = PHRASAL_VERBS
        .iter()
        .find(|(p, _)| starts_with_phrase(ws, i, p))
    {
        return Some((*m, p.len()));
    }
    let w = ws.get(i)?.lower.as_str();
    let m = if is_in(w, FIX_VERBS) {
        Marker::Fix
    } else if is_in(w, REMOVE_VERBS) {
        Marker::Remove
    } else if is_in(w, ADD_VERBS) {
        Marker::Add
    } else if is_in(w, MODIFY_VERBS) {
        Marker::Modify
    } else {
        return None;
    };
    Some((m, 1))
}

/// Words that carry meaning (not stop words, fillers, vague words).
fn content(ws: &[Word]) -> Vec<&Word> {
    ws.iter()
        .filter(|w| {
            !w.lower.is_empty()
                && !is_in(&w.lower, STOPWORDS)
                && !is_in(&w.lower, VAGUE_OBJECTS)
                && !is_in(&w.lower, VAGUE_PREDICATES)
                && !is_in(&w.lower, FILLERS)
                && w.lower.chars().any(char::is_alphanumeric)
        })
        .collect()
}

fn read_piece(piece: &Piece) -> Reading {
    let ws = words(&piece.text);
    let v = skip_fillers(&ws);
    let shown = drop_tokens(&piece.text, v).trim().to_string();
    if v >= ws.len() || shown.is_empty() {
        return Reading::Detail(piece.text.trim().to_string());
    }
    let rest = &ws[v..];
    let clause = matches!(piece.cut, Cut::Clause(_));

    // "keep X", "don't touch X", "leave X alone".
    if let Some(keep) = keep_instruction(rest, &shown) {
        return Reading::Keep(keep);
    }
    if clause && is_in(&rest[0].lower, SUBORDINATORS) {
        return Reading::Detail(shown_with_cut(piece));
    }
    let unit = request(piece, rest, &shown, clause);
    // A short head before a colon ("three things:", "bug:", "new flavor:").
    if piece.ends_with_colon && rest.len() <= 3 {
        return Reading::LeadIn(unit, shown);
    }
    match unit {
        Some(u) => Reading::Request(u),
        None => Reading::Detail(shown_with_cut(piece)),
    }
}

/// The request a piece makes, if any.
fn request(piece: &Piece, rest: &[Word], shown: &str, clause: bool) -> Option<Unit> {
    let first = rest[0].lower.as_str();
    let verb = imperative(rest, piece);
    let mut unit = if let Some((marker, n)) = verb {
        let object = &rest[n..];
        let marker = refine_verb(rest, marker, object);
        let mut u = Unit::new(shown.to_string(), marker);
        read_object(&mut u, &rest[..n], object, piece);
        u
    } else if let Some(u) = wish(rest, shown, piece) {
        u
    } else if has_problem(rest) && (!clause || has_subject(rest)) {
        Unit::new(shown.to_string(), Marker::Fix)
    } else if let Some(u) = should_statement(rest, shown) {
        u
    } else if !clause && is_bare_request(rest) {
        // "2 more drinks", "a todo app": ADD; "more contrast": more of a quality, MODIFY.
        let after_more = rest
            .iter()
            .position(|w| is_in(&w.lower, MORE_WORDS))
            .and_then(|i| rest.get(i + 1));
        let marker = match after_more {
            Some(w) if first == "more" && !is_plural(&w.lower) => Marker::Modify,
            _ => Marker::Add,
        };
        let mut u = Unit::new(shown.to_string(), marker);
        read_object(&mut u, &[], rest, piece);
        u
    } else {
        return None;
    };

    // "… without breaking a.txt": a.txt stays as it is.
    if let Some(i) = rest.iter().position(|w| w.lower == "without")
        && rest.get(i + 1).is_some_and(|w| {
            matches!(
                w.lower.as_str(),
                "breaking"
                    | "changing"
                    | "touching"
                    | "removing"
                    | "affecting"
                    | "losing"
                    | "deleting"
                    | "modifying"
            )
        })
        && i + 2 < rest.len()
    {
        let what: Vec<&str> = rest[i + 2..]
            .iter()
            .map(|w| w.text.as_str())
            .filter(|t| !t.is_empty())
            .collect();
        unit.keep = Some(format!(
            "{} ({} {})",
            what.join(" "),
            rest[i].text,
            rest[i + 1].text
        ));
    }

    // Questions: "use postgres or sqlite?" asks for a choice; "should we add X?" asks back.
    if piece.question && unit.blocking.is_none() {
        if rest.iter().any(|w| w.lower == "or") {
            unit.blocking = Some(format!(
                "\"{}?\" asks a question: which one should it be?",
                shorten(shown, 100)
            ));
        } else if verb.is_none()
            && matches!(first, "should" | "shall" | "do" | "does" | "which" | "what")
            && unit.marker != Marker::Fix
        {
            unit.blocking = Some(format!(
                "\"{}?\" is a question. Say what to do, e.g. \"{}\".",
                shorten(shown, 100),
                shorten(drop_tokens(shown, 2), 60)
            ));
        }
    }
    Some(unit)
}

/// Words that make the word before them a subject, not a verb ("store page is broken",
/// "test fails").
const AFTER_SUBJECT: &[&str] = &[
    "is", "are", "was", "were", "has", "have", "had", "doesn't", "don't", "isn't", "aren't",
    "can't", "won't", "should", "must", "needs", "seems", "looks", "can", "will", "keeps",
];

/// Determiners and pronouns that follow an imperative verb ("log the URL").
const DETERMINERS: &[&str] = &[
    "the", "a", "an", "all", "my", "our", "your", "this", "that", "these", "those", "every",
    "each", "it", "them", "some", "any", "its", "their",
];

/// The verb a piece starts with and how many words it takes. A known verb counts unless the
/// words after it show it is a noun ("store page is broken"); an unknown word followed by a
/// determiner ("invalidate it", "log the URL") is taken as a verb that changes something.
fn imperative(rest: &[Word], piece: &Piece) -> Option<(Marker, usize)> {
    if let Some((m, n)) = verb_at(rest, 0) {
        let next2: Vec<&str> = rest[n..].iter().take(2).map(|w| w.lower.as_str()).collect();
        let subject = next2.iter().any(|w| is_in(w, AFTER_SUBJECT))
            || (matches!(m, Marker::Add | Marker::Modify)
                && next2.first().is_some_and(|w| is_in(w, PROBLEM_WORDS)));
        if !subject {
            return Some((m, n));
        }
        return None;
    }
    let first = rest.first()?;
    let w = first.lower.as_str();
    let clause_ok = match &piece.cut {
        Cut::Clause(sep) => {
            let sep = sep.to_lowercase();
            sep.contains("and")
                || sep.contains("also")
                || sep.contains("then")
                || sep.contains("plus")
        }
        _ => true,
    };
    let verb_like = w.len() > 2
        && w.chars().all(|c| c.is_ascii_lowercase() || c == '-')
        && first.text.chars().next().is_some_and(|c| c.is_lowercase())
        && !w.ends_with('s')
        && !w.ends_with("ed")
        && !w.ends_with("ing")
        && !w.ends_with("ly")
        && !is_in(w, STOPWORDS)
        && !is_in(w, PROBLEM_WORDS)
        && !is_in(w, VAGUE_OBJECTS);
    let followed = rest.get(1).is_some_and(|x| is_in(&x.lower, DETERMINERS));
    if clause_ok && verb_like && followed {
        let next = rest.get(1).map(|x| x.lower.as_str()).unwrap_or("");
        let m = if matches!(next, "a" | "an" | "some") {
            Marker::Add
        } else {
            Marker::Modify
        };
        return Some((m, 1));
    }
    None
}

/// Whether a clause has its own subject ("the cart total is wrong"), so a problem in it is a
/// separate concern rather than a detail of the clause before ("… that highlights errors").
fn has_subject(rest: &[Word]) -> bool {
    let first = &rest[0];
    is_in(&first.lower, DETERMINERS)
        || first.text.contains(['/', '.'])
        || first.text.chars().next().is_some_and(char::is_uppercase)
        || first.lower.chars().all(|c| c.is_ascii_digit())
        || rest.iter().take(4).any(|w| is_in(&w.lower, AFTER_SUBJECT))
}

fn is_plural(w: &str) -> bool {
    w.len() > 3 && w.ends_with('s') && !w.ends_with("ss")
}

/// A detail's text, with what joined it ("less generic").
fn shown_with_cut(piece: &Piece) -> String {
    piece.text.trim().to_string()
}

/// "keep X …", "preserve X", "leave X alone", "don't touch X", "do not change X",
/// "X stays the same".
fn keep_instruction(ws: &[Word], shown: &str) -> Option<String> {
    let first = ws.first()?.lower.as_str();
    if is_in(first, KEEP_VERBS) {
        return Some(shown.to_string());
    }
    for p in [
        &["don't", "touch"][..],
        &["do", "not", "touch"],
        &["don't", "change"],
        &["do", "not", "change"],
        &["don't", "modify"],
        &["do", "not", "modify"],
        &["no", "changes", "to"],
        &["never", "touch"],
    ] {
        if starts_with_phrase(ws, 0, p) {
            return Some(shown.to_string());
        }
    }
    let stays = ws.iter().position(|w| {
        matches!(
            w.lower.as_str(),
            "stays" | "stay" | "remains" | "remain" | "unchanged" | "untouched"
        )
    });
    if let Some(i) = stays
        && i > 0
        && !has_problem(ws)
    {
        return Some(shown.to_string());
    }
    None
}

/// "make" and "turn" read by what follows; "fix" verbs stay; a MODIFY verb describing a
/// breakage ("make the toggle work") is a FIX.
fn refine_verb(ws: &[Word], marker: Marker, object: &[Word]) -> Marker {
    let verb = ws[0].lower.as_str();
    if verb == "make" {
        let next = object.first().map(|w| w.lower.as_str()).unwrap_or("");
        let works = object
            .iter()
            .any(|w| matches!(w.lower.as_str(), "work" | "works" | "working"));
        if works {
            return Marker::Fix;
        }
        if matches!(next, "a" | "an" | "new") {
            return Marker::Add;
        }
        if is_in(next, MORE_WORDS) || object.iter().take(3).any(|w| w.lower == "new") {
            return Marker::Add;
        }
        return Marker::Modify;
    }
    marker
}

/// Count, what an ADD adds to, where it goes, and whether the request is too vague or
/// ambiguous to carry out.
fn read_object(u: &mut Unit, verb: &[Word], object: &[Word], piece: &Piece) {
    let verb_word = verb.first().map(|w| w.lower.as_str()).unwrap_or("");
    let has_more = object.iter().any(|w| is_in(&w.lower, MORE_WORDS));
    let has_new = object.iter().any(|w| w.lower == "new");
    let has_into = object.iter().any(|w| w.lower == "into");

    // Count and noun: "2 more drinks", "three new flavors", "another mood".
    if matches!(u.marker, Marker::Add | Marker::Remove) {
        for i in 0..object.len() {
            let Some((n, used)) = number_at(object, i) else {
                continue;
            };
            let mut j = i + used;
            while object
                .get(j)
                .is_some_and(|w| is_in(&w.lower, MORE_WORDS) || w.lower == "new" || w.lower == "of")
            {
                j += 1;
            }
            let Some(next) = object.get(j) else { break };
            if is_in(&next.lower, UNITS) || next.lower.is_empty() {
                break;
            }
            // Skip "the" in "2 of the old ones".
            let after = &object[j..];
            let noun = after
                .iter()
                .take(3)
                .find(|w| w.lower.ends_with('s') && !w.lower.ends_with("ss") && w.lower.len() > 3)
                .or_else(|| after.iter().find(|w| !is_in(&w.lower, STOPWORDS)))
                .map(|w| w.lower.clone());
            u.count = Some(n);
            u.noun = noun;
            break;
        }
        if u.noun.is_none() && has_more {
            // "add more tests": what follows the word "more".
            if let Some(i) = object.iter().position(|w| is_in(&w.lower, MORE_WORDS)) {
                u.noun = object[i + 1..]
                    .iter()
                    .take(3)
                    .find(|w| !is_in(&w.lower, STOPWORDS) && !w.lower.is_empty())
                    .map(|w| w.lower.clone());
            }
        }
    }
    if u.marker == Marker::Add {
        u.keep_existing = has_more || (u.count.is_some() && has_new);
        u.target = target_of(object);
        if u.keep_existing && u.noun.is_some() {
            u.note = Some(format!(
                "\"{}\" is read as {} new {} added to the existing ones; none of the existing ones is converted",
                shorten(&u.text, 60),
                u.count.map_or("some".to_string(), |n| n.to_string()),
                u.noun.as_deref().map(plural).unwrap_or_default()
            ));
        }
    }

    let meaningful = content(object);
    let object_words: Vec<&Word> = object.iter().filter(|w| !w.lower.is_empty()).collect();
    if object_words.is_empty() {
        if u.marker == Marker::Fix {
            u.pronoun_only = true;
        } else if matches!(piece.cut, Cut::Clause(_)) || verb.len() > 1 {
            // "clean up" alone, or a verb in the middle of a sentence.
            u.blocking = Some(vague_question(&u.text));
        } else {
            u.verb_only = true;
        }
        return;
    }
    if meaningful.is_empty() {
        // "fix it", "make it better", "change that".
        u.pronoun_only = true;
        return;
    }

    // "make some drinks nighttime": create some, or change some of the existing ones?
    let quantified = object.first().is_some_and(|w| {
        matches!(w.lower.as_str(), "some" | "several" | "many" | "few")
            || (w.lower == "a" && object.get(1).is_some_and(|x| x.lower == "few"))
    }) || number_at(object, 0).is_some();
    if matches!(verb_word, "make" | "turn") && quantified && !has_new && !has_more && !has_into {
        let noun = object
            .iter()
            .find(|w| w.lower.ends_with('s') && w.lower.len() > 3)
            .map(|w| w.lower.clone())
            .unwrap_or_else(|| "items".into());
        u.blocking = Some(format!(
            "\"{}\": add new {noun}, or change some of the existing {noun}? For example \"add 2 new … {noun}, keep the existing ones\" or \"convert 2 of the existing {noun}\".",
            shorten(&u.text, 80)
        ));
        return;
    }

    // "add X or convert Y": two different changes offered.
    if let Some(i) = object.iter().position(|w| w.lower == "or") {
        let after = &object[i + 1..];
        let k = skip_fillers(after);
        if let Some((m, _)) = verb_at(after, k)
            && m != u.marker
        {
            u.blocking = Some(format!(
                "\"{}\" offers two different changes ({} or {}). Which one?",
                shorten(&u.text, 100),
                u.marker.label(),
                m.label()
            ));
            return;
        }
    }

    // "more nighttime stuff": more of what?
    let head = object.iter().rev().find(|w| !w.lower.is_empty());
    if head.is_some_and(|w| matches!(w.lower.as_str(), "stuff" | "things" | "thing" | "something"))
        && meaningful.len() <= 1
    {
        u.blocking = Some(vague_question(&u.text));
        return;
    }

    // "change the drinks": change how?
    if is_in(verb_word, GENERIC_VERBS)
        && verb_word != "make"
        && meaningful.len() <= 1
        && object_words.len() <= 3
        && !object.iter().any(|w| {
            matches!(
                w.lower.as_str(),
                "to" | "with" | "into" | "so" | "from" | "by" | "as" | "for" | "without"
            )
        })
    {
        u.blocking = Some(format!(
            "\"{}\": change what about {}, and how? Say what it should be afterwards.",
            shorten(&u.text, 80),
            object_words
                .iter()
                .map(|w| w.text.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
}

/// "to the footer", "in the README", "below the flavors" → "the footer".
fn target_of(object: &[Word]) -> Option<String> {
    let i = object
        .iter()
        .rposition(|w| is_in(&w.lower, TARGET_PREPOSITIONS))?;
    let rest: Vec<&str> = object[i + 1..]
        .iter()
        .take_while(|w| !is_in(&w.lower, SUBORDINATORS) || w.lower == "the")
        .map(|w| w.text.as_str())
        .filter(|t| !t.is_empty())
        .take(5)
        .collect();
    if rest.is_empty() || rest.iter().all(|t| is_in(&t.to_lowercase(), STOPWORDS)) {
        return None;
    }
    let t = rest.join(" ");
    let named = t.to_lowercase().starts_with("the ")
        || (rest.len() == 1 && rest[0].chars().any(|c| c == '.' || c == '/'));
    named.then_some(t)
}

/// "I want a …" → ADD; "I want the hero to feel …" → MODIFY; "we need …" the same.
fn wish(ws: &[Word], shown: &str, piece: &Piece) -> Option<Unit> {
    let mut i = 0;
    if matches!(ws.first()?.lower.as_str(), "i" | "we") {
        i = 1;
    }
    let w = ws.get(i)?.lower.as_str();
    let n = if matches!(w, "want" | "need" | "wanna") {
        1
    } else if starts_with_phrase(ws, i, &["would", "like"])
        || (matches!(w, "i'd" | "we'd") && ws.get(i + 1).is_some_and(|x| x.lower == "like"))
    {
        2
    } else {
        return None;
    };
    let object = &ws[i + n..];
    let next = object.first()?.lower.as_str();
    let marker = if matches!(next, "a" | "an" | "some" | "new")
        || is_in(next, MORE_WORDS)
        || number_at(object, 0).is_some()
    {
        Marker::Add
    } else if has_problem(object) {
        Marker::Fix
    } else {
        Marker::Modify
    };
    let mut u = Unit::new(shown.to_string(), marker);
    read_object(&mut u, &[], object, piece);
    Some(u)
}

/// "the navbar should be sticky" → MODIFY; "there should be a …" / "X should have …" /
/// "X needs a …" → ADD; "X should not …" → FIX.
fn should_statement(ws: &[Word], shown: &str) -> Option<Unit> {
    let i = ws
        .iter()
        .position(|w| matches!(w.lower.as_str(), "should" | "needs" | "must"))?;
    if i == 0 {
        return None;
    }
    let next = ws.get(i + 1).map(|w| w.lower.as_str()).unwrap_or("");
    let marker = match next {
        "not" | "never" => Marker::Fix,
        "have" | "get" | "include" | "show" | "a" | "an" => Marker::Add,
        _ if ws[0].lower == "there" => Marker::Add,
        _ => match verb_at(ws, i + 1) {
            Some((m, _)) => m,
            None => Marker::Modify,
        },
    };
    Some(Unit::new(shown.to_string(), marker))
}

/// A request without a verb: "a todo app in Rust", "new landing page", "2 more drinks",
/// "more nighttime stuff".
fn is_bare_request(ws: &[Word]) -> bool {
    let first = ws.first().map(|w| w.lower.as_str()).unwrap_or("");
    if matches!(first, "a" | "an" | "new") || is_in(first, MORE_WORDS) {
        return ws.len() >= 2;
    }
    number_at(ws, 0).is_some_and(|(_, used)| {
        ws.get(used)
            .is_some_and(|w| is_in(&w.lower, MORE_WORDS) || w.lower == "new")
    })
}

fn vague_question(text: &str) -> String {
    format!(
        "\"{}\" does not say what to change. Which part of the project, and what should it be afterwards?",
        shorten(text, 80)
    )
}

/// The answer's requests, each carrying the words of the request it settles: "Add 2 new
/// ones" answering "2 nighttime drinks" becomes "Add 2 new ones (2 nighttime drinks)", so
/// the drinks (and the files they map to) are not lost.
fn merged_answer(answer: &[Unit], original: &str) -> Vec<Unit> {
    let original = original.trim().trim_end_matches(['.', '!', '?']);
    answer
        .iter()
        .cloned()
        .map(|mut u| {
            let lower = u.text.to_lowercase();
            let covered = original
                .split_whitespace()
                .filter(|w| w.len() > 4)
                .all(|w| lower.contains(&w.to_lowercase()));
            if !original.is_empty() && !covered {
                u.text = format!("{} ({original})", u.text);
            }
            u
        })
        .collect()
}

/// PRESERVE lines: what the person said to keep, what each ADD adds to, where it goes, and
/// everything not named.
fn preserve_lines(read: &Read, kind: TaskKind) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut push = |s: String| {
        if !out.iter().any(|o| o.eq_ignore_ascii_case(&s)) {
            out.push(s);
        }
    };
    for k in &read.keeps {
        push(capitalize(k.trim_end_matches(['.', '!'])));
    }
    for u in read.units.iter().filter(|u| u.marker == Marker::Add) {
        if let (true, Some(noun)) = (u.keep_existing, &u.noun) {
            push(format!(
                "All existing {} unchanged (add new ones; never convert existing ones)",
                plural(noun)
            ));
        }
        if let Some(t) = &u.target {
            push(format!("Everything already in {t} (only add to it)"));
        }
    }
    if matches!(kind, TaskKind::Mutation | TaskKind::Bugfix) {
        push("Everything the requirements above do not name".into());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::{ProjectContext, TaskKind};
    use super::*;

    fn web() -> ProjectContext {
        ProjectContext {
            plan_exists: true,
            previous_summary: Some("Built the landing page".into()),
            files: [
                "src/components/HeroSection.tsx",
                "src/components/CTASection.tsx",
                "src/components/FlavorGrid.tsx",
                "src/components/ThemeToggle.tsx",
                "src/components/Footer.tsx",
                "src/data/flavors.ts",
                "src/index.css",
            ]
            .map(String::from)
            .to_vec(),
        }
    }

    fn run(message: &str) -> ParsedTask {
        parse(&ParseInput {
            message: message.into(),
            clarification: None,
            context: web(),
        })
    }

    fn markers(t: &ParsedTask) -> Vec<(Marker, Option<u32>)> {
        t.requirements.iter().map(|r| (r.marker, r.count)).collect()
    }

    #[test]
    fn vibrant_energy() {
        let t = run(
            "refine ad copy! less generic, more adult, less monster energy.\ntwo moods not working. add 2 more drinks for nighttime.",
        );
        assert_eq!(t.kind, TaskKind::Mutation);
        assert_eq!(
            markers(&t),
            [
                (Marker::Modify, None),
                (Marker::Fix, None),
                (Marker::Add, Some(2))
            ]
        );
        assert_eq!(
            t.requirements[0].text,
            "Refine ad copy — less generic, more adult, less monster energy"
        );
        assert!(t.requirements[2].keep_existing);
        assert!(
            t.preserve
                .iter()
                .any(|p| p.starts_with("All existing drinks unchanged")),
            "{:?}",
            t.preserve
        );
        assert!(
            t.affected_files
                .contains(&"src/components/HeroSection.tsx".to_string())
        );
    }

    #[test]
    fn keep_instructions_become_preserve_lines() {
        let t = run("Add three new flavors: Mango, Berry and Citrus. Keep the existing ones.");
        assert_eq!(markers(&t), [(Marker::Add, Some(3))]);
        assert!(
            t.preserve
                .contains(&"Keep the existing flavors".to_string()),
            "{:?}",
            t.preserve
        );
        assert!(
            t.affected_files
                .contains(&"src/data/flavors.ts".to_string())
        );
    }

    #[test]
    fn vague_and_ambiguous_messages_ask() {
        for m in [
            "make some drinks nighttime",
            "make it better",
            "hmm, the drinks",
            "use postgres or sqlite?",
            "change the drinks",
            "fix it",
            "add nighttime drinks or convert some of the existing ones",
        ] {
            let t = run(m);
            assert_eq!(t.kind, TaskKind::NeedsClarification, "{m}: {t:?}");
            assert!(t.question.as_deref().is_some_and(|q| !q.is_empty()), "{m}");
        }
    }

    #[test]
    fn an_answer_settles_the_question() {
        let t = parse(&ParseInput {
            message: "make some drinks nighttime".into(),
            clarification: Some(super::super::Clarification {
                question: "add or convert?".into(),
                answer: "add 2 new nighttime drinks, keep the existing ones".into(),
            }),
            context: web(),
        });
        assert_eq!(t.kind, TaskKind::Mutation);
        assert_eq!(markers(&t), [(Marker::Add, Some(2))]);
        assert!(t.preserve.iter().any(|p| p.contains("existing")));
        // A short answer keeps the request it answers: the drinks are not lost.
        let t = parse(&ParseInput {
            message: "2 nighttime drinks".into(),
            clarification: Some(super::super::Clarification {
                question: "what should change?".into(),
                answer: "Add 2 new ones".into(),
            }),
            context: web(),
        });
        assert_eq!(markers(&t), [(Marker::Add, Some(2))]);
        assert_eq!(
            t.requirements[0].text,
            "Add 2 new ones (2 nighttime drinks)"
        );
        assert!(
            t.affected_files
                .contains(&"src/data/flavors.ts".to_string()),
            "{t:?}"
        );
    }

    #[test]
    fn bugfix_fresh_and_clauses() {
        assert_eq!(run("fix the theme toggle").kind, TaskKind::Bugfix);
        assert_eq!(run("build me a dashboard").kind, TaskKind::Fresh);
        let t = run("fix the toggle and add a third mood");
        assert_eq!(t.kind, TaskKind::Mutation);
        assert_eq!(markers(&t), [(Marker::Fix, None), (Marker::Add, None)]);
        let t = run("remove the store page and the nav link to it");
        assert_eq!(markers(&t), [(Marker::Remove, None)]);
        let t = run("tests fail since the last change, please fix");
        assert_eq!(markers(&t), [(Marker::Fix, None)]);
        assert_eq!(t.kind, TaskKind::Bugfix);
    }

    #[test]
    fn without_breaking_is_kept() {
        let t = run("add b.txt without breaking a.txt");
        assert_eq!(markers(&t), [(Marker::Add, None)]);
        assert_eq!(t.preserve[0], "a.txt (without breaking)");
    }

    #[test]
    fn empty_project_is_fresh() {
        let t = parse(&ParseInput {
            message: "a todo app in Rust".into(),
            clarification: None,
            context: ProjectContext::default(),
        });
        assert_eq!(t.kind, TaskKind::Fresh);
        assert_eq!(markers(&t), [(Marker::Add, None)]);
    }
}
