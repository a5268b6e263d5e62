//! A notice as text: plain, CommonMark, Slack's mrkdwn and Matrix's HTML, and the payload
//! each kind of receiver reads. A command is one code span (no backticks around
//! backticks: a command with a backtick of its own goes into a fenced block).

use serde_json::{Value, json};

use super::{Format, Notice};

/// The Markdown flavours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    CommonMark,
    /// Slack's mrkdwn: `*bold*`, `&`, `<`, `>` escaped.
    Slack,
    /// Matrix's `formatted_body`: HTML.
    Html,
}

/// The longest message Discord takes in `content`.
const DISCORD_MAX: usize = 2000;

/// The figures line: `2 iterations · 1m 3s · $0.02 · commit 1a2b3c4d`.
fn figures(n: &Notice, code: &dyn Fn(&str) -> String) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(i) = n.iterations {
        parts.push(format!("{i} iteration{}", if i == 1 { "" } else { "s" }));
    }
    if let Some(ms) = n.duration_ms {
        parts.push(crate::duration::format_duration(
            std::time::Duration::from_millis(ms),
        ));
    }
    if n.iterations.is_some() {
        parts.push(match n.cost_usd {
            Some(c) => format!("${c:.2}"),
            None => "cost not reported".into(),
        });
    }
    if let Some(c) = &n.commit {
        parts.push(format!("commit {}", code(short(c))));
    }
    (!parts.is_empty()).then(|| parts.join(" · "))
}

fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

/// The plain text.
pub(crate) fn plain(n: &Notice) -> String {
    let mut t = n.summary();
    if !n.reason.is_empty() {
        t.push_str(&format!("\nreason: {}", n.reason.replace('\n', "\n  ")));
    }
    match (&n.action, &n.action_note) {
        (Some(a), Some(note)) => t.push_str(&format!("\nnext ({note}): {a}")),
        (Some(a), None) => t.push_str(&format!("\nnext: {a}")),
        (None, Some(note)) => t.push_str(&format!("\nnext: {note}")),
        (None, None) => {}
    }
    if let Some(f) = figures(n, &|s| s.to_string()) {
        t.push_str(&format!("\n{f}"));
    }
    t.push_str(&format!("\nrepository: {}", n.repository));
    if let Some(l) = &n.link {
        t.push_str(&format!("\n{l}"));
    }
    t
}

fn escape(d: Dialect, s: &str) -> String {
    match d {
        Dialect::CommonMark => s.to_string(),
        Dialect::Slack => s
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;"),
        Dialect::Html => s
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;"),
    }
}

fn bold(d: Dialect, s: &str) -> String {
    match d {
        Dialect::CommonMark => format!("**{}**", s),
        Dialect::Slack => format!("*{}*", escape(d, s)),
        Dialect::Html => format!("<b>{}</b>", escape(d, s)),
    }
}

/// `s` as inline code; text with a backtick of its own as plain text (a code span
/// would be broken apart by it).
fn code(d: Dialect, s: &str) -> String {
    match d {
        Dialect::Html => format!("<code>{}</code>", escape(d, s)),
        _ if s.contains('`') || s.contains('\n') => escape(d, s),
        _ => format!("`{}`", escape(d, s)),
    }
}

/// A command to copy: a code span, or a fenced block when it holds a backtick.
fn command(d: Dialect, s: &str) -> String {
    match d {
        Dialect::Html => format!("<pre><code>{}</code></pre>", escape(d, s)),
        _ if s.contains('`') => format!("\n```\n{}\n```", escape(d, s).replace("```", "'''")),
        _ => format!("`{}`", escape(d, s)),
    }
}

fn quote_block(d: Dialect, s: &str) -> String {
    match d {
        Dialect::Html => format!(
            "<blockquote>{}</blockquote>",
            escape(d, s).replace('\n', "<br>")
        ),
        _ => format!("> {}", escape(d, s).replace('\n', "\n> ")),
    }
}

/// The notice in Markdown (`d`: which flavour).
pub(crate) fn markdown(n: &Notice, d: Dialect) -> String {
    let nl = if d == Dialect::Html { "<br>\n" } else { "\n" };
    let mut lines = Vec::new();
    let mut head = format!("{} ", bold(d, "taskdaemon:"));
    match &n.run {
        Some(run) => {
            head.push_str(&format!("run {}", code(d, run)));
            if let Some(t) = &n.title {
                head.push_str(&format!(" “{}”", escape(d, t)));
            }
            head.push_str(&format!(" in {} ", code(d, &n.repo_name())));
        }
        None => head.push_str(&format!("in {} ", code(d, &n.repo_name()))),
    }
    head.push_str(&bold(d, &n.headline()));
    lines.push(head);
    if !n.reason.is_empty() {
        lines.push(quote_block(d, &n.reason));
    }
    let next = bold(d, "Next:");
    match (&n.action, &n.action_note) {
        (Some(a), note) => {
            let note = note
                .as_ref()
                .map(|t| format!(" {}:", escape(d, t)))
                .unwrap_or_default();
            lines.push(format!("{next}{note} {}", command(d, a)));
        }
        (None, Some(note)) => lines.push(format!("{next} {}", escape(d, note))),
        (None, None) => {}
    }
    if let Some(f) = figures(n, &|s| code(d, s)) {
        lines.push(f);
    }
    if let Some(l) = &n.link {
        lines.push(match d {
            Dialect::Slack => format!("<{l}|the run's page>"),
            Dialect::Html => format!("<a href=\"{}\">the run's page</a>", escape(d, l)),
            Dialect::CommonMark => format!("[the run's page]({l})"),
        });
    }
    lines.join(nl)
}

/// Cut `s` to at most `max` characters, marking the cut.
fn cut(s: String, max: usize) -> String {
    if s.chars().count() <= max {
        return s;
    }
    let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
    t.push('…');
    t
}

/// The payload for a receiver of `format`.
pub(crate) fn body(n: &Notice, format: Format) -> Value {
    let mut v = serde_json::to_value(n).unwrap_or(Value::Null);
    let Some(o) = v.as_object_mut() else {
        return v;
    };
    o.insert("text".into(), json!(plain(n)));
    o.insert("markdown".into(), json!(markdown(n, Dialect::CommonMark)));
    match format {
        Format::Json => {}
        Format::Slack => {
            o.insert("text".into(), json!(markdown(n, Dialect::Slack)));
        }
        Format::Discord => {
            o.insert(
                "content".into(),
                json!(cut(markdown(n, Dialect::CommonMark), DISCORD_MAX)),
            );
        }
        Format::Matrix => {
            o.insert("msgtype".into(), json!("m.text"));
            o.insert("body".into(), json!(plain(n)));
            o.insert("format".into(), json!("org.matrix.custom.html"));
            o.insert("formatted_body".into(), json!(markdown(n, Dialect::Html)));
        }
    }
    v
}
