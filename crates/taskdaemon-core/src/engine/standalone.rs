//! The cascade's loops (`plan`, `spec`, `phase`) run by hand with `taskdaemon run --loop`,
//! outside the daemon: their variables come from `--var NAME=VALUE`, else
//! `TASKDAEMON_<NAME>`, else what the files say (a phase's name and the completed phases
//! from the spec's front matter); whatever is still missing is refused by name, never
//! rendered empty.

use std::path::Path;

use serde_json::{Map, Value};

use crate::docs::spec_doc::read_one;
use crate::scheduler::context::phase_run;
use crate::store::{Spec, SpecStatus};

/// What a hand-run cascade loop lacks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the `{loop_name}` loop needs {what}\n  hint: {hint}")]
pub struct MissingVariable {
    pub loop_name: String,
    pub what: String,
    pub hint: String,
}

fn missing(loop_name: &str, name: &str, what: &str) -> MissingVariable {
    MissingVariable {
        loop_name: loop_name.to_string(),
        what: format!("`{name}`: {what}"),
        hint: format!(
            "give it with `--var {name}=VALUE` or TASKDAEMON_{}=VALUE",
            name.to_ascii_uppercase().replace('-', "_")
        ),
    }
}

/// An existing file or directory named by `name`, absolute.
fn path_of(
    loop_name: &str,
    name: &str,
    what: &str,
    dir: &Path,
    var: &dyn Fn(&str) -> Option<String>,
    must_exist: bool,
) -> Result<String, MissingVariable> {
    let v = var(name).ok_or_else(|| missing(loop_name, name, what))?;
    let p = dir.join(&v);
    if must_exist && !p.exists() {
        let mut m = missing(loop_name, name, what);
        m.what = format!("`{name}`: {} does not exist ({what})", p.display());
        return Err(m);
    }
    Ok(p.display().to_string())
}

/// The context of a cascade loop run outside the daemon; `None` for any other loop.
/// `var` looks a variable up (flags first, then the environment); `task` is the run's
/// prompt (the plan loop's request).
pub fn standalone_context(
    loop_name: &str,
    dir: &Path,
    task: &str,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Map<String, Value>>, MissingVariable> {
    let mut m = Map::new();
    let mut put = |k: &str, v: String| {
        m.insert(k.to_string(), Value::String(v));
    };
    match loop_name {
        "plan" => {
            let request = var("user-request")
                .or_else(|| (!task.trim().is_empty()).then(|| task.to_string()))
                .ok_or_else(|| {
                    missing(
                        loop_name,
                        "user-request",
                        "what to plan (or give it as the run's prompt)",
                    )
                })?;
            put("user-request", request);
            let plan = path_of(
                loop_name,
                "plan-file",
                "the file the plan is written to",
                dir,
                var,
                false,
            )?;
            put("plan-file", plan);
        }
        "spec" => {
            let plan = path_of(
                loop_name,
                "plan-file",
                "the plan the specs are written from",
                dir,
                var,
                true,
            )?;
            put("plan-file", plan);
            let specs = path_of(
                loop_name,
                "specs-dir",
                "the directory the spec documents go to",
                dir,
                var,
                false,
            )?;
            put("specs-dir", specs);
        }
        "phase" => return phase_context(dir, var).map(Some),
        _ => return Ok(None),
    }
    Ok(Some(m))
}

/// A phase: the spec file, its number (1 unless given), its name and the phases before it
/// from the spec's front matter.
fn phase_context(
    dir: &Path,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<Map<String, Value>, MissingVariable> {
    let loop_name = "phase";
    let file = path_of(
        loop_name,
        "spec-file",
        "the spec document whose phase to implement",
        dir,
        var,
        true,
    )?;
    let doc = read_one(Path::new(&file)).map_err(|p| MissingVariable {
        loop_name: loop_name.into(),
        what: format!("a readable spec document: {}: {}", p.place, p.message),
        hint: "fix the spec's front matter (`taskdaemon check-doc specs DIR`)".into(),
    })?;
    let number = match var("phase-number") {
        None => 1,
        Some(v) => v
            .split_whitespace()
            .next()
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| *n >= 1 && (doc.phases.is_empty() || *n <= doc.phases.len()))
            .ok_or_else(|| MissingVariable {
                loop_name: loop_name.into(),
                what: format!(
                    "a phase number between 1 and {} (the spec's phases), not {v:?}",
                    doc.phases.len().max(1)
                ),
                hint: "give it with `--var phase-number=N`".into(),
            })?,
    };
    let spec = Spec {
        id: String::new(),
        parent: String::new(),
        title: doc.title.clone(),
        status: SpecStatus::Running,
        deps: Vec::new(),
        file: file.clone(),
        phases: doc.phases.clone(),
        priority: 0,
        note: None,
        created_at: 0,
        updated_at: 0,
    };
    let mut m = phase_run(&spec, number - 1, None, None);
    if let Some(name) = var("phase-name") {
        m.phase_name = Some(name);
    }
    Ok(m.to_map())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_and_spec_loops_name_what_they_lack() {
        let d = tempfile::tempdir().unwrap();
        let none = |_: &str| None;
        let e = standalone_context("plan", d.path(), "an idea", &none).unwrap_err();
        assert!(e.to_string().contains("`plan-file`"), "{e}");
        assert!(e.to_string().contains("TASKDAEMON_PLAN_FILE"), "{e}");
        let plan_file = |k: &str| (k == "plan-file").then(|| "plan.md".to_string());
        let m = standalone_context("plan", d.path(), "an idea", &plan_file)
            .unwrap()
            .unwrap();
        assert_eq!(m["user-request"], "an idea");
        assert_eq!(
            m["plan-file"],
            d.path().join("plan.md").display().to_string()
        );
        // The spec loop reads the plan: it must exist.
        let e = standalone_context("spec", d.path(), "x", &plan_file).unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
        std::fs::write(d.path().join("plan.md"), "# p\n").unwrap();
        let e = standalone_context("spec", d.path(), "x", &plan_file).unwrap_err();
        assert!(e.to_string().contains("`specs-dir`"), "{e}");
        assert_eq!(standalone_context("ralph", d.path(), "x", &none), Ok(None));
    }
}
