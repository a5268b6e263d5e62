//! Reading an agent's output: its own words (where promises count), its tool calls, and the
//! usage and cost it reports. Tool inputs and outputs are never the agent's words.

use crate::fingerprint::{FNV_OFFSET, fnv1a};
use serde_json::Value;

use super::failure::Evidence;
use super::runner::Stream;

/// Keep at most this much of the agent's words (the end: promises come last).
const MAX_WORDS: usize = 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OutputFormat {
    /// Plain text: stdout is the agent's words.
    Text,
    /// Claude Code `--output-format stream-json --verbose`.
    ClaudeStreamJson,
    /// Codex `exec --json`.
    CodexJson,
    /// Gemini CLI `--output-format stream-json`.
    GeminiStreamJson,
    /// opencode `run --format json`.
    OpencodeJson,
}

impl OutputFormat {
    pub fn parse(s: &str) -> Result<OutputFormat, String> {
        match s {
            "text" => Ok(OutputFormat::Text),
            "claude-stream-json" | "stream-json" => Ok(OutputFormat::ClaudeStreamJson),
            "codex-json" => Ok(OutputFormat::CodexJson),
            "gemini-stream-json" => Ok(OutputFormat::GeminiStreamJson),
            "opencode-json" => Ok(OutputFormat::OpencodeJson),
            other => Err(format!(
                "unknown agent output format `{other}`; use text, claude-stream-json, codex-json, gemini-stream-json or opencode-json"
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            OutputFormat::Text => "text",
            OutputFormat::ClaudeStreamJson => "claude-stream-json",
            OutputFormat::CodexJson => "codex-json",
            OutputFormat::GeminiStreamJson => "gemini-stream-json",
            OutputFormat::OpencodeJson => "opencode-json",
        }
    }
}

/// Something the agent did, for display.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Activity {
    /// The agent said something.
    Text { text: String },
    /// The agent called a tool.
    ToolCall { name: String, detail: String },
    /// Output that is neither (tool results, diagnostics, stderr).
    Other { text: String },
}

/// What one iteration's output amounts to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ParsedOutput {
    /// The agent's own words: assistant text and the final result only.
    pub words: String,
    pub tool_calls: u32,
    pub last_tool: Option<String>,
    /// The last thing the agent said (its final message).
    pub last_text: Option<String>,
    pub cost_usd: Option<f64>,
    pub tokens_in: Option<u64>,
    pub tokens_out: Option<u64>,
    /// A fingerprint of every tool call with its full input, in order (`None` without
    /// tool calls). Identical fingerprints in a row mean the agent repeats itself: a stall.
    pub tool_signature: Option<String>,
    /// The last few tool calls, `name: detail`, oldest first.
    pub recent_tools: Vec<String>,
    /// What the output showed about failures (see `failure::classify`).
    pub evidence: Evidence,
    /// Values the agent reported that cannot be true (negative, NaN, infinite cost or
    /// tokens), ignored: one warning each.
    pub rejected: Vec<String>,
}

const RECENT_TOOLS: usize = 8;

#[derive(Debug)]
pub struct OutputParser {
    format: OutputFormat,
    out: ParsedOutput,
    signature: u64,
    /// Gemini streams a message in pieces (`delta`); a promise may be split across them.
    delta: String,
}

impl OutputParser {
    pub fn new(format: OutputFormat) -> OutputParser {
        OutputParser {
            format,
            out: ParsedOutput::default(),
            signature: FNV_OFFSET,
            delta: String::new(),
        }
    }

    /// Feed one line; returns what it showed the agent doing.
    pub fn line(&mut self, stream: Stream, line: &str) -> Vec<Activity> {
        if stream == Stream::Stderr {
            self.out.evidence.text_line(line);
            return vec![Activity::Other {
                text: line.to_string(),
            }];
        }
        match self.format {
            OutputFormat::Text => {
                self.out.evidence.text_line(line);
                self.say(line);
                vec![Activity::Text {
                    text: line.to_string(),
                }]
            }
            OutputFormat::GeminiStreamJson => match serde_json::from_str::<Value>(line) {
                Ok(v) => {
                    self.out.evidence.gemini(&v);
                    self.gemini(&v)
                }
                Err(_) => {
                    self.out.evidence.text_line(line);
                    vec![Activity::Other {
                        text: line.to_string(),
                    }]
                }
            },
            OutputFormat::OpencodeJson => match serde_json::from_str::<Value>(line) {
                Ok(v) => {
                    self.out.evidence.opencode(&v);
                    self.opencode(&v)
                }
                Err(_) => {
                    self.out.evidence.text_line(line);
                    vec![Activity::Other {
                        text: line.to_string(),
                    }]
                }
            },
            OutputFormat::ClaudeStreamJson | OutputFormat::CodexJson => {
                match serde_json::from_str::<Value>(line) {
                    Ok(v) if self.format == OutputFormat::ClaudeStreamJson => {
                        self.out.evidence.claude(&v);
                        self.claude(&v)
                    }
                    Ok(v) => {
                        self.out.evidence.codex(&v);
                        self.codex(&v)
                    }
                    Err(_)
                        if self.format == OutputFormat::ClaudeStreamJson
                            && line.contains("\"type\":\"result\"") =>
                    {
                        // serde_json refuses numbers out of range (`1e309`): read the line
                        // again with them made null, so the result is not lost.
                        match serde_json::from_str::<Value>(&null_huge_numbers(line)) {
                            Ok(v) => {
                                self.out
                                    .rejected
                                    .push("a number out of range in the result line".to_string());
                                self.out.evidence.claude(&v);
                                self.claude(&v)
                            }
                            Err(_) => vec![Activity::Other {
                                text: line.to_string(),
                            }],
                        }
                    }
                    Err(_) => {
                        self.out.evidence.text_line(line);
                        vec![Activity::Other {
                            text: line.to_string(),
                        }]
                    }
                }
            }
        }
    }

    pub fn finish(mut self) -> ParsedOutput {
        self.flush_delta();
        if self.out.tool_calls > 0 {
            self.out.tool_signature =
                Some(format!("{:016x}-{}", self.signature, self.out.tool_calls));
        }
        self.out
    }

    fn say(&mut self, text: &str) {
        if !self.out.words.is_empty() {
            self.out.words.push('\n');
        }
        self.out.words.push_str(text);
        // Trim in batches: trimming on every line past the limit would copy ~1 MB per line.
        if self.out.words.len() > 2 * MAX_WORDS {
            let mut cut = self.out.words.len() - MAX_WORDS;
            while !self.out.words.is_char_boundary(cut) {
                cut += 1;
            }
            self.out.words.drain(..cut);
        }
        if !text.trim().is_empty() {
            self.out.last_text = Some(text.to_string());
        }
    }

    /// A tool call: `key` is its full input (for the stall signature), `detail` a one-line
    /// summary for people.
    fn tool(&mut self, name: &str, key: &str, detail: String) -> Activity {
        for part in [name.as_bytes(), b"\0", key.as_bytes(), b"\0"] {
            self.signature = fnv1a(self.signature, part);
        }
        self.out.tool_calls += 1;
        let line = if detail.is_empty() {
            name.to_string()
        } else {
            format!("{name}: {detail}")
        };
        if self.out.recent_tools.len() == RECENT_TOOLS {
            self.out.recent_tools.remove(0);
        }
        self.out.recent_tools.push(line.clone());
        self.out.last_tool = Some(line);
        Activity::ToolCall {
            name: name.to_string(),
            detail,
        }
    }

    /// A token count: a non-negative integer; anything else is ignored with a warning.
    fn count(&mut self, usage: &Value, key: &str) -> u64 {
        match usage.get(key) {
            None | Some(Value::Null) => 0,
            Some(v) => match v.as_u64() {
                Some(n) => n,
                None => {
                    self.out.rejected.push(format!("{key} {v}"));
                    0
                }
            },
        }
    }

    fn claude(&mut self, v: &Value) -> Vec<Activity> {
        let mut acts = Vec::new();
        match v.get("type").and_then(Value::as_str) {
            Some("assistant") => {
                // Messages of sub-agents (Task tool) carry a parent tool id: not the agent's words.
                let from_subagent = v.get("parent_tool_use_id").is_some_and(|p| !p.is_null());
                let content = v.pointer("/message/content").and_then(Value::as_array);
                for block in content.into_iter().flatten() {
                    match block.get("type").and_then(Value::as_str) {
                        Some("text") => {
                            let text = block
                                .get("text")
                                .and_then(Value::as_str)
                                .unwrap_or_default();
                            if from_subagent {
                                acts.push(Activity::Other {
                                    text: text.to_string(),
                                });
                            } else {
                                self.say(text);
                                acts.push(Activity::Text {
                                    text: text.to_string(),
                                });
                            }
                        }
                        Some("tool_use") if !from_subagent => {
                            let name = block.get("name").and_then(Value::as_str).unwrap_or("tool");
                            let input = block.get("input");
                            let detail = input.map(tool_detail).unwrap_or_default();
                            let key = input.map(Value::to_string).unwrap_or_default();
                            acts.push(self.tool(name, &key, detail));
                        }
                        _ => {}
                    }
                }
            }
            Some("result") => {
                if let Some(r) = v.get("result").and_then(Value::as_str) {
                    // The final result repeats the last message; count it once more as words
                    // only if it differs (it is still the agent's own words).
                    if self.out.last_text.as_deref() != Some(r) {
                        self.say(r);
                    }
                }
                if let Some(c) = v.get("total_cost_usd").filter(|c| !c.is_null()) {
                    match c.as_f64().filter(|c| c.is_finite() && *c >= 0.0) {
                        Some(c) => self.out.cost_usd = Some(c),
                        None => self.out.rejected.push(format!("total_cost_usd {c}")),
                    }
                }
                if let Some(u) = v.get("usage") {
                    let mut n = |k: &str| self.count(u, k);
                    let (a, b, c, d) = (
                        n("input_tokens"),
                        n("cache_creation_input_tokens"),
                        n("cache_read_input_tokens"),
                        n("output_tokens"),
                    );
                    self.out.tokens_in = Some(a.saturating_add(b).saturating_add(c));
                    self.out.tokens_out = Some(d);
                }
            }
            _ => {}
        }
        acts
    }

    fn flush_delta(&mut self) {
        if !self.delta.is_empty() {
            let text = std::mem::take(&mut self.delta);
            self.say(&text);
        }
    }

    /// Gemini CLI stream-json: init, message (user/assistant, `delta` pieces), tool_use,
    /// tool_result, error, result (status, stats with tokens).
    fn gemini(&mut self, v: &Value) -> Vec<Activity> {
        let kind = v.get("type").and_then(Value::as_str);
        let assistant =
            kind == Some("message") && v.get("role").and_then(Value::as_str) == Some("assistant");
        if !assistant {
            self.flush_delta();
        }
        match kind {
            _ if assistant => {
                let text = v.get("content").and_then(Value::as_str).unwrap_or_default();
                if v.get("delta").and_then(Value::as_bool) == Some(true) {
                    self.delta.push_str(text);
                } else {
                    self.flush_delta();
                    self.say(text);
                }
                vec![Activity::Text {
                    text: text.to_string(),
                }]
            }
            Some("tool_use") => {
                let name = v.get("tool_name").and_then(Value::as_str).unwrap_or("tool");
                let input = v.get("parameters");
                let detail = input.map(tool_detail).unwrap_or_default();
                let key = input.map(Value::to_string).unwrap_or_default();
                vec![self.tool(name, &key, detail)]
            }
            Some("result") => {
                if let Some(stats) = v.get("stats") {
                    let (i, o) = (
                        self.count(stats, "input_tokens"),
                        self.count(stats, "output_tokens"),
                    );
                    self.out.tokens_in = Some(i);
                    self.out.tokens_out = Some(o);
                }
                Vec::new()
            }
            Some("error") => vec![Activity::Other {
                text: format!(
                    "gemini: {}",
                    v.get("message").and_then(Value::as_str).unwrap_or_default()
                ),
            }],
            _ => Vec::new(),
        }
    }

    /// opencode `run --format json`: one event per finished part, `{"type", "part", …}`:
    /// step_start, text (the assistant's words, whole), tool_use (tool, state.input and
    /// output), step_finish (that step's tokens and cost), error (`error.data.message`).
    fn opencode(&mut self, v: &Value) -> Vec<Activity> {
        let part = v.get("part");
        let s = |p: &str| v.pointer(p).and_then(Value::as_str);
        match v.get("type").and_then(Value::as_str) {
            Some("text") => {
                let text = s("/part/text").unwrap_or_default().to_string();
                self.say(&text);
                vec![Activity::Text { text }]
            }
            Some("tool_use") => {
                let name = s("/part/tool").unwrap_or("tool").to_string();
                let input = v.pointer("/part/state/input");
                let detail = input.map(tool_detail).unwrap_or_default();
                let key = input.map(Value::to_string).unwrap_or_default();
                vec![self.tool(&name, &key, detail)]
            }
            Some("step_finish") => {
                if let Some(t) = part.and_then(|p| p.get("tokens")) {
                    let (i, o) = (self.count(t, "input"), self.count(t, "output"));
                    let cache = t.get("cache").cloned().unwrap_or(Value::Null);
                    let (r, w) = (self.count(&cache, "read"), self.count(&cache, "write"));
                    let i = i.saturating_add(r).saturating_add(w);
                    self.out.tokens_in = Some(self.out.tokens_in.unwrap_or(0).saturating_add(i));
                    self.out.tokens_out = Some(self.out.tokens_out.unwrap_or(0).saturating_add(o));
                }
                if let Some(c) = part.and_then(|p| p.get("cost")).filter(|c| !c.is_null()) {
                    match c.as_f64().filter(|c| c.is_finite() && *c >= 0.0) {
                        Some(c) => self.out.cost_usd = Some(self.out.cost_usd.unwrap_or(0.0) + c),
                        None => self.out.rejected.push(format!("cost {c}")),
                    }
                }
                Vec::new()
            }
            Some("error") => vec![Activity::Other {
                text: format!(
                    "opencode: {}",
                    s("/error/data/message")
                        .or_else(|| s("/error/name"))
                        .unwrap_or_default()
                ),
            }],
            _ => Vec::new(),
        }
    }

    fn codex(&mut self, v: &Value) -> Vec<Activity> {
        let item = v.get("item");
        let item_type = item.and_then(|i| i.get("type")).and_then(Value::as_str);
        match (v.get("type").and_then(Value::as_str), item_type) {
            (Some("item.completed"), Some("agent_message")) => {
                let text = item
                    .and_then(|i| i.get("text"))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                self.say(text);
                vec![Activity::Text {
                    text: text.to_string(),
                }]
            }
            (
                Some("item.started"),
                Some(t @ ("command_execution" | "mcp_tool_call" | "web_search" | "file_change")),
            ) => {
                let key = item
                    .and_then(|i| {
                        i.get("command")
                            .or_else(|| i.get("tool"))
                            .or_else(|| i.get("query"))
                    })
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let detail = one_line(&key);
                vec![self.tool(t, &key, detail)]
            }
            (Some("item.completed"), Some("file_change")) => {
                // file_change is reported completed without a started event.
                let key = item
                    .and_then(|i| i.get("changes"))
                    .map(Value::to_string)
                    .unwrap_or_default();
                vec![self.tool("file_change", &key, String::new())]
            }
            (Some("item.completed"), Some("error")) => {
                let m = item
                    .and_then(|i| i.get("message"))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                vec![Activity::Other {
                    text: format!("codex: {m}"),
                }]
            }
            (Some("turn.completed"), _) => {
                if let Some(u) = v.get("usage") {
                    let (i, o) = (
                        self.count(u, "input_tokens"),
                        self.count(u, "output_tokens"),
                    );
                    self.out.tokens_in = Some(self.out.tokens_in.unwrap_or(0).saturating_add(i));
                    self.out.tokens_out = Some(self.out.tokens_out.unwrap_or(0).saturating_add(o));
                }
                Vec::new()
            }
            _ => Vec::new(),
        }
    }
}

/// `line` with every number too large for an f64 (`1e309`, `-1e400`) replaced by `null`.
fn null_huge_numbers(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    let mut in_string = false;
    while let Some(c) = rest.chars().next() {
        if in_string {
            if c == '\\' {
                let esc: String = rest.chars().take(2).collect();
                out.push_str(&esc);
                rest = &rest[esc.len()..];
                continue;
            }
            in_string = c != '"';
            out.push(c);
            rest = &rest[c.len_utf8()..];
            continue;
        }
        if c == '-' || c.is_ascii_digit() {
            let len = rest
                .find(|ch: char| !(ch.is_ascii_digit() || "+-.eE".contains(ch)))
                .unwrap_or(rest.len());
            let num = &rest[..len];
            match num.parse::<f64>() {
                Ok(f) if !f.is_finite() => out.push_str("null"),
                _ => out.push_str(num),
            }
            rest = &rest[len..];
            continue;
        }
        in_string = c == '"';
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// A short description of a tool's input: the command, the file, or the first string.
fn tool_detail(input: &Value) -> String {
    for key in [
        "command",
        "file_path",
        "path",
        "pattern",
        "url",
        "description",
    ] {
        if let Some(s) = input.get(key).and_then(Value::as_str) {
            return one_line(s);
        }
    }
    String::new()
}

fn one_line(s: &str) -> String {
    let first = s.lines().next().unwrap_or_default();
    let mut out: String = first.chars().take(120).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_format_counts_stdout_only() {
        let mut p = OutputParser::new(OutputFormat::Text);
        p.line(Stream::Stdout, "hello");
        p.line(Stream::Stderr, "warning");
        let o = p.finish();
        assert_eq!(o.words, "hello");
        assert_eq!(o.last_text.as_deref(), Some("hello"));
    }

    #[test]
    fn claude_subagent_text_is_not_the_agents_words() {
        let mut p = OutputParser::new(OutputFormat::ClaudeStreamJson);
        p.line(Stream::Stdout, r#"{"type":"assistant","parent_tool_use_id":"toolu_1","message":{"content":[{"type":"text","text":"sub says <promise>COMPLETE</promise>"}]}}"#);
        p.line(Stream::Stdout, r#"{"type":"assistant","parent_tool_use_id":null,"message":{"content":[{"type":"text","text":"main"}]}}"#);
        p.line(Stream::Stdout, "not json at all");
        assert_eq!(p.finish().words, "main");
    }

    #[test]
    fn words_are_bounded_to_the_end() {
        let mut p = OutputParser::new(OutputFormat::Text);
        let big = "x".repeat(600 * 1024);
        p.line(Stream::Stdout, &big);
        p.line(Stream::Stdout, &big);
        p.line(Stream::Stdout, "the end");
        let o = p.finish();
        assert!(o.words.len() <= 2 * MAX_WORDS && o.words.ends_with("the end"));
        let mut p = OutputParser::new(OutputFormat::Text);
        for _ in 0..5 {
            p.line(Stream::Stdout, &big);
        }
        assert!(p.finish().words.len() <= 2 * MAX_WORDS);
    }

    #[test]
    fn tool_signature_depends_on_every_call_and_its_full_input() {
        let sig = |lines: &[&str]| {
            let mut p = OutputParser::new(OutputFormat::ClaudeStreamJson);
            for l in lines {
                p.line(Stream::Stdout, l);
            }
            p.finish().tool_signature
        };
        let call = |cmd: &str| {
            format!(
                r#"{{"type":"assistant","message":{{"content":[{{"type":"tool_use","name":"Bash","input":{{"command":"{cmd}"}}}}]}}}}"#
            )
        };
        let (a, b) = (call("npm test"), call("npm test -- --watch=false"));
        assert_eq!(sig(&[&a]), sig(&[&a]));
        assert_ne!(sig(&[&a]), sig(&[&b]));
        assert_ne!(sig(&[&a]), sig(&[&a, &a]));
        assert_eq!(
            sig(&[r#"{"type":"assistant","message":{"content":[{"type":"text","text":"hi"}]}}"#]),
            None
        );
    }
}
