//! Every parser that reads outside input never panics: agent output (Claude stream-json,
//! Codex JSON, plain text), plan files, spec documents, store lines and state files
//! (`.ralph/run.json`, `.ralph-state.json`). Loop YAML, templates, config and tasks.md have
//! their own properties next to their parsers.
//!
//! Each property runs a few thousand cases; `PROPTEST_CASES=N` runs N instead (the longer
//! run before a release).

use std::path::Path;

use proptest::prelude::*;
use serde_json::{Value, json};
use taskdaemon_core::agent::{OutputFormat, OutputParser, Stream};
use taskdaemon_core::docs::{check_plan, read_specs};
use taskdaemon_core::engine::RunState;
use taskdaemon_core::lifecycle::plan::Plan;
use taskdaemon_core::store::{Kind, Records};
use taskdaemon_core::worklist::state::ImplementState;
use taskdaemon_core::workspace::Workspace;

fn config(cases: u32) -> ProptestConfig {
    let mut c = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = cases;
    }
    c.failure_persistence = None;
    c
}

/// Any JSON value, a few levels deep, with the keys agents and records use.
fn any_json() -> impl Strategy<Value = Value> {
    let key = prop::sample::select(vec![
        "type",
        "subtype",
        "message",
        "content",
        "text",
        "name",
        "input",
        "id",
        "item",
        "command",
        "aggregated_output",
        "exit_code",
        "status",
        "usage",
        "input_tokens",
        "output_tokens",
        "total_cost_usd",
        "result",
        "is_error",
        "tool_use",
        "role",
        "updated-at",
        "created-at",
        "deps",
        "parent",
        "context",
        "iteration",
        "file",
    ]);
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        prop::sample::select(vec![
            "assistant",
            "user",
            "result",
            "system",
            "tool_use",
            "tool_result",
            "text",
            "item.completed",
            "item.started",
            "turn.completed",
            "command_execution",
            "agent_message",
            "reasoning",
            "error",
            "<promise>COMPLETE</promise>",
            "<promise>BLOCKED:x</promise>",
            "pending",
            "running",
            "ralph",
        ])
        .prop_map(Value::from),
        "\\PC{0,20}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..6).prop_map(|kv| {
                Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
            }),
        ]
    })
}

/// A line an agent might print: JSON, broken JSON, or text.
fn agent_line() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => any_json().prop_map(|v| v.to_string()),
        1 => any_json().prop_map(|v| {
            let s = v.to_string();
            let cut = s.len() / 2;
            s.char_indices().map(|(i, _)| i).find(|&i| i >= cut).map_or(s.clone(), |i| s[..i].to_string())
        }),
        1 => "\\PC{0,80}",
        1 => Just(json!({"type":"assistant","message":{"content":[{"type":"tool_use","name":"Bash","input":{"command":"ls"}}]}}).to_string()),
        1 => Just(json!({"type":"result","total_cost_usd":"NaN","usage":{"input_tokens":-1}}).to_string()),
        1 => Just(json!({"type":"item.completed","item":{"type":"command_execution","command":7,"exit_code":"x"}}).to_string()),
    ]
}

proptest! {
    #![proptest_config(config(4000))]
    #[test]
    fn agent_output_never_panics(
        lines in prop::collection::vec((agent_line(), any::<bool>()), 0..25),
        format in prop::sample::select(vec![
            OutputFormat::Text, OutputFormat::ClaudeStreamJson, OutputFormat::CodexJson,
        ]),
    ) {
        let mut p = OutputParser::new(format);
        for (line, stderr) in &lines {
            let stream = if *stderr { Stream::Stderr } else { Stream::Stdout };
            let _ = p.line(stream, line);
        }
        let _ = p.finish();
    }
}

proptest! {
    #![proptest_config(config(2000))]
    #[test]
    fn plan_files_never_panic(text in plan_text(), tsx in any::<bool>(), pass in 0u32..8) {
        let name = if tsx { "plan.tsx" } else { "plan.md" };
        let (plan, problems) = Plan::parse(Path::new(name), &text);
        let _ = plan.validate(problems);
        let _ = plan.section("Goals");
        let _ = plan.marked_for(1).count();
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join(name);
        std::fs::write(&f, &text).unwrap();
        let _ = check_plan(&f, pass);
    }

    #[test]
    fn state_files_never_panic(v in any_json(), raw in "\\PC{0,60}", as_text in any::<bool>()) {
        let d = tempfile::tempdir().unwrap();
        let text = if as_text { raw } else { v.to_string() };
        let ws = Workspace::new(d.path());
        std::fs::create_dir_all(ws.root()).unwrap();
        std::fs::write(ws.run_state(), &text).unwrap();
        let _ = RunState::load(&ws);
        std::fs::write(ImplementState::path(d.path()), &text).unwrap();
        let _ = ImplementState::load(d.path());
    }
}

proptest! {
    #![proptest_config(config(1500))]
    #[test]
    fn spec_documents_never_panic(docs in prop::collection::vec(spec_text(), 0..4)) {
        let d = tempfile::tempdir().unwrap();
        for (i, text) in docs.iter().enumerate() {
            std::fs::write(d.path().join(format!("0{i}-s.md")), text).unwrap();
        }
        let _ = read_specs(d.path());
    }

    #[test]
    fn store_lines_never_panic(lines in prop::collection::vec(store_line(), 0..12)) {
        let d = tempfile::tempdir().unwrap();
        let store = d.path().join(".taskdaemon/store");
        std::fs::create_dir_all(&store).unwrap();
        for (i, coll) in ["plans", "specs", "runs"].iter().enumerate() {
            let text: String = lines.iter().skip(i).step_by(3).map(|l| format!("{l}\n")).collect();
            std::fs::write(store.join(format!("{coll}.jsonl")), text).unwrap();
        }
        let opts = taskstore::StoreOptions { fsync: false, ..Default::default() };
        if let Ok(records) = Records::open_with(d.path(), opts) {
            for k in Kind::ALL {
                let _ = records.list(k, &[]);
            }
            let _ = records.check_graph();
        }
    }
}

/// Markdown and TSX plan pieces.
fn plan_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("# Title\n".to_string()),
        Just("## Goals\n".to_string()),
        Just("## ".to_string()),
        Just("<!-- TASK-1 [ADD] 3 items: x -->\n".to_string()),
        Just("<!-- TASK-2 [MODIFY]: y -->\n".to_string()),
        Just("<!-- EXISTING 4 items PRESERVED -->\n".to_string()),
        Just("{/* TASK-1 [FIX]: z check: true */}\n".to_string()),
        Just("<Screen name=\"a\">\n".to_string()),
        Just("<Section name=\"b\" files=\"src/a.rs\">\n".to_string()),
        Just("</Section>\n".to_string()),
        Just("Files: src/a.rs, ../x\n".to_string()),
        Just("<!--".to_string()),
        Just("-->".to_string()),
        Just("\n".to_string()),
        Just("é".to_string()),
        "[ -~]{0,16}".prop_map(|s| s),
    ];
    prop::collection::vec(piece, 0..40).prop_map(|v| v.concat())
}

/// Spec documents: front matter pieces and prose.
fn spec_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("---\n".to_string()),
        Just("title: T\n".to_string()),
        Just("deps: [a, 01-s.md, 1234-spec-x]\n".to_string()),
        Just("phases: [one, \"two: d\"]\n".to_string()),
        Just("validate: true\n".to_string()),
        Just("priority: 99999999999999999999\n".to_string()),
        Just("deps: {a: 1}\n".to_string()),
        Just(": :\n".to_string()),
        Just("\n".to_string()),
        "[ -~]{0,16}".prop_map(|s| s),
    ];
    prop::collection::vec(piece, 0..20).prop_map(|v| v.concat())
}

/// A store line: a plausible record with odd values, a tombstone, or junk.
fn store_line() -> impl Strategy<Value = String> {
    let id = prop::sample::select(vec![
        "a1b2c3-plan-p",
        "d4e5f6-spec-s",
        "0a0b0c-run-r",
        "x",
        "",
        "a1b2c3",
    ]);
    prop_oneof![
        3 => (id.clone(), any_json(), any::<i64>(), any::<bool>()).prop_map(|(id, extra, t, dep)| {
            let mut v = json!({
                "id": id, "title": "t", "status": "pending", "file": "../../outside.md",
                "parent": "a1b2c3-plan-p", "loop-type": "ralph", "iteration": 1,
                "created-at": t, "updated-at": t,
                "context": {"specs-dir": "/etc", "agent": "cmd:true", "plan-file": 3},
            });
            if dep { v["deps"] = json!([id, "d4e5f6-spec-s"]); }
            if let (Value::Object(m), Value::Object(e)) = (&mut v, extra) {
                m.extend(e);
            }
            v.to_string()
        }),
        1 => (id, any::<i64>()).prop_map(|(id, t)| json!({"_deleted": true, "id": id, "updated-at": t}).to_string()),
        1 => "\\PC{0,60}",
        1 => Just("<<<<<<< ours".to_string()),
    ]
}
