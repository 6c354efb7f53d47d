//! Plugin packages through a real OCI registry: Debian's `docker-registry` (the CNCF
//! Distribution registry), started by the test on 127.0.0.1 only and stopped after.
//! No root needed: what is pulled is replayed over a golden recording.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use wasmtap_tests::*;

const REGISTRY: &str = "/usr/bin/docker-registry";

struct Registry {
    child: Option<Child>,
    dir: PathBuf,
    addr: String,
}

impl Registry {
    fn start(dir: &Path) -> Registry {
        assert!(Path::new(REGISTRY).is_file(), "{REGISTRY} is missing: `./x setup` installs docker-registry");
        // A free port: the kernel's choice, released for the registry to take.
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let addr = format!("127.0.0.1:{port}");
        let storage = dir.join("storage");
        std::fs::create_dir_all(&storage).unwrap();
        let config = format!(
            "version: 0.1\nlog: {{level: error}}\nstorage:\n  filesystem: {{rootdirectory: {}}}\n  delete: {{enabled: true}}\nhttp: {{addr: {addr}}}\n",
            storage.display()
        );
        std::fs::write(dir.join("config.yml"), config).unwrap();
        let child = Command::new(REGISTRY)
            .arg("serve")
            .arg(dir.join("config.yml"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("registry.log")).unwrap())
            .spawn()
            .expect("start docker-registry");
        let started = Instant::now();
        while TcpStream::connect(&addr).is_err() {
            assert!(started.elapsed() < Duration::from_secs(10), "the registry did not listen on {addr}");
            std::thread::sleep(Duration::from_millis(50));
        }
        Registry { child: Some(child), dir: dir.to_path_buf(), addr }
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The file the registry keeps a blob in.
    fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap();
        self.dir.join("storage/docker/registry/v2/blobs/sha256").join(&hex[..2]).join(hex).join("data")
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

struct Bench {
    dir: PathBuf,
}

impl Bench {
    fn cmd(&self, args: &[&str], store: &str) -> Command {
        let mut c = wasmtap();
        c.current_dir(&self.dir)
            .env("WASMTAP_PACKAGES", self.dir.join(store))
            .env("WASMTAP_CACHE_DIR", self.dir.join(format!("{store}-code")))
            .args(args);
        c
    }

    fn ok(&self, args: &[&str], store: &str) -> (String, String) {
        let o = run(&mut self.cmd(args, store));
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        (stdout(&o), stderr(&o))
    }

    fn refused(&self, args: &[&str], store: &str) -> String {
        let o = run(&mut self.cmd(args, store));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: one line only:\n{err}");
        err
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn packages_round_trip_through_a_real_registry_verified_and_cached_by_digest() {
    let dir = std::env::temp_dir().join(format!("wasmtap-registry-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let b = Bench { dir: dir.clone() };
    let mut reg = Registry::start(&dir.join("registry"));
    let addr = reg.addr.clone();
    b.ok(&["plugin", "keygen", "team-a"], "s");
    std::fs::write(dir.join("trust.toml"), "vetted = false\n[[key]]\nname = \"team-a\"\npublic-key = \"team-a.pub\"\n")
        .unwrap();
    for (plugin, file, signed) in
        [("syscount", "s.wasm", true), ("syscount", "u.wasm", false), ("opensnoop", "o.wasm", true)]
    {
        std::fs::copy(wasm(plugin), dir.join(file)).unwrap();
        b.ok(&["plugin", "pack", file], "s");
        if signed {
            b.ok(&["plugin", "sign", file, "--key", "team-a.key"], "s");
        }
    }
    let tag = format!("{addr}/team/syscount:0.1.0");
    let (pushed, _) = b.ok(&["plugin", "push", "s.wasm", &tag], "s");
    let by_digest = pushed.trim().to_string();
    assert!(by_digest.starts_with(&format!("{addr}/team/syscount@sha256:")), "{by_digest}");

    // On a clean store and a clean code cache: by tag, then by digest; the signature holds.
    let recording = Path::new(env!("CARGO_MANIFEST_DIR")).join("golden/syscalls.wtrec").display().to_string();
    let replay = |r: &str| {
        vec![
            "replay".to_string(),
            recording.clone(),
            r.to_string(),
            "--trust".into(),
            "trust.toml".into(),
            "--param".into(),
            "top=0".into(),
        ]
    };
    let (out, _) = b.ok(&strs(&replay(&tag)), "clean");
    let getppid = map_value(&out, "syscall", "getppid");
    assert_eq!(getppid, Some(1000), "{out}");
    let (out, _) = b.ok(&strs(&replay(&by_digest)), "clean");
    assert_eq!(map_value(&out, "syscall", "getppid"), Some(1000), "{out}");
    let (path, said) = b.ok(&["plugin", "pull", &tag, "--trust", "trust.toml"], "clean");
    assert!(path.trim().starts_with(&dir.join("clean/blobs/sha256-").display().to_string()), "{path}");
    assert!(said.contains("signed by team-a"), "{said}");

    // Unsigned, under a signed-only policy: refused before it is compiled.
    let unsigned = format!("{addr}/team/syscount:unsigned");
    b.ok(&["plugin", "push", "u.wasm", &unsigned], "s");
    let code_before = std::fs::read_dir(dir.join("clean-code")).unwrap().count();
    let e = b.refused(&strs(&replay(&unsigned)), "clean");
    assert!(e.contains("refused by trust policy trust.toml") && e.contains("it carries no signature"), "{e}");
    assert_eq!(
        std::fs::read_dir(dir.join("clean-code")).unwrap().count(),
        code_before,
        "a refused plugin was compiled"
    );

    // A registry that serves another blob for the layer's digest: refused, nothing stored.
    let tampered = format!("{addr}/team/opensnoop:0.1.0");
    b.ok(&["plugin", "push", "o.wasm", &tampered], "s");
    let layer = format!("sha256:{}", sha256_hex(&std::fs::read(dir.join("o.wasm")).unwrap()));
    std::fs::write(reg.blob_file(&layer), std::fs::read(dir.join("u.wasm")).unwrap()).unwrap();
    let e = b.refused(&["plugin", "pull", &tampered], "clean");
    assert!(e.contains(&addr) && e.to_lowercase().contains("digest"), "{e}");
    assert!(!dir.join(format!("clean/blobs/{}.wasm", layer.replace(':', "-"))).exists());

    // The registry down: a new pull names its address in one line; what was fetched
    // runs from the store, by digest without a word, by tag with a note.
    reg.stop();
    let e = b.refused(&["plugin", "pull", &format!("{addr}/team/other:1")], "clean");
    assert!(e.contains(&format!("registry {addr}")), "{e}");
    let (out, err) = b.ok(&strs(&replay(&by_digest)), "clean");
    assert_eq!(map_value(&out, "syscall", "getppid"), Some(1000), "{out}");
    assert!(err.is_empty(), "{err}");
    let (out, err) = b.ok(&strs(&replay(&tag)), "clean");
    assert_eq!(map_value(&out, "syscall", "getppid"), Some(1000), "{out}");
    assert!(err.contains("from the local store"), "{err}");
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn sha256_hex(bytes: &[u8]) -> String {
    let o = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(bytes)?;
            c.wait_with_output()
        })
        .unwrap();
    String::from_utf8(o.stdout).unwrap().split_whitespace().next().unwrap().to_string()
}
