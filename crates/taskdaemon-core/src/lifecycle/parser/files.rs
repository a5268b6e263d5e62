//! Which of the repository's files a requirement most likely touches: words of the
//! requirement matched against the words of each path (`src/components/FlavorGrid.tsx` →
//! components, flavor, grid), rarer words weighing more, and paths named outright.

use std::collections::{BTreeMap, BTreeSet};

use super::Requirement;
use super::words::{
    ADD_VERBS, FIX_VERBS, MODIFY_VERBS, REMOVE_VERBS, STOPWORDS, is_in, stem, words,
};

/// At most this many files per requirement and in all.
const PER_REQUIREMENT: usize = 3;
const TOTAL: usize = 12;

/// Words that point at files named differently: a word → words in file names.
const SYNONYMS: &[(&str, &[&str])] = &[
    ("copy", &["hero", "cta", "content", "copy", "text"]),
    ("headline", &["hero", "header", "heading", "title"]),
    ("heading", &["hero", "header", "heading", "title"]),
    ("tagline", &["hero", "header"]),
    ("button", &["button", "cta"]),
    ("mood", &["theme", "mood", "toggle"]),
    ("dark", &["theme", "mood"]),
    ("color", &["css", "style", "theme", "color"]),
    ("colour", &["css", "style", "theme", "color"]),
    ("font", &["css", "style", "theme", "typography"]),
    ("style", &["css", "style", "theme"]),
    ("styling", &["css", "style", "theme"]),
    ("look", &["css", "style", "theme"]),
    ("layout", &["css", "layout", "grid"]),
    ("drink", &["flavor", "flavour", "product", "item", "drink"]),
    ("product", &["flavor", "product", "item", "catalog"]),
    ("nav", &["nav", "navbar", "navigation", "menu", "header"]),
    ("navbar", &["nav", "navbar", "navigation", "header"]),
    (
        "navigation",
        &["nav", "navbar", "navigation", "router", "menu"],
    ),
    ("link", &["nav", "link", "router"]),
    ("route", &["router", "route", "routes"]),
    ("routing", &["router", "route", "routes"]),
    ("test", &["test", "tests", "spec"]),
    ("doc", &["readme", "docs", "doc", "usage"]),
    ("documentation", &["readme", "docs", "doc", "usage"]),
    ("usage", &["usage", "readme", "docs"]),
    ("example", &["readme", "example", "examples"]),
    ("command", &["command", "commands", "cli", "cmd"]),
    ("subcommand", &["command", "commands", "cli"]),
    ("argument", &["cli", "args", "arg", "options"]),
    ("flag", &["cli", "args", "config", "options"]),
    ("option", &["cli", "config", "options"]),
    ("error", &["error", "errors", "err"]),
    ("dependency", &["cargo", "package"]),
    ("login", &["login", "auth", "session"]),
    ("auth", &["auth", "login", "session"]),
    ("signup", &["signup", "register", "auth"]),
    ("setting", &["settings", "config", "preferences"]),
    ("config", &["config", "settings", "configuration"]),
    (
        "database",
        &["db", "database", "store", "schema", "migration"],
    ),
    ("storage", &["db", "store", "storage", "database"]),
    ("price", &["price", "pricing", "cart"]),
    ("badge", &["badge"]),
    ("timer", &["countdown", "timer"]),
    ("countdown", &["countdown", "timer"]),
    ("page", &["page", "pages", "view", "screen"]),
    ("card", &["card", "cards"]),
    ("grid", &["grid"]),
    ("image", &["image", "images", "img"]),
    ("menu", &["menu", "nav"]),
    ("stdin", &["main", "input", "cli", "io"]),
    ("input", &["input", "parser", "main"]),
    ("number", &["parser", "number", "tokenize"]),
];

/// Files that are never worth naming.
fn ignored(path: &str) -> bool {
    let lower = path.to_lowercase();
    let name = lower.rsplit('/').next().unwrap_or(&lower);
    lower.starts_with(".ralph/")
        || lower.starts_with(".git/")
        || matches!(
            name,
            "cargo.lock" | "package-lock.json" | "yarn.lock" | "pnpm-lock.yaml" | "poetry.lock"
        )
        || [
            ".png", ".jpg", ".jpeg", ".gif", ".ico", ".webp", ".woff", ".woff2", ".ttf", ".pdf",
            ".zip", ".gz", ".mp4", ".mp3", ".lock",
        ]
        .iter()
        .any(|e| name.ends_with(e))
}

/// The words of a path: directories, the name without extension, camelCase and snake_case
/// split, stemmed. The second set holds the words of the file name alone.
fn path_words(path: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut all = BTreeSet::new();
    let mut name_words = BTreeSet::new();
    let parts: Vec<&str> = path.split('/').collect();
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        let base = if last {
            match part.rfind('.') {
                Some(d) if d > 0 => &part[..d],
                _ => part,
            }
        } else {
            part
        };
        for w in split_identifier(base) {
            let s = stem(&w);
            all.insert(s.clone());
            if last {
                name_words.insert(s);
            }
        }
    }
    (all, name_words)
}

/// `CTASection` → cta, section; `flavor_grid-v2` → flavor, grid, v2.
fn split_identifier(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let chars: Vec<char> = s.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_alphanumeric() {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur).to_lowercase());
            }
            continue;
        }
        let prev = i.checked_sub(1).and_then(|j| chars.get(j)).copied();
        let next = chars.get(i + 1).copied();
        let boundary = c.is_uppercase()
            && !cur.is_empty()
            && (prev.is_some_and(char::is_lowercase)
                || (prev.is_some_and(char::is_uppercase) && next.is_some_and(char::is_lowercase)));
        if boundary {
            out.push(std::mem::take(&mut cur).to_lowercase());
        }
        cur.push(c);
    }
    if !cur.is_empty() {
        out.push(cur.to_lowercase());
    }
    out
}

/// The words of a requirement worth matching, stemmed, each with its synonyms.
fn requirement_terms(text: &str) -> Vec<(String, Vec<String>)> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for (i, w) in words(text).into_iter().enumerate() {
        // The verb a requirement starts with names no file ("Remove the store page").
        let verb = i == 0
            && (is_in(&w.lower, ADD_VERBS)
                || is_in(&w.lower, MODIFY_VERBS)
                || is_in(&w.lower, FIX_VERBS)
                || is_in(&w.lower, REMOVE_VERBS));
        for part in split_identifier(&w.text) {
            let l = part.to_lowercase();
            if verb || l.len() < 2 || is_in(&l, STOPWORDS) || l.chars().all(|c| c.is_ascii_digit())
            {
                continue;
            }
            let s = stem(&l);
            if !seen.insert(s.clone()) {
                continue;
            }
            let syns = SYNONYMS
                .iter()
                .find(|(k, _)| *k == s || *k == l)
                .map(|(_, v)| v.iter().map(|x| stem(x)).filter(|x| *x != s).collect())
                .unwrap_or_default();
            out.push((s, syns));
        }
    }
    out
}

fn word_match(a: &str, b: &str) -> bool {
    a == b || (a.len() >= 4 && b.len() >= 4 && (a.starts_with(b) || b.starts_with(a)))
}

/// Paths named in the text ("src/data/flavors.ts", "config.rs", "README").
fn named_paths<'a>(text: &str, files: &'a [String]) -> Vec<&'a String> {
    let mut out = Vec::new();
    for w in words(text) {
        let t = w.text.trim_start_matches("./");
        if !(t.contains('.') || t.contains('/')) || t.len() < 3 {
            continue;
        }
        let lower = t.to_lowercase();
        for f in files {
            let fl = f.to_lowercase();
            if fl == lower || fl.ends_with(&format!("/{lower}")) {
                out.push(f);
            }
        }
    }
    out
}

/// The files the requirements most likely touch, best first, in requirement order.
pub(crate) fn affected(requirements: &[Requirement], files: &[String]) -> Vec<String> {
    let candidates: Vec<(&String, BTreeSet<String>, BTreeSet<String>)> = files
        .iter()
        .filter(|f| !ignored(f))
        .map(|f| {
            let (all, name) = path_words(f);
            (f, all, name)
        })
        .collect();
    // Which files each stemmed word appears in; how many, for weighting rare words higher.
    let mut by_word: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, (_, all, _)) in candidates.iter().enumerate() {
        for w in all {
            by_word.entry(w.as_str()).or_default().push(i);
        }
    }
    let df: BTreeMap<&str, usize> = by_word.iter().map(|(w, v)| (*w, v.len())).collect();
    // How rare a requirement word is among the paths: 1/sqrt(files it matches).
    let rarity = |term: &str| -> f64 {
        let n: usize = df
            .iter()
            .filter(|(w, _)| word_match(term, w))
            .map(|(_, n)| *n)
            .sum::<usize>()
            .max(1);
        1.0 / (n as f64).sqrt()
    };

    let mut out: Vec<String> = Vec::new();
    for r in requirements {
        let mut chosen: Vec<&String> = named_paths(&r.text, files);
        // Per word of the requirement: the path words it matches, its synonyms, their weights.
        struct Term<'a> {
            matches: BTreeSet<&'a str>,
            synonyms: Vec<String>,
            rarity: f64,
            synonym_rarity: f64,
        }
        let terms: Vec<Term> = requirement_terms(&r.text)
            .into_iter()
            .map(|(t, synonyms)| Term {
                matches: df.keys().filter(|w| word_match(&t, w)).copied().collect(),
                rarity: rarity(&t),
                synonym_rarity: rarity_of_any(&synonyms, &df),
                synonyms,
            })
            .filter(|t| !t.matches.is_empty() || !t.synonyms.is_empty())
            .collect();
        // Only the files that share a word with the requirement can score.
        let touched: BTreeSet<usize> = terms
            .iter()
            .flat_map(|t| {
                t.matches
                    .iter()
                    .copied()
                    .chain(t.synonyms.iter().map(String::as_str))
            })
            .filter_map(|w| by_word.get(w))
            .flatten()
            .copied()
            .collect();
        let mut scored: Vec<(f64, &String)> = Vec::new();
        for (f, all, name) in touched.into_iter().filter_map(|i| candidates.get(i)) {
            let mut score = 0.0;
            for t in &terms {
                let direct = if name.iter().any(|w| t.matches.contains(w.as_str())) {
                    1.0
                } else if all.iter().any(|w| t.matches.contains(w.as_str())) {
                    0.4
                } else {
                    0.0
                };
                let via_synonym = t
                    .synonyms
                    .iter()
                    .map(|s| {
                        if name.contains(s) {
                            0.6
                        } else if all.contains(s) {
                            0.25
                        } else {
                            0.0
                        }
                    })
                    .fold(0.0, f64::max);
                score += f64::max(direct * t.rarity, via_synonym * t.synonym_rarity);
            }
            if score > 0.0 {
                scored.push((score, f));
            }
        }
        scored.sort_by(|a, b| {
            b.0.partial_cmp(&a.0)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then_with(|| a.1.len().cmp(&b.1.len()))
                .then_with(|| a.1.cmp(b.1))
        });
        let top = scored.first().map_or(0.0, |s| s.0);
        for (s, f) in scored {
            if s >= 0.35 && s >= top * 0.6 && chosen.len() < PER_REQUIREMENT {
                chosen.push(f);
            }
        }
        for f in chosen {
            if !out.contains(f) && out.len() < TOTAL {
                out.push(f.clone());
            }
        }
    }
    out
}

/// The weight of a synonym match: lower when the synonyms are common in the file names.
fn rarity_of_any(syns: &[String], df: &BTreeMap<&str, usize>) -> f64 {
    let n = syns
        .iter()
        .map(|s| df.get(s.as_str()).copied().unwrap_or(0))
        .filter(|n| *n > 0)
        .min()
        .unwrap_or(1);
    1.0 / (n as f64).sqrt()
}

#[cfg(test)]
mod tests {
    use super::super::Marker;
    use super::*;

    fn req(text: &str) -> Requirement {
        Requirement {
            marker: Marker::Modify,
            text: text.into(),
            count: None,
            keep_existing: false,
        }
    }

    #[test]
    fn identifiers_split() {
        assert_eq!(split_identifier("CTASection"), ["cta", "section"]);
        assert_eq!(split_identifier("flavor_grid-v2"), ["flavor", "grid", "v2"]);
        assert_eq!(split_identifier("HeroSection"), ["hero", "section"]);
    }

    #[test]
    fn requirements_find_their_files() {
        let files: Vec<String> = [
            "src/components/HeroSection.tsx",
            "src/components/FlavorGrid.tsx",
            "src/components/Footer.tsx",
            "src/pages/Store.tsx",
            "src/pages/Landing.tsx",
            "src/data/flavors.ts",
            "src/config.rs",
            "public/logo.png",
        ]
        .map(String::from)
        .to_vec();
        let got = affected(&[req("Remove the store page")], &files);
        assert_eq!(got, ["src/pages/Store.tsx"]);
        let got = affected(&[req("bug: config.rs ignores --verbose")], &files);
        assert_eq!(got.first().map(String::as_str), Some("src/config.rs"));
        let got = affected(&[req("Add 2 more drinks")], &files);
        assert!(got.contains(&"src/data/flavors.ts".to_string()), "{got:?}");
        assert!(affected(&[req("Replace the logo")], &files).is_empty());
    }
}
