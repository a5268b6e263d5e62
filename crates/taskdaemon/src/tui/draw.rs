//! Drawing one frame: header, the tree, the selected run's log, the status and key lines.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, List, ListItem, ListState, Paragraph, Wrap};
use taskdaemon_core::watch::RowKind;

use super::app::{App, Mode};

const KEYS: &str = "↑↓ select  p pause  r resume  c cancel  s start  a answer  u unblock  o report  / search  n next  e export  q quit";

fn status_color(status: &str) -> Color {
    match status {
        "running" | "in-progress" => Color::Green,
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
    draw_tree(f, app, tree);
    draw_log(f, app, log);
    f.render_widget(
        Paragraph::new(status_line(app)).style(bold(app.color)),
        status,
    );
    f.render_widget(Paragraph::new(KEYS).wrap(Wrap { trim: true }), keys);
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
        Mode::Normal => {
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
