//! The README's commands, run as written (`cargo xtask readme`, and the
//! `#[test]` below, so `cargo xtask ci` runs it too).
//!
//! A newcomer copies two commands from README.md's "The two commands" section:
//! one starts the broker, one runs the test suite. This check reads them from
//! the README itself, so the README cannot drift from what is tested:
//!
//! 1. the test command is exactly what `.ci/run` executes;
//! 2. the start command, run word for word from the root of a clean copy of the
//!    working tree (tracked and untracked, not ignored, files; no
//!    `queen-data`), builds and starts the broker on its own managed
//!    PostgreSQL: `/health` answers 200, the postmaster named in
//!    `postmaster.pid` is alive; after SIGTERM the broker exits 0 and that
//!    postmaster is gone;
//! 3. as root, the binary the start command built is started again, as an
//!    ordinary user of the machine (if it has one) from a clean directory of
//!    theirs, with the same checks: the machine's Rust toolchain lives under
//!    root's home, so such a user could not run `cargo` itself;
//! 4. `queen-inspect --help` runs by the command the README gives for it.
//!
//! Only the environment differs from a newcomer's shell: `PORT` is a free port,
//! `HOST` is loopback, the database variables are cleared (so the broker
//! manages its own PostgreSQL), and `CARGO_TARGET_DIR` is the workspace's own
//! `target/` so the copy's build reuses the compiled dependencies.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The section of README.md that holds the two commands.
const SECTION: &str = "## The two commands";

/// The broker's settings as `config.rs` defines them (its `env = "..."`),
/// read from the source at build time: a newcomer's shell sets none of them,
/// so the check clears every one (but `RUST_LOG`) and cannot miss a new one.
fn cleared_vars() -> Vec<&'static str> {
    include_str!("../../crates/queen-server/src/config.rs")
        .split("env = \"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .filter(|var| *var != "RUST_LOG")
        .collect()
}

/// How long the start command may take to answer `/health`: a release build
/// from nothing takes about 3 minutes on a 2-core machine.
const START_LIMIT: Duration = Duration::from_secs(20 * 60);

/// The README's commands.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ReadmeCommands {
    /// Starts the broker.
    pub(crate) start: String,
    /// Runs the whole test suite.
    pub(crate) test: String,
    /// Prints `queen-inspect`'s help.
    pub(crate) inspect_help: String,
}

/// Read the commands out of README.md's text.
pub(crate) fn commands(readme: &str) -> Result<ReadmeCommands, String> {
    let start_at = readme
        .find(SECTION)
        .ok_or_else(|| format!("README.md has no `{SECTION}` section"))?;
    let body = &readme[start_at + SECTION.len()..];
    let section = body.find("\n## ").map_or(body, |end| &body[..end]);
    let blocks = sh_blocks(section);
    // The first two lines are the two commands (later ones, such as the
    // health probe, show what to do next).
    let [start, test, ..] = blocks.as_slice() else {
        return Err(format!(
            "`{SECTION}` should open with two ```sh commands (start, then test), found {}: \
             {blocks:?}",
            blocks.len()
        ));
    };
    let inspect = sh_blocks(readme)
        .into_iter()
        .find(|line| line.contains("--bin queen-inspect"))
        .ok_or("README.md gives no command for queen-inspect (`--bin queen-inspect`)")?;
    let prefix = inspect
        .split_once(" -- ")
        .map_or(inspect.as_str(), |(prefix, _)| prefix);
    Ok(ReadmeCommands {
        start: start.clone(),
        test: test.clone(),
        inspect_help: format!("{prefix} -- --help"),
    })
}

/// The command lines of every ```sh block, comments and blank lines left out.
fn sh_blocks(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") {
            inside = !inside && trimmed == "```sh";
            continue;
        }
        if inside && !trimmed.is_empty() && !trimmed.starts_with('#') {
            let command = trimmed.split(" #").next().unwrap_or(trimmed).trim();
            lines.push(command.to_owned());
        }
    }
    lines
}

/// Words of a command line; refuses anything a plain split would get wrong.
fn words(line: &str) -> Result<Vec<&str>, String> {
    if line.contains(['\'', '"', '$', '|', '&', ';', '<', '>', '`', '\\']) {
        return Err(format!(
            "`{line}` needs a shell; keep the README's commands plain words"
        ));
    }
    Ok(line.split_whitespace().collect())
}

/// Every check of this module; `Err` says what failed, with the logs.
pub(crate) fn check(root: &Path) -> Result<(), String> {
    let readme = std::fs::read_to_string(root.join("README.md"))
        .map_err(|error| format!("cannot read README.md: {error}"))?;
    let commands = commands(&readme)?;
    check_ci_runs(root, &commands.test)?;

    let work = root.join("target/readme-check");
    let tree = work.join("tree");
    copy_working_tree(root, &tree)?;
    let target_dir = root.join("target");

    let started = Instant::now();
    let mut cmd = command_for(&commands.start)?;
    cmd.current_dir(&tree).env("CARGO_TARGET_DIR", &target_dir);
    let data_dir = start_and_stop(cmd, &work.join("start.log"), START_LIMIT)?;
    eprintln!(
        "xtask readme: `{}` started and stopped the broker in {:.0?} (data in {})",
        commands.start,
        started.elapsed(),
        data_dir.display()
    );
    if data_dir.starts_with("/var/lib/queen") {
        // The checkout sits where `postgres` cannot reach (a root home), so the
        // broker moved its cluster; that cluster is this check's, so it goes.
        eprintln!(
            "xtask readme: removing the fallback cluster {}",
            data_dir.display()
        );
        let _ = std::fs::remove_dir_all(&data_dir);
    }

    if is_root() {
        match ordinary_user() {
            Some(user) => as_ordinary_user(&user, &target_dir, &work)?,
            None => eprintln!("xtask readme: no ordinary user on this machine; skipped that run"),
        }
    }

    let output = command_for(&commands.inspect_help)?
        .current_dir(&tree)
        .env("CARGO_TARGET_DIR", &target_dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|error| format!("cannot run `{}`: {error}", commands.inspect_help))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() || !stdout.contains("Usage: queen-inspect") {
        return Err(format!(
            "`{}` failed ({}):\n{stdout}\n{}",
            commands.inspect_help,
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let _ = std::fs::remove_dir_all(&tree);
    Ok(())
}

/// `.ci/run` must execute exactly the README's test command.
fn check_ci_runs(root: &Path, test: &str) -> Result<(), String> {
    let script = std::fs::read_to_string(root.join(".ci/run"))
        .map_err(|error| format!("cannot read .ci/run: {error}"))?;
    let wanted = format!("exec {test}");
    if script.lines().any(|line| line.trim() == wanted) {
        Ok(())
    } else {
        Err(format!(
            ".ci/run does not run the README's test command (`{wanted}`):\n{script}"
        ))
    }
}

/// A command for a README line, with the environment of a clean shell.
fn command_for(line: &str) -> Result<Command, String> {
    let words = words(line)?;
    let (program, args) = words
        .split_first()
        .ok_or_else(|| "an empty command in README.md".to_owned())?;
    let mut cmd = Command::new(program);
    cmd.args(args);
    for var in cleared_vars() {
        cmd.env_remove(var);
    }
    // What the test harness's cargo set for this process, not for a user's shell.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("CARGO_") && key != "CARGO_HOME" {
            cmd.env_remove(&*key);
        }
    }
    Ok(cmd)
}

/// Copy the files git knows of (tracked, and untracked but not ignored) from
/// `root` into a fresh `tree`, keeping their modification times so a second
/// run's build finds the copy up to date.
fn copy_working_tree(root: &Path, tree: &Path) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(tree);
    let listed = Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .current_dir(root)
        .output()
        .map_err(|error| format!("cannot run git ls-files: {error}"))?;
    if !listed.status.success() {
        return Err(format!(
            "git ls-files failed: {}",
            String::from_utf8_lossy(&listed.stderr)
        ));
    }
    for name in listed.stdout.split(|byte| *byte == 0) {
        let Ok(name) = std::str::from_utf8(name) else {
            continue;
        };
        let from = root.join(name);
        let Ok(meta) = std::fs::metadata(&from) else {
            continue; // deleted in the working tree
        };
        if name.is_empty() || !meta.is_file() {
            continue;
        }
        let to = tree.join(name);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|error| format!("cannot create {}: {error}", parent.display()))?;
        }
        std::fs::copy(&from, &to).map_err(|error| format!("cannot copy {name}: {error}"))?;
        if let Ok(modified) = meta.modified() {
            let _ = std::fs::File::options()
                .write(true)
                .open(&to)
                .and_then(|file| file.set_modified(modified));
        }
    }
    Ok(())
}

/// A running child, killed if the check gives up on it.
struct Running {
    child: Child,
    log: PathBuf,
}

impl Running {
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = signal(self.child.id(), "TERM");
            let deadline = Instant::now() + Duration::from_secs(30);
            while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Start `cmd` on a free loopback port, wait for `/health` to answer 200,
/// check its managed postmaster runs, stop it with SIGTERM and check both are
/// gone. Returns the managed data directory the broker logged.
fn start_and_stop(mut cmd: Command, log: &Path, limit: Duration) -> Result<PathBuf, String> {
    let port = free_port()?;
    let log_file = std::fs::File::create(log)
        .map_err(|error| format!("cannot create {}: {error}", log.display()))?;
    let err_file = log_file
        .try_clone()
        .map_err(|error| format!("cannot clone a log handle: {error}"))?;
    cmd.env("PORT", port.to_string())
        .env("HOST", "127.0.0.1")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(log_file)
        .stderr(err_file);
    let child = cmd
        .spawn()
        .map_err(|error| format!("cannot start {cmd:?}: {error}"))?;
    let mut running = Running {
        child,
        log: log.to_owned(),
    };
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(Some(status)) = running.child.try_wait() {
            return Err(format!(
                "{cmd:?} exited ({status}) before /health answered:\n{}",
                running.log_tail()
            ));
        }
        if health_status(port) == Some(200) {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{cmd:?}: /health did not answer 200 within {limit:?}:\n{}",
                running.log_tail()
            ));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let data_dir = text
        .lines()
        .filter(|line| line.contains("managed PostgreSQL is running"))
        .find_map(|line| {
            line.split_whitespace()
                .find_map(|word| word.strip_prefix("data_dir="))
        })
        .map(PathBuf::from)
        .ok_or_else(|| format!("the broker did not log its managed data directory:\n{text}"))?;
    let postmaster = std::fs::read_to_string(data_dir.join("postmaster.pid"))
        .ok()
        .and_then(|pid_file| pid_file.lines().next()?.trim().parse::<u32>().ok())
        .ok_or_else(|| format!("no postmaster.pid in {}", data_dir.display()))?;
    if !Path::new(&format!("/proc/{postmaster}")).exists() {
        return Err(format!("postmaster {postmaster} is not running"));
    }

    signal(running.child.id(), "TERM")?;
    let stop_deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Ok(Some(status)) = running.child.try_wait() {
            break status;
        }
        if Instant::now() > stop_deadline {
            return Err(format!(
                "the broker ignored SIGTERM for 60 s:\n{}",
                running.log_tail()
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    if !status.success() {
        return Err(format!(
            "the broker exited with {status} after SIGTERM:\n{}",
            running.log_tail()
        ));
    }
    let gone_deadline = Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{postmaster}")).exists() {
        if Instant::now() > gone_deadline {
            return Err(format!(
                "the managed PostgreSQL (postmaster {postmaster}) still runs after the broker stopped:\n{}",
                running.log_tail()
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if data_dir.join("postmaster.pid").exists() {
        return Err(format!(
            "{} still holds postmaster.pid: PostgreSQL did not shut down cleanly",
            data_dir.display()
        ));
    }
    Ok(data_dir)
}

/// Start the release binary the start command built as `user`, from a clean
/// directory of theirs, and run the same checks.
fn as_ordinary_user(user: &OrdinaryUser, target_dir: &Path, work: &Path) -> Result<(), String> {
    let OrdinaryUser { name, uid, gid } = user;
    let built = target_dir.join("release/queen-server");
    let home = work.join(format!("user-{name}"));
    let _ = std::fs::remove_dir_all(&home);
    let bin_dir = home.join("bin");
    let cwd = home.join("clean");
    for dir in [&bin_dir, &cwd] {
        std::fs::create_dir_all(dir)
            .map_err(|error| format!("cannot create {}: {error}", dir.display()))?;
    }
    let binary = bin_dir.join("queen-server");
    std::fs::copy(&built, &binary)
        .map_err(|error| format!("cannot copy {}: {error}", built.display()))?;
    run_quiet(Command::new("chown").arg(format!("{uid}:{gid}")).arg(&cwd))?;
    run_quiet(Command::new("chmod").arg("0755").arg(&home).arg(&bin_dir))?;
    // The user must be able to reach the copy; an unreachable workspace (a
    // root home) leaves nothing to test here, and says so.
    let reachable = Command::new("runuser")
        .args(["-u", name, "--", "test", "-x"])
        .arg(&binary)
        .status()
        .is_ok_and(|status| status.success());
    if !reachable {
        eprintln!(
            "xtask readme: {name} cannot reach {}; skipped the ordinary user's run",
            home.display()
        );
        return Ok(());
    }
    // setpriv execs the broker in its own place (runuser would stay its parent
    // and answer SIGTERM by killing it), so the signal reaches the broker.
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid", &uid.to_string(), "--regid", &gid.to_string()])
        .args(["--init-groups", "--"])
        .arg(&binary)
        .current_dir(&cwd);
    for var in cleared_vars() {
        cmd.env_remove(var);
    }
    let data_dir = start_and_stop(cmd, &work.join(format!("start-{name}.log")), START_LIMIT)?;
    if !data_dir.ends_with("clean/queen-data") {
        return Err(format!(
            "as {name} the managed cluster went to {}, not ./queen-data",
            data_dir.display()
        ));
    }
    eprintln!("xtask readme: as {name}, the built broker started and stopped cleanly");
    let _ = std::fs::remove_dir_all(&home);
    Ok(())
}

/// An account of the machine that is neither root nor a service.
struct OrdinaryUser {
    name: String,
    uid: u32,
    gid: u32,
}

/// The first account with a uid from 1000 and a login shell.
fn ordinary_user() -> Option<OrdinaryUser> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        let uid: u32 = fields.get(2)?.parse().ok()?;
        let gid: u32 = fields.get(3)?.parse().ok()?;
        let shell = fields.get(6)?;
        let login = !shell.ends_with("nologin") && !shell.ends_with("false");
        ((1000..65534).contains(&uid) && login).then(|| OrdinaryUser {
            name: fields[0].to_owned(),
            uid,
            gid,
        })
    })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

fn signal(pid: u32, name: &str) -> Result<(), String> {
    run_quiet(
        Command::new("kill")
            .arg(format!("-{name}"))
            .arg(pid.to_string()),
    )
}

fn run_quiet(cmd: &mut Command) -> Result<(), String> {
    let output = cmd
        .output()
        .map_err(|error| format!("cannot run {cmd:?}: {error}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|error| format!("cannot find a free port: {error}"))?;
    listener
        .local_addr()
        .map(|addr| addr.port())
        .map_err(|error| format!("cannot find a free port: {error}"))
}

/// The status code of `GET /health`, or `None` while nothing answers.
fn health_status(port: u16) -> Option<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream
        .write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    reply.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_setting_is_cleared_for_the_start_command() {
        let cleared = cleared_vars();
        for var in [
            "QUEEN_DATABASE_URL",
            "PG_HOST",
            "QUEEN_DATA_DIR",
            "HOST",
            "PORT",
            "QUEEN_DB_POOL_WARM",
        ] {
            assert!(cleared.contains(&var), "{var} is not cleared: {cleared:?}");
        }
        assert!(!cleared.contains(&"RUST_LOG"));
    }

    #[test]
    fn the_readme_commands_work_as_written() {
        if let Err(problem) = check(&crate::workspace_root()) {
            panic!("{problem}");
        }
    }

    #[test]
    fn the_commands_are_read_from_the_section_and_the_inspect_block() {
        let readme = "# Q\n\n## The two commands\n\nStart:\n\n```sh\ncargo run -p a\n```\n\n\
                      Test:\n\n```sh\ncargo xtask ci\n```\n\n## Later\n\n```sh\ncargo x\n```\n\n\
                      ```sh\ncargo run -p a --bin queen-inspect -- file x.bin   # one blob\n```\n";
        assert_eq!(
            commands(readme).unwrap(),
            ReadmeCommands {
                start: "cargo run -p a".to_owned(),
                test: "cargo xtask ci".to_owned(),
                inspect_help: "cargo run -p a --bin queen-inspect -- --help".to_owned(),
            }
        );
    }

    #[test]
    fn a_missing_section_a_third_command_or_shell_syntax_is_refused() {
        assert!(commands("# Q\n```sh\ncargo run\n```\n").is_err());
        let one = "## The two commands\n```sh\na\n```\n```text\nb\n```\n## Next\n```sh\nc\n```\n";
        assert!(commands(one).unwrap_err().contains("found 1"));
        assert!(words("FOO=1 cargo run | tee log").is_err());
        assert_eq!(
            words("cargo  run -p x").unwrap(),
            ["cargo", "run", "-p", "x"]
        );
    }
}
