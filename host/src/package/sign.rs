//! Signing packages with ed25519 keys a team controls, and verifying them offline.
//!
//! ed25519-dalek: pure Rust, maintained by the dalek project, no network and no C, and
//! its keys are the standard PKCS#8 (private) and SPKI (public) PEM files, so a team can
//! make them with `wasmtap plugin keygen` or `openssl genpkey -algorithm ed25519`.
//! Verification is strict (`verify_strict`: no malleable or small-order signatures).
//!
//! A signature signs `wasmtap-plugin-signature-v1\n` followed by the 32 bytes of the
//! package digest (mod.rs): what it covers is exactly the component and its manifest.
//! Its section records the digest it was made for, so a signature copied onto another
//! plugin is told apart ("made for another digest") from one whose plugin was altered
//! ("does not match").

use std::path::Path;

use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey};
use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};

use super::{hex, sha256, Digest};

/// What every signature signs before the digest.
const CONTEXT: &[u8] = b"wasmtap-plugin-signature-v1\n";
/// The largest key file read.
const MAX_KEY_FILE: u64 = 16 << 10;

/// One signature, as its section holds it (JSON).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Signature {
    /// Who signed, as the signer named itself (shown only; trust goes by the key).
    pub signer: String,
    pub algorithm: String,
    /// The public key, 32 bytes in hex.
    pub public_key: String,
    /// `sha256:…`: the package digest signed.
    pub digest: String,
    /// 64 bytes in hex.
    pub signature: String,
}

/// Why a signature does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("it was made for another digest ({signed}), not this plugin's {actual}")]
    OtherDigest { signed: String, actual: String },
    #[error("it does not match the plugin's contents (the code or the manifest changed after signing)")]
    Mismatch,
    #[error("{0}")]
    Malformed(String),
}

impl Signature {
    /// Read a signature section. One made with an algorithm this wasmtap does not know
    /// is read, and never holds (`verify` says why), so that a package signed in a newer
    /// way as well still loads here.
    pub fn decode(data: &[u8]) -> Result<Signature, String> {
        let s: Signature = serde_json::from_slice(data).map_err(|e| e.to_string())?;
        let fields = [&s.signer, &s.algorithm];
        if fields.iter().any(|f| f.len() > 256 || f.chars().any(char::is_control)) {
            return Err("its signer or algorithm is over 256 bytes or holds control characters".into());
        }
        let digest_ok = s.digest.strip_prefix("sha256:").is_some_and(|h| h.len() == 64 && unhex(h).is_some());
        if !digest_ok {
            return Err("its digest is not `sha256:` and 64 hex digits".into());
        }
        Ok(s)
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a signature serializes")
    }

    /// The key it claims, if it is a valid ed25519 key.
    pub fn key(&self) -> Result<VerifyingKey, SignatureError> {
        let bytes: [u8; 32] = unhex(&self.public_key)
            .and_then(|v| v.try_into().ok())
            .ok_or_else(|| SignatureError::Malformed("its public key is not 32 bytes of hex".into()))?;
        VerifyingKey::from_bytes(&bytes).map_err(|_| SignatureError::Malformed("its public key is not valid".into()))
    }

    /// Check it against the package digest; the key that made it, when it holds.
    pub fn verify(&self, digest: &Digest) -> Result<VerifyingKey, SignatureError> {
        if self.algorithm != "ed25519" {
            let why = format!("it is made with `{}`, and this wasmtap verifies ed25519", self.algorithm);
            return Err(SignatureError::Malformed(why));
        }
        let actual = super::digest_text(digest);
        if self.digest != actual {
            return Err(SignatureError::OtherDigest { signed: self.digest.clone(), actual });
        }
        let key = self.key()?;
        let bytes: [u8; 64] = unhex(&self.signature)
            .and_then(|v| v.try_into().ok())
            .ok_or_else(|| SignatureError::Malformed("its signature is not 64 bytes of hex".into()))?;
        let sig = ed25519_dalek::Signature::from_bytes(&bytes);
        key.verify_strict(&message(digest), &sig).map_err(|_| SignatureError::Mismatch)?;
        Ok(key)
    }
}

/// Sign a package digest.
pub fn sign(key: &SigningKey, signer: &str, digest: &Digest) -> Signature {
    let sig = key.sign(&message(digest));
    Signature {
        signer: signer.to_string(),
        algorithm: "ed25519".into(),
        public_key: hex(key.verifying_key().as_bytes()),
        digest: super::digest_text(digest),
        signature: hex(&sig.to_bytes()),
    }
}

fn message(digest: &Digest) -> Vec<u8> {
    let mut m = CONTEXT.to_vec();
    m.extend_from_slice(digest);
    m
}

/// A short name for a public key: `ed25519:` and the first 16 hex digits of its sha-256.
pub fn fingerprint(key: &VerifyingKey) -> String {
    format!("ed25519:{}", &hex(&sha256(key.as_bytes()))[..16])
}

/// A new key pair from the kernel's random bytes.
pub fn generate() -> std::io::Result<SigningKey> {
    use std::io::Read;
    let mut seed = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut seed)?;
    Ok(SigningKey::from_bytes(&seed))
}

/// The private key as a PKCS#8 PEM file's text.
pub fn private_pem(key: &SigningKey) -> String {
    key.to_pkcs8_pem(LineEnding::LF).expect("an ed25519 key encodes").to_string()
}

/// The public key as an SPKI PEM file's text.
pub fn public_pem(key: &VerifyingKey) -> String {
    key.to_public_key_pem(LineEnding::LF).expect("an ed25519 key encodes")
}

/// Read a private key (PKCS#8 PEM).
pub fn read_private(path: &Path) -> anyhow::Result<SigningKey> {
    let text = read_key_file(path)?;
    SigningKey::from_pkcs8_pem(&text)
        .map_err(|e| anyhow::anyhow!("{}: not an ed25519 private key in PKCS#8 PEM ({e})", path.display()))
}

/// A public key from a PEM file (SPKI; a private key's file gives its public half) or
/// from 64 hex digits.
pub fn read_public(spec: &str, base: Option<&Path>) -> anyhow::Result<VerifyingKey> {
    if let Some(bytes) = unhex(spec).and_then(|v| <[u8; 32]>::try_from(v).ok()) {
        return VerifyingKey::from_bytes(&bytes).map_err(|_| anyhow::anyhow!("`{spec}` is not a valid ed25519 key"));
    }
    let path = match base {
        Some(dir) if Path::new(spec).is_relative() => dir.join(spec),
        _ => Path::new(spec).to_path_buf(),
    };
    let text = read_key_file(&path)?;
    if let Ok(key) = VerifyingKey::from_public_key_pem(&text) {
        return Ok(key);
    }
    SigningKey::from_pkcs8_pem(&text)
        .map(|k| k.verifying_key())
        .map_err(|_| anyhow::anyhow!("{}: not an ed25519 public key (SPKI PEM) or 64 hex digits", path.display()))
}

fn read_key_file(path: &Path) -> anyhow::Result<String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| anyhow::anyhow!("cannot read key {}: {e}", path.display()))?;
    let mut text = String::new();
    file.take(MAX_KEY_FILE)
        .read_to_string(&mut text)
        .map_err(|e| anyhow::anyhow!("cannot read key {}: {e}", path.display()))?;
    Ok(text)
}

/// Bytes from lower- or upper-case hex.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}
