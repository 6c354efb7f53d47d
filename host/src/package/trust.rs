//! The trust policy: what plugins this host runs (`/etc/wasmtap/trust.toml`,
//! docs/plugins.md). It is checked on a plugin's bytes before they are compiled, so a
//! plugin refused is never handed to the compiler.
//!
//! ```toml
//! vetted = true                  # the plugins installed with wasmtap (default true)
//! any = false                    # anything at all (default false once the file exists)
//! digests = ["sha256:…"]         # these exact packages
//! tapsets = "installed"          # tapsets of the package index link into any plugin
//!                                # that runs (default); "policy": held to the rules above
//!
//! [[key]]
//! name = "team-a"                # a plugin signed by this key runs
//! public-key = "keys/team-a.pub" # SPKI PEM (relative to this file), or 64 hex digits
//! ```
//!
//! With no file, anything runs, as on a single-user machine. The keys are the operator's
//! alone: a tenant of the shared host runs under its tenant rule, narrowed from this
//! policy by the daemon, and nothing a client sends adds a key.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::sign::{self, SignatureError};
use super::Package;
use crate::policy::{key_at, line_of};

/// Where the host looks for its trust policy unless told otherwise.
pub const DEFAULT_PATH: &str = "/etc/wasmtap/trust.toml";
/// The largest trust policy read.
const MAX_BYTES: u64 = 1 << 20;

/// What may run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trust {
    /// The rule as messages name it: `trust policy /etc/wasmtap/trust.toml`.
    pub rule: String,
    pub any: bool,
    pub vetted: bool,
    pub keys: Vec<TrustedKey>,
    /// `sha256:…` of packages that run whoever signed them.
    pub digests: Vec<String>,
    /// Whether a tapset installed in the package index links into any plugin that runs
    /// (it is part of the installation: it asks for nothing, and runs inside the plugin,
    /// under its limits); otherwise tapsets are held to the rules plugins are.
    #[serde(default = "installed_tapsets")]
    pub installed_tapsets: bool,
}

fn installed_tapsets() -> bool {
    true
}

/// A key whose signatures are trusted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustedKey {
    pub name: String,
    /// 32 bytes in hex.
    pub public_key: String,
}

/// How a plugin was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// By name, among the plugins installed with wasmtap.
    Vetted,
    /// A file the user named.
    File,
}

/// Why a plugin may run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admitted {
    Any,
    Vetted,
    Digest,
    /// Signed by the trusted key of this name.
    SignedBy(String),
    /// A tapset of the package index, under `tapsets = "installed"`.
    InstalledTapset,
}

/// A trust policy that does not hold: the line and key that are wrong.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("cannot read trust policy {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error("{path}:{line}: `{key}`: {reason}")]
    At { path: PathBuf, line: usize, key: String, reason: String },
}

impl Trust {
    /// Anything runs: no policy.
    pub fn anything() -> Trust {
        Trust {
            rule: "no trust policy".into(),
            any: true,
            vetted: true,
            keys: Vec::new(),
            digests: Vec::new(),
            installed_tapsets: true,
        }
    }

    /// The policy a run holds to: `path` if given; else the default file if it exists;
    /// else anything.
    pub fn for_run(path: Option<&Path>) -> Result<Trust, TrustError> {
        match path {
            Some(p) => Trust::load(p),
            None if Path::new(DEFAULT_PATH).exists() => Trust::load(Path::new(DEFAULT_PATH)),
            None => Ok(Trust::anything()),
        }
    }

    pub fn load(path: &Path) -> Result<Trust, TrustError> {
        let read_err = |reason: String| TrustError::Read { path: path.into(), reason };
        let meta = std::fs::metadata(path).map_err(|e| read_err(e.to_string()))?;
        if meta.len() > MAX_BYTES {
            return Err(read_err(format!("{} bytes, more than the {MAX_BYTES} a policy may have", meta.len())));
        }
        let text = std::fs::read_to_string(path).map_err(|e| read_err(e.to_string()))?;
        Trust::parse(path, &text)
    }

    /// The policy written in `text`, read from `path` (relative key files are found
    /// beside it).
    pub fn parse(path: &Path, text: &str) -> Result<Trust, TrustError> {
        let at = |span: std::ops::Range<usize>, key: String, reason: String| TrustError::At {
            path: path.into(),
            line: line_of(text, span.start),
            key,
            reason,
        };
        let raw: RawTrust = toml::from_str(text).map_err(|e| {
            let span = e.span().unwrap_or(0..0);
            at(span.clone(), key_at(text, span.start), e.message().trim().to_string())
        })?;
        let mut trust = Trust {
            rule: format!("trust policy {}", path.display()),
            any: raw.any.unwrap_or(false),
            vetted: raw.vetted.unwrap_or(true),
            keys: Vec::new(),
            digests: Vec::new(),
            installed_tapsets: true,
        };
        if let Some(t) = &raw.tapsets {
            trust.installed_tapsets = match t.get_ref().as_str() {
                "installed" => true,
                "policy" => false,
                other => return Err(at(t.span(), "tapsets".into(), format!("`{other}`: \"installed\" or \"policy\""))),
            };
        }
        for d in &raw.digests {
            let ok = d
                .get_ref()
                .strip_prefix("sha256:")
                .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()));
            if !ok {
                return Err(at(
                    d.span(),
                    "digests".into(),
                    format!("`{}` is not `sha256:` and 64 hex digits", d.get_ref()),
                ));
            }
            trust.digests.push(d.get_ref().to_ascii_lowercase());
        }
        for (i, k) in raw.key.iter().enumerate() {
            let k = k.get_ref();
            let name = k.name.get_ref();
            let name_ok = !name.is_empty() && name.len() <= 64 && name.bytes().all(|b| b.is_ascii_graphic());
            if !name_ok {
                return Err(at(k.name.span(), format!("key[{i}].name"), "must be 1 to 64 printable characters".into()));
            }
            if trust.keys.iter().any(|t| &t.name == name) {
                return Err(at(k.name.span(), format!("key[{i}].name"), format!("a second key named `{name}`")));
            }
            let key = sign::read_public(k.public_key.get_ref(), path.parent())
                .map_err(|e| at(k.public_key.span(), format!("key[{i}].public-key"), format!("{e:#}")))?;
            trust.keys.push(TrustedKey { name: name.clone(), public_key: super::hex(key.as_bytes()) });
        }
        Ok(trust)
    }

    /// What it lets run, for messages: `vetted plugins, plugins signed by team-a`.
    pub fn runs(&self) -> String {
        if self.any {
            return "anything".into();
        }
        let mut parts = Vec::new();
        if self.vetted {
            parts.push("the vetted plugins".to_string());
        }
        if !self.keys.is_empty() {
            let names: Vec<&str> = self.keys.iter().map(|k| k.name.as_str()).collect();
            parts.push(format!("plugins signed by {}", names.join(", ")));
        }
        if !self.digests.is_empty() {
            parts.push(format!("{} listed digests", self.digests.len()));
        }
        if parts.is_empty() {
            return "nothing".into();
        }
        parts.join(", ")
    }

    /// The trusted key's name for a public key, if it is trusted.
    pub fn key_name(&self, public_key_hex: &str) -> Option<&str> {
        self.keys.iter().find(|k| k.public_key.eq_ignore_ascii_case(public_key_hex)).map(|k| k.name.as_str())
    }

    /// Whether `package`, found as `origin`, may run; why not, in one line, if not.
    pub fn admit(&self, package: &Package, origin: Origin) -> Result<Admitted, String> {
        if self.any {
            return Ok(Admitted::Any);
        }
        if self.digests.contains(&package.digest_text()) {
            return Ok(Admitted::Digest);
        }
        let mut failed = None;
        let mut strangers = Vec::new();
        for s in &package.signatures {
            let named = self.key_name(&s.public_key);
            match (s.verify(&package.digest), named) {
                (Ok(_), Some(name)) => return Ok(Admitted::SignedBy(name.to_string())),
                (Ok(key), None) => strangers.push(format!("{} ({})", s.signer, sign::fingerprint(&key))),
                (Err(e), Some(name)) => {
                    failed.get_or_insert((name.to_string(), e));
                }
                (Err(SignatureError::Malformed(e)), None) => strangers.push(format!("{} ({e})", s.signer)),
                (Err(_), None) => strangers.push(format!("{} (not valid either)", s.signer)),
            }
        }
        if self.vetted && origin == Origin::Vetted {
            return Ok(Admitted::Vetted);
        }
        let why = match (failed, strangers.is_empty(), package.signatures.is_empty()) {
            (Some((name, e)), _, _) => format!("its signature by {name} does not hold: {e}"),
            (None, _, true) => "it carries no signature".to_string(),
            (None, false, false) => {
                format!("it is signed only by keys this policy does not trust: {}", strangers.join(", "))
            }
            (None, true, false) => "none of its signatures holds".to_string(),
        };
        Err(format!("refused by {} (it runs {}): {why}", self.rule, self.runs()))
    }

    /// Whether the tapset `package`, found in the package index, may be linked into a
    /// plugin this policy admitted; why not, in one line, if not.
    pub fn admit_tapset(&self, package: &Package) -> Result<Admitted, String> {
        match self.admit(package, Origin::Vetted) {
            Err(_) if self.installed_tapsets => Ok(Admitted::InstalledTapset),
            other => other,
        }
    }

    /// This policy narrowed to what a tenant rule allows, never widened: with `any`,
    /// the policy as it is; else its vetted plugins (if it runs them) and plugins signed
    /// by its keys named in `keys` (every key, and its digests, when `keys` is `None`).
    pub fn narrowed(&self, rule: String, any: bool, keys: Option<&[String]>) -> Trust {
        let rule = if *self == Trust::anything() { rule } else { format!("{rule} under the {}", self.rule) };
        if any {
            return Trust { rule, ..self.clone() };
        }
        Trust {
            rule,
            any: false,
            vetted: self.vetted,
            keys: self.keys.iter().filter(|k| keys.is_none_or(|names| names.contains(&k.name))).cloned().collect(),
            digests: if keys.is_none() { self.digests.clone() } else { Vec::new() },
            installed_tapsets: self.installed_tapsets,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTrust {
    vetted: Option<bool>,
    any: Option<bool>,
    #[serde(default)]
    digests: Vec<Spanned<String>>,
    #[serde(default)]
    key: Vec<Spanned<RawKey>>,
    tapsets: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawKey {
    name: Spanned<String>,
    public_key: Spanned<String>,
}
