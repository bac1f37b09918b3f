//! The `scale` scenario: the design at the scale it claims.
//!
//! Cases (`--cases`, comma-separated; default every one but `soak`):
//! - `million`: a million partitions in one queue (`million.rs`);
//! - `queues`: ten thousand queues with one consumer group each
//!   (`queues.rs`);
//! - `parked`: ten thousand parked long-poll consumers on 100 queues
//!   (`parked.rs`);
//! - `spread`: single-message pushes from 50 connections over 1 and 100
//!   partitions (`spread.rs`);
//! - `soak`: the long soak with flat memory (`../soak/scale.rs`, on the
//!   `soak` scenario's workload).
//!
//! Every case reports its figures as ratios to a small case measured in the
//! same run, and pushes one JSON object (with a `case` field) to
//! `report.scale`; its table goes to stderr as it finishes.
//!
//! `common.rs` holds the settings and what the cases share: their push items
//! and payloads, a small random generator, and the vacuum before an idle
//! window.
//!
//! On `pg_stat_database`: a backend flushes its counts when it goes idle, at
//! most once a second, and a backend that goes idle less than a second after
//! its last flush keeps them for up to 10 s (`stats::SETTLE`). Reads taken in
//! a steady state (a background pass every second or so) are right within
//! about a second of that activity; reads that must include a burst just
//! before them wait `SETTLE` first, as the cases' docs say.

mod common;
mod million;
mod parked;
mod queues;
mod spread;

pub(crate) use common::ScaleOpts;
use common::{Case, ScaleCase};

use super::case;
use super::soak;
use crate::env::{CommonArgs, Env};
use crate::error::Result;
use crate::output::report::Report;

case::scenario!(ScaleOpts, "scale", |ctx, opts, report| run(
    ctx.env, ctx.common, opts, report
));

async fn run(env: &Env, common: &CommonArgs, opts: &ScaleOpts, report: &mut Report) -> Result<()> {
    for case in opts.cases() {
        eprintln!("queen-load: scale case {case:?}");
        let result = match case {
            Case::Soak => {
                let (value, files) =
                    soak::scale::run(env, common, opts.soak_minutes, &opts.soak_svg).await?;
                report.push(ScaleCase(value));
                files?;
                continue;
            }
            Case::Million => million::run(env, common, opts).await,
            Case::Queues => queues::run(env, common, opts).await,
            Case::Parked => parked::run(env, common, opts).await,
            Case::Spread => spread::run(env, common, opts).await,
        };
        let value = result.map_err(|error| error.wrap(format!("scale case {case:?}")))?;
        report.push(ScaleCase(value));
    }
    Ok(())
}
