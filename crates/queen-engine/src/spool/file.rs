//! The spool's files: append-only logs of push records, each append
//! fsync'd before it is answered.
//!
//! A spool directory holds:
//! - `spool-<seq>.log`: records in append order. The writer appends to one
//!   file at a time and starts a new one (next `seq`) when the file passes
//!   [`ROTATE_BYTES`] or when the drainer asks; after a restart it never
//!   appends to an old file (its tail may be torn).
//! - `spool-<seq>.pos`: how many bytes of that log the drainer has pushed
//!   (8 bytes, little-endian; written to a temporary file and renamed, so it
//!   is either the old or the new value). A log without one is undrained.
//! - `failed-<seq>.log`: records the drainer could not push for a reason
//!   that retrying cannot fix (kept for the operator, same format).
//! - `held.log`: records whose queue was full (`maxSize`) when the drainer
//!   tried them, in drain order (same format). The drainer retries them
//!   with backoff and rewrites the file without what it stored (to a
//!   temporary file, fsync'd, renamed).
//! - `DATABASE`: the id of the Queen database the directory spools for
//!   (`queen.database_identity`); a directory holding records is never
//!   opened for another (`Spool::open`).
//! - `ADOPTING`: present while an earlier version's files move in
//!   ([`adopt`]).
//! - `LOCK`: held by the one broker using the directory.
//!
//! A record is `u32 length, u32 crc32, body` (little-endian), the body the
//! fields of one pushed item, each length-prefixed. A record whose length
//! runs past the end of the file or whose checksum does not match ends the
//! readable part: only the last append can be torn, and it was never
//! answered.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use uuid::Uuid;

use crate::reader::Reader;

/// A log passing this size is closed and a new one started.
pub(crate) const ROTATE_BYTES: u64 = 64 * 1024 * 1024;

/// Version 3 records lead with the tenant and when the push was accepted;
/// version 2 records (written before acceptance times) have none,
/// version 1 records (written before tenants) are read as the default
/// tenant's.
const RECORD_VERSION: u8 = 3;
const RECORD_VERSION_2: u8 = 2;
const RECORD_VERSION_1: u8 = 1;
const HEADER: usize = 8;

/// One spooled push item: everything the push needs again, with the
/// transaction id fixed (the broker's, when the client sent none), so the
/// replay is idempotent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) tenant: String,
    pub(crate) queue: String,
    pub(crate) partition: String,
    pub(crate) transaction_id: String,
    pub(crate) trace_id: Option<Uuid>,
    pub(crate) producer_sub: Option<String>,
    pub(crate) payload: Bytes,
    /// When the push was accepted (spooled), in milliseconds since the
    /// epoch; `None` for records of version 1 and 2. The drain's duplicate
    /// check looks back to it (`push/replay.rs`).
    pub(crate) accepted_ms: Option<u64>,
}

impl Record {
    /// When the push was accepted, if the record says.
    pub(crate) fn accepted_at(&self) -> Option<std::time::SystemTime> {
        self.accepted_ms
            .map(|ms| std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
    }

    /// The push item to store the record as (its transaction id fixed).
    pub(crate) fn item(&self) -> crate::push::PushItem {
        crate::push::PushItem {
            tenant: std::sync::Arc::from(self.tenant.as_str()),
            queue: self.queue.clone(),
            partition: self.partition.clone(),
            transaction_id: Some(self.transaction_id.clone()),
            trace_id: self.trace_id,
            producer_sub: self.producer_sub.clone(),
            payload: self.payload.clone(),
        }
    }

    /// Append the record, framed, to `out`.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&[0; HEADER]);
        out.push(RECORD_VERSION);
        put(out, self.tenant.as_bytes());
        out.extend_from_slice(&self.accepted_ms.unwrap_or(0).to_le_bytes());
        put(out, self.queue.as_bytes());
        put(out, self.partition.as_bytes());
        put(out, self.transaction_id.as_bytes());
        match self.trace_id {
            Some(id) => {
                out.push(1);
                out.extend_from_slice(id.as_bytes());
            }
            None => out.push(0),
        }
        match &self.producer_sub {
            Some(sub) => {
                out.push(1);
                put(out, sub.as_bytes());
            }
            None => out.push(0),
        }
        put(out, &self.payload);
        let body = &out[start + HEADER..];
        let len = u32::try_from(body.len()).unwrap_or(u32::MAX).to_le_bytes();
        let crc = crc32fast::hash(body).to_le_bytes();
        out[start..start + 4].copy_from_slice(&len);
        out[start + 4..start + HEADER].copy_from_slice(&crc);
    }

    /// The record at the start of `bytes` and its framed length; `None` when
    /// it is incomplete, corrupt or of an unknown version.
    pub(crate) fn decode(bytes: &[u8]) -> Option<(Record, usize)> {
        let len = u32::from_le_bytes(bytes.get(0..4)?.try_into().ok()?) as usize;
        let crc = u32::from_le_bytes(bytes.get(4..HEADER)?.try_into().ok()?);
        let body = bytes.get(HEADER..HEADER.checked_add(len)?)?;
        if crc32fast::hash(body) != crc {
            return None;
        }
        let mut reader = Reader::new(body);
        let (tenant, accepted_ms) = match reader.byte()? {
            RECORD_VERSION => {
                let tenant = string(&mut reader)?;
                let ms = u64::from_le_bytes(reader.take(8)?.try_into().ok()?);
                (tenant, (ms > 0).then_some(ms))
            }
            RECORD_VERSION_2 => (string(&mut reader)?, None),
            RECORD_VERSION_1 => (crate::naming::DEFAULT_TENANT.to_owned(), None),
            _ => return None,
        };
        let queue = string(&mut reader)?;
        let partition = string(&mut reader)?;
        let transaction_id = string(&mut reader)?;
        let trace_id = match reader.byte()? {
            0 => None,
            _ => Some(Uuid::from_slice(reader.take(16)?).ok()?),
        };
        let producer_sub = match reader.byte()? {
            0 => None,
            _ => Some(string(&mut reader)?),
        };
        let payload = Bytes::copy_from_slice(reader.u32_field()?);
        reader.is_empty().then_some((
            Record {
                tenant,
                queue,
                partition,
                transaction_id,
                trace_id,
                producer_sub,
                payload,
                accepted_ms,
            },
            HEADER + len,
        ))
    }
}

fn put(out: &mut Vec<u8>, field: &[u8]) {
    out.extend_from_slice(&u32::try_from(field.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(field);
}

/// A spool record's length-prefixed string.
fn string(reader: &mut Reader<'_>) -> Option<String> {
    String::from_utf8(reader.u32_field()?.to_vec()).ok()
}

/// The records of `bytes` from its start, each with the offset just past
/// it, as far as they decode; and whether undecodable bytes follow.
pub(crate) fn records(bytes: &[u8]) -> (Vec<(Record, usize)>, bool) {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let Some((record, len)) = bytes.get(at..).and_then(Record::decode) else {
            return (out, true);
        };
        at += len;
        out.push((record, at));
    }
    (out, false)
}

/// The log file of `seq` in `dir`.
pub(crate) fn log_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("spool-{seq:020}.log"))
}

fn pos_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("spool-{seq:020}.pos"))
}

/// The failed-records file of `seq` in `dir`.
pub(crate) fn failed_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("failed-{seq:020}.log"))
}

/// The sequence numbers of the logs in `dir`, ascending.
pub(crate) fn logs(dir: &Path) -> io::Result<Vec<u64>> {
    let mut seqs: Vec<u64> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name();
            let name = name.to_str()?;
            name.strip_prefix("spool-")?
                .strip_suffix(".log")?
                .parse()
                .ok()
        })
        .collect();
    seqs.sort_unstable();
    Ok(seqs)
}

/// (files, bytes) of the failed-records files in `dir`.
pub(crate) fn failed_files(dir: &Path) -> (u64, u64) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (0, 0);
    };
    entries
        .filter_map(Result::ok)
        .filter(|entry| {
            entry
                .file_name()
                .to_str()
                .is_some_and(|name| name.starts_with("failed-") && name.ends_with(".log"))
        })
        .filter_map(|entry| entry.metadata().ok())
        .fold((0, 0), |(files, bytes), meta| {
            (files + 1, bytes + meta.len())
        })
}

/// The sequence numbers of the failed-records files in `dir`.
fn failed_seqs(dir: &Path) -> io::Result<Vec<u64>> {
    Ok(std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name();
            let name = name.to_str()?;
            name.strip_prefix("failed-")?
                .strip_suffix(".log")?
                .parse()
                .ok()
        })
        .collect())
}

/// What [`adopt`] moved.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Adopted {
    /// Logs (with their progress files).
    pub(crate) logs: usize,
    /// Failed-records files.
    pub(crate) failed: usize,
    /// Held records.
    pub(crate) held: usize,
}

/// The file marking an adoption under way in the directory adopting.
fn adopting_path(dir: &Path) -> PathBuf {
    dir.join("ADOPTING")
}

/// Whether `dir` holds spool records: a log, a failed-records file or held
/// records (a progress file alone is not one).
pub(crate) fn holds_records(dir: &Path) -> io::Result<bool> {
    Ok(!logs(dir)?.is_empty() || !failed_seqs(dir)?.is_empty() || !read_held(dir)?.is_empty())
}

/// Whether `to` can adopt: it holds no records, or an adoption into it was
/// cut short (by a crash) and is to be finished. (A progress file without
/// its log is removed before, see `Spool::open`.)
pub(crate) fn can_adopt_into(to: &Path) -> io::Result<bool> {
    Ok(adopting_path(to).exists() || !holds_records(to)?)
}

/// Move the spool files left in `from` (logs, their progress, failed
/// records, held records; nothing else there is touched) into `to`, both
/// locked by the caller, `to` one that [`can_adopt_into`]. Each file keeps
/// its name, so the logs keep their order and their progress, and the
/// held records stay the first to retry. `to/ADOPTING` marks the move from
/// before its first rename to after its last: a crash in between leaves
/// `to` holding part of the files and the mark, and the next adoption
/// finishes the move. Renames, so both must be on one filesystem.
pub(crate) fn adopt(from: &Path, to: &Path) -> io::Result<Adopted> {
    let (from_logs, from_positions, from_failed) =
        (logs(from)?, positions(from)?, failed_seqs(from)?);
    let held = read_held(from)?;
    let mut adopted = Adopted::default();
    let mark = adopting_path(to);
    if from_logs.is_empty()
        && from_positions.is_empty()
        && from_failed.is_empty()
        && held.is_empty()
    {
        if mark.exists() {
            std::fs::remove_file(&mark)?;
            sync_dir(to)?;
        }
        return Ok(adopted);
    }
    File::create(&mark)?;
    sync_dir(to)?;
    // A log before its progress: a crash between the two leaves the log to
    // be drained from its start (the drain's duplicate check finds what it
    // stored before) until the next adoption moves the progress too.
    for &seq in &from_logs {
        std::fs::rename(log_path(from, seq), log_path(to, seq))?;
        adopted.logs += 1;
    }
    for &seq in &from_positions {
        std::fs::rename(pos_path(from, seq), pos_path(to, seq))?;
    }
    for &seq in &from_failed {
        std::fs::rename(failed_path(from, seq), failed_path(to, seq))?;
        adopted.failed += 1;
    }
    if !held.is_empty() {
        // Whole records only: a torn tail was never answered. Added after
        // what an adoption cut short moved (the same file's head).
        let (records, _) = records(&held);
        adopted.held = records.len();
        let whole = records.last().map_or(0, |(_, end)| *end);
        let mut merged = read_held(to)?;
        merged.extend_from_slice(held.get(..whole).unwrap_or_default());
        rewrite_held(to, &merged)?;
        rewrite_held(from, &[])?;
    }
    sync_dir(to)?;
    sync_dir(from)?;
    std::fs::remove_file(&mark)?;
    sync_dir(to)?;
    Ok(adopted)
}

/// The file naming the Queen database a spool directory spools for.
fn database_path(dir: &Path) -> PathBuf {
    dir.join("DATABASE")
}

/// The Queen database (`queen.database_identity`) `dir` spools for, if it
/// says; an unreadable or malformed file is an error, never "none".
pub(crate) fn recorded_database(dir: &Path) -> io::Result<Option<Uuid>> {
    match std::fs::read_to_string(database_path(dir)) {
        Ok(text) => Uuid::parse_str(text.trim()).map(Some).map_err(|error| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {error}", database_path(dir).display()),
            )
        }),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// Record that `dir` spools for database `id`, durably.
pub(crate) fn record_database(dir: &Path, id: Uuid) -> io::Result<()> {
    let tmp = dir.join("DATABASE.tmp");
    let mut file = File::create(&tmp)?;
    file.write_all(format!("{id}\n").as_bytes())?;
    file.sync_data()?;
    std::fs::rename(&tmp, database_path(dir))?;
    sync_dir(dir)
}

/// The sequence numbers of the progress files in `dir`.
pub(crate) fn positions(dir: &Path) -> io::Result<Vec<u64>> {
    Ok(std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name();
            let name = name.to_str()?;
            name.strip_prefix("spool-")?
                .strip_suffix(".pos")?
                .parse()
                .ok()
        })
        .collect())
}

/// Remove the progress file of `seq` (one whose log is gone: left by a crash
/// between the two removals of [`remove_log`]).
pub(crate) fn remove_position(dir: &Path, seq: u64) -> io::Result<()> {
    std::fs::remove_file(pos_path(dir, seq))?;
    sync_dir(dir)
}

/// How many bytes of log `seq` were drained already.
pub(crate) fn drained(dir: &Path, seq: u64) -> io::Result<u64> {
    match std::fs::read(pos_path(dir, seq)) {
        Ok(bytes) => Ok(bytes
            .get(0..8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_le_bytes)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(0),
        Err(error) => Err(error),
    }
}

/// Record that `offset` bytes of log `seq` were drained, durably.
pub(crate) fn set_drained(dir: &Path, seq: u64, offset: u64) -> io::Result<()> {
    let tmp = dir.join(format!("spool-{seq:020}.pos.tmp"));
    let mut file = File::create(&tmp)?;
    file.write_all(&offset.to_le_bytes())?;
    file.sync_data()?;
    std::fs::rename(&tmp, pos_path(dir, seq))?;
    sync_dir(dir)
}

/// Remove log `seq` and its progress, durably.
pub(crate) fn remove_log(dir: &Path, seq: u64) -> io::Result<()> {
    std::fs::remove_file(log_path(dir, seq))?;
    // A crash here leaves a progress file without its log: `Spool::open`
    // removes such files, and never reuses their sequence number.
    match std::fs::remove_file(pos_path(dir, seq)) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error),
        _ => {}
    }
    sync_dir(dir)
}

/// Append `bytes` to the failed-records file of `seq`, durably; answers
/// whether the file was new.
pub(crate) fn append_failed(dir: &Path, seq: u64, bytes: &[u8]) -> io::Result<bool> {
    let path = failed_path(dir, seq);
    let created = !path.exists();
    let mut file = OpenOptions::new().create(true).append(true).open(&path)?;
    file.write_all(bytes)?;
    file.sync_data()?;
    if created {
        sync_dir(dir)?;
    }
    Ok(created)
}

/// The held-records file in `dir`.
pub(crate) fn held_path(dir: &Path) -> PathBuf {
    dir.join("held.log")
}

/// The held records' bytes (empty when there are none).
pub(crate) fn read_held(dir: &Path) -> io::Result<Vec<u8>> {
    match std::fs::read(held_path(dir)) {
        Ok(bytes) => Ok(bytes),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(error) => Err(error),
    }
}

/// Append `bytes` to the held-records file, durably.
pub(crate) fn append_held(dir: &Path, bytes: &[u8]) -> io::Result<()> {
    let path = held_path(dir);
    let created = !path.exists();
    let mut file = OpenOptions::new().create(true).append(true).open(&path)?;
    file.write_all(bytes)?;
    file.sync_data()?;
    if created {
        sync_dir(dir)?;
    }
    Ok(())
}

/// Replace the held-records file with `bytes` (removed when empty),
/// durably: the old or the new content survives a crash, never a mix.
pub(crate) fn rewrite_held(dir: &Path, bytes: &[u8]) -> io::Result<()> {
    let path = held_path(dir);
    if bytes.is_empty() {
        match std::fs::remove_file(&path) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error),
            _ => {}
        }
        return sync_dir(dir);
    }
    let tmp = dir.join("held.log.tmp");
    let mut file = File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_data()?;
    std::fs::rename(&tmp, &path)?;
    sync_dir(dir)
}

/// Make the directory's entries (created, renamed, removed files) durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The log being appended to.
pub(crate) struct Active {
    file: File,
    /// Bytes written.
    pub(crate) len: u64,
    /// Bytes made durable (fsync'd).
    synced: u64,
}

impl Active {
    /// A new, empty log `seq` in `dir` (its directory entry made durable).
    pub(crate) fn create(dir: &Path, seq: u64) -> io::Result<Active> {
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(log_path(dir, seq))?;
        sync_dir(dir)?;
        Ok(Active {
            file,
            len: 0,
            synced: 0,
        })
    }

    /// Append `bytes`; durable once [`Active::sync`] returned. A write that
    /// fails part-way is cut off again (best effort), so a later record
    /// never follows a torn one.
    pub(crate) fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self.file.write_all(bytes) {
            Ok(()) => {
                self.len += bytes.len() as u64;
                Ok(())
            }
            Err(error) => {
                let _ = self.file.set_len(self.len);
                Err(error)
            }
        }
    }

    /// fsync what was written. When that fails, what was written since the
    /// last good fsync is cut off (its appends are answered with the
    /// error), and the caller stops appending to this file.
    pub(crate) fn sync(&mut self) -> io::Result<()> {
        match self.file.sync_data() {
            Ok(()) => {
                self.synced = self.len;
                Ok(())
            }
            Err(error) => {
                if self.file.set_len(self.synced).is_ok() {
                    let _ = self.file.sync_data();
                }
                self.len = self.synced;
                Err(error)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(i: usize) -> Record {
        Record {
            tenant: if i.is_multiple_of(2) {
                "default"
            } else {
                "acme"
            }
            .to_owned(),
            queue: format!("q{i}"),
            partition: "p".to_owned(),
            transaction_id: format!("t{i}"),
            trace_id: i.is_multiple_of(2).then(Uuid::now_v7),
            producer_sub: i.is_multiple_of(3).then(|| "sub".to_owned()),
            payload: Bytes::from(format!("{{\"n\":{i}}}")),
            accepted_ms: (!i.is_multiple_of(2)).then_some(1_700_000_000_000 + i as u64),
        }
    }

    #[test]
    fn records_round_trip_and_a_torn_tail_ends_the_readable_part() {
        let written: Vec<Record> = (0..5).map(record).collect();
        let mut bytes = Vec::new();
        for record in &written {
            record.encode(&mut bytes);
        }
        let whole = bytes.len();
        let (read, torn) = records(&bytes);
        assert!(!torn);
        assert_eq!(
            read.iter().map(|(r, _)| r.clone()).collect::<Vec<_>>(),
            written
        );
        assert_eq!(read.last().map(|(_, end)| *end), Some(whole));
        // A torn last append: the four before it are read, and it is not.
        let (read, torn) = records(&bytes[..whole - 3]);
        assert!(torn);
        assert_eq!(read.len(), 4);
        // A flipped byte inside the third record stops reading there.
        let third = read[1].1 + HEADER + 3;
        bytes[third] ^= 0xff;
        let (read, torn) = records(&bytes);
        assert!(torn);
        assert_eq!(read.len(), 2);
    }

    /// A spool written before tenants (version 1: no tenant field) drains
    /// into the default tenant.
    #[test]
    fn a_version_1_record_reads_as_the_default_tenants() {
        let mut bytes = Vec::new();
        let written = record(0);
        Record {
            tenant: "acme".to_owned(),
            ..written.clone()
        }
        .encode(&mut bytes);
        // The same record as version 1 wrote it: no tenant (and no
        // acceptance time) after the version.
        let mut body = vec![RECORD_VERSION_1];
        body.extend_from_slice(&bytes[HEADER + 1 + 4 + "acme".len() + 8..]);
        let mut v1 = Vec::new();
        v1.extend_from_slice(&u32::try_from(body.len()).unwrap().to_le_bytes());
        v1.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        v1.extend_from_slice(&body);
        let (read, torn) = records(&v1);
        assert!(!torn);
        assert_eq!(read[0].0, written);
        assert_eq!(read[0].0.tenant, crate::naming::DEFAULT_TENANT);
    }

    /// A record of version 2 (before acceptance times) reads without one:
    /// the drain's duplicate check then looks back over everything its
    /// partition holds.
    #[test]
    fn a_version_2_record_reads_without_an_acceptance_time() {
        let written = record(1);
        assert!(written.accepted_ms.is_some());
        let mut bytes = Vec::new();
        written.encode(&mut bytes);
        // Version 2: the tenant, then no acceptance time.
        let tenant_end = HEADER + 1 + 4 + written.tenant.len();
        let mut body = vec![RECORD_VERSION_2];
        body.extend_from_slice(&bytes[HEADER + 1..tenant_end]);
        body.extend_from_slice(&bytes[tenant_end + 8..]);
        let mut v2 = Vec::new();
        v2.extend_from_slice(&u32::try_from(body.len()).unwrap().to_le_bytes());
        v2.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        v2.extend_from_slice(&body);
        let (read, torn) = records(&v2);
        assert!(!torn);
        assert_eq!(
            read[0].0,
            Record {
                accepted_ms: None,
                ..written
            }
        );
        assert_eq!(read[0].0.accepted_at(), None);
    }

    #[test]
    fn progress_survives_and_logs_are_listed_in_order() {
        let dir = tempfile::tempdir().unwrap();
        for seq in [3, 1, 2] {
            let mut active = Active::create(dir.path(), seq).unwrap();
            active.write(b"x").unwrap();
            active.sync().unwrap();
        }
        assert_eq!(logs(dir.path()).unwrap(), [1, 2, 3]);
        assert_eq!(drained(dir.path(), 2).unwrap(), 0);
        set_drained(dir.path(), 2, 77).unwrap();
        assert_eq!(drained(dir.path(), 2).unwrap(), 77);
        remove_log(dir.path(), 2).unwrap();
        assert_eq!(logs(dir.path()).unwrap(), [1, 3]);
        assert_eq!(drained(dir.path(), 2).unwrap(), 0);
        append_failed(dir.path(), 1, b"abc").unwrap();
        assert_eq!(failed_files(dir.path()), (1, 3));
    }

    /// An earlier version's spool moves in under its own names, each log
    /// with its progress, its held records (whole ones); nothing else there
    /// moves. A directory that holds records adopts nothing.
    #[test]
    fn adopting_moves_into_an_empty_directory_only_keeping_names_progress_and_held_order() {
        let from = tempfile::tempdir().unwrap();
        let to = tempfile::tempdir().unwrap();
        for (seq, body) in [(1, "a"), (2, "b")] {
            let mut active = Active::create(from.path(), seq).unwrap();
            active.write(body.as_bytes()).unwrap();
            active.sync().unwrap();
        }
        set_drained(from.path(), 1, 1).unwrap();
        append_failed(from.path(), 3, b"f").unwrap();
        let mut old_held = Vec::new();
        record(0).encode(&mut old_held);
        record(1).encode(&mut old_held);
        let mut torn = old_held.clone();
        torn.extend_from_slice(&[9, 0, 0, 0, 1]);
        append_held(from.path(), &torn).unwrap();
        std::fs::write(from.path().join("LOCK"), b"").unwrap();
        std::fs::create_dir(from.path().join("6632")).unwrap();

        // A directory with a log of its own adopts nothing.
        let busy = tempfile::tempdir().unwrap();
        Active::create(busy.path(), 5).unwrap().write(b"x").unwrap();
        assert!(!can_adopt_into(busy.path()).unwrap());
        let held_only = tempfile::tempdir().unwrap();
        append_held(held_only.path(), &old_held).unwrap();
        assert!(!can_adopt_into(held_only.path()).unwrap());

        assert!(can_adopt_into(to.path()).unwrap());
        let adopted = adopt(from.path(), to.path()).unwrap();
        assert_eq!(
            adopted,
            Adopted {
                logs: 2,
                failed: 1,
                held: 2
            }
        );
        assert_eq!(logs(to.path()).unwrap(), [1, 2]);
        assert_eq!(std::fs::read(log_path(to.path(), 1)).unwrap(), b"a");
        assert_eq!(
            drained(to.path(), 1).unwrap(),
            1,
            "the progress moved with its log"
        );
        assert_eq!(std::fs::read(log_path(to.path(), 2)).unwrap(), b"b");
        assert_eq!(std::fs::read(failed_path(to.path(), 3)).unwrap(), b"f");
        assert_eq!(read_held(to.path()).unwrap(), old_held);
        assert!(!adopting_path(to.path()).exists());
        let mut left: Vec<String> = std::fs::read_dir(from.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["6632", "LOCK"]);
        assert_eq!(
            adopt(from.path(), to.path()).unwrap(),
            Adopted::default(),
            "nothing left to move"
        );
        // Once it holds records, the directory adopts no more.
        assert!(!can_adopt_into(to.path()).unwrap());
    }

    /// A crash after the first rename: the next adoption finishes it.
    #[test]
    fn an_adoption_cut_short_is_finished() {
        let from = tempfile::tempdir().unwrap();
        let to = tempfile::tempdir().unwrap();
        for seq in [1, 2] {
            let mut active = Active::create(from.path(), seq).unwrap();
            active.write(b"r").unwrap();
            active.sync().unwrap();
        }
        set_drained(from.path(), 1, 1).unwrap();
        // What the crash left: the mark and the first log moved.
        File::create(adopting_path(to.path())).unwrap();
        std::fs::rename(log_path(from.path(), 1), log_path(to.path(), 1)).unwrap();
        assert!(can_adopt_into(to.path()).unwrap());
        adopt(from.path(), to.path()).unwrap();
        assert_eq!(logs(to.path()).unwrap(), [1, 2]);
        assert_eq!(drained(to.path(), 1).unwrap(), 1);
        assert!(logs(from.path()).unwrap().is_empty());
        assert!(!adopting_path(to.path()).exists());
    }

    #[test]
    fn the_recorded_database_reads_back_and_a_malformed_one_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(recorded_database(dir.path()).unwrap(), None);
        let id = Uuid::now_v7();
        record_database(dir.path(), id).unwrap();
        assert_eq!(recorded_database(dir.path()).unwrap(), Some(id));
        std::fs::write(dir.path().join("DATABASE"), b"not an id\n").unwrap();
        let error = recorded_database(dir.path()).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
    }
}
