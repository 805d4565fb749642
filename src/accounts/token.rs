//! Session tokens and their signed cookie form `<token>.<signature>`: the signature is
//! HMAC-SHA256 of the token under the service secret, base64url without padding. The
//! database keeps only SHA-256 of the token, so a leaked table grants no session.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;

/// A fresh random token: 32 bytes from the OS generator, base64url.
pub fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Hex SHA-256 of a secret value, as stored at rest.
pub fn sha256_hex(value: &str) -> String {
    hex::encode(Sha256::digest(value.as_bytes()))
}

/// Signs and verifies cookie values with the service secret.
#[derive(Clone)]
pub struct CookieSigner {
    key: Vec<u8>,
}

impl CookieSigner {
    pub fn new(secret: &[u8]) -> Self {
        Self {
            key: secret.to_vec(),
        }
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC accepts keys of any length.
        HmacSha256::new_from_slice(&self.key).expect("hmac takes any key length")
    }

    /// `<token>.<signature>` for the Set-Cookie header.
    pub fn sign(&self, token: &str) -> String {
        let mut mac = self.mac();
        mac.update(token.as_bytes());
        format!(
            "{token}.{}",
            URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
        )
    }

    /// The token inside a cookie value whose signature checks out (constant-time compare).
    pub fn verify<'a>(&self, cookie_value: &'a str) -> Option<&'a str> {
        let (token, sig) = cookie_value.rsplit_once('.')?;
        let sig = URL_SAFE_NO_PAD.decode(sig).ok()?;
        let mut mac = self.mac();
        mac.update(token.as_bytes());
        mac.verify_slice(&sig).ok()?;
        Some(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_values_verify_and_tampering_fails() {
        let s = CookieSigner::new(b"0123456789abcdef0123456789abcdef");
        let token = new_token();
        let cookie = s.sign(&token);
        assert_eq!(s.verify(&cookie), Some(token.as_str()));
        let mut forged = cookie.clone();
        forged.replace_range(0..1, if cookie.starts_with('A') { "B" } else { "A" });
        assert_eq!(s.verify(&forged), None);
        assert_eq!(s.verify(&token), None);
        assert_eq!(s.verify("abc.!!!"), None);
        let other = CookieSigner::new(b"another secret, also 32 bytes long!");
        assert_eq!(other.verify(&cookie), None);
    }

    #[test]
    fn tokens_are_long_and_distinct() {
        let (a, b) = (new_token(), new_token());
        assert_ne!(a, b);
        assert_eq!(a.len(), 43);
        assert_eq!(sha256_hex("abc").len(), 64);
    }
}
