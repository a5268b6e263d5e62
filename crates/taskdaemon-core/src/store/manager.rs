//! The StateManager actor (spec 3 §3): one task owns the store and serves generic
//! messages (collection name + JSON) with oneshot replies; handles are cheap clones; every
//! change (ours, and other processes' picked up by a sync) goes out on a broadcast channel
//! for observers (the daemon, the TUI).
//!
//! Store calls block (file locks, fsync), so the actor runs on tokio's blocking pool.

use serde_json::Value;
use taskstore::{Change, Filter};
use tokio::sync::{broadcast, mpsc, oneshot};

use super::{AnyRecord, Kind, NewRecord, Records, Result, StoreError};

pub type Reply<T> = oneshot::Sender<Result<T>>;

/// The messages of spec 3 §3.
#[derive(Debug)]
pub enum StoreMessage {
    /// Create from the new record's fields; replies with the id.
    Create {
        collection: String,
        data: Value,
        reply: Reply<String>,
    },
    Get {
        collection: String,
        id: String,
        reply: Reply<Option<Value>>,
    },
    /// A whole record (as `Get` returns it), changed.
    Update {
        collection: String,
        data: Value,
        reply: Reply<()>,
    },
    Delete {
        collection: String,
        id: String,
        reply: Reply<()>,
    },
    List {
        collection: String,
        filters: Vec<Filter>,
        reply: Reply<Vec<Value>>,
    },
    Sync {
        reply: Reply<()>,
    },
    RebuildIndexes {
        collection: String,
        reply: Reply<usize>,
    },
}

/// A change to a record, for observers.
pub type StoreEvent = Change;

/// A handle on the running actor. Clone freely.
#[derive(Debug, Clone)]
pub struct StoreHandle {
    tx: mpsc::Sender<StoreMessage>,
    events: broadcast::Sender<StoreEvent>,
}

pub struct StateManager;

impl StateManager {
    /// Start the actor on the current tokio runtime. It stops when every handle is dropped.
    pub fn spawn(records: Records) -> (StoreHandle, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(256);
        let (events, _) = broadcast::channel(1024);
        let out = events.clone();
        let task = tokio::task::spawn_blocking(move || serve(records, rx, out));
        (StoreHandle { tx, events }, task)
    }
}

fn kind(collection: &str) -> Result<Kind> {
    Kind::from_collection(collection).ok_or_else(|| {
        StoreError::Store(taskstore::Error::UnknownCollection {
            name: collection.to_string(),
            known: Kind::ALL.map(|k| k.collection()).join(", "),
        })
    })
}

fn now_ms() -> i64 {
    crate::clock::now().as_millisecond()
}

fn serve(
    mut records: Records,
    mut rx: mpsc::Receiver<StoreMessage>,
    events: broadcast::Sender<StoreEvent>,
) {
    while let Some(msg) = rx.blocking_recv() {
        let r = &mut records;
        match msg {
            StoreMessage::Create {
                collection,
                data,
                reply,
            } => {
                let res = kind(&collection)
                    .and_then(|k| NewRecord::from_json(k, data))
                    .and_then(|new| r.create(new, now_ms()))
                    .map(|rec| rec.id().to_string());
                let _ = reply.send(res);
            }
            StoreMessage::Get {
                collection,
                id,
                reply,
            } => {
                let res = kind(&collection)
                    .and_then(|_| r.store().get(&collection, &id).map_err(StoreError::from));
                let _ = reply.send(res);
            }
            StoreMessage::Update {
                collection,
                data,
                reply,
            } => {
                let res = kind(&collection)
                    .and_then(|k| AnyRecord::from_json(k, data))
                    .and_then(|rec| r.update(rec, now_ms()))
                    .map(|_| ());
                let _ = reply.send(res);
            }
            StoreMessage::Delete {
                collection,
                id,
                reply,
            } => {
                let res = kind(&collection).and_then(|k| match r.get(&id)? {
                    Some(rec) if rec.kind() == k => r.delete(&id, now_ms()),
                    _ => Err(StoreError::Missing {
                        field: "id".into(),
                        id: id.clone(),
                    }),
                });
                let _ = reply.send(res);
            }
            StoreMessage::List {
                collection,
                filters,
                reply,
            } => {
                let res = kind(&collection)
                    .and_then(|k| r.list(k, &filters))
                    .map(|v| v.iter().map(AnyRecord::to_json).collect());
                let _ = reply.send(res);
            }
            StoreMessage::Sync { reply } => {
                let _ = reply.send(r.sync());
            }
            StoreMessage::RebuildIndexes { collection, reply } => {
                let res = kind(&collection).and_then(|_| {
                    r.store_mut()
                        .rebuild_indexes(&collection)
                        .map_err(StoreError::from)
                });
                let _ = reply.send(res);
            }
        }
        for change in records.take_changes() {
            // Nobody listening is fine.
            let _ = events.send(change);
        }
    }
}

impl StoreHandle {
    /// Changes from now on. A slow observer that falls more than 1024 changes behind
    /// gets `Lagged` and should re-read what it shows.
    pub fn subscribe(&self) -> broadcast::Receiver<StoreEvent> {
        self.events.subscribe()
    }

    async fn ask<T>(&self, make: impl FnOnce(Reply<T>) -> StoreMessage) -> Result<T> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(make(reply))
            .await
            .map_err(|_| StoreError::Stopped)?;
        rx.await.map_err(|_| StoreError::Stopped)?
    }

    pub async fn create(&self, collection: &str, data: Value) -> Result<String> {
        let collection = collection.to_string();
        self.ask(|reply| StoreMessage::Create {
            collection,
            data,
            reply,
        })
        .await
    }

    pub async fn get(&self, collection: &str, id: &str) -> Result<Option<Value>> {
        let (collection, id) = (collection.to_string(), id.to_string());
        self.ask(|reply| StoreMessage::Get {
            collection,
            id,
            reply,
        })
        .await
    }

    pub async fn update(&self, collection: &str, data: Value) -> Result<()> {
        let collection = collection.to_string();
        self.ask(|reply| StoreMessage::Update {
            collection,
            data,
            reply,
        })
        .await
    }

    pub async fn delete(&self, collection: &str, id: &str) -> Result<()> {
        let (collection, id) = (collection.to_string(), id.to_string());
        self.ask(|reply| StoreMessage::Delete {
            collection,
            id,
            reply,
        })
        .await
    }

    pub async fn list(&self, collection: &str, filters: Vec<Filter>) -> Result<Vec<Value>> {
        let collection = collection.to_string();
        self.ask(|reply| StoreMessage::List {
            collection,
            filters,
            reply,
        })
        .await
    }

    pub async fn sync(&self) -> Result<()> {
        self.ask(|reply| StoreMessage::Sync { reply }).await
    }

    pub async fn rebuild_indexes(&self, collection: &str) -> Result<usize> {
        let collection = collection.to_string();
        self.ask(|reply| StoreMessage::RebuildIndexes { collection, reply })
            .await
    }
}
