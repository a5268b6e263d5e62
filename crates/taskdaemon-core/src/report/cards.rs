//! The report's summary: a run's cards (each only for what happened: no stall card
//! without a stall, one "not reported" and no dollar figure for a run without a cost) and
//! the overview table that opens a report of several runs.

use std::fmt::Write as _;

use super::html::esc;
use super::{Amount, RunData, svg};

fn card(out: &mut String, value: &str, label: &str) {
    let _ = write!(
        out,
        "<div class=\"card\"><b>{}</b><span>{}</span></div>",
        esc(value),
        esc(label)
    );
}

/// The cost as one cell: a figure when there is one, else what the agent said.
pub fn cost_text(run: &RunData) -> (String, &'static str) {
    match run.cost() {
        Amount::Some(c) => (svg::dollars(c), "cost"),
        Amount::Zero => ("none".into(), "cost (the agent reported zero)"),
        Amount::NotReported => ("not reported".into(), "cost (this agent reports none)"),
    }
}

fn iterations_text(run: &RunData) -> String {
    match run.max_iterations {
        Some(m) => format!("{} / {m}", run.iterations.len()),
        None => run.iterations.len().to_string(),
    }
}

fn outcome_text(run: &RunData) -> String {
    run.outcome.clone().unwrap_or_else(|| "not finished".into())
}

pub fn summary_cards(out: &mut String, run: &RunData) {
    out.push_str("<div class=\"cards\">");
    card(out, &outcome_text(run), "outcome");
    card(out, &iterations_text(run), "iterations");
    card(out, &svg::secs(run.seconds()), "time in iterations");
    let (cost, label) = cost_text(run);
    card(out, &cost, label);
    match run.tokens() {
        Amount::Some((tin, tout)) => card(
            out,
            &format!("{} / {}", svg::count(tin as f64), svg::count(tout as f64)),
            "tokens in / out",
        ),
        Amount::Zero | Amount::NotReported => card(out, "not reported", "tokens"),
    }
    if run.max_stuck() > 0 {
        card(
            out,
            &run.max_stuck().to_string(),
            "most iterations in a row without a commit",
        );
    }
    let stalls = run.stalls();
    if stalls.detected > 0 {
        card(
            out,
            &stalls.detected.to_string(),
            &format!("stalls ({} recovered)", stalls.recovered),
        );
    }
    let rejected = run.rejected_completions();
    if rejected > 0 {
        card(out, &rejected.to_string(), "completions rejected");
    }
    if run.waited() {
        card(
            out,
            &svg::secs(run.total_waited_s()),
            "waited (usage limits, backoff)",
        );
    }
    out.push_str("</div>");
}

/// One row per run, each linking to its section: opens a report of several runs.
pub fn overview(out: &mut String, runs: &[RunData]) {
    out.push_str(
        "<h2>Overview</h2><table class=\"overview\"><tr><th>run</th><th>loop</th><th>outcome</th>\
<th>iterations</th><th>duration</th><th>cost</th></tr>",
    );
    for run in runs {
        let title = if run.title.is_empty() {
            &run.run_id
        } else {
            &run.title
        };
        let _ = write!(
            out,
            "<tr><td><a href=\"#{}\">{}</a><br><span class=\"muted\">{}</span></td><td>{}</td><td>{}</td>\
<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            esc(&run.anchor()),
            esc(title),
            esc(&run.run_id),
            esc(if run.loop_name.is_empty() {
                "?"
            } else {
                &run.loop_name
            }),
            esc(&outcome_text(run)),
            esc(&iterations_text(run)),
            esc(&svg::secs(run.seconds())),
            esc(&cost_text(run).0)
        );
    }
    out.push_str("</table>");
}
