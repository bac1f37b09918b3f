//! One message on the wire of a segment: the frame layout, its encoder and its decoder.
//!
//! The decoder treats its input as untrusted.
//! Every read goes through [`Reader`], which checks the length before it slices
//! and reports a shortfall as [`FrameError::Truncated`] with the offset of the field.

use bytes::{BufMut, BytesMut};

use crate::error::{Field, FrameError};

/// Flag bit: a 16-byte trace id follows the message id.
pub const FLAG_TRACE_ID: u8 = 1;
/// Flag bit: a `u16`-prefixed producer sub follows the transaction id.
pub const FLAG_PRODUCER_SUB: u8 = 2;
/// Flag bit: the payload is a nonce followed by ciphertext, not plain JSON.
pub const FLAG_ENCRYPTED: u8 = 4;
/// Flag bit: a `u16`-prefixed audience follows the producer sub: the consumer
/// groups the frame is delivered to, separated by `\n` (a replayed dead
/// letter reaches only the groups it was dead-lettered in); without it, every
/// group.
pub const FLAG_AUDIENCE: u8 = 8;
/// Every flag bit this version knows; any other bit is a decode error.
pub const KNOWN_FLAGS: u8 = FLAG_TRACE_ID | FLAG_PRODUCER_SUB | FLAG_ENCRYPTED | FLAG_AUDIENCE;

/// The separator of the group names in an audience.
pub const AUDIENCE_SEPARATOR: char = '\n';

/// Bytes of the `body_len` prefix.
const LEN_PREFIX: usize = 4;
/// The smallest possible body: flags, message id and a zero `txn_len`.
const MIN_BODY_LEN: usize = 1 + 16 + 2;
/// The smallest possible frame, used to bound allocations sized from untrusted counts.
pub(crate) const MIN_FRAME_LEN: usize = LEN_PREFIX + MIN_BODY_LEN;

/// A borrowed view of one frame.
///
/// Decoding borrows every variable-length field from the decoded buffer,
/// so a [`Frame`] costs no allocation and no copy of the payload.
/// Encoding reads the same view, so a caller can frame bytes it already holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The broker-assigned message id (the 16 bytes of a v7 UUID).
    pub message_id: [u8; 16],
    /// The trace id, when the producer sent one (flag 1).
    pub trace_id: Option<[u8; 16]>,
    /// The transaction id, the client's or a broker-generated one; at most `u16::MAX` bytes.
    pub transaction_id: &'a str,
    /// The authenticated producer's `sub`, when auth is on (flag 2); at most `u16::MAX` bytes.
    pub producer_sub: Option<&'a str>,
    /// True when `payload` is nonce plus ciphertext rather than JSON (flag 4).
    pub encrypted: bool,
    /// The consumer groups the frame is for, `\n`-separated (flag 8); `None`:
    /// every group. At most `u16::MAX` bytes.
    pub audience: Option<&'a str>,
    /// The payload bytes exactly as stored: raw client JSON, or nonce plus ciphertext.
    pub payload: &'a [u8],
}

impl<'a> Frame<'a> {
    /// The flags byte this frame encodes with.
    #[must_use]
    pub fn flags(&self) -> u8 {
        let mut flags = 0;
        if self.trace_id.is_some() {
            flags |= FLAG_TRACE_ID;
        }
        if self.producer_sub.is_some() {
            flags |= FLAG_PRODUCER_SUB;
        }
        if self.encrypted {
            flags |= FLAG_ENCRYPTED;
        }
        if self.audience.is_some() {
            flags |= FLAG_AUDIENCE;
        }
        flags
    }

    /// Whether consumer group `group` receives this frame: every group
    /// without an audience, else the groups it names.
    #[must_use]
    pub fn delivered_to(&self, group: &str) -> bool {
        self.audience
            .is_none_or(|audience| audience.split(AUDIENCE_SEPARATOR).any(|g| g == group))
    }

    /// The exact number of bytes [`Frame::encode`] appends, `body_len` prefix included.
    ///
    /// This does not check the length limits; [`Frame::encode`] does.
    #[must_use]
    pub fn encoded_size(&self) -> usize {
        LEN_PREFIX.saturating_add(self.body_size())
    }

    /// Appends the encoded frame to `dst`.
    ///
    /// Reserves exactly [`Frame::encoded_size`] bytes first, so `dst` grows at most once.
    ///
    /// # Errors
    ///
    /// [`FrameError::TooLarge`] when the transaction id or producer sub is longer
    /// than `u16::MAX` bytes, or the body is longer than `u32::MAX` bytes.
    /// On error `dst` is left untouched.
    pub fn encode(&self, dst: &mut BytesMut) -> Result<(), FrameError> {
        let txn_len = u16_len(self.transaction_id, Field::TransactionId)?;
        let psub_len = self
            .producer_sub
            .map(|sub| u16_len(sub, Field::ProducerSub))
            .transpose()?;
        let audience_len = self
            .audience
            .map(|audience| u16_len(audience, Field::Audience))
            .transpose()?;
        let body_len = checked_body_len(self.body_size())?;

        dst.reserve(self.encoded_size());
        dst.put_u32_le(body_len);
        dst.put_u8(self.flags());
        dst.put_slice(&self.message_id);
        if let Some(trace_id) = &self.trace_id {
            dst.put_slice(trace_id);
        }
        dst.put_u16_le(txn_len);
        dst.put_slice(self.transaction_id.as_bytes());
        if let (Some(sub), Some(sub_len)) = (self.producer_sub, psub_len) {
            dst.put_u16_le(sub_len);
            dst.put_slice(sub.as_bytes());
        }
        if let (Some(audience), Some(len)) = (self.audience, audience_len) {
            dst.put_u16_le(len);
            dst.put_slice(audience.as_bytes());
        }
        dst.put_slice(self.payload);
        Ok(())
    }

    /// Decodes the frame at the start of `buf`, returning it and the bytes it consumed.
    ///
    /// Bytes after the frame are left alone, so a caller can decode a stream
    /// by advancing past `consumed` and calling again.
    ///
    /// # Errors
    ///
    /// [`FrameError::Truncated`] when `buf` ends inside the frame or a field overruns its body,
    /// [`FrameError::InvalidFlags`] for unknown flag bits,
    /// [`FrameError::InvalidUtf8`] for a transaction id or producer sub that is not UTF-8.
    pub fn decode(buf: &'a [u8]) -> Result<(Frame<'a>, usize), FrameError> {
        let (frame, next) = decode_at(buf, 0)?;
        Ok((frame, next))
    }

    /// Body length without limits: flags, ids, both length-prefixed strings and the payload.
    fn body_size(&self) -> usize {
        let trace_len = if self.trace_id.is_some() { 16 } else { 0 };
        let psub_len = self
            .producer_sub
            .map_or(0, |sub| 2usize.saturating_add(sub.len()));
        let audience_len = self
            .audience
            .map_or(0, |audience| 2usize.saturating_add(audience.len()));
        MIN_BODY_LEN
            .saturating_add(trace_len)
            .saturating_add(self.transaction_id.len())
            .saturating_add(psub_len)
            .saturating_add(audience_len)
            .saturating_add(self.payload.len())
    }
}

/// Decodes the frame that starts at `pos` in `buf`; returns it and the position after it.
pub(crate) fn decode_at(buf: &[u8], pos: usize) -> Result<(Frame<'_>, usize), FrameError> {
    let (body_start, body_end) = body_bounds(buf, pos)?;
    let mut body = Reader {
        buf,
        pos: body_start,
        end: body_end,
    };

    let flags = body.u8()?;
    if flags & !KNOWN_FLAGS != 0 {
        return Err(FrameError::InvalidFlags {
            offset: body_start,
            flags,
        });
    }
    let message_id = *body.array::<16>()?;
    let trace_id = if flags & FLAG_TRACE_ID == 0 {
        None
    } else {
        Some(*body.array::<16>()?)
    };
    let transaction_id = body.str16(Field::TransactionId)?;
    let producer_sub = if flags & FLAG_PRODUCER_SUB == 0 {
        None
    } else {
        Some(body.str16(Field::ProducerSub)?)
    };
    let audience = if flags & FLAG_AUDIENCE == 0 {
        None
    } else {
        Some(body.str16(Field::Audience)?)
    };
    let payload = body.rest();

    let frame = Frame {
        message_id,
        trace_id,
        transaction_id,
        producer_sub,
        encrypted: flags & FLAG_ENCRYPTED != 0,
        audience,
        payload,
    };
    Ok((frame, body_end))
}

/// Steps over the frame at `pos` reading only its `body_len`; returns the position after it.
pub(crate) fn skip_at(buf: &[u8], pos: usize) -> Result<usize, FrameError> {
    let (_, body_end) = body_bounds(buf, pos)?;
    Ok(body_end)
}

/// Reads the `body_len` at `pos` and checks the body fits in `buf`; returns `[start, end)` of the body.
fn body_bounds(buf: &[u8], pos: usize) -> Result<(usize, usize), FrameError> {
    let mut reader = Reader {
        buf,
        pos,
        end: buf.len(),
    };
    let body_len = reader.u32()? as usize;
    let body_start = reader.pos;
    reader.take(body_len)?;
    Ok((body_start, reader.pos))
}

fn u16_len(text: &str, field: Field) -> Result<u16, FrameError> {
    u16::try_from(text.len()).map_err(|_| FrameError::TooLarge {
        field,
        len: text.len(),
        max: usize::from(u16::MAX),
    })
}

fn checked_body_len(body_size: usize) -> Result<u32, FrameError> {
    u32::try_from(body_size).map_err(|_| FrameError::TooLarge {
        field: Field::Body,
        len: body_size,
        max: u32::MAX as usize,
    })
}

/// A bounds-checked cursor over untrusted bytes, limited to `[pos, end)`.
///
/// Invariant: `pos <= end <= buf.len()` for every reader built in this module,
/// and every read goes through `get`, so a broken invariant yields an error, never a panic.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    end: usize,
}

impl<'a> Reader<'a> {
    fn rest(&mut self) -> &'a [u8] {
        let rest = self.buf.get(self.pos..self.end).unwrap_or_default();
        self.pos = self.end;
        rest
    }

    fn peek_rest(&self) -> &'a [u8] {
        self.buf.get(self.pos..self.end).unwrap_or_default()
    }

    fn take(&mut self, need: usize) -> Result<&'a [u8], FrameError> {
        let rest = self.peek_rest();
        let bytes = rest.get(..need).ok_or(FrameError::Truncated {
            offset: self.pos,
            need,
            have: rest.len(),
        })?;
        self.pos += need;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self) -> Result<&'a [u8; N], FrameError> {
        let rest = self.peek_rest();
        let (head, _) = rest.split_first_chunk::<N>().ok_or(FrameError::Truncated {
            offset: self.pos,
            need: N,
            have: rest.len(),
        })?;
        self.pos += N;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, FrameError> {
        let [byte] = *self.array::<1>()?;
        Ok(byte)
    }

    fn u16(&mut self) -> Result<u16, FrameError> {
        Ok(u16::from_le_bytes(*self.array::<2>()?))
    }

    fn u32(&mut self) -> Result<u32, FrameError> {
        Ok(u32::from_le_bytes(*self.array::<4>()?))
    }

    /// A `u16` length followed by that many bytes of UTF-8.
    fn str16(&mut self, field: Field) -> Result<&'a str, FrameError> {
        let len = usize::from(self.u16()?);
        let offset = self.pos;
        let bytes = self.take(len)?;
        std::str::from_utf8(bytes).map_err(|_| FrameError::InvalidUtf8 { offset, field })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: [u8; 16] = [
        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
        0x10,
    ];
    const TRACE: [u8; 16] = [0xee; 16];

    fn minimal() -> Frame<'static> {
        Frame {
            message_id: ID,
            trace_id: None,
            transaction_id: "",
            producer_sub: None,
            encrypted: false,
            audience: None,
            payload: b"",
        }
    }

    /// Encodes `frame`, compares with `expected` byte for byte, then decodes it back.
    fn check(frame: &Frame<'_>, expected: &[u8]) {
        let mut buf = BytesMut::new();
        frame.encode(&mut buf).unwrap();
        assert_eq!(&buf[..], expected, "encoding of {frame:?}");
        assert_eq!(frame.encoded_size(), expected.len());
        let (decoded, consumed) = Frame::decode(&buf).unwrap();
        assert_eq!(consumed, expected.len());
        assert_eq!(&decoded, frame);
    }

    fn bytes(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    #[test]
    fn encode_writes_exact_little_endian_bytes() {
        let long_txn_id = "x".repeat(300);
        let table: Vec<(Frame<'_>, Vec<u8>)> = vec![
            // Smallest frame: body_len 19 = flags + id + txn_len 0.
            (minimal(), bytes(&[&[19, 0, 0, 0], &[0], &ID, &[0, 0]])),
            // Transaction id and JSON payload, no optional fields.
            (
                Frame {
                    transaction_id: "tx-1",
                    payload: b"{\"a\":1}",
                    ..minimal()
                },
                bytes(&[&[30, 0, 0, 0], &[0], &ID, &[4, 0], b"tx-1", b"{\"a\":1}"]),
            ),
            // Trace id only: flag 1, 16 more bytes right after the message id.
            (
                Frame {
                    trace_id: Some(TRACE),
                    transaction_id: "t",
                    payload: b"1",
                    ..minimal()
                },
                bytes(&[&[37, 0, 0, 0], &[1], &ID, &TRACE, &[1, 0], b"t", b"1"]),
            ),
            // Producer sub only: flag 2, u16-prefixed after the transaction id.
            (
                Frame {
                    transaction_id: "t",
                    producer_sub: Some("svc"),
                    payload: b"[]",
                    ..minimal()
                },
                bytes(&[
                    &[27, 0, 0, 0],
                    &[2],
                    &ID,
                    &[1, 0],
                    b"t",
                    &[3, 0],
                    b"svc",
                    b"[]",
                ]),
            ),
            // Everything: flags 1|2|4 = 7, encrypted payload is opaque bytes.
            (
                Frame {
                    trace_id: Some(TRACE),
                    transaction_id: "ab",
                    producer_sub: Some(""),
                    encrypted: true,
                    payload: &[0xff, 0x00],
                    ..minimal()
                },
                bytes(&[
                    &[41, 0, 0, 0],
                    &[7],
                    &ID,
                    &TRACE,
                    &[2, 0],
                    b"ab",
                    &[0, 0],
                    &[0xff, 0],
                ]),
            ),
            // Audience: flag 8, u16-prefixed after the producer sub, before the payload.
            (
                Frame {
                    transaction_id: "t",
                    producer_sub: Some("s"),
                    audience: Some("g\nh"),
                    payload: b"1",
                    ..minimal()
                },
                bytes(&[
                    &[29, 0, 0, 0],
                    &[10],
                    &ID,
                    &[1, 0],
                    b"t",
                    &[1, 0],
                    b"s",
                    &[3, 0],
                    b"g\nh",
                    b"1",
                ]),
            ),
            // Lengths past one byte are little-endian: a 300-byte txn id is 0x2c 0x01.
            (
                Frame {
                    transaction_id: &long_txn_id,
                    ..minimal()
                },
                bytes(&[
                    &[0x3f, 0x01, 0, 0],
                    &[0],
                    &ID,
                    &[0x2c, 0x01],
                    long_txn_id.as_bytes(),
                ]),
            ),
        ];
        for (frame, expected) in &table {
            check(frame, expected);
        }
    }

    #[test]
    fn encode_appends_after_existing_bytes() {
        let mut buf = BytesMut::from(&b"head"[..]);
        minimal().encode(&mut buf).unwrap();
        assert_eq!(&buf[..4], b"head");
        assert_eq!(buf.len(), 4 + minimal().encoded_size());
    }

    #[test]
    fn encode_rejects_txn_id_over_u16_and_leaves_buffer_untouched() {
        let long = "x".repeat(usize::from(u16::MAX) + 1);
        let frame = Frame {
            transaction_id: &long,
            ..minimal()
        };
        let mut buf = BytesMut::new();
        let err = frame.encode(&mut buf).unwrap_err();
        assert!(matches!(
            err,
            FrameError::TooLarge {
                field: Field::TransactionId,
                len: 65_536,
                max: 65_535
            }
        ));
        assert!(buf.is_empty());

        let at_limit = "x".repeat(usize::from(u16::MAX));
        let frame = Frame {
            transaction_id: &at_limit,
            ..minimal()
        };
        frame.encode(&mut buf).unwrap();
    }

    #[test]
    fn encode_rejects_producer_sub_over_u16() {
        let long = "s".repeat(70_000);
        let frame = Frame {
            producer_sub: Some(&long),
            ..minimal()
        };
        let err = frame.encode(&mut BytesMut::new()).unwrap_err();
        assert!(matches!(
            err,
            FrameError::TooLarge {
                field: Field::ProducerSub,
                len: 70_000,
                ..
            }
        ));
    }

    #[test]
    fn body_over_u32_is_too_large() {
        // A real 4 GiB payload is too much for a unit test; the check is the same function.
        let over = u32::MAX as usize + 1;
        assert!(matches!(
            checked_body_len(over),
            Err(FrameError::TooLarge { field: Field::Body, len, .. }) if len == over
        ));
        assert_eq!(checked_body_len(u32::MAX as usize).unwrap(), u32::MAX);
    }

    #[test]
    fn decode_leaves_trailing_bytes() {
        let mut buf = BytesMut::new();
        minimal().encode(&mut buf).unwrap();
        buf.put_slice(b"next");
        let (frame, consumed) = Frame::decode(&buf).unwrap();
        assert_eq!(frame, minimal());
        assert_eq!(consumed, 23);
    }

    #[test]
    fn decode_reports_truncated_prefix_and_body() {
        assert!(matches!(
            Frame::decode(&[19, 0]),
            Err(FrameError::Truncated {
                offset: 0,
                need: 4,
                have: 2
            })
        ));
        assert!(matches!(
            Frame::decode(&[19, 0, 0, 0, 0, 1, 2]),
            Err(FrameError::Truncated {
                offset: 4,
                need: 19,
                have: 3
            })
        ));
    }

    #[test]
    fn decode_reports_body_too_short_for_its_fields() {
        // body_len 5 holds the flags byte and 4 bytes: the message id overruns the body.
        let buf = bytes(&[&[5, 0, 0, 0], &[0], &[0; 4], &[0; 20]]);
        assert!(matches!(
            Frame::decode(&buf),
            Err(FrameError::Truncated {
                offset: 5,
                need: 16,
                have: 4
            })
        ));
        // txn_len 9 but only 2 bytes left in the body.
        let buf = bytes(&[&[21, 0, 0, 0], &[0], &ID, &[9, 0], b"ab", &[0; 8]]);
        assert!(matches!(
            Frame::decode(&buf),
            Err(FrameError::Truncated {
                offset: 23,
                need: 9,
                have: 2
            })
        ));
        // Flag 2 set but the body ends before psub_len.
        let buf = bytes(&[&[19, 0, 0, 0], &[2], &ID, &[0, 0]]);
        assert!(matches!(
            Frame::decode(&buf),
            Err(FrameError::Truncated {
                offset: 23,
                need: 2,
                have: 0
            })
        ));
    }

    #[test]
    fn an_audience_names_the_groups_a_frame_is_delivered_to() {
        let frame = Frame {
            audience: Some("g\nh"),
            ..minimal()
        };
        assert!(frame.delivered_to("g") && frame.delivered_to("h"));
        assert!(!frame.delivered_to("k") && !frame.delivered_to("g\nh"));
        assert!(minimal().delivered_to("anyone"));
    }

    #[test]
    fn decode_rejects_unknown_flag_bits() {
        for flags in [0x10u8, 0x20, 0x80, 0xff] {
            let buf = bytes(&[&[19, 0, 0, 0], &[flags], &ID, &[0, 0]]);
            assert!(matches!(
                Frame::decode(&buf),
                Err(FrameError::InvalidFlags { offset: 4, flags: f }) if f == flags
            ));
        }
    }

    #[test]
    fn decode_rejects_invalid_utf8() {
        let buf = bytes(&[&[21, 0, 0, 0], &[0], &ID, &[2, 0], &[0xc3, 0x28]]);
        assert!(matches!(
            Frame::decode(&buf),
            Err(FrameError::InvalidUtf8 {
                offset: 23,
                field: Field::TransactionId
            })
        ));
        let buf = bytes(&[&[22, 0, 0, 0], &[2], &ID, &[0, 0], &[1, 0], &[0xff]]);
        assert!(matches!(
            Frame::decode(&buf),
            Err(FrameError::InvalidUtf8 {
                offset: 25,
                field: Field::ProducerSub
            })
        ));
    }

    #[test]
    fn error_messages_are_lowercase_without_period() {
        let errors = [
            FrameError::Truncated {
                offset: 1,
                need: 2,
                have: 0,
            },
            FrameError::InvalidFlags {
                offset: 4,
                flags: 0x18,
            },
            FrameError::InvalidUtf8 {
                offset: 23,
                field: Field::ProducerSub,
            },
            FrameError::TooLarge {
                field: Field::TransactionId,
                len: 70_000,
                max: 65_535,
            },
        ];
        let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            messages,
            [
                "truncated at byte 1: need 2 bytes, have 0",
                "unknown flag bits in 0x18 at byte 4",
                "producer sub at byte 23 is not valid utf-8",
                "transaction id is 70000 bytes, over the limit of 65535",
            ]
        );
    }
}
