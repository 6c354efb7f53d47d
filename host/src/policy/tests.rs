use super::*;

/// A host with three users and one group.
struct Fake;

impl Names for Fake {
    fn user(&self, name: &str) -> Option<u32> {
        match name {
            "alice" => Some(1001),
            "bob" => Some(1002),
            "carol" => Some(1003),
            _ => None,
        }
    }

    fn group(&self, name: &str) -> Option<u32> {
        (name == "tracers").then_some(2000)
    }
}

fn parse(text: &str) -> Result<Policy, PolicyError> {
    Policy::parse(Path::new("policy.toml"), text, &Fake)
}

fn error(text: &str) -> String {
    parse(text).expect_err("refused").to_string()
}

const MINIMAL: &str = r#"
[[tenant]]
users = ["alice", "bob"]          # these local users (groups: groups = ["tracers"])
scope = "own"                     # only processes running as their own uid
probes = ["syscall", "proc", "file"]
plugins = "vetted"
"#;

#[test]
fn the_minimal_policy_is_accepted_as_written_and_means_what_it_says() {
    let p = parse(MINIMAL).unwrap();
    assert_eq!(p.socket, Path::new(DEFAULT_SOCKET));
    let [t] = &p.tenants[..] else { panic!("{p:?}") };
    assert_eq!(t.line, 2);
    let names: Vec<(&str, u32)> = t.users.iter().map(|u| (u.name.as_str(), u.id)).collect();
    assert_eq!(names, [("alice", 1001), ("bob", 1002)]);
    assert_eq!(t.scope, Scope::Own);
    assert_eq!(t.probes, BTreeSet::from([ProbeClass::Syscall, ProbeClass::Proc, ProbeClass::File]));
    assert_eq!(t.plugins, PluginRule::Vetted);
    assert!(!t.kernel_addresses && !t.admin);
    assert_eq!(t.quotas, Quotas::default());
    assert_eq!(p.verdict(1001, &[1001]), Verdict::Tenant(t));
    assert_eq!(p.verdict(1003, &[1003]), Verdict::Refused);
    assert_eq!(p.verdict(0, &[0]), Verdict::Root);
}

#[test]
fn a_user_is_the_first_tenant_naming_it_or_one_of_its_groups() {
    let p = parse(
        r#"
[daemon]
socket = "/run/wt.sock"
group = "tracers"
metrics = "127.0.0.1:9464"

[[tenant]]
users = ["alice"]
scope = "all"
probes = ["tracepoint", "profile"]
admin = true
metrics = true

[[tenant]]
groups = ["tracers"]
scope = "cgroups"
cgroups = ["/sys/fs/cgroup/unified/ci"]
probes = ["tracepoint:sched", "uprobe"]
plugins = "any"
kernel_addresses = true
[tenant.quotas]
sessions = 2
memory_mib = 32
"#,
    )
    .unwrap();
    assert_eq!(p.socket, Path::new("/run/wt.sock"));
    assert_eq!(p.socket_group, Some(Named { name: "tracers".into(), id: 2000 }));
    assert_eq!(p.metrics.as_deref(), Some("127.0.0.1:9464"));
    // alice is in tracers too, but the first tenant names her.
    let Verdict::Tenant(alice) = p.verdict(1001, &[1001, 2000]) else { panic!() };
    assert!(alice.admin && alice.metrics && alice.scope == Scope::All && alice.line == 7);
    let Verdict::Tenant(bob) = p.verdict(1002, &[1002, 2000]) else { panic!() };
    assert_eq!(bob.scope, Scope::Cgroups(vec!["/sys/fs/cgroup/unified/ci".into()]));
    assert!(!bob.metrics, "a tenant's metrics are not on the daemon's endpoint unless its rule says so");
    assert!(bob.probes.iter().any(|c| c.covers(&ProbeClass::Tracepoint(Some("sched".into())))));
    assert!(!bob.probes.iter().any(|c| c.covers(&ProbeClass::Tracepoint(Some("block".into())))));
    assert!(ProbeClass::Tracepoint(None).covers(&ProbeClass::Tracepoint(Some("block".into()))));
    assert_eq!((&bob.plugins, bob.kernel_addresses), (&PluginRule::Any, true));
    assert_eq!(bob.quotas, Quotas { sessions: 2, memory_mib: 32, ..Quotas::default() });
    assert_eq!(p.verdict(1003, &[1003]), Verdict::Refused);
}

#[test]
fn every_mistake_is_refused_naming_the_line_and_the_key() {
    let cases = [
        (MINIMAL.replace("\"bob\"", "\"dave\""), "policy.toml:3: `tenant[0].users`: no user `dave` on this host"),
        (
            MINIMAL.replace("\"own\"", "\"mine\""),
            "policy.toml:4: `tenant[0].scope`: expected \"own\", \"cgroups\" or \"all\", found \"mine\"",
        ),
        (
            MINIMAL.replace("\"file\"", "\"kprobe\""),
            "policy.toml:5: `tenant[0].probes`: no probe class `kprobe` (known: syscall, proc, file, tracepoint, \
             tracepoint:CATEGORY, uprobe, usdt, profile, software)",
        ),
        (
            MINIMAL.replace("\"vetted\"", "\"signd\""),
            "policy.toml:6: `tenant[0].plugins`: expected \"vetted\", \"signed\" or \"any\"",
        ),
        (
            MINIMAL.replace("scope = \"own\"", "scope = 1"),
            "policy.toml:4: `scope`: invalid type: integer `1`, expected a string",
        ),
        (MINIMAL.replace("plugins = ", "plugin = "), "policy.toml:6: `plugin`: unknown field `plugin`"),
        (
            MINIMAL.replace("plugins = \"vetted\"", "plugins = \"vetted\"\nsigned_by = [\"team-a\"]"),
            "policy.toml:7: `tenant[0].signed_by`: is only for plugins = \"signed\"",
        ),
        (
            MINIMAL.replace("scope = \"own\"", "scope = \"cgroups\""),
            "policy.toml:4: `tenant[0].scope`: scope \"cgroups\" needs",
        ),
        (
            MINIMAL.replace("scope = \"own\"", "scope = \"own\"\ncgroups = [\"/a\"]"),
            "policy.toml:5: `tenant[0].cgroups`: is only for scope \"cgroups\", not \"own\"",
        ),
        (
            MINIMAL.replace("scope = \"own\"", "scope = \"cgroups\"\ncgroups = [\"/a/../b\"]"),
            "policy.toml:5: `tenant[0].cgroups`: `/a/../b` is not an absolute path without `..`",
        ),
        (
            format!("{MINIMAL}[tenant.quotas]\nsessions = 0\n"),
            "policy.toml:2: `tenant[0].quotas.sessions`: must be at least 1",
        ),
        ("[[tenant]]\nscope = \"own\"\n".to_string(), "policy.toml:1: `tenant[0]`: names no users and no groups"),
        (
            "[daemon]\ngroup = \"nobody-here\"\n".to_string(),
            "policy.toml:2: `daemon.group`: no group `nobody-here` on this host",
        ),
        ("[daemon]\nsocket = \"rel.sock\"\n".to_string(), "policy.toml:2: `daemon.socket`: must be an absolute path"),
        (
            "[daemon]\nmetrics = \"localhost\"\n".to_string(),
            "policy.toml:2: `daemon.metrics`: expected ADDRESS:PORT (127.0.0.1:9464) or :PORT",
        ),
        ("[[tenant]\n".to_string(), "policy.toml:1: `"),
    ];
    for (text, expect) in cases {
        let err = error(&text);
        assert!(err.starts_with(expect), "expected {expect:?}, got {err:?} for\n{text}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

#[test]
fn no_file_is_root_only_and_an_unreadable_one_is_named() {
    let p = Policy::load(Path::new("/nonexistent/policy.toml")).unwrap();
    assert_eq!(p, Policy::root_only());
    assert_eq!(p.verdict(1000, &[1000]), Verdict::Refused);
    assert_eq!(p.verdict(0, &[]), Verdict::Root);
    let err = Policy::load(Path::new("/proc/self/mem")).unwrap_err().to_string();
    assert!(err.starts_with("cannot read the policy /proc/self/mem: "), "{err}");
}

#[test]
fn the_shipped_example_policy_holds() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../dist/policy.toml");
    let p = Policy::parse(&path, &std::fs::read_to_string(&path).unwrap(), &Fake).unwrap();
    assert_eq!(p.socket, Path::new(DEFAULT_SOCKET));
    assert_eq!(p.tenants.len(), 1);
    assert_eq!(p.tenants[0].scope, Scope::Own);
}

#[test]
fn signed_plugins_by_every_trusted_key_or_by_named_ones() {
    let every = parse(&MINIMAL.replace("\"vetted\"", "\"signed\"")).unwrap();
    assert_eq!(every.tenants[0].plugins, PluginRule::Signed(None));
    let named = parse(&MINIMAL.replace("\"vetted\"", "\"signed\"\nsigned_by = [\"team-a\"]")).unwrap();
    assert_eq!(named.tenants[0].plugins, PluginRule::Signed(Some(vec!["team-a".into()])));
}
