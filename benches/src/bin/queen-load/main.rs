//! `queen-load`: Queen's end-to-end load generator.
//!
//! It measures the real thing: the release `queen-server` binary, run as a child
//! process against a throwaway but *durable* PostgreSQL cluster (`fsync` and
//! `synchronous_commit` on), driven over HTTP/1.1 keep-alive connections, one
//! connection per producer task.
//!
//! Each scenario is a subcommand. `push` exists today (`push.rs`); `pop`,
//! `latency`, `ceiling` and `all` are meant to join it and reuse the pieces:
//! `env.rs` (cluster and broker lifecycle), `http.rs` (one keep-alive
//! connection), `payload.rs` (request bodies), `stats.rs` (PostgreSQL counters),
//! `cpu.rs` (CPU time per process group), `report.rs` (table and JSON).
//!
//! Usually run as `cargo xtask bench push`, which builds both binaries in
//! release mode first.

mod cpu;
mod env;
mod error;
mod http;
mod payload;
mod push;
mod report;
mod stats;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Queen's end-to-end load generator.
#[derive(Debug, Parser)]
#[command(name = "queen-load", about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Push throughput: batch size x partitions x producers, one fresh database
    /// and broker per case.
    Push(push::PushArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("queen-load: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Push(args) => push::run(args).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("queen-load: {error}");
            ExitCode::FAILURE
        }
    }
}
