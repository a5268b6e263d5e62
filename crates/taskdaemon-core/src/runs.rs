//! A run of any kind, driven by the engine's one loop with the work source its config
//! names: the ralph loop, a spec's tasks.md, a stories file. The CLI and the daemon start
//! every run here.

use tokio_util::sync::CancellationToken;

use crate::engine::{
    self, Begin, EngineContext, EngineError, Outcome, RunState, SourceSpec, run_source,
};
use crate::telemetry::RunSummary;
use crate::worklist::{StoriesSource, TasksSource};
use crate::workspace::Workspace;

/// Run `st` until an outcome (see [`engine::run_source`]).
pub async fn run(
    st: RunState,
    ws: &Workspace,
    ctx: &EngineContext,
    cancel: &CancellationToken,
    begin: Begin,
) -> Result<(Outcome, RunSummary), EngineError> {
    match st.config.source.clone() {
        SourceSpec::Ralph => engine::run_loop(st, ws, ctx, cancel, begin).await,
        SourceSpec::Tasks { .. } => {
            let events = ctx.events.clone();
            let mut source = TasksSource::open(&st, &|w| events.warn(w))?;
            run_source(st, &mut source, ws, ctx, cancel, begin).await
        }
        SourceSpec::Stories { .. } => {
            let mut source = StoriesSource::open(&st)?;
            run_source(st, &mut source, ws, ctx, cancel, begin).await
        }
    }
}
