//! A real PostgreSQL server for tests: Debian's `postgresql` binaries (`initdb`,
//! `pg_ctl`: on PATH, else `/usr/lib/postgresql/*/bin`), initialised in a temp dir,
//! listening only on a Unix socket there (`listen_addresses=''`), one server per test
//! binary (`tests/it`) and a fresh database per test. As root the server runs as the `postgres` user
//! (or `nobody`): initdb refuses root. The server and its directory go away when the test
//! process ends, however it ends: a small shell holds them and waits for our end of a
//! pipe to close, then runs `pg_ctl stop -m immediate` and removes the directory.
//!
//! Missing binaries: the test is skipped with a loud message, but fails under `CI=true`
//! (`.ci/run` installs `postgresql`).

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// One running server.
pub struct PgServer {
    dir: PathBuf,
    /// The shell that stops the server when its stdin closes (at our exit).
    _keeper: Mutex<Child>,
}

/// A fresh database on the shared server.
#[derive(Debug, Clone)]
pub struct PgDb {
    pub name: String,
    pub socket_dir: PathBuf,
}

impl PgDb {
    /// `postgresql:///NAME?user=postgres&host=DIR` (the Unix socket in DIR).
    pub fn url(&self) -> String {
        format!(
            "postgresql:///{}?user=postgres&host={}",
            self.name,
            self.socket_dir.display()
        )
    }
}

fn bin_dir() -> Option<PathBuf> {
    if let Ok(path) = std::env::var("PATH") {
        for d in std::env::split_paths(&path) {
            if d.join("initdb").is_file()
                && d.join("pg_ctl").is_file()
                && d.join("postgres").is_file()
            {
                return Some(d);
            }
        }
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|b| b.join("initdb").is_file() && b.join("pg_ctl").is_file())
        .collect();
    found.sort();
    found.pop()
}

/// The uid and gid to run the server as when we are root.
fn server_user() -> Option<(u32, u32)> {
    if !nix::unistd::Uid::effective().is_root() {
        return None;
    }
    for name in ["postgres", "nobody"] {
        if let Ok(Some(u)) = nix::unistd::User::from_name(name) {
            return Some((u.uid.as_raw(), u.gid.as_raw()));
        }
    }
    None
}

const KEEPER: &str = r#"
set -e
dir="$1"; bin="$2"
"$bin/initdb" -D "$dir/data" -U postgres -A trust --no-sync -E UTF8 >"$dir/initdb.log" 2>&1
"$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
  -o "-c listen_addresses='' -c unix_socket_directories='$dir' -c fsync=off -c max_connections=200" \
  start >/dev/null
echo ready
read -r _ || true
"$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
rm -rf "$dir"
"#;

impl PgServer {
    fn start() -> Result<PgServer, String> {
        let bin = bin_dir().ok_or("no initdb/pg_ctl on PATH or in /usr/lib/postgresql/*/bin")?;
        let dir = tempfile::Builder::new()
            .prefix("td-pg-")
            .tempdir()
            .map_err(|e| e.to_string())?
            .keep();
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(KEEPER)
            .arg("keeper")
            .arg(&dir)
            .arg(&bin)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .env_remove("PGDATA");
        if let Some((uid, gid)) = server_user() {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).map_err(|e| e.to_string())?;
            cmd.uid(uid).gid(gid).env("HOME", &dir);
        }
        let mut child = cmd.spawn().map_err(|e| format!("sh: {e}"))?;
        let out = child.stdout.take().ok_or("no stdout")?;
        let mut line = String::new();
        BufReader::new(out)
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        if line.trim() != "ready" {
            let log = std::fs::read_to_string(dir.join("initdb.log")).unwrap_or_default()
                + &std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
            return Err(format!("the server did not start:\n{log}"));
        }
        Ok(PgServer {
            dir,
            _keeper: Mutex::new(child),
        })
    }

    pub fn socket_dir(&self) -> &Path {
        &self.dir
    }

    /// A new, empty database.
    pub fn database(&self) -> PgDb {
        static N: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "t{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        );
        let url = format!(
            "postgresql:///postgres?user=postgres&host={}",
            self.dir.display()
        );
        let mut c =
            postgres::Client::connect(&url, postgres::NoTls).expect("connect to the test server");
        c.batch_execute(&format!("create database {name}"))
            .expect("create database");
        PgDb {
            name,
            socket_dir: self.dir.clone(),
        }
    }
}

/// The test binary's server, started on first use; `None` (after a loud message) when
/// the binaries are missing outside CI. Under `CI=true` a missing server fails the test.
pub fn server() -> Option<&'static PgServer> {
    static S: OnceLock<Result<PgServer, String>> = OnceLock::new();
    match S.get_or_init(PgServer::start) {
        Ok(s) => Some(s),
        Err(why) => {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!(
                    "PostgreSQL is required under CI=true: {why} (.ci/run installs `postgresql`)"
                );
            }
            eprintln!(
                "\n*** SKIPPED: no PostgreSQL server for this test: {why}\n*** install Debian's `postgresql` package to run it\n"
            );
            None
        }
    }
}

/// A server of the calling test's own, which it may stop and start again (an outage);
/// `None` (skip) as [`server`] says.
pub fn private_server() -> Option<PgServer> {
    match PgServer::start() {
        Ok(s) => Some(s),
        Err(why) => {
            assert!(
                std::env::var("CI").map_or(true, |v| v != "true"),
                "PostgreSQL is required under CI=true: {why}"
            );
            eprintln!("\n*** SKIPPED: no PostgreSQL server for this test: {why}\n");
            None
        }
    }
}

impl PgServer {
    /// `pg_ctl stop` or `start` on this server, as the user it runs as.
    fn ctl(&self, action: &str) {
        let bin = bin_dir().expect("pg_ctl");
        let mut cmd = Command::new(bin.join("pg_ctl"));
        cmd.arg("-D").arg(self.dir.join("data")).arg("-w");
        if action == "start" {
            cmd.arg("-l").arg(self.dir.join("server.log")).arg("-o").arg(format!(
                "-c listen_addresses='' -c unix_socket_directories='{}' -c fsync=off -c max_connections=200",
                self.dir.display()
            ));
        } else {
            cmd.args(["-m", "fast"]);
        }
        cmd.arg(action).stdout(Stdio::null()).env_remove("PGDATA");
        if let Some((uid, gid)) = server_user() {
            cmd.uid(uid).gid(gid).env("HOME", &self.dir);
        }
        let st = cmd.status().expect("pg_ctl");
        assert!(st.success(), "pg_ctl {action} failed");
    }

    /// The outage begins: the server stops (its connections end).
    pub fn stop(&self) {
        self.ctl("stop");
    }

    /// The outage ends.
    pub fn start_again(&self) {
        self.ctl("start");
    }
}

/// A fresh database, or `None` (skip) as [`server`] says.
pub fn database() -> Option<PgDb> {
    server().map(PgServer::database)
}
