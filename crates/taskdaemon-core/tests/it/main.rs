//! Integration tests of `taskdaemon-core`: recorded agent output, property tests, records.
//!
//! One test binary per crate (issue 14): each former `tests/NAME.rs` is `mod NAME` here,
//! so the crate graph is linked once. A new test file `tests/it/NAME.rs` joins by one
//! `mod NAME;` line below; it reaches the shared helpers as `crate::harness` (and
//! `crate::snapshot_state`), never by declaring them again. Tests share this process:
//! none may change process-wide state (environment variables, current directory, umask,
//! signal handlers); set them on the child `Command` instead.

mod agent_failures;
mod outside_input_props;
mod record_paths;
mod recorded_transcripts;
mod records;
mod task_corpus;
mod task_parser_props;
mod tasks_md_props;
