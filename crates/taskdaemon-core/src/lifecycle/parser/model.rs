//! Option A: one short call to a configured agent or model. The prompt is spec 1 §5's
//! extraction prompt asking for one JSON object; the agent runs once through the process
//! runner (own process group, killed at the time budget) in an empty temporary directory,
//! so it cannot change the project; its own words are searched for a JSON object, which is
//! checked before it is used. Every failure is returned as a reason: the caller falls back
//! to the rules.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::words::shorten;
use super::{Marker, ParseInput, ParsedTask, Requirement, TaskKind, title_from};
use crate::agent::step::{Contract, StepRequest, StepResult, contract_env, run_step, set_env};
use crate::agent::{AgentResult, AgentSpec, FailureClass, OutputFormat, Stream};
use crate::sandbox::SandboxPlan;
use crate::telemetry::IterationLog;

/// How much of the message and the file list goes into the prompt.
const MAX_MESSAGE_CHARS: usize = 8_000;
const MAX_PROMPT_FILES: usize = 150;
/// Only the end of a long reply is searched.
const MAX_REPLY_SCAN: usize = 64 * 1024;
const MAX_REQUIREMENTS: usize = 30;
const MAX_TEXT: usize = 500;

/// The agent to ask and how.
#[derive(Debug, Clone)]
pub struct ModelParser {
    pub agent: AgentSpec,
    pub format: OutputFormat,
    /// The whole budget: stopping the agent at its end included.
    pub timeout: Duration,
    /// The executable that plays `script:` agents (the taskdaemon binary).
    pub script_runner: PathBuf,
    /// Where the parse's prompt and log are kept ([`PARSE_PROMPT`], [`PARSE_LOG`]); none: a
    /// temporary directory, removed after the parse (`task parse` changes no file).
    pub log_dir: Option<PathBuf>,
    /// The sandbox the agent runs in (the run's agent's settings, resolved for this one).
    pub sandbox: SandboxPlan,
}

/// The extraction prompt for `input` (spec 1 §5, option A).
pub fn prompt(input: &ParseInput) -> String {
    let ctx = &input.context;
    let mut files: Vec<&String> = ctx.files.iter().collect();
    files.sort_by_key(|f| (f.matches('/').count(), f.as_str()));
    let listed: Vec<&str> = files
        .iter()
        .take(MAX_PROMPT_FILES)
        .map(|f| f.as_str())
        .collect();
    let more = files.len().saturating_sub(listed.len());
    let file_list = if listed.is_empty() {
        "(no files yet)".to_string()
    } else if more > 0 {
        format!("{} (and {more} more)", listed.join(", "))
    } else {
        listed.join(", ")
    };
    let message: String = input
        .message
        .trim()
        .chars()
        .take(MAX_MESSAGE_CHARS)
        .collect();
    let clarification = match &input.clarification {
        Some(c) => format!(
            "\nYou asked before: \"{}\"\nThe user answered: \"{}\"\nThe answer settles the ambiguity: do not answer needs-clarification again.\n",
            c.question.trim(),
            c.answer.trim()
        ),
        None => String::new(),
    };
    format!(
        r#"You are the task parser of an autonomous coding loop. Do not use any tool and do not read or change files. Reply with one JSON object and nothing else.

Given the user's message and the current project state, produce a structured task.

User message: """{message}"""
{clarification}
Existing plan: {plan}
Previous task summary: "{summary}"
Current file list: {file_list}

Output: one JSON object of this shape:
{{"type": "mutation" | "fresh" | "bugfix" | "needs-clarification",
 "title": "a short title",
 "requirements": [{{"marker": "ADD" | "MODIFY" | "FIX" | "REMOVE", "text": "one concern", "count": 2}}],
 "preserve": ["what must stay as it is"],
 "affected_files": ["paths from the file list"],
 "question": "only for needs-clarification: the one question to ask the user"}}

Rules:
- One requirement per concern: split multi-concern messages. "count" only when the message says how many (else null).
- [ADD] means create new things. Never convert existing things. "2 more X" is ADD with count 2, and the existing X go into "preserve".
- [MODIFY] means change existing things. Always say in "preserve" what stays the same.
- [FIX] means repair broken behavior. Reference the specific bug.
- [REMOVE] means delete. Explicit only, never implied.
- type: fresh when there is no plan and nothing is built yet, or the user says "start over" / "build me a ..."; bugfix when the message only describes specific broken behavior; mutation otherwise.
- If the scope is ambiguous (you cannot tell ADD from MODIFY, or the message does not say what to change), use "type": "needs-clarification" and ask one question.
- affected_files: only paths from the file list.
"#,
        plan = if ctx.plan_exists {
            "exists"
        } else {
            "does not exist"
        },
        summary = ctx
            .previous_summary
            .as_deref()
            .map(|s| shorten(s, 200))
            .unwrap_or_else(|| "none".into()),
    )
}

/// Why the model's answer was not used: the reason a person reads, and the agent's
/// failure class when the agent itself failed (not logged in, usage limit, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFailure {
    pub reason: String,
    pub class: Option<FailureClass>,
}

impl From<String> for ModelFailure {
    fn from(reason: String) -> ModelFailure {
        ModelFailure {
            reason,
            class: None,
        }
    }
}

/// The name of the parse's log in [`ModelParser::log_dir`], and of its prompt file.
pub const PARSE_LOG: &str = "task-parse.log";
pub const PARSE_PROMPT: &str = "task-parse-prompt.md";
const PARSE_LOG_CAP: u64 = 4 * 1024 * 1024;

/// Ask the agent through the one agent step (prompt file, the agent contract's
/// environment, its output logged as printed, its failure classified); `Err` carries why
/// its answer cannot be used.
pub async fn parse_with_model(
    input: &ParseInput,
    p: &ModelParser,
    cancel: &CancellationToken,
) -> Result<ParsedTask, ModelFailure> {
    let scratch = tempfile::Builder::new()
        .prefix("taskdaemon-parse-")
        .tempdir()
        .map_err(|e| format!("cannot make a scratch directory for the parse agent: {e}"))?;
    // The agent's directory stays empty: its prompt and log go elsewhere.
    let kept = tempfile::Builder::new()
        .prefix("taskdaemon-parse-log-")
        .tempdir()
        .map_err(|e| format!("cannot make a directory for the parse agent's log: {e}"))?;
    let log_dir = p
        .log_dir
        .clone()
        .unwrap_or_else(|| kept.path().to_path_buf());
    let (prompt_file, log_path) = (log_dir.join(PARSE_PROMPT), log_dir.join(PARSE_LOG));
    let mut log = fresh_log(&log_dir, &log_path)?;
    let text = prompt(input);
    let grace = (p.timeout / 10).clamp(Duration::from_millis(20), Duration::from_millis(500));
    let mut env = contract_env(&Contract {
        run_id: "task-parse",
        workdir: scratch.path(),
        loop_name: "task-parse",
        iteration: 1,
        max_iterations: 1,
        prompt_file: &prompt_file,
        harness: &p.script_runner,
    });
    set_env(&mut env, "TASKDAEMON_TASK_PARSE", "1");
    let req = StepRequest {
        agent: &p.agent,
        format: p.format,
        system_prompt: None,
        script_runner: &p.script_runner,
        prompt: &text,
        prompt_file: &prompt_file,
        cwd: scratch.path(),
        env,
        timeout: Some(
            p.timeout
                .saturating_sub(grace)
                .max(Duration::from_millis(1)),
        ),
        grace,
        sandbox: &p.sandbox,
    };
    let mut last_stderr = String::new();
    let ran = run_step(&req, &mut log, cancel, |_, stream, text, _| {
        if stream == Stream::Stderr && !text.trim().is_empty() {
            last_stderr = shorten(text, 200);
        }
    })
    .await;
    let judged = match ran {
        Ok(step) => judge(&step, &last_stderr, input, p),
        Err(e @ crate::agent::step::StepError::Spawn { .. }) => Err(ModelFailure {
            reason: format!("cannot start `{}`: {e}", p.agent.label()),
            class: Some(FailureClass::CouldNotStart),
        }),
        Err(e) => Err(ModelFailure::from(e.to_string())),
    };
    if let Err(f) = &judged {
        log.note(&format!(
            "the parse agent's answer was not used: {}",
            f.reason
        ));
    }
    let _ = log.finish();
    judged
}

/// A fresh log for this parse (the last parse's is replaced).
fn fresh_log(dir: &std::path::Path, path: &std::path::Path) -> Result<IterationLog, ModelFailure> {
    let made = std::fs::create_dir_all(dir).and_then(|()| match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => IterationLog::create(path, PARSE_LOG_CAP),
    });
    made.map_err(|e| {
        ModelFailure::from(format!(
            "cannot write the parse log {}: {e}",
            path.display()
        ))
    })
}

/// The parse from what the step left, or why there is none.
fn judge(
    step: &StepResult,
    last_stderr: &str,
    input: &ParseInput,
    p: &ModelParser,
) -> Result<ParsedTask, ModelFailure> {
    let result = &step.process;
    if result.interrupted {
        return Err("interrupted".to_string().into());
    }
    // A usable answer is used whatever the exit; only without one does the failure speak.
    let extracted = extract(&step.words, input);
    if extracted.is_err()
        && let Some(f) = step.failure.as_ref().filter(|f| agent_failed(f.class))
    {
        return Err(ModelFailure {
            reason: failure_reason(&p.agent.label(), f),
            class: Some(f.class),
        });
    }
    match extracted {
        Ok(task) => Ok(task),
        Err(why) if result.timed_out => Err(format!(
            "no usable answer within the {} budget ({why})",
            crate::duration::format_duration(p.timeout)
        )
        .into()),
        Err(why) if result.status.code() != 0 => Err(ModelFailure {
            reason: format!(
                "`{}` exited with {}{} ({why})",
                p.agent.label(),
                result.status.code(),
                if last_stderr.is_empty() {
                    String::new()
                } else {
                    format!(": {last_stderr}")
                }
            ),
            class: step.failure.as_ref().map(|f| f.class),
        }),
        Err(why) => Err(why.into()),
    }
}

/// The text of the agent's line: a JSON event's `result` or `message`, else the line.
fn said(line: &str) -> String {
    let v: Option<serde_json::Value> = serde_json::from_str(line).ok();
    let text = v.as_ref().and_then(|v| {
        ["result", "message", "error"]
            .iter()
            .find_map(|k| v.get(*k).and_then(serde_json::Value::as_str))
    });
    text.unwrap_or(line).to_string()
}

/// Failures of the agent itself, which a person should hear about by name.
fn agent_failed(class: FailureClass) -> bool {
    class.needs_a_person() || class.is_transient() || class == FailureClass::UsageLimit
}

/// "the parse agent claude is not logged in: Invalid API key (hint: …)".
fn failure_reason(agent: &str, f: &AgentResult) -> String {
    let what = match f.class {
        FailureClass::Auth => "is not logged in",
        FailureClass::CouldNotStart => "could not start",
        FailureClass::UsageLimit => "is at its usage limit",
        FailureClass::RateLimited => "was rate-limited",
        FailureClass::Overloaded => "found the model API overloaded",
        FailureClass::Unreachable => "could not reach the model API",
        FailureClass::Ok | FailureClass::Crashed => "failed",
    };
    let line = f
        .line
        .as_deref()
        .map(|l| format!(": {}", shorten(&said(l), 200)))
        .unwrap_or_default();
    let hint = match f.class {
        FailureClass::Auth => {
            "log it in (`claude` then /login, `codex login`) or set its API key; or --task-parser rules"
        }
        FailureClass::CouldNotStart => "`taskdaemon doctor` checks it; or --task-parser rules",
        _ => "the rules parse meanwhile; or set --task-parser rules",
    };
    format!("the parse agent {agent} {what}{line} (hint: {hint})")
}

#[derive(Debug, Deserialize)]
struct Reply {
    #[serde(rename = "type", alias = "kind")]
    kind: String,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    requirements: Vec<ReplyRequirement>,
    #[serde(default)]
    preserve: Vec<String>,
    #[serde(default, alias = "affected")]
    affected_files: Vec<String>,
    #[serde(default)]
    question: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ReplyRequirement {
    marker: String,
    text: String,
    #[serde(default)]
    count: Option<serde_json::Value>,
}

/// Find the agent's JSON object in its words and check it.
pub fn extract(words: &str, input: &ParseInput) -> Result<ParsedTask, String> {
    let mut start = words.len().saturating_sub(MAX_REPLY_SCAN);
    while !words.is_char_boundary(start) {
        start += 1;
    }
    let scan = &words[start..];
    let mut last_err: Option<String> = None;
    let mut found: Option<Reply> = None;
    for candidate in json_objects(scan) {
        match serde_json::from_str::<Reply>(candidate) {
            Ok(r) => found = Some(r),
            Err(e) => {
                if serde_json::from_str::<serde_json::Value>(candidate).is_ok() {
                    last_err = Some(format!(
                        "the JSON object does not have the asked shape: {e}"
                    ));
                } else if last_err.is_none() {
                    last_err = Some(format!("invalid JSON: {e}"));
                }
            }
        }
    }
    let Some(reply) = found else {
        return Err(last_err.unwrap_or_else(|| {
            if scan.trim().is_empty() {
                "the agent said nothing".into()
            } else {
                format!(
                    "no JSON object in the reply: \"{}\"",
                    shorten(scan.trim(), 80)
                )
            }
        }));
    };
    check(reply, input)
}

/// The spans of balanced `{…}` in `s` that may be JSON objects (strings respected).
fn json_objects(s: &str) -> Vec<&str> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() && out.len() < 200 {
        if b[i] != b'{' {
            i += 1;
            continue;
        }
        let mut depth = 0usize;
        let mut in_str = false;
        let mut esc = false;
        let mut end = None;
        for (j, &c) in b.iter().enumerate().skip(i) {
            if in_str {
                match (esc, c) {
                    (true, _) => esc = false,
                    (false, b'\\') => esc = true,
                    (false, b'"') => in_str = false,
                    _ => {}
                }
                continue;
            }
            match c {
                b'"' => in_str = true,
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(j);
                        break;
                    }
                }
                _ => {}
            }
        }
        match end {
            Some(e) => {
                out.push(&s[i..=e]);
                i = e + 1;
            }
            None => i += 1,
        }
    }
    out
}

fn check(r: Reply, input: &ParseInput) -> Result<ParsedTask, String> {
    let kind = TaskKind::parse(&r.kind).ok_or_else(|| {
        format!(
            "unknown type {:?} (expected fresh, mutation, bugfix or needs-clarification)",
            shorten(&r.kind, 40)
        )
    })?;
    let question = r
        .question
        .map(|q| q.trim().to_string())
        .filter(|q| !q.is_empty() && !q.eq_ignore_ascii_case("null"));
    if kind == TaskKind::NeedsClarification {
        if input.clarification.is_some() {
            return Err("asked again although the person already answered".into());
        }
        if question.is_none() {
            return Err("needs-clarification without a question".into());
        }
    } else if r.requirements.is_empty() {
        return Err("no requirements".into());
    }
    if r.requirements.len() > MAX_REQUIREMENTS {
        return Err(format!(
            "{} requirements (at most {MAX_REQUIREMENTS})",
            r.requirements.len()
        ));
    }
    let mut requirements = Vec::new();
    for (i, q) in r.requirements.into_iter().enumerate() {
        let n = i + 1;
        let marker = Marker::parse(&q.marker).ok_or_else(|| {
            format!(
                "requirement {n}: unknown marker {:?} (expected ADD, MODIFY, FIX or REMOVE)",
                shorten(&q.marker, 20)
            )
        })?;
        let text = q.text.split_whitespace().collect::<Vec<_>>().join(" ");
        if text.is_empty() {
            return Err(format!("requirement {n} has no text"));
        }
        if text.chars().count() > MAX_TEXT {
            return Err(format!(
                "requirement {n} is longer than {MAX_TEXT} characters"
            ));
        }
        let count = match q.count {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::Number(x)) => Some(
                x.as_u64()
                    .filter(|c| (1..=10_000).contains(c))
                    .ok_or_else(|| format!("requirement {n}: count {x} is not a positive number"))?
                    as u32,
            ),
            Some(serde_json::Value::String(s)) if s.trim().parse::<u32>().is_ok_and(|c| c > 0) => {
                s.trim().parse().ok()
            }
            Some(other) => return Err(format!("requirement {n}: count {other} is not a number")),
        };
        let lower = text.to_lowercase();
        let keep_existing = marker == Marker::Add
            && ["more", "another", "additional", "extra", "existing", "keep"]
                .iter()
                .any(|w| lower.split(|c: char| !c.is_alphanumeric()).any(|x| x == *w));
        requirements.push(Requirement {
            marker,
            text,
            count,
            keep_existing,
        });
    }
    let mut preserve = Vec::new();
    for p in r.preserve {
        let p = p.split_whitespace().collect::<Vec<_>>().join(" ");
        if p.is_empty() {
            continue;
        }
        if p.chars().count() > MAX_TEXT || preserve.len() >= 30 {
            return Err("preserve entries too long or too many".into());
        }
        preserve.push(p);
    }
    // Only files that exist: a model may invent paths.
    let mut affected_files = Vec::new();
    let mut invented = Vec::new();
    for f in r.affected_files {
        let f = f.trim().trim_start_matches("./").to_string();
        if f.is_empty() {
            continue;
        }
        let hit = input.context.files.iter().find(|x| **x == f).or_else(|| {
            let mut m = input
                .context
                .files
                .iter()
                .filter(|x| x.ends_with(&format!("/{f}")));
            match (m.next(), m.next()) {
                (Some(one), None) => Some(one),
                _ => None,
            }
        });
        match hit {
            Some(h) if !affected_files.contains(h) => affected_files.push(h.clone()),
            Some(_) => {}
            None => invented.push(f),
        }
    }
    let mut ambiguities = Vec::new();
    if !invented.is_empty() {
        ambiguities.push(format!(
            "the parser named files that do not exist, left out: {}",
            shorten(&invented.join(", "), 200)
        ));
    }
    let title = r
        .title
        .map(|t| shorten(&t.split_whitespace().collect::<Vec<_>>().join(" "), 80))
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| title_from(&requirements, &input.message));
    Ok(ParsedTask {
        kind,
        title,
        requirements,
        preserve,
        affected_files,
        question: if kind == TaskKind::NeedsClarification {
            question
        } else {
            None
        },
        ambiguities,
    })
}

#[cfg(test)]
mod tests {
    use super::super::ProjectContext;
    use super::*;

    fn input() -> ParseInput {
        ParseInput {
            message: "add 2 more drinks".into(),
            clarification: None,
            context: ProjectContext {
                plan_exists: true,
                previous_summary: None,
                files: vec!["src/data/flavors.ts".into(), "src/App.tsx".into()],
            },
        }
    }

    #[test]
    fn finds_the_object_among_words_and_fences() {
        let words = "Sure! Here it is:\n```json\n{\"type\":\"mutation\",\"title\":\"More drinks\",\"requirements\":[{\"marker\":\"[ADD]\",\"text\":\"2 more drinks {night}\",\"count\":2}],\"preserve\":[\"existing drinks\"],\"affected_files\":[\"flavors.ts\",\"src/Nope.tsx\"]}\n```";
        let t = extract(words, &input()).unwrap();
        assert_eq!(t.kind, TaskKind::Mutation);
        assert_eq!(t.requirements[0].marker, Marker::Add);
        assert_eq!(t.requirements[0].count, Some(2));
        assert!(t.requirements[0].keep_existing);
        assert_eq!(t.affected_files, ["src/data/flavors.ts"]);
        assert!(t.ambiguities[0].contains("src/Nope.tsx"));
    }

    #[test]
    fn rejects_what_does_not_check() {
        let i = input();
        for (words, why) in [
            ("no json here", "no JSON object"),
            (
                "{\"type\": \"mutation\", \"requirements\": []}",
                "no requirements",
            ),
            (
                "{\"type\": \"refactor\", \"requirements\": []}",
                "unknown type",
            ),
            (
                "{\"type\": \"mutation\", \"requirements\": [{\"marker\": \"CHANGE\", \"text\": \"x\"}]}",
                "unknown marker",
            ),
            (
                "{\"type\": \"mutation\", \"requirements\": [{\"marker\": \"ADD\", \"text\": \" \"}]}",
                "has no text",
            ),
            (
                "{\"type\": \"mutation\", \"requirements\": [{\"marker\": \"ADD\", \"text\": \"x\", \"count\": -1}]}",
                "not a positive number",
            ),
            ("{\"type\": \"needs-clarification\"}", "without a question"),
            ("{\"oops\": 1}", "shape"),
            ("{\"type\": ", "no JSON object"),
        ] {
            let e = extract(words, &i).unwrap_err();
            assert!(e.contains(why), "{words}: {e}");
        }
    }

    #[test]
    fn prompt_carries_the_context() {
        let p = prompt(&input());
        assert!(p.contains("User message: \"\"\"add 2 more drinks\"\"\""));
        assert!(p.contains("Existing plan: exists"));
        assert!(p.contains("src/App.tsx, src/data/flavors.ts"));
        assert!(p.contains("[ADD] means create new things. Never convert existing things."));
    }
}
