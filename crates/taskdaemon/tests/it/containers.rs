//! `--sandbox podman` against the real runtime: a private configuration and store under
//! the test's directory (no image or container of the host's is seen or touched), an image
//! imported from a tar of busybox made here (no registry, no network), runc as the
//! runtime. A loop runs in the image, and a timed-out agent leaves no process and no
//! container behind.
//!
//! Without podman (and runc, catatonit, busybox) the test skips with a loud message, except
//! under CI (`CI=true`), where it fails: `.ci/run` installs them.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::harness::Env;
use crate::sandbox::{have, path_without, processes_with, sandbox_env};

const IMAGE: &str = "localhost/taskdaemon-test-busybox:1";

/// A podman whose configuration, store and run state all live in one directory.
struct Podman {
    dir: PathBuf,
}

impl Podman {
    /// Set up under `env`, or `None` (skipped loudly; a failure under CI) when the tools
    /// are missing.
    fn new(env: &Env, test: &str) -> Option<Podman> {
        let busybox = ["/bin/busybox", "/usr/bin/busybox"]
            .into_iter()
            .map(Path::new)
            .find(|p| p.is_file());
        // podman's `--init` (what `--sandbox podman` runs with) needs catatonit.
        let catatonit = have("catatonit")
            || ["/usr/libexec/podman/catatonit", "/usr/lib/podman/catatonit"]
                .iter()
                .any(|p| Path::new(p).is_file());
        let missing: Vec<&str> = ["podman", "runc"]
            .into_iter()
            .filter(|t| !have(t))
            .chain(busybox.is_none().then_some("busybox"))
            .chain((!catatonit).then_some("catatonit"))
            .collect();
        if !missing.is_empty() {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "{test}: {missing:?} missing under CI (.ci/run installs podman, runc, catatonit and busybox-static)"
            );
            eprintln!("\n*** SKIPPED {test}: {missing:?} not installed ***\n");
            return None;
        }
        let dir = env.root().join("podman");
        std::fs::create_dir_all(dir.join("tmp")).unwrap();
        let d = dir.display();
        std::fs::write(
            dir.join("storage.conf"),
            format!(
                "[storage]\ndriver = \"vfs\"\ngraphroot = \"{d}/graph\"\nrunroot = \"{d}/run\"\n"
            ),
        )
        .unwrap();
        // Limits no higher than this process's own (at most 4096): raising them needs a
        // privilege a CI container may not have, and runc refuses even an equal `nproc`.
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
        let hard = |name: &str| -> u64 {
            let line = limits.lines().find(|l| l.starts_with(name)).unwrap();
            let hard = line.split_whitespace().rev().nth(1).unwrap();
            hard.parse::<u64>().unwrap_or(u64::MAX).min(4096)
        };
        let (files, procs) = (hard("Max open files"), hard("Max processes"));
        std::fs::write(
            dir.join("containers.conf"),
            format!(
                "[containers]\ndefault_ulimits = [\"nofile={files}:{files}\", \"nproc={procs}:{procs}\"]\n\
                 [network]\nnetwork_config_dir = \"{d}/networks\"\n\
                 [engine]\nruntime = \"runc\"\ncgroup_manager = \"cgroupfs\"\nevents_logger = \"file\"\n\
                 tmp_dir = \"{d}/tmp\"\nlock_type = \"file\"\n"
            ),
        )
        .unwrap();
        let podman = Podman { dir };
        podman.import_busybox(busybox.unwrap());
        Some(podman)
    }

    /// The variables that point podman (the test's and taskdaemon's) at this directory.
    fn vars(&self) -> [(&'static str, PathBuf); 2] {
        [
            ("CONTAINERS_CONF", self.dir.join("containers.conf")),
            ("CONTAINERS_STORAGE_CONF", self.dir.join("storage.conf")),
        ]
    }

    /// A configuration beside the working one whose `--init` binary is missing: podman
    /// cannot start any container with it (exit 125, before the command runs).
    fn broken_conf(&self) -> PathBuf {
        let conf = std::fs::read_to_string(self.dir.join("containers.conf")).unwrap();
        let broken = self.dir.join("containers-broken.conf");
        let conf = conf.replacen(
            "[containers]\n",
            "[containers]\ninit_path = \"/nonexistent/catatonit\"\n",
            1,
        );
        std::fs::write(&broken, conf).unwrap();
        broken
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new("podman");
        c.envs(self.vars());
        c
    }

    /// `podman ARGS`, which must succeed: its standard output.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.cmd().args(args).output().unwrap();
        assert!(
            out.status.success(),
            "podman {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// An image of busybox and its applets in /bin, with an empty /tmp.
    fn import_busybox(&self, busybox: &Path) {
        let root = self.dir.join("rootfs");
        std::fs::create_dir_all(root.join("bin")).unwrap();
        std::fs::create_dir_all(root.join("tmp")).unwrap();
        std::fs::copy(busybox, root.join("bin/busybox")).unwrap();
        for applet in ["sh", "echo", "touch", "test", "sleep", "cat"] {
            std::os::unix::fs::symlink("busybox", root.join("bin").join(applet)).unwrap();
        }
        let tar = self.dir.join("rootfs.tar");
        let st = Command::new("tar")
            .arg("-C")
            .arg(&root)
            .arg("-cf")
            .arg(&tar)
            .arg(".")
            .status()
            .unwrap();
        assert!(st.success());
        self.ok(&["import", "-q", &tar.to_string_lossy(), IMAGE]);
    }
}

impl Drop for Podman {
    /// Whatever a failed assertion left: the containers of this store (they unmount what
    /// they mounted); the store itself is plain directories (vfs), removed with the test's.
    /// Never `system reset`: it also clears the host's network configuration.
    fn drop(&mut self) {
        let _ = self.cmd().args(["rm", "-af", "-t", "0"]).output();
    }
}

/// `taskdaemon run` in `env`'s repository under `podman`, with `agent`, `validate`, one
/// iteration and these extra arguments.
fn run_in_image(
    env: &Env,
    podman: &Podman,
    agent: &str,
    validate: &str,
    extra: &[&str],
) -> std::process::Output {
    run_in_image_with(env, &podman.vars(), agent, validate, extra)
}

/// [`run_in_image`] with these podman variables.
fn run_in_image_with(
    env: &Env,
    vars: &[(&str, PathBuf)],
    agent: &str,
    validate: &str,
    extra: &[&str],
) -> std::process::Output {
    std::fs::write(
        env.repo().join(".taskdaemon-config.yaml"),
        format!("sandbox-image: {IMAGE}\nsandbox-network: none\n"),
    )
    .unwrap();
    env.cmd()
        .envs(vars.iter().map(|(k, v)| (k, v)))
        .env("PATH", path_without(env, &[]))
        .args(["--config", ".taskdaemon-config.yaml", "run", "x"])
        .args(["--agent", agent, "--validate", validate])
        .args(["--sandbox", "podman", "--max-iterations", "1"])
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn podman_runs_the_loop_in_the_image_and_ends_every_process_and_container_of_it() {
    let env = sandbox_env();
    let Some(podman) = Podman::new(&env, "podman_runs_the_loop_in_the_image") else {
        return;
    };

    // The agent and the validation run in the image: its `sh` is found on the image's
    // PATH (the host's PATH, a directory of symlinks here, means nothing in it), the work
    // tree is mounted at its own path, and the home directory is not there to write.
    let out = run_in_image(
        &env,
        &podman,
        "cmd:touch \"$HOME/outside-marker\"; echo in-container > work.txt",
        "test -f work.txt",
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(env.repo().join("work.txt")).unwrap(),
        "in-container\n"
    );
    assert!(!env.home().join("outside-marker").exists());
    assert_eq!(
        podman.ok(&["ps", "-aq"]),
        "",
        "a finished run removes its container"
    );

    // A timeout ends the agent's processes in the container and removes the container.
    let out = run_in_image(
        &env,
        &podman,
        "cmd:touch started; sleep 3101 & sleep 3102",
        "true",
        &["--iteration-timeout", "5s", "--kill-grace", "1s"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("timed out"), "{stderr}");
    assert!(
        env.repo().join("started").exists(),
        "the agent ran: {stderr}"
    );
    for marker in ["sleep 3101", "sleep 3102"] {
        assert_eq!(
            processes_with(marker),
            Vec::<i32>::new(),
            "{marker} left running"
        );
    }
    assert_eq!(
        podman.ok(&["ps", "-aq"]),
        "",
        "a container was left behind:\n{}",
        podman.ok(&["ps", "-a"])
    );

    // An engine that cannot start the container (its --init binary missing): the agent
    // could not start; the run stops at once with a hint, no iteration counted as work.
    let broken = [
        ("CONTAINERS_CONF", podman.broken_conf()),
        ("CONTAINERS_STORAGE_CONF", podman.dir.join("storage.conf")),
    ];
    let out = run_in_image_with(&env, &broken, "cmd:true", "true", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summary = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains(
            "agent failure (could-not-start): the container engine could not start the agent's container"
        ),
        "{stderr}"
    );
    assert!(
        summary.contains("hint: check the engine and the image")
            && summary.contains("Iterations:  0 /"),
        "{summary}"
    );
}
