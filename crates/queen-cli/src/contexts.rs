//! `queen config ...`: the reference CLI's context commands over the file
//! `config.rs` reads. No command prints a token: `view` shows literal ones
//! as `literal:<redacted>`, `get-contexts` only how each is kept.

use std::path::Path;

use serde_json::{json, Value};

use crate::config::{self, ConfigFile, Context};
use crate::error::CliError;
use crate::output::{self, col, Format};

/// `config`'s subcommands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum ConfigCommand {
    /// Print the config file, tokens redacted.
    View,
    /// Print the current context's name.
    #[command(visible_alias = "current")]
    CurrentContext,
    /// List the contexts.
    #[command(visible_aliases = ["list", "ls"])]
    GetContexts,
    /// Add or update a context: its server is the global --server, its token
    /// the global --token (stored as literal:, in a 0600 file) or --token-ref.
    /// The first context added becomes the current one.
    SetContext {
        /// The context's name.
        name: String,
        /// Where the token is: env ($QUEEN_TOKEN), literal:TOKEN, or
        /// file:///ABSOLUTE/PATH (its first line).
        #[arg(long, value_name = "REF", conflicts_with = "token")]
        token_ref: Option<String>,
    },
    /// Make a context the current one.
    UseContext {
        /// The context's name.
        name: String,
    },
    /// Remove a context.
    #[command(visible_alias = "rm")]
    DeleteContext {
        /// The context's name.
        name: String,
    },
}

/// What `set-context` takes from the global flags.
pub(crate) struct Given<'a> {
    pub(crate) server: Option<&'a str>,
    pub(crate) token: Option<&'a str>,
    pub(crate) insecure: bool,
}

/// Run a `config` subcommand on the file at `path`.
pub(crate) fn run(
    path: &Path,
    command: &ConfigCommand,
    given: &Given<'_>,
    format: Format,
    quiet: bool,
) -> Result<(), CliError> {
    let mut file = ConfigFile::load(path)?;
    match command {
        ConfigCommand::View => {
            let text =
                serde_norway::to_string(&file.redacted()).map_err(|err| CliError::Config {
                    path: path.to_owned(),
                    problem: err.to_string(),
                })?;
            print!("{text}");
            Ok(())
        }
        ConfigCommand::CurrentContext => {
            if file.current_context.is_empty() {
                return Err(CliError::Nothing("no current context".to_owned()));
            }
            println!("{}", file.current_context);
            Ok(())
        }
        ConfigCommand::GetContexts => {
            let rows: Vec<Value> = file
                .contexts
                .iter()
                .map(|c| {
                    json!({
                        "current": c.name == file.current_context,
                        "name": c.name,
                        "server": c.server,
                        "auth": config::auth_label(&c.token_ref),
                        "insecure": c.insecure,
                    })
                })
                .collect();
            match format {
                Format::Json => output::json(&Value::Array(rows)),
                Format::Table => {
                    let rows: Vec<Value> = rows
                        .into_iter()
                        .map(|mut row| {
                            row["current"] = json!(if row["current"] == true { "*" } else { "" });
                            row
                        })
                        .collect();
                    output::table(
                        &[
                            col("CURRENT", "/current"),
                            col("NAME", "/name"),
                            col("SERVER", "/server"),
                            col("AUTH", "/auth"),
                        ],
                        &rows,
                    )
                }
            }
        }
        ConfigCommand::SetContext { name, token_ref } => {
            if name.trim().is_empty() {
                return Err(CliError::Usage("a context needs a name".to_owned()));
            }
            let mut context = file.find(name).cloned().unwrap_or_else(|| Context {
                name: name.clone(),
                ..Context::default()
            });
            if let Some(server) = given.server {
                context.server = server.to_owned();
            }
            if given.insecure {
                context.insecure = true;
            }
            if let Some(token_ref) = token_ref {
                config::check_token_ref(token_ref)?;
                context.token_ref = token_ref.clone();
            }
            if let Some(token) = given.token {
                context.token_ref = format!("literal:{token}");
            }
            if context.server.is_empty() {
                return Err(CliError::Usage(format!(
                    "context {name:?} has no server: pass --server URL"
                )));
            }
            file.upsert(context);
            if file.current_context.is_empty() {
                file.current_context = name.clone();
            }
            file.save(path)?;
            if !quiet {
                println!("context {name:?} saved in {}", path.display());
            }
            Ok(())
        }
        ConfigCommand::UseContext { name } => {
            if file.find(name).is_none() {
                return Err(CliError::Usage(format!(
                    "no context named {name:?} in {}",
                    path.display()
                )));
            }
            file.current_context = name.clone();
            file.save(path)?;
            if !quiet {
                println!("switched to context {name:?}");
            }
            Ok(())
        }
        ConfigCommand::DeleteContext { name } => {
            if !file.remove(name) {
                return Err(CliError::Usage(format!(
                    "no context named {name:?} in {}",
                    path.display()
                )));
            }
            file.save(path)?;
            if !quiet {
                println!("context {name:?} removed");
            }
            Ok(())
        }
    }
}
