//! Agents: what runs each iteration. A spec names one (`claude`, `cmd:make fix`, …); the
//! runner starts it in its own process group; a parser turns its output into the agent's
//! own words, tool calls and usage.

pub mod api;
pub mod doctor;
pub mod failure;
mod orphans;
mod parse;
pub mod preflight;
mod presets;
pub(crate) mod proctree;
pub mod readable;
mod runner;
pub mod script;
mod spec;
pub mod step;
pub mod tracked;
pub mod watchdog;

pub use failure::{AgentResult, Evidence, FailureClass, UsageWindow, classify};
pub(crate) use orphans::Leader;
pub use parse::{Activity, OutputFormat, OutputParser, ParsedOutput};
pub use presets::{Preset, find_on_path, first_installed, is_executable};
pub(crate) use runner::die_with;
pub use runner::{
    ExitStatus, LineSplitter, ProcessResult, ProcessSpec, Stream, become_subreaper, run_process,
};
pub use spec::{AgentError, AgentSpec, Invocation};
