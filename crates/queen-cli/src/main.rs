//! `queen`, the operator's command-line tool. It is an HTTP client of the
//! broker like any other (it depends on no other crate of the workspace;
//! tidy checks), so it works against any broker that speaks Queen's API.
//!
//! Its verbs and flags are the reference CLI's (`queenctl`) where that has
//! them: `ping`, `status`, `queue list|describe` (`queues`), `cg
//! list|describe` (`groups`), `lag --min-seconds N`, `push`, `tail`,
//! `replay --to`, `dlq list|retry`, `maintenance get|on|off`, `config
//! view|current-context|get-contexts|set-context|use-context|delete-context`;
//! the same config file and contexts (`config.rs`), the same global flags
//! (`--server`, `--token`, `--context`, `--config`, `--insecure`, `-o`,
//! `-q`), the same time forms (`timespec.rs`) and exit codes (`error.rs`).
//!
//! Where it differs, and why:
//! - `--group` names the consumer group; the reference's `--cg` is an alias.
//! - `tail` without `--follow` drains what is there and exits (the reference
//!   returns after one batch); `--limit N` never leaves a message leased.
//! - `push` exits 2 when the broker failed an item (the reference exits 0),
//!   and a malformed line stops it with everything before the line pushed.
//! - `lag --min-seconds N` exits 5 when some cursor lags that long, for
//!   alerting (the reference only filters).
//! - `dlq retry` replays dead letters through the broker's replay routes;
//!   the reference has no such route and offers only `dlq drain` (delete).
//! - `status` shows the overview and every queue's counts
//!   (`/resources/overview`, `/resources/queues`); the reference prints
//!   `/status`, a time series meant for the dashboard.
//! - Tokens are never read from an OS keychain (see `config.rs`); `-o`
//!   offers `table` and `json` (pipe JSON into `jq` for the rest).
//! - Not here: `pop`, `ack`, `apply`, `tx`, `lease`, `messages`, `traces`,
//!   `analytics`, `metrics`, `bench`, `login`, `completion`.

mod admin;
mod client;
mod config;
mod contexts;
mod error;
mod output;
mod push;
mod tail;
mod timespec;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

use crate::client::Broker;
use crate::error::CliError;
use crate::output::Format;

/// Operate a Queen broker over its HTTP API.
///
/// The broker is the current context of ~/.queen/config.yaml (see `queen
/// config`), overridden by $QUEEN_CONTEXT or --context, then $QUEEN_SERVER /
/// $QUEEN_TOKEN, then --server / --token.
///
/// Exit codes: 0 success, 1 bad usage or input, 2 broker error or
/// unreachable, 3 authentication refused, 4 nothing to do, 5 `lag
/// --min-seconds` found a lagging group.
#[derive(Debug, Parser)]
#[command(name = "queen", version, max_term_width = 100)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Args)]
struct Global {
    /// The broker's URL (overrides the context and $QUEEN_SERVER).
    #[arg(long, global = true, value_name = "URL")]
    server: Option<String>,
    /// A bearer token (overrides the context and $QUEEN_TOKEN).
    #[arg(long, global = true, value_name = "TOKEN", hide_default_value = true)]
    token: Option<String>,
    /// A context of the config file (overrides its current-context and
    /// $QUEEN_CONTEXT).
    #[arg(long, global = true, value_name = "NAME")]
    context: Option<String>,
    /// The config file (default $QUEEN_CONFIG, else ~/.queen/config.yaml).
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Skip TLS certificate verification.
    #[arg(long, global = true)]
    insecure: bool,
    /// Output format (default: table on a terminal, JSON otherwise).
    #[arg(short, long, global = true, value_enum)]
    output: Option<Format>,
    /// Print only what was asked for (no summaries or notes).
    #[arg(short, long, global = true)]
    quiet: bool,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Check the broker answers (GET /health).
    Ping,
    /// The overview and every queue's counts, or one queue's partitions.
    Status {
        /// One queue.
        queue: Option<String>,
    },
    /// List or describe queues (`queen queues` lists).
    #[command(visible_aliases = ["queues", "q"])]
    Queue {
        #[command(subcommand)]
        command: Option<admin::QueueCommand>,
    },
    /// List or describe consumer groups (`queen groups` lists).
    #[command(visible_aliases = ["groups", "consumer-groups"])]
    Cg {
        #[command(subcommand)]
        command: Option<admin::GroupCommand>,
    },
    /// Consumer-group lag; with --min-seconds N, exit 5 when some group
    /// lags N seconds or more.
    Lag(admin::LagArgs),
    /// Push NDJSON (one message per line) from stdin, a file or --data.
    Push(push::PushArgs),
    /// Print a queue's messages as NDJSON, acking them as a consumer group.
    Tail(tail::TailArgs),
    /// Move a consumer group's cursors on a queue back (or forward) to a time.
    Replay(admin::ReplayArgs),
    /// List or retry dead letters.
    Dlq {
        #[command(subcommand)]
        command: admin::DlqCommand,
    },
    /// Show or switch maintenance mode.
    #[command(visible_alias = "maint")]
    Maintenance {
        #[command(subcommand)]
        command: admin::MaintenanceCommand,
    },
    /// Manage contexts (named brokers) in the config file.
    Config {
        #[command(subcommand)]
        command: contexts::ConfigCommand,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let _ = err.print();
            // --help and --version succeed; a usage error is exit 1, as in
            // the reference (clap's own default is 2, a broker error here).
            return if err.use_stderr() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("queen: cannot start the async runtime: {err}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(&cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            if !(cli.global.quiet && matches!(err, CliError::Nothing(_))) {
                eprintln!("queen: {}", error::chain(&err));
            }
            ExitCode::from(err.exit_code())
        }
    }
}

async fn run(cli: &Cli) -> Result<(), CliError> {
    let global = &cli.global;
    let format = Format::pick(global.output);
    let quiet = global.quiet;
    let broker = || -> Result<Broker, CliError> {
        let target = config::resolve(&config::Overrides {
            config: global.config.as_deref(),
            context: global.context.as_deref(),
            server: global.server.as_deref(),
            token: global.token.as_deref(),
            insecure: global.insecure,
        })?;
        Broker::new(&target)
    };
    match &cli.command {
        Command::Config { command } => contexts::run(
            &config::path(global.config.as_deref())?,
            command,
            &contexts::Given {
                server: global.server.as_deref(),
                token: global.token.as_deref(),
                insecure: global.insecure,
            },
            format,
            quiet,
        ),
        Command::Replay(args) if args.dry_run => admin::replay(None, args, quiet).await,
        Command::Ping => admin::ping(&broker()?, format).await,
        Command::Status { queue } => admin::status(&broker()?, queue.as_deref(), format).await,
        Command::Queue { command } => {
            let command = command.as_ref().unwrap_or(&admin::QueueCommand::List);
            admin::queue(&broker()?, command, format).await
        }
        Command::Cg { command } => {
            let command = command.as_ref().unwrap_or(&admin::GroupCommand::List);
            admin::group(&broker()?, command, format).await
        }
        Command::Lag(args) => admin::lag(&broker()?, args, format, quiet).await,
        Command::Push(args) => push::run(&broker()?, args, quiet).await,
        Command::Tail(args) => tail::run(&broker()?, args).await,
        Command::Replay(args) => admin::replay(Some(&broker()?), args, quiet).await,
        Command::Dlq { command } => admin::dlq(&broker()?, command, format, quiet).await,
        Command::Maintenance { command } => {
            admin::maintenance(&broker()?, command, format, quiet).await
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory as _, Parser as _};

    #[test]
    fn the_command_line_is_consistent() {
        super::Cli::command().debug_assert();
    }

    /// Words of a shell line: quotes group, `|`, `<`, `>` and a `#` comment
    /// end a command.
    fn commands(line: &str) -> Vec<Vec<String>> {
        let (mut commands, mut words, mut word) = (Vec::new(), Vec::new(), None::<String>);
        let mut quote = None;
        for c in line.chars() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), c) => word.get_or_insert_with(String::new).push(c),
                (None, '\'' | '"') => {
                    quote = Some(c);
                    word.get_or_insert_with(String::new);
                }
                (None, ' ') => words.extend(word.take()),
                (None, '#') if word.is_none() => break,
                (None, '|' | '<' | '>') => {
                    words.extend(word.take());
                    commands.push(std::mem::take(&mut words));
                }
                (None, c) => word.get_or_insert_with(String::new).push(c),
            }
        }
        words.extend(word);
        commands.push(words);
        commands
    }

    /// Every `queen ...` command the README shows parses.
    #[test]
    fn the_readmes_commands_parse() {
        let readme = include_str!("../../../README.md");
        let section = readme
            .split("## The command-line tool")
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .expect("README.md has a command-line tool section");
        let mut inside = false;
        let mut checked = 0;
        for line in section.lines() {
            if line.starts_with("```") {
                inside = !inside && line == "```sh";
                continue;
            }
            if !inside {
                continue;
            }
            for words in commands(line) {
                if words.first().map(String::as_str) != Some("queen") {
                    continue;
                }
                if let Err(err) = super::Cli::try_parse_from(&words) {
                    panic!("README: `{line}` does not parse:\n{err}");
                }
                checked += 1;
            }
        }
        assert!(checked >= 20, "only {checked} commands found");
        assert_eq!(
            commands("queen a 'b c' | queen d --e \"f\" < x # g"),
            vec![
                vec!["queen", "a", "b c"],
                vec!["queen", "d", "--e", "f"],
                vec!["x"]
            ]
        );
    }
}
