//! Channel secrets at rest: a webhook's signing secret and a PagerDuty routing key must be
//! read back to be used, so they cannot be hashed; they are sealed (XChaCha20-Poly1305) under
//! a key derived from `STREAMWATCH_SECRET`. A copy of the database alone signs nothing.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

/// Seals and opens channel secrets.
#[derive(Clone)]
pub struct Sealer {
    cipher: XChaCha20Poly1305,
}

/// A sealed value that does not open (another server secret, or a damaged row).
#[derive(Debug, thiserror::Error)]
#[error("sealed secret does not open (was STREAMWATCH_SECRET changed?)")]
pub struct SealError;

impl Sealer {
    /// The sealing key is HMAC-SHA256(server secret, a fixed label): distinct from the cookie
    /// key derived from the same secret.
    pub fn new(server_secret: &[u8]) -> Self {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(server_secret)
            .expect("HMAC takes a key of any length");
        mac.update(b"streamwatch alerts: channel secrets v1");
        let key = mac.finalize().into_bytes();
        Sealer {
            cipher: XChaCha20Poly1305::new(&key),
        }
    }

    /// base64(nonce ‖ ciphertext ‖ tag), a fresh random nonce each time.
    pub fn seal(&self, plain: &str) -> String {
        let mut nonce = [0u8; 24];
        rand::rngs::OsRng.fill_bytes(&mut nonce);
        let sealed = self
            .cipher
            .encrypt(XNonce::from_slice(&nonce), plain.as_bytes())
            .expect("encryption of an in-memory buffer does not fail");
        let mut out = nonce.to_vec();
        out.extend(sealed);
        STANDARD.encode(out)
    }

    pub fn open(&self, sealed: &str) -> Result<String, SealError> {
        let bytes = STANDARD.decode(sealed).map_err(|_| SealError)?;
        if bytes.len() < 24 {
            return Err(SealError);
        }
        let (nonce, ct) = bytes.split_at(24);
        let plain = self
            .cipher
            .decrypt(XNonce::from_slice(nonce), ct)
            .map_err(|_| SealError)?;
        String::from_utf8(plain).map_err(|_| SealError)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seals_and_opens_only_under_the_same_secret() {
        let s = Sealer::new(b"0123456789abcdef0123456789abcdef");
        let a = s.seal("whsec_abc");
        let b = s.seal("whsec_abc");
        assert_ne!(a, b, "fresh nonce each time");
        assert!(!a.contains("whsec"));
        assert_eq!(s.open(&a).ok().as_deref(), Some("whsec_abc"));
        let other = Sealer::new(b"another secret of thirty-two chars!");
        assert!(other.open(&a).is_err());
        assert!(s.open("not base64!").is_err());
        assert!(s.open("").is_err());
    }
}
