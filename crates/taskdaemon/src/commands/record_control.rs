//! What `start`, `pause`, `resume` and `cancel REF` share: through the daemon when one runs
//! (it also stops the processes), else on the store directly.

use taskdaemon_core::daemon::control::{self, Action};
use taskdaemon_core::daemon::ipc::Request;
use taskdaemon_core::store::Records;

use super::daemon_link;
use super::{Ctx, emit, now_ms, print_json, store_err};
use crate::cli::user;

pub fn act(action: Action, reference: &str, json: bool, ctx: &Ctx) -> anyhow::Result<i32> {
    act_with(action, reference, json, false, ctx)
}

/// [`act`]; `force`: a pause stops a live run at once, not when its iteration ends.
pub fn act_with(
    action: Action,
    reference: &str,
    json: bool,
    force: bool,
    ctx: &Ctx,
) -> anyhow::Result<i32> {
    let name = action.as_str();
    let paths = daemon_link::paths(ctx)?;
    let req = Request::Control {
        action,
        reference: reference.to_string(),
        force,
    };
    let (lines, via) = match daemon_link::call(&paths, &req)? {
        Some(r) if r.ok => (r.message, "daemon"),
        Some(r) => return Err(user(r.message)),
        None => {
            let mut records = Records::open(&paths.project).map_err(store_err)?;
            let scope = control::Scope {
                now: now_ms(),
                active: &|_| false,
                force,
            };
            let applied =
                control::apply(&mut records, action, reference, &scope).map_err(|e| match e {
                    control::ControlError::Store(s) => store_err(s),
                    e => user(e),
                })?;
            (applied.lines.join("\n"), "store")
        }
    };
    if json {
        print_json(
            &serde_json::json!({"action": name, "reference": reference, "via": via, "changes": lines.lines().collect::<Vec<_>>()}),
        )?;
    } else if lines.is_empty() {
        emit(&format!("{name} {reference}: nothing to change\n"))?;
    } else {
        let tail = if via == "store" && matches!(action, Action::Start | Action::Resume) {
            "\n  no daemon runs: `taskdaemon daemon start` runs it"
        } else {
            ""
        };
        emit(&format!("{lines}{tail}\n"))?;
    }
    Ok(0)
}
