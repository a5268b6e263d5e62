//! The task parser (spec 1 §5): a person's message becomes a structured task — its type,
//! a checklist of requirements marked `[ADD]`/`[MODIFY]`/`[FIX]`/`[REMOVE]`, what to
//! preserve, the files likely affected — before the agent sees it.
//!
//! Two parsers produce the same [`ParsedTask`]:
//! - [`model`] (option A): one short call to a configured agent or model asking for JSON,
//!   validated, within a time budget;
//! - [`rules`] (option B): deterministic rules, used when no model is configured and
//!   whenever the model's call fails. It never fails itself: at worst the whole message
//!   becomes one requirement.
//!
//! [`render`] writes the `task.md` text. Nothing here prints.

mod choose;
mod context;
mod files;
pub mod model;
mod render;
pub mod rules;
mod split;
mod words;

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use choose::{ParserSetupError, choose_parser};
pub use context::{ProjectContext, project_context};
pub use model::{ModelFailure, ModelParser, parse_with_model};
pub use render::{ORIGINAL_MESSAGE, quoted_message, task_md};

/// The task types of spec 1 §5 "Task Type Classification".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskKind {
    /// Nothing built yet, or the person asked to start over: plan from scratch.
    Fresh,
    /// Changes to what exists: update the plan with change markers.
    Mutation,
    /// Only repairs of specific broken behaviour: no plan update.
    Bugfix,
    /// The scope is ambiguous: ask before starting the loop.
    NeedsClarification,
}

impl TaskKind {
    pub fn label(self) -> &'static str {
        match self {
            TaskKind::Fresh => "fresh",
            TaskKind::Mutation => "mutation",
            TaskKind::Bugfix => "bugfix",
            TaskKind::NeedsClarification => "needs-clarification",
        }
    }

    pub fn parse(s: &str) -> Option<TaskKind> {
        match s
            .trim()
            .to_ascii_lowercase()
            .replace(['_', ' '], "-")
            .as_str()
        {
            "fresh" => Some(TaskKind::Fresh),
            "mutation" => Some(TaskKind::Mutation),
            "bugfix" | "bug-fix" | "fix" => Some(TaskKind::Bugfix),
            "needs-clarification" | "clarification" => Some(TaskKind::NeedsClarification),
            _ => None,
        }
    }
}

/// The change markers of spec 1 §6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Marker {
    /// Create new things; never convert existing ones.
    Add,
    /// Change existing things; say what stays.
    Modify,
    /// Repair broken behaviour.
    Fix,
    /// Delete; only when asked explicitly.
    Remove,
}

impl Marker {
    pub fn label(self) -> &'static str {
        match self {
            Marker::Add => "ADD",
            Marker::Modify => "MODIFY",
            Marker::Fix => "FIX",
            Marker::Remove => "REMOVE",
        }
    }

    /// `ADD`, `add`, `[ADD]`.
    pub fn parse(s: &str) -> Option<Marker> {
        let t = s
            .trim()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .trim();
        match t.to_ascii_uppercase().as_str() {
            "ADD" => Some(Marker::Add),
            "MODIFY" => Some(Marker::Modify),
            "FIX" => Some(Marker::Fix),
            "REMOVE" => Some(Marker::Remove),
            _ => None,
        }
    }
}

/// One item of the checklist.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Requirement {
    pub marker: Marker,
    pub text: String,
    /// How many items to add (or remove), when the message says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    /// An `[ADD]` to things that already exist ("2 more drinks"): they all stay.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_existing: bool,
}

/// The structured task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParsedTask {
    #[serde(rename = "type")]
    pub kind: TaskKind,
    /// A short title for the `# Task:` heading.
    pub title: String,
    pub requirements: Vec<Requirement>,
    /// What must stay as it is.
    pub preserve: Vec<String>,
    /// Repository paths the requirements most likely touch.
    pub affected_files: Vec<String>,
    /// For `needs-clarification`: what to ask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    /// Readings the parser had to choose between, and how it chose.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ambiguities: Vec<String>,
}

/// A person's answer to the parser's earlier question about the same message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Clarification {
    pub question: String,
    pub answer: String,
}

/// Everything a parse looks at.
#[derive(Debug, Clone, Default)]
pub struct ParseInput {
    pub message: String,
    pub clarification: Option<Clarification>,
    pub context: ProjectContext,
}

/// Which parser produced the task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "parser", rename_all = "lowercase")]
pub enum ParsedBy {
    /// Option A: the named agent's JSON, validated.
    Model { agent: String },
    /// Option B.
    Rules,
}

/// A parse and how it came about.
#[derive(Debug, Clone, Serialize)]
pub struct ParseReport {
    pub task: ParsedTask,
    #[serde(flatten)]
    pub by: ParsedBy,
    /// Why the model was not used or its answer was not taken (`None` when it was, or when
    /// no model was asked for).
    pub fallback_reason: Option<String>,
    /// The parse agent's failure class when the agent itself failed (`auth`: not logged
    /// in, `usage-limit`, …): the rules parsed, and this says why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_class: Option<crate::agent::FailureClass>,
    /// Why the rules parser was chosen without asking a model.
    pub rules_because: Option<String>,
    /// The parse agent's log (kept in `.ralph/logs/` by `task`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<std::path::PathBuf>,
    pub elapsed_ms: u64,
}

/// How the parser is chosen (`task-parser` setting).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ParserMode {
    /// The model when a `parse-agent` is configured, else the rules.
    #[default]
    Auto,
    /// The model: `parse-agent`, else the run's agent. The rules when it fails.
    Model,
    /// Only the rules: no extra agent call.
    Rules,
}

impl ParserMode {
    pub fn parse(s: &str) -> Result<ParserMode, String> {
        match s.trim() {
            "auto" => Ok(ParserMode::Auto),
            "model" => Ok(ParserMode::Model),
            "rules" => Ok(ParserMode::Rules),
            other => Err(format!(
                "unknown task parser `{other}`; use auto, model or rules"
            )),
        }
    }
}

/// The default time budget of the model's call.
pub const DEFAULT_PARSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Parse by the rules, which never fail: should a rule ever panic, the whole message
/// becomes one requirement and the reason is noted.
pub fn parse_by_rules(input: &ParseInput) -> ParsedTask {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rules::parse(input))) {
        Ok(t) => t,
        Err(_) => rules::whole_message(input, "the rule-based parser failed on this message"),
    }
}

/// The task for `input` by `parser` (the model when one is given, falling back to the
/// rules), timed.
pub async fn parse_task(
    input: &ParseInput,
    parser: Option<&ModelParser>,
    rules_because: Option<String>,
    cancel: &tokio_util::sync::CancellationToken,
) -> ParseReport {
    let start = std::time::Instant::now();
    let (task, by, failure) = match parser {
        Some(p) => match parse_with_model(input, p, cancel).await {
            Ok(task) => (
                task,
                ParsedBy::Model {
                    agent: p.agent.label(),
                },
                None,
            ),
            Err(f) => (parse_by_rules(input), ParsedBy::Rules, Some(f)),
        },
        None => (parse_by_rules(input), ParsedBy::Rules, None),
    };
    ParseReport {
        task,
        by,
        fallback_class: failure.as_ref().and_then(|f| f.class),
        fallback_reason: failure.map(|f| f.reason),
        log: parser
            .and_then(|p| p.log_dir.as_ref())
            .map(|d| d.join(model::PARSE_LOG)),
        rules_because: if parser.is_none() {
            rules_because
        } else {
            None
        },
        elapsed_ms: start.elapsed().as_millis() as u64,
    }
}

/// The repository files (of `files`) a requirement's or keep instruction's words point
/// at, best first (the same mapping as the task's AFFECTED FILES).
pub fn files_for(text: &str, files: &[String]) -> Vec<String> {
    files::affected(
        &[Requirement {
            marker: Marker::Modify,
            text: text.to_string(),
            count: None,
            keep_existing: false,
        }],
        files,
    )
}

/// A title from the requirements: the first one, or the first few joined, shortened.
pub(crate) fn title_from(requirements: &[Requirement], message: &str) -> String {
    let joined = if requirements.is_empty() {
        message
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("")
            .to_string()
    } else {
        // Each requirement's head ("Refine ad copy — less generic…" → "Refine ad copy").
        requirements
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let head = r.text.split(" — ").next().unwrap_or(&r.text);
                let head = head
                    .split(": ")
                    .next()
                    .unwrap_or(head)
                    .trim_end_matches(['.', '!', '?', ' '])
                    .to_string();
                if i == 0 { head } else { lower_first(&head) }
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    words::shorten(&joined, 80)
}

/// "Add 2 drinks" → "add 2 drinks" (a word in capitals such as "CTA" stays).
fn lower_first(s: &str) -> String {
    let first = s.split_whitespace().next().unwrap_or("");
    if first.chars().skip(1).any(char::is_uppercase) {
        return s.to_string();
    }
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => String::new(),
    }
}
