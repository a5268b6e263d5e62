//! Evidence that work is done: the validation command, item counts, and the scope gates
//! of the plan's markers.

pub mod contract;
pub mod count;
pub mod phase;
pub mod scope;
mod validation;

pub use validation::{Validation, ValidationResult, run_validation};
