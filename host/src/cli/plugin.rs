//! `wasmtap plugin ...`: packaging, signing and inspecting plugins (docs/plugins.md).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::{Args, Subcommand};

use super::Outcome;
use crate::clock::Clock;
use crate::limits::Limits;
use crate::package::manifest::{Capability, Extra};
use crate::package::sign;
use crate::package::trust::{Origin, Trust};
use crate::package::{self, write_atomic, Manifest, Package};
use crate::plugin::{self, find, params};
use crate::sandbox::cache;
use crate::sandbox::Sandbox;

#[derive(Subcommand, Debug)]
pub enum PluginCommand {
    /// Write a new plugin crate that builds and runs as it is, with a golden test.
    New(NewArgs),
    /// Build a plugin crate for wasm32-wasip2 and pack its manifest: target/wasmtap/NAME.wasm.
    Build(BuildArgs),
    /// Print a plugin's manifest, digest and signatures, and whether the trust policy lets it run.
    Inspect(InspectArgs),
    /// List the installed plugins: name, version, signer, what each answers.
    List(TrustArg),
    /// Embed a manifest, derived from the plugin's own info and default plan, into a component.
    Pack(PackArgs),
    /// Make a signing key pair: NAME.key (private, mode 0600) and NAME.pub.
    Keygen(KeygenArgs),
    /// Sign a plugin package with a private key (the signature is appended to the file).
    Sign(SignArgs),
    /// Check a plugin's signatures: against --key, else against the trust policy.
    Verify(VerifyArgs),
    /// Push a package to an OCI registry: REGISTRY/REPO:TAG.
    Push(PushArgs),
    /// Pull a package from an OCI registry into the local store (REGISTRY/REPO:TAG or @sha256:…).
    Pull(PullArgs),
}

#[derive(Args, Debug)]
pub struct PushArgs {
    /// The package (packed, and signed to be trusted).
    file: PathBuf,
    /// Where: REGISTRY/REPO:TAG, e.g. 127.0.0.1:5000/team/syscount:0.1.0.
    reference: String,
}

#[derive(Args, Debug)]
pub struct PullArgs {
    /// REGISTRY/REPO:TAG or REGISTRY/REPO@sha256:….
    reference: String,
    #[command(flatten)]
    trust: TrustArg,
}

#[derive(Args, Debug)]
pub struct NewArgs {
    /// The plugin's name: its directory, crate and command-line name.
    name: String,
    /// The language it is written in.
    #[arg(long, value_enum, default_value = "rust")]
    lang: Lang,
}

/// A language plugins are written in, with an SDK of wasmtap's (docs/languages.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    Rust,
    C,
    Python,
    Js,
}

#[derive(Args, Debug)]
pub struct BuildArgs {
    /// The plugin's directory: a Rust crate (Cargo.toml), or a plugin in C (plugin.c),
    /// Python (plugin.py) or JavaScript (plugin.js).
    #[arg(default_value = ".")]
    dir: PathBuf,
    /// Write the packed plugin here instead of DIR/target/wasmtap/NAME.wasm.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// More directories whose modules a Python or JavaScript plugin imports (repeatable):
    /// Python's `import NAME`, JavaScript's `import ... from "./NAME.js"`.
    #[arg(long, value_name = "DIR")]
    module_path: Vec<PathBuf>,
}

#[derive(Args, Debug)]
pub struct TrustArg {
    /// The trust policy (default /etc/wasmtap/trust.toml when it exists).
    #[arg(long, value_name = "FILE")]
    trust: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// An installed plugin's name, or a .wasm file.
    plugin: String,
    /// Print the manifest alone, as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    trust: TrustArg,
}

#[derive(Args, Debug)]
pub struct PackArgs {
    /// The plugin component (.wasm).
    file: PathBuf,
    /// Where to write the package (default: over FILE).
    #[arg(short = 'o', long, value_name = "OUT")]
    output: Option<PathBuf>,
    /// A probe or pattern other parameters may make its plan ask for (repeatable), e.g.
    /// 'tracepoint:sched:*'. Those of the default plan are declared without it.
    #[arg(long, value_name = "PATTERN")]
    probe: Vec<String>,
    /// A capability other parameters may ask for: kernel-stacks, user-stacks, kernel-aggregations.
    #[arg(long, value_name = "NAME", value_parser = parse_capability)]
    capability: Vec<Capability>,
    /// The plugin's crate: its Cargo.toml's `license`, `authors` and
    /// `[package.metadata.wasmtap]` (`probes`, `capabilities`, `output-budget`) are declared too.
    #[arg(long = "crate", value_name = "DIR")]
    krate: Option<PathBuf>,
    /// Parameters for the plan the manifest is derived from (default: the plugin's defaults).
    #[arg(long = "param", value_name = "NAME=VALUE")]
    params: Vec<params::RawParam>,
    #[arg(long, value_name = "SPDX")]
    license: Option<String>,
    /// An author (repeatable).
    #[arg(long, value_name = "NAME")]
    author: Vec<String>,
    /// The output it expects to write, bytes per second (shown to operators).
    #[arg(long, value_name = "BYTES")]
    output_budget: Option<u64>,
    /// Embed this manifest (JSON, as `plugin inspect --json` prints one) as written,
    /// instead of deriving one; the plugin's plans are held to it all the same.
    #[arg(long, value_name = "JSON", conflicts_with_all = ["probe", "capability", "params", "license", "author", "output_budget"])]
    manifest: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct KeygenArgs {
    /// The key's name: files NAME.key and NAME.pub.
    name: String,
    /// The directory to write them in.
    #[arg(long, value_name = "DIR", default_value = ".")]
    dir: PathBuf,
}

#[derive(Args, Debug)]
pub struct SignArgs {
    /// The plugin package (.wasm).
    file: PathBuf,
    /// The private key (PKCS#8 PEM, as `plugin keygen` or `openssl genpkey -algorithm ed25519` writes).
    #[arg(long, value_name = "KEY")]
    key: PathBuf,
    /// Who signs, as shown to others (default: the key file's name).
    #[arg(long, value_name = "NAME")]
    signer: Option<String>,
    /// Where to write the signed package (default: over FILE).
    #[arg(short = 'o', long, value_name = "OUT")]
    output: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// The plugin package (.wasm).
    file: PathBuf,
    /// A public key (PEM file or 64 hex digits) whose signature must hold.
    #[arg(long, value_name = "PUB")]
    key: Option<String>,
    #[command(flatten)]
    trust: TrustArg,
}

fn parse_capability(s: &str) -> Result<Capability, String> {
    Capability::parse(s).ok_or_else(|| {
        let names: Vec<&str> = Capability::ALL.iter().map(|c| c.name()).collect();
        format!("no capability `{s}` (known: {})", names.join(", "))
    })
}

pub fn run(command: PluginCommand) -> anyhow::Result<Outcome> {
    match command {
        PluginCommand::New(a) => new(a),
        PluginCommand::Build(a) => build(a),
        PluginCommand::Inspect(a) => inspect(a),
        PluginCommand::List(a) => list(a),
        PluginCommand::Pack(a) => pack(a),
        PluginCommand::Keygen(a) => keygen(a),
        PluginCommand::Sign(a) => sign_file(a),
        PluginCommand::Verify(a) => verify(a),
        PluginCommand::Push(a) => push(a),
        PluginCommand::Pull(a) => pull(a),
    }
}

/// A plugin file's bytes and package.
fn read(path: &Path) -> anyhow::Result<(Vec<u8>, Package)> {
    let bytes = cache::read_plugin(path)?;
    let package =
        Package::parse(&bytes).with_context(|| format!("plugin {} is not a valid package", path.display()))?;
    Ok((bytes, package))
}

fn inspect(args: InspectArgs) -> anyhow::Result<Outcome> {
    let trust = Trust::for_run(args.trust.trust.as_deref())?;
    let (path, origin) = find::find(&args.plugin)?;
    let (bytes, package) = read(&path)?;
    if args.json {
        let Some(m) = &package.manifest else { bail!("plugin {} has no manifest", path.display()) };
        println!("{}", serde_json::to_string_pretty(m)?);
        return Ok(Outcome::Clean);
    }
    println!("file:      {}", path.display());
    println!("size:      {} bytes", bytes.len());
    println!("digest:    {}", package.digest_text());
    match &package.manifest {
        Some(m) => print_manifest(m),
        None => println!("manifest:  none (a bare component: it declares nothing, so nothing is checked against it)"),
    }
    if package.signatures.is_empty() {
        println!("signed:    no");
    }
    for s in &package.signatures {
        let state = match s.verify(&package.digest) {
            Ok(key) => match trust.key_name(&s.public_key) {
                Some(name) => format!("valid, key {} (trusted as {name})", sign::fingerprint(&key)),
                None => format!("valid, key {} (not a key the trust policy lists)", sign::fingerprint(&key)),
            },
            Err(e) => format!("NOT VALID: {e}"),
        };
        println!("signed by: {}: {state}", s.signer);
    }
    let imports = crate::sandbox::link::tapset_imports(&bytes).unwrap_or_default();
    for i in &imports {
        let found = crate::package::index::tapset(&i.tapset)
            .map_or_else(|| "NOT INSTALLED".to_string(), |p| format!("from {}", p.display()));
        println!("links:     {} ({found})", i.import);
    }
    let is_tapset = package.manifest.as_ref().is_some_and(Manifest::is_tapset);
    let verdict = if is_tapset { trust.admit_tapset(&package) } else { trust.admit(&package, origin) };
    match verdict {
        Ok(why) => println!("runs:      yes: {} ({})", admitted(&why), trust.rule),
        Err(why) => println!("runs:      no, {why}"),
    }
    Ok(Outcome::Clean)
}

fn admitted(a: &crate::package::trust::Admitted) -> String {
    use crate::package::trust::Admitted;
    match a {
        Admitted::Any => "anything runs".into(),
        Admitted::Vetted => "an installed plugin".into(),
        Admitted::Digest => "its digest is listed".into(),
        Admitted::SignedBy(name) => format!("signed by {name}"),
        Admitted::InstalledTapset => "an installed tapset".into(),
    }
}

fn print_manifest(m: &Manifest) {
    println!("name:      {} {}", m.name, m.version);
    println!("about:     {}", m.description);
    if let Some(l) = &m.license {
        println!("license:   {l}");
    }
    if !m.authors.is_empty() {
        println!("authors:   {}", m.authors.join(", "));
    }
    println!("built for: {}", m.world);
    if m.is_tapset() {
        println!("offers:    {} (a tapset: plugins that import it link it at load)", m.exports.join(", "));
    }
    println!("probes:    {}", if m.probes.is_empty() { "none".into() } else { m.probes.join(", ") });
    let caps: Vec<&str> = m.capabilities.iter().map(|c| c.name()).collect();
    println!("needs:     {}", if caps.is_empty() { "nothing beyond events".into() } else { caps.join(", ") });
    if let Some(b) = m.output_budget {
        println!("output:    about {b} bytes a second");
    }
    if let Some(n) = m.limits.as_ref().and_then(|l| l.instances) {
        println!("limits:    {n} core instances (granted up to 64 unless --max-instances is set)");
    }
    for p in &m.params {
        let default = p.default.as_deref().map_or_else(|| "required".to_string(), |d| format!("default {d}"));
        println!("param:     {} ({}, {default}): {}", p.name, p.kind, p.description);
    }
}

fn list(args: TrustArg) -> anyhow::Result<Outcome> {
    let trust = Trust::for_run(args.trust.as_deref())?;
    let mut rows = Vec::new();
    for name in find::installed() {
        let Ok((path, _)) = find::find(&name) else { continue };
        let package = match read(&path) {
            Ok((_, p)) => p,
            Err(e) => {
                rows.push((name, "-".into(), "-".into(), format!("(not a valid package: {:#})", e.root_cause())));
                continue;
            }
        };
        let (version, about) = match &package.manifest {
            Some(m) => (m.version.clone(), m.description.clone()),
            None => ("-".into(), "(no manifest)".into()),
        };
        let signers: Vec<String> = package
            .signatures
            .iter()
            .filter_map(|s| {
                let key = s.verify(&package.digest).ok()?;
                Some(match trust.key_name(&s.public_key) {
                    Some(name) => name.to_string(),
                    None => format!("{} ({})", s.signer, sign::fingerprint(&key)),
                })
            })
            .collect();
        let signed = if signers.is_empty() { "unsigned".to_string() } else { signers.join(", ") };
        rows.push((name, version, signed, about));
    }
    let width = |col: usize, min: usize| rows.iter().map(|r| [&r.0, &r.1, &r.2][col].len()).max().unwrap_or(0).max(min);
    let (w0, w1, w2) = (width(0, 4), width(1, 7), width(2, 9));
    println!("{:<w0$}  {:<w1$}  {:<w2$}  ABOUT", "NAME", "VERSION", "SIGNED BY");
    for (name, version, signed, about) in rows {
        println!("{name:<w0$}  {version:<w1$}  {signed:<w2$}  {about}");
    }
    Ok(Outcome::Clean)
}

fn pack(args: PackArgs) -> anyhow::Result<Outcome> {
    let manifest = match &args.manifest {
        Some(path) => {
            let text = std::fs::read(path).with_context(|| format!("cannot read manifest {}", path.display()))?;
            Manifest::decode(&text).map_err(|e| anyhow::anyhow!("manifest {}: {e}", path.display()))?
        }
        None => {
            let mut extra = extra(&args);
            if let Some(dir) = &args.krate {
                from_crate(dir, &mut extra)?;
            }
            let (bytes, _) = read(&args.file)?;
            let exports = crate::sandbox::link::exports(&bytes)
                .map_err(|e| anyhow::anyhow!("{} is not a component: {e}", args.file.display()))?;
            if crate::sandbox::link::is_tapset(&exports) {
                let description =
                    args.krate.as_deref().map(crate_description).transpose()?.flatten().unwrap_or_default();
                Manifest::tapset(&exports, &description, &extra)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", args.file.display()))?
            } else {
                derive(&args.file, &args.params, &extra)?
            }
        }
    };
    let (bytes, _) = read(&args.file)?;
    let packed = package::with_manifest(&bytes, &manifest)?;
    let out = args.output.as_deref().unwrap_or(&args.file);
    write_atomic(out, &packed)?;
    eprintln!(
        "wasmtap: {} {} packed into {} ({}; probes: {})",
        manifest.name,
        manifest.version,
        out.display(),
        package::digest_text(&cache::sha256(&packed)),
        manifest.probes.join(", ")
    );
    Ok(Outcome::Clean)
}

/// The `description` of a crate's Cargo.toml.
fn crate_description(dir: &Path) -> anyhow::Result<Option<String>> {
    let path = dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let doc: toml::Table = toml::from_str(&text).with_context(|| format!("{} is not valid TOML", path.display()))?;
    Ok(doc.get("package").and_then(|p| p.get("description")).and_then(|d| d.as_str()).map(str::to_string))
}

fn extra(args: &PackArgs) -> Extra {
    Extra {
        probes: args.probe.clone(),
        capabilities: args.capability.clone(),
        license: args.license.clone(),
        authors: args.author.clone(),
        output_budget: args.output_budget,
        instances: None,
    }
}

/// What a plugin crate's Cargo.toml declares for its manifest.
pub fn from_crate(dir: &Path, extra: &mut Extra) -> anyhow::Result<()> {
    let path = dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let doc: toml::Table = toml::from_str(&text).with_context(|| format!("{} is not valid TOML", path.display()))?;
    let package = doc.get("package").and_then(toml::Value::as_table);
    let strings = |v: Option<&toml::Value>| -> Vec<String> {
        v.and_then(toml::Value::as_array)
            .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
            .unwrap_or_default()
    };
    // A field may be inherited (`license.workspace = true`): from the first Cargo.toml
    // above with a [workspace.package].
    let inherited = |key: &str| -> Option<toml::Value> {
        let own = package.and_then(|p| p.get(key))?;
        if own.get("workspace").and_then(toml::Value::as_bool) != Some(true) {
            return Some(own.clone());
        }
        let dir = std::fs::canonicalize(dir).ok()?;
        dir.ancestors().skip(1).find_map(|d| {
            let text = std::fs::read_to_string(d.join("Cargo.toml")).ok()?;
            let doc: toml::Table = toml::from_str(&text).ok()?;
            doc.get("workspace")?.get("package")?.get(key).cloned()
        })
    };
    if extra.license.is_none() {
        extra.license = inherited("license").and_then(|l| l.as_str().map(str::to_string));
    }
    if extra.authors.is_empty() {
        extra.authors = strings(inherited("authors").as_ref());
    }
    let meta = package.and_then(|p| p.get("metadata")).and_then(|m| m.get("wasmtap"));
    let Some(meta) = meta else { return Ok(()) };
    let at = |key: &str| format!("{}: [package.metadata.wasmtap] {key}", path.display());
    for key in meta.as_table().map(|t| t.keys().cloned().collect::<Vec<_>>()).unwrap_or_default() {
        if !["probes", "capabilities", "output-budget"].contains(&key.as_str()) {
            bail!("{}: unknown key (known: probes, capabilities, output-budget)", at(&key));
        }
    }
    extra.probes.extend(strings(meta.get("probes")));
    for c in strings(meta.get("capabilities")) {
        extra.capabilities.push(parse_capability(&c).map_err(|e| anyhow::anyhow!("{}: {e}", at("capabilities")))?);
    }
    if let Some(b) = meta.get("output-budget") {
        let b = b
            .as_integer()
            .filter(|b| *b > 0)
            .ok_or_else(|| anyhow::anyhow!("{}: not a positive integer", at("output-budget")))?;
        extra.output_budget = Some(b as u64);
    }
    Ok(())
}

/// A manifest from what the plugin says: its info, and its plan with `raw` parameters
/// (its defaults where not given). The author's own file, so it is compiled under no
/// trust policy; nothing of it runs but `info` and `start`, in the sandbox, within the
/// default limits.
pub fn derive(file: &Path, raw: &[params::RawParam], extra: &Extra) -> anyhow::Result<Manifest> {
    let sandbox = Sandbox::new()?;
    let arg = file.to_str().context("the plugin's path is not UTF-8")?;
    let arg = if find::is_path(arg) { arg.to_string() } else { format!("./{arg}") };
    // The core instances it makes, counted in the component, are declared where they are
    // more than the default allows (a Python plugin's 38), and granted while it is asked.
    let mut extra = extra.clone();
    let (bytes, _) = read(file)?;
    let needed =
        crate::sandbox::footprint::of(&bytes).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?.needed();
    let mut limits = Limits::default();
    if needed > limits.instances as u64 {
        extra.instances = Some(u32::try_from(needed).unwrap_or(u32::MAX));
        limits.instances = (needed as usize).min(crate::limits::MANIFEST_MAX_INSTANCES);
    }
    let extra = &extra;
    let described = plugin::describe(&sandbox, &arg, Clock::live(), &limits)?;
    let info = described.info.clone();
    let world = described.world().to_string();
    let params = params::bind(&info.name, &info.params, raw)?;
    let mut manifest = Manifest::derive(&info, &world, &described.plan(&params)?, extra);
    // Switches change what a plan asks for (syscount's `errors`, `latency`): each boolean
    // left at false is also planned as true, one at a time, in a fresh instance, and
    // what those plans ask for is declared too. A plan a switch makes fail is left out.
    for spec in info.params.iter().filter(|p| p.kind == crate::wit::types::ParamKind::Boolean) {
        if raw.iter().any(|r| r.name == spec.name) || spec.default_value.as_deref() == Some("true") {
            continue;
        }
        let mut flipped: Vec<params::RawParam> = raw.to_vec();
        flipped.push(params::RawParam { plugin: None, name: spec.name.clone(), value: "true".into() });
        let Ok(params) = params::bind(&info.name, &info.params, &flipped) else { continue };
        let described = plugin::describe(&sandbox, &arg, Clock::live(), &limits)?;
        if let Ok(plan) = described.plan(&params) {
            manifest.add(&Manifest::derive(&info, &world, &plan, extra));
        }
    }
    Ok(manifest)
}

fn keygen(args: KeygenArgs) -> anyhow::Result<Outcome> {
    let name_ok = !args.name.is_empty()
        && args.name.len() <= 64
        && args.name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if !name_ok {
        bail!("key name `{}`: use 1 to 64 letters, digits, `-`, `_` or `.`", args.name);
    }
    let key = sign::generate().context("cannot read random bytes for the key")?;
    let (private, public) = (args.dir.join(format!("{}.key", args.name)), args.dir.join(format!("{}.pub", args.name)));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&private)
        .with_context(|| format!("cannot create {} (an existing key is never overwritten)", private.display()))?;
    file.write_all(sign::private_pem(&key).as_bytes())?;
    std::fs::write(&public, sign::public_pem(&key.verifying_key()))
        .with_context(|| format!("cannot write {}", public.display()))?;
    println!("{}", private.display());
    println!("{}", public.display());
    eprintln!(
        "wasmtap: key {} ({}); keep {} secret, give {} to whoever should trust it",
        args.name,
        sign::fingerprint(&key.verifying_key()),
        private.display(),
        public.display()
    );
    Ok(Outcome::Clean)
}

fn sign_file(args: SignArgs) -> anyhow::Result<Outcome> {
    let key = sign::read_private(&args.key)?;
    let signer = match args.signer {
        Some(s) => s,
        None => args.key.file_stem().map_or_else(|| "unnamed".into(), |s| s.to_string_lossy().into_owned()),
    };
    let (bytes, package) = read(&args.file)?;
    if package.manifest.is_none() {
        bail!(
            "plugin {} has no manifest: pack it first (`wasmtap plugin pack {}`), so that what it may ask for is signed too",
            args.file.display(),
            args.file.display()
        );
    }
    let signature = sign::sign(&key, &signer, &package.digest);
    let signed = package::with_signature(&bytes, &signature)?;
    let out = args.output.as_deref().unwrap_or(&args.file);
    write_atomic(out, &signed)?;
    eprintln!(
        "wasmtap: {} signed by {signer} ({}), digest {}",
        out.display(),
        sign::fingerprint(&key.verifying_key()),
        package.digest_text()
    );
    Ok(Outcome::Clean)
}

fn verify(args: VerifyArgs) -> anyhow::Result<Outcome> {
    let (_, package) = read(&args.file)?;
    let trust = match &args.key {
        Some(spec) => {
            let key = sign::read_public(spec, None)?;
            let mut t = Trust::anything();
            t.any = false;
            t.vetted = false;
            t.rule = format!("key {}", sign::fingerprint(&key));
            t.keys.push(crate::package::trust::TrustedKey {
                name: sign::fingerprint(&key),
                public_key: cache::hex(key.as_bytes()),
            });
            t
        }
        None => Trust::for_run(args.trust.trust.as_deref())?,
    };
    match trust.admit(&package, Origin::File) {
        Ok(why) => {
            println!("{}: {} ({})", args.file.display(), admitted(&why), package.digest_text());
            Ok(Outcome::Clean)
        }
        Err(why) => bail!("{} {why}", args.file.display()),
    }
}

/// The files of a new plugin crate (`{{name}}` and `{{sdk}}` filled in).
const TEMPLATE: &[(&str, &str)] = &[
    ("Cargo.toml", include_str!("../../templates/plugin/Cargo.toml.in")),
    ("src/lib.rs", include_str!("../../templates/plugin/lib.rs.in")),
    ("tests/golden.rs", include_str!("../../templates/plugin/golden.rs.in")),
    ("tests/expected.txt", include_str!("../../templates/plugin/expected.txt")),
    ("README.md", include_str!("../../templates/plugin/README.md.in")),
    (".gitignore", "/target\n"),
];
/// The same plugin in the other languages, with a script for its golden test.
const TEMPLATE_C: &[(&str, &str)] = &[("plugin.c", include_str!("../../templates/plugin-c/plugin.c.in"))];
const TEMPLATE_PYTHON: &[(&str, &str)] = &[("plugin.py", include_str!("../../templates/plugin-python/plugin.py.in"))];
const TEMPLATE_JS: &[(&str, &str)] = &[("plugin.js", include_str!("../../templates/plugin-js/plugin.js.in"))];
const TEMPLATE_SCRIPT: &[(&str, &str)] = &[
    ("tests/golden.sh", include_str!("../../templates/plugin-script/golden.sh.in")),
    ("tests/expected.txt", include_str!("../../templates/plugin/expected.txt")),
    ("README.md", include_str!("../../templates/plugin-script/README.md.in")),
    (".gitignore", "/target\n__pycache__/\n"),
];
/// The recording its golden test replays: a program that opened files, known times.
const RECORDING: &[u8] = include_bytes!("../../../tests/golden/files.wtrec");

/// Where the Rust SDK's source is: `WASMTAP_SDK`, else beside a source build
/// (target/release/wasmtap → guest-sdk), else an installed copy (share/wasmtap/guest-sdk).
fn find_sdk() -> anyhow::Result<PathBuf> {
    let exe_dir = std::env::current_exe().ok().and_then(|e| e.parent().map(Path::to_path_buf));
    let mut places: Vec<PathBuf> = std::env::var_os("WASMTAP_SDK").map(PathBuf::from).into_iter().collect();
    if let Some(d) = &exe_dir {
        places.push(d.join("../../guest-sdk"));
        places.push(d.join("../share/wasmtap/guest-sdk"));
    }
    let is_sdk =
        |p: &PathBuf| std::fs::read_to_string(p.join("Cargo.toml")).is_ok_and(|t| t.contains("name = \"wasmtap-sdk\""));
    match places.iter().find(|p| is_sdk(p)) {
        Some(p) => Ok(std::fs::canonicalize(p)?),
        None => bail!(
            "cannot find the wasmtap SDK (looked in {}): set WASMTAP_SDK to its directory",
            places.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        ),
    }
}

fn new(args: NewArgs) -> anyhow::Result<Outcome> {
    let name = &args.name;
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if !ok {
        bail!("plugin name `{name}`: use 1 to 64 lower-case letters, digits, `-` or `_`, starting with a letter");
    }
    let dir = PathBuf::from(name);
    if dir.exists() {
        bail!("{} exists already: choose another name or remove it", dir.display());
    }
    let sdk = find_sdk()?;
    let exe = std::env::current_exe()?;
    let lang = match args.lang {
        Lang::Rust => "Rust",
        Lang::C => "C",
        Lang::Python => "Python",
        Lang::Js => "JavaScript",
    };
    let fill = |t: &str| {
        t.replace("{{name}}", name)
            .replace("{{sdk}}", &sdk.display().to_string())
            .replace("{{lang}}", lang)
            .replace("{{wasmtap}}", &exe.display().to_string())
    };
    let files: Vec<&(&str, &str)> = match args.lang {
        Lang::Rust => TEMPLATE.iter().collect(),
        Lang::C => TEMPLATE_C.iter().chain(TEMPLATE_SCRIPT).collect(),
        Lang::Python => TEMPLATE_PYTHON.iter().chain(TEMPLATE_SCRIPT).collect(),
        Lang::Js => TEMPLATE_JS.iter().chain(TEMPLATE_SCRIPT).collect(),
    };
    for (path, text) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().expect("a file in a directory"))?;
        std::fs::write(&path, fill(text)).with_context(|| format!("cannot write {}", path.display()))?;
    }
    std::fs::write(dir.join("tests/opens.wtrec"), RECORDING)?;
    if args.lang != Lang::Rust {
        println!("{}", dir.display());
        eprintln!(
            "wasmtap: {lang} plugin {name} written; next: cd {name} && wasmtap plugin build && sh tests/golden.sh"
        );
        return Ok(Outcome::Clean);
    }
    // The golden test runs this wasmtap; the build takes the versions this wasmtap was
    // built and tested with (and needs no network when they are in cargo's cache).
    std::fs::create_dir_all(dir.join(".cargo"))?;
    let config = format!("[env]\nWASMTAP = {:?}\n", exe.display().to_string());
    std::fs::write(dir.join(".cargo/config.toml"), config)?;
    if let Some(lock) = exe.parent().map(|d| d.join("../../Cargo.lock")).filter(|l| l.is_file()) {
        std::fs::copy(lock, dir.join("Cargo.lock"))?;
    }
    println!("{}", dir.display());
    eprintln!("wasmtap: plugin crate {name} written; next: cd {name} && wasmtap plugin build && cargo test");
    Ok(Outcome::Clean)
}

fn build(args: BuildArgs) -> anyhow::Result<Outcome> {
    let dir = &args.dir;
    let mut extra = Extra::default();
    let wasm = if dir.join("Cargo.toml").is_file() {
        from_crate(dir, &mut extra)?;
        cargo_build(dir)?
    } else if dir.join("plugin.py").is_file() {
        componentize_py(dir, &args.module_path)?
    } else if dir.join("plugin.js").is_file() {
        componentize_js(dir, &args.module_path)?
    } else if dir.join("plugin.c").is_file() {
        build_c(dir)?
    } else {
        bail!(
            "{} has no Cargo.toml (a Rust plugin), plugin.c (C), plugin.py (Python) or plugin.js (JavaScript): \
             name a plugin's directory",
            dir.display()
        );
    };
    let manifest = derive(&wasm, &[], &extra)?;
    // Named as users run it: the name its `info` gives.
    let packed = match args.output {
        Some(out) => out,
        None => dir.join("target/wasmtap").join(format!("{}.wasm", manifest.name)),
    };
    if let Some(parent) = packed.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let (bytes, _) = read(&wasm)?;
    write_atomic(&packed, &package::with_manifest(&bytes, &manifest)?)?;
    println!("{}", packed.display());
    let needs = match manifest.limits.as_ref().and_then(|l| l.instances) {
        Some(n) => format!("; needs {n} core instances, declared in its manifest"),
        None => String::new(),
    };
    eprintln!(
        "wasmtap: {} {} built and packed (probes: {}{needs}); run it: sudo wasmtap run {}",
        manifest.name,
        manifest.version,
        manifest.probes.join(", "),
        packed.display()
    );
    Ok(Outcome::Clean)
}

/// A tool of a plugin language's toolchain: `$VAR`, else where `./x setup` installs it
/// beside a source build (`target/NEAR`), else on PATH.
fn find_tool(var: &str, near: &str, name: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(var) {
        return PathBuf::from(p);
    }
    let exe_dir = std::env::current_exe().ok().and_then(|e| e.parent().map(Path::to_path_buf));
    match exe_dir.map(|d| d.join("..").join(near)).filter(|p| p.is_file()) {
        Some(p) => p,
        None => PathBuf::from(name),
    }
}

/// Run a language's build tool on `what`; `hint` says where the tool comes from.
fn run_tool(mut cmd: std::process::Command, hint: &str, what: &Path) -> anyhow::Result<()> {
    let tool = Path::new(cmd.get_program()).display().to_string();
    let status = cmd.status().with_context(|| format!("cannot run {tool} ({hint})"))?;
    if !status.success() {
        bail!("{tool} failed on {} (its messages are above)", what.display());
    }
    Ok(())
}

/// A Python plugin (`DIR/plugin.py`, with the Python SDK, `guest-sdk/python`) made a
/// component by componentize-py, WASI stubbed out (the host grants none of it).
fn componentize_py(dir: &Path, path: &[PathBuf]) -> anyhow::Result<PathBuf> {
    let sdk = find_sdk()?;
    let tool = find_tool("WASMTAP_COMPONENTIZE_PY", "py-venv/bin/componentize-py", "componentize-py");
    let target = dir.join("target/wasmtap");
    std::fs::create_dir_all(&target).with_context(|| format!("cannot create {}", target.display()))?;
    let out = target.join("component.wasm");
    let mut cmd = std::process::Command::new(&tool);
    cmd.arg("-d")
        .arg(sdk.join("../wit"))
        .args(["-w", "plugin", "componentize", "--stub-wasi", "-p"])
        .arg(sdk.join("python"))
        .arg("-p")
        .arg(dir)
        .args(path.iter().flat_map(|p| [std::ffi::OsStr::new("-p"), p.as_os_str()]))
        .args(["plugin", "-o"])
        .arg(&out)
        .stdout(std::process::Stdio::null());
    let hint = "./x setup installs it into target/py-venv; elsewhere `pip install componentize-py==0.25.1`, \
                or set WASMTAP_COMPONENTIZE_PY";
    run_tool(cmd, hint, &dir.join("plugin.py"))?;
    Ok(out)
}

/// A JavaScript plugin (`DIR/plugin.js` and the other `.js` files beside it and in
/// `path`, which it imports as `./NAME.js`; the SDK as `wasmtap`) made a component by componentize-qjs
/// (QuickJS), WASI stubbed out. The sources are staged in `DIR/target/wasmtap/js/`, the
/// SDK as its `node_modules/wasmtap`, the one directory QuickJS resolves imports in.
fn componentize_js(dir: &Path, path: &[PathBuf]) -> anyhow::Result<PathBuf> {
    let sdk = find_sdk()?.join("js");
    let tool = find_tool("WASMTAP_COMPONENTIZE_QJS", "js-tools/node_modules/.bin/componentize-qjs", "componentize-qjs");
    let target = dir.join("target/wasmtap");
    let stage = target.join("js");
    if stage.exists() {
        std::fs::remove_dir_all(&stage).with_context(|| format!("cannot empty {}", stage.display()))?;
    }
    let lib = stage.join("node_modules/wasmtap");
    std::fs::create_dir_all(&lib).with_context(|| format!("cannot create {}", lib.display()))?;
    let copy = |from: &Path, to: &Path| {
        std::fs::copy(from, to).with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))
    };
    // The module path first: the plugin's own files win a clash of names.
    for from in path.iter().map(PathBuf::as_path).chain([dir]) {
        for entry in std::fs::read_dir(from).with_context(|| format!("cannot read {}", from.display()))? {
            let file = entry?.path();
            if file.extension().is_some_and(|e| e == "js") && file.is_file() {
                copy(&file, &stage.join(file.file_name().expect("a file")))?;
            }
        }
    }
    copy(&sdk.join("wasmtap.js"), &lib.join("index.js"))?;
    for f in ["events.js", "names.js"] {
        copy(&sdk.join(f), &lib.join(f))?;
    }
    let out = target.join("component.wasm");
    let mut cmd = std::process::Command::new(&tool);
    cmd.arg("--wit")
        .arg(sdk.join("../../wit"))
        .arg("--js")
        .arg(stage.join("plugin.js"))
        .args(["--world", "plugin", "--stub-wasi", "--sync", "--module-root"])
        .arg(&stage)
        .arg("--output")
        .arg(&out)
        .stdout(std::process::Stdio::null());
    let hint = "./x setup installs it into target/js-tools; elsewhere `npm install componentize-qjs@0.4.5`, \
                or set WASMTAP_COMPONENTIZE_QJS";
    run_tool(cmd, hint, &dir.join("plugin.js"))?;
    Ok(out)
}

/// A C plugin (`DIR/plugin.c` and the other `.c` files beside it) built by the C SDK's
/// tool, `wasmtap-c`.
fn build_c(dir: &Path) -> anyhow::Result<PathBuf> {
    let tool = find_tool("WASMTAP_C", "release/wasmtap-c", "wasmtap-c");
    let target = dir.join("target/wasmtap");
    std::fs::create_dir_all(&target).with_context(|| format!("cannot create {}", target.display()))?;
    let mut sources: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "c") && p.is_file())
        .collect();
    sources.sort();
    let out = target.join("component.wasm");
    let mut cmd = std::process::Command::new(&tool);
    cmd.arg("build").arg("-o").arg(&out).args(&sources);
    run_tool(cmd, "built with wasmtap: `cargo build --release -p wasmtap-c`; or set WASMTAP_C", dir)?;
    Ok(out)
}

/// A Rust plugin crate built for wasm32-wasip2: the .wasm cargo made.
fn cargo_build(dir: &Path) -> anyhow::Result<PathBuf> {
    let out = std::process::Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .current_dir(dir)
        .args(["build", "--release", "--target", "wasm32-wasip2", "--message-format=json-render-diagnostics"])
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("cannot run cargo (is Rust installed, with `rustup target add wasm32-wasip2`?)")?;
    if !out.status.success() {
        bail!("cargo build failed in {} (its messages are above)", dir.display());
    }
    // The cdylib cargo built: the last compiler-artifact with a .wasm file.
    let wasm = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact")
        .filter_map(|m| {
            let files = m["filenames"].as_array()?.clone();
            files.iter().filter_map(|f| f.as_str()).find(|f| f.ends_with(".wasm")).map(PathBuf::from)
        })
        .next_back()
        .context("cargo built no .wasm file: is the crate a `cdylib`?")?;
    Ok(wasm)
}

fn push(args: PushArgs) -> anyhow::Result<Outcome> {
    let digest = crate::package::registry::push(&args.file, &args.reference)?;
    let repo = args.reference.strip_prefix("oci://").unwrap_or(&args.reference);
    let repo = repo.rsplit_once(':').filter(|(_, tag)| !tag.contains('/')).map_or(repo, |(r, _)| r);
    println!("{repo}@{digest}");
    Ok(Outcome::Clean)
}

/// Pull into the store, then say whether the trust policy lets it run (exit 2 if not).
fn pull(args: PullArgs) -> anyhow::Result<Outcome> {
    let trust = Trust::for_run(args.trust.trust.as_deref())?;
    let pulled = crate::package::registry::Store::from_env().pull(&args.reference)?;
    let (_, package) = read(&pulled.path)?;
    let name =
        package.manifest.as_ref().map_or_else(|| "a bare component".into(), |m| format!("{} {}", m.name, m.version));
    match trust.admit(&package, Origin::File) {
        Ok(why) => {
            println!("{}", pulled.path.display());
            eprintln!("wasmtap: {} ({name}, {}): {}", args.reference, pulled.digest, admitted(&why));
            Ok(Outcome::Clean)
        }
        Err(why) => bail!("{} ({name}) {why}", args.reference),
    }
}
