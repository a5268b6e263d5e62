//! taskdaemon-core: everything taskdaemon knows. It never prints and never exits: it
//! returns values and emits [`engine::EngineEvent`]s for the binary to render.

pub mod agent;
pub mod clock;
pub mod config;
pub mod daemon;
pub mod docs;
pub mod duration;
pub mod engine;
pub mod fingerprint;
pub mod fsutil;
pub mod gates;
pub mod git;
pub mod guards;
pub mod json;
pub mod lifecycle;
pub mod loops;
pub mod notify;
pub mod pidlock;
pub mod project;
pub mod report;
pub mod runs;
pub mod sandbox;
pub mod scheduler;
pub mod secrets;
pub mod shell;
pub mod signals;
pub mod store;
pub mod telemetry;
pub mod watch;
pub mod worklist;
pub mod workspace;
pub mod yaml;
