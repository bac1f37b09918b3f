//! `queen-inspect`: decode a segment blob offline and print its frames as JSON lines.
//!
//! Two sources:
//! - `file <blob> [--hashes <sidecar>] [--base-offset N]`: a blob saved to disk
//!   (for example with `\copy (SELECT blob FROM queen.log_segments ...) TO ...`
//!   in binary, or written by a test);
//! - `db [--url URL] <partition-id> <offset>`: the segment covering `offset` in a
//!   partition, fetched from PostgreSQL with its hash sidecar.
//!
//! Each output line is one frame:
//! `{"offset","index","messageId","transactionId","traceId","producerSub","flags",
//!   "encrypted","payload" | "payloadHex","hash","hashMatches"}`, and
//! `"audience"` (the consumer groups it is for) on a replayed dead letter.
//! `payload` is the stored JSON when the bytes parse as JSON; encrypted or
//! otherwise non-JSON payloads are printed as `payloadHex`. With a sidecar, `hash`
//! is the stored 16-byte hash and `hashMatches` says whether it equals
//! BLAKE3-128 of the frame's transaction id.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use queen_frame::{Frame, HASH_LEN};

/// Decode a Queen segment blob and print its frames as JSON lines.
#[derive(Debug, Parser)]
#[command(name = "queen-inspect", version, about)]
struct Args {
    #[command(subcommand)]
    source: Source,
}

#[derive(Debug, Subcommand)]
enum Source {
    /// Decode a blob stored in a file.
    File {
        /// The zstd segment blob.
        blob: PathBuf,
        /// The segment's hash sidecar (16 bytes per frame), if you have it.
        #[arg(long)]
        hashes: Option<PathBuf>,
        /// The segment's base offset, so lines carry real offsets.
        #[arg(long, default_value_t = 0)]
        base_offset: i64,
    },
    /// Fetch the segment covering an offset of a partition from PostgreSQL.
    Db {
        /// PostgreSQL URL or key=value string.
        #[arg(long, env = "QUEEN_DATABASE_URL")]
        url: String,
        /// The partition id (UUID).
        partition_id: uuid::Uuid,
        /// Any offset inside the wanted segment.
        offset: i64,
    },
}

/// Why inspection failed.
#[derive(Debug, thiserror::Error)]
enum InspectError {
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("corrupt segment")]
    Frame(#[from] queen_frame::FrameError),
    #[error(transparent)]
    Sql(#[from] queen_sql::SqlError),
    #[error("cannot write output")]
    Write(#[from] std::io::Error),
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(run(args.source)),
        Err(error) => Err(InspectError::Write(error)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("queen-inspect: {}", queen_sql::error_chain(&error));
            ExitCode::FAILURE
        }
    }
}

async fn run(source: Source) -> Result<(), InspectError> {
    let (blob, hashes, base_offset) = match source {
        Source::File {
            blob,
            hashes,
            base_offset,
        } => {
            let read = |path: PathBuf| {
                std::fs::read(&path).map_err(|source| InspectError::Read { path, source })
            };
            let hashes = hashes.map(read).transpose()?;
            (read(blob)?, hashes, base_offset)
        }
        Source::Db {
            url,
            partition_id,
            offset,
        } => {
            let config = queen_sql::connect::config_from_url(&url)?;
            let client = queen_sql::connect::connect_one(&config).await?;
            let row = queen_sql::segments::fetch_segment(&client, partition_id, offset).await?;
            (row.blob, row.hashes, row.base_offset)
        }
    };
    let segment = queen_frame::decompress(&blob)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for (index, frame) in segment.frames().enumerate() {
        let frame = frame?;
        let stored_hash = match &hashes {
            Some(sidecar) => Some(queen_frame::sidecar_get(sidecar, index)?),
            None => None,
        };
        let line = render(base_offset, index, &frame, stored_hash);
        serde_json::to_writer(&mut out, &line).map_err(std::io::Error::from)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}

fn render(
    base_offset: i64,
    index: usize,
    frame: &Frame<'_>,
    stored_hash: Option<[u8; HASH_LEN]>,
) -> serde_json::Value {
    let offset = i64::try_from(index).map_or(i64::MAX, |idx| base_offset.saturating_add(idx));
    let mut line = serde_json::json!({
        "offset": offset,
        "index": index,
        "messageId": uuid::Uuid::from_bytes(frame.message_id).to_string(),
        "transactionId": frame.transaction_id,
        "traceId": frame.trace_id.map(|id| uuid::Uuid::from_bytes(id).to_string()),
        "producerSub": frame.producer_sub,
        "flags": frame.flags(),
        "encrypted": frame.encrypted,
    });
    if let Some(audience) = frame.audience {
        line["audience"] = serde_json::json!(audience
            .split(queen_frame::AUDIENCE_SEPARATOR)
            .collect::<Vec<_>>());
    }
    let parsed = if frame.encrypted {
        None
    } else {
        serde_json::from_slice::<serde_json::Value>(frame.payload).ok()
    };
    match parsed {
        Some(payload) => line["payload"] = payload,
        None => line["payloadHex"] = hex(frame.payload).into(),
    }
    if let Some(hash) = stored_hash {
        line["hash"] = hex(&hash).into();
        line["hashMatches"] = (hash == queen_frame::txn_hash(frame.transaction_id)).into();
    }
    line
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        let _ = write!(text, "{byte:02x}");
    }
    text
}
