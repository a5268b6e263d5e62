//! What a work list checks of its tasks before iteration 1, besides the engine's agent
//! preflight: each open task's Verify command, as the validation checks would.

use std::path::Path;

use crate::agent::AgentSpec;
use crate::agent::preflight::{Finding, preflight_here};

/// Each Verify command through the validation checks: a program that is not on PATH is a
/// warning (that task's verification will fail), never a refusal.
pub fn verify_warnings(verify: &[String], workdir: &Path) -> Vec<String> {
    let mut warnings = Vec::new();
    for cmd in verify {
        // `:`, a builtin, as the agent: only the validation's checks apply.
        for f in preflight_here(
            &AgentSpec::Cmd {
                command: ":".into(),
            },
            Some(cmd),
            workdir,
        ) {
            match f {
                Finding::ValidationMissing { program } => warnings.push(format!(
                    "the Verify command `{cmd}` runs `{program}`, which is not on PATH: that task's verification will fail"
                )),
                Finding::Warning(m) => warnings.push(m),
                Finding::AgentRefused { .. } => {}
            }
        }
    }
    warnings
}
