//! Encryption at rest: AES-256-GCM over each payload (decisions.md §3.6).
//!
//! A sealed payload is `nonce (12 bytes) || ciphertext || tag (16 bytes)`; the
//! nonce is random per message. Frames carrying sealed payloads set flag 4.
//! The key comes from `QUEEN_ENCRYPTION_KEY` (64 hex characters). Without a key,
//! a push to an encrypted queue fails: the broker never falls back to plaintext.

use aes_gcm::aead::{Aead, AeadCore, KeyInit, OsRng};
use aes_gcm::{Aes256Gcm, Key, Nonce};

use crate::EngineError;

/// Bytes of nonce in front of every sealed payload.
pub const NONCE_LEN: usize = 12;

/// An AES-256-GCM key, parsed once at startup.
#[derive(Clone)]
pub struct EncryptionKey {
    cipher: Aes256Gcm,
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
        Ok(EncryptionKey {
            cipher: Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(&key)),
        })
    }
}

impl EncryptionKey {
    /// Seal `plaintext` under a fresh random nonce.
    pub fn seal(&self, plaintext: &[u8]) -> Result<Vec<u8>, EngineError> {
        let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
        let ciphertext = self
            .cipher
            .encrypt(&nonce, plaintext)
            .map_err(|_| EngineError::Seal)?;
        let mut sealed = Vec::with_capacity(NONCE_LEN + ciphertext.len());
        sealed.extend_from_slice(&nonce);
        sealed.extend_from_slice(&ciphertext);
        Ok(sealed)
    }

    /// Open a sealed payload; fails on a wrong key or tampered bytes.
    pub fn open(&self, sealed: &[u8]) -> Result<Vec<u8>, EngineError> {
        let (nonce, ciphertext) = sealed
            .split_at_checked(NONCE_LEN)
            .ok_or(EngineError::Unseal)?;
        self.cipher
            .decrypt(Nonce::from_slice(nonce), ciphertext)
            .map_err(|_| EngineError::Unseal)
    }
}

/// The broker's at-rest key and what it last learned of each queue's
/// `encryptionEnabled`, shared by push fusion, transactions, pops and the
/// dead-letter browser.
///
/// The flag cache is keyed by queue name and has no cap of its own yet: an
/// entry is written only for a queue PostgreSQL reported on (a push that
/// reached `log_push_v1`), and dropped when the queue is configured or deleted.
pub(crate) struct AtRest {
    key: Option<EncryptionKey>,
    /// Last known `encryptionEnabled` per queue. A miss means "not encrypted"
    /// (implicit queues never are); a stale entry costs one refused slot, never
    /// plaintext, because `log_push_v1` checks the flag under its own snapshot.
    flags: parking_lot::RwLock<std::collections::HashMap<std::sync::Arc<str>, bool>>,
}

impl AtRest {
    pub(crate) fn new(key: Option<EncryptionKey>) -> AtRest {
        AtRest {
            key,
            flags: parking_lot::RwLock::default(),
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
        assert_eq!(a.len(), NONCE_LEN + 12 + 16);
        assert_eq!(key.open(&a).unwrap(), br#"{"secret":1}"#);
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
