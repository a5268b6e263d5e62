//! Files that look like secrets, and the commits that add one (issue 37 item 10).
//!
//! A path looks like a secret when its file name (the last component; case ignored) is:
//!
//! | name | what it usually is |
//! |---|---|
//! | `.env`, `.env.*` (not `.env.example`, `.env.sample`, `.env.template`, `.env.dist`) | environment files with keys |
//! | `*.pem`, `*.key`, `*.p12`, `*.pfx` | private keys and certificates with their keys |
//! | `id_rsa`, `id_dsa`, `id_ecdsa`, `id_ed25519` (`_sk` too), and those names with a suffix such as `id_rsa_work` (not `*.pub`) | SSH private keys |
//! | `credentials`, `credentials.json`, `credentials.yml`, `credentials.yaml`, `credentials.toml` | cloud CLI credentials (`~/.aws/credentials`, Google's `credentials.json`) |
//! | `.netrc`, `_netrc`, `.git-credentials`, `.pgpass`, `.pypirc` | passwords for hosts, databases, package indexes |
//!
//! `.env.example` and its kin are templates committed on purpose; `.npmrc` is left out (it
//! usually holds registry settings; a token in it is the user's to keep out).
//!
//! What the harness does with them: its own commits never take an untracked one (a
//! snapshot leaves it out, and a rollback never removes or overwrites one); an agent's commit
//! that adds one is rejected with the path named ([`added_in`]), its branch is not pushed
//! past the commit before it and not merged. A file the user already committed (tracked) is
//! the user's decision and is left as it is.

use crate::git::{Git, GitError};

/// Templates of `.env` files, committed on purpose.
const ENV_TEMPLATES: &[&str] = &["example", "sample", "template", "dist"];

/// Extensions of key files.
const KEY_EXTENSIONS: &[&str] = &["pem", "key", "p12", "pfx"];

/// SSH private keys: `id_<algorithm>`, maybe with a suffix (`id_rsa_work`), never `.pub`.
const SSH_KEYS: &[&str] = &["id_rsa", "id_dsa", "id_ecdsa", "id_ed25519"];

/// Credentials files by their whole name.
const CREDENTIAL_NAMES: &[&str] = &[
    "credentials",
    "credentials.json",
    "credentials.yml",
    "credentials.yaml",
    "credentials.toml",
    ".netrc",
    "_netrc",
    ".git-credentials",
    ".pgpass",
    ".pypirc",
];

/// Whether the file at `path` (relative, `/`-separated; only its name is looked at) looks
/// like a secret.
pub fn looks_secret(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path).to_ascii_lowercase();
    if name == ".env" {
        return true;
    }
    if let Some(rest) = name.strip_prefix(".env.") {
        return !rest.is_empty() && !ENV_TEMPLATES.contains(&rest);
    }
    if CREDENTIAL_NAMES.contains(&name.as_str()) {
        return true;
    }
    if let Some((stem, ext)) = name.rsplit_once('.')
        && !stem.is_empty()
        && KEY_EXTENSIONS.contains(&ext)
    {
        return true;
    }
    SSH_KEYS.iter().any(|k| {
        name.strip_prefix(k).is_some_and(|rest| {
            let rest = rest.strip_prefix("_sk").unwrap_or(rest);
            rest.is_empty() || (rest.starts_with(['_', '-']) && !rest.contains('.'))
        })
    })
}

/// [`looks_secret`] of a path as git gives it (bytes; a name that is not UTF-8 is judged
/// by its lossy text).
pub fn looks_secret_bytes(path: &[u8]) -> bool {
    looks_secret(&String::from_utf8_lossy(path))
}

/// A commit that adds a file that looks like a secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Added {
    pub commit: String,
    pub path: String,
}

/// The files that look like secrets added by the commits `revs` selects (a `git log`
/// range: `A..B`, or `B --not …`), oldest first; merge commits are not looked into (the
/// commits they bring are in the range themselves). A rename to such a name is an add.
pub fn added_in(git: &Git, revs: &[&str]) -> Result<Vec<Added>, GitError> {
    let mut args = vec![
        "log",
        "--reverse",
        "--no-renames",
        "--diff-filter=A",
        "--name-only",
        "-z",
        "--format=%x01%H",
    ];
    args.extend_from_slice(revs);
    let out = git.call(&args).bytes()?;
    Ok(parse_log(&out))
}

/// `git log -z --name-only --format=%x01%H`: `\x01HASH\0\npath\0path\0\x01HASH…`.
fn parse_log(out: &[u8]) -> Vec<Added> {
    let mut found = Vec::new();
    let mut commit = String::new();
    for token in out.split(|b| *b == 0) {
        if let Some(hash) = token.strip_prefix(b"\x01") {
            commit = String::from_utf8_lossy(hash).trim().to_string();
            continue;
        }
        let path = token.strip_prefix(b"\n").unwrap_or(token);
        if !path.is_empty() && looks_secret_bytes(path) {
            found.push(Added {
                commit: commit.clone(),
                path: String::from_utf8_lossy(path).into_owned(),
            });
        }
    }
    found
}

/// The paths of `added`, each once, in order.
pub fn paths(added: &[Added]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for a in added {
        if !out.contains(&a.path) {
            out.push(a.path.clone());
        }
    }
    out
}

/// What an agent whose commits add `paths` is told (the next prompt): which files, and how
/// to take them out of its commits while keeping them.
pub fn take_out(paths: &[String]) -> String {
    let first = paths.first().map(String::as_str).unwrap_or(".env");
    format!(
        "Your commits add files that look like secrets: {}. They must never be committed. Keep the files, but take them out of every commit of this run: `git rm --cached -- {first}` (each of them), add them to .gitignore, and rewrite the commits that added them (`git commit --amend`, or `git rebase -i` for older ones) so that no commit adds them. Until then the work is not accepted, and the branch is neither pushed nor merged.",
        list(paths)
    )
}

/// The paths, for a sentence: `a, b and 3 more`.
pub fn list(paths: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut text = paths
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if paths.len() > SHOWN {
        text.push_str(&format!(" and {} more", paths.len() - SHOWN));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_names_look_like_secrets() {
        for yes in [
            ".env",
            "app/.env",
            ".env.local",
            ".ENV.production",
            "server.pem",
            "certs/tls.key",
            "store.p12",
            "id_rsa",
            "keys/id_ed25519",
            "id_ecdsa_sk",
            "id_rsa_work",
            "credentials",
            ".aws/credentials",
            "credentials.json",
            ".netrc",
            ".git-credentials",
            ".pypirc",
            ".pgpass",
        ] {
            assert!(looks_secret(yes), "{yes}");
        }
    }

    #[test]
    fn templates_public_keys_and_look_alikes_do_not() {
        for no in [
            ".env.example",
            ".env.sample",
            "config/.env.template",
            ".env.dist",
            ".env.",
            "id_rsa.pub",
            "id_ed25519.pub",
            "id_generator.py",
            "identity.rs",
            "keyboard.rs",
            ".key",
            "monkey",
            "src/credentials.rs",
            "README.md",
            ".npmrc",
            "env",
            ".envrc",
        ] {
            assert!(!looks_secret(no), "{no}");
        }
    }

    #[test]
    fn the_log_is_read_commit_by_commit() {
        let out = b"\x01aaa\0\n.env\0b\0\x01bbb\0\nc\0id_rsa\0";
        assert_eq!(
            parse_log(out),
            vec![
                Added {
                    commit: "aaa".into(),
                    path: ".env".into()
                },
                Added {
                    commit: "bbb".into(),
                    path: "id_rsa".into()
                }
            ]
        );
        assert!(parse_log(b"").is_empty());
    }

    #[test]
    fn a_list_names_five_and_counts_the_rest() {
        let p: Vec<String> = (0..7).map(|i| format!("f{i}")).collect();
        assert_eq!(list(&p), "f0, f1, f2, f3, f4 and 2 more");
        assert_eq!(list(&p[..1]), "f0");
    }
}
