//! The UI's state and what each key does.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use taskdaemon_core::daemon::control::Action as Verb;
use taskdaemon_core::watch::{IterationRow, Model, RunView};

use super::actions::{self, Action};
use super::logpane::LogPane;
use super::source::Source;

/// What the keyboard goes to.
#[derive(Debug, Clone, PartialEq)]
pub enum Mode {
    Normal,
    /// Typing a search for the log pane.
    Search(String),
    /// Typing the answer to the selected run's DECIDE.
    Answer(String),
    /// `y` does it, anything else does not.
    Confirm(Action),
    /// The list of keys over everything (`?`; Esc or `?` closes it).
    Help,
    /// One run's iterations (Enter on it; Esc goes back).
    Detail(String),
}

pub struct App {
    pub source: Source,
    pub model: Model,
    pub selected: Option<String>,
    pub mode: Mode,
    pub log: LogPane,
    /// The last thing that happened, shown in the status bar.
    pub message: String,
    pub quit: bool,
    pub color: bool,
    /// The iterations of the run of [`Mode::Detail`], read when the store is.
    pub detail: Vec<IterationRow>,
    /// The iteration the drill-down points at (an index into `detail`; none: the newest),
    /// and whether the pane shows its prompt instead of its log.
    pub detail_at: Option<usize>,
    pub detail_prompt: bool,
}

impl App {
    pub fn new(mut source: Source) -> anyhow::Result<App> {
        let model = source.load()?;
        let selected = model.run_order().into_iter().next();
        Ok(App {
            source,
            model,
            selected,
            mode: Mode::Normal,
            log: LogPane::default(),
            message: String::new(),
            quit: false,
            color: !super::no_color(),
            detail: Vec::new(),
            detail_at: None,
            detail_prompt: false,
        })
    }

    /// Bring the model and the log pane up to date.
    pub fn pull(&mut self) {
        let (problem, read) = self.source.pull(&mut self.model);
        if let Some(problem) = problem {
            self.message = problem;
        }
        let order = self.model.run_order();
        if self.selected.as_ref().is_none_or(|s| !order.contains(s)) {
            self.selected = order.into_iter().next();
        }
        if read && let Mode::Detail(id) = &self.mode {
            self.detail = self.model.iterations(id);
        }
        let path = match (&self.mode, self.detail_row()) {
            // The drill-down: the iteration pointed at, its log or its prompt.
            (Mode::Detail(id), Some(it)) => self.model.iteration_file(id, it.n, self.detail_prompt),
            _ => self
                .selected
                .as_ref()
                .and_then(|id| self.model.log_path(id)),
        };
        self.log.follow(path);
        let live = self
            .selected_run()
            .map(|r| r.live.clone())
            .unwrap_or_default();
        self.log.prefer_live(&live);
    }

    /// The iteration the drill-down points at.
    pub fn detail_row(&self) -> Option<&IterationRow> {
        let at = self
            .detail_at
            .unwrap_or(self.detail.len().saturating_sub(1));
        self.detail.get(at)
    }

    /// Keys of the drill-down: Up/Down pick an iteration, Enter or Tab switch the pane
    /// between its log and its prompt, Esc goes back to the tree.
    fn on_detail_key(&mut self, code: KeyCode, id: String) {
        let last = self.detail.len().saturating_sub(1);
        let at = self.detail_at.unwrap_or(last);
        match code {
            KeyCode::Esc | KeyCode::Backspace | KeyCode::Left => {
                self.detail.clear();
                self.detail_at = None;
                self.detail_prompt = false;
                return;
            }
            KeyCode::Char('q') => {
                self.quit = true;
                return;
            }
            KeyCode::Char('?') => {
                self.mode = Mode::Help;
                return;
            }
            KeyCode::Up | KeyCode::Char('k') => self.detail_at = Some(at.saturating_sub(1)),
            KeyCode::Down | KeyCode::Char('j') => self.detail_at = Some((at + 1).min(last)),
            KeyCode::Enter | KeyCode::Tab => self.detail_prompt = !self.detail_prompt,
            KeyCode::PageUp => self.log.scroll += 10,
            KeyCode::PageDown => self.log.scroll = self.log.scroll.saturating_sub(10),
            _ => {}
        }
        self.mode = Mode::Detail(id);
    }

    pub fn selected_run(&self) -> Option<&RunView> {
        self.selected.as_ref().and_then(|s| self.model.runs.get(s))
    }

    /// Move the selection `by` runs (clamped: `isize::MIN`/`MAX` are the first/last).
    fn move_selection(&mut self, by: isize) {
        let order = self.model.run_order();
        if order.is_empty() {
            return;
        }
        let at = self
            .selected
            .as_ref()
            .and_then(|s| order.iter().position(|o| o == s))
            .unwrap_or(0) as isize;
        let next = at.saturating_add(by).clamp(0, order.len() as isize - 1) as usize;
        self.selected = Some(order[next].clone());
        self.log.scroll = 0;
    }

    pub fn on_key(&mut self, k: KeyEvent) {
        if k.kind == KeyEventKind::Release {
            return;
        }
        if k.modifiers.contains(KeyModifiers::CONTROL) && k.code == KeyCode::Char('c') {
            self.quit = true;
            return;
        }
        match std::mem::replace(&mut self.mode, Mode::Normal) {
            Mode::Normal => self.on_normal_key(k.code),
            Mode::Search(text) => self.on_text_key(k.code, text, true),
            Mode::Answer(text) => self.on_text_key(k.code, text, false),
            Mode::Confirm(action) => {
                if k.code == KeyCode::Char('y') {
                    self.message = actions::perform(self, &action);
                } else {
                    self.message = format!("{}: not done", action.describe());
                }
            }
            Mode::Help => {
                if !matches!(k.code, KeyCode::Esc | KeyCode::Char('?' | 'q')) {
                    self.mode = Mode::Help;
                }
            }
            Mode::Detail(id) => self.on_detail_key(k.code, id),
        }
    }

    /// Enter on a run: its iterations.
    fn open_detail(&mut self) {
        match self.selected.clone() {
            Some(id) => {
                self.detail = self.model.iterations(&id);
                self.detail_at = None;
                self.detail_prompt = false;
                self.mode = Mode::Detail(id);
            }
            None => self.message = "no run selected".into(),
        }
    }

    fn on_text_key(&mut self, code: KeyCode, mut text: String, search: bool) {
        match code {
            KeyCode::Esc => self.message = "cancelled".into(),
            KeyCode::Enter if search => {
                self.log.search = Some(text.clone());
                self.log.scroll = 0;
                self.message = if self.log.find_next() {
                    format!("/{text}  (n: next)")
                } else {
                    format!("/{text}: not found")
                };
            }
            KeyCode::Enter => {
                let Some(run) = self.selected.clone() else {
                    return;
                };
                self.message = actions::perform(self, &Action::Answer { run, text });
            }
            KeyCode::Backspace => {
                text.pop();
                self.mode = if search {
                    Mode::Search(text)
                } else {
                    Mode::Answer(text)
                };
            }
            KeyCode::Char(c) => {
                text.push(c);
                self.mode = if search {
                    Mode::Search(text)
                } else {
                    Mode::Answer(text)
                };
            }
            _ => {
                self.mode = if search {
                    Mode::Search(text)
                } else {
                    Mode::Answer(text)
                }
            }
        }
    }

    fn on_normal_key(&mut self, code: KeyCode) {
        let run = self.selected.clone();
        let with_run = |f: fn(String) -> Action| run.clone().map(f);
        match code {
            KeyCode::Char('q') => self.quit = true,
            KeyCode::Char('?') => self.mode = Mode::Help,
            KeyCode::Enter => self.open_detail(),
            KeyCode::Down | KeyCode::Char('j') => self.move_selection(1),
            KeyCode::Up | KeyCode::Char('k') => self.move_selection(-1),
            KeyCode::Home | KeyCode::Char('g') => self.move_selection(isize::MIN),
            KeyCode::End | KeyCode::Char('G') => self.move_selection(isize::MAX),
            KeyCode::PageUp => self.log.scroll += 10,
            KeyCode::PageDown => self.log.scroll = self.log.scroll.saturating_sub(10),
            KeyCode::Char('/') => self.mode = Mode::Search(String::new()),
            KeyCode::Char('n') if !self.log.find_next() => self.message = "no match".into(),
            KeyCode::Char('e') => self.message = actions::export(self),
            KeyCode::Char('a') => match self.selected_run().and_then(|r| r.waiting.clone()) {
                Some(taskdaemon_core::watch::Waiting::Decide(_)) => {
                    self.mode = Mode::Answer(String::new())
                }
                _ => self.message = "the selected run asks nothing (a: answers a DECIDE)".into(),
            },
            KeyCode::Char(c) => {
                let action = match c {
                    'p' => with_run(|run| Action::Control {
                        verb: Verb::Pause,
                        run,
                    }),
                    'r' => with_run(|run| Action::Control {
                        verb: Verb::Resume,
                        run,
                    }),
                    's' => with_run(|run| Action::Control {
                        verb: Verb::Start,
                        run,
                    }),
                    'c' => with_run(|run| Action::Control {
                        verb: Verb::Cancel,
                        run,
                    }),
                    'u' => with_run(|run| Action::Unblock { run }),
                    'o' => with_run(|run| Action::Report { run }),
                    _ => None,
                };
                match action {
                    Some(a) if a.destroys() => self.mode = Mode::Confirm(a),
                    Some(a) => self.message = actions::perform(self, &a),
                    None => {}
                }
            }
            _ => {}
        }
    }
}
