//! Prompt templates: Handlebars, strict, no HTML escaping. Every variable a template names
//! is found when it is compiled, so an unknown name fails before the first iteration, and
//! the engine computes only the variables a template uses.

use std::collections::BTreeSet;

use handlebars::template::{Parameter, Template, TemplateElement};
use handlebars::{Handlebars, Path, PathSeg};

/// The variables every loop type may use.
pub const VARIABLES: &[&str] = &[
    "iteration",
    "max-iterations",
    "previous-errors",
    "git-status",
    "git-diff",
    "progress",
    "task-description",
    "current-state",
    "working-directory",
    "decision",
    "completion-promise",
    "feedback",
    "plan-instructions",
    // The cascade's loops (spec 3 §4); empty in a loop that was not spawned with them.
    "user-request",
    "current-plan",
    "review-pass",
    "plan-file",
    "plan-content",
    "specs-dir",
    "existing-specs",
    "coverage-gaps",
    "spec-file",
    "spec-content",
    "phase-name",
    "phase-number",
    "completed-phases",
];

/// Helpers Handlebars ships; a name in this list is not a variable.
const HELPERS: &[&str] = &[
    "if", "unless", "each", "with", "lookup", "log", "eq", "ne", "gt", "gte", "lt", "lte", "and",
    "or", "not", "len", "raw",
];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error(
        "template of loop `{loop_name}` does not parse: {message}\n  hint: check the {{{{…}}}} pairs; a literal brace is written \\{{{{"
    )]
    Syntax { loop_name: String, message: String },
    #[error(
        "template of loop `{loop_name}` uses unknown variable `{name}`{suggestion}\n  hint: known variables: {known}"
    )]
    UnknownVariable {
        loop_name: String,
        name: String,
        suggestion: String,
        known: String,
    },
    #[error(
        "template of loop `{loop_name}` uses a partial (`{{{{> …}}}}`), which loop templates do not support"
    )]
    Partial { loop_name: String },
    #[error("rendering the prompt of loop `{loop_name}` failed: {message}")]
    Render { loop_name: String, message: String },
}

/// A compiled prompt template and the set of variables it names.
#[derive(Debug)]
pub struct PromptTemplate {
    loop_name: String,
    registry: Handlebars<'static>,
    used: BTreeSet<String>,
}

impl PromptTemplate {
    /// Compile `source`, rejecting names outside `VARIABLES`.
    pub fn compile(loop_name: &str, source: &str) -> Result<Self, TemplateError> {
        let tpl = Template::compile(source).map_err(|e| TemplateError::Syntax {
            loop_name: loop_name.to_string(),
            message: e.to_string().lines().next().unwrap_or_default().to_string(),
        })?;
        let mut used = BTreeSet::new();
        collect(&tpl, &mut used, loop_name)?;
        if let Some(bad) = used.iter().find(|n| !VARIABLES.contains(&n.as_str())) {
            let suggestion = crate::yaml::nearest(bad, VARIABLES)
                .map(|s| format!(" (did you mean `{s}`?)"))
                .unwrap_or_default();
            return Err(TemplateError::UnknownVariable {
                loop_name: loop_name.to_string(),
                name: bad.clone(),
                suggestion,
                known: VARIABLES.join(", "),
            });
        }
        let mut registry = Handlebars::new();
        registry.set_strict_mode(true);
        registry.register_escape_fn(handlebars::no_escape);
        registry.register_template(loop_name, tpl);
        Ok(PromptTemplate {
            loop_name: loop_name.to_string(),
            registry,
            used,
        })
    }

    /// Whether the template names `var`, so the engine computes only what is used.
    pub fn uses(&self, var: &str) -> bool {
        self.used.contains(var)
    }

    pub fn used(&self) -> impl Iterator<Item = &str> {
        self.used.iter().map(String::as_str)
    }

    pub fn render(&self, vars: &serde_json::Value) -> Result<String, TemplateError> {
        self.registry
            .render(&self.loop_name, vars)
            .map_err(|e| TemplateError::Render {
                loop_name: self.loop_name.clone(),
                message: e.to_string(),
            })
    }
}

fn collect(
    tpl: &Template,
    out: &mut BTreeSet<String>,
    loop_name: &str,
) -> Result<(), TemplateError> {
    for el in &tpl.elements {
        collect_element(el, out, loop_name)?;
    }
    Ok(())
}

fn collect_element(
    el: &TemplateElement,
    out: &mut BTreeSet<String>,
    loop_name: &str,
) -> Result<(), TemplateError> {
    {
        match el {
            TemplateElement::Expression(h) | TemplateElement::HtmlExpression(h) => {
                let is_helper_call = !h.params.is_empty() || !h.hash.is_empty();
                match &h.name {
                    Parameter::Name(n) if !is_helper_call && !HELPERS.contains(&n.as_str()) => {
                        out.insert(n.clone());
                    }
                    other => param(other, out, loop_name)?,
                }
                for p in h.params.iter().chain(h.hash.values()) {
                    param(p, out, loop_name)?;
                }
            }
            TemplateElement::HelperBlock(h) => {
                for p in h.params.iter().chain(h.hash.values()) {
                    param(p, out, loop_name)?;
                }
                // Inside `each`/`with` names are relative to the item: not checked here.
                let scoped = matches!(&h.name, Parameter::Name(n) if n == "each" || n == "with")
                    || h.block_param.is_some();
                if !scoped && let Some(t) = &h.template {
                    collect(t, out, loop_name)?;
                }
                if let Some(t) = &h.inverse {
                    collect(t, out, loop_name)?;
                }
            }
            TemplateElement::PartialExpression(_) | TemplateElement::PartialBlock(_) => {
                return Err(TemplateError::Partial {
                    loop_name: loop_name.to_string(),
                });
            }
            _ => {}
        }
    }
    Ok(())
}

fn param(p: &Parameter, out: &mut BTreeSet<String>, loop_name: &str) -> Result<(), TemplateError> {
    match p {
        Parameter::Path(Path::Relative((segs, _))) => {
            if let Some(PathSeg::Named(n)) = segs.first()
                && n != "this"
            {
                out.insert(n.clone());
            }
        }
        Parameter::Subexpression(sub) => collect_element(&sub.element, out, loop_name)?,
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_variables_including_inside_if() {
        let t = PromptTemplate::compile(
            "t",
            "{{task-description}} {{#if previous-errors}}{{previous-errors}}{{/if}}",
        )
        .unwrap();
        assert!(t.uses("task-description") && t.uses("previous-errors"));
        assert!(!t.uses("git-diff"));
    }

    #[test]
    fn unknown_variable_is_named_even_inside_if() {
        for src in [
            "{{nope}}",
            "{{#if git-dif}}x{{/if}}",
            "{{#unless x}}{{/unless}}",
        ] {
            let e = PromptTemplate::compile("t", src).unwrap_err();
            assert!(
                matches!(e, TemplateError::UnknownVariable { .. }),
                "{src}: {e}"
            );
        }
        let e = PromptTemplate::compile("t", "{{#if git-dif}}x{{/if}}").unwrap_err();
        assert!(
            e.to_string().contains("`git-dif`")
                && e.to_string().contains("did you mean `git-diff`"),
            "{e}"
        );
    }

    #[test]
    fn renders_without_html_escaping() {
        let t = PromptTemplate::compile("t", "{{task-description}} #{{iteration}}").unwrap();
        let out = t
            .render(&json!({"task-description": "a < b && \"c\"", "iteration": 2}))
            .unwrap();
        assert_eq!(out, "a < b && \"c\" #2");
    }

    #[test]
    fn syntax_error_is_reported() {
        let e = PromptTemplate::compile("t", "{{#if x}}").unwrap_err();
        assert!(matches!(e, TemplateError::Syntax { .. }), "{e}");
    }
}
