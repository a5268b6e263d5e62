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
    // What the harness recorded as the task's fixed evidence (issue 36).
    "evidence-rules",
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

/// Helpers a template may call (`{{eq a b}}`, `{{#if (not x)}}`). Loop variables are plain
/// strings and numbers, so `each`, `with`, `lookup`, partials and decorators have nothing
/// to work on and are refused when the template is loaded.
const HELPERS: &[&str] = &[
    "if", "unless", "eq", "ne", "gt", "gte", "lt", "lte", "and", "or", "not", "len",
];
/// Block helpers (`{{#if}}`, `{{#unless}}`).
const BLOCKS: &[&str] = &["if", "unless"];
/// Variables that are numbers; every other one is a string.
const NUMBERS: &[&str] = &["iteration", "max-iterations", "review-pass"];
/// How deep blocks and subexpressions may nest (the parser and the renderer recurse).
pub const MAX_NESTING: usize = 64;
/// The longest template loaded (bytes).
pub const MAX_TEMPLATE_BYTES: usize = 256 * 1024;
/// The most `{{…}}` tags a template may have: Handlebars computes each element's line and
/// column from the start of the text, so loading is quadratic in the number of tags; the
/// built-in templates have under 100.
pub const MAX_TAGS: usize = 1_000;

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
    #[error(
        "template of loop `{loop_name}` uses `{{{{{raw}}}}}`: {why}\n  hint: loop variables are plain values; name them alone, like `{{{{iteration}}}}`"
    )]
    Unsupported {
        loop_name: String,
        raw: String,
        why: String,
    },
    #[error(
        "template of loop `{loop_name}` is too large or nests too deep: {why}\n  hint: at most {MAX_NESTING} nested blocks, {MAX_TAGS} {{{{…}}}} tags and {MAX_TEMPLATE_BYTES} bytes"
    )]
    TooComplex { loop_name: String, why: String },
    #[error("rendering the prompt of loop `{loop_name}` failed: {message}")]
    Render { loop_name: String, message: String },
}

/// A compiled prompt template and the set of variables it names.
#[derive(Debug, Clone)]
pub struct PromptTemplate {
    loop_name: String,
    registry: Handlebars<'static>,
    used: BTreeSet<String>,
}

impl PromptTemplate {
    /// Compile `source`, rejecting names outside `VARIABLES`. A template compiled before in
    /// this process (a run checks its template when it resolves its settings, then
    /// renders with it) is not parsed and tried again.
    pub fn compile(loop_name: &str, source: &str) -> Result<Self, TemplateError> {
        type Compiled = std::sync::Mutex<Vec<(String, String, PromptTemplate)>>;
        static COMPILED: Compiled = std::sync::Mutex::new(Vec::new());
        let same = |(n, s, _): &&(String, String, PromptTemplate)| n == loop_name && s == source;
        if let Some(t) = COMPILED
            .lock()
            .ok()
            .and_then(|c| c.iter().find(same).map(|e| e.2.clone()))
        {
            return Ok(t);
        }
        let t = Self::compile_new(loop_name, source)?;
        if let Ok(mut c) = COMPILED.lock()
            && c.len() < 16
        {
            c.push((loop_name.to_string(), source.to_string(), t.clone()));
        }
        Ok(t)
    }

    fn compile_new(loop_name: &str, source: &str) -> Result<Self, TemplateError> {
        check_shape(source).map_err(|why| TemplateError::TooComplex {
            loop_name: loop_name.to_string(),
            why,
        })?;
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
        let t = PromptTemplate {
            loop_name: loop_name.to_string(),
            registry,
            used,
        };
        // What would fail at render time (a helper's arguments, a comparison of a string
        // with a number) fails now: render once with every variable empty, once filled.
        for filled in [false, true] {
            t.render(&t.sample(filled))?;
        }
        Ok(t)
    }

    /// Values of the right type for every variable the template uses.
    fn sample(&self, filled: bool) -> serde_json::Value {
        let m = self
            .used
            .iter()
            .map(|n| {
                let v = match (NUMBERS.contains(&n.as_str()), filled) {
                    (true, f) => serde_json::json!(u32::from(f)),
                    (false, true) => serde_json::json!("x"),
                    (false, false) => serde_json::json!(""),
                };
                (n.clone(), v)
            })
            .collect();
        serde_json::Value::Object(m)
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
    let unsupported = |raw: String, why: &str| TemplateError::Unsupported {
        loop_name: loop_name.to_string(),
        raw,
        why: why.to_string(),
    };
    match el {
        TemplateElement::Expression(h) | TemplateElement::HtmlExpression(h) => {
            let is_helper_call = !h.params.is_empty() || !h.hash.is_empty();
            match &h.name {
                Parameter::Name(n) if is_helper_call || HELPERS.contains(&n.as_str()) => {
                    if !HELPERS.contains(&n.as_str()) || BLOCKS.contains(&n.as_str()) {
                        return Err(unsupported(n.clone(), "not a helper loop templates have"));
                    }
                }
                Parameter::Name(n) => {
                    out.insert(n.clone());
                }
                other => param(other, out, loop_name)?,
            }
            for p in h.params.iter().chain(h.hash.values()) {
                param(p, out, loop_name)?;
            }
        }
        TemplateElement::HelperBlock(h) => {
            match &h.name {
                Parameter::Name(n) if BLOCKS.contains(&n.as_str()) && h.block_param.is_none() => {}
                Parameter::Name(n) => {
                    return Err(unsupported(
                        format!("#{n}"),
                        "only {{#if}} and {{#unless}} blocks work on plain values",
                    ));
                }
                _ => return Err(unsupported("#…".into(), "not a block helper")),
            }
            for p in h.params.iter().chain(h.hash.values()) {
                param(p, out, loop_name)?;
            }
            for t in [&h.template, &h.inverse].into_iter().flatten() {
                collect(t, out, loop_name)?;
            }
        }
        TemplateElement::PartialExpression(_) | TemplateElement::PartialBlock(_) => {
            return Err(TemplateError::Partial {
                loop_name: loop_name.to_string(),
            });
        }
        TemplateElement::DecoratorExpression(_) | TemplateElement::DecoratorBlock(_) => {
            return Err(unsupported("*…".into(), "decorators are not supported"));
        }
        TemplateElement::RawString(_) | TemplateElement::Comment(_) => {}
        _ => return Err(unsupported("…".into(), "not supported in loop templates")),
    }
    Ok(())
}

/// A parameter: a literal, a subexpression, or one plain variable name — no `a.b`, `a/b`,
/// `../x`, `this` or `@index`, which only mean something for objects and lists.
fn param(p: &Parameter, out: &mut BTreeSet<String>, loop_name: &str) -> Result<(), TemplateError> {
    let bad = |raw: &str, why: &str| TemplateError::Unsupported {
        loop_name: loop_name.to_string(),
        raw: raw.to_string(),
        why: why.to_string(),
    };
    match p {
        Parameter::Path(Path::Relative((segs, raw))) => match segs.as_slice() {
            [PathSeg::Named(n)] if n != "this" => {
                out.insert(n.clone());
            }
            _ => {
                return Err(bad(
                    raw,
                    "variables are plain values, so a path into one (`.`, `/`, `../`, `this`) has nothing to reach",
                ));
            }
        },
        Parameter::Path(Path::Local((_, _, raw))) => {
            return Err(bad(
                raw,
                "`@` names exist only inside `each`, which loop templates do not have",
            ));
        }
        Parameter::Name(n) => {
            out.insert(n.clone());
        }
        Parameter::Subexpression(sub) => collect_element(&sub.element, out, loop_name)?,
        Parameter::Literal(_) => {}
        _ => return Err(bad("…", "not supported in loop templates")),
    }
    Ok(())
}

/// One linear pass before the parser sees the text: the size, and how deep `{{#…}}` blocks
/// and `(…)` subexpressions nest (the parser and renderer recurse, so 6,000 levels would
/// overflow the stack, and deep nesting makes parsing quadratic).
fn check_shape(source: &str) -> Result<(), String> {
    if source.len() > MAX_TEMPLATE_BYTES {
        return Err(format!("{} bytes", source.len()));
    }
    let b = source.as_bytes();
    let (mut i, mut depth, mut tags) = (0usize, 0usize, 0usize);
    while let Some(off) = find(&b[i..], b"{{") {
        tags += 1;
        if tags > MAX_TAGS {
            return Err(format!("more than {MAX_TAGS} tags"));
        }
        let open = i + off;
        let body_start = open + b[open..].iter().take_while(|&&c| c == b'{').count();
        let is_comment = b[body_start..].starts_with(b"!--");
        let close = if is_comment {
            b"--}}".as_slice()
        } else {
            b"}}".as_slice()
        };
        let Some(len) = find(&b[body_start..], close) else {
            return Ok(()); // unclosed: the parser reports it
        };
        let body = &b[body_start..body_start + len];
        let trimmed: &[u8] = body.strip_prefix(b"~").unwrap_or(body);
        match trimmed.first() {
            Some(b'#') => depth += 1,
            Some(b'/') => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth > MAX_NESTING {
            return Err(format!("blocks nest deeper than {MAX_NESTING} levels"));
        }
        let (mut parens, mut max) = (0usize, 0usize);
        for &c in body {
            match c {
                b'(' => {
                    parens += 1;
                    max = max.max(parens);
                }
                b')' => parens = parens.saturating_sub(1),
                _ => {}
            }
        }
        if !is_comment && max > MAX_NESTING {
            return Err(format!(
                "subexpressions nest deeper than {MAX_NESTING} levels"
            ));
        }
        i = body_start + len + close.len();
    }
    Ok(())
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
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
    fn paths_into_values_fail_at_load() {
        for src in [
            "{{iteration.a.b.c}}",
            "{{../../x}}",
            "{{this}}",
            "{{@index}}",
            "{{#if iteration.a}}x{{/if}}",
            "{{#each progress}}{{this}}{{/each}}",
            "{{#with progress}}{{x}}{{/with}}",
            "{{lookup progress \"a\"}}",
            "{{nohelper progress}}",
            "{{#if}}x{{/if}}",
            "{{eq}}",
            "{{*inline}}",
        ] {
            let e = PromptTemplate::compile("t", src).unwrap_err();
            assert!(
                !matches!(e, TemplateError::Render { .. }) || e.to_string().contains("rendering"),
                "{src}: {e}"
            );
        }
        let e = PromptTemplate::compile("t", "{{iteration.a.b.c}}").unwrap_err();
        assert!(
            e.to_string().contains("iteration.a.b.c") && e.to_string().contains("plain values"),
            "{e}"
        );
        PromptTemplate::compile(
            "t",
            "{{#if (eq iteration 1)}}first{{else}}{{progress}}{{/if}}",
        )
        .unwrap();
    }

    #[test]
    fn deep_nesting_is_refused_quickly() {
        let deep = |n: usize| format!("{}x{}", "{{#if progress}}".repeat(n), "{{/if}}".repeat(n));
        PromptTemplate::compile("t", &deep(MAX_NESTING)).unwrap();
        for n in [MAX_NESTING + 1, 6_000, 20_000] {
            let e = PromptTemplate::compile("t", &deep(n)).unwrap_err();
            assert!(matches!(e, TemplateError::TooComplex { .. }), "{e}");
        }
        let parens = format!(
            "{{{{not {}progress{}}}}}",
            "(not ".repeat(10_000),
            ")".repeat(10_000)
        );
        assert!(matches!(
            PromptTemplate::compile("t", &parens),
            Err(TemplateError::TooComplex { .. })
        ));
        // Many blocks side by side: up to the tag limit they load, beyond it are refused
        // before the (quadratic) parser runs.
        PromptTemplate::compile("t", &"{{#if progress}}x{{/if}}".repeat(MAX_TAGS / 2)).unwrap();
        let e = PromptTemplate::compile("t", &"{{#if progress}}x{{/if}}".repeat(20_000));
        assert!(matches!(e, Err(TemplateError::TooComplex { .. })));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]
        /// Any text, and text made of template pieces, compiles or fails with an error.
        #[test]
        fn never_panics(s in "\\PC{0,120}", pieces in proptest::collection::vec(proptest::sample::select(vec![
            "{{", "}}", "{{#if ", "{{/if}}", "{{else}}", "progress", "iteration", "(", ")",
            "{{#each ", "{{/each}}", "../", ".", "@index", "\"s\"", " ", "{{!-- ", " --}}", "~", "x",
            "{{{", "}}}", "{{>", "eq ", "1",
        ]), 0..40)) {
            let _ = PromptTemplate::compile("t", &s);
            if let Ok(t) = PromptTemplate::compile("t", &pieces.concat()) {
                let _ = t.render(&t.sample(true));
            }
        }
    }

    #[test]
    fn syntax_error_is_reported() {
        let e = PromptTemplate::compile("t", "{{#if x}}").unwrap_err();
        assert!(matches!(e, TemplateError::Syntax { .. }), "{e}");
    }
}
