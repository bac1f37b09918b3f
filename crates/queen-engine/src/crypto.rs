//! Encryption at rest: AES-256-GCM over each payload (decisions.md §3.6).
//!
//! A sealed payload records the key that sealed it:
//! `0x01 || key id (4 bytes) || nonce (12 bytes) || ciphertext || tag (16
//! bytes)`, the key id being the first four bytes of BLAKE3 of the key. The
//! nonce is random per message and still stands in front of the ciphertext,
//! as the decision says; frames carrying sealed payloads set flag 4.
//! Payloads sealed before key ids existed are `nonce || ciphertext || tag`;
//! they still open: a payload whose header names no key of this broker is
//! tried as that older layout (GCM's tag makes a wrong guess fail cleanly, so
//! a random nonce that happens to look like a header costs one extra try,
//! never a wrong plaintext).
//!
//! Rotation: the broker seals with its key (`QUEEN_ENCRYPTION_KEY`, 64 hex
//! characters, or `QUEEN_ENCRYPTION_KEY_FILE`) and opens with it or with the
//! previous key (`QUEEN_ENCRYPTION_KEY_OLD`), chosen by the recorded key id.
//! Without a key, a push to an encrypted queue fails: the broker never falls
//! back to plaintext.

use aes_gcm::aead::{Aead, AeadCore, KeyInit, OsRng};
use aes_gcm::{Aes256Gcm, Key, Nonce};

use crate::EngineError;

/// Bytes of nonce in front of every sealed payload's ciphertext.
pub const NONCE_LEN: usize = 12;

/// The first byte of a sealed payload that records its key.
pub const SEALED_V1: u8 = 1;

/// Bytes of the key id.
pub const KEY_ID_LEN: usize = 4;

/// Bytes in front of the nonce: the layout byte and the key id.
pub const HEADER_LEN: usize = 1 + KEY_ID_LEN;

/// An AES-256-GCM key, parsed once at startup, with the previous key it
/// still opens payloads with (rotation).
#[derive(Clone)]
pub struct EncryptionKey {
    cipher: Aes256Gcm,
    id: [u8; KEY_ID_LEN],
    previous: Option<Box<EncryptionKey>>,
}

impl std::fmt::Debug for EncryptionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EncryptionKey(..)")
    }
}

impl std::str::FromStr for EncryptionKey {
    type Err = EngineError;

    /// Parse 64 hexadecimal characters (32 bytes).
    fn from_str(text: &str) -> Result<EncryptionKey, EngineError> {
        let mut key = [0u8; 32];
        hex::decode_to_slice(text.trim(), &mut key).map_err(|_| EngineError::InvalidKey)?;
        let mut id = [0u8; KEY_ID_LEN];
        id.copy_from_slice(&blake3::hash(&key).as_bytes()[..KEY_ID_LEN]);
        Ok(EncryptionKey {
            cipher: Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(&key)),
            id,
            previous: None,
        })
    }
}

impl EncryptionKey {
    /// This key, still opening payloads that `previous` sealed.
    #[must_use]
    pub fn with_previous(mut self, previous: EncryptionKey) -> EncryptionKey {
        self.previous = Some(Box::new(EncryptionKey {
            previous: None,
            ..previous
        }));
        self
    }

    /// The id a sealed payload records for this key.
    pub fn id(&self) -> [u8; KEY_ID_LEN] {
        self.id
    }

    /// Seal `plaintext` under a fresh random nonce, recording this key's id.
    pub fn seal(&self, plaintext: &[u8]) -> Result<Vec<u8>, EngineError> {
        let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
        let ciphertext = self
            .cipher
            .encrypt(&nonce, plaintext)
            .map_err(|_| EngineError::Seal)?;
        let mut sealed = Vec::with_capacity(HEADER_LEN + NONCE_LEN + ciphertext.len());
        sealed.push(SEALED_V1);
        sealed.extend_from_slice(&self.id);
        sealed.extend_from_slice(&nonce);
        sealed.extend_from_slice(&ciphertext);
        Ok(sealed)
    }

    /// The key of this broker whose id is `id`.
    fn by_id(&self, id: &[u8]) -> Option<&EncryptionKey> {
        if id == self.id {
            return Some(self);
        }
        self.previous
            .as_deref()
            .filter(|previous| id == previous.id)
    }

    /// This key and the previous one.
    fn keys(&self) -> impl Iterator<Item = &EncryptionKey> {
        std::iter::once(self).chain(self.previous.as_deref())
    }

    /// Open `nonce || ciphertext` with this key alone.
    fn open_raw(&self, sealed: &[u8]) -> Result<Vec<u8>, EngineError> {
        let (nonce, ciphertext) = sealed
            .split_at_checked(NONCE_LEN)
            .ok_or(EngineError::Unseal)?;
        self.cipher
            .decrypt(Nonce::from_slice(nonce), ciphertext)
            .map_err(|_| EngineError::Unseal)
    }

    /// Open a sealed payload with the key it records (this one or the
    /// previous), or, for a payload sealed before key ids, with either;
    /// fails on an unknown key or tampered bytes.
    pub fn open(&self, sealed: &[u8]) -> Result<Vec<u8>, EngineError> {
        if sealed.first() == Some(&SEALED_V1) && sealed.len() > HEADER_LEN {
            let (header, rest) = sealed.split_at(HEADER_LEN);
            if let Some(key) = self.by_id(&header[1..]) {
                if let Ok(plain) = key.open_raw(rest) {
                    return Ok(plain);
                }
            }
        }
        // The layout without a key id.
        self.keys()
            .find_map(|key| key.open_raw(sealed).ok())
            .ok_or(EngineError::Unseal)
    }
}

/// The broker's at-rest key and what it last learned of each queue's
/// `encryptionEnabled`, shared by push fusion, transactions, pops and the
/// dead-letter browser.
///
/// The flag cache is keyed by queue name and has no cap of its own yet: an
/// entry is written only for a queue PostgreSQL reported on (a push that
/// reached `log_push_v2`), and dropped when the queue is configured or deleted.
pub(crate) struct AtRest {
    key: Option<EncryptionKey>,
    /// Last known `encryptionEnabled` per queue. A miss means "not encrypted"
    /// (implicit queues never are); a stale entry costs one refused slot, never
    /// plaintext, because `log_push_v2` checks the flag under its own snapshot.
    flags: parking_lot::RwLock<std::collections::HashMap<std::sync::Arc<str>, bool>>,
    /// The queues with `encryptionEnabled` as the last cluster-state refresh
    /// read them (at most `bounded::MAX_BOUNDED`): what a broker without a
    /// key must not spool in plaintext, even for a queue it never pushed to.
    sealed: parking_lot::RwLock<std::sync::Arc<std::collections::HashSet<std::sync::Arc<str>>>>,
}

impl AtRest {
    pub(crate) fn new(key: Option<EncryptionKey>) -> AtRest {
        AtRest {
            key,
            flags: parking_lot::RwLock::default(),
            sealed: parking_lot::RwLock::default(),
        }
    }

    /// The at-rest key, if the broker has one.
    pub(crate) fn key(&self) -> Option<&EncryptionKey> {
        self.key.as_ref()
    }

    /// The cached `encryptionEnabled` of `queue` (a miss means plain).
    pub(crate) fn flag(&self, queue: &str) -> bool {
        self.flags.read().get(queue).copied().unwrap_or(false)
    }

    /// Record `queue`'s `encryptionEnabled` as PostgreSQL reported it.
    pub(crate) fn set_flag(&self, queue: std::sync::Arc<str>, enabled: bool) {
        self.flags.write().insert(queue, enabled);
    }

    /// The queues with `encryptionEnabled`, as a cluster-state refresh read them.
    pub(crate) fn set_sealed(&self, queues: Vec<std::sync::Arc<str>>) {
        *self.sealed.write() = std::sync::Arc::new(queues.into_iter().collect());
    }

    /// The first of `queues` (`naming::queue_key`s) this broker must not
    /// write without a key it lacks: known to have `encryptionEnabled`,
    /// while the broker has no key. `None` with a key.
    pub(crate) fn first_needing_key<'a>(
        &self,
        mut queues: impl Iterator<Item = &'a str>,
    ) -> Option<&'a str> {
        if self.key.is_some() {
            return None;
        }
        let sealed = std::sync::Arc::clone(&self.sealed.read());
        queues.find(|queue| sealed.contains(*queue) || self.flag(queue))
    }

    /// Forget `queue`'s flag (it was reconfigured or deleted).
    pub(crate) fn forget(&self, queue: &str) {
        self.flags.write().remove(queue);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

    #[test]
    fn seal_then_open_round_trips_and_nonces_differ() {
        let key: EncryptionKey = KEY.parse().unwrap();
        let a = key.seal(br#"{"secret":1}"#).unwrap();
        let b = key.seal(br#"{"secret":1}"#).unwrap();
        assert_ne!(a, b, "two seals of one plaintext must not be equal");
        assert_eq!(a.len(), HEADER_LEN + NONCE_LEN + 12 + 16);
        assert_eq!(a[0], SEALED_V1);
        assert_eq!(a[1..HEADER_LEN], key.id());
        assert_eq!(key.open(&a).unwrap(), br#"{"secret":1}"#);
    }

    const OLD: &str = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

    /// The layout before key ids: `nonce || ciphertext || tag`.
    fn legacy_seal(key: &EncryptionKey, plaintext: &[u8]) -> Vec<u8> {
        key.seal(plaintext).unwrap()[HEADER_LEN..].to_vec()
    }

    #[test]
    fn a_rotated_key_opens_what_the_previous_one_sealed_and_seals_with_the_new_one() {
        let old: EncryptionKey = OLD.parse().unwrap();
        let new: EncryptionKey = KEY.parse().unwrap();
        assert_ne!(old.id(), new.id());
        let by_old = old.seal(b"before").unwrap();
        let legacy = legacy_seal(&old, b"legacy");
        let rotated = new.clone().with_previous(old.clone());
        assert_eq!(rotated.open(&by_old).unwrap(), b"before");
        assert_eq!(rotated.open(&legacy).unwrap(), b"legacy");
        let by_new = rotated.seal(b"after").unwrap();
        assert_eq!(
            by_new[1..HEADER_LEN],
            new.id(),
            "new payloads record the new key"
        );
        assert_eq!(new.open(&by_new).unwrap(), b"after");
        // Without the previous key, what it sealed does not open.
        assert!(matches!(new.open(&by_old), Err(EngineError::Unseal)));
        assert!(matches!(new.open(&legacy), Err(EngineError::Unseal)));
        assert!(matches!(old.open(&by_new), Err(EngineError::Unseal)));
    }

    #[test]
    fn a_legacy_nonce_that_looks_like_a_header_still_opens() {
        let key: EncryptionKey = KEY.parse().unwrap();
        // A payload of the layout without key ids whose random nonce happens
        // to start with this key's header.
        let mut nonce = [7u8; NONCE_LEN];
        nonce[0] = SEALED_V1;
        nonce[1..HEADER_LEN].copy_from_slice(&key.id());
        let ciphertext = key
            .cipher
            .encrypt(Nonce::from_slice(&nonce), &b"unlucky"[..])
            .unwrap();
        let mut sealed = nonce.to_vec();
        sealed.extend_from_slice(&ciphertext);
        // The header reading fails its tag; the older layout opens it.
        assert_eq!(key.open(&sealed).unwrap(), b"unlucky");
    }

    #[test]
    fn tampering_or_a_wrong_key_fails_to_open() {
        let key: EncryptionKey = KEY.parse().unwrap();
        let mut sealed = key.seal(b"hello").unwrap();
        let last = sealed.len() - 1;
        sealed[last] ^= 1;
        assert!(matches!(key.open(&sealed), Err(EngineError::Unseal)));
        let other: EncryptionKey = KEY.replace("00", "ff").parse().unwrap();
        let sealed = key.seal(b"hello").unwrap();
        assert!(matches!(other.open(&sealed), Err(EngineError::Unseal)));
        assert!(matches!(key.open(&[1, 2, 3]), Err(EngineError::Unseal)));
    }

    #[test]
    fn keys_must_be_64_hex_characters() {
        assert!("abc".parse::<EncryptionKey>().is_err());
        assert!(KEY[..62].parse::<EncryptionKey>().is_err());
        assert!(KEY.replace('0', "g").parse::<EncryptionKey>().is_err());
        assert!(KEY.parse::<EncryptionKey>().is_ok());
    }
}
