//! Drawing one frame: header, the tree, the selected run's log, the status and key lines.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{
    Block, Borders, Cell, Clear, List, ListItem, ListState, Paragraph, Row, Table, TableState, Wrap,
};
use taskdaemon_core::watch::{RowKind, Validation};

use super::app::{App, Mode};

const KEYS: &str = "↑↓ select  Enter iterations  p pause  r resume  c cancel  a answer  / search  e export  ? help  q quit";

/// What `?` lists.
const HELP: &[(&str, &str)] = &[
    ("↑ ↓  j k", "select a run"),
    ("g G  Home End", "the first / last run"),
    ("Enter", "the run's iterations (Esc: back)"),
    ("  ↑↓ Enter", "there: an iteration; its log or its prompt"),
    ("p", "pause when the iteration ends (p again: now)"),
    ("r", "resume"),
    ("s", "start now"),
    ("c", "cancel (asks y/n)"),
    ("a", "answer the run's DECIDE"),
    ("u", "unblock (asks y/n)"),
    ("o", "write the run's report"),
    ("/  n", "search the log, next match"),
    ("e", "export the log to .ralph/exports/"),
    ("PgUp PgDn", "scroll the log"),
    ("?  Esc", "this help / close it"),
    ("q  Ctrl-C", "quit"),
];

fn status_color(status: &str) -> Color {
    match status {
        "running" | "in-progress" | "pausing" => Color::Green,
        "complete" => Color::Cyan,
        "blocked" | "waiting" | "paused" => Color::Yellow,
        "failed" | "stopped" | "cancelled" => Color::Red,
        _ => Color::Reset,
    }
}

pub fn frame(f: &mut Frame, app: &mut App) {
    let area = f.area();
    let keys_h = if area.width as usize >= KEYS.chars().count() {
        1
    } else {
        2
    };
    let tree_h = (area.height.saturating_sub(3 + keys_h) * 2 / 5).max(3);
    let [head, tree, log, status, keys] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(tree_h),
        Constraint::Min(3),
        Constraint::Length(1),
        Constraint::Length(keys_h),
    ])
    .areas(area);
    f.render_widget(
        Paragraph::new(app.model.header()).style(bold(app.color)),
        head,
    );
    match &app.mode {
        Mode::Detail(id) => draw_detail(f, app, id, tree),
        _ => draw_tree(f, app, tree),
    }
    draw_log(f, app, log);
    f.render_widget(
        Paragraph::new(status_line(app)).style(bold(app.color)),
        status,
    );
    f.render_widget(Paragraph::new(KEYS).wrap(Wrap { trim: true }), keys);
    if app.mode == Mode::Help {
        draw_help(f, area);
    }
}

/// The keys, in a box over the middle of the screen.
fn draw_help(f: &mut Frame, area: Rect) {
    let w = area.width.min(60);
    let h = area.height.min(HELP.len() as u16 + 2);
    let rect = Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    };
    let lines: Vec<Line> = HELP
        .iter()
        .map(|(k, what)| Line::from(format!("{k:<14} {what}")))
        .collect();
    let block = Block::default()
        .borders(Borders::ALL)
        .title(" keys (Esc or ? closes) ");
    f.render_widget(Clear, rect);
    f.render_widget(Paragraph::new(lines).block(block), rect);
}

/// The selected run's iterations as a table.
fn draw_detail(f: &mut Frame, app: &App, id: &str, area: Rect) {
    let title = match app.model.runs.get(id) {
        Some(r) => format!(
            " {} · {} · {} iteration(s) (Esc: back · ↑↓ · Enter: its {}) ",
            r.id,
            r.status_word(),
            app.detail.len(),
            if app.detail_prompt { "log" } else { "prompt" }
        ),
        None => format!(" {id} (Esc: back) "),
    };
    let block = Block::default().borders(Borders::TOP).title(title);
    if app.detail.is_empty() {
        f.render_widget(
            Paragraph::new("no finished iteration yet").block(block),
            area,
        );
        return;
    }
    let rows = app.detail.iter().map(|it| {
        let gates = match it.validation {
            Validation::Passed => "✓ validation",
            Validation::Failed => "✗ validation",
            Validation::Skipped => "– no validation",
        };
        Row::new(vec![
            Cell::from(it.n.to_string()),
            Cell::from(it.outcome.clone()),
            Cell::from(format!("{:.1}s", it.duration_s)),
            Cell::from(it.cost_usd.map(|c| format!("${c:.2}")).unwrap_or_default()),
            Cell::from(gates),
            Cell::from(it.commit.clone().unwrap_or_default()),
        ])
    });
    let widths = [
        Constraint::Length(4),
        Constraint::Length(12),
        Constraint::Length(9),
        Constraint::Length(8),
        Constraint::Length(16),
        Constraint::Min(10),
    ];
    let header =
        Row::new(["#", "outcome", "duration", "cost", "gates", "commit"]).style(bold(app.color));
    let table = Table::new(rows, widths)
        .header(header)
        .block(block)
        .highlight_symbol("> ")
        .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED));
    // The iteration pointed at (the newest at first), scrolled into view by the state.
    let at = app.detail_at.unwrap_or(app.detail.len().saturating_sub(1));
    let mut state = TableState::default().with_selected(Some(at));
    f.render_stateful_widget(table, area, &mut state);
}

fn bold(color: bool) -> Style {
    if color {
        Style::default().add_modifier(Modifier::BOLD)
    } else {
        Style::default()
    }
}

fn draw_tree(f: &mut Frame, app: &App, area: Rect) {
    let rows = app.model.rows(area.width.saturating_sub(2) as usize);
    let mut state = ListState::default();
    let items: Vec<ListItem> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let selected = r.kind == RowKind::Run && r.run.is_some() && r.run == app.selected;
            if selected {
                state.select(Some(i));
            }
            let mut style = Style::default();
            if app.color && r.kind != RowKind::Task {
                style = style.fg(status_color(&r.status));
            }
            ListItem::new(Line::from(Span::styled(r.text.clone(), style)))
        })
        .collect();
    let empty = items.is_empty();
    let block = Block::default().borders(Borders::TOP).title(" loops ");
    if empty {
        f.render_widget(
            Paragraph::new("no loops here yet: `taskdaemon submit …` with a daemon, or `taskdaemon run …` in this directory").block(block).wrap(Wrap { trim: true }),
            area,
        );
        return;
    }
    let list = List::new(items)
        .block(block)
        .highlight_symbol("> ")
        .highlight_style(Style::default().add_modifier(Modifier::REVERSED));
    f.render_stateful_widget(list, area, &mut state);
}

fn draw_log(f: &mut Frame, app: &App, area: Rect) {
    let title = match (app.selected_run(), &app.log.path) {
        (Some(r), Some(p)) => format!(
            " {} iteration {} · {} ",
            r.id,
            r.iteration_text(),
            p.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        ),
        (Some(r), None) => format!(" {} (no log yet) ", r.id),
        _ => " log ".into(),
    };
    let block = Block::default().borders(Borders::TOP).title(title);
    let height = area.height.saturating_sub(1) as usize;
    let all = app.log.all();
    let end = all.len().saturating_sub(app.log.scroll);
    let start = end.saturating_sub(height);
    let term = app
        .log
        .search
        .as_deref()
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase);
    let lines: Vec<Line> = all[start..end]
        .iter()
        .map(|l| {
            let hit = term.as_ref().is_some_and(|t| l.to_lowercase().contains(t));
            let style = match (hit, app.color) {
                (true, true) => Style::default().bg(Color::Yellow).fg(Color::Black),
                (true, false) => Style::default().add_modifier(Modifier::REVERSED),
                _ => Style::default(),
            };
            Line::from(Span::styled(l.to_string(), style))
        })
        .collect();
    f.render_widget(Paragraph::new(lines).block(block), area);
}

fn status_line(app: &App) -> String {
    match &app.mode {
        Mode::Search(t) => format!("/{t}_"),
        Mode::Answer(t) => format!("answer (Enter sends, Esc cancels): {t}_"),
        Mode::Confirm(a) => format!("{}? y/n", a.describe()),
        Mode::Help => "? or Esc closes the help".into(),
        Mode::Normal | Mode::Detail(_) => {
            let waiting = app
                .selected_run()
                .and_then(|r| r.waiting.as_ref())
                .map(|w| w.label());
            match (app.message.is_empty(), waiting) {
                (false, _) => app.message.clone(),
                (true, Some(w)) => w,
                (true, None) => String::new(),
            }
        }
    }
}
