//! Before iteration 1: can the agent start at all, and does the validation command's
//! program exist? A refusal here costs nothing; the same failure in the loop costs an
//! iteration (or, with `--validate true`, passed for a completion).

use std::path::{Path, PathBuf};

use super::presets::{Preset, find_on_path};
use super::spec::AgentSpec;

/// What the preflight found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// The agent cannot start: stop before iteration 1 (exit 64).
    AgentRefused { message: String, hint: String },
    /// The validation command's program does not exist (exit 64).
    ValidationMissing { program: String },
    /// Something that may be wrong.
    Warning(String),
}

/// Shell builtins and keywords a validation command may start with.
const BUILTINS: &[&str] = &[
    ":", ".", "[", "test", "true", "false", "echo", "printf", "cd", "exit", "export", "set", "if",
    "for", "while", "until", "case", "!", "{", "(", "exec", "command", "eval", "source", "type",
    "wait", "read", "unset", "shift", "trap", "ulimit", "umask",
];

/// Characters that make a command a shell expression rather than a program with words.
const SHELL_SYNTAX: &[char] = &[
    '|', '&', ';', '<', '>', '(', ')', '$', '`', '*', '?', '[', ']', '{', '}', '~', '\'', '"', '\\',
];

/// The checks, given whether this process runs as root and the environment's IS_SANDBOX.
pub fn preflight(
    agent: &AgentSpec,
    validate: Option<&str>,
    workdir: &Path,
    is_root: bool,
    is_sandbox: bool,
) -> Vec<Finding> {
    let mut found = Vec::new();
    match agent {
        AgentSpec::Preset {
            preset: Preset::Claude,
        } if is_root && !is_sandbox => found.push(Finding::AgentRefused {
            message: "Claude Code refuses --dangerously-skip-permissions as root/sudo".into(),
            hint: "run as a normal user, or set IS_SANDBOX=1 (exactly 1) when this is a container or VM".into(),
        }),
        AgentSpec::Cmd { command } => {
            if let Some(p) = missing_program(command, workdir) {
                found.push(Finding::AgentRefused {
                    message: format!("the agent command's program `{p}` does not exist"),
                    hint: "check cmd:COMMAND (it runs with sh -c), or install the program".into(),
                });
            }
        }
        _ => {}
    }
    if let Some(cmd) = validate
        && let Some(p) = missing_program(cmd, workdir)
    {
        if cmd.contains(SHELL_SYNTAX) {
            found.push(Finding::Warning(format!(
                "the validation command `{cmd}` starts with `{p}`, which is not on PATH; if it is not defined by the expression itself, every validation will fail"
            )));
        } else {
            found.push(Finding::ValidationMissing { program: p });
        }
    }
    found
}

/// [`preflight`] for this process: its effective user, and IS_SANDBOX as Claude Code itself
/// tests it (exactly "1", or its bubblewrap sandbox).
pub fn preflight_here(agent: &AgentSpec, validate: Option<&str>, workdir: &Path) -> Vec<Finding> {
    preflight(
        agent,
        validate,
        workdir,
        nix::unistd::geteuid().is_root(),
        std::env::var_os("IS_SANDBOX").is_some_and(|v| v == "1")
            || std::env::var_os("CLAUDE_CODE_BUBBLEWRAP").is_some_and(|v| !v.is_empty()),
    )
}

/// [`preflight_here`] for an agent confined by `sandbox`: a sandboxed agent runs in a
/// sandbox as Claude Code means it (`sandbox::wrap` sets IS_SANDBOX=1 inside).
pub fn preflight_sandboxed(
    agent: &AgentSpec,
    validate: Option<&str>,
    workdir: &Path,
    sandbox: &crate::sandbox::SandboxPlan,
) -> Vec<Finding> {
    if sandbox.kind == crate::sandbox::SandboxKind::None {
        return preflight_here(agent, validate, workdir);
    }
    let mut found = preflight(
        agent,
        validate,
        workdir,
        nix::unistd::geteuid().is_root(),
        true,
    );
    if let Some(program) = under_private_tmp(agent, workdir) {
        found.push(Finding::AgentRefused {
            message: format!(
                "the agent's program {program} lies under /tmp, which the sandbox replaces with an empty private /tmp, so it would not be found there"
            ),
            hint: "move the agent's program out of /tmp (e.g. into the repository or ~/bin), or run with --sandbox none".into(),
        });
    }
    found
}

/// A `cmd:`/`script:` agent whose program lies under `/tmp` (outside the work tree):
/// inside a sandbox `/tmp` is private, so that program would not exist there.
fn under_private_tmp(agent: &AgentSpec, workdir: &Path) -> Option<String> {
    let program = match agent {
        AgentSpec::Cmd { command } => {
            PathBuf::from(command.split_whitespace().next()?.trim_matches(['\'', '"']))
        }
        _ => return None,
    };
    let tmp = Path::new("/tmp");
    let inside_tree = workdir.starts_with(tmp) && program.starts_with(workdir);
    (program.is_absolute() && program.starts_with(tmp) && !inside_tree)
        .then(|| program.display().to_string())
}

/// The first word of a shell command when it names a program that does not exist.
fn missing_program(command: &str, workdir: &Path) -> Option<String> {
    let first = command
        .split_whitespace()
        .find(|w| !w.contains('=') || w.starts_with('='))?;
    let first = first.trim_matches(|c| c == '(' || c == '{');
    // A redirection or an operator glued to the word ends it (`cat>/dev/null;`).
    let first = first
        .split(['|', '&', ';', '<', '>'])
        .next()
        .unwrap_or_default();
    // What the shell rewrites before it runs anything (a variable, a command substitution,
    // `~` or `~user`, quotes) is the shell's to judge.
    let rewritten = first.starts_with('~') || first.contains(['$', '`', '"', '\'', '\\']);
    if first.is_empty() || BUILTINS.contains(&first) || rewritten {
        return None;
    }
    let exists = if first.contains('/') {
        workdir.join(first).exists()
    } else {
        find_on_path(first).is_some()
    };
    (!exists).then(|| first.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(agent: &str, validate: Option<&str>, root: bool, sandbox: bool) -> Vec<Finding> {
        let dir = std::env::temp_dir();
        preflight(
            &AgentSpec::parse(agent).unwrap(),
            validate,
            &dir,
            root,
            sandbox,
        )
    }

    #[test]
    fn an_operator_glued_to_the_program_is_not_part_of_its_name() {
        for cmd in [
            "cmd:cat>/dev/null; true",
            "cmd:true;true",
            "cmd:cat</dev/null|cat",
        ] {
            assert!(
                !check(cmd, None, false, false)
                    .iter()
                    .any(|f| matches!(f, Finding::AgentRefused { .. })),
                "{cmd}"
            );
        }
        assert!(matches!(
            check("cmd:/nonexistent/x>/dev/null", None, false, false)[..],
            [Finding::AgentRefused { .. }]
        ));
    }

    #[test]
    fn claude_as_root_needs_is_sandbox() {
        assert!(matches!(
            check("claude", None, true, false)[..],
            [Finding::AgentRefused { .. }]
        ));
        assert!(check("claude", None, true, true).is_empty());
        assert!(check("claude", None, false, false).is_empty());
    }

    #[test]
    fn validation_programs_are_found_or_refused_or_warned_about() {
        assert!(check("cmd:true", Some("sh -c 'exit 0'"), false, false).is_empty());
        assert!(check("cmd:true", Some("true"), false, false).is_empty());
        assert!(check("cmd:true", Some("FOO=1 test -f x"), false, false).is_empty());
        assert_eq!(
            check("cmd:true", Some("carg0 test"), false, false),
            vec![Finding::ValidationMissing {
                program: "carg0".into()
            }]
        );
        assert!(matches!(
            check("cmd:true", Some("carg0 test && echo ok"), false, false)[..],
            [Finding::Warning(_)]
        ));
        for shells in ["~/bin/agent", "~me/agent", "'my agent'", "\"$HOME/agent\""] {
            assert!(check(&format!("cmd:{shells} --go"), None, false, false).is_empty());
        }
        assert!(matches!(
            check("cmd:/nonexistent/agent --go", None, false, false)[..],
            [Finding::AgentRefused { .. }]
        ));
    }
}

#[cfg(test)]
mod private_tmp_tests {
    use super::*;

    #[test]
    fn a_sandboxed_agent_under_tmp_outside_the_tree_is_refused_with_a_hint() {
        let cmd = |c: &str| AgentSpec::Cmd {
            command: c.to_string(),
        };
        let tree = Path::new("/home/u/repo");
        assert!(under_private_tmp(&cmd("/tmp/agent.sh --fast"), tree).is_some());
        assert!(under_private_tmp(&cmd("'/tmp/x y/agent.sh'"), tree).is_some());
        assert!(under_private_tmp(&cmd("/home/u/bin/agent.sh"), tree).is_none());
        assert!(under_private_tmp(&cmd("agent.sh"), tree).is_none());
        // A work tree under /tmp is bound at its own path: its programs stay visible.
        let tmp_tree = Path::new("/tmp/w/repo");
        assert!(under_private_tmp(&cmd("/tmp/w/repo/agent.sh"), tmp_tree).is_none());
        assert!(under_private_tmp(&cmd("/tmp/w/agent.sh"), tmp_tree).is_some());
    }
}
