//! Is there an init for podman's `--init`? The container sandbox starts every container
//! with `--init` (so the agent's processes are reaped and ended with it); podman answers
//! `podman info` without one, then fails each `run` (exit 125/127, which a run reports as
//! the agent not starting, exit 64 with a hint). So `doctor` looks where podman looks:
//! the `init_path` and `helper_binaries_dir` of its `containers.conf` files (drop-ins
//! included), its default helper directories and the one beside the `podman` binary, then
//! `PATH`. Found anywhere is enough, and a miss is only a warning: the files are read by
//! line, not as TOML, and a remote engine (`CONTAINER_HOST`, `CONTAINER_CONNECTION`) has
//! its init on another machine, so it is not looked for.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::agent::is_executable;

/// The init podman runs for `--init` unless `init_path` says another.
pub const INIT_NAME: &str = "catatonit";

/// Where to look (the machine's places, or a test's).
#[derive(Debug, Clone, Default)]
pub struct InitSearch {
    /// `containers.conf` files and drop-ins; a missing one is skipped.
    pub conf_files: Vec<PathBuf>,
    /// podman's default helper-binary directories.
    pub helper_dirs: Vec<PathBuf>,
    /// The `PATH` to search last.
    pub path: Option<OsString>,
    /// The engine is on another machine: nothing to look for here.
    pub remote: bool,
}

/// The system and user `containers.conf` and their drop-in directories, or
/// `CONTAINERS_CONF` alone; `CONTAINERS_CONF_OVERRIDE` last.
fn conf_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    match std::env::var_os("CONTAINERS_CONF") {
        Some(f) => files.push(PathBuf::from(f)),
        None => {
            let user = std::env::var_os("XDG_CONFIG_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".config")))
                .map(|c| c.join("containers"));
            let dirs = [
                PathBuf::from("/usr/share/containers"),
                PathBuf::from("/etc/containers"),
            ];
            for dir in dirs.iter().chain(user.iter()) {
                files.push(dir.join("containers.conf"));
                let mut drop_ins: Vec<PathBuf> = std::fs::read_dir(dir.join("containers.conf.d"))
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "conf"))
                    .collect();
                drop_ins.sort();
                files.extend(drop_ins);
            }
        }
    }
    files.extend(std::env::var_os("CONTAINERS_CONF_OVERRIDE").map(PathBuf::from));
    files
}

impl InitSearch {
    /// Podman's places on this machine (`podman`: the binary found on `PATH`).
    pub fn here(podman: Option<&Path>) -> InitSearch {
        let beside = podman
            .and_then(|p| std::fs::canonicalize(p).ok())
            .and_then(|p| p.parent().and_then(Path::parent).map(Path::to_path_buf))
            .map(|p| p.join("libexec/podman"));
        let defaults = [
            "/usr/local/libexec/podman",
            "/usr/local/lib/podman",
            "/usr/libexec/podman",
            "/usr/lib/podman",
        ];
        InitSearch {
            conf_files: conf_files(),
            helper_dirs: beside
                .into_iter()
                .chain(defaults.map(PathBuf::from))
                .collect(),
            path: std::env::var_os("PATH"),
            remote: ["CONTAINER_HOST", "CONTAINER_CONNECTION"]
                .iter()
                .any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty())),
        }
    }

    /// The init podman would likely run, or what was looked at in vain.
    pub fn find(&self) -> Result<Option<PathBuf>, String> {
        if self.remote {
            return Ok(None);
        }
        let confs: Vec<(&PathBuf, String)> = self
            .conf_files
            .iter()
            .filter_map(|f| std::fs::read_to_string(f).ok().map(|t| (f, t)))
            .collect();
        let named: Vec<(&PathBuf, PathBuf)> = confs
            .iter()
            .filter_map(|(f, text)| Some((*f, quoted(value_of(text, "init_path")?).next()?)))
            .collect();
        if let Some((_, p)) = named.iter().rev().find(|(_, p)| is_executable(p)) {
            return Ok(Some(p.clone()));
        }
        let configured = confs
            .iter()
            .filter_map(|(_, text)| value_of(text, "helper_binaries_dir"))
            .flat_map(quoted);
        let on_path = self
            .path
            .as_deref()
            .map(|p| std::env::split_paths(p).collect::<Vec<_>>())
            .unwrap_or_default();
        let dirs: Vec<PathBuf> = configured
            .chain(self.helper_dirs.iter().cloned())
            .chain(on_path)
            .collect();
        if let Some(p) = dirs
            .iter()
            .map(|d| d.join(INIT_NAME))
            .find(|p| is_executable(p))
        {
            return Ok(Some(p));
        }
        Err(match named.last() {
            Some((file, p)) => format!(
                "`init_path = \"{}\"` in {} is not an executable file, and no `{INIT_NAME}` is in podman's helper directories or on PATH: podman's `--init` will likely fail; fix `init_path` there",
                p.display(),
                file.display()
            ),
            None => format!(
                "no `{INIT_NAME}` in podman's helper directories (/usr/libexec/podman, …) or on PATH: podman's `--init` will likely fail; install it (`sudo apt-get install catatonit`, `sudo dnf install catatonit`) or name an init as `init_path` in containers.conf"
            ),
        })
    }
}

/// The text after `key =` on an uncommented line (up to the end of the file for a
/// value that continues, such as a list over several lines), the last such line.
fn value_of<'a>(conf: &'a str, key: &str) -> Option<&'a str> {
    let mut found = None;
    let mut at = 0;
    for line in conf.split_inclusive('\n') {
        if let Some((k, _)) = line.trim_start().split_once('=')
            && k.trim().trim_matches('"') == key
            && !line.trim_start().starts_with('#')
        {
            let eq = line.find('=').map_or(0, |i| i + 1);
            found = Some(&conf[at + eq..]);
        }
        at += line.len();
    }
    found
}

/// The quoted strings at the start of `value`: one for a string, each of a `[…]` list.
fn quoted(value: &str) -> impl Iterator<Item = PathBuf> + '_ {
    let v = value.trim_start();
    let end = if v.starts_with('[') {
        v.find(']').unwrap_or(v.len())
    } else {
        v.find('\n').unwrap_or(v.len())
    };
    let span = &v[..end];
    let parts: Vec<&str> = span.split(['"', '\'']).collect();
    // Between quotes: the odd pieces, before any comment outside them.
    let cut = parts
        .iter()
        .step_by(2)
        .position(|outside| outside.contains('#'))
        .map_or(parts.len(), |i| 2 * i + 1);
    parts
        .into_iter()
        .take(cut)
        .skip(1)
        .step_by(2)
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .collect::<Vec<_>>()
        .into_iter()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn program(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn search(d: &Path) -> InitSearch {
        InitSearch {
            conf_files: vec![d.join("missing.conf")],
            helper_dirs: vec![d.join("libexec/podman")],
            path: Some(d.join("bin").into_os_string()),
            remote: false,
        }
    }

    #[test]
    fn found_in_a_helper_directory_or_on_path_and_missing_anywhere_else() {
        let d = tempfile::tempdir().unwrap();
        let mut s = search(d.path());
        let e = s.find().unwrap_err();
        assert!(
            e.contains("no `catatonit`") && e.contains("apt-get install"),
            "{e}"
        );
        program(&d.path().join("bin").join(INIT_NAME));
        assert_eq!(s.find().unwrap(), Some(d.path().join("bin/catatonit")));
        program(&d.path().join("libexec/podman").join(INIT_NAME));
        assert_eq!(
            s.find().unwrap(),
            Some(d.path().join("libexec/podman/catatonit"))
        );
        // Not executable: not an init.
        let plain = d.path().join("plain");
        std::fs::create_dir_all(&plain).unwrap();
        std::fs::write(plain.join(INIT_NAME), "").unwrap();
        s.helper_dirs = vec![plain];
        s.path = None;
        assert!(s.find().is_err());
        // A remote engine's init is not here to find.
        s.remote = true;
        assert_eq!(s.find().unwrap(), None);
    }

    #[test]
    fn init_path_and_helper_binaries_dir_of_containers_conf_are_read() {
        let d = tempfile::tempdir().unwrap();
        let conf = d.path().join("containers.conf");
        let tini = d.path().join("tini");
        std::fs::write(
            &conf,
            format!(
                "[containers]\n# init_path = \"/nowhere\"\ninit_path = \"{}\"  # ours\n",
                tini.display()
            ),
        )
        .unwrap();
        let mut s = search(d.path());
        s.conf_files = vec![conf.clone()];
        let e = s.find().unwrap_err();
        assert!(
            e.contains(&tini.display().to_string()) && e.contains(&conf.display().to_string()),
            "{e}"
        );
        program(&tini);
        assert_eq!(s.find().unwrap(), Some(tini));

        let helpers = d.path().join("helpers");
        std::fs::write(
            &conf,
            format!(
                "[engine]\nhelper_binaries_dir = [\n  \"/nowhere\",\n  \"{}\", # ours\n]\n",
                helpers.display()
            ),
        )
        .unwrap();
        assert!(s.find().is_err());
        program(&helpers.join(INIT_NAME));
        assert_eq!(s.find().unwrap(), Some(helpers.join(INIT_NAME)));
    }

    #[test]
    fn values_are_read_as_podman_writes_them() {
        let one = |t: &str, k: &str| -> Vec<PathBuf> {
            value_of(t, k)
                .map(|v| quoted(v).collect())
                .unwrap_or_default()
        };
        assert!(one("#init_path = \"/x\"\n", "init_path").is_empty());
        assert!(one("init_path=''\n", "init_path").is_empty());
        assert_eq!(
            one("init_path = '/a'\ninit_path = \"/b\"\n", "init_path"),
            [PathBuf::from("/b")]
        );
        assert!(one("init_path_x = \"/c\"\n", "init_path").is_empty());
        assert_eq!(
            one("init_path = \"/d\" # \"/e\"\n", "init_path"),
            [PathBuf::from("/d")]
        );
        assert_eq!(
            one(
                "helper_binaries_dir = [\"/f\", '/g']\nx = \"/h\"\n",
                "helper_binaries_dir"
            ),
            [PathBuf::from("/f"), PathBuf::from("/g")]
        );
    }
}
