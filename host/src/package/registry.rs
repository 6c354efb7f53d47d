//! Packages in OCI registries: `wasmtap plugin push` / `pull`, and `wasmtap run
//! REGISTRY/REPO:TAG` (or `@sha256:…`). The client is oci-client (the ORAS project's).
//!
//! A package is pushed in the CNCF layout for Wasm artifacts: one layer of media type
//! `application/wasm` (the whole package: component, manifest and signatures, so every
//! client that can fetch the layer has the signatures too) and a config of media type
//! `application/vnd.wasm.config.v0+json`. The layer's annotations repeat its name,
//! version and description and list its signers, for registry tools.
//!
//! Pulled packages are kept in a local store by the digest of their layer
//! (`$WASMTAP_PACKAGES`, else `$XDG_CACHE_HOME/wasmtap/packages`, else
//! `~/.cache/wasmtap/packages`), with what each tag last named. A reference by digest
//! is served from the store without the network; a tag is asked of the registry, and
//! from the store only when the registry cannot be reached (said on stderr). The
//! registry is never trusted: a blob must have the digest its manifest names, and be at
//! most [`MAX_PLUGIN_BYTES`](crate::sandbox) bytes, and what runs is still checked
//! against the trust policy before it is compiled.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use anyhow::{bail, Context};
use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::errors::OciDistributionError;
use oci_client::manifest::OciImageManifest;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

use super::{digest_text, sha256, write_atomic, Package};

/// The layer's media type: a WebAssembly component.
pub const LAYER_MEDIA_TYPE: &str = "application/wasm";
/// The config's media type (CNCF Wasm OCI artifact layout).
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The largest package pulled (the largest plugin the sandbox loads).
pub const MAX_BYTES: u64 = 32 << 20;

/// Whether a plugin argument is a registry reference rather than a file or a name:
/// `oci://…`, or `HOST[:PORT]/REPO…` whose host has a dot or a port or is `localhost`,
/// when no file of that name exists.
pub fn is_reference(arg: &str) -> bool {
    if arg.starts_with("oci://") {
        return true;
    }
    if arg.starts_with('.') || arg.starts_with('/') || Path::new(arg).exists() {
        return false;
    }
    let Some((host, rest)) = arg.split_once('/') else { return false };
    !rest.is_empty() && (host.contains('.') || host.contains(':') || host == "localhost")
}

fn parse(arg: &str) -> anyhow::Result<Reference> {
    let text = arg.strip_prefix("oci://").unwrap_or(arg);
    text.parse::<Reference>().map_err(|e| anyhow::anyhow!("`{arg}` is not a registry reference: {e}"))
}

/// A client for `r`'s registry. Plain HTTP for loopback registries (a test registry, a
/// local mirror) and for those named in `WASMTAP_INSECURE_REGISTRIES` (comma-separated
/// `host:port`); HTTPS for every other.
fn client_for(r: &Reference) -> Client {
    let mut plain: Vec<String> = std::env::var("WASMTAP_INSECURE_REGISTRIES")
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    let registry = r.resolve_registry();
    let host = registry.rsplit_once(':').map_or(registry, |(h, _)| h);
    if ["127.0.0.1", "localhost", "[::1]"].contains(&host) {
        plain.push(registry.to_string());
    }
    Client::new(ClientConfig {
        protocol: ClientProtocol::HttpsExcept(plain),
        connect_timeout: Some(std::time::Duration::from_secs(5)),
        read_timeout: Some(std::time::Duration::from_secs(30)),
        ..Default::default()
    })
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the registry client")
}

/// One line for a registry error, naming the registry.
fn failed(r: &Reference, what: &str, e: impl std::fmt::Display) -> anyhow::Error {
    let mut text = e.to_string();
    if let Some(first) = text.lines().next() {
        text = first.to_string();
    }
    anyhow::anyhow!("cannot {what} {} at registry {}: {text}", r.whole(), r.resolve_registry())
}

/// Push a package file; the manifest's digest.
pub fn push(file: &Path, arg: &str) -> anyhow::Result<String> {
    let r = parse(arg)?;
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let package = Package::parse(&bytes).with_context(|| format!("{} is not a valid package", file.display()))?;
    let Some(m) = &package.manifest else {
        bail!("{} has no manifest: pack it first (`wasmtap plugin pack`)", file.display());
    };
    let mut notes = BTreeMap::new();
    notes.insert("org.opencontainers.image.title".to_string(), format!("{}.wasm", m.name));
    notes.insert("org.opencontainers.image.version".to_string(), m.version.clone());
    notes.insert("org.opencontainers.image.description".to_string(), m.description.clone());
    let signers: Vec<String> = package
        .signatures
        .iter()
        .filter_map(|s| {
            s.verify(&package.digest).ok().map(|k| format!("{} {}", s.signer, super::sign::fingerprint(&k)))
        })
        .collect();
    if !signers.is_empty() {
        notes.insert("dev.wasmtap.signers".to_string(), signers.join(", "));
    }
    notes.insert("dev.wasmtap.package-digest".to_string(), package.digest_text());
    let layer_digest = digest_text(&sha256(&bytes));
    let config = serde_json::json!({
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer_digest],
        "component": {"target": m.world},
    });
    let layer = ImageLayer::new(bytes, LAYER_MEDIA_TYPE.to_string(), Some(notes));
    let config = Config::new(serde_json::to_vec(&config)?, CONFIG_MEDIA_TYPE.to_string(), None);
    let mut manifest = OciImageManifest::build(std::slice::from_ref(&layer), &config, None);
    manifest.artifact_type = Some(CONFIG_MEDIA_TYPE.to_string());
    let client = client_for(&r);
    runtime()?.block_on(async {
        client
            .push(&r, &[layer], config, &RegistryAuth::Anonymous, Some(manifest))
            .await
            .map_err(|e| failed(&r, "push", e))?;
        client.fetch_manifest_digest(&r, &RegistryAuth::Anonymous).await.map_err(|e| failed(&r, "push", e))
    })
}

/// Where pulled packages are kept.
#[derive(Clone, Debug)]
pub struct Store {
    dir: PathBuf,
}

/// A package in the store.
#[derive(Clone, Debug)]
pub struct Pulled {
    pub path: PathBuf,
    /// `sha256:…` of the layer (the whole file).
    pub digest: String,
}

impl Store {
    pub fn from_env() -> Store {
        let var = |n: &str| std::env::var_os(n).filter(|v| !v.is_empty()).map(PathBuf::from);
        let dir = var("WASMTAP_PACKAGES")
            .or_else(|| var("XDG_CACHE_HOME").filter(|p| p.is_absolute()).map(|p| p.join("wasmtap/packages")))
            .or_else(|| var("HOME").map(|h| h.join(".cache/wasmtap/packages")))
            .unwrap_or_else(|| PathBuf::from("/var/cache/wasmtap/packages"));
        Store { dir }
    }

    /// A blob's file; `digest` is checked to be `sha256:` and 64 hex digits first.
    fn blob(&self, digest: &str) -> PathBuf {
        self.dir.join("blobs").join(format!("{}.wasm", digest.replace(':', "-")))
    }

    /// What a reference last named: a file per registry, repository and tag (or
    /// `@` and the manifest's digest).
    fn tag(&self, r: &Reference, digest: Option<&str>) -> PathBuf {
        // One file name per part, whatever the reference holds: every byte but letters,
        // digits and `-` written as `_XX`, so that no two names meet and none is `..`.
        let safe = |s: &str| {
            s.bytes()
                .map(|b| match b {
                    b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' => (b as char).to_string(),
                    _ => format!("_{b:02x}"),
                })
                .collect::<String>()
        };
        let name = match digest.or(r.digest()) {
            Some(d) => format!("@{}", safe(d)),
            None => safe(r.tag().unwrap_or("latest")),
        };
        self.dir.join("tags").join(safe(r.resolve_registry())).join(safe(r.repository())).join(name)
    }

    /// The stored package a reference last named, if it is still there and whole.
    fn stored(&self, tag_file: &Path) -> Option<(String, PathBuf)> {
        let text = std::fs::read_to_string(tag_file).ok()?;
        let digest = text.split_whitespace().next()?.to_string();
        self.read(&digest).map(|p| (digest, p))
    }

    /// A stored blob, checked against its digest again (a store is a cache, not a trust root).
    fn read(&self, digest: &str) -> Option<PathBuf> {
        if !is_digest(digest) {
            return None;
        }
        let path = self.blob(digest);
        let bytes = std::fs::read(&path).ok()?;
        (digest_text(&sha256(&bytes)) == digest).then_some(path)
    }

    fn keep(&self, digest: &str, bytes: &[u8]) -> anyhow::Result<PathBuf> {
        let path = self.blob(digest);
        let dir = path.parent().expect("blobs/");
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create the package store {}", dir.display()))?;
        write_atomic(&path, bytes)?;
        Ok(path)
    }

    /// Fetch `arg` into the store (or find it there); see the module's doc.
    pub fn pull(&self, arg: &str) -> anyhow::Result<Pulled> {
        let r = parse(arg)?;
        let tag_file = self.tag(&r, None);
        // A reference by digest names one package forever: the store answers it.
        if r.digest().is_some() {
            if let Some((digest, path)) = self.stored(&tag_file) {
                return Ok(Pulled { path, digest });
            }
        }
        let client = client_for(&r);
        let fetched = runtime()?.block_on(async {
            let (manifest, manifest_digest) =
                client.pull_image_manifest(&r, &RegistryAuth::Anonymous).await.map_err(|e| {
                    let unreachable =
                        matches!(&e, OciDistributionError::RequestError(q) if q.is_connect() || q.is_timeout());
                    let e = failed(&r, "pull", e);
                    if unreachable {
                        e.context(Unreachable)
                    } else {
                        e
                    }
                })?;
            let layer = manifest
                .layers
                .iter()
                .find(|l| l.media_type == LAYER_MEDIA_TYPE)
                .ok_or_else(|| anyhow::anyhow!("{} holds no `{LAYER_MEDIA_TYPE}` layer: not a plugin", r.whole()))?
                .clone();
            if !is_digest(&layer.digest) {
                bail!("{}: its layer's digest is not `sha256:` and 64 hex digits", r.whole());
            }
            if layer.size < 0 || layer.size as u64 > MAX_BYTES {
                bail!("{}: its layer is {} bytes, more than the {MAX_BYTES} a plugin may have", r.whole(), layer.size);
            }
            if let Some(path) = self.read(&layer.digest) {
                return Ok((manifest_digest, layer.digest.clone(), path));
            }
            let mut sink = Capped { bytes: Vec::new(), max: MAX_BYTES as usize };
            client.pull_blob(&r, &layer, &mut sink).await.map_err(|e| failed(&r, "pull", e))?;
            let actual = digest_text(&sha256(&sink.bytes));
            if actual != layer.digest {
                bail!(
                    "registry {} served a blob for {} whose digest is {actual}, not {}: refused",
                    r.resolve_registry(),
                    r.whole(),
                    layer.digest
                );
            }
            let path = self.keep(&layer.digest, &sink.bytes)?;
            Ok((manifest_digest, layer.digest.clone(), path))
        });
        match fetched {
            Ok((manifest_digest, digest, path)) => {
                // Remember what the tag, and the manifest's digest, name now.
                for file in [tag_file.clone(), self.tag(&r, Some(&manifest_digest))] {
                    if let Some(parent) = file.parent() {
                        let _ = std::fs::create_dir_all(parent);
                        let _ = std::fs::write(&file, format!("{digest} {manifest_digest}\n"));
                    }
                }
                Ok(Pulled { path, digest })
            }
            Err(e) if e.downcast_ref::<Unreachable>().is_some() => {
                // The registry could not answer: what the store last had for this reference.
                match self.stored(&tag_file) {
                    Some((digest, path)) => {
                        let e = e.root_cause();
                        eprintln!("wasmtap: {e}; using {} from the local store ({digest})", r.whole());
                        Ok(Pulled { path, digest })
                    }
                    None => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }
}

/// `sha256:` and 64 lower-case hex digits: the only digests this store keeps.
fn is_digest(d: &str) -> bool {
    d.strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
}

/// Marks a pull that failed because the registry could not be reached.
#[derive(Debug)]
struct Unreachable;

impl std::fmt::Display for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the registry cannot be reached")
    }
}

/// A sink that refuses more than `max` bytes.
struct Capped {
    bytes: Vec<u8>,
    max: usize,
}

impl tokio::io::AsyncWrite for Capped {
    fn poll_write(mut self: Pin<&mut Self>, _: &mut TaskContext<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        if self.bytes.len() + buf.len() > self.max {
            let max = self.max;
            return Poll::Ready(Err(std::io::Error::other(format!("more than {max} bytes"))));
        }
        self.bytes.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
