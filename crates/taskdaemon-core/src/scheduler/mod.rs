//! The scheduler: what runs next, and what a finished run means for the records above it.
//!
//! - [`cascade`] derives the next step of every plan and spec from the records alone
//!   (plan run done → plan ready → spec run → specs → phase runs → merge), so it is
//!   idempotent and a restarted daemon simply continues.
//! - [`pick`] chooses pending runs whose deps are complete, by priority then age, within the
//!   concurrency limits.
//! - [`context`] is what each kind of run is spawned with (paths, phase, task).
//!
//! Nothing here runs a process or touches git: the daemon does that with the answers.

pub mod cascade;
pub mod context;
pub mod pick;

pub use cascade::{Action, advance};
pub use pick::{Limits, pick};

use taskstore::Filter;

use crate::store::{AnyRecord, Kind, LoopRun, Plan, Records, Result, Spec};

/// Live runs passing the filters, oldest first.
pub fn runs(records: &Records, filters: &[Filter]) -> Result<Vec<LoopRun>> {
    Ok(records
        .list(Kind::Run, filters)?
        .into_iter()
        .filter_map(|r| match r {
            AnyRecord::Run(r) => Some(r),
            _ => None,
        })
        .collect())
}

pub(crate) fn specs(records: &Records, filters: &[Filter]) -> Result<Vec<Spec>> {
    Ok(records
        .list(Kind::Spec, filters)?
        .into_iter()
        .filter_map(|r| match r {
            AnyRecord::Spec(s) => Some(s),
            _ => None,
        })
        .collect())
}

pub(crate) fn plans(records: &Records, filters: &[Filter]) -> Result<Vec<Plan>> {
    Ok(records
        .list(Kind::Plan, filters)?
        .into_iter()
        .filter_map(|r| match r {
            AnyRecord::Plan(p) => Some(p),
            _ => None,
        })
        .collect())
}
