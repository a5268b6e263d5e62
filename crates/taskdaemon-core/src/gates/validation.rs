//! The validation command: run with `sh -c` in the work tree, in its own process group,
//! with the same timeout and stop rules as an agent. Its exit code is the evidence.

use std::path::Path;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::agent::{ProcessSpec, run_process};
use crate::fsutil::bound_text;

/// Output kept for the next prompt and the events.
const KEEP: usize = 64 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationResult {
    pub exit_code: i32,
    pub passed: bool,
    pub timed_out: bool,
    pub interrupted: bool,
    /// stdout and stderr interleaved, bounded.
    pub output: String,
    pub duration: Duration,
}

/// What to run and what counts as success.
#[derive(Debug, Clone)]
pub struct Validation<'a> {
    pub command: &'a str,
    pub dir: &'a Path,
    pub env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    pub success_exit_code: i32,
    pub timeout: Option<Duration>,
    pub grace: Duration,
    /// Its sandbox (`sandbox-validate:`, else the agent's).
    pub sandbox: &'a crate::sandbox::SandboxPlan,
}

/// Run the validation; `on_line` sees every line (for the iteration log).
pub async fn run_validation(
    v: Validation<'_>,
    cancel: &CancellationToken,
    mut on_line: impl FnMut(&str),
) -> std::io::Result<ValidationResult> {
    let success_exit_code = v.success_exit_code;
    let spec = ProcessSpec {
        program: "sh".into(),
        args: vec!["-c".into(), v.command.into()],
        cwd: v.dir.to_path_buf(),
        env: v.env,
        stdin: None,
        timeout: v.timeout,
        grace: v.grace,
        after_stop: None,
    };
    let spec = crate::sandbox::wrap_validation(spec, v.sandbox);
    let mut output = String::new();
    let r = run_process(&spec, cancel, |_, line| {
        let line = String::from_utf8_lossy(line);
        on_line(&line);
        // Keep memory bounded for floods: hold at most 2 × KEEP, then compact.
        output.push_str(&line);
        output.push('\n');
        if output.len() > 2 * KEEP {
            output = bound_text(&output, KEEP);
        }
    })
    .await?;
    let exit_code = r.status.code();
    Ok(ValidationResult {
        exit_code,
        passed: !r.timed_out && !r.interrupted && exit_code == success_exit_code,
        timed_out: r.timed_out,
        interrupted: r.interrupted,
        output: bound_text(&output, KEEP),
        duration: r.duration,
    })
}
