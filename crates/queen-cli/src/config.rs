//! Contexts: named brokers (server URL, token reference) in a YAML file, the
//! reference CLI's layout, so one file serves both tools:
//!
//! ```yaml
//! current-context: local
//! contexts:
//!   - name: local
//!     server: http://localhost:6632
//!     token-ref: file:///home/me/.queen/local.jwt
//!     insecure: false
//! ```
//!
//! The file is `--config PATH`, else `$QUEEN_CONFIG`, else
//! `~/.queen/config.yaml`; a missing file is an empty one. It is written
//! atomically (a temporary file renamed over it) with mode 0600 in a 0700
//! directory, because it may hold a token.
//!
//! The connection of one run, lowest precedence first: the file's
//! `current-context`, `$QUEEN_CONTEXT`, `--context`; then `$QUEEN_SERVER` and
//! `$QUEEN_TOKEN`; then `--server` and `--token`.
//!
//! A `token-ref` is empty (no token), `env` (`$QUEEN_TOKEN`), `literal:TOKEN`,
//! or `file:///ABSOLUTE/PATH` (the file's first line). The reference also
//! reads `keychain://NAME`; this tool reads no OS keychain (brokers are run
//! from headless machines and containers without one) and says so.

use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::CliError;

/// The on-disk file.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct ConfigFile {
    /// The context used when none is named.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) current_context: String,
    /// Every context, in the order they were added.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) contexts: Vec<Context>,
}

/// One named broker.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct Context {
    pub(crate) name: String,
    /// The broker's base URL (without `/api/v1`).
    #[serde(default)]
    pub(crate) server: String,
    /// Where the token is: see the module doc.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) token_ref: String,
    /// Skip TLS certificate verification (test brokers only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) insecure: bool,
}

/// The environment variables the tool reads.
pub(crate) const ENV_CONFIG: &str = "QUEEN_CONFIG";
pub(crate) const ENV_CONTEXT: &str = "QUEEN_CONTEXT";
pub(crate) const ENV_SERVER: &str = "QUEEN_SERVER";
pub(crate) const ENV_TOKEN: &str = "QUEEN_TOKEN";

/// What the command line says about the connection.
#[derive(Debug, Default)]
pub(crate) struct Overrides<'a> {
    pub(crate) config: Option<&'a Path>,
    pub(crate) context: Option<&'a str>,
    pub(crate) server: Option<&'a str>,
    pub(crate) token: Option<&'a str>,
    pub(crate) insecure: bool,
}

/// The connection of this run.
#[derive(Clone)]
pub(crate) struct Target {
    pub(crate) server: String,
    pub(crate) token: Option<String>,
    pub(crate) insecure: bool,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("server", &self.server)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("insecure", &self.insecure)
            .finish()
    }
}

/// The config file's path: `--config`, `$QUEEN_CONFIG`, `~/.queen/config.yaml`.
pub(crate) fn path(flag: Option<&Path>) -> Result<PathBuf, CliError> {
    if let Some(path) = flag {
        return Ok(path.to_owned());
    }
    if let Some(path) = std::env::var_os(ENV_CONFIG).filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    let home = std::env::home_dir()
        .filter(|h| !h.as_os_str().is_empty())
        .ok_or_else(|| {
            CliError::Usage(format!(
                "no home directory to find the config file in: pass --config PATH or set {ENV_CONFIG}"
            ))
        })?;
    Ok(home.join(".queen").join("config.yaml"))
}

impl ConfigFile {
    /// Read the file at `path`; a missing file is an empty one.
    pub(crate) fn load(path: &Path) -> Result<ConfigFile, CliError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return Ok(ConfigFile::default())
            }
            Err(err) => {
                return Err(CliError::Config {
                    path: path.to_owned(),
                    problem: err.to_string(),
                })
            }
        };
        if text.trim().is_empty() {
            return Ok(ConfigFile::default());
        }
        serde_norway::from_str(&text).map_err(|err| CliError::Config {
            path: path.to_owned(),
            problem: err.to_string(),
        })
    }

    /// Write the file at `path`: 0600, atomically, its directory made 0700.
    pub(crate) fn save(&self, path: &Path) -> Result<(), CliError> {
        let problem = |err: &dyn std::fmt::Display| CliError::Config {
            path: path.to_owned(),
            problem: err.to_string(),
        };
        let text = serde_norway::to_string(self).map_err(|e| problem(&e))?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.exists() {
                std::fs::create_dir_all(dir).map_err(|e| problem(&e))?;
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                    .map_err(|e| problem(&e))?;
            }
        }
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| problem(&e))?;
        // An existing temporary file keeps its mode: set it again.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(|e| problem(&e))?;
        file.write_all(text.as_bytes()).map_err(|e| problem(&e))?;
        file.sync_all().map_err(|e| problem(&e))?;
        std::fs::rename(&tmp, path).map_err(|e| problem(&e))
    }

    /// The context called `name`.
    pub(crate) fn find(&self, name: &str) -> Option<&Context> {
        self.contexts.iter().find(|c| c.name == name)
    }

    /// Add `context`, or replace the one of its name.
    pub(crate) fn upsert(&mut self, context: Context) {
        match self.contexts.iter_mut().find(|c| c.name == context.name) {
            Some(slot) => *slot = context,
            None => self.contexts.push(context),
        }
    }

    /// Remove the context called `name`; `false` if there was none.
    pub(crate) fn remove(&mut self, name: &str) -> bool {
        let before = self.contexts.len();
        self.contexts.retain(|c| c.name != name);
        if self.current_context == name {
            self.current_context.clear();
        }
        self.contexts.len() != before
    }

    /// A copy fit to print: literal tokens replaced by `<redacted>`.
    pub(crate) fn redacted(&self) -> ConfigFile {
        let mut copy = self.clone();
        for context in &mut copy.contexts {
            context.token_ref = redact(&context.token_ref);
        }
        copy
    }
}

/// A token reference fit to print.
pub(crate) fn redact(token_ref: &str) -> String {
    if token_ref.starts_with("literal:") {
        "literal:<redacted>".to_owned()
    } else {
        token_ref.to_owned()
    }
}

/// How a context's token is kept, for listings.
pub(crate) fn auth_label(token_ref: &str) -> &'static str {
    match token_ref
        .split_once(':')
        .map_or(token_ref, |(scheme, _)| scheme)
    {
        "" => "none",
        "env" => "env",
        "literal" => "literal",
        "file" => "file",
        "keychain" => "keychain",
        _ => "unknown",
    }
}

/// The connection of this run (the module doc gives the precedence).
pub(crate) fn resolve(overrides: &Overrides<'_>) -> Result<Target, CliError> {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let path = path(overrides.config)?;
    let file = ConfigFile::load(&path)?;
    let named = overrides
        .context
        .map(str::to_owned)
        .or_else(|| env(ENV_CONTEXT));
    let context = match &named {
        Some(name) => Some(file.find(name).ok_or_else(|| {
            CliError::Usage(format!("no context named {name:?} in {}", path.display()))
        })?),
        None if file.current_context.is_empty() => None,
        None => file.find(&file.current_context),
    };
    let mut server = context.map(|c| c.server.clone()).unwrap_or_default();
    let mut token = match context {
        Some(c) => read_token(&c.token_ref, &c.name)?,
        None => None,
    };
    if let Some(value) = env(ENV_SERVER) {
        server = value;
    }
    if let Some(value) = env(ENV_TOKEN) {
        token = Some(value);
    }
    if let Some(value) = overrides.server {
        server = value.to_owned();
    }
    if let Some(value) = overrides.token {
        token = Some(value.to_owned());
    }
    if server.is_empty() {
        return Err(CliError::Usage(format!(
            "no broker configured: pass --server URL, set {ENV_SERVER}, or add a context \
             with `queen config set-context NAME --server URL`"
        )));
    }
    Ok(Target {
        server,
        token: token.filter(|t| !t.is_empty()),
        insecure: overrides.insecure || context.is_some_and(|c| c.insecure),
    })
}

/// The token a context's `token-ref` points at.
fn read_token(token_ref: &str, context: &str) -> Result<Option<String>, CliError> {
    if token_ref.is_empty() {
        return Ok(None);
    }
    if token_ref == "env" {
        return Ok(std::env::var(ENV_TOKEN).ok());
    }
    if let Some(token) = token_ref.strip_prefix("literal:") {
        return Ok(Some(token.to_owned()));
    }
    if let Some(file) = token_ref.strip_prefix("file://") {
        let text = std::fs::read_to_string(file).map_err(|err| {
            CliError::Usage(format!(
                "context {context:?}: cannot read its token file {file}: {err}"
            ))
        })?;
        return Ok(text.lines().next().map(|line| line.trim().to_owned()));
    }
    if token_ref.starts_with("keychain://") {
        return Err(CliError::Usage(format!(
            "context {context:?}: its token is in the OS keychain ({token_ref}), which queen does \
             not read; store it with `queen config set-context {context} --token-ref \
             file:///PATH` (or --token)"
        )));
    }
    Err(CliError::Usage(format!(
        "context {context:?}: unknown token-ref {:?} (expected env, literal:..., file:///...)",
        redact(token_ref)
    )))
}

/// Check a `--token-ref` before it is stored.
pub(crate) fn check_token_ref(token_ref: &str) -> Result<(), CliError> {
    let known = token_ref.is_empty()
        || token_ref == "env"
        || token_ref.starts_with("literal:")
        || token_ref
            .strip_prefix("file://")
            .is_some_and(|p| p.starts_with('/'));
    if known {
        Ok(())
    } else {
        Err(CliError::Usage(format!(
            "--token-ref {:?}: expected env, literal:TOKEN or file:///ABSOLUTE/PATH",
            redact(token_ref)
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_layout_round_trips_and_redacts_literal_tokens() {
        let text = "current-context: prod\ncontexts:\n  - name: prod\n    server: https://q:6632\n    token-ref: literal:s3cret\n  - name: local\n    server: http://localhost:6632\n    insecure: true\n";
        let file: ConfigFile = serde_norway::from_str(text).unwrap();
        assert_eq!(file.current_context, "prod");
        assert_eq!(file.contexts.len(), 2);
        assert!(file.contexts[1].insecure);
        let shown = serde_norway::to_string(&file.redacted()).unwrap();
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("literal:<redacted>"), "{shown}");
        let again: ConfigFile =
            serde_norway::from_str(&serde_norway::to_string(&file).unwrap()).unwrap();
        assert_eq!(again.contexts[0].token_ref, "literal:s3cret");
    }

    #[test]
    fn token_refs_are_read_or_refused_with_a_reason() {
        assert_eq!(read_token("", "c").unwrap(), None);
        assert_eq!(
            read_token("literal:abc", "c").unwrap().as_deref(),
            Some("abc")
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t.jwt");
        std::fs::write(&file, "tok\nignored\n").unwrap();
        let token_ref = format!("file://{}", file.display());
        assert_eq!(read_token(&token_ref, "c").unwrap().as_deref(), Some("tok"));
        let err = read_token("keychain://prod", "prod")
            .unwrap_err()
            .to_string();
        assert!(err.contains("keychain"), "{err}");
        let err = read_token("literal-ish", "c").unwrap_err().to_string();
        assert!(err.contains("unknown token-ref"), "{err}");
        assert!(check_token_ref("file://relative").is_err());
        assert!(check_token_ref("env").is_ok());
    }

    #[test]
    fn save_writes_a_private_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/config.yaml");
        let mut file = ConfigFile::default();
        file.upsert(Context {
            name: "a".into(),
            server: "http://x".into(),
            ..Context::default()
        });
        file.save(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dir_mode = std::fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(dir_mode, 0o700);
        assert_eq!(
            ConfigFile::load(&path).unwrap().contexts[0].server,
            "http://x"
        );
    }
}
