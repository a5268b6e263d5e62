//! What the benches share: numbers from the environment, a hermetic command (its own
//! HOME and git config, no TASKDAEMON_* from the caller), git in a directory.

use std::path::Path;
use std::process::Command;

pub fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub fn hermetic(c: &mut Command, home: &Path) {
    c.env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("GIT_CONFIG_GLOBAL", home.join(".gitconfig"))
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("LC_ALL", "C");
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("TASKDAEMON_") {
            c.env_remove(k);
        }
    }
}

pub fn git(repo: &Path, home: &Path, args: &[&str]) {
    let mut c = Command::new("git");
    hermetic(&mut c, home);
    let s = c.arg("-C").arg(repo).args(args).status().expect("git runs");
    assert!(s.success(), "git {args:?}");
}
