//! The one readable form of an agent's output: its own words, one line per tool call
//! (`→ Write: calc.sh`), the rest as it came. The foreground run's renderer, `logs`, the
//! TUI's log pane and the report all show an agent this way; `logs --raw` shows the
//! iteration log unchanged.

use super::parse::{Activity, OutputFormat, OutputParser};
use super::runner::Stream;

/// The text of one activity: the words, `→ NAME: DETAIL` for a tool call, other output
/// as it came.
pub fn activity_text(a: &Activity) -> String {
    match a {
        Activity::Text { text } | Activity::Other { text } => text.clone(),
        Activity::ToolCall { name, detail } if detail.is_empty() => format!("→ {name}"),
        Activity::ToolCall { name, detail } => format!("→ {name}: {detail}"),
    }
}

/// The header note of an iteration log names the agent's output format after this.
pub const FORMAT_MARK: &str = "; output ";

/// Reads an iteration log line by line and gives its readable lines: the harness's notes
/// (`[taskdaemon] …`) and stderr (`[stderr] …`) as they are; the agent's stdout through
/// the parser of its output format, which the log's first note names (a log without it
/// is read as text: shown as it is).
#[derive(Debug)]
pub struct LogReader {
    parser: Option<OutputParser>,
}

impl Default for LogReader {
    fn default() -> Self {
        LogReader::new()
    }
}

impl LogReader {
    pub fn new() -> LogReader {
        LogReader { parser: None }
    }

    /// The readable lines `line` of the log stands for (none for what only the raw form
    /// has: a stream's bookkeeping events, tool results).
    pub fn line(&mut self, line: &str) -> Vec<String> {
        if let Some(note) = line.strip_prefix("[taskdaemon] ") {
            if let Some(format) = format_of(note) {
                self.parser = (format != OutputFormat::Text).then(|| OutputParser::new(format));
            }
            return vec![line.to_string()];
        }
        if line.starts_with("[stderr] ") {
            return vec![line.to_string()];
        }
        let Some(parser) = self.parser.as_mut() else {
            return vec![line.to_string()];
        };
        if !line.trim_start().starts_with('{') {
            return vec![line.to_string()];
        }
        parser
            .line(Stream::Stdout, line)
            .iter()
            .map(activity_text)
            .flat_map(|t| t.lines().map(str::to_string).collect::<Vec<_>>())
            .collect()
    }
}

/// The output format a log's header note names.
fn format_of(note: &str) -> Option<OutputFormat> {
    let rest = &note[note.find(FORMAT_MARK)? + FORMAT_MARK.len()..];
    let name = rest.split(';').next()?.trim();
    OutputFormat::parse(name).ok()
}

/// A whole iteration log, readable.
pub fn readable_log(text: &str) -> String {
    let mut r = LogReader::new();
    let mut out = String::with_capacity(text.len() / 2);
    for line in text.lines() {
        for l in r.line(line) {
            out.push_str(&l);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(format: &str, stdout: &str) -> String {
        let mut text = format!(
            "[taskdaemon] run r iteration 1/3 started t; agent x{FORMAT_MARK}{format}; prompt p (3 bytes)\n"
        );
        text.push_str(stdout);
        text.push_str("[stderr] a warning\n[taskdaemon] agent exited with 0\n");
        text
    }

    fn fixture(path: &str) -> String {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/");
        std::fs::read_to_string(format!("{root}{path}")).unwrap()
    }

    #[test]
    fn each_clis_stream_reads_as_words_and_one_line_per_tool_call() {
        let cases = [
            (
                "claude-stream-json",
                "claude-stream-json/1-tools-and-promise-inside-tool-call.jsonl",
            ),
            (
                "codex-json",
                "codex-exec-json/1-commands-and-promise-inside-command.jsonl",
            ),
            (
                "gemini-stream-json",
                "agent-failures/gemini/success-tool-call/stdout.jsonl",
            ),
            (
                "opencode-json",
                "agent-failures/opencode/success-tool-call/stdout.jsonl",
            ),
        ];
        for (format, path) in cases {
            let text = readable_log(&log(format, &fixture(path)));
            assert!(!text.contains("{\""), "{format}: JSON left:\n{text}");
            assert!(
                text.lines().any(|l| l.starts_with("→ ")),
                "{format}: no tool line:\n{text}"
            );
            assert!(text.starts_with("[taskdaemon] run r"), "{text}");
            assert!(
                text.contains("[stderr] a warning\n[taskdaemon] agent exited"),
                "{text}"
            );
        }
    }

    #[test]
    fn a_text_agents_log_and_one_without_a_format_stay_as_they_are() {
        let raw = "[taskdaemon] run r started; agent cmd:x; prompt p\n{\"type\":\"x\"}\nplain\n";
        assert_eq!(readable_log(raw), raw);
        let text = log("text", "{\"not\":\"parsed\"}\nhello\n");
        assert_eq!(readable_log(&text), text);
    }

    #[test]
    fn a_tool_call_reads_as_one_line() {
        let a = Activity::ToolCall {
            name: "Write".into(),
            detail: "calc.sh".into(),
        };
        assert_eq!(activity_text(&a), "→ Write: calc.sh");
    }
}
