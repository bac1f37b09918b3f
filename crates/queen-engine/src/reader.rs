//! A cursor over the broker's own binary formats (spool records, mesh
//! batches): every read answers `None` past the end instead of panicking.

/// The unread rest of a byte slice.
pub(crate) struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { rest: bytes }
    }

    /// The next `n` bytes.
    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.rest.len() < n {
            return None;
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Some(head)
    }

    pub(crate) fn byte(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    pub(crate) fn u16_le(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }

    pub(crate) fn u64_le(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    /// A field behind a little-endian `u32` length.
    pub(crate) fn u32_field(&mut self) -> Option<&'a [u8]> {
        let len = usize::try_from(u32::from_le_bytes(self.take(4)?.try_into().ok()?)).ok()?;
        self.take(len)
    }

    /// A field behind a `u8` length.
    pub(crate) fn u8_field(&mut self) -> Option<&'a [u8]> {
        let len = usize::from(self.byte()?);
        self.take(len)
    }

    /// Whether everything was read.
    pub(crate) fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::Reader;

    #[test]
    fn reads_stop_at_the_end() {
        let mut reader = Reader::new(&[2, b'h', b'i', 1, 0, 0, 0, b'x', 7]);
        assert_eq!(reader.u8_field(), Some(&b"hi"[..]));
        assert_eq!(reader.u32_field(), Some(&b"x"[..]));
        assert_eq!(reader.u16_le(), None);
        assert_eq!(reader.byte(), Some(7));
        assert!(reader.is_empty());
        assert_eq!(reader.byte(), None);
        assert_eq!(Reader::new(&[5, b'a']).u8_field(), None);
    }
}
