//! Small inline SVG plots (no script): the iteration timeline, a bar chart of durations
//! and line charts of cumulative cost and tokens.

use std::fmt::Write as _;

use super::html::esc;
use super::{Iteration, RunData};

const W: f64 = 440.0;
const H: f64 = 190.0;
/// The timeline spans the page: its own width, so its cells keep their height.
const TW: f64 = 1120.0;
const LEFT: f64 = 56.0;
const BOTTOM: f64 = 26.0;
const TOP: f64 = 20.0;

/// A round upper bound for an axis, and its step.
fn nice_max(max: f64) -> (f64, f64) {
    if !max.is_finite() || max <= 0.0 {
        return (1.0, 0.25);
    }
    let mag = 10f64.powf(max.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * mag >= max {
            return (m * mag, m * mag / 4.0);
        }
    }
    (10.0 * mag, 2.5 * mag)
}

fn frame(out: &mut String, title: &str, max: f64, step: f64, fmt: &dyn Fn(f64) -> String) {
    let _ = write!(
        out,
        r#"<svg class="plot" viewBox="0 0 {W} {H}" role="img" aria-label="{t}"><text x="{LEFT}" y="11" class="pt">{t}</text>"#,
        t = esc(title)
    );
    let plot_h = H - TOP - BOTTOM;
    if max <= 0.0 {
        let y = TOP + plot_h;
        let _ = write!(
            out,
            r#"<line x1="{LEFT}" x2="{x2}" y1="{y}" y2="{y}" class="grid"/>"#,
            x2 = W - 6.0
        );
        return;
    }
    let mut v = 0.0;
    while v <= max + step / 2.0 {
        let y = TOP + plot_h - v / max * plot_h;
        let _ = write!(
            out,
            r#"<line x1="{LEFT}" x2="{x2}" y1="{y:.1}" y2="{y:.1}" class="grid"/><text x="{tx}" y="{ty:.1}" class="ax" text-anchor="end">{l}</text>"#,
            x2 = W - 6.0,
            tx = LEFT - 4.0,
            ty = y + 3.5,
            l = esc(&fmt(v))
        );
        v += step;
    }
}

/// One cell per iteration, coloured by its outcome: the run at a glance.
pub fn timeline(run: &RunData) -> String {
    let n = run.iterations.len().max(1) as f64;
    let cell = ((TW - 12.0) / n).min(90.0);
    let mut out = format!(
        r#"<svg class="timeline" viewBox="0 0 {TW} 40" role="img" aria-label="iterations by outcome">"#
    );
    for (k, it) in run.iterations.iter().enumerate() {
        let x = 6.0 + k as f64 * cell;
        let _ = write!(
            out,
            r#"<g><title>{tip}</title><rect x="{x:.1}" y="4" width="{w:.1}" height="30" rx="3" fill="{c}"/>"#,
            tip = esc(&tooltip(it)),
            w = (cell - 2.0).max(1.0),
            c = it.outcome.colour()
        );
        if cell >= 14.0 {
            let _ = write!(
                out,
                r#"<text x="{cx:.1}" y="24" class="cell" text-anchor="middle">{n}</text>"#,
                cx = x + (cell - 2.0) / 2.0,
                n = it.n
            );
        }
        out.push_str("</g>");
    }
    out.push_str("</svg>");
    out
}

fn tooltip(it: &Iteration) -> String {
    let mut t = format!(
        "iteration {}: {} · {}",
        it.n,
        it.outcome.as_str(),
        secs(it.duration_s)
    );
    if let Some(r) = &it.review {
        t.push_str(&format!(" · {}", r.text()));
    }
    if it.cost_usd > 0.0 {
        t.push_str(&format!(" · {}", dollars(it.cost_usd)));
    }
    t
}

/// Each iteration's duration, a bar coloured by its outcome (waits before it in grey).
pub fn durations(run: &RunData) -> String {
    let max = run
        .iterations
        .iter()
        .map(|i| i.duration_s + i.waited_s)
        .fold(0.0, f64::max);
    let (max, step) = nice_max(max);
    let mut out = String::new();
    frame(&mut out, "duration per iteration", max, step, &secs);
    let plot_w = W - LEFT - 10.0;
    let plot_h = H - TOP - BOTTOM;
    let n = run.iterations.len().max(1) as f64;
    let slot = plot_w / n;
    let bw = (slot * 0.7).min(40.0);
    for (k, it) in run.iterations.iter().enumerate() {
        let x = LEFT + 4.0 + k as f64 * slot + (slot - bw) / 2.0;
        let h = it.duration_s / max * plot_h;
        let wh = it.waited_s / max * plot_h;
        let base = TOP + plot_h;
        let _ = write!(
            out,
            r#"<g><title>{tip}</title><rect x="{x:.1}" y="{y:.1}" width="{bw:.1}" height="{h:.1}" fill="{c}"/>"#,
            tip = esc(&tooltip(it)),
            y = base - h,
            h = h.max(1.0),
            c = it.outcome.colour()
        );
        if wh > 0.5 {
            let _ = write!(
                out,
                r#"<rect x="{x:.1}" y="{y:.1}" width="{bw:.1}" height="{wh:.1}" class="wait"/>"#,
                y = base - h - wh
            );
        }
        let _ = write!(
            out,
            r#"<text x="{cx:.1}" y="{ty}" class="ax" text-anchor="middle">{n}</text></g>"#,
            cx = x + bw / 2.0,
            ty = H - BOTTOM + 13.0,
            n = it.n
        );
    }
    out.push_str("</svg>");
    out
}

/// A running total over the iterations, as a line with a dot per iteration.
pub fn cumulative(
    run: &RunData,
    title: &str,
    value: fn(&Iteration) -> f64,
    fmt: fn(f64) -> String,
) -> String {
    let mut total = 0.0;
    let points: Vec<(u32, f64)> = run
        .iterations
        .iter()
        .map(|i| {
            total += value(i);
            (i.n, total)
        })
        .collect();
    let (max, step) = nice_max(total);
    let mut out = String::new();
    // Drawn only for a total the agent reported (the cards say when there is none).
    frame(&mut out, title, max, step, &fmt);
    let plot_w = W - LEFT - 10.0;
    let plot_h = H - TOP - BOTTOM;
    let n = points.len().max(1) as f64;
    let slot = plot_w / n;
    let xy = |k: usize, v: f64| {
        (
            LEFT + 4.0 + (k as f64 + 0.5) * slot,
            TOP + plot_h - v / max * plot_h,
        )
    };
    let path: Vec<String> = points
        .iter()
        .enumerate()
        .map(|(k, (_, v))| {
            let (x, y) = xy(k, *v);
            format!("{x:.1},{y:.1}")
        })
        .collect();
    let _ = write!(
        out,
        r#"<polyline points="{}" class="line"/>"#,
        path.join(" ")
    );
    for (k, (it, v)) in points.iter().enumerate() {
        let (x, y) = xy(k, *v);
        let _ = write!(
            out,
            r#"<g><title>after iteration {it}: {l}</title><circle cx="{x:.1}" cy="{y:.1}" r="3.5" class="dot"/></g><text x="{x:.1}" y="{ty}" class="ax" text-anchor="middle">{it}</text>"#,
            l = esc(&fmt(*v)),
            ty = H - BOTTOM + 13.0
        );
    }
    out.push_str("</svg>");
    out
}

pub fn secs(v: f64) -> String {
    if v >= 3600.0 {
        format!("{:.1}h", v / 3600.0)
    } else if v >= 60.0 {
        format!("{:.1}m", v / 60.0)
    } else if v >= 1.0 || v == 0.0 {
        format!("{v:.1}s")
    } else {
        format!("{:.0}ms", v * 1000.0)
    }
}

pub fn dollars(v: f64) -> String {
    if v >= 1.0 || v == 0.0 {
        format!("${v:.2}")
    } else {
        format!("${v:.4}")
    }
}

pub fn count(v: f64) -> String {
    if v >= 1_000_000.0 {
        format!("{:.1}M", v / 1_000_000.0)
    } else if v >= 1000.0 {
        format!("{:.1}k", v / 1000.0)
    } else {
        format!("{v:.0}")
    }
}
