//! Loop types (spec 3 §1, §4, §6): the YAML schema, the registry that layers built-in, user
//! and project definitions, and prompt templates.

mod project;
mod registry;
mod schema;
mod template;

pub use project::{UntrustedLoops, trust_repository};
pub use registry::{LoopEntry, LoopError, LoopSource, Registry};
pub use schema::LoopType;
pub use template::{PromptTemplate, TemplateError, VARIABLES};
