//! Evidence that work is done: the validation command, item counts, and the scope gates
//! of the plan's markers.

pub mod contract;
pub mod count;
pub mod evidence;
pub mod phase;
pub mod scope;
mod validation;

pub use validation::{Validation, ValidationResult, run_validation};

/// A file system for gate tests: the files at `task-N-pre` and now, by path; a FIX check
/// passes when its command is `true`.
#[cfg(test)]
pub(crate) mod test_world {
    use std::collections::HashMap;

    use super::scope::ScopeWorld;

    pub(crate) struct World {
        pub before: HashMap<&'static str, String>,
        pub now: HashMap<&'static str, String>,
    }
    impl ScopeWorld for World {
        fn before(&self, p: &str) -> Option<String> {
            self.before.get(p).cloned()
        }
        fn now(&self, p: &str) -> Option<String> {
            self.now.get(p).cloned()
        }
        fn check_passes(&self, command: &str) -> bool {
            command == "true"
        }
    }
}
