//! Stall recovery (spec 1 §8): when the agent makes the very same tool calls iteration after
//! iteration, save the stalled state, tell the agent in `feedback.md` what it keeps doing
//! and to change approach; the second stall in a task fails it and rolls back to
//! `task-N-pre`.

use crate::clock;
use crate::git::snapshot::{Kind, SaveRequest, Snapshot, Snapshots};
use crate::workspace::Workspace;

use super::plan::{MarkerKind, Plan};
use super::{LifecycleError, TaskFiles};

/// The task number a stall snapshot is filed under: the run's task, else the counter.
fn task_number(ws: &Workspace, task: Option<u32>) -> Option<u32> {
    task.or_else(|| TaskFiles::new(ws).read_counter().ok().filter(|n| *n > 0))
}

/// The plan section the repeated tool calls work on: the first section with a marker of
/// this task whose files the calls name. Returns its name, marker kind and description.
fn stuck_section(
    ws: &Workspace,
    task: Option<u32>,
    recent_tools: &[String],
) -> Option<(String, MarkerKind, String)> {
    let workdir = ws.root().parent()?;
    let path = Plan::locate(workdir)?;
    let text = crate::fsutil::read_optional(&path).ok()??;
    let (plan, _) = Plan::parse(&path, &text);
    let task = task?;
    plan.marked_for(task)
        .filter(|(_, m)| !matches!(m.kind, MarkerKind::Preserved | MarkerKind::NoChanges))
        .find(|(s, _)| {
            s.files
                .iter()
                .any(|f| recent_tools.iter().any(|t| t.contains(f.as_str())))
        })
        .map(|(s, m)| (s.name.clone(), m.kind, m.text.clone()))
}

/// The first stall of a task: snapshot `stall-N-recovery` and write the recovery guidance.
pub fn recover(
    snaps: &Snapshots,
    ws: &Workspace,
    task: Option<u32>,
    iteration: u32,
    repeats: u32,
    recent_tools: &[String],
) -> Result<Snapshot, LifecycleError> {
    let number = task_number(ws, task);
    let snap = snaps.save(&SaveRequest {
        kind: Kind::Stall,
        task: number,
        message: &format!(
            "stalled at iteration {iteration}: the same tool calls {repeats} times in a row"
        ),
        time_ms: clock::now().as_millisecond(),
    })?;
    let actions: String = recent_tools.iter().map(|t| format!("- `{t}`\n")).collect();
    let focus = stuck_section(ws, number, recent_tools)
        .map(|(section, kind, text)| {
            let advice = match kind {
                MarkerKind::Add => "Create the new items and append them next to the existing ones; do not modify or convert existing items.",
                MarkerKind::Modify => "Re-read the current content, then write the whole section fresh with the change instead of patching single lines.",
                MarkerKind::Fix => "Reproduce the bug first (run its check), then read the code the check exercises before editing again.",
                MarkerKind::Remove => "Delete exactly the named items and nothing else, then check that the rest still builds.",
                _ => "Re-read what the plan asks of this section before touching it again.",
            };
            format!(
                "You appear stuck on section `{section}` of the plan (marker [{}]: {text}).\n{advice}\n\n",
                kind.label()
            )
        })
        .unwrap_or_default();
    let text = format!(
        "## Stall Recovery (iteration {iteration})\n\n\
The last {repeats} iterations made exactly the same tool calls and got nowhere. Your last actions:\n\n\
{actions}\n\
{focus}Do not repeat them. Change approach:\n\
1. Re-read `.ralph/task.md` and the latest validation output; say in one sentence what is actually failing.\n\
2. If a command keeps failing the same way, read the code it exercises instead of rerunning it.\n\
3. If an edit does not stick, rewrite the whole section or file fresh instead of patching lines.\n\
4. Take one different, small step and commit it.\n\n\
This is the first stall of this task; a second one ends the task and rolls the project back.\n\
The stalled state is saved as snapshot `{}`.\n",
        snap.tag
    );
    ws.write_feedback(&text)?;
    Ok(snap)
}
