//! One subscriber of the daemon's events on its socket: a snapshot, then every event until
//! the daemon stops or the client goes. The client is watched while no event comes: one
//! that closed its end is dropped at once (its descriptor with it), not at the next event;
//! one that stopped reading is dropped once a write has waited [`STALLED`]; one that falls
//! behind gets `lagged` and a fresh snapshot. The daemon never waits for a subscriber.

use std::os::fd::AsRawFd;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::broadcast;

use super::events::DaemonEvent;
use super::ipc::{Request, Response};
use super::{Requests, ask, status, write_line};

/// How long one event's write may wait on a client that does not read (its socket's buffer
/// full) before the subscriber is dropped (in this crate's unit tests, a fraction).
pub(super) const STALLED: Duration = if cfg!(test) {
    Duration::from_millis(300)
} else {
    Duration::from_secs(60)
};

/// How often a client that shut its sending side (its end may still read) is checked for
/// having closed altogether.
const HALF_CLOSED_CHECK: Duration = Duration::from_secs(1);

/// Whether the peer of `w` has closed its end altogether (`POLLHUP`: both directions shut;
/// a client that only shut its sending side still reads the events).
fn hung_up(w: &OwnedWriteHalf) -> bool {
    let mut fd = nix::libc::pollfd {
        fd: w.as_ref().as_raw_fd(),
        events: 0,
        revents: 0,
    };
    // SAFETY: one valid pollfd, a zero timeout; the descriptor is owned by `w`, alive here.
    let rc = unsafe { nix::libc::poll(&mut fd, 1, 0) };
    rc > 0 && fd.revents & (nix::libc::POLLHUP | nix::libc::POLLERR) != 0
}

/// Read what the client sends after its request (nothing is expected) until its sending
/// side ends: `true` when it is gone (closed, an error), `false` when it only shut its
/// sending side (or sent more than a request may hold).
async fn client_gone(reader: &mut (impl AsyncRead + Unpin), w: &OwnedWriteHalf) -> bool {
    let mut buf = [0u8; 512];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) => return hung_up(w),
            Ok(_) => continue,
            Err(_) => return true,
        }
    }
}

/// One line, or `Err` when the client is gone or has not taken it within [`STALLED`].
async fn send(w: &mut OwnedWriteHalf, v: &impl serde::Serialize) -> std::io::Result<()> {
    match tokio::time::timeout(STALLED, write_line(w, v)).await {
        Ok(r) => r,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the subscriber does not read",
        )),
    }
}

/// An event as its line on the socket: stamped with `schema` and `at` (docs/json.md).
async fn send_event(w: &mut OwnedWriteHalf, e: &DaemonEvent) -> std::io::Result<()> {
    let line = crate::json::event(e).map_err(std::io::Error::other)?;
    send(w, &line).await
}

async fn snapshot(w: &mut OwnedWriteHalf, tx: &Requests) -> std::io::Result<()> {
    let resp = ask(tx, Request::Snapshot).await;
    if !resp.ok {
        return send(w, &resp).await;
    }
    match serde_json::from_value::<status::StatusSnapshot>(resp.data) {
        Ok(s) => send_event(w, &DaemonEvent::Snapshot(s)).await,
        Err(e) => send(w, &Response::err(format!("snapshot: {e}"))).await,
    }
}

/// Stream the events to the client of `reader` and `w` (see the module's text).
pub(super) async fn stream_events(
    mut reader: impl AsyncRead + Unpin,
    mut w: OwnedWriteHalf,
    mut rx: broadcast::Receiver<DaemonEvent>,
    tx: &Requests,
) {
    if snapshot(&mut w, tx).await.is_err() {
        return;
    }
    // Reading until the client's sending side ends; after a half close, a check each second.
    let mut reading = true;
    let mut check = tokio::time::interval(HALF_CLOSED_CHECK);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let next = tokio::select! {
            r = rx.recv() => r,
            gone = client_gone(&mut reader, &w), if reading => {
                if gone {
                    return;
                }
                reading = false;
                continue;
            }
            _ = check.tick(), if !reading => {
                if hung_up(&w) {
                    return;
                }
                continue;
            }
        };
        let written = match next {
            Ok(e) => {
                let last = matches!(e, DaemonEvent::DaemonStopped { .. });
                let r = send_event(&mut w, &e).await;
                if last {
                    let _ = w.shutdown().await;
                    return;
                }
                r
            }
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                match send_event(&mut w, &DaemonEvent::Lagged { missed }).await {
                    Ok(()) => snapshot(&mut w, tx).await,
                    Err(e) => Err(e),
                }
            }
            Err(broadcast::error::RecvError::Closed) => return,
        };
        if written.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use tokio::io::AsyncBufReadExt;
    use tokio::net::UnixStream;
    use tokio::sync::{mpsc, oneshot};

    /// A dispatcher that refuses every snapshot (the subscriber gets an error line).
    fn requests() -> Requests {
        let (tx, mut rx) = mpsc::channel::<(Request, oneshot::Sender<Response>)>(8);
        tokio::spawn(async move {
            while let Some((_, reply)) = rx.recv().await {
                let _ = reply.send(Response::err("no snapshot here"));
            }
        });
        tx
    }

    /// A subscriber's task on one end of a socket pair; the other end is the client's.
    fn subscriber(
        bus: &broadcast::Sender<DaemonEvent>,
    ) -> (
        tokio::task::JoinHandle<()>,
        tokio::io::BufReader<UnixStream>,
    ) {
        let (server, client) = UnixStream::pair().unwrap();
        let (r, w) = server.into_split();
        let rx = bus.subscribe();
        let tx = requests();
        let task = tokio::spawn(async move { stream_events(r, w, rx, &tx).await });
        (task, tokio::io::BufReader::new(client))
    }

    fn note(message: String) -> DaemonEvent {
        DaemonEvent::Note {
            repo: PathBuf::from("/repo"),
            warning: false,
            message,
        }
    }

    async fn first_line(c: &mut tokio::io::BufReader<UnixStream>) -> String {
        let mut line = String::new();
        c.read_line(&mut line).await.unwrap();
        line
    }

    /// A failure guard: the task ends well within it, or it never does.
    const GUARD: Duration = Duration::from_secs(20);

    #[tokio::test]
    async fn a_client_that_closes_is_dropped_with_no_event() {
        let (bus, _keep) = broadcast::channel(16);
        let (task, mut client) = subscriber(&bus);
        assert!(first_line(&mut client).await.contains("no snapshot here"));
        drop(client);
        tokio::time::timeout(GUARD, task).await.unwrap().unwrap();
        assert_eq!(
            bus.receiver_count(),
            1,
            "only the test's own receiver is left"
        );
    }

    #[tokio::test]
    async fn a_client_that_shuts_its_sending_side_still_gets_the_events() {
        let (bus, _keep) = broadcast::channel(16);
        let (task, mut client) = subscriber(&bus);
        first_line(&mut client).await;
        client.get_mut().shutdown().await.unwrap();
        tokio::time::sleep(HALF_CLOSED_CHECK * 2).await;
        assert!(!task.is_finished(), "a half close is no hang-up");
        bus.send(note("still there".into())).unwrap();
        assert!(first_line(&mut client).await.contains("still there"));
        drop(client);
        tokio::time::timeout(GUARD, task).await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_client_that_stops_reading_is_dropped() {
        let (bus, _keep) = broadcast::channel(1024);
        let (task, mut client) = subscriber(&bus);
        first_line(&mut client).await;
        // More than a socket buffer holds, and the client reads none of it.
        for _ in 0..64 {
            let _ = bus.send(note("x".repeat(64 * 1024)));
        }
        tokio::time::timeout(GUARD, task).await.unwrap().unwrap();
        drop(client);
    }
}
