//! Writing JSON by hand for the hot responses (push results, pop envelopes,
//! ack results):
//! no intermediate `serde_json::Value` per message, and payload bytes copied
//! verbatim.

/// A JSON string literal, escaped by serde_json.
pub(crate) fn push_str(out: &mut Vec<u8>, value: &str) {
    // Writing a &str into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
}

/// A JSON string literal, or `null`.
pub(crate) fn push_opt_str(out: &mut Vec<u8>, value: Option<&str>) {
    match value {
        Some(text) => push_str(out, text),
        None => out.extend_from_slice(b"null"),
    }
}

/// A UUID as a JSON string, or `null`, without allocating.
pub(crate) fn push_uuid(out: &mut Vec<u8>, id: Option<uuid::Uuid>) {
    match id {
        Some(id) => {
            let mut buf = uuid::Uuid::encode_buffer();
            out.push(b'"');
            out.extend_from_slice(id.hyphenated().encode_lower(&mut buf).as_bytes());
            out.push(b'"');
        }
        None => out.extend_from_slice(b"null"),
    }
}
