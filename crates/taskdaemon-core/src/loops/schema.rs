//! The loop-type schema of spec 3 §1. The YAML key is the loop's name.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct LoopType {
    /// Handlebars template rendered afresh every iteration.
    pub prompt_template: String,
    /// Shell command run after every iteration; empty means "no validation".
    pub validation_command: String,
    /// The validation exit code that means done.
    pub success_exit_code: i32,
    /// Safety limit on iterations.
    pub max_iterations: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iteration_timeout_ms: Option<u64>,
    /// What state or files this loop reads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<String>,
    /// What artifacts it produces.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<String>,
    /// System prompt for the agent (appended to the agent's own where the CLI allows it,
    /// else put before the prompt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
}
