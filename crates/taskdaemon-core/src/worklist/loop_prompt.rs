//! The work lists' prompts go through loop types, as the engine's do: the built-in
//! `implement`, `qa`, `story-implement` and `story-review` (`loops/builtin/`), which a user
//! (`~/.config/taskdaemon/loops/`) or a project (`.taskdaemon/loops/`) may replace. The work
//! source writes the task's text (`task-description`); the template wraps it (a person's
//! answer to a DECIDE goes into `decision`).

use std::collections::BTreeMap;
use std::path::Path;

use super::WorklistError;
use crate::loops::{PromptTemplate, Registry};

/// The loop types of the work lists.
pub const LOOP_TYPES: &[&str] = &["implement", "qa", "story-implement", "story-review"];

/// One prompt's values.
#[derive(Debug, Clone)]
pub struct PromptVars<'a> {
    pub task: &'a str,
    pub decision: Option<&'a str>,
    pub iteration: u32,
    pub max_iterations: u32,
    pub workdir: &'a Path,
}

#[derive(Debug)]
pub struct LoopPrompts {
    templates: BTreeMap<String, PromptTemplate>,
}

impl LoopPrompts {
    /// The work lists' loop types as `repo` sees them (built-in, user, project).
    pub fn load(repo: &Path) -> Result<LoopPrompts, WorklistError> {
        let registry =
            Registry::for_repo(repo).map_err(|e| WorklistError::Invalid(e.to_string()))?;
        let mut templates = BTreeMap::new();
        for name in LOOP_TYPES {
            let entry = registry
                .get(name)
                .map_err(|e| WorklistError::Invalid(e.to_string()))?;
            let t = PromptTemplate::compile(name, &entry.def.prompt_template).map_err(|e| {
                WorklistError::Invalid(format!(
                    "{e}\n  hint: loop type `{name}` ({}) must be a valid prompt template",
                    entry.source
                ))
            })?;
            templates.insert(name.to_string(), t);
        }
        Ok(LoopPrompts { templates })
    }

    /// The prompt of loop type `name`.
    pub fn render(&self, name: &str, v: &PromptVars<'_>) -> Result<String, WorklistError> {
        let Some(t) = self.templates.get(name) else {
            return Err(WorklistError::Invalid(format!(
                "no loop type `{name}`\n  hint: the work lists use {}",
                LOOP_TYPES.join(", ")
            )));
        };
        let mut vars = serde_json::Map::new();
        for used in t.used() {
            let value = match used {
                "task-description" => v.task.into(),
                "decision" => v.decision.unwrap_or_default().into(),
                "iteration" => v.iteration.into(),
                "max-iterations" => v.max_iterations.into(),
                "working-directory" => v.workdir.display().to_string().into(),
                // Not known to a work list: empty, as in a loop not spawned with them.
                _ => serde_json::Value::String(String::new()),
            };
            vars.insert(used.to_string(), value);
        }
        t.render(&serde_json::Value::Object(vars))
            .map_err(|e| WorklistError::Invalid(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_wrap_the_task_and_a_project_may_replace_them() {
        let d = tempfile::tempdir().unwrap();
        let p = LoopPrompts::load(d.path()).unwrap();
        let v = PromptVars {
            task: "Do task 1.1",
            decision: Some("Question: a?\nAnswer: b"),
            iteration: 2,
            max_iterations: 9,
            workdir: d.path(),
        };
        for name in LOOP_TYPES {
            let out = p.render(name, &v).unwrap();
            assert!(out.starts_with("Do task 1.1\n"), "{name}: {out}");
            assert!(out.contains("Answer: b"), "{name}: {out}");
            assert!(out.contains("<promise>BLOCKED"), "{name}: {out}");
        }
        let loops = d.path().join(".taskdaemon/loops");
        std::fs::create_dir_all(&loops).unwrap();
        std::fs::write(
            loops.join("qa.yaml"),
            "qa:\n  prompt-template: \"House rules first. {{task-description}} ({{iteration}}/{{max-iterations}}){{plan-file}}\"\n  validation-command: \"\"\n  success-exit-code: 0\n  max-iterations: 3\n",
        )
        .unwrap();
        let p = LoopPrompts::load(d.path()).unwrap();
        assert_eq!(
            p.render("qa", &v).unwrap(),
            "House rules first. Do task 1.1 (2/9)"
        );
    }
}
