//! The spool's writer thread: appends in arrival order, one fsync for
//! everything that arrived together, then answers each append.

use std::path::Path;

use tokio::sync::{mpsc, oneshot};

use super::file::{self, Active};

/// What the writer is asked to do.
pub(super) enum Command {
    Append {
        bytes: Vec<u8>,
        reply: oneshot::Sender<std::io::Result<()>>,
    },
    /// Close the active log; answers the first sequence number not closed.
    Rotate { reply: oneshot::Sender<u64> },
}

/// The writer thread: appends in arrival order, one fsync for everything
/// that arrived together, then answers each append. After a failed write
/// or fsync it stops appending to that file (the next append starts a new
/// one), so no record ever follows a torn or unsynced one.
pub(super) fn run_writer(
    dir: &Path,
    mut next_seq: u64,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let mut active: Option<Active> = None;
    let mut waiting: Vec<oneshot::Sender<std::io::Result<()>>> = Vec::new();
    while let Some(first) = commands.blocking_recv() {
        let mut command = Some(first);
        while let Some(next) = command.take() {
            match next {
                Command::Append { bytes, reply } => {
                    if active.as_ref().is_some_and(|a| a.len >= file::ROTATE_BYTES) {
                        sync_and_answer(&mut active, &mut waiting);
                        active = None;
                    }
                    if active.is_none() {
                        match Active::create(dir, next_seq) {
                            Ok(log) => {
                                next_seq += 1;
                                active = Some(log);
                            }
                            Err(error) => {
                                let _ = reply.send(Err(error));
                                command = commands.try_recv().ok();
                                continue;
                            }
                        }
                    }
                    let written = match active.as_mut() {
                        Some(log) => log.write(&bytes),
                        None => Err(std::io::Error::other("no spool file is open")),
                    };
                    match written {
                        Ok(()) => waiting.push(reply),
                        Err(error) => {
                            // What came before is intact: make it durable,
                            // answer it, and leave this file.
                            sync_and_answer(&mut active, &mut waiting);
                            active = None;
                            let _ = reply.send(Err(error));
                        }
                    }
                }
                Command::Rotate { reply } => {
                    sync_and_answer(&mut active, &mut waiting);
                    active = None;
                    let _ = reply.send(next_seq);
                }
            }
            command = commands.try_recv().ok();
        }
        sync_and_answer(&mut active, &mut waiting);
    }
}

/// fsync the active log and answer every waiting append; after a failed
/// fsync (which cut the unsynced appends off again) the log is closed.
fn sync_and_answer(
    active: &mut Option<Active>,
    waiting: &mut Vec<oneshot::Sender<std::io::Result<()>>>,
) {
    if waiting.is_empty() {
        return;
    }
    let synced = match active.as_mut() {
        Some(log) => log.sync(),
        None => Err(std::io::Error::other("no spool file is open")),
    };
    if synced.is_err() {
        *active = None;
    }
    for reply in waiting.drain(..) {
        let answer = match &synced {
            Ok(()) => Ok(()),
            Err(error) => Err(std::io::Error::new(error.kind(), error.to_string())),
        };
        let _ = reply.send(answer);
    }
}
