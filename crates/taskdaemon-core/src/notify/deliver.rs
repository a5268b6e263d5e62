//! One sink's delivery task: a notice at a time, each attempt under the sink's timeout,
//! failed attempts retried with a doubling backoff, a sink's failure logged once.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Log, Notice, Pending, SinkConfig, Target};
use crate::agent::{ProcessSpec, Stream, run_process};

/// The first wait before a retry; doubled after each failed attempt.
const BACKOFF: Duration = Duration::from_millis(500);
/// Time between TERM and KILL for a hook that overruns its timeout (or is stopped).
pub(super) const GRACE: Duration = Duration::from_secs(2);

pub(super) struct Deliverer {
    config: SinkConfig,
    cwd: PathBuf,
    log: Log,
    http: Option<reqwest::Client>,
    /// Whether the current run of failures was reported.
    failing: bool,
    /// The notifier's stop: a request in flight or a retry's wait ends, a hook is ended.
    stop: CancellationToken,
}

/// How one notice's delivery ended.
enum Delivery {
    /// Delivered, or given up after its retries (logged): done with.
    Done,
    /// The notifier stopped first: still pending (the stop's log line names it).
    Stopped,
}

impl Deliverer {
    pub(super) fn new(
        config: SinkConfig,
        cwd: PathBuf,
        log: Log,
        stop: CancellationToken,
    ) -> Deliverer {
        let http = match &config.target {
            // No redirects: a notice goes to the address configured, nowhere else (a
            // receiver that answers 3xx is a failed delivery, said in the log).
            Target::Webhook(_) => reqwest::Client::builder()
                .timeout(config.timeout())
                .redirect(reqwest::redirect::Policy::none())
                .user_agent(concat!("taskdaemon/", env!("CARGO_PKG_VERSION")))
                .build()
                .ok(),
            _ => None,
        };
        Deliverer {
            config,
            cwd,
            log,
            http,
            failing: false,
            stop,
        }
    }

    /// Deliver what comes, a notice at a time, until the queue closes or the notifier
    /// stops; each notice done with is taken off `pending`.
    pub(super) async fn run(mut self, mut rx: mpsc::Receiver<Arc<Notice>>, pending: Pending) {
        let done = || {
            pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop_front();
        };
        if self.config.target == Target::Desktop
            && crate::agent::find_on_path("notify-send").is_none()
        {
            (self.log)(
                "notify: desktop notifications are off: `notify-send` is not installed (Debian/Ubuntu: libnotify-bin)".into(),
            );
            while rx.recv().await.is_some() {
                done();
            }
            return;
        }
        loop {
            let next = tokio::select! {
                biased;
                () = self.stop.cancelled() => None,
                n = rx.recv() => n,
            };
            let Some(n) = next else { return };
            match self.deliver(&n).await {
                Delivery::Done => done(),
                Delivery::Stopped => return,
            }
        }
    }

    async fn deliver(&mut self, n: &Notice) -> Delivery {
        let mut wait = BACKOFF;
        let mut last = String::new();
        for attempt in 0..=self.config.retries() {
            if attempt > 0 {
                tokio::select! {
                    () = self.stop.cancelled() => return Delivery::Stopped,
                    () = tokio::time::sleep(wait) => {}
                }
                wait *= 2;
            }
            let tried = tokio::time::timeout(self.config.timeout(), self.attempt(n)).await;
            if self.stop.is_cancelled() {
                return Delivery::Stopped;
            }
            match tried {
                Ok(Ok(())) => {
                    if self.failing {
                        self.failing = false;
                        (self.log)(format!("notify: {} delivers again", self.config.describe()));
                    }
                    return Delivery::Done;
                }
                Ok(Err(e)) => last = e,
                Err(_) => {
                    last = format!(
                        "no answer within {}",
                        crate::duration::format_duration(self.config.timeout())
                    )
                }
            }
        }
        if !self.failing {
            self.failing = true;
            (self.log)(format!(
                "notify: {} failed ({last}) after {} attempt(s); the {} notice is lost, and further failures of this sink are not reported until it works again",
                self.config.describe(),
                self.config.retries() + 1,
                n.kind
            ));
        }
        Delivery::Done
    }

    async fn attempt(&self, n: &Notice) -> Result<(), String> {
        match &self.config.target {
            Target::Webhook(url) => self.post(url, n).await,
            Target::Command(c) => self.hook(c, n).await,
            Target::Desktop => self.desktop(n).await,
        }
    }

    async fn post(&self, url: &str, n: &Notice) -> Result<(), String> {
        let Some(http) = &self.http else {
            return Err("no HTTP client (TLS setup failed)".into());
        };
        let sent = tokio::select! {
            () = self.stop.cancelled() => return Err("stopped".into()),
            r = http.post(url).json(&n.body(self.config.format())).send() => r,
        };
        let resp = sent.map_err(|e| describe_http_error(&e))?;
        let status = resp.status();
        if status.is_success() {
            Ok(())
        } else {
            Err(format!("HTTP {status}"))
        }
    }

    async fn hook(&self, command: &str, n: &Notice) -> Result<(), String> {
        let mut input =
            serde_json::to_vec(&n.body(super::Format::Json)).map_err(|e| e.to_string())?;
        input.push(b'\n');
        let spec = ProcessSpec {
            program: "sh".into(),
            args: vec!["-c".into(), command.into()],
            cwd: self.cwd.clone(),
            env: vec![("TASKDAEMON_NOTIFY_EVENT".into(), n.kind.as_str().into())],
            stdin: Some(input),
            timeout: Some(self.config.timeout()),
            grace: GRACE,
            after_stop: None,
        };
        self.spawn(&spec).await
    }

    async fn desktop(&self, n: &Notice) -> Result<(), String> {
        let urgency = if n.kind.needs_a_person() {
            "critical"
        } else {
            "normal"
        };
        let mut body = n.reason.clone();
        if let Some(a) = n.action.as_ref().or(n.action_note.as_ref()) {
            body.push_str(&format!("\n{a}"));
        }
        let spec = ProcessSpec {
            program: "notify-send".into(),
            args: vec![
                "-a".into(),
                "taskdaemon".into(),
                "-u".into(),
                urgency.into(),
                n.summary().into(),
                body.into(),
            ],
            cwd: self.cwd.clone(),
            env: Vec::new(),
            stdin: None,
            timeout: Some(self.config.timeout()),
            grace: GRACE,
            after_stop: None,
        };
        self.spawn(&spec).await
    }

    /// Run a process in its own group (ended whole on timeout); its last stderr line is
    /// the error.
    async fn spawn(&self, spec: &ProcessSpec) -> Result<(), String> {
        let mut last_err = String::new();
        let r = run_process(spec, &self.stop, |s, line| {
            if s == Stream::Stderr {
                last_err = String::from_utf8_lossy(line).trim().to_string();
            }
        })
        .await
        .map_err(|e| format!("cannot start `{}`: {e}", spec.program.to_string_lossy()))?;
        if r.timed_out {
            return Err("timed out; its process group was ended".into());
        }
        match r.status.code() {
            0 => Ok(()),
            c if last_err.is_empty() => Err(format!("exit {c}")),
            c => Err(format!("exit {c}: {last_err}")),
        }
    }
}

fn describe_http_error(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "timed out".into()
    } else if e.is_connect() {
        "cannot connect".into()
    } else {
        let mut s = e.to_string();
        let mut src = std::error::Error::source(e);
        while let Some(inner) = src {
            s.push_str(&format!(": {inner}"));
            src = inner.source();
        }
        s
    }
}
