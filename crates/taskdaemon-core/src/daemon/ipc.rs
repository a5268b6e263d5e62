//! The daemon's protocol on its Unix socket: one JSON request per line, one JSON reply per
//! line, then the connection closes; or `{"op":"subscribe"}`, after which the daemon
//! writes one event per line (see [`super::events`]) and keeps the connection open. The
//! client side is blocking (CLI commands); the server side lives in the daemon's dispatcher.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a client asks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Request {
    Ping,
    /// Which runs are active, since when.
    Status,
    /// New work was queued: look at the store now.
    Wake,
    /// Act on a record (see `control`).
    Control {
        action: super::control::Action,
        reference: String,
        /// A pause stops the run at once (its iteration is done again when it goes on)
        /// instead of when its iteration ends.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        force: bool,
    },
    /// What `status --json` shows, as one reply.
    Snapshot,
    /// Keep the connection open: one `snapshot` event, then one line per
    /// [`DaemonEvent`](super::events::DaemonEvent) until the daemon stops or the client
    /// goes.
    Subscribe,
    /// Stop: interrupt every run (they resume on the next start) and exit.
    Stop,
}

/// The answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub ok: bool,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub data: Value,
}

impl Response {
    pub fn ok(message: impl Into<String>, data: Value) -> Response {
        Response {
            ok: true,
            message: message.into(),
            data,
        }
    }
    pub fn err(message: impl Into<String>) -> Response {
        Response {
            ok: false,
            message: message.into(),
            data: Value::Null,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum IpcError {
    #[error(
        "cannot reach the daemon at {socket}: {source}\n  hint: is it running? `taskdaemon daemon status`; start it with `taskdaemon daemon start`"
    )]
    Connect {
        socket: String,
        source: std::io::Error,
    },
    #[error(
        "the daemon did not answer ({0})\n  hint: see its log (`taskdaemon daemon status` names it)"
    )]
    Exchange(String),
}

/// Whether a client with user id `peer` may talk to a daemon run by `owner`: the same
/// user, or root. Checked on every connection (`SO_PEERCRED`).
pub fn peer_allowed(peer: u32, owner: u32) -> bool {
    peer == owner || peer == 0
}

/// The reply to a refused peer.
pub fn refused_peer(peer: u32, owner: u32) -> Response {
    Response::err(format!(
        "refused: this daemon belongs to uid {owner}; a connection from uid {peer} may not control it"
    ))
}

/// Send `req` and wait up to `timeout` for the reply. A socket that belongs to another
/// user (not root) is not ours: refused before anything is sent.
pub fn call(socket: &Path, req: &Request, timeout: Duration) -> Result<Response, IpcError> {
    let mut s = connect(socket)?;
    let ex = |e: std::io::Error| IpcError::Exchange(e.to_string());
    s.set_read_timeout(Some(timeout)).map_err(ex)?;
    s.set_write_timeout(Some(timeout)).map_err(ex)?;
    let mut line = serde_json::to_string(req).map_err(|e| IpcError::Exchange(e.to_string()))?;
    line.push('\n');
    s.write_all(line.as_bytes()).map_err(ex)?;
    let mut reply = String::new();
    BufReader::new(&s).read_line(&mut reply).map_err(ex)?;
    serde_json::from_str(&reply).map_err(|e| IpcError::Exchange(format!("bad reply: {e}")))
}

/// Connect to the daemon's socket; one owned by another user (not root) is refused before
/// anything is sent.
fn connect(socket: &Path) -> Result<UnixStream, IpcError> {
    if let Ok(meta) = std::fs::symlink_metadata(socket) {
        use std::os::unix::fs::MetadataExt;
        let me = nix::unistd::geteuid().as_raw();
        if !peer_allowed(meta.uid(), me) {
            return Err(IpcError::Connect {
                socket: socket.display().to_string(),
                source: std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!("the socket belongs to uid {}, not to you", meta.uid()),
                ),
            });
        }
    }
    UnixStream::connect(socket).map_err(|source| IpcError::Connect {
        socket: socket.display().to_string(),
        source,
    })
}

/// The events of a subscription, in order: first a `snapshot`, then one per line the
/// daemon writes. Ends (`None`) when the daemon stops or closes the connection.
#[derive(Debug)]
pub struct Subscription {
    reader: BufReader<UnixStream>,
}

impl Subscription {
    /// Stop waiting after `timeout` without an event: the iterator then yields an
    /// [`IpcError::Exchange`] whose kind is a timeout, and can go on being read.
    pub fn set_timeout(&self, timeout: Option<Duration>) -> Result<(), IpcError> {
        self.reader
            .get_ref()
            .set_read_timeout(timeout)
            .map_err(|e| IpcError::Exchange(e.to_string()))
    }
}

impl Subscription {
    /// The next line as the daemon sent it (one event, docs/json.md), with the event it
    /// holds; `None` when the daemon stops or closes the connection.
    pub fn next_line(&mut self) -> Option<Result<(String, super::events::DaemonEvent), IpcError>> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => None,
            Ok(_) => Some(parse_event(&line).map(|e| (line.trim_end().to_string(), e))),
            Err(e) => Some(Err(IpcError::Exchange(e.to_string()))),
        }
    }
}

fn parse_event(line: &str) -> Result<super::events::DaemonEvent, IpcError> {
    serde_json::from_str(line).map_err(|e| {
        // The daemon refused (an error reply instead of an event).
        match serde_json::from_str::<Response>(line) {
            Ok(r) if !r.ok => IpcError::Exchange(r.message),
            _ => IpcError::Exchange(format!("bad event: {e}")),
        }
    })
}

impl Iterator for Subscription {
    type Item = Result<super::events::DaemonEvent, IpcError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_line().map(|r| r.map(|(_, e)| e))
    }
}

/// Subscribe to the daemon's events on `socket` (see [`Request::Subscribe`]).
pub fn subscribe(socket: &Path) -> Result<Subscription, IpcError> {
    let s = connect(socket)?;
    let ex = |e: std::io::Error| IpcError::Exchange(e.to_string());
    s.set_write_timeout(Some(Duration::from_secs(10)))
        .map_err(ex)?;
    let mut line = serde_json::to_string(&Request::Subscribe)
        .map_err(|e| IpcError::Exchange(e.to_string()))?;
    line.push('\n');
    (&s).write_all(line.as_bytes()).map_err(ex)?;
    Ok(Subscription {
        reader: BufReader::new(s),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_owner_or_root_may_connect() {
        assert!(peer_allowed(1000, 1000));
        assert!(peer_allowed(0, 1000));
        assert!(!peer_allowed(1001, 1000));
        assert!(!peer_allowed(1000, 0));
        let r = refused_peer(1001, 1000);
        assert!(!r.ok && r.message.contains("uid 1001"));
    }
}
