//! The shared queue's connection: where it is (`queue:`, `queue-project`, `queue-remote`
//! or `TASKDAEMON_QUEUE*`), connecting (rustls for TLS, `sslmode` as in libpq), the
//! errors a person can fix, and the versioned schema.

use std::path::Path;

use postgres::{Client, NoTls};

/// Where a project's records live when they are shared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueConfig {
    /// `postgres://…` as configured (holds the password, if any: show [`Self::shown`]).
    pub url: String,
    /// One key for every clone of the repository (`queue-project`, else its remote's URL).
    pub project: String,
}

impl QueueConfig {
    /// The URL with its password hidden, for messages.
    pub fn shown(&self) -> String {
        redact(&self.url)
    }

    /// The queue of the project at `repo`, if one is configured: `TASKDAEMON_QUEUE`, else
    /// `queue:` of the project's config, else of the user's. `None`: the JSONL store.
    pub fn resolve(repo: &Path) -> Result<Option<QueueConfig>, QueueError> {
        if !queue_mentioned(repo) {
            return Ok(None);
        }
        let layers = load_layers(repo)?;
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let url = env("TASKDAEMON_QUEUE").or(layers.settings.queue.clone());
        refuse_untrusted(&layers, url.is_some())?;
        let Some(url) = url else {
            return Ok(None);
        };
        QueueConfig::with_layers(repo, url, &layers.settings).map(Some)
    }

    /// The queue at `url` for the project at `repo` (its key from `queue-project` or the
    /// remote, as configured).
    pub fn for_url(repo: &Path, url: &str) -> Result<QueueConfig, QueueError> {
        let layers = load_layers(repo)?;
        refuse_untrusted(&layers, true)?;
        QueueConfig::with_layers(repo, url.to_string(), &layers.settings)
    }

    fn with_layers(
        repo: &Path,
        url: String,
        layers: &crate::config::Settings,
    ) -> Result<QueueConfig, QueueError> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        check_url(&url)?;
        let project = match env("TASKDAEMON_QUEUE_PROJECT").or(layers.queue_project.clone()) {
            Some(p) => p,
            None => {
                let remote = env("TASKDAEMON_QUEUE_REMOTE")
                    .or(layers.queue_remote.clone())
                    .unwrap_or_else(|| "origin".into());
                project_from_remote(repo, &remote)?
            }
        };
        Ok(QueueConfig { url, project })
    }
}

fn load_layers(repo: &Path) -> Result<crate::config::Layers, QueueError> {
    crate::config::load_layers(repo, None).map_err(|e| QueueError::Config {
        reason: e.to_string(),
        hint: "fix the config file named above".into(),
    })
}

/// A queue's records are trusted as the user's own (the daemon runs their commands), so
/// which queue, project and remote is never an untrusted clone's choice, nor silently
/// another store than the one asked for: while the repository's config that names them is
/// untrusted, refused. `in_use`: a queue is used (from the environment or the user).
fn refuse_untrusted(layers: &crate::config::Layers, in_use: bool) -> Result<(), QueueError> {
    let Some(u) = &layers.untrusted else {
        return Ok(());
    };
    let keys: Vec<&str> = u
        .ignored
        .iter()
        .copied()
        .filter(|k| k.starts_with("queue"))
        .collect();
    if keys.is_empty() || !(in_use || keys.contains(&"queue")) {
        return Ok(());
    }
    Err(QueueError::Config {
        reason: format!(
            "{} sets `{}`, but this repository's config is not trusted, and a shared queue's records are trusted as your own",
            u.path.display(),
            keys.join("`, `")
        ),
        hint: format!(
            "read the file; if you accept it, `taskdaemon trust {}`; or set the queue in your own ~/.config/taskdaemon/config.yaml or TASKDAEMON_QUEUE",
            u.path.display()
        ),
    })
}

/// Whether a queue can be configured at all: `TASKDAEMON_QUEUE` is set, or a config file
/// has a line (not a comment) naming `queue`. Without one the JSONL store opens exactly as
/// it always did: no config file is parsed on the way.
fn queue_mentioned(repo: &Path) -> bool {
    if std::env::var_os("TASKDAEMON_QUEUE").is_some_and(|v| !v.is_empty()) {
        return true;
    }
    let mut files = vec![crate::config::project_config_path(repo)];
    if let Some(d) = crate::config::user_config_dir() {
        files.push(d.join("config.yaml"));
    }
    files.iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines()
                .any(|l| !l.trim_start().starts_with('#') && l.contains("queue"))
        })
    })
}

#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("queue: {reason}\n  hint: {hint}")]
    Config { reason: String, hint: String },
    #[error("queue {url}: {reason}\n  hint: {hint}")]
    Connect {
        url: String,
        reason: String,
        hint: String,
    },
    #[error("queue {url}: {what}: {reason}\n  hint: {hint}")]
    Sql {
        url: String,
        what: String,
        reason: String,
        hint: String,
        /// The connection failed (closed, refused, timed out), not the statement: the
        /// write may succeed once the server answers again.
        connection_lost: bool,
    },
    #[error(
        "queue {url}: the schema is at version {found}, newer than this taskdaemon knows ({known})\n  hint: upgrade taskdaemon on this machine to the version the other machines run"
    )]
    SchemaTooNew { url: String, found: i32, known: i32 },
    #[error(
        "queue: a record in {collection} is unreadable: {reason}\n  hint: `taskdaemon store migrate --to jsonl` writes the records out for a look"
    )]
    BadRecord { collection: String, reason: String },
}

impl QueueError {
    /// Unreachable servers, bad URLs, refused logins and schema mismatches are the
    /// person's to fix (exit 64); a failing statement is not.
    pub fn is_user_fault(&self) -> bool {
        !matches!(self, QueueError::Sql { .. })
    }

    /// Whether the server could not be reached (or the connection broke): the same request
    /// may succeed later, as opposed to one the server refused.
    pub fn is_connection_lost(&self) -> bool {
        matches!(
            self,
            QueueError::Connect { .. }
                | QueueError::Sql {
                    connection_lost: true,
                    ..
                }
        )
    }

    pub(crate) fn sql(cfg: &QueueConfig, what: &str, e: postgres::Error) -> QueueError {
        let denied = e
            .as_db_error()
            .is_some_and(|d| *d.code() == postgres::error::SqlState::INSUFFICIENT_PRIVILEGE);
        QueueError::Sql {
            url: cfg.shown(),
            what: what.to_string(),
            connection_lost: connection_lost(&e),
            reason: describe(&e),
            hint: if denied {
                "the queue's role lacks a privilege: `taskdaemon doctor` names the GRANT that gives it (docs/multi-machine.md)".into()
            } else {
                "check the server's log; run the command again once the server answers".into()
            },
        }
    }
}

/// Whether `e` is the connection's failure rather than the statement's: no server error
/// (closed, refused, I/O), or the server's "shutting down / starting up / connection
/// failure" classes (57P, 08).
fn connection_lost(e: &postgres::Error) -> bool {
    match e.as_db_error() {
        None => {
            e.is_closed() || std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
        }
        Some(db) => {
            let code = db.code().code();
            code.starts_with("57P") || code.starts_with("08")
        }
    }
}

/// A postgres error in one line (its server message when there is one).
fn describe(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => {
            let mut s = e.to_string();
            let mut src = std::error::Error::source(e);
            while let Some(inner) = src {
                s.push_str(&format!(": {inner}"));
                src = inner.source();
            }
            s
        }
    }
}

/// The URL with any password replaced by `***` (userinfo and `password=` parameters).
pub fn redact(url: &str) -> String {
    let mut out = url.to_string();
    if let Some(scheme_end) = out.find("://") {
        let rest = &out[scheme_end + 3..];
        let auth_end = rest.find(['/', '?']).unwrap_or(rest.len());
        if let Some(at) = rest[..auth_end].rfind('@') {
            let userinfo = &rest[..at];
            if let Some(colon) = userinfo.find(':') {
                let start = scheme_end + 3 + colon + 1;
                let end = scheme_end + 3 + at;
                out.replace_range(start..end, "***");
            }
        }
    }
    // `password=…` in the query string or a key/value connection string.
    let lower = out.to_ascii_lowercase();
    if let Some(i) = lower.find("password=") {
        let start = i + "password=".len();
        let end = out[start..]
            .find(['&', ' '])
            .map(|n| start + n)
            .unwrap_or(out.len());
        out.replace_range(start..end, "***");
    }
    out
}

fn check_url(url: &str) -> Result<(), QueueError> {
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(QueueError::Config {
            reason: format!("`{}` is not a postgres:// URL", redact(url)),
            hint: "write it as postgres://USER:PASSWORD@HOST:5432/DATABASE (or postgresql:///DB?host=/socket/dir)".into(),
        });
    }
    Ok(())
}

/// The project key from a git remote's URL: credentials, a trailing `/` and `.git` gone.
fn project_from_remote(repo: &Path, remote: &str) -> Result<String, QueueError> {
    let out = crate::git::Git::new(repo)
        .call(&["remote", "get-url", "--", remote])
        .output();
    match out {
        Ok(o) if o.status.success() => {
            let url = String::from_utf8_lossy(&o.stdout).trim().to_string();
            Ok(normalize_remote(&url))
        }
        _ => Err(QueueError::Config {
            reason: format!(
                "the project has no key: `queue-project` is unset and git remote `{remote}` does not exist in {}",
                repo.display()
            ),
            hint: "set `queue-project: NAME` in .taskdaemon/config.yaml (the same on every machine), or add the shared remote (`git remote add origin URL`, or name it with `queue-remote`)".into(),
        }),
    }
}

/// `https://user:tok@host/a/b.git/` → `https://host/a/b`.
pub fn normalize_remote(url: &str) -> String {
    let mut s = url.trim().to_string();
    if let Some(scheme_end) = s.find("://") {
        let rest = &s[scheme_end + 3..];
        let auth_end = rest.find('/').unwrap_or(rest.len());
        if let Some(at) = rest[..auth_end].rfind('@') {
            s.replace_range(scheme_end + 3..scheme_end + 3 + at + 1, "");
        }
    }
    while s.ends_with('/') {
        s.pop();
    }
    if let Some(stripped) = s.strip_suffix(".git") {
        s = stripped.to_string();
    }
    while s.ends_with('/') {
        s.pop();
    }
    s
}

/// `sslmode` values libpq knows that the client does not: `verify-ca`/`verify-full` are
/// what `require` does here (rustls always checks the certificate against webpki roots).
fn client_url(url: &str) -> (String, bool) {
    let lower = url.to_ascii_lowercase();
    let tls_off = lower.contains("sslmode=disable");
    let fixed = url
        .replace("sslmode=verify-full", "sslmode=require")
        .replace("sslmode=verify-ca", "sslmode=require");
    (fixed, tls_off)
}

/// A new connection to the queue, its schema checked (and created or migrated).
pub fn connect(cfg: &QueueConfig) -> Result<Client, QueueError> {
    let mut client = connect_only(cfg)?;
    super::pg_schema::migrate(&mut client, cfg)?;
    Ok(client)
}

/// A new connection, without looking at the schema.
pub fn connect_only(cfg: &QueueConfig) -> Result<Client, QueueError> {
    let (url, tls_off) = client_url(&cfg.url);
    let config: postgres::Config =
        url.parse()
            .map_err(|e: postgres::Error| QueueError::Config {
                reason: format!(
                    "`{}` is not a valid connection URL: {}",
                    cfg.shown(),
                    describe(&e)
                ),
                hint: "write it as postgres://USER:PASSWORD@HOST:5432/DATABASE?sslmode=require"
                    .into(),
            })?;
    // A Unix socket is local: TLS there is neither possible nor needed.
    let local = config
        .get_hosts()
        .iter()
        .all(|h| matches!(h, postgres::config::Host::Unix(_)));
    let got = if tls_off || local {
        config.connect(NoTls)
    } else {
        config.connect(tls())
    };
    got.map_err(|e| connect_error(cfg, &e))
}

fn tls() -> tokio_postgres_rustls::MakeRustlsConnect {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map(|b| b.with_root_certificates(roots).with_no_client_auth())
        .unwrap_or_else(|_| {
            rustls::ClientConfig::builder()
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth()
        });
    tokio_postgres_rustls::MakeRustlsConnect::new(config)
}

fn connect_error(cfg: &QueueConfig, e: &postgres::Error) -> QueueError {
    let code = e.as_db_error().map(|d| d.code().code().to_string());
    let hint = match code.as_deref() {
        Some("28P01") | Some("28000") => {
            "the server refused the login: check the user and password in the URL (or ~/.pgpass)"
        }
        Some("3D000") => {
            "the database does not exist: create it (`createdb NAME`) or fix the URL's path"
        }
        _ => {
            "is the server running and reachable from here? check host, port and sslmode in the URL (`taskdaemon doctor` tries it)"
        }
    };
    QueueError::Connect {
        url: cfg.shown(),
        reason: format!("cannot connect: {}", describe(e)),
        hint: hint.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_show() {
        assert_eq!(
            redact("postgres://u:s3cret@db.example:5432/q?sslmode=require"),
            "postgres://u:***@db.example:5432/q?sslmode=require"
        );
        assert_eq!(redact("postgres://u@h/q"), "postgres://u@h/q");
        assert_eq!(
            redact("postgresql:///q?host=/tmp&password=pw&user=x"),
            "postgresql:///q?host=/tmp&password=***&user=x"
        );
    }

    #[test]
    fn remotes_lose_credentials_and_suffixes() {
        assert_eq!(
            normalize_remote("https://me:tok@github.com/a/b.git/"),
            "https://github.com/a/b"
        );
        assert_eq!(normalize_remote("/srv/git/x.git"), "/srv/git/x");
        assert_eq!(
            normalize_remote("git@host:team/repo.git"),
            "git@host:team/repo"
        );
    }
}
