//! `taskdaemon __store-stress`: a writer for the store's crash and concurrency tests.
//! Creates plans (and, with --updates, bumps a revision in existing plans' titles) as fast
//! as it can; after each durable write returns it prints `C <id>` or `U <id> <rev>`, so a
//! test that kills it knows exactly which writes were acknowledged.

use std::io::Write;

use clap::Args;
use taskdaemon_core::store::{AnyRecord, Kind, NewPlan, NewRecord};
use taskstore::StoreOptions;

use super::{Ctx, now_ms, open_records, store_err};

#[derive(Debug, Args)]
pub struct StoreStressArgs {
    /// How many operations.
    #[arg(long, default_value_t = 1000)]
    pub count: u64,
    /// Make about half the operations updates of existing plans.
    #[arg(long)]
    pub updates: bool,
    /// Creates per durable write (1: one fsync each).
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// Title prefix.
    #[arg(long, default_value = "stress")]
    pub prefix: String,
}

/// The revision in a title `… rev N`.
fn rev(title: &str) -> u64 {
    title
        .rsplit_once(" rev ")
        .and_then(|(_, n)| n.parse().ok())
        .unwrap_or(0)
}

pub fn run(a: StoreStressArgs, ctx: &Ctx) -> anyhow::Result<i32> {
    let mut records = open_records(ctx, StoreOptions::default())?;
    let mut known: Vec<String> = records
        .store()
        .ids(Kind::Plan.collection())
        .map_err(store_err)?
        .map(String::from)
        .collect();
    let mut rng = fastrand::Rng::with_seed((std::process::id() as u64) ^ (now_ms() as u64));
    let mut rnd = move || rng.u64(..);
    let out = std::io::stdout();
    let mut done = 0;
    while done < a.count {
        if a.updates && !known.is_empty() && rnd() % 2 == 0 {
            let id = &known[(rnd() % known.len() as u64) as usize];
            let Some(AnyRecord::Plan(mut p)) = records.get(id).map_err(store_err)? else {
                continue;
            };
            let n = rev(&p.title) + 1;
            let base = p
                .title
                .rsplit_once(" rev ")
                .map_or(p.title.as_str(), |(b, _)| b);
            p.title = format!("{base} rev {n}");
            records
                .update(AnyRecord::Plan(p), now_ms())
                .map_err(store_err)?;
            writeln!(out.lock(), "U {id} {n}")?;
            done += 1;
            continue;
        }
        let n = (a.batch as u64).min(a.count - done).max(1);
        let news = (0..n)
            .map(|i| {
                NewRecord::Plan(NewPlan {
                    title: format!("{} {} rev 0", a.prefix, done + i),
                    ..Default::default()
                })
            })
            .collect();
        let made = records.create_batch(news, now_ms()).map_err(store_err)?;
        let mut lock = out.lock();
        for m in made {
            writeln!(lock, "C {}", m.id())?;
            known.push(m.id().to_string());
        }
        lock.flush()?;
        done += n;
    }
    Ok(0)
}
