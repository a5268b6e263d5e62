//! Every recorded failure of the real Claude Code and Codex CLIs
//! (`fixtures/agent-failures/README.md`) through the parser and the failure model, plus
//! text variants from public reports.

use std::path::Path;

use jiff::tz::TimeZone;
use jiff::{Timestamp, Zoned};
use taskdaemon_core::agent::failure::{class_of_text, describe_reset, parse_reset};
use taskdaemon_core::agent::{FailureClass, OutputFormat, OutputParser, Stream, classify};

use FailureClass::*;

/// The time the fixtures were recorded around, in the zone each case ran in.
fn now(tz: &str) -> Zoned {
    "2026-11-24T00:30:00Z"
        .parse::<Timestamp>()
        .unwrap()
        .to_zoned(TimeZone::get(tz).unwrap())
}

fn run(case: &str) -> (FailureClass, Option<String>, Option<Timestamp>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/agent-failures")
        .join(case);
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("meta.json")).unwrap()).unwrap();
    let format = if case.starts_with("claude") {
        OutputFormat::ClaudeStreamJson
    } else {
        OutputFormat::CodexJson
    };
    let mut p = OutputParser::new(format);
    for line in std::fs::read_to_string(dir.join("stdout.jsonl"))
        .unwrap()
        .lines()
    {
        p.line(Stream::Stdout, line);
    }
    for line in std::fs::read_to_string(dir.join("stderr.txt"))
        .unwrap_or_default()
        .lines()
    {
        p.line(Stream::Stderr, line);
    }
    // A case still running when recorded: the harness's own deadline ends it (TERM).
    let (code, timed_out) = match meta["exit_code"].as_i64() {
        Some(c) => (c as i32, false),
        None => (143, true),
    };
    let tz = meta["env"]["TZ"]
        .as_str()
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or("UTC");
    let r = classify(code, timed_out, &p.finish().evidence, &now(tz));
    (r.class, r.line, r.reset_at)
}

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

#[test]
fn every_claude_fixture_is_classified() {
    let cases: &[(&str, FailureClass, Option<&str>)] = &[
        ("connection-refused", Unreachable, None),
        ("invalid-api-key", Auth, None),
        ("invalid-api-key-x-should-retry-false", Auth, None),
        ("no-credentials", Auth, None),
        ("overloaded-529", Overloaded, None),
        ("overloaded-529-max-retries-2", Overloaded, None),
        ("rate-limit-429", RateLimited, None),
        ("rate-limit-429-then-ok", Ok, None),
        ("root-without-is-sandbox", CouldNotStart, None),
        ("usage-allowed-subscription", Ok, None),
        ("usage-limit-api-key", RateLimited, None),
        (
            "usage-limit-subscription",
            UsageLimit,
            Some("2026-11-24T02:26:35Z"),
        ),
        (
            "usage-limit-subscription-tz-next-day",
            UsageLimit,
            Some("2026-11-24T02:38:07Z"),
        ),
        (
            "usage-limit-subscription-weekly",
            UsageLimit,
            Some("2026-11-28T01:28:47Z"),
        ),
        ("usage-warning-api-key", Ok, None),
        ("usage-warning-subscription", Ok, None),
        ("usage-warning-subscription-unified-only", Ok, None),
    ];
    for (case, class, reset) in cases {
        let (got, line, at) = run(&format!("claude/{case}"));
        assert_eq!(got, *class, "claude/{case}: {line:?}");
        assert_eq!(at, reset.map(ts), "claude/{case}");
        if *class != Ok {
            assert!(
                line.is_some_and(|l| !l.is_empty()),
                "claude/{case}: the agent's line"
            );
        }
    }
}

#[test]
fn every_codex_fixture_is_classified() {
    let cases: &[(&str, FailureClass, Option<&str>)] = &[
        ("connection-refused", Unreachable, None),
        ("connection-refused-no-retries", Unreachable, None),
        ("invalid-api-key", Auth, None),
        ("invalid-api-key-builtin-provider", Auth, None),
        ("no-credentials-builtin-provider", Auth, None),
        ("no-credentials-default-provider-offline", Unreachable, None),
        ("no-credentials-provider-env-key", Auth, None),
        ("quota-exceeded-api-key", UsageLimit, None),
        ("rate-limit-429", RateLimited, None),
        ("rate-limit-429-builtin-provider", RateLimited, None),
        ("server-error-500", Overloaded, None),
        ("server-error-500-builtin-provider", Overloaded, None),
        ("server-error-500-no-retries", Overloaded, None),
        ("server-error-500-then-ok", Ok, None),
        ("service-unavailable-503", Overloaded, None),
        (
            "usage-limit-api-key",
            UsageLimit,
            Some("2026-11-24T02:36:00Z"),
        ),
        // Azores (UTC-1): "Nov 24th, 2026 1:38 AM" local.
        (
            "usage-limit-api-key-tz-next-day",
            UsageLimit,
            Some("2026-11-24T02:38:00Z"),
        ),
        (
            "usage-limit-chatgpt",
            UsageLimit,
            Some("2026-11-24T02:36:00Z"),
        ),
        (
            "usage-limit-chatgpt-builtin-provider",
            UsageLimit,
            Some("2026-11-24T02:35:00Z"),
        ),
        (
            "usage-limit-chatgpt-builtin-provider-handshake-429",
            UsageLimit,
            Some("2026-11-24T02:35:00Z"),
        ),
        (
            "usage-limit-chatgpt-weekly",
            UsageLimit,
            Some("2026-11-28T01:28:00Z"),
        ),
        ("usage-warning-chatgpt", Ok, None),
    ];
    for (case, class, reset) in cases {
        let (got, line, at) = run(&format!("codex/{case}"));
        assert_eq!(got, *class, "codex/{case}: {line:?}");
        assert_eq!(at, reset.map(ts), "codex/{case}");
    }
}

#[test]
fn text_variants_from_public_reports() {
    let n = now("Europe/Warsaw"); // 01:30 local
    let cases: &[(&str, FailureClass, Option<&str>)] = &[
        (
            "Claude AI usage limit reached|1795487195",
            UsageLimit,
            Some("2026-11-24T02:26:35Z"),
        ),
        (
            "5-hour limit reached ∙ resets 2am",
            UsageLimit,
            Some("2026-11-24T01:00:00Z"),
        ),
        (
            "You've hit your session limit · resets 4:20am (Europe/Warsaw)",
            UsageLimit,
            Some("2026-11-24T03:20:00Z"),
        ),
        (
            "You've hit your limit · resets 4:20am (Europe/Warsaw)",
            UsageLimit,
            Some("2026-11-24T03:20:00Z"),
        ),
        (
            "You're out of extra usage · resets 9pm",
            UsageLimit,
            Some("2026-11-24T20:00:00Z"),
        ),
        (
            "You’ve hit your usage limit. Try again at Apr 28th, 2027 10:03 PM.",
            UsageLimit,
            Some("2027-04-28T20:03:00Z"),
        ),
        (
            "You've hit your weekly limit · resets Nov 28, 1:28am (UTC)",
            UsageLimit,
            Some("2026-11-28T01:28:00Z"),
        ),
        ("Not logged in · Please run /login", Auth, None),
        // amp without a key (recorded from @sourcegraph/amp with an empty HOME).
        ("No API key found. Starting login flow...", Auth, None),
        ("API Error: 529 Overloaded.", Overloaded, None),
        ("sh: 1: /nonexistent: not found", CouldNotStart, None),
        (
            "--dangerously-skip-permissions cannot be used with root/sudo privileges for security reasons",
            CouldNotStart,
            None,
        ),
        (
            "Reconnecting... waiting for network (Connection failed: error sending request)",
            Unreachable,
            None,
        ),
    ];
    for (text, class, reset) in cases {
        assert_eq!(class_of_text(text), Some(*class), "{text}");
        assert_eq!(parse_reset(text, &n), reset.map(ts), "{text}");
    }
    assert_eq!(class_of_text("all tests pass"), None);
}

#[test]
fn a_reset_given_to_the_minute_that_is_now_is_the_end_of_that_minute() {
    // Codex prints its reset to the minute; a second refusal within it is not tomorrow.
    let n = jiff::Timestamp::from_second(ts("2026-11-24T21:33:20Z").as_second())
        .unwrap()
        .to_zoned(jiff::tz::TimeZone::UTC);
    assert_eq!(
        parse_reset("You've hit your usage limit. Try again at 9:33 PM.", &n),
        Some(ts("2026-11-24T21:34:00Z"))
    );
    // A minute later it is tomorrow's.
    let later = jiff::Timestamp::from_second(ts("2026-11-24T21:34:30Z").as_second())
        .unwrap()
        .to_zoned(jiff::tz::TimeZone::UTC);
    assert_eq!(
        parse_reset("You've hit your usage limit. Try again at 9:33 PM.", &later),
        Some(ts("2026-11-25T21:33:00Z"))
    );
}

#[test]
fn a_clock_time_already_past_today_is_tomorrow() {
    let n = now("UTC");
    assert_eq!(
        parse_reset("resets 12:10am (UTC)", &n),
        Some(ts("2026-11-25T00:10:00Z"))
    );
    assert_eq!(
        describe_reset(ts("2026-11-24T02:43:00Z"), &n),
        "02:43 (in 2h 13m)"
    );
}

#[test]
fn a_cmd_agent_that_is_missing_could_not_start_and_a_plain_crash_is_a_crash() {
    let mut p = OutputParser::new(OutputFormat::Text);
    p.line(Stream::Stderr, "sh: 1: exec: /nonexistent: not found");
    let r = classify(127, false, &p.finish().evidence, &now("UTC"));
    assert_eq!(r.class, CouldNotStart);
    assert!(r.line.unwrap().contains("/nonexistent"));
    let mut p = OutputParser::new(OutputFormat::Text);
    p.line(Stream::Stdout, "segfault in module x");
    assert_eq!(
        classify(139, false, &p.finish().evidence, &now("UTC")).class,
        Crashed
    );
}

#[test]
fn costs_and_tokens_that_cannot_be_true_are_ignored() {
    let mut p = OutputParser::new(OutputFormat::ClaudeStreamJson);
    p.line(Stream::Stdout, r#"{"type":"result","subtype":"success","is_error":false,"result":"done","total_cost_usd":-15,"usage":{"input_tokens":-3,"output_tokens":7}}"#);
    let o = p.finish();
    assert_eq!(o.cost_usd, None);
    assert_eq!((o.tokens_in, o.tokens_out), (Some(0), Some(7)));
    assert_eq!(o.rejected.len(), 2, "{:?}", o.rejected);
    let mut p = OutputParser::new(OutputFormat::ClaudeStreamJson);
    p.line(Stream::Stdout, r#"{"type":"result","subtype":"success","is_error":false,"result":"done <promise>COMPLETE</promise>","total_cost_usd":1e309}"#);
    let o = p.finish();
    assert_eq!(o.cost_usd, None);
    assert!(
        o.words.contains("<promise>COMPLETE</promise>"),
        "the result line is kept"
    );
    assert!(!o.rejected.is_empty());
}

#[test]
fn the_alternative_handshake_429_is_a_rate_limit() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(
        "tests/fixtures/agent-failures/codex/usage-limit-chatgpt-builtin-provider-handshake-429",
    );
    let mut p = OutputParser::new(OutputFormat::CodexJson);
    for line in std::fs::read_to_string(dir.join("stdout.alt.jsonl"))
        .unwrap()
        .lines()
    {
        p.line(Stream::Stdout, line);
    }
    assert_eq!(
        classify(1, false, &p.finish().evidence, &now("UTC")).class,
        RateLimited
    );
}

/// A recorded case of `agent` (`<fixtures>/agent-failures/<agent>/<case>/`) through the
/// parser: its stdout and stderr lines, and the exit code it recorded.
fn replay_case(
    agent: &str,
    format: OutputFormat,
    case: &str,
) -> (taskdaemon_core::agent::ParsedOutput, i32) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/agent-failures")
        .join(agent)
        .join(case);
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("meta.json")).unwrap()).unwrap();
    let mut p = OutputParser::new(format);
    for (file, stream) in [
        ("stdout.jsonl", Stream::Stdout),
        ("stderr.txt", Stream::Stderr),
    ] {
        for line in std::fs::read_to_string(dir.join(file)).unwrap().lines() {
            p.line(stream, line);
        }
    }
    (p.finish(), meta["exit_code"].as_i64().unwrap() as i32)
}

fn gemini(case: &str) -> (taskdaemon_core::agent::ParsedOutput, i32) {
    replay_case("gemini", OutputFormat::GeminiStreamJson, case)
}

#[test]
fn gemini_stream_json_is_read_words_tools_tokens_and_failures() {
    let (o, code) = gemini("success-tool-call");
    assert_eq!(o.tool_calls, 1);
    assert_eq!(
        o.last_tool.as_deref(),
        Some("run_shell_command: echo hi > hello.txt")
    );
    assert_eq!((o.tokens_in, o.tokens_out), (Some(3600), Some(90)));
    assert!(
        o.words.contains("<promise>COMPLETE</promise>"),
        "{}",
        o.words
    );
    assert!(
        !o.words.contains("Create hello.txt"),
        "the user's prompt is not the agent's words"
    );
    assert_eq!(classify(code, false, &o.evidence, &now("UTC")).class, Ok);

    let (o, code) = gemini("invalid-api-key");
    let r = classify(code, false, &o.evidence, &now("UTC"));
    assert_eq!(r.class, Auth);
    assert!(r.line.unwrap().contains("API key not valid"));

    let (o, code) = gemini("no-auth-method");
    let r = classify(code, false, &o.evidence, &now("UTC"));
    assert_eq!(r.class, Auth);
    assert_eq!(r.line.as_deref(), Some("Invalid auth method selected."));
}

#[test]
fn gemini_promise_split_across_deltas_is_one_promise() {
    let mut p = OutputParser::new(OutputFormat::GeminiStreamJson);
    for piece in ["all done <prom", "ise>COMPLETE</pro", "mise>"] {
        p.line(
            Stream::Stdout,
            &serde_json::json!({"type":"message","role":"assistant","content":piece,"delta":true})
                .to_string(),
        );
    }
    p.line(
        Stream::Stdout,
        r#"{"type":"result","status":"success","stats":{"input_tokens":5,"output_tokens":2}}"#,
    );
    let o = p.finish();
    assert_eq!(
        taskdaemon_core::signals::scan(&o.words, "COMPLETE").signal,
        Some(taskdaemon_core::signals::Signal::Complete)
    );
}

fn opencode(case: &str) -> (taskdaemon_core::agent::ParsedOutput, i32) {
    replay_case("opencode", OutputFormat::OpencodeJson, case)
}

#[test]
fn opencode_json_is_read_words_tools_tokens_cost_and_failures() {
    let (o, code) = opencode("success-tool-call");
    assert_eq!(o.tool_calls, 1);
    assert_eq!(o.last_tool.as_deref(), Some("bash: echo hi > hello.txt"));
    assert!(o.tool_signature.is_some());
    // Two steps (the tool call, then the answer), 1200 in / 30 out each.
    assert_eq!((o.tokens_in, o.tokens_out), (Some(2400), Some(60)));
    let cost = o.cost_usd.unwrap();
    assert!((cost - 0.0081).abs() < 1e-9, "{cost}");
    assert_eq!(
        o.words,
        "Created hello.txt. hello <promise>COMPLETE</promise>"
    );
    assert!(o.rejected.is_empty(), "{:?}", o.rejected);
    assert_eq!(classify(code, false, &o.evidence, &now("UTC")).class, Ok);

    let (o, code) = opencode("invalid-api-key");
    assert_eq!(o.evidence.api_error_status, Some(401));
    let r = classify(code, false, &o.evidence, &now("UTC"));
    assert_eq!(r.class, Auth);
    assert_eq!(
        r.line.as_deref(),
        Some("Incorrect API key provided: fake-key.")
    );

    let (o, code) = opencode("connection-refused");
    let r = classify(code, false, &o.evidence, &now("UTC"));
    assert_eq!(r.class, Unreachable);
    assert!(r.line.unwrap().starts_with("Cannot connect to API"));
}

#[test]
fn opencode_promise_in_a_tool_input_or_output_is_not_the_agents_words() {
    let mut p = OutputParser::new(OutputFormat::OpencodeJson);
    let tool = serde_json::json!({"type":"tool_use","part":{"type":"tool","tool":"bash",
        "state":{"status":"completed","input":{"command":"echo '<promise>COMPLETE</promise>'"},
        "output":"<promise>COMPLETE</promise>"}}});
    p.line(Stream::Stdout, &tool.to_string());
    p.line(
        Stream::Stdout,
        r#"{"type":"text","part":{"type":"text","text":"not done yet"}}"#,
    );
    p.line(
        Stream::Stdout,
        r#"{"type":"step_finish","part":{"tokens":{"input":-5,"output":2,"cache":{"read":10,"write":0}},"cost":"x"}}"#,
    );
    let o = p.finish();
    assert_eq!(o.words, "not done yet");
    assert_eq!(o.tool_calls, 1);
    assert_eq!((o.tokens_in, o.tokens_out), (Some(10), Some(2)));
    assert_eq!(o.cost_usd, None);
    assert_eq!(o.rejected.len(), 2, "{:?}", o.rejected);
}
