//! The keys of a repository's own config that wait for the user's trust (`super::trust`):
//! every key that runs a command, names a destination or widens access. While the file is
//! untrusted they are left out, and the loader says which; the data keys (limits, loop
//! settings, prices) apply either way.

use std::fmt;
use std::path::PathBuf;

use super::Settings;
use crate::agent::AgentSpec;
use crate::notify::Target;

/// What the loader left out of a repository's config because the user has not trusted
/// it (as it is now).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Untrusted {
    /// The repository's `.taskdaemon/config.yaml`.
    pub path: PathBuf,
    /// The keys left out (the ones the file sets, in a fixed order): `agent`,
    /// `api.openai.base-url`, `notify.webhook`, …
    pub ignored: Vec<&'static str>,
}

impl fmt::Display for Untrusted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys: Vec<String> = self.ignored.iter().map(|k| format!("`{k}`")).collect();
        write!(
            f,
            "ignoring {} from {}: this repository's config is not trusted (it came with the repository, and these keys run commands, name destinations or widen the sandbox)\n  hint: read the file; to apply it as it is now, `taskdaemon trust {}` (a changed file needs trusting again)",
            keys.join(", "),
            self.path.display(),
            self.path.display()
        )
    }
}

/// `s` without the keys that wait for trust, and those keys (the ones it set).
pub(crate) fn split(mut s: Settings) -> (Settings, Vec<&'static str>) {
    let mut out = Vec::new();
    if s.agent.as_deref().is_some_and(names_a_command) {
        take(&mut s.agent, "agent", &mut out);
    }
    take(&mut s.validate, "validate", &mut out);
    // Which exit code of the validation means done: the user's own validation read
    // backwards is no evidence.
    take(&mut s.success_exit_code, "success-exit-code", &mut out);
    if s.parse_agent.as_deref().is_some_and(names_a_command) {
        take(&mut s.parse_agent, "parse-agent", &mut out);
    }
    take(&mut s.worktrees_dir, "worktrees-dir", &mut out);
    take(&mut s.sandbox, "sandbox", &mut out);
    take(&mut s.sandbox_validate, "sandbox-validate", &mut out);
    take(&mut s.sandbox_rw, "sandbox-rw", &mut out);
    take(&mut s.sandbox_ro_hide, "sandbox-ro-hide", &mut out);
    take(&mut s.sandbox_network, "sandbox-network", &mut out);
    take(&mut s.sandbox_image, "sandbox-image", &mut out);
    split_api(&mut s, &mut out);
    split_notify(&mut s, &mut out);
    take(&mut s.queue, "queue", &mut out);
    take(&mut s.queue_project, "queue-project", &mut out);
    take(&mut s.queue_remote, "queue-remote", &mut out);
    (s, out)
}

fn take<T>(slot: &mut Option<T>, key: &'static str, out: &mut Vec<&'static str>) {
    if slot.take().is_some() {
        out.push(key);
    }
}

/// A `cmd:` or `script:` agent runs what the file says; a preset (`claude`) or an API
/// agent runs the user's own program or endpoint, and a value that is no agent at all is
/// kept so that it is refused as such.
fn names_a_command(agent: &str) -> bool {
    matches!(
        AgentSpec::parse(agent),
        Ok(AgentSpec::Cmd { .. } | AgentSpec::Script { .. })
    )
}

/// The endpoints (where the key goes) and the key's variable (which secret is sent).
fn split_api(s: &mut Settings, out: &mut Vec<&'static str>) {
    let Some(api) = s.api.as_mut() else {
        return;
    };
    if let Some(p) = api.anthropic.as_mut() {
        take(&mut p.base_url, "api.anthropic.base-url", out);
        take(&mut p.api_key_env, "api.anthropic.api-key-env", out);
    }
    if let Some(p) = api.openai.as_mut() {
        take(&mut p.base_url, "api.openai.base-url", out);
        take(&mut p.api_key_env, "api.openai.api-key-env", out);
    }
}

/// Command hooks run, webhooks receive every notice (the repository, the task, the
/// agent's words); desktop notifications stay on this machine and are kept.
fn split_notify(s: &mut Settings, out: &mut Vec<&'static str>) {
    let Some(sinks) = s.notify.as_mut() else {
        return;
    };
    if sinks.iter().any(|x| matches!(x.target, Target::Command(_))) {
        out.push("notify.command");
    }
    if sinks.iter().any(|x| matches!(x.target, Target::Webhook(_))) {
        out.push("notify.webhook");
    }
    sinks.retain(|x| matches!(x.target, Target::Desktop));
    if sinks.is_empty() {
        s.notify = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn parse(text: &str) -> Settings {
        crate::yaml::parse::<Settings>(Path::new("c.yaml"), text)
            .unwrap()
            .unwrap()
    }

    #[test]
    fn every_key_that_runs_names_or_widens_is_left_out_and_named() {
        let s = parse(
            "agent: cmd:curl x | sh\nvalidate: make\nsuccess-exit-code: 1\nparse-agent: script:p.yaml\nworktrees-dir: wt\n\
             sandbox: none\nsandbox-validate: none\nsandbox-rw: [/srv]\nsandbox-ro-hide: [~/x]\n\
             sandbox-network: shared\nsandbox-image: evil/image\nqueue: postgres://h/db\n\
             queue-project: p\nqueue-remote: up\nmax-iterations: 7\nmax-stuck: 2\n\
             api:\n  max-turns: 9\n  openai: {base-url: 'http://h/v1', api-key-env: SECRET, max-tokens: 5}\n  \
             anthropic: {base-url: 'http://h', api-key-env: OTHER}\n\
             notify:\n  - webhook: http://h/hook\n  - command: touch x\n  - desktop: true\n",
        );
        let (kept, ignored) = split(s);
        assert_eq!(
            ignored,
            [
                "agent",
                "validate",
                "success-exit-code",
                "parse-agent",
                "worktrees-dir",
                "sandbox",
                "sandbox-validate",
                "sandbox-rw",
                "sandbox-ro-hide",
                "sandbox-network",
                "sandbox-image",
                "api.anthropic.base-url",
                "api.anthropic.api-key-env",
                "api.openai.base-url",
                "api.openai.api-key-env",
                "notify.command",
                "notify.webhook",
                "queue",
                "queue-project",
                "queue-remote",
            ]
        );
        // The data keys apply.
        assert_eq!(kept.max_iterations, Some(7));
        assert_eq!(kept.max_stuck, Some(2));
        let api = kept.api.unwrap();
        assert_eq!(api.max_turns, Some(9));
        assert_eq!(api.openai.as_ref().unwrap().max_tokens, Some(5));
        assert_eq!(api.openai.unwrap().base_url, None);
        let sinks = kept.notify.unwrap();
        assert_eq!(sinks.len(), 1);
        assert_eq!(sinks[0].target, Target::Desktop);
        assert_eq!(kept.agent, None);
        assert_eq!(kept.sandbox_rw, None);
    }

    #[test]
    fn a_preset_or_api_agent_is_kept() {
        for agent in ["claude", "codex", "api:openai:gpt-4o", "no-such-agent"] {
            let (kept, ignored) = split(parse(&format!(
                "agent: \"{agent}\"\nparse-agent: \"{agent}\"\n"
            )));
            assert!(ignored.is_empty(), "{agent}: {ignored:?}");
            assert_eq!(kept.agent.as_deref(), Some(agent));
        }
        let (_, ignored) = split(parse("max-iterations: 3\n"));
        assert!(ignored.is_empty());
    }

    #[test]
    fn the_warning_names_the_keys_the_file_and_the_command() {
        let u = Untrusted {
            path: PathBuf::from("/r/.taskdaemon/config.yaml"),
            ignored: vec!["agent", "notify.webhook"],
        };
        let text = u.to_string();
        assert!(text.contains("`agent`, `notify.webhook`"), "{text}");
        assert!(
            text.contains("taskdaemon trust /r/.taskdaemon/config.yaml"),
            "{text}"
        );
    }
}
