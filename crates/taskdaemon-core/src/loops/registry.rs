//! The loop-type registry: built-ins embedded in the binary, then the user's
//! `~/.config/taskdaemon/loops/*.yaml`, then the project's `.taskdaemon/loops/*.yaml`.
//! A later layer replaces an earlier definition of the same name. A project's definition
//! that would run a validation command of its own waits for the user's trust
//! (`super::project`).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use super::project::{self, UntrustedLoops};
use super::schema::LoopType;
use super::template::{PromptTemplate, TemplateError};
use crate::yaml::{self, YamlError};

/// Built-in loop types: (file name, YAML). Parts to come add plan, spec and phase here.
const BUILTIN: &[(&str, &str)] = &[
    ("ralph.yaml", include_str!("builtin/ralph.yaml")),
    ("plan.yaml", include_str!("builtin/plan.yaml")),
    ("spec.yaml", include_str!("builtin/spec.yaml")),
    ("phase.yaml", include_str!("builtin/phase.yaml")),
    // The work lists' agents (implement, qa, story-implement, story-review).
    ("implement.yaml", include_str!("builtin/implement.yaml")),
    ("stories.yaml", include_str!("builtin/stories.yaml")),
];

/// Where a loop type was defined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoopSource {
    Builtin,
    User(PathBuf),
    Project(PathBuf),
}

impl fmt::Display for LoopSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoopSource::Builtin => f.write_str("built-in"),
            LoopSource::User(p) => write!(f, "user: {}", p.display()),
            LoopSource::Project(p) => write!(f, "project: {}", p.display()),
        }
    }
}

#[derive(Debug, Clone)]
pub struct LoopEntry {
    pub name: String,
    pub def: LoopType,
    pub source: LoopSource,
    /// Earlier definitions this one replaced.
    pub overrides: Vec<LoopSource>,
}

#[derive(Debug, thiserror::Error)]
pub enum LoopError {
    #[error("{0}")]
    Yaml(YamlError),
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{file}: {source}")]
    Template { file: String, source: TemplateError },
    #[error("{file}: loop `{name}`: {message}")]
    Invalid {
        file: String,
        name: String,
        message: String,
    },
    #[error(
        "loop type `{name}` of {file} is not used: this repository's loop files are not trusted, and it sets a validation command of its own\n  hint: read the file; to use it as it is now, `taskdaemon trust {repo}`"
    )]
    Untrusted {
        name: String,
        file: PathBuf,
        repo: PathBuf,
    },
    #[error(
        "unknown loop type `{name}`{suggestion}\n  hint: `taskdaemon loops` lists the loop types: {known}"
    )]
    Unknown {
        name: String,
        suggestion: String,
        known: String,
    },
}

/// A name in the registry: a built-in, parsed the first time it is asked for (a run
/// uses one loop type; parsing all of them cost ~0.3 ms of every start), or a definition
/// from a file.
#[derive(Debug, Clone)]
enum Slot {
    /// Index into [`BUILTIN`].
    Builtin(usize),
    Loaded(Box<LoopEntry>),
}

#[derive(Debug, Clone, Default)]
pub struct Registry {
    entries: BTreeMap<String, Slot>,
    /// The project's definitions left out until the user trusts their files.
    untrusted: Vec<UntrustedLoops>,
}

/// The names a built-in file defines: its top-level keys, the lines that start in the
/// first column and end with `:` (a key with a value or a comment on its line would be
/// missed; `every_builtin_names_what_it_defines` holds them to the parse).
fn builtin_names(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .filter(|l| !l.starts_with([' ', '\t', '#']))
        .filter_map(|l| l.trim_end().strip_suffix(':'))
}

/// The entries of built-in file `i`, parsed once per process. Built-ins are tested to
/// parse; a failure here is a build defect and leaves the file's names unknown. Their
/// templates are not compiled here: `every_builtin_parses` compiles them all, and the
/// engine compiles the one used.
fn builtin_entries(i: usize) -> &'static BTreeMap<String, LoopEntry> {
    static PARSED: [std::sync::OnceLock<BTreeMap<String, LoopEntry>>; BUILTIN.len()] =
        [const { std::sync::OnceLock::new() }; BUILTIN.len()];
    PARSED[i].get_or_init(|| {
        let (file, text) = BUILTIN[i];
        let defs = parse_checked(Path::new(file), text, false).unwrap_or_default();
        defs.into_iter()
            .map(|(name, def)| {
                let e = LoopEntry {
                    name: name.clone(),
                    def,
                    source: LoopSource::Builtin,
                    overrides: Vec::new(),
                };
                (name, e)
            })
            .collect()
    })
}

impl Slot {
    fn entry<'a>(&'a self, name: &str) -> Option<&'a LoopEntry> {
        match self {
            Slot::Builtin(i) => builtin_entries(*i).get(name),
            Slot::Loaded(e) => Some(e),
        }
    }
}

impl Registry {
    /// Built-ins only.
    pub fn builtin() -> Registry {
        let mut r = Registry::default();
        for (i, (_, text)) in BUILTIN.iter().enumerate() {
            for name in builtin_names(text) {
                r.entries.insert(name.to_string(), Slot::Builtin(i));
            }
        }
        r
    }

    /// The loop types as `repo` sees them: built-ins, then the user's
    /// (`~/.config/taskdaemon/loops/`), then the repository's `.taskdaemon/loops/`, whose
    /// definitions that bring a validation command of their own (a new one, or a changed
    /// one or success code for a name defined before) apply only from files the user
    /// trusts ([`Registry::untrusted`] says which were left out).
    pub fn for_repo(repo: &Path) -> Result<Registry, LoopError> {
        let mut r = Registry::builtin();
        if let Some(dir) = crate::config::user_config_dir() {
            r.load_dir(&dir.join("loops"), LoopSource::User)?;
        }
        for file in project::files(repo)? {
            let defs = parse_file(&file.path, &file.text)?;
            let mut held = Vec::new();
            let mut trusted = None;
            for (name, def) in defs {
                if r.brings_a_command(&name, &def)
                    && !*trusted.get_or_insert_with(|| file.is_trusted(repo))
                {
                    held.push(name);
                    continue;
                }
                r.insert(name, def, LoopSource::Project(file.path.clone()));
            }
            if !held.is_empty() {
                r.untrusted.push(UntrustedLoops {
                    path: file.path,
                    repo: repo.to_path_buf(),
                    names: held,
                });
            }
        }
        Ok(r)
    }

    /// Built-ins, then `user_dir`, then `project_dir` (each a directory of `*.yaml`),
    /// every file applied whole: for tests and for files that are the user's own.
    #[cfg(test)]
    pub fn load(user_dir: Option<&Path>, project_dir: &Path) -> Result<Registry, LoopError> {
        let mut r = Registry::builtin();
        if let Some(dir) = user_dir {
            r.load_dir(dir, LoopSource::User)?;
        }
        r.load_dir(project_dir, LoopSource::Project)?;
        Ok(r)
    }

    /// The project's definitions left out because their files are not trusted.
    pub fn untrusted(&self) -> &[UntrustedLoops] {
        &self.untrusted
    }

    /// Whether `def` as `name` would run a command the earlier layers do not: a
    /// validation command (or its success code) other than the one `name` has now, or
    /// any validation command for a new name.
    fn brings_a_command(&self, name: &str, def: &LoopType) -> bool {
        match self.entries.get(name).and_then(|s| s.entry(name)) {
            Some(old) => {
                old.def.validation_command != def.validation_command
                    || old.def.success_exit_code != def.success_exit_code
            }
            None => !def.validation_command.trim().is_empty(),
        }
    }

    fn load_dir(&mut self, dir: &Path, source: fn(PathBuf) -> LoopSource) -> Result<(), LoopError> {
        for file in project::yaml_files(dir)? {
            for (name, def) in parse_file(&file.path, &file.text)? {
                self.insert(name, def, source(file.path.clone()));
            }
        }
        Ok(())
    }

    fn insert(&mut self, name: String, def: LoopType, source: LoopSource) {
        let overrides = match self.entries.remove(&name) {
            Some(Slot::Loaded(old)) => {
                let mut o = old.overrides;
                o.push(old.source);
                o
            }
            Some(Slot::Builtin(_)) => vec![LoopSource::Builtin],
            None => Vec::new(),
        };
        let entry = LoopEntry {
            name: name.clone(),
            def,
            source,
            overrides,
        };
        self.entries.insert(name, Slot::Loaded(Box::new(entry)));
    }

    pub fn get(&self, name: &str) -> Result<&LoopEntry, LoopError> {
        let held = || {
            self.untrusted
                .iter()
                .find(|u| u.names.iter().any(|n| n == name))
        };
        self.entries
            .get(name)
            .and_then(|s| s.entry(name))
            .ok_or_else(|| {
                if let Some(u) = held() {
                    return LoopError::Untrusted {
                        name: name.to_string(),
                        file: u.path.clone(),
                        repo: u.repo.clone(),
                    };
                }
                let names: Vec<&str> = self.entries().map(|e| e.name.as_str()).collect();
                LoopError::Unknown {
                    name: name.to_string(),
                    suggestion: yaml::nearest(name, &names)
                        .map(|s| format!(" (did you mean `{s}`?)"))
                        .unwrap_or_default(),
                    known: names.join(", "),
                }
            })
    }

    pub fn entries(&self) -> impl Iterator<Item = &LoopEntry> {
        self.entries.iter().filter_map(|(name, s)| s.entry(name))
    }
}

/// Parse one loop file: a map from loop name to definition, every template compiled.
pub fn parse_file(path: &Path, text: &str) -> Result<BTreeMap<String, LoopType>, LoopError> {
    parse_checked(path, text, true)
}

/// [`parse_file`]; the templates are compiled only with `compile`.
fn parse_checked(
    path: &Path,
    text: &str,
    compile: bool,
) -> Result<BTreeMap<String, LoopType>, LoopError> {
    let defs = yaml::parse::<BTreeMap<String, LoopType>>(path, text)
        .map_err(LoopError::Yaml)?
        .unwrap_or_default();
    let file = path.display().to_string();
    for (name, def) in &defs {
        let valid_name = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !valid_name {
            return Err(LoopError::Invalid {
                file,
                name: name.clone(),
                message: "a loop name uses letters, digits, `-` and `_` only".into(),
            });
        }
        if def.max_iterations == 0 {
            return Err(LoopError::Invalid {
                file,
                name: name.clone(),
                message: "field `max-iterations` must be at least 1".into(),
            });
        }
        if def
            .iteration_timeout_ms
            .is_some_and(|ms| u128::from(ms) > crate::duration::MAX_DURATION.as_millis())
        {
            return Err(LoopError::Invalid {
                file,
                name: name.clone(),
                message: "field `iteration-timeout-ms` is longer than a year (366d); write a shorter timeout".into(),
            });
        }
        if compile {
            PromptTemplate::compile(name, &def.prompt_template).map_err(|source| {
                LoopError::Template {
                    file: file.clone(),
                    source,
                }
            })?;
        }
    }
    Ok(defs)
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        /// Any text, and loop files with any values, load or fail with an error.
        #[test]
        fn loop_files_never_panic(text in "\\PC{0,200}", name in "[a-z-]{0,8}", n in proptest::num::u64::ANY, tpl in "[{}#/a-z. -]{0,40}") {
            let _ = parse_file(Path::new("l.yaml"), &text);
            let yaml = format!("{name}:\n  max-iterations: {n}\n  iteration-timeout-ms: {n}\n  prompt-template: \"{tpl}\"\n");
            let _ = parse_file(Path::new("l.yaml"), &yaml);
        }
    }

    #[test]
    fn every_builtin_parses() {
        for (file, text) in BUILTIN {
            let defs = parse_file(Path::new(file), text).unwrap_or_else(|e| panic!("{e}"));
            assert!(!defs.is_empty(), "{file}");
        }
    }

    #[test]
    fn every_builtin_names_what_it_defines() {
        for (i, (file, text)) in BUILTIN.iter().enumerate() {
            let scanned: Vec<&str> = builtin_names(text).collect();
            let parsed: Vec<&str> = builtin_entries(i).keys().map(String::as_str).collect();
            let mut sorted = scanned.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, parsed, "{file}");
        }
        // No name in two files, and every name reads as an entry.
        let listed: usize = BUILTIN.iter().map(|(_, t)| builtin_names(t).count()).sum();
        assert_eq!(Registry::builtin().entries().count(), listed);
    }

    #[test]
    fn builtin_ralph_is_lean_and_valid() {
        let r = Registry::builtin();
        let ralph = r.get("ralph").unwrap();
        assert_eq!(ralph.source, LoopSource::Builtin);
        assert!(
            ralph.def.prompt_template.len() <= 3 * 1024,
            "{}",
            ralph.def.prompt_template.len()
        );
        let t = PromptTemplate::compile("ralph", &ralph.def.prompt_template).unwrap();
        // The generic loop leaves git-status and git-diff to the agent: they cost time on large repositories.
        assert!(!t.uses("git-status") && !t.uses("git-diff"));
        assert!(t.uses("previous-errors") && t.uses("decision"));
    }

    #[test]
    fn project_overrides_user_overrides_builtin() {
        let d = tempfile::tempdir().unwrap();
        let user = d.path().join("user");
        let proj = d.path().join("proj");
        std::fs::create_dir_all(&user).unwrap();
        std::fs::create_dir_all(&proj).unwrap();
        let def = |t: &str| {
            format!(
                "ralph:\n  prompt-template: \"{t} {{{{task-description}}}}\"\n  validation-command: \"true\"\n  success-exit-code: 0\n  max-iterations: 3\n"
            )
        };
        std::fs::write(user.join("a.yaml"), def("user")).unwrap();
        std::fs::write(proj.join("b.yaml"), def("proj")).unwrap();
        let r = Registry::load(Some(&user), &proj).unwrap();
        let e = r.get("ralph").unwrap();
        assert!(matches!(e.source, LoopSource::Project(_)));
        assert_eq!(e.overrides.len(), 2);
        assert!(e.def.prompt_template.starts_with("proj"));
    }

    #[test]
    fn unknown_field_in_a_loop_file_names_file_line_and_suggestion() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("x.yaml"),
            "mine:\n  prompt-template: hi\n  validation-command: \"\"\n  success-exit-code: 0\n  max-iteration: 3\n",
        )
        .unwrap();
        let e = Registry::load(None, d.path()).unwrap_err().to_string();
        assert!(e.contains("x.yaml:5:3"), "{e}");
        assert!(e.contains("did you mean `max-iterations`"), "{e}");
    }

    #[test]
    fn a_definition_brings_a_command_when_its_validation_is_new_or_changed() {
        let r = Registry::builtin();
        let phase = r.get("phase").unwrap().def.clone();
        assert!(
            !r.brings_a_command("phase", &phase),
            "the same as the built-in"
        );
        let weakened = LoopType {
            validation_command: String::new(),
            ..phase.clone()
        };
        assert!(r.brings_a_command("phase", &weakened), "the check dropped");
        let turned = LoopType {
            success_exit_code: 1,
            ..phase.clone()
        };
        assert!(r.brings_a_command("phase", &turned), "read backwards");
        let prompt_only = LoopType {
            prompt_template: "other".into(),
            ..phase.clone()
        };
        assert!(!r.brings_a_command("phase", &prompt_only));
        assert!(
            r.brings_a_command("new", &phase),
            "a new one that runs a command"
        );
        assert!(
            !r.brings_a_command("new", &weakened),
            "a new one that runs none"
        );
    }

    #[test]
    fn unknown_loop_suggests() {
        let e = Registry::builtin().get("ralf").unwrap_err().to_string();
        assert!(e.contains("did you mean `ralph`"), "{e}");
    }
}
