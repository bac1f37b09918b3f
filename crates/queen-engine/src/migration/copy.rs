//! One copy: lock and prepare the target, then `pg_dump` piped into
//! `pg_restore`.
//!
//! The programs get argument vectors (never a shell) and their connection
//! settings in libpq's environment variables, the passwords included, so no
//! password is on a command line `ps` shows; inherited `PG*` variables are
//! removed first. `pg_dump` writes the custom format, uncompressed, to a
//! pipe that is `pg_restore`'s standard input: nothing touches the disk.
//! `pg_restore` loads it in one transaction and stops at the first error,
//! so a failed restore leaves the target's Queen schemas absent, not half
//! made. Both programs' standard error is kept (its end) for the status;
//! `pg_dump --verbose` names each table as it goes, which is the step shown.
//!
//! The broker keeps no end of the pipe (the commands, which hold their
//! copy, are dropped once spawned), and when one program fails the other is
//! killed: a `pg_restore` that stops early must not leave `pg_dump` blocked
//! on a full pipe, and the copy with it.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, Command};

use super::{MigrationConfig, MigrationPhase, MigrationTarget, Shared, Tail, MESSAGES};

/// Connect to `target` and take its migration lock
/// ([`queen_sql::migration::TARGET_LOCK_KEY`]), held until the session is
/// dropped; `None`: another session holds it.
pub(super) async fn lock_target(
    target: &MigrationTarget,
) -> Result<Option<tokio_postgres::Client>, String> {
    let client = queen_sql::connect::connect_one(&target.config())
        .await
        .map_err(|error| {
            format!(
                "cannot connect to the target: {}",
                queen_sql::error_chain(&error)
            )
        })?;
    let locked = queen_sql::migration::try_lock_target(&client)
        .await
        .map_err(|error| format!("cannot lock the target: {}", queen_sql::error_chain(&error)))?;
    Ok(locked.then_some(client))
}

/// Run one copy to `target`, whose `locked` session holds its migration
/// lock (kept until the copy ends), updating `run` as it goes; the error is
/// the sentence the status shows.
pub(super) async fn copy(
    config: &MigrationConfig,
    target: &MigrationTarget,
    mut locked: tokio_postgres::Client,
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

    step(run, "Preparing the target");
    prepare_target(&config.source, &mut locked).await?;

    {
        let mut run = run.lock();
        run.phase = MigrationPhase::Restoring;
        "Streaming pg_dump | pg_restore".clone_into(&mut run.step);
    }
    let inherited = inherited_pg_vars();
    let mut dump = dump_command(&pg_dump, &config.source, skip, &inherited);
    let spawned = dump.spawn();
    drop(dump);
    let mut dumper =
        spawned.map_err(|error| format!("cannot run {}: {error}", pg_dump.display()))?;
    let pipe: Stdio = dumper
        .stdout
        .take()
        .ok_or("pg_dump has no output pipe")?
        .try_into()
        .map_err(|error| format!("cannot pipe pg_dump into pg_restore: {error}"))?;
    let mut restore = restore_command(&pg_restore, target, &inherited);
    restore.stdin(pipe);
    let spawned = restore.spawn();
    // The command holds the pipe's read end until it is dropped: kept, it
    // would be a reader that never reads, and a pg_dump whose pg_restore
    // exited would block on the full pipe instead of failing.
    drop(restore);
    let mut restorer = match spawned {
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
    let (dumped, restored) = wait_both(&mut dumper, &mut restorer).await;
    for log in [dump_log, restore_log].into_iter().flatten() {
        let _ = log.await;
    }
    let dumped = dumped.map_err(|error| format!("pg_dump: {error}"))?;
    let restored = restored.map_err(|error| format!("pg_restore: {error}"))?;
    {
        let run = run.lock();
        if let Some(error) = outcome(dumped, restored, &run.dump, &run.restore) {
            return Err(error);
        }
    }

    if skip.contains(&MESSAGES[0]) {
        step(run, "Emptying the partitions (messages skipped)");
        queen_sql::migration::messages_skipped(&locked)
            .await
            .map_err(|error| {
                format!(
                    "the copy is restored, but emptying its partitions after skipping the \
                     messages failed: {}",
                    queen_sql::error_chain(&error)
                )
            })?;
    }
    drop(locked);
    Ok(())
}

/// Wait for both programs; when one fails, kill the other (a `pg_restore`
/// that failed leaves `pg_dump` nothing to write to; a `pg_dump` that
/// failed leaves `pg_restore` a truncated archive).
async fn wait_both(
    dumper: &mut Child,
    restorer: &mut Child,
) -> (std::io::Result<ExitStatus>, std::io::Result<ExitStatus>) {
    let failed =
        |ended: &std::io::Result<ExitStatus>| !matches!(ended, Ok(status) if status.success());
    tokio::select! {
        dumped = dumper.wait() => {
            if failed(&dumped) {
                let _ = restorer.start_kill();
            }
            (dumped, restorer.wait().await)
        }
        restored = restorer.wait() => {
            if failed(&restored) {
                let _ = dumper.start_kill();
            }
            (dumper.wait().await, restored)
        }
    }
}

/// The error of a copy whose programs ended so, `None` when both
/// succeeded. The one that exited with a failure status is named first,
/// `pg_restore` when both did (`pg_dump` then mostly lost its reader), the
/// other added when it failed too; a program ended by a signal (killed
/// here after the other failed) is named only when nothing else failed.
fn outcome(
    dumped: ExitStatus,
    restored: ExitStatus,
    dump_output: &Tail,
    restore_output: &Tail,
) -> Option<String> {
    let dump = (!dumped.success()).then(|| failure("pg_dump", dumped, dump_output));
    let restore = (!restored.success()).then(|| failure("pg_restore", restored, restore_output));
    match (dump, restore) {
        (None, None) => None,
        (Some(one), None) | (None, Some(one)) => Some(one),
        (Some(dump), Some(restore)) => Some(match (dumped.code(), restored.code()) {
            (Some(_), Some(_)) => format!("{restore}; {dump}"),
            (Some(_), None) => dump,
            (None, _) => restore,
        }),
    }
}

/// `pg_dump` for `source`: the custom format, uncompressed, Queen's schemas
/// only, without the data of the `skip` tables, to a pipe.
fn dump_command(
    program: &Path,
    source: &tokio_postgres::Config,
    skip: &[&str],
    inherited: &[OsString],
) -> Command {
    let mut dump = Command::new(program);
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
    libpq_env(&mut dump, source, inherited);
    dump.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    dump
}

/// `pg_restore` into `target`, in one transaction, stopping at the first
/// error; its standard input is the caller's to set.
fn restore_command(program: &Path, target: &MigrationTarget, inherited: &[OsString]) -> Command {
    let mut restore = Command::new(program);
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
    libpq_env(&mut restore, &target.config(), inherited);
    restore
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    restore
}

/// The `PG*` variables of this process's environment, which the programs
/// must not inherit.
fn inherited_pg_vars() -> Vec<OsString> {
    std::env::vars_os()
        .map(|(key, _)| key)
        .filter(|key| key.as_bytes().starts_with(b"PG"))
        .collect()
}

/// Refuse a target that is the source, then drop its Queen schemas (the
/// restore creates them), unless objects outside them depend on them.
async fn prepare_target(
    source: &tokio_postgres::Config,
    target: &mut tokio_postgres::Client,
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
    let same = queen_sql::migration::session_seen(&*target, &marker)
        .await
        .map_err(|error| format!("cannot read the target: {}", queen_sql::error_chain(&error)))?;
    drop(source);
    if same {
        return Err("the target is this broker's own database".to_owned());
    }
    let dropped = queen_sql::migration::drop_queen_schemas(target)
        .await
        .map_err(|error| {
            format!(
                "cannot drop Queen's schemas on the target: {}",
                queen_sql::error_chain(&error)
            )
        })?;
    match dropped {
        queen_sql::migration::SchemaDrop::Dropped => Ok(()),
        queen_sql::migration::SchemaDrop::Dependents(objects) => Err(format!(
            "the target was left as it was: objects outside Queen's schemas depend on them \
             and replacing the schemas would drop them: {}",
            objects.join(", ")
        )),
    }
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
/// `PGCONNECT_TIMEOUT`), after removing the `inherited` `PG*` variables.
fn libpq_env(cmd: &mut Command, config: &tokio_postgres::Config, inherited: &[OsString]) {
    use tokio_postgres::config::{Host, SslMode};
    for key in inherited {
        cmd.env_remove(key);
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
    fn passwords_reach_the_programs_only_through_their_environment() {
        use std::ffi::OsStr;
        let mut source = tokio_postgres::Config::new();
        source
            .host("/run/source")
            .port(5433)
            .dbname("queen")
            .user("broker")
            .password("source secret");
        let target = MigrationTarget {
            host: "db.example".to_owned(),
            port: 5432,
            database: "copy".to_owned(),
            user: "migrator".to_owned(),
            password: "target secret".to_owned(),
            ssl: false,
        };
        let inherited: Vec<OsString> = ["PGSERVICE", "PGPASSFILE", "PGPASSWORD", "PGOPTIONS"]
            .map(OsString::from)
            .to_vec();
        let dump = dump_command(
            Path::new("/bin/pg_dump"),
            &source,
            &["queen.log_segments"],
            &inherited,
        );
        let restore = restore_command(Path::new("/bin/pg_restore"), &target, &inherited);
        for (command, password, host, database) in [
            (&dump, "source secret", "/run/source", "queen"),
            (&restore, "target secret", "db.example", "copy"),
        ] {
            let command = command.as_std();
            for arg in command.get_args() {
                let arg = arg.to_string_lossy();
                assert!(!arg.contains("secret"), "{arg:?} on the command line");
            }
            let envs: std::collections::HashMap<&OsStr, Option<&OsStr>> =
                command.get_envs().collect();
            let env = |key: &str| envs.get(OsStr::new(key)).copied();
            assert_eq!(env("PGPASSWORD"), Some(Some(OsStr::new(password))));
            assert_eq!(env("PGHOST"), Some(Some(OsStr::new(host))));
            assert_eq!(env("PGDATABASE"), Some(Some(OsStr::new(database))));
            // Inherited settings are removed, not passed on.
            for key in ["PGSERVICE", "PGPASSFILE", "PGOPTIONS"] {
                assert_eq!(env(key), Some(None), "{key}");
            }
        }
        let args = |command: &Command| -> Vec<String> {
            command
                .as_std()
                .get_args()
                .map(|arg| arg.to_string_lossy().into_owned())
                .collect()
        };
        assert!(args(&dump).contains(&"--exclude-table-data=queen.log_segments".to_owned()));
        assert!(args(&restore).ends_with(&["--dbname".to_owned(), "dbname='copy'".to_owned()]));
    }

    #[test]
    fn a_database_name_is_quoted_as_one_value() {
        assert_eq!(conninfo_quote("queen"), "'queen'");
        assert_eq!(conninfo_quote("x' host=evil \\"), "'x\\' host=evil \\\\'");
    }
}
