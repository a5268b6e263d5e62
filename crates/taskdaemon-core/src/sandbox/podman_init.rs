//! Is there an init for podman's `--init`? The container sandbox starts every container
//! with `--init` (so the agent's processes are reaped and ended with it), and podman
//! answers `podman info` without one, then fails each `run` (exit 125/127). So the
//! preflight looks where podman looks: the `init_path` of a `containers.conf`, its helper
//! directories (next to the `podman` binary, `/usr/libexec/podman`, …), then `PATH`.
//! Anywhere found is enough: a miss here is certain, a find only likely (the engine's
//! own answer at run time stays the last word, with its hint).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The init podman runs for `--init` unless `init_path` says another.
pub const INIT_NAME: &str = "catatonit";

/// Where to look (the machine's places, or a test's).
#[derive(Debug, Clone, Default)]
pub struct InitSearch {
    /// `containers.conf` files, in podman's order; a missing one is skipped.
    pub conf_files: Vec<PathBuf>,
    /// podman's helper-binary directories.
    pub helper_dirs: Vec<PathBuf>,
    /// The `PATH` to search last.
    pub path: Option<OsString>,
}

impl InitSearch {
    /// Podman's places on this machine: `CONTAINERS_CONF` (or the system and user
    /// `containers.conf`), the helper directories of containers/common's defaults and
    /// `../libexec/podman` beside the `podman` found, and `PATH`.
    pub fn here(podman: Option<&Path>) -> InitSearch {
        let conf_files = match std::env::var_os("CONTAINERS_CONF") {
            Some(f) => vec![PathBuf::from(f)],
            None => {
                let mut v = vec![
                    PathBuf::from("/usr/share/containers/containers.conf"),
                    PathBuf::from("/etc/containers/containers.conf"),
                ];
                let config = std::env::var_os("XDG_CONFIG_HOME")
                    .map(PathBuf::from)
                    .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".config")));
                v.extend(config.map(|c| c.join("containers/containers.conf")));
                v
            }
        };
        let beside = podman
            .and_then(Path::parent)
            .and_then(Path::parent)
            .map(|p| p.join("libexec/podman"));
        let helper_dirs = beside
            .into_iter()
            .chain(
                [
                    "/usr/local/libexec/podman",
                    "/usr/local/lib/podman",
                    "/usr/libexec/podman",
                    "/usr/lib/podman",
                ]
                .map(PathBuf::from),
            )
            .collect();
        InitSearch {
            conf_files,
            helper_dirs,
            path: std::env::var_os("PATH"),
        }
    }

    /// The init podman would run, or why none: the `init_path`s named that are missing,
    /// else that no `catatonit` is in the helper directories or on `PATH`.
    pub fn find(&self) -> Result<PathBuf, String> {
        let named: Vec<PathBuf> = self
            .conf_files
            .iter()
            .filter_map(|f| std::fs::read_to_string(f).ok().map(|t| (f, t)))
            .filter_map(|(_, text)| init_path_in(&text))
            .collect();
        if let Some(p) = named.iter().rev().find(|p| is_executable(p)) {
            return Ok(p.clone());
        }
        let on_path = self
            .path
            .as_deref()
            .map(|p| std::env::split_paths(p).collect::<Vec<_>>())
            .unwrap_or_default();
        if let Some(p) = self
            .helper_dirs
            .iter()
            .chain(on_path.iter())
            .map(|d| d.join(INIT_NAME))
            .find(|p| is_executable(p))
        {
            return Ok(p);
        }
        Err(match named.last() {
            Some(p) => format!(
                "the `init_path` {} of containers.conf is not an executable file, and no `{INIT_NAME}` is in podman's helper directories or on PATH",
                p.display()
            ),
            None => format!(
                "podman's `--init` needs `{INIT_NAME}`, and none is in podman's helper directories (/usr/libexec/podman, …) or on PATH"
            ),
        })
    }
}

/// The value of an uncommented `init_path = "…"` line (the last one), if any.
fn init_path_in(conf: &str) -> Option<PathBuf> {
    conf.lines()
        .filter_map(|l| {
            let (key, value) = l.trim().split_once('=')?;
            (key.trim() == "init_path").then(|| value.trim())
        })
        .filter_map(|v| {
            let v = v.split(" #").next().unwrap_or(v).trim();
            let unquoted = v
                .strip_prefix('"')
                .and_then(|s| s.strip_suffix('"'))
                .or_else(|| v.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')))?;
            (!unquoted.is_empty()).then(|| PathBuf::from(unquoted))
        })
        .next_back()
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
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

    #[test]
    fn found_in_a_helper_directory_or_on_path_and_missing_anywhere_else() {
        let d = tempfile::tempdir().unwrap();
        let helper = d.path().join("libexec/podman");
        let bin = d.path().join("bin");
        let mut s = InitSearch {
            conf_files: vec![d.path().join("missing.conf")],
            helper_dirs: vec![helper.clone()],
            path: Some(bin.clone().into_os_string()),
        };
        let e = s.find().unwrap_err();
        assert!(e.contains("needs `catatonit`"), "{e}");
        program(&bin.join(INIT_NAME));
        assert_eq!(s.find().unwrap(), bin.join(INIT_NAME));
        program(&helper.join(INIT_NAME));
        assert_eq!(s.find().unwrap(), helper.join(INIT_NAME));
        // Not executable: not an init.
        s.helper_dirs = vec![d.path().join("plain")];
        std::fs::create_dir_all(d.path().join("plain")).unwrap();
        std::fs::write(d.path().join("plain").join(INIT_NAME), "").unwrap();
        s.path = None;
        assert!(s.find().is_err());
    }

    #[test]
    fn an_init_path_of_containers_conf_is_used_and_named_when_missing() {
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
        let s = InitSearch {
            conf_files: vec![conf],
            helper_dirs: vec![],
            path: None,
        };
        let e = s.find().unwrap_err();
        assert!(e.contains(&tini.display().to_string()), "{e}");
        program(&tini);
        assert_eq!(s.find().unwrap(), tini);
    }

    #[test]
    fn init_path_lines_are_read_as_podman_writes_them() {
        assert_eq!(init_path_in("#init_path = \"/x\"\n"), None);
        assert_eq!(init_path_in("init_path=''\n"), None);
        assert_eq!(
            init_path_in("init_path = '/a'\ninit_path = \"/b\"\n"),
            Some(PathBuf::from("/b"))
        );
        assert_eq!(init_path_in("init_path_x = \"/c\"\n"), None);
    }
}
