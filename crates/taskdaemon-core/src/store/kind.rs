//! The kind of loop a run is: the built-in ones the daemon treats specially, or a project's
//! own loop type by name. Stored as its name (`"loop-type": "phase"`), as before.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LoopKind {
    /// The default loop: work on a task until it is done.
    Ralph,
    /// The cascade's plan loop (Rule of Five passes over a plan document).
    Plan,
    /// The cascade's spec loop (the plan split into spec documents).
    Spec,
    /// One phase of a spec.
    Phase,
    /// A work list (`tasks.md` of a spec directory).
    Implement,
    /// A stories file.
    Stories,
    /// A loop type a project or user defined (`.taskdaemon/loops/NAME.yaml`).
    Custom(String),
}

impl LoopKind {
    pub fn parse(name: &str) -> LoopKind {
        match name {
            "ralph" => LoopKind::Ralph,
            "plan" => LoopKind::Plan,
            "spec" => LoopKind::Spec,
            "phase" => LoopKind::Phase,
            "implement" => LoopKind::Implement,
            "stories" => LoopKind::Stories,
            other => LoopKind::Custom(other.to_string()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            LoopKind::Ralph => "ralph",
            LoopKind::Plan => "plan",
            LoopKind::Spec => "spec",
            LoopKind::Phase => "phase",
            LoopKind::Implement => "implement",
            LoopKind::Stories => "stories",
            LoopKind::Custom(name) => name,
        }
    }

    /// Runs the cascade starts for a plan or spec (they share its worktree, and the spec's
    /// merge takes their work); every other run is standalone and merged by itself.
    pub fn is_cascade(&self) -> bool {
        matches!(self, LoopKind::Plan | LoopKind::Spec | LoopKind::Phase)
    }
}

impl fmt::Display for LoopKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&str> for LoopKind {
    fn from(s: &str) -> LoopKind {
        LoopKind::parse(s)
    }
}

impl From<String> for LoopKind {
    fn from(s: String) -> LoopKind {
        LoopKind::parse(&s)
    }
}

impl PartialEq<str> for LoopKind {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for LoopKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Serialize for LoopKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for LoopKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<LoopKind, D::Error> {
        Ok(LoopKind::parse(&String::deserialize(d)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_custom() {
        for name in [
            "ralph",
            "plan",
            "spec",
            "phase",
            "implement",
            "stories",
            "review",
        ] {
            let k = LoopKind::parse(name);
            assert_eq!(k.as_str(), name);
            assert_eq!(serde_json::to_string(&k).unwrap(), format!("\"{name}\""));
            assert_eq!(
                serde_json::from_str::<LoopKind>(&format!("\"{name}\"")).unwrap(),
                k
            );
        }
        assert_eq!(LoopKind::parse("review"), LoopKind::Custom("review".into()));
        assert!(LoopKind::Phase.is_cascade() && !LoopKind::Ralph.is_cascade());
    }
}

#[cfg(test)]
mod store_lines {
    use super::*;
    use crate::store::LoopRun;

    /// Lines as the store wrote them before the loop kind was typed load, and are written
    /// back byte for byte.
    #[test]
    fn a_run_line_written_before_loads_and_is_written_the_same() {
        for line in [
            r#"{"id":"1a2b3c-run-phase-1","loop-type":"phase","parent":"4d5e6f-spec-db","deps":[],"status":"running","worktree":"/r/.taskdaemon/worktrees/4d5e6f-spec-db","iteration":2,"progress":"iteration 1: continue","context":{"phase-index":"0","phase-number":"1","spec-id":"4d5e6f-spec-db"},"elapsed-ms":1200,"created-at":1,"updated-at":2}"#,
            r#"{"id":"7a8b9c-run-x","loop-type":"my-review","parent":null,"deps":[],"status":"pending","worktree":null,"iteration":1,"progress":"","context":{"task":"review it"},"created-at":1,"updated-at":1}"#,
        ] {
            let run: LoopRun = serde_json::from_str(line).unwrap();
            assert!(matches!(
                run.loop_type,
                LoopKind::Phase | LoopKind::Custom(_)
            ));
            assert_eq!(serde_json::to_string(&run).unwrap(), line);
        }
    }
}
