//! One copy: prepare the target, then `pg_dump` piped into `pg_restore`.
//!
//! The programs get argument vectors (never a shell) and their connection
//! settings in libpq's environment variables, the passwords included, so no
//! password is on a command line `ps` shows; inherited `PG*` variables are
//! removed first. `pg_dump` writes the custom format, uncompressed, to a
//! pipe that is `pg_restore`'s standard input: nothing touches the disk.
//! `pg_restore` loads it in one transaction and stops at the first error,
//! so a failed copy leaves the target's Queen schemas absent, not half
//! made. Both programs' standard error is kept (its end) for the status;
//! `pg_dump --verbose` names each table as it goes, which is the step shown.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::process::Stdio;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;

use super::{MigrationConfig, MigrationPhase, MigrationTarget, Shared, Tail};

/// Run one copy, updating `run` as it goes; the error is the sentence the
/// status shows.
pub(super) async fn copy(
    config: &MigrationConfig,
    target: &MigrationTarget,
    skip: &[&'static str],
    run: &Shared,
) -> Result<(), String> {
    let bin_dir = config.bin_dir.clone();
    let (pg_dump, pg_restore) = tokio::task::spawn_blocking(move || {
        let dir = bin_dir.as_deref();
        Ok::<_, queen_pg::PgError>((
            queen_pg::cluster::locate_program(dir, "pg_dump")?,
            queen_pg::cluster::locate_program(dir, "pg_restore")?,
        ))
    })
    .await
    .map_err(|_| "the program search failed".to_owned())?
    .map_err(|error| error.to_string())?;

    step(run, "Connecting to the target");
    prepare_target(&config.source, target).await?;

    {
        let mut run = run.lock();
        run.phase = MigrationPhase::Restoring;
        "Streaming pg_dump | pg_restore".clone_into(&mut run.step);
    }
    let mut dump = Command::new(&pg_dump);
    dump.args([
        "--format=custom",
        "--compress=0",
        "--no-owner",
        "--no-privileges",
        "--verbose",
    ]);
    for schema in queen_sql::migration::SCHEMAS {
        dump.arg(format!("--schema={schema}"));
    }
    for table in skip {
        dump.arg(format!("--exclude-table-data={table}"));
    }
    libpq_env(&mut dump, &config.source);
    dump.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut dumper = dump
        .spawn()
        .map_err(|error| format!("cannot run {}: {error}", pg_dump.display()))?;
    let pipe: Stdio = dumper
        .stdout
        .take()
        .ok_or("pg_dump has no output pipe")?
        .try_into()
        .map_err(|error| format!("cannot pipe pg_dump into pg_restore: {error}"))?;

    let mut restore = Command::new(&pg_restore);
    restore.args([
        "--no-owner",
        "--no-privileges",
        "--exit-on-error",
        "--single-transaction",
        "--verbose",
    ]);
    // A connection string holding only the database name, quoted, so a
    // name is never read as settings; the rest is in the environment.
    restore
        .arg("--dbname")
        .arg(format!("dbname={}", conninfo_quote(&target.database)));
    libpq_env(&mut restore, &target.config());
    restore
        .stdin(pipe)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut restorer = match restore.spawn() {
        Ok(child) => child,
        Err(error) => {
            let _ = dumper.kill().await;
            return Err(format!("cannot run {}: {error}", pg_restore.display()));
        }
    };

    let dump_log = dumper.stderr.take().map(|err| {
        let run = run.clone();
        tokio::spawn(follow(err, run, Output::Dump))
    });
    let restore_log = restorer.stderr.take().map(|err| {
        let run = run.clone();
        tokio::spawn(follow(err, run, Output::Restore))
    });
    let (dumped, restored) = tokio::join!(dumper.wait(), restorer.wait());
    for log in [dump_log, restore_log].into_iter().flatten() {
        let _ = log.await;
    }
    let dumped = dumped.map_err(|error| format!("pg_dump: {error}"))?;
    let restored = restored.map_err(|error| format!("pg_restore: {error}"))?;
    let run = run.lock();
    // pg_restore's failure is the cause when both fail (pg_dump then only
    // lost its reader).
    if !restored.success() {
        return Err(failure("pg_restore", restored, &run.restore));
    }
    if !dumped.success() {
        return Err(failure("pg_dump", dumped, &run.dump));
    }
    Ok(())
}

/// Connect to the target, refuse it if it is the source, and drop its
/// Queen schemas (the restore creates them).
async fn prepare_target(
    source: &tokio_postgres::Config,
    target: &MigrationTarget,
) -> Result<(), String> {
    let marker = format!("queen-migration-{}", uuid::Uuid::new_v4());
    let mut source = source.clone();
    source.application_name(&marker);
    let source = queen_sql::connect::connect_one(&source)
        .await
        .map_err(|error| {
            format!(
                "cannot connect to the source: {}",
                queen_sql::error_chain(&error)
            )
        })?;
    let target_client = queen_sql::connect::connect_one(&target.config())
        .await
        .map_err(|error| {
            format!(
                "cannot connect to the target: {}",
                queen_sql::error_chain(&error)
            )
        })?;
    let same = queen_sql::migration::session_seen(&target_client, &marker)
        .await
        .map_err(|error| format!("cannot read the target: {}", queen_sql::error_chain(&error)))?;
    drop(source);
    if same {
        return Err("the target is this broker's own database".to_owned());
    }
    queen_sql::migration::drop_queen_schemas(&target_client)
        .await
        .map_err(|error| {
            format!(
                "cannot drop Queen's schemas on the target: {}",
                queen_sql::error_chain(&error)
            )
        })
}

fn step(run: &Shared, what: &str) {
    what.clone_into(&mut run.lock().step);
}

/// "`program` exited with status N: its last error line".
fn failure(program: &str, status: std::process::ExitStatus, output: &Tail) -> String {
    let status = status
        .code()
        .map_or_else(|| "a signal".to_owned(), |code| format!("status {code}"));
    match output.last_error() {
        Some(line) => format!("{program} exited with {status}: {line}"),
        None => format!("{program} exited with {status}"),
    }
}

/// Whose standard error a reader follows.
#[derive(Clone, Copy)]
enum Output {
    Dump,
    Restore,
}

/// Append what `from` writes to its tail in `run` until it closes; each
/// complete `pg_dump` line becomes the step.
async fn follow(mut from: impl AsyncRead + Unpin, run: Shared, output: Output) {
    let mut buf = vec![0u8; 4096];
    loop {
        let read = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(read) => read,
        };
        let text = String::from_utf8_lossy(&buf[..read]);
        let mut run = run.lock();
        match output {
            Output::Dump => {
                run.dump.push(&text);
                let last = run
                    .dump
                    .0
                    .lines()
                    .rev()
                    .find_map(|line| line.strip_prefix("pg_dump: "))
                    .map(|line| format!("Streaming pg_dump | pg_restore: {line}"));
                if let Some(last) = last {
                    run.step = last;
                }
            }
            Output::Restore => run.restore.push(&text),
        }
    }
}

/// `value` as a quoted libpq connection-string value.
fn conninfo_quote(value: &str) -> String {
    let mut quoted = String::with_capacity(value.len() + 2);
    quoted.push('\'');
    for c in value.chars() {
        if c == '\'' || c == '\\' {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted.push('\'');
    quoted
}

/// Hand `config` to a libpq program through its environment (`PGHOST`,
/// `PGPORT`, `PGDATABASE`, `PGUSER`, `PGPASSWORD`, `PGSSLMODE`,
/// `PGCONNECT_TIMEOUT`), after removing every inherited `PG*` variable.
fn libpq_env(cmd: &mut Command, config: &tokio_postgres::Config) {
    use tokio_postgres::config::{Host, SslMode};
    for (key, _) in std::env::vars_os() {
        if key.as_bytes().starts_with(b"PG") {
            cmd.env_remove(key);
        }
    }
    match config.get_hosts().first() {
        Some(Host::Tcp(host)) => {
            cmd.env("PGHOST", host);
        }
        Some(Host::Unix(dir)) => {
            cmd.env("PGHOST", dir);
        }
        None => {}
    }
    if let Some(port) = config.get_ports().first() {
        cmd.env("PGPORT", port.to_string());
    }
    if let Some(dbname) = config.get_dbname() {
        cmd.env("PGDATABASE", dbname);
    }
    if let Some(user) = config.get_user() {
        cmd.env("PGUSER", user);
    }
    if let Some(password) = config.get_password() {
        cmd.env(
            "PGPASSWORD",
            OsString::from(std::ffi::OsStr::from_bytes(password)),
        );
    }
    let sslmode = match config.get_ssl_mode() {
        SslMode::Disable => "disable",
        SslMode::Require => "require",
        _ => "prefer",
    };
    cmd.env("PGSSLMODE", sslmode);
    let timeout = config
        .get_connect_timeout()
        .map_or(
            super::CONNECT_TIMEOUT.as_secs(),
            std::time::Duration::as_secs,
        )
        .max(1);
    cmd.env("PGCONNECT_TIMEOUT", timeout.to_string());
    cmd.env("PGAPPNAME", "queen-migration");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_name_is_quoted_as_one_value() {
        assert_eq!(conninfo_quote("queen"), "'queen'");
        assert_eq!(conninfo_quote("x' host=evil \\"), "'x\\' host=evil \\\\'");
    }
}
