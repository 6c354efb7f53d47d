use std::path::Path;

use super::manifest::{glob, Capability, Extra};
use super::sign::{self, SignatureError};
use super::trust::{Admitted, Origin, Trust};
use super::*;
use crate::wit::types;

/// A small component: a core module (with a custom section of its own) inside one.
fn component() -> Vec<u8> {
    let mut module = wasm_encoder::Module::new();
    module.section(&wasm_encoder::CustomSection { name: "inner".into(), data: b"x".as_slice().into() });
    let mut c = wasm_encoder::Component::new();
    c.section(&wasm_encoder::ModuleSection(&module));
    c.finish()
}

fn manifest() -> Manifest {
    let info = types::PluginInfo {
        name: "demo".into(),
        version: "1.2.0".into(),
        description: "a demo".into(),
        params: vec![types::ParamSpec {
            name: "hz".into(),
            kind: types::ParamKind::Integer,
            default_value: Some("99".into()),
            description: "rate".into(),
        }],
    };
    let sub = |probe: &str, stacks| types::Subscription {
        probe: probe.into(),
        filter: types::Filter::default(),
        stacks,
        optional: false,
    };
    let plan = types::Plan {
        subscriptions: vec![
            sub("syscall:openat:entry", types::StackMode::empty()),
            sub("profile:hz:99", types::StackMode::USER),
            sub("interval:s:1", types::StackMode::empty()),
        ],
        tables: vec![],
        aggregations: vec![],
    };
    Manifest::derive(&info, "wasmtap:plugin/plugin@0.2.0", &plan, &Extra::default())
}

fn key(seed: u8) -> ed25519_dalek::SigningKey {
    ed25519_dalek::SigningKey::from_bytes(&[seed; 32])
}

fn signed(bytes: &[u8], k: &ed25519_dalek::SigningKey, signer: &str) -> Vec<u8> {
    let p = Package::parse(bytes).unwrap();
    with_signature(bytes, &sign::sign(k, signer, &p.digest)).unwrap()
}

fn trust_in(text: &str) -> Trust {
    Trust::parse(Path::new("/etc/wasmtap/trust.toml"), text).unwrap()
}

fn team_a() -> Trust {
    let hex = super::hex(key(1).verifying_key().as_bytes());
    trust_in(&format!("vetted = false\n[[key]]\nname = \"team-a\"\npublic-key = \"{hex}\"\n"))
}

#[test]
fn a_plain_component_is_a_package_without_manifest_or_signature() {
    let bytes = component();
    let p = Package::parse(&bytes).unwrap();
    assert_eq!((p.manifest, p.signatures.len(), p.signed_len), (None, 0, bytes.len()));
    assert_eq!(p.digest, super::sha256(&bytes));
}

#[test]
fn manifest_round_trips_and_is_derived_from_info_and_plan() {
    let m = manifest();
    assert_eq!(m.probes, ["profile:hz:*", "syscall:openat:entry"], "interval needs no declaring; rates generalize");
    assert_eq!(m.capabilities.iter().copied().collect::<Vec<_>>(), [Capability::UserStacks]);
    assert_eq!(m.params[0].kind, "integer");
    let bytes = with_manifest(&component(), &m).unwrap();
    assert_eq!(Package::parse(&bytes).unwrap().manifest, Some(m.clone()));
    // A second manifest replaces the first, and drops signatures made over the first.
    let bytes = signed(&bytes, &key(1), "a");
    let mut m2 = m.clone();
    m2.version = "1.3.0".into();
    let again = with_manifest(&bytes, &m2).unwrap();
    let p = Package::parse(&again).unwrap();
    assert_eq!((p.manifest.unwrap().version.as_str(), p.signatures.len()), ("1.3.0", 0));
    // The component itself is untouched: the nested module's own custom section stays.
    assert!(again.windows(5).any(|w| w == b"inner"));
}

#[test]
fn malformed_packages_are_refused_with_the_reason() {
    assert_eq!(Package::parse(b"\x7fELF....").unwrap_err(), PackageError::Header);
    let mut cut = with_manifest(&component(), &manifest()).unwrap();
    cut.truncate(cut.len() - 3);
    assert!(matches!(Package::parse(&cut), Err(PackageError::Truncated { .. })));
    let m = custom_section(MANIFEST_SECTION, &manifest().encode());
    let two = [component(), m.clone(), m].concat();
    assert_eq!(Package::parse(&two).unwrap_err(), PackageError::TwoManifests);
    let bad = [component(), custom_section(MANIFEST_SECTION, b"{\"format\":1")].concat();
    assert!(matches!(Package::parse(&bad), Err(PackageError::Manifest(_))));
    // Code appended after a signature is not covered by it: refused.
    let s = signed(&component(), &key(1), "a");
    let after = [s, custom_section("name", b"x")].concat();
    assert!(matches!(Package::parse(&after), Err(PackageError::AfterSignatures(_))));
    let big = [component(), custom_section(MANIFEST_SECTION, &vec![b' '; MAX_MANIFEST_BYTES + 1])].concat();
    assert!(Package::parse(&big).unwrap_err().to_string().contains("at most 65536"));
}

#[test]
fn signatures_verify_and_name_what_went_wrong() {
    let bytes = with_manifest(&component(), &manifest()).unwrap();
    let s = signed(&bytes, &key(1), "team-a");
    let p = Package::parse(&s).unwrap();
    assert_eq!(p.signed_len, bytes.len());
    assert_eq!(p.signatures[0].verify(&p.digest).unwrap(), key(1).verifying_key());
    // The same signature over other bytes: made for another digest.
    let other = super::sha256(b"other");
    assert!(matches!(p.signatures[0].verify(&other), Err(SignatureError::OtherDigest { .. })));
    // A signature whose digest field was rewritten to match: does not match.
    let mut forged = p.signatures[0].clone();
    forged.digest = digest_text(&other);
    assert_eq!(forged.verify(&other), Err(SignatureError::Mismatch));
}

#[test]
fn trust_admits_signed_by_a_listed_key_and_refuses_the_rest() {
    let trust = team_a();
    let bytes = with_manifest(&component(), &manifest()).unwrap();
    let by_a = signed(&bytes, &key(1), "team-a");
    let admit = |b: &[u8]| trust.admit(&Package::parse(b).unwrap(), Origin::File);
    assert_eq!(admit(&by_a), Ok(Admitted::SignedBy("team-a".into())));
    // Signed by another key.
    let e = admit(&signed(&bytes, &key(2), "team-b")).unwrap_err();
    assert!(e.contains("signed only by keys this policy does not trust: team-b (ed25519:"), "{e}");
    assert!(e.starts_with("refused by trust policy /etc/wasmtap/trust.toml (it runs plugins signed by team-a)"), "{e}");
    // Unsigned.
    assert!(admit(&bytes).unwrap_err().ends_with(": it carries no signature"));
    // A flipped byte in the code (the nested module's custom section).
    let mut code = by_a.clone();
    let at = code.windows(5).position(|w| w == b"inner").unwrap();
    code[at] ^= 1;
    let e = admit(&code).unwrap_err();
    assert!(e.contains("its signature by team-a does not hold: it was made for another digest"), "{e}");
    // A flipped byte in the manifest.
    let mut man = by_a.clone();
    let at = man.windows(6).position(|w| w == b"1.2.0\"").unwrap();
    man[at] = b'9';
    assert!(admit(&man).unwrap_err().contains("made for another digest"));
    // A signature copied from another plugin.
    let other = signed(&component(), &key(1), "team-a");
    let sig = Package::parse(&other).unwrap().signatures.remove(0);
    let e = admit(&with_signature(&bytes, &sig).unwrap()).unwrap_err();
    assert!(e.contains("made for another digest"), "{e}");
    // Vetted is off in this policy: an installed plugin needs the signature too.
    assert!(trust.admit(&Package::parse(&bytes).unwrap(), Origin::Vetted).is_err());
    assert_eq!(Trust::anything().admit(&Package::parse(&bytes).unwrap(), Origin::File), Ok(Admitted::Any));
}

#[test]
fn trust_by_digest_and_vetted() {
    let bytes = component();
    let digest = Package::parse(&bytes).unwrap().digest_text();
    let trust = trust_in(&format!("digests = [\"{digest}\"]\n"));
    assert_eq!(trust.admit(&Package::parse(&bytes).unwrap(), Origin::File), Ok(Admitted::Digest));
    let other = with_manifest(&bytes, &manifest()).unwrap();
    assert!(trust.admit(&Package::parse(&other).unwrap(), Origin::File).is_err());
    assert_eq!(trust.admit(&Package::parse(&other).unwrap(), Origin::Vetted), Ok(Admitted::Vetted));
}

#[test]
fn trust_policy_errors_name_line_and_key() {
    let cases = [
        ("vetted = \"yes\"\n", "/etc/wasmtap/trust.toml:1: `vetted`:"),
        ("digests = [\"md5:00\"]\n", "/etc/wasmtap/trust.toml:1: `digests`: `md5:00` is not `sha256:`"),
        ("\n[[key]]\nname = \"a\"\npublic-key = \"zz\"\n", "/etc/wasmtap/trust.toml:4: `key[0].public-key`:"),
        ("[[key]]\nname = \"a\"\n", "/etc/wasmtap/trust.toml:1: `key`: missing field `public-key`"),
        ("anything = true\n", "/etc/wasmtap/trust.toml:1: `anything`: unknown field `anything`"),
    ];
    for (text, want) in cases {
        let e = Trust::parse(Path::new("/etc/wasmtap/trust.toml"), text).unwrap_err().to_string();
        assert!(e.starts_with(want), "{text:?}: {e}");
    }
}

#[test]
fn keys_round_trip_through_pem_files() {
    let dir = std::env::temp_dir().join(format!("wasmtap-keys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let k = sign::generate().unwrap();
    std::fs::write(dir.join("a.key"), sign::private_pem(&k)).unwrap();
    std::fs::write(dir.join("a.pub"), sign::public_pem(&k.verifying_key())).unwrap();
    assert_eq!(sign::read_private(&dir.join("a.key")).unwrap().to_bytes(), k.to_bytes());
    assert_eq!(sign::read_public("a.pub", Some(&dir)).unwrap(), k.verifying_key());
    assert_eq!(
        sign::read_public("a.key", Some(&dir)).unwrap(),
        k.verifying_key(),
        "a private key gives its public half"
    );
    let e = sign::read_private(&dir.join("a.pub")).unwrap_err().to_string();
    assert!(e.contains("a.pub: not an ed25519 private key"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn manifest_check_names_the_probe_and_the_manifest() {
    let m = manifest();
    let plan = |probe: &str, stacks| types::Plan {
        subscriptions: vec![types::Subscription {
            probe: probe.into(),
            filter: types::Filter::default(),
            stacks,
            optional: false,
        }],
        tables: vec![],
        aggregations: vec![],
    };
    assert!(m.check(&plan("profile:hz:49", types::StackMode::USER)).is_ok());
    assert!(m.check(&plan("begin", types::StackMode::empty())).is_ok());
    let e = m.check(&plan("tracepoint:sched:sched_switch", types::StackMode::empty())).unwrap_err();
    assert_eq!(
        e,
        "its plan asks for probe `tracepoint:sched:sched_switch`, which the manifest of demo 1.2.0 does not \
         declare (it declares: profile:hz:*, syscall:openat:entry)"
    );
    let e = m.check(&plan("syscall:openat:entry", types::StackMode::KERNEL)).unwrap_err();
    assert_eq!(e, "its plan asks for kernel-stacks, which the manifest of demo 1.2.0 does not declare");
}

#[test]
fn globs() {
    assert!(glob("tracepoint:sched:*", "tracepoint:sched:sched_switch"));
    assert!(!glob("tracepoint:sched:*", "tracepoint:signal:signal_generate"));
    assert!(glob("syscall:*", "syscall:openat:entry"));
    assert!(glob("syscall:*:entry", "syscall:openat:entry"));
    assert!(!glob("syscall:*:entry", "syscall:openat:exit"));
    assert!(glob("a*b*c", "aXbYbZc"));
    assert!(!glob("abc", "abcd"));
    assert!(glob("*", ""));
}

#[test]
fn a_tenant_rule_narrows_the_hosts_trust_and_never_widens_it() {
    let hex = super::hex(key(1).verifying_key().as_bytes());
    let host = trust_in(&format!(
        "vetted = false\ndigests = [\"sha256:{}\"]\n[[key]]\nname = \"team-a\"\npublic-key = \"{hex}\"\n",
        "0".repeat(64)
    ));
    // "any": the host's policy as it is (a signed-only host stays signed-only).
    let any = host.narrowed("tenant[0]".into(), true, None);
    assert!(!any.any && !any.vetted && any.keys.len() == 1 && any.digests.len() == 1);
    // "vetted": no keys, no digests, and installed plugins only if the host runs them.
    let vetted = host.narrowed("tenant[0]".into(), false, Some(&[]));
    assert!(!vetted.any && !vetted.vetted && vetted.keys.is_empty() && vetted.digests.is_empty());
    assert!(vetted.rule.starts_with("tenant[0] under the trust policy /etc/wasmtap/trust.toml"), "{}", vetted.rule);
    // "signed" by named keys: those keys only.
    let named = host.narrowed("t".into(), false, Some(&["team-b".to_string()]));
    assert!(named.keys.is_empty() && named.digests.is_empty());
    // No trust file: a tenant rule is the whole rule.
    let open = Trust::anything().narrowed("tenant[1]".into(), false, Some(&[]));
    assert_eq!((open.rule.as_str(), open.any, open.vetted), ("tenant[1]", false, true));
}

#[test]
fn hostile_packages_cost_little_to_refuse() {
    // A glob that would take quadratic time by backtracking takes a substring search a part.
    let text = "a".repeat(4096);
    let pattern = format!("*{}b", "a".repeat(1000));
    let started = std::time::Instant::now();
    for _ in 0..256 {
        assert!(!glob(&pattern, &text));
    }
    assert!(started.elapsed() < std::time::Duration::from_secs(2), "{:?}", started.elapsed());
    // Empty sections by the million: refused past the cap, without a list of them all.
    let many = [component(), [1u8, 0].repeat(200_000)].concat();
    assert_eq!(Package::parse(&many).unwrap_err(), PackageError::TooManySections);
    // A signature made with an algorithm this host does not know: read, never holding.
    let bytes = with_manifest(&component(), &manifest()).unwrap();
    let p = Package::parse(&bytes).unwrap();
    let mut other = sign::sign(&key(1), "a", &p.digest);
    other.algorithm = "ml-dsa-65".into();
    let both = with_signature(&with_signature(&bytes, &other).unwrap(), &sign::sign(&key(1), "a", &p.digest)).unwrap();
    assert_eq!(team_a().admit(&Package::parse(&both).unwrap(), Origin::File), Ok(Admitted::SignedBy("team-a".into())));
    let only = with_signature(&bytes, &other).unwrap();
    let e = team_a().admit(&Package::parse(&only).unwrap(), Origin::File).unwrap_err();
    assert!(e.contains("this wasmtap verifies ed25519"), "{e}");
    // Control characters in what is printed: refused.
    let mut m = manifest();
    m.description = "ok\x1b[2J".into();
    let bad = [component(), custom_section(MANIFEST_SECTION, &m.encode())].concat();
    assert!(Package::parse(&bad).unwrap_err().to_string().contains("control characters"));
    // 17 signatures: refused.
    let mut many_sigs = bytes.clone();
    for _ in 0..MAX_SIGNATURES {
        many_sigs = with_signature(&many_sigs, &sign::sign(&key(1), "a", &p.digest)).unwrap();
    }
    assert_eq!(
        with_signature(&many_sigs, &sign::sign(&key(1), "a", &p.digest)).unwrap_err(),
        PackageError::TooManySignatures
    );
}

#[test]
fn a_manifest_may_ask_for_more_instances_within_the_ceiling_unless_the_user_set_them() {
    use crate::limits::{Limits, MANIFEST_MAX_INSTANCES};
    let mut m = manifest();
    m.limits = Some(manifest::Needs { instances: Some(38) });
    let round = Manifest::decode(&serde_json::to_vec(&m).unwrap()).unwrap();
    assert_eq!(round, m);
    assert!(String::from_utf8(serde_json::to_vec(&m).unwrap()).unwrap().contains(r#""limits":{"instances":38}"#));
    // Granted where the user left the count alone, never lowered, never past the ceiling.
    assert_eq!(Limits::default().granting(m.instances_asked()).instances, 38);
    assert_eq!(Limits { instances: 50, ..Limits::default() }.granting(m.instances_asked()).instances, 50);
    let set = Limits { instances: 8, instances_set: true, ..Limits::default() };
    assert_eq!(set.granting(m.instances_asked()).instances, 8, "--max-instances wins");
    assert_eq!(Limits::default().granting(manifest().instances_asked()).instances, 16);
    assert_eq!(Limits::default().granting(None).instances, 16);
    // Nothing else the manifest says raises a limit.
    let granted = Limits::default().granting(m.instances_asked());
    assert_eq!((granted.memory_bytes, granted.deadline), (Limits::default().memory_bytes, Limits::default().deadline));
    // A manifest asking past the ceiling, or for none, is malformed.
    for n in [0, MANIFEST_MAX_INSTANCES as u32 + 1] {
        m.limits = Some(manifest::Needs { instances: Some(n) });
        let err = Manifest::decode(&serde_json::to_vec(&m).unwrap()).unwrap_err();
        assert_eq!(err, format!("limits.instances {n}: a plugin may ask for 1 to 64 core instances"));
    }
    m.limits = None;
    let unknown = String::from_utf8(serde_json::to_vec(&m).unwrap())
        .unwrap()
        .replace(r#""format":1"#, r#""format":1,"limits":{"memory":9}"#);
    assert!(Manifest::decode(unknown.as_bytes()).unwrap_err().contains("unknown field `memory`"));
}
