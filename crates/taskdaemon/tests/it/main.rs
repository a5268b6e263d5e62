//! Integration tests of the `taskdaemon` binary: real git, real processes, a hermetic
//! environment (`harness`).
//!
//! One test binary per crate (issue 14): each former `tests/NAME.rs` is `mod NAME` here,
//! so the crate graph is linked once. A new test file `tests/it/NAME.rs` joins by one
//! `mod NAME;` line below; it reaches the shared helpers as `crate::harness` (and
//! `crate::snapshot_state`, `crate::pg`), never by declaring them again. Tests share this process:
//! none may change process-wide state (environment variables, current directory, umask,
//! signal handlers); set them on the child `Command` instead.

#[allow(dead_code)]
mod harness;
mod pg;
#[allow(dead_code)]
mod snapshot_state;

mod agent_failures;
mod api_agents;
mod cli;
mod cli_polish;
mod containers;
mod core_flow;
mod core_moves;
mod daemon;
mod daemon_events;
mod evidence;
mod gates;
mod git_guard;
mod hostile;
mod json_schema;
mod kills;
mod lean_start;
mod multi_machine;
mod no_one_in;
mod notify;
mod one_engine;
mod perf;
mod pg_store;
mod report_cards;
mod rollback_safety;
mod sandbox;
mod snapshot_processes;
mod snapshots;
mod task_parser;
mod trust;
mod user_work;
mod watch_tui;
mod worklist;
mod worklist_engine;
mod worktrees;
