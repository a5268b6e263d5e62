//! Integration tests of `taskstore`: the store, its indexes, the merge driver.
//!
//! One test binary per crate (issue 14): each former `tests/NAME.rs` is `mod NAME` here,
//! so the crate graph is linked once. A new test file `tests/it/NAME.rs` joins by one
//! `mod NAME;` line below; it reaches the shared helpers as `crate::harness` (and
//! `crate::snapshot_state`), never by declaring them again. Tests share this process:
//! none may change process-wide state (environment variables, current directory, umask,
//! signal handlers); set them on the child `Command` instead.

mod index;
mod index_validation;
mod merge_driver;
mod store;
