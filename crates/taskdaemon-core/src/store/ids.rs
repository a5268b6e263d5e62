//! Record ids (spec 3 §7): `{hex}-{kind}-{slug}`, e.g. `3f9a1c-spec-oauth-endpoints`.
//!
//! The spec takes the hex from the first 6 hex digits of a UUIDv7; those are the top 24
//! bits of a millisecond timestamp and change only every ~4.7 hours, so records made the
//! same afternoon would share them (and the random part of this crate's UUIDv7 starts
//! with a counter, so consecutive ones share their next digits too). Here the hex is
//! random (a UUIDv4's bits): records made in quick succession differ, and a hex already
//! used in the store (by any record, deleted ones included) is lengthened one digit at a
//! time until it is unique.
//! Chronological order comes from `created-at`, not from the id.
//!
//! Resolution of a reference, first rule that matches anything decides: the full id; the
//! hex exactly; ids whose slug (everything after the hex, `spec-oauth-endpoints`) starts
//! with it; ids whose slug contains it. One match is found, several are ambiguous (all
//! listed), none is "not found" with the nearest ids.

use super::records::Kind;

pub const HEX_LEN: usize = 6;
pub const SLUG_MAX: usize = 40;

/// `(hex, kind tag, title slug)` of a well-formed id.
pub fn split(id: &str) -> Option<(&str, &str, &str)> {
    let (hex, rest) = id.split_once('-')?;
    let (tag, slug) = rest.split_once('-').unwrap_or((rest, ""));
    let hex_ok =
        hex.len() >= HEX_LEN && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    (hex_ok && !tag.is_empty()).then_some((hex, tag, slug))
}

/// The kind named in an id.
pub fn kind_of(id: &str) -> Option<Kind> {
    split(id).and_then(|(_, tag, _)| Kind::from_tag(tag))
}

/// The part after the hex: `spec-oauth-endpoints`.
pub fn slug_part(id: &str) -> &str {
    id.split_once('-').map_or(id, |(_, rest)| rest)
}

/// Lowercase, runs of anything but letters and digits become one hyphen, no hyphen at
/// either end, at most 40 characters (cut at a hyphen when one is near).
pub fn slugify(title: &str) -> String {
    let mut out = String::new();
    for c in title.chars() {
        if c.is_alphanumeric() {
            out.extend(c.to_lowercase());
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    let mut slug: String = out.trim_end_matches('-').to_string();
    if slug.chars().count() > SLUG_MAX {
        let cut: String = slug.chars().take(SLUG_MAX).collect();
        let at_boundary = slug.chars().nth(SLUG_MAX) == Some('-');
        // Prefer ending at a word boundary if one is in the last third.
        slug = match cut.rfind('-') {
            Some(i) if !at_boundary && i >= SLUG_MAX * 2 / 3 => cut[..i].to_string(),
            _ => cut.trim_end_matches('-').to_string(),
        };
    }
    if slug.is_empty() {
        "untitled".into()
    } else {
        slug
    }
}

/// 15 random hex digits (a UUIDv4's last 60 bits, all random), to take a prefix of.
pub fn random_hex() -> String {
    let bits = uuid::Uuid::new_v4().as_u128() & ((1u128 << 60) - 1);
    format!("{bits:015x}")
}

/// A new id for `kind` and `title` whose hex is not `taken`: the first 6 digits of a
/// random hex, lengthened while taken.
pub fn new_id(kind: Kind, title: &str, taken: &dyn Fn(&str) -> bool) -> String {
    let slug = slugify(title);
    loop {
        let hex = random_hex();
        for len in HEX_LEN..=hex.len() {
            let h = &hex[..len];
            if !taken(h) {
                return format!("{h}-{}-{slug}", kind.tag());
            }
        }
    }
}

/// How a reference resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    Found(String),
    Ambiguous(Vec<String>),
    NotFound { nearest: Vec<String> },
}

/// What resolution needs to know about the ids in the store (live ones only).
pub trait IdSource {
    /// Is this a live id?
    fn exact(&self, id: &str) -> bool;
    /// Live ids with this hex.
    fn by_hex(&self, hex: &str) -> Vec<String>;
    /// Live ids containing `needle`, with the byte offsets where it occurs.
    fn search(&self, needle: &str) -> Vec<(String, Vec<usize>)>;
    /// Every live id (for suggestions when nothing matches).
    fn all(&self) -> Vec<String>;
}

/// Resolve `reference` (case-insensitive).
pub fn resolve(reference: &str, ids: &dyn IdSource) -> Resolution {
    let r = reference.trim().to_lowercase();
    if r.is_empty() {
        return Resolution::NotFound { nearest: vec![] };
    }
    if ids.exact(&r) {
        return Resolution::Found(r);
    }
    if r.len() >= HEX_LEN
        && r.bytes().all(|b| b.is_ascii_hexdigit())
        && let Some(found) = decide(ids.by_hex(&r))
    {
        return found;
    }
    let mut prefix = Vec::new();
    let mut contains = Vec::new();
    for (id, offsets) in ids.search(&r) {
        // The slug starts after the hex and its hyphen.
        let slug_start = id.find('-').map_or(usize::MAX, |i| i + 1);
        if offsets.contains(&slug_start) {
            prefix.push(id);
        } else if offsets.iter().any(|o| *o >= slug_start) {
            contains.push(id);
        }
    }
    if let Some(found) = decide(prefix).or_else(|| decide(contains)) {
        return found;
    }
    let all = ids.all();
    Resolution::NotFound {
        nearest: nearest(&r, all.iter().map(String::as_str), 3),
    }
}

fn decide(mut hits: Vec<String>) -> Option<Resolution> {
    match hits.len() {
        0 => None,
        1 => hits.pop().map(Resolution::Found),
        _ => {
            hits.sort();
            Some(Resolution::Ambiguous(hits))
        }
    }
}

/// The ids most like `reference`: shared character pairs (strsim's Sørensen–Dice) over
/// the slug, or a shared start of the hex.
pub fn nearest<'a>(reference: &str, ids: impl Iterator<Item = &'a str>, n: usize) -> Vec<String> {
    let mut scored: Vec<(f64, String)> = ids
        .filter_map(|id| {
            let hex = id.split('-').next().unwrap_or("");
            let common_hex = hex
                .chars()
                .zip(reference.chars())
                .take_while(|(a, b)| a == b)
                .count();
            let dice = strsim::sorensen_dice(reference, slug_part(id));
            let score = dice.max(if common_hex >= 2 {
                common_hex as f64 / hex.len() as f64
            } else {
                0.0
            });
            (score > 0.2).then(|| (score, id.to_string()))
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    scored.into_iter().take(n).map(|(_, id)| id).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs() {
        assert_eq!(slugify("OAuth API Endpoints"), "oauth-api-endpoints");
        assert_eq!(slugify("  --Fix: the (big) bug!! "), "fix-the-big-bug");
        assert_eq!(slugify("???"), "untitled");
        assert_eq!(slugify("Überprüfung der Ä"), "überprüfung-der-ä");
        let long = slugify("implement the token validation for every single endpoint we have");
        assert!(long.chars().count() <= SLUG_MAX, "{long}");
        assert_eq!(long, "implement-the-token-validation-for-every");
        assert_eq!(slugify(&"x".repeat(100)).len(), 40);
        assert_eq!(
            slugify("implement the token validation for everything"),
            "implement-the-token-validation-for"
        );
    }

    #[test]
    fn ids_split_and_lengthen_on_collision() {
        assert_eq!(
            split("019432-spec-oauth-endpoints"),
            Some(("019432", "spec", "oauth-endpoints"))
        );
        assert_eq!(split("xyz-spec-a"), None);
        let id = new_id(Kind::Plan, "Add OAuth", &|_| false);
        let (hex, tag, slug) = split(&id).unwrap();
        assert_eq!((hex.len(), tag, slug), (6, "plan", "add-oauth"));
        // Every 6- and 7-digit hex taken: the id gets 8.
        let id = new_id(Kind::Plan, "x", &|h| h.len() < 8);
        assert_eq!(split(&id).unwrap().0.len(), 8);
        // Quick succession: different hex.
        let a: std::collections::HashSet<String> =
            (0..1000).map(|_| random_hex()[..6].to_string()).collect();
        assert!(a.len() > 990, "{}", a.len());
    }

    fn ids() -> Vec<&'static str> {
        vec![
            "019430-plan-add-oauth",
            "019432-spec-oauth-db-schema",
            "019433-spec-oauth-endpoints",
            "019434-spec-oauth-tests",
        ]
    }

    struct Fixed(Vec<&'static str>);

    impl IdSource for Fixed {
        fn exact(&self, id: &str) -> bool {
            self.0.contains(&id)
        }
        fn by_hex(&self, hex: &str) -> Vec<String> {
            self.0
                .iter()
                .filter(|i| i.starts_with(&format!("{hex}-")))
                .map(|s| s.to_string())
                .collect()
        }
        fn search(&self, needle: &str) -> Vec<(String, Vec<usize>)> {
            self.0
                .iter()
                .filter_map(|id| {
                    let offs: Vec<usize> = id.match_indices(needle).map(|(i, _)| i).collect();
                    (!offs.is_empty()).then(|| (id.to_string(), offs))
                })
                .collect()
        }
        fn all(&self) -> Vec<String> {
            self.0.iter().map(|s| s.to_string()).collect()
        }
    }

    fn run(r: &str) -> Resolution {
        resolve(r, &Fixed(ids()))
    }

    #[test]
    fn the_spec_examples() {
        assert_eq!(
            run("oauth-db"),
            Resolution::Found("019432-spec-oauth-db-schema".into())
        );
        assert_eq!(
            run("oauth"),
            Resolution::Ambiguous(vec![
                "019430-plan-add-oauth".into(),
                "019432-spec-oauth-db-schema".into(),
                "019433-spec-oauth-endpoints".into(),
                "019434-spec-oauth-tests".into(),
            ])
        );
        assert_eq!(
            run("019433"),
            Resolution::Found("019433-spec-oauth-endpoints".into())
        );
        assert_eq!(
            run("019432-spec-oauth-db-schema"),
            Resolution::Found("019432-spec-oauth-db-schema".into())
        );
        assert_eq!(
            run("spec-oauth"),
            Resolution::Ambiguous(vec![
                "019432-spec-oauth-db-schema".into(),
                "019433-spec-oauth-endpoints".into(),
                "019434-spec-oauth-tests".into(),
            ])
        );
        assert_eq!(
            run("spec-oauth-t"),
            Resolution::Found("019434-spec-oauth-tests".into())
        );
        assert_eq!(
            run("endpoints"),
            Resolution::Found("019433-spec-oauth-endpoints".into())
        );
        assert_eq!(
            run("PLAN"),
            Resolution::Found("019430-plan-add-oauth".into())
        );
        match run("oauth-endpoint-tests") {
            Resolution::NotFound { nearest } => {
                assert!(
                    nearest.contains(&"019433-spec-oauth-endpoints".to_string()),
                    "{nearest:?}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            run("019439"),
            Resolution::NotFound {
                nearest: ids().iter().map(|s| s.to_string()).take(3).collect()
            }
        );
    }
}
