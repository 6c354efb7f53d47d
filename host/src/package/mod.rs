//! Plugin packages: one component file that carries its manifest and its signatures in
//! custom sections, so what a plugin is, what it may ask for and who vouches for it
//! travel with its code (docs/plugins.md).
//!
//! ```text
//! \0asm 0d 00 01 00          component header
//! ...sections...             the component, as its toolchain wrote it
//! custom "wasmtap-manifest"  JSON (manifest.rs), at most one
//! custom "wasmtap-signature" JSON (sign.rs), zero or more, always last
//! ```
//!
//! A signature covers the sha-256 of every byte before the first signature section: the
//! component and its manifest, exactly. Nothing may follow the signatures, so code cannot
//! be appended to a signed package unseen. The sections are walked at the top level only
//! (nested modules live inside section bodies), with every length checked against the
//! file: a package is read before anything trusts it.
//!
//! Where each part lives: [`manifest`] (what the plugin declares, and the check of its
//! plan against it), [`sign`] (keys, signing, verifying), [`trust`] (the operator's
//! policy of what may run).

pub mod index;
pub mod manifest;
pub mod registry;
pub mod sign;
pub mod trust;

pub use manifest::Manifest;
pub use sign::Signature;

use sha2::{Digest as _, Sha256};

/// A sha-256 digest.
pub type Digest = [u8; 32];

/// The sha-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> Digest {
    Sha256::digest(bytes).into()
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The custom section holding the manifest.
pub const MANIFEST_SECTION: &str = "wasmtap-manifest";
/// The custom sections holding signatures.
pub const SIGNATURE_SECTION: &str = "wasmtap-signature";
/// The largest manifest section read.
pub const MAX_MANIFEST_BYTES: usize = 64 << 10;
/// The most signatures one package may carry.
pub const MAX_SIGNATURES: usize = 16;
/// The largest signature section read.
const MAX_SIGNATURE_BYTES: usize = 4096;

/// Why a file is not a well-formed package.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum PackageError {
    #[error("not a WebAssembly file (no `\\0asm` header)")]
    Header,
    #[error("its section at byte {offset} is cut short or runs past the end of the file")]
    Truncated { offset: usize },
    #[error("it has two `{MANIFEST_SECTION}` sections")]
    TwoManifests,
    #[error("its `{MANIFEST_SECTION}` section is not valid: {0}")]
    Manifest(String),
    #[error("a section follows its signatures (at byte {0}); signatures must come last")]
    AfterSignatures(usize),
    #[error("its signature section {index} is not valid: {reason}")]
    BadSignature { index: usize, reason: String },
    #[error("it carries more than {MAX_SIGNATURES} signatures")]
    TooManySignatures,
    #[error("it has more than {MAX_SECTIONS} sections")]
    TooManySections,
}

/// A plugin file read as a package. Plain components (no manifest, no signature) are
/// packages too: they simply declare and prove nothing.
#[derive(Clone, Debug)]
pub struct Package {
    pub manifest: Option<Manifest>,
    pub signatures: Vec<Signature>,
    /// The sha-256 of the bytes the signatures cover.
    pub digest: Digest,
    /// How many bytes that is: where the first signature begins (or the whole file).
    pub signed_len: usize,
}

/// One top-level section.
struct Section<'a> {
    offset: usize,
    /// Where it ends (the next section's offset).
    end: usize,
    /// The custom section's name, for custom sections.
    custom: Option<&'a str>,
    /// The custom section's data, or the whole body for other sections.
    data: &'a [u8],
}

impl Package {
    /// Read a file's manifest and signatures, and the digest they speak of.
    pub fn parse(bytes: &[u8]) -> Result<Package, PackageError> {
        let mut manifest = None;
        let mut signatures = Vec::new();
        let mut signed_len = None;
        for section in sections(bytes)? {
            let section = section?;
            match section.custom {
                Some(SIGNATURE_SECTION) => {
                    signed_len.get_or_insert(section.offset);
                    if signatures.len() == MAX_SIGNATURES {
                        return Err(PackageError::TooManySignatures);
                    }
                    let index = signatures.len();
                    let bad = |reason: String| PackageError::BadSignature { index, reason };
                    if section.data.len() > MAX_SIGNATURE_BYTES {
                        return Err(bad(format!("{} bytes, at most {MAX_SIGNATURE_BYTES}", section.data.len())));
                    }
                    signatures.push(Signature::decode(section.data).map_err(bad)?);
                }
                _ if signed_len.is_some() => return Err(PackageError::AfterSignatures(section.offset)),
                Some(MANIFEST_SECTION) => {
                    if manifest.is_some() {
                        return Err(PackageError::TwoManifests);
                    }
                    if section.data.len() > MAX_MANIFEST_BYTES {
                        return Err(PackageError::Manifest(format!(
                            "{} bytes, at most {MAX_MANIFEST_BYTES}",
                            section.data.len()
                        )));
                    }
                    manifest = Some(Manifest::decode(section.data).map_err(PackageError::Manifest)?);
                }
                _ => {}
            }
        }
        let signed_len = signed_len.unwrap_or(bytes.len());
        Ok(Package { manifest, signatures, digest: sha256(&bytes[..signed_len]), signed_len })
    }

    /// `sha256:` and the digest in hex, as messages and policies write it.
    pub fn digest_text(&self) -> String {
        digest_text(&self.digest)
    }
}

/// Write `bytes` to `path` whole or not at all: a temporary file beside it, renamed.
pub fn write_atomic(path: &std::path::Path, bytes: &[u8]) -> anyhow::Result<()> {
    let tmp = path.with_extension(format!("wasm.tmp-{}", std::process::id()));
    let written = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        anyhow::bail!("cannot write {}: {e}", path.display());
    }
    Ok(())
}

/// `sha256:` and a digest in hex.
pub fn digest_text(digest: &Digest) -> String {
    format!("sha256:{}", hex(digest))
}

/// `bytes` with `manifest` as its manifest: any manifest and signatures it had are
/// removed (a new manifest makes old signatures meaningless), and the new manifest is
/// appended at the end.
pub fn with_manifest(bytes: &[u8], manifest: &Manifest) -> Result<Vec<u8>, PackageError> {
    let package = Package::parse(bytes)?;
    let mut out = Vec::with_capacity(package.signed_len + 1024);
    out.extend_from_slice(&bytes[..8]);
    for section in sections(&bytes[..package.signed_len])? {
        let section = section?;
        if section.custom != Some(MANIFEST_SECTION) {
            out.extend_from_slice(&bytes[section.offset..section.end]);
        }
    }
    out.extend_from_slice(&custom_section(MANIFEST_SECTION, &manifest.encode()));
    Ok(out)
}

/// `bytes` with one more signature, after those it has.
pub fn with_signature(bytes: &[u8], signature: &Signature) -> Result<Vec<u8>, PackageError> {
    let package = Package::parse(bytes)?;
    if package.signatures.len() == MAX_SIGNATURES {
        return Err(PackageError::TooManySignatures);
    }
    let mut out = bytes.to_vec();
    out.extend_from_slice(&custom_section(SIGNATURE_SECTION, &signature.encode()));
    Ok(out)
}

/// The most top-level sections a package may have (a component has a few hundred).
const MAX_SECTIONS: usize = 100_000;

/// The top-level sections of a WebAssembly file, one at a time, every length checked.
fn sections(bytes: &[u8]) -> Result<Sections<'_>, PackageError> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(PackageError::Header);
    }
    Ok(Sections { bytes, at: 8, count: 0 })
}

struct Sections<'a> {
    bytes: &'a [u8],
    at: usize,
    count: usize,
}

impl<'a> Iterator for Sections<'a> {
    type Item = Result<Section<'a>, PackageError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.bytes.len() {
            return None;
        }
        self.count += 1;
        if self.count > MAX_SECTIONS {
            self.at = self.bytes.len();
            return Some(Err(PackageError::TooManySections));
        }
        let (bytes, offset) = (self.bytes, self.at);
        let cut = PackageError::Truncated { offset };
        let section = (|| {
            let id = bytes[offset];
            let (size, n) = leb_u32(&bytes[offset + 1..])?;
            let start = offset + 1 + n;
            let body = bytes.get(start..start + size as usize)?;
            let mut section = Section { offset, end: start + size as usize, custom: None, data: body };
            if id == 0 {
                let (len, n) = leb_u32(body)?;
                let name = body.get(n..n + len as usize)?;
                // A name that is not UTF-8 is none of ours: an ordinary section.
                if let Ok(name) = std::str::from_utf8(name) {
                    section.custom = Some(name);
                    section.data = &body[n + len as usize..];
                }
            }
            Some(section)
        })();
        match section {
            Some(s) => {
                self.at = s.end;
                Some(Ok(s))
            }
            None => {
                self.at = bytes.len();
                Some(Err(cut))
            }
        }
    }
}

/// An unsigned LEB128 u32 and how many bytes it took.
fn leb_u32(bytes: &[u8]) -> Option<(u32, usize)> {
    let mut value: u64 = 0;
    for (i, b) in bytes.iter().take(5).enumerate() {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return u32::try_from(value).ok().map(|v| (v, i + 1));
        }
    }
    None
}

fn leb(mut value: usize, out: &mut Vec<u8>) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// A custom section: id 0, its size, its name, its data.
fn custom_section(name: &str, data: &[u8]) -> Vec<u8> {
    let mut name_part = Vec::with_capacity(name.len() + 5);
    leb(name.len(), &mut name_part);
    name_part.extend_from_slice(name.as_bytes());
    let mut out = vec![0];
    leb(name_part.len() + data.len(), &mut out);
    out.extend_from_slice(&name_part);
    out.extend_from_slice(data);
    out
}

#[cfg(test)]
mod tests;
