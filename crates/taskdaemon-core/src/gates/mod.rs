//! Evidence that work is done. This part has the validation command; phase and scope gates
//! and verification layers join here later.

mod validation;

pub use validation::{Validation, ValidationResult, run_validation};
