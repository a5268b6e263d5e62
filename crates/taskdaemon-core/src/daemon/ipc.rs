//! The daemon's protocol on its Unix socket: one JSON request per line, one JSON reply per
//! line, then the connection closes. The client side is blocking (CLI commands); the server
//! side lives in the daemon's dispatcher.

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
        action: String,
        reference: String,
    },
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

/// Send `req` and wait up to `timeout` for the reply.
pub fn call(socket: &Path, req: &Request, timeout: Duration) -> Result<Response, IpcError> {
    let mut s = UnixStream::connect(socket).map_err(|source| IpcError::Connect {
        socket: socket.display().to_string(),
        source,
    })?;
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
