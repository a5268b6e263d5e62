//! The final summary block (spec 2 §3).

use std::time::Duration;

use taskdaemon_core::duration::format_duration;
use taskdaemon_core::telemetry::{RunSummary, WorkUnit};

pub fn summary_block(s: &RunSummary) -> String {
    let d = |ms: u64| format_duration(Duration::from_millis(ms));
    // Only a loop with a list has its line: `Tasks:` or `Stories:`.
    let work = s
        .work
        .map(|w| {
            let name = match w.unit {
                WorkUnit::Tasks => "Tasks:      ",
                WorkUnit::Stories => "Stories:    ",
            };
            format!(
                "{name} {}/{} {}\n",
                w.done,
                w.total,
                match w.unit {
                    WorkUnit::Tasks => "done",
                    WorkUnit::Stories => "complete",
                }
            )
        })
        .unwrap_or_default();
    let cost = match s.cost_usd {
        Some(c) => format!("${c:.4}"),
        None => "not reported by this agent".into(),
    };
    format!(
        "\ntaskdaemon summary\n──────────────────\n\
Exit:        {} (code {}): {}\n\
Iterations:  {} / {}\n\
Duration:    {}\n\
{work}Avg/iter:    {}\n\
Stuck iters: {}\n\
Cost:        {cost} · tokens {} in / {} out\n\
Log:         {}\n\
Iter logs:   {}\n\
Report:      `taskdaemon report` writes {}/report.html (timeline, plots, gates, logs)",
        crate::out::paint(
            &s.exit_label,
            crate::out::outcome_style(&s.exit_label),
            false
        ),
        s.exit_code,
        s.detail,
        s.iterations,
        s.max_iterations,
        d(s.duration_ms),
        d(s.avg_iteration_ms),
        s.stuck_iterations,
        s.tokens_in,
        s.tokens_out,
        s.summary_csv.display(),
        s.logs_dir.display(),
        s.logs_dir.display(),
    )
}
