//! Task boundaries (spec 1 §3–§5): every task starts from a `task-N-pre` snapshot and, when
//! its evidence is verified, ends in a `task-N-post` one; the `.ralph/` task files are reset
//! between tasks and a one-line history is kept. The [`parser`] turns the person's message
//! into the structured `task.md`.

pub mod cancel;
mod files;
pub mod parser;
pub mod plan;
pub mod plan_update;
pub mod stall;
mod task;
pub mod task_flow;
pub mod task_run;
pub mod waiting;

pub use files::TaskFiles;
pub use task::{
    LifecycleError, NextTask, TaskStart, begin_task, fail_task, finish_task, next_task,
    note_iteration, rollback, save_manual,
};
pub use task_run::{TaskEnd, end_task};
