//! The report as one HTML file: inline CSS and SVG, no script, no external resource.
//! Every text that comes from a run (task, logs, prompts, notes, titles) goes through
//! [`esc`].

use std::fmt::Write as _;

use super::{Amount, Iteration, RecordRow, Report, ReviewVerdict, RunData, Validation, cards, svg};

/// HTML-escape text for element content and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() && c != '\n' && c != '\t' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = r#"
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;background:#f5f6f8;color:#1d2228}
main{max-width:1180px;margin:0 auto;padding:20px 24px 60px}
h1{font-size:22px;margin:0 0 2px}h2{font-size:18px;margin:28px 0 6px;border-bottom:1px solid #d5d9df;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}.sub{color:#5a626c;margin:0 0 14px}
.warn{background:#fff4e0;border:1px solid #e0a030;border-radius:6px;padding:8px 12px}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:10px 0}
.card{background:#fff;border:1px solid #dde1e6;border-radius:6px;padding:8px 12px;min-width:112px}
.card b{display:block;font-size:17px}.card span{color:#5a626c;font-size:12px}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(340px,1fr));gap:10px;margin-top:10px}
svg.plot,svg.timeline{background:#fff;border:1px solid #dde1e6;border-radius:6px;width:100%;height:auto}
svg .grid{stroke:#e6e9ed}svg .ax{font-size:11px;fill:#5a626c}svg .pt{font-size:12px;font-weight:600;fill:#333}svg .none{font-size:12px;fill:#9aa0a6}
svg .cell{font-size:13px;fill:#fff;font-weight:600}svg .wait{fill:#c3c7cc}
svg .line{fill:none;stroke:#3b7dd8;stroke-width:2}svg .dot{fill:#3b7dd8}
table{border-collapse:collapse;width:100%;background:#fff;border:1px solid #dde1e6;font-size:13px}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid #eceef1;vertical-align:top}
th{background:#eef0f3;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;color:#fff;border-radius:3px;padding:0 6px;font-size:12px;font-weight:600}
.pass{color:#2e9d4f;font-weight:600}.review{color:#3b7dd8;font-weight:600}.fail{color:#c93c3c;font-weight:600}.skip{color:#7a7f87}
.notes{font-family:ui-monospace,monospace;font-size:12px;color:#39414a;white-space:pre-wrap;word-break:break-word}
details{background:#fff;border:1px solid #dde1e6;border-radius:6px;margin:6px 0;padding:4px 10px}
summary{cursor:pointer;font-weight:600}
pre{white-space:pre-wrap;word-break:break-word;font-size:12px;background:#f7f8fa;border:1px solid #eceef1;padding:8px;max-height:520px;overflow:auto}
.legend span{margin-right:12px;font-size:12px}.legend i{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:4px}
.muted{color:#7a7f87}
"#;

pub fn render(report: &Report) -> String {
    let mut out = String::with_capacity(64 * 1024);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\
<title>taskdaemon report: {}</title><style>{STYLE}</style></head><body><main>\
<h1>taskdaemon report: {}</h1><p class=\"sub\">made {} · {} run(s)</p>",
        esc(&report.subject),
        esc(&report.subject),
        esc(&report.generated_at),
        report.runs.len()
    );
    if report.runs.len() > 1 {
        cards::overview(&mut out, &report.runs);
    }
    if !report.records.is_empty() {
        records(&mut out, &report.records);
    }
    for run in &report.runs {
        run_section(&mut out, run);
    }
    if report.runs.is_empty() {
        out.push_str("<p class=\"muted\">No run has iteration data yet.</p>");
    }
    out.push_str("</main></body></html>\n");
    out
}

fn records(out: &mut String, rows: &[RecordRow]) {
    out.push_str("<h2>Records</h2><table><tr><th>id</th><th>kind</th><th>title</th><th>status</th><th>note</th></tr>");
    for r in rows {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"notes\">{}</td></tr>",
            esc(&r.id),
            esc(&r.kind),
            esc(&r.title),
            esc(&r.status),
            esc(r.note.as_deref().unwrap_or(""))
        );
    }
    out.push_str("</table>");
}

fn run_section(out: &mut String, run: &RunData) {
    let _ = write!(
        out,
        "<section id=\"{}\"><h2>{}</h2><p class=\"sub\">run {} · loop {} · from {}{}</p>",
        esc(&run.anchor()),
        esc(if run.title.is_empty() {
            &run.run_id
        } else {
            &run.title
        }),
        esc(&run.run_id),
        esc(if run.loop_name.is_empty() {
            "?"
        } else {
            &run.loop_name
        }),
        esc(&run.source),
        run.started_at
            .as_deref()
            .map(|s| format!(" · started {}", esc(s)))
            .unwrap_or_default()
    );
    cards::summary_cards(out, run);
    if run.allow_test_changes {
        out.push_str(
            "<p class=\"warn\"><b>Warning:</b> this run was started with <code>--allow-test-changes</code>: the evidence protection was off, so changes of the validation's files and of the tests were only warned about (see the gate notes of each iteration).</p>",
        );
    }
    if let Some(r) = &run.reason {
        let _ = write!(out, "<p><b>Final summary:</b> {}</p>", esc(r));
    }
    if !run.iterations.is_empty() {
        out.push_str("<h3>Timeline</h3>");
        legend(out, run);
        out.push_str(&svg::timeline(run));
        out.push_str("<div class=\"plots\">");
        out.push_str(&svg::durations(run));
        if matches!(run.cost(), Amount::Some(_)) {
            out.push_str(&svg::cumulative(
                run,
                "cumulative cost",
                |i| i.cost_usd,
                svg::dollars,
            ));
        }
        if matches!(run.tokens(), Amount::Some(_)) {
            out.push_str(&svg::cumulative(
                run,
                "cumulative tokens (in + out)",
                |i| (i.tokens_in + i.tokens_out) as f64,
                svg::count,
            ));
        }
        out.push_str("</div>");
        iteration_table(out, run);
    }
    events(out, run);
    if !run.task.is_empty() {
        let _ = write!(
            out,
            "<details><summary>Task</summary><pre>{}</pre></details>",
            esc(&run.task)
        );
    }
    iteration_details(out, run);
    out.push_str("</section>");
}

fn legend(out: &mut String, run: &RunData) {
    let mut seen: Vec<&super::Outcome> = Vec::new();
    for it in &run.iterations {
        if !seen.contains(&&it.outcome) {
            seen.push(&it.outcome);
        }
    }
    out.push_str("<div class=\"legend\">");
    for o in seen {
        let _ = write!(
            out,
            "<span><i style=\"background:{}\"></i>{}</span>",
            o.colour(),
            esc(o.as_str())
        );
    }
    if run.waited() {
        out.push_str("<span><i style=\"background:#c3c7cc\"></i>waited</span>");
    }
    out.push_str("</div>");
}

fn check_cell(it: &Iteration) -> String {
    if let Some(r) = &it.review {
        let class = match r.verdict {
            ReviewVerdict::Unchecked => "skip",
            _ if r.passed() => "review",
            _ => "fail",
        };
        return format!(
            "<span class=\"{class}\">review pass {} of {}</span>",
            r.pass, r.of
        );
    }
    match it.validation {
        Validation::Passed => "<span class=\"pass\">passed</span>",
        Validation::Failed => "<span class=\"fail\">failed</span>",
        Validation::Skipped => "<span class=\"skip\">skipped</span>",
    }
    .to_string()
}

/// The notes of an iteration's check: a review pass's verdict, else the gate notes.
fn check_notes(it: &Iteration) -> String {
    match &it.review {
        Some(r) => esc(&r.text()),
        None => it
            .gate_notes()
            .map(|n| esc(n))
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

fn iteration_table(out: &mut String, run: &RunData) {
    let cost = matches!(run.cost(), Amount::Some(_));
    let tokens = matches!(run.tokens(), Amount::Some(_));
    let waits = run.waited();
    let check = if run.iterations.iter().any(|i| i.review.is_some()) {
        "check"
    } else {
        "validation"
    };
    let _ = write!(
        out,
        "<h3>Iterations</h3><table><tr><th>#</th><th>outcome</th><th>duration</th>{}\
<th>commit</th><th>{check}</th><th>notes</th><th>stuck</th>{}{}</tr>",
        if waits { "<th>waited</th>" } else { "" },
        if tokens { "<th>tokens in/out</th>" } else { "" },
        if cost { "<th>cost</th>" } else { "" },
    );
    for it in &run.iterations {
        let _ = write!(
            out,
            "<tr><td class=\"num\">{}</td><td><span class=\"badge\" style=\"background:{}\">{}</span></td>\
<td class=\"num\">{}</td>",
            it.n,
            it.outcome.colour(),
            esc(it.outcome.as_str()),
            svg::secs(it.duration_s),
        );
        if waits {
            let w = if it.waited_s > 0.0 {
                svg::secs(it.waited_s)
            } else {
                String::new()
            };
            let _ = write!(out, "<td class=\"num\">{w}</td>");
        }
        let _ = write!(
            out,
            "<td><code>{}</code></td><td>{}</td><td class=\"notes\">{}</td><td class=\"num\">{}</td>",
            esc(it.commit.as_deref().unwrap_or("—")),
            check_cell(it),
            check_notes(it),
            it.stuck_count,
        );
        if tokens {
            let _ = write!(
                out,
                "<td class=\"num\">{} / {}</td>",
                it.tokens_in, it.tokens_out
            );
        }
        if cost {
            let _ = write!(out, "<td class=\"num\">{}</td>", svg::dollars(it.cost_usd));
        }
        out.push_str("</tr>");
    }
    out.push_str("</table>");
}

fn events(out: &mut String, run: &RunData) {
    let waits: Vec<&Iteration> = run.iterations.iter().filter(|i| i.waited_s > 0.0).collect();
    if run.snapshots.is_empty() && run.merges.is_empty() && waits.is_empty() {
        out.push_str(
            "<p class=\"muted\">No snapshots, merges or usage-limit waits during this run.</p>",
        );
        return;
    }
    out.push_str("<h3>Snapshots, merges and waits</h3><table><tr><th>what</th><th>detail</th><th>when</th></tr>");
    for s in &run.snapshots {
        let _ = write!(
            out,
            "<tr><td>snapshot <code>{}</code></td><td>{}</td><td>{}</td></tr>",
            esc(&s.tag),
            esc(&s.message),
            esc(&s.time)
        );
    }
    for m in &run.merges {
        let _ = write!(
            out,
            "<tr><td>merge</td><td><code>{}</code></td><td></td></tr>",
            esc(m)
        );
    }
    for i in waits {
        let _ = write!(
            out,
            "<tr><td>wait</td><td>{} before iteration {}</td><td>{}</td></tr>",
            svg::secs(i.waited_s),
            i.n,
            esc(&i.timestamp)
        );
    }
    out.push_str("</table>");
}

fn excerpt(out: &mut String, label: &str, e: &super::Excerpt) {
    let cut = if e.cut_bytes > 0 {
        format!(" ({} bytes left out in the middle)", e.cut_bytes)
    } else {
        String::new()
    };
    let _ = write!(
        out,
        "<details><summary>{}{}</summary><pre>{}</pre></details>",
        esc(label),
        esc(&cut),
        esc(&e.text)
    );
}

fn iteration_details(out: &mut String, run: &RunData) {
    if run
        .iterations
        .iter()
        .all(|i| i.prompt.is_none() && i.log.is_none())
    {
        return;
    }
    out.push_str("<h3>Prompts and logs</h3>");
    for it in &run.iterations {
        if let Some(p) = &it.prompt {
            excerpt(out, &format!("iteration {}: prompt", it.n), p);
        }
        if let Some(l) = &it.log {
            excerpt(
                out,
                &format!("iteration {}: log ({})", it.n, it.outcome.as_str()),
                l,
            );
        }
    }
}
