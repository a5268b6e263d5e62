//! Transcripts recorded from the real Claude Code and Codex CLIs (see fixtures/*/README.md)
//! through the parsers and the promise scanner, as the engine uses them.

use std::path::Path;

use taskdaemon_core::agent::{OutputFormat, OutputParser, ParsedOutput, Stream};
use taskdaemon_core::signals::{Signal, scan};

fn parse(rel: &str, format: OutputFormat) -> ParsedOutput {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut p = OutputParser::new(format);
    for line in text.lines() {
        p.line(Stream::Stdout, line);
    }
    p.finish()
}

#[test]
fn claude_promise_inside_a_tool_call_is_not_a_promise() {
    let o = parse(
        "claude-stream-json/1-tools-and-promise-inside-tool-call.jsonl",
        OutputFormat::ClaudeStreamJson,
    );
    assert_eq!(o.tool_calls, 4);
    assert_eq!(o.cost_usd, Some(0.025));
    assert_eq!(o.tokens_in, Some(5000));
    assert_eq!(o.tokens_out, Some(250));
    assert_eq!(
        o.last_text.as_deref(),
        Some("Wrote calc.py; add(2,3) prints 5. Not finished yet: tests next.")
    );
    assert!(!o.words.contains("<promise>"), "{}", o.words);
    assert_eq!(scan(&o.words, "COMPLETE").signal, None);
}

#[test]
fn claude_complete_is_said() {
    let o = parse(
        "claude-stream-json/2-complete.jsonl",
        OutputFormat::ClaudeStreamJson,
    );
    assert_eq!(o.tool_calls, 1);
    assert_eq!(o.cost_usd, Some(0.01));
    assert_eq!(
        o.last_text.as_deref(),
        Some("Committed and verified.\n<promise>COMPLETE</promise>")
    );
    assert_eq!(scan(&o.words, "COMPLETE").signal, Some(Signal::Complete));
}

#[test]
fn claude_blocked_carries_its_reason() {
    let o = parse(
        "claude-stream-json/3-blocked.jsonl",
        OutputFormat::ClaudeStreamJson,
    );
    assert_eq!(o.tool_calls, 0);
    assert_eq!(
        scan(&o.words, "COMPLETE").signal,
        Some(Signal::Blocked(
            "the payment sandbox needs an API key".into()
        ))
    );
}

#[test]
fn codex_promise_inside_a_command_is_not_a_promise() {
    let o = parse(
        "codex-exec-json/1-commands-and-promise-inside-command.jsonl",
        OutputFormat::CodexJson,
    );
    assert_eq!(o.tool_calls, 2);
    assert_eq!((o.tokens_in, o.tokens_out), (Some(3600), Some(120)));
    assert_eq!(o.cost_usd, None);
    assert_eq!(
        o.last_text.as_deref(),
        Some("Wrote calc.py; not finished yet.")
    );
    assert_eq!(scan(&o.words, "COMPLETE").signal, None);
}

#[test]
fn codex_complete_is_said() {
    let o = parse("codex-exec-json/2-complete.jsonl", OutputFormat::CodexJson);
    assert_eq!(o.tool_calls, 1);
    assert_eq!(scan(&o.words, "COMPLETE").signal, Some(Signal::Complete));
}

#[test]
fn parsers_never_panic_on_garbage() {
    for format in [
        OutputFormat::Text,
        OutputFormat::ClaudeStreamJson,
        OutputFormat::CodexJson,
    ] {
        let mut p = OutputParser::new(format);
        for line in [
            "",
            "{",
            "null",
            "[]",
            "{\"type\":5}",
            "{\"type\":\"assistant\",\"message\":{\"content\":\"x\"}}",
            "{\"type\":\"result\",\"usage\":[],\"total_cost_usd\":\"a\"}",
            "{\"type\":\"item.completed\",\"item\":null}",
            "{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":-1}}",
            "\u{feff}é<promise>",
        ] {
            p.line(Stream::Stdout, line);
            p.line(Stream::Stderr, line);
        }
        let _ = p.finish();
    }
}
