//! User stories (`tasks.json` / `prd.json`) and the rules of the review cycle: which mode
//! an iteration runs in, and which changes to the file that mode may make, checked
//! against a snapshot taken before the iteration.

use serde_json::Value;

pub const NEEDS_REVIEW: &str = "needs_review";
pub const CHANGES_REQUESTED: &str = "changes_requested";
pub const APPROVED: &str = "approved";

/// One story, as the rules see it.
#[derive(Debug, Clone, PartialEq)]
pub struct Story {
    pub id: String,
    pub title: String,
    pub description: String,
    pub acceptance: Vec<String>,
    pub priority: i64,
    pub passes: bool,
    pub review_status: Option<String>,
    pub review_count: u64,
    pub review_feedback: Option<String>,
    pub notes: String,
    pub depends_on: Vec<String>,
}

impl Story {
    pub fn approved(&self) -> bool {
        self.review_status.as_deref() == Some(APPROVED)
    }

    /// Done for the run: passes, and approved unless review is skipped.
    pub fn done(&self, review: bool) -> bool {
        self.passes && (!review || self.approved())
    }
}

/// Where the stories are in the JSON document: `stories`, `userStories` or the top array.
pub fn stories_array(doc: &Value) -> Option<&Vec<Value>> {
    match doc {
        Value::Array(a) => Some(a),
        Value::Object(o) => ["stories", "userStories", "tasks"]
            .iter()
            .find_map(|k| o.get(*k).and_then(Value::as_array)),
        _ => None,
    }
}

pub fn stories_array_mut(doc: &mut Value) -> Option<&mut Vec<Value>> {
    match doc {
        Value::Array(a) => Some(a),
        Value::Object(o) => {
            let key = ["stories", "userStories", "tasks"]
                .into_iter()
                .find(|k| o.get(*k).is_some_and(Value::is_array))?;
            o.get_mut(key).and_then(Value::as_array_mut)
        }
        _ => None,
    }
}

fn text(v: &Value, key: &str) -> Option<String> {
    match v.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

fn list(v: &Value, key: &str) -> Vec<String> {
    match v.get(key) {
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| {
                x.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| x.to_string())
            })
            .collect(),
        Some(Value::String(s)) if !s.trim().is_empty() => vec![s.clone()],
        _ => Vec::new(),
    }
}

/// Parse a stories file; the error says what is wrong and where.
pub fn parse(textual: &str) -> Result<Vec<Story>, String> {
    let doc: Value = serde_json::from_str(textual).map_err(|e| format!("not valid JSON: {e}"))?;
    let arr = stories_array(&doc).ok_or_else(|| {
        "no stories: expected a JSON array, or an object with a `stories` or `userStories` array"
            .to_string()
    })?;
    let mut out = Vec::new();
    for (n, v) in arr.iter().enumerate() {
        if !v.is_object() {
            return Err(format!("story {} is not an object", n + 1));
        }
        let id = text(v, "id").ok_or_else(|| format!("story {} has no `id`", n + 1))?;
        if out.iter().any(|s: &Story| s.id == id) {
            return Err(format!("story id `{id}` appears twice"));
        }
        out.push(Story {
            title: text(v, "title").unwrap_or_default(),
            description: text(v, "description").unwrap_or_default(),
            acceptance: list(v, "acceptanceCriteria"),
            priority: v
                .get("priority")
                .and_then(Value::as_i64)
                .unwrap_or(i64::MAX),
            passes: v.get("passes").and_then(Value::as_bool).unwrap_or(false),
            review_status: text(v, "reviewStatus").filter(|s| !s.is_empty()),
            review_count: v.get("reviewCount").and_then(Value::as_u64).unwrap_or(0),
            review_feedback: text(v, "reviewFeedback").filter(|s| !s.trim().is_empty()),
            notes: text(v, "notes").unwrap_or_default(),
            depends_on: list(v, "dependsOn"),
            id,
        });
    }
    Ok(out)
}

/// What one iteration is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    Implement(String),
    Review(String),
    ReviewFix(String),
    /// Everything passes: the agent only confirms with COMPLETE.
    Finish,
}

impl Mode {
    pub fn name(&self) -> &'static str {
        match self {
            Mode::Implement(_) => "implement",
            Mode::Review(_) => "review",
            Mode::ReviewFix(_) => "review-fix",
            Mode::Finish => "finish",
        }
    }

    pub fn story(&self) -> Option<&str> {
        match self {
            Mode::Implement(s) | Mode::Review(s) | Mode::ReviewFix(s) => Some(s),
            Mode::Finish => None,
        }
    }
}

/// The mode of the next iteration: review-fix if any story has changes requested, else
/// review if any needs review, else implement the highest-priority (lowest number) story
/// whose dependencies pass. `None`: stories remain but none can start.
pub fn choose(stories: &[Story], review: bool) -> Option<Mode> {
    if review {
        if let Some(s) = stories
            .iter()
            .find(|s| s.review_status.as_deref() == Some(CHANGES_REQUESTED))
        {
            return Some(Mode::ReviewFix(s.id.clone()));
        }
        if let Some(s) = stories
            .iter()
            .find(|s| s.review_status.as_deref() == Some(NEEDS_REVIEW))
        {
            return Some(Mode::Review(s.id.clone()));
        }
    }
    if stories.iter().all(|s| s.done(review)) {
        return Some(Mode::Finish);
    }
    let passing = |id: &str| stories.iter().any(|s| s.id == id && s.passes);
    stories
        .iter()
        .filter(|s| !s.done(review) && s.depends_on.iter().all(|d| passing(d)))
        .min_by_key(|s| s.priority)
        .map(|s| Mode::Implement(s.id.clone()))
}

/// Check the changes of one iteration in `mode`; the changes made (for the record) or
/// why they break the rules.
pub fn check(
    mode: &Mode,
    before: &[Story],
    after: &[Story],
    review: bool,
) -> Result<Vec<String>, String> {
    let ids = |v: &[Story]| {
        let mut i: Vec<String> = v.iter().map(|s| s.id.clone()).collect();
        i.sort();
        i
    };
    if ids(before) != ids(after) {
        return Err(
            "stories were added or removed; only change the fields of existing stories".into(),
        );
    }
    let pairs: Vec<Pair> = before
        .iter()
        .filter_map(|b| after.iter().find(|a| a.id == b.id).map(|a| (b, a)))
        .collect();
    let changes = describe_changes(&pairs);
    let changed = |differs: fn(&Story, &Story) -> bool| -> Vec<Pair> {
        pairs
            .iter()
            .copied()
            .filter(|(b, a)| differs(b, a))
            .collect()
    };
    let passes_changed = changed(|b, a| b.passes != a.passes);
    let count_changed = changed(|b, a| b.review_count != a.review_count);
    let status_changed = changed(|b, a| b.review_status != a.review_status);
    match mode {
        Mode::Implement(_) if !review => check_implement(&passes_changed, &count_changed)?,
        Mode::Implement(_) => {
            check_implement_for_review(&passes_changed, &count_changed, &status_changed)?
        }
        Mode::Review(target) => check_review(target, &pairs, &count_changed)?,
        Mode::ReviewFix(_) => check_review_fix(&passes_changed, &count_changed, &status_changed)?,
        Mode::Finish => {
            if !passes_changed.is_empty() || !status_changed.is_empty() || !count_changed.is_empty()
            {
                return Err("everything passed already; the finishing iteration must not change any story's status".into());
            }
        }
    }
    Ok(changes)
}

/// A story before and after the iteration.
type Pair<'a> = (&'a Story, &'a Story);

fn status(s: &Story) -> String {
    s.review_status.clone().unwrap_or_else(|| "none".into())
}

/// One line per changed field, for the record.
fn describe_changes(pairs: &[Pair]) -> Vec<String> {
    let mut changes = Vec::new();
    for (b, a) in pairs {
        if b.passes != a.passes {
            changes.push(format!("{}: passes {} → {}", a.id, b.passes, a.passes));
        }
        if b.review_status != a.review_status {
            changes.push(format!(
                "{}: reviewStatus {} → {}",
                a.id,
                status(b),
                status(a)
            ));
        }
        if b.review_count != a.review_count {
            changes.push(format!(
                "{}: reviewCount {} → {}",
                a.id, b.review_count, a.review_count
            ));
        }
    }
    changes
}

/// An implement iteration without review: completes at most one story, never un-passes one.
fn check_implement(passes_changed: &[Pair], count_changed: &[Pair]) -> Result<(), String> {
    if passes_changed.len() > 1 {
        return Err(format!(
            "an implement iteration may complete at most one story; {} changed `passes`",
            passes_changed.len()
        ));
    }
    if let Some((_, a)) = passes_changed.first()
        && !a.passes
    {
        return Err(format!("story {} went from passing to not passing", a.id));
    }
    if !count_changed.is_empty() {
        return Err("an implement iteration must not change reviewCount".into());
    }
    Ok(())
}

/// An implement iteration with review: may only move one story to needs-review.
fn check_implement_for_review(
    passes_changed: &[Pair],
    count_changed: &[Pair],
    status_changed: &[Pair],
) -> Result<(), String> {
    if let Some((_, a)) = passes_changed.first() {
        return Err(format!(
            "an implement iteration must never set `passes` (story {} changed it); set reviewStatus to \"{NEEDS_REVIEW}\" and let the review decide",
            a.id
        ));
    }
    if !count_changed.is_empty() {
        return Err("an implement iteration must not change reviewCount".into());
    }
    if let Some((_, a)) = status_changed
        .iter()
        .find(|(_, a)| a.review_status.as_deref() != Some(NEEDS_REVIEW))
    {
        return Err(format!(
            "an implement iteration may only move a story to \"{NEEDS_REVIEW}\"; story {} became {}",
            a.id,
            status(a)
        ));
    }
    if status_changed.len() > 1 {
        return Err(format!(
            "an implement iteration may move at most one story to \"{NEEDS_REVIEW}\"; {} moved",
            status_changed.len()
        ));
    }
    Ok(())
}

/// A review of `target`: bumps its reviewCount by one, ends approved or with changes
/// requested, and touches no other story.
fn check_review(target: &str, pairs: &[Pair], count_changed: &[Pair]) -> Result<(), String> {
    if count_changed.len() != 1 {
        return Err(format!(
            "a review must change exactly one story's reviewCount (by 1); {} changed",
            count_changed.len()
        ));
    }
    let (b, a) = count_changed[0];
    if a.id != *target {
        return Err(format!("this review was for story {target}, not {}", a.id));
    }
    if a.review_count != b.review_count + 1 {
        return Err(format!(
            "reviewCount of {} must go up by exactly 1 ({} → {}), not to {}",
            a.id,
            b.review_count,
            b.review_count + 1,
            a.review_count
        ));
    }
    let approved = a.approved() && a.passes;
    let changes = a.review_status.as_deref() == Some(CHANGES_REQUESTED)
        && a.review_feedback.is_some()
        && !a.passes;
    if !approved && !changes {
        return Err(format!(
            "a review must end with story {} either approved (reviewStatus \"{APPROVED}\" and passes true) or \"{CHANGES_REQUESTED}\" with reviewFeedback (passes false); it is {} with passes {}",
            a.id,
            status(a),
            a.passes
        ));
    }
    if let Some((_, o)) = pairs.iter().find(|(b, a)| {
        a.id != *target && (b.passes != a.passes || b.review_status != a.review_status)
    }) {
        return Err(format!(
            "a review of {target} must not change story {}",
            o.id
        ));
    }
    Ok(())
}

/// A review-fix: only moves stories from changes-requested back to needs-review.
fn check_review_fix(
    passes_changed: &[Pair],
    count_changed: &[Pair],
    status_changed: &[Pair],
) -> Result<(), String> {
    if let Some((_, a)) = passes_changed.first() {
        return Err(format!(
            "a review-fix must not change `passes` (story {})",
            a.id
        ));
    }
    if !count_changed.is_empty() {
        return Err("a review-fix must not change reviewCount".into());
    }
    if let Some((b, a)) = status_changed.iter().find(|(b, a)| {
        !(b.review_status.as_deref() == Some(CHANGES_REQUESTED)
            && a.review_status.as_deref() == Some(NEEDS_REVIEW))
    }) {
        return Err(format!(
            "a review-fix may only move a story from \"{CHANGES_REQUESTED}\" back to \"{NEEDS_REVIEW}\"; story {} went {} → {}",
            a.id,
            status(b),
            status(a)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(id: &str, prio: i64, passes: bool, status: Option<&str>, count: u64) -> Story {
        Story {
            id: id.into(),
            title: id.into(),
            description: String::new(),
            acceptance: vec![],
            priority: prio,
            passes,
            review_status: status.map(str::to_string),
            review_count: count,
            review_feedback: None,
            notes: String::new(),
            depends_on: vec![],
        }
    }

    #[test]
    fn modes_follow_the_order_fix_review_implement() {
        let mut v = vec![s("a", 2, false, None, 0), s("b", 1, false, None, 0)];
        v[1].depends_on = vec!["a".into()];
        assert_eq!(choose(&v, true), Some(Mode::Implement("a".into())));
        v[0].review_status = Some(NEEDS_REVIEW.into());
        assert_eq!(choose(&v, true), Some(Mode::Review("a".into())));
        v[0].review_status = Some(CHANGES_REQUESTED.into());
        assert_eq!(choose(&v, true), Some(Mode::ReviewFix("a".into())));
        v[0].review_status = Some(APPROVED.into());
        v[0].passes = true;
        assert_eq!(choose(&v, true), Some(Mode::Implement("b".into())));
        v[1].passes = true;
        assert_eq!(choose(&v, false), Some(Mode::Finish));
        assert_eq!(choose(&v, true), Some(Mode::Implement("b".into())));
        let blocked = vec![{
            let mut x = s("x", 1, false, None, 0);
            x.depends_on = vec!["nope".into()];
            x
        }];
        assert_eq!(choose(&blocked, true), None);
    }

    #[test]
    fn transitions_are_checked() {
        let before = vec![s("a", 1, false, None, 0), s("b", 2, false, None, 0)];
        let imp = Mode::Implement("a".into());
        let mut after = before.clone();
        after[0].review_status = Some(NEEDS_REVIEW.into());
        assert!(check(&imp, &before, &after, true).is_ok());
        after[0].passes = true;
        assert!(
            check(&imp, &before, &after, true)
                .unwrap_err()
                .contains("never set `passes`")
        );
        // Without review, an implement iteration completes the story itself.
        assert!(check(&imp, &before, &after, false).is_ok());
        let mut two = before.clone();
        two[0].review_status = Some(NEEDS_REVIEW.into());
        two[1].review_status = Some(NEEDS_REVIEW.into());
        assert!(
            check(&imp, &before, &two, true)
                .unwrap_err()
                .contains("at most one")
        );

        let rb = vec![s("a", 1, false, Some(NEEDS_REVIEW), 0)];
        let rev = Mode::Review("a".into());
        let mut ra = rb.clone();
        ra[0].review_count = 1;
        ra[0].review_status = Some(CHANGES_REQUESTED.into());
        assert!(
            check(&rev, &rb, &ra, true)
                .unwrap_err()
                .contains("reviewFeedback")
        );
        ra[0].review_feedback = Some("add tests".into());
        assert!(check(&rev, &rb, &ra, true).is_ok());
        ra[0].review_count = 2;
        assert!(
            check(&rev, &rb, &ra, true)
                .unwrap_err()
                .contains("exactly 1")
        );
        let mut ok = rb.clone();
        ok[0].review_count = 1;
        ok[0].review_status = Some(APPROVED.into());
        ok[0].passes = true;
        assert!(check(&rev, &rb, &ok, true).is_ok());

        let fb = vec![s("a", 1, false, Some(CHANGES_REQUESTED), 1)];
        let fix = Mode::ReviewFix("a".into());
        let mut fa = fb.clone();
        fa[0].review_status = Some(NEEDS_REVIEW.into());
        assert!(check(&fix, &fb, &fa, true).is_ok());
        fa[0].review_status = Some(APPROVED.into());
        assert!(check(&fix, &fb, &fa, true).is_err());
    }

    #[test]
    fn parse_reads_prd_shapes() {
        let v = parse(r#"{"userStories":[{"id":"US-1","title":"t","priority":1,"passes":false,"acceptanceCriteria":["x"],"dependsOn":[]}]}"#).unwrap();
        assert_eq!(v[0].id, "US-1");
        assert_eq!(v[0].acceptance, ["x"]);
        assert!(
            parse("[{\"title\":\"no id\"}]")
                .unwrap_err()
                .contains("no `id`")
        );
        assert!(parse("{").is_err());
    }
}
