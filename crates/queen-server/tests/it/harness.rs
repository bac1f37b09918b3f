//! Starting the real binary as a child process.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use queen_testkit::http::Client;

/// Environment variables that would make the child pick another database.
use queen_pg::DATABASE_VARS;

/// A running `queen-server` child.
pub(crate) struct Broker {
    child: Child,
    log: PathBuf,
    port: u16,
    pub(crate) client: Client,
}

/// A port nothing listens on right now.
pub(crate) fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind port 0");
    listener.local_addr().expect("local addr").port()
}

/// The binary under test, with a clean database environment and `vars` set.
pub(crate) fn command(vars: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_queen-server"));
    for var in DATABASE_VARS {
        cmd.env_remove(var);
    }
    cmd.env("RUST_LOG", "info").env("HOST", "127.0.0.1");
    for (key, value) in vars {
        cmd.env(key, value);
    }
    cmd
}

impl Broker {
    /// Start the binary with `vars` and wait until `/health` answers 200.
    pub(crate) async fn start(log_dir: &Path, vars: &[(&str, &str)]) -> Broker {
        Broker::start_in(None, log_dir, vars).await
    }

    /// [`Broker::start`] with the process's working directory set to `cwd`.
    pub(crate) async fn start_in(
        cwd: Option<&Path>,
        log_dir: &Path,
        vars: &[(&str, &str)],
    ) -> Broker {
        Broker::start_at(free_port(), cwd, log_dir, vars).await
    }

    /// [`Broker::start_in`] on `port` (a restarted broker keeps its address).
    pub(crate) async fn start_at(
        port: u16,
        cwd: Option<&Path>,
        log_dir: &Path,
        vars: &[(&str, &str)],
    ) -> Broker {
        let log = log_dir.join(format!(
            "broker-{port}-{}.log",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        let log_file = std::fs::File::create(&log).expect("create broker log");
        let port_text = port.to_string();
        let mut cmd = command(vars);
        if let Some(cwd) = cwd {
            cmd.current_dir(cwd);
        }
        // One spool directory per broker address: a broker restarted on its
        // port finds what it spooled before. An empty FILE_BUFFER_DIR in
        // `vars` leaves it unset: the broker's own default.
        match vars.iter().find(|(key, _)| *key == "FILE_BUFFER_DIR") {
            None => {
                cmd.env("FILE_BUFFER_DIR", log_dir.join(format!("spool-{port}")));
            }
            Some((_, "")) => {
                cmd.env_remove("FILE_BUFFER_DIR");
            }
            Some(_) => {}
        }
        cmd.env("PORT", &port_text)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file);
        let child = cmd.spawn().expect("spawn queen-server");
        let mut broker = Broker {
            child,
            log,
            port,
            client: Client::new(format!("http://127.0.0.1:{port}")),
        };
        broker.wait_healthy(Duration::from_secs(60)).await;
        broker
    }

    async fn wait_healthy(&mut self, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("queen-server exited early ({status}):\n{}", self.log_text());
            }
            let probe = self
                .client
                .try_send(hyper::Method::GET, "/health", bytes::Bytes::new())
                .await;
            if let Ok(reply) = probe {
                if reply.status == 200 {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "queen-server not healthy in time:\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The broker's log so far.
    pub(crate) fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The port it listens on.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// Send `signal` to the process.
    pub(crate) fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).expect("pid"));
        nix::sys::signal::kill(pid, signal).expect("send a signal");
    }

    /// SIGKILL it and reap it.
    pub(crate) fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Wait (up to `limit`) for the process to exit on its own.
    pub(crate) fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for queen-server") {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Send SIGTERM and wait for the process to exit.
    pub(crate) fn terminate(mut self) -> (ExitStatus, String) {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for queen-server") {
                return (status, self.log_text());
            }
            assert!(Instant::now() < deadline, "queen-server ignored SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
