//! Golden renderings: replays of committed recordings (tests/golden/*.wtrec, made by
//! tests/golden/record.sh) through the vetted plugins, in every output format, compared
//! byte for byte with tests/golden/cases/NAME.out. No root needed: replay is
//! deterministic. `WASMTAP_BLESS=1` rewrites the expected files after a deliberate change.

use std::path::{Path, PathBuf};

use wasmtap_tests::*;

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("golden")
}

/// Run one case: `NAME.args` holds the command line, run in tests/golden.
fn check(name: &str) -> Result<(), String> {
    let dir = golden_dir();
    let args_file = dir.join("cases").join(format!("{name}.args"));
    let line = std::fs::read_to_string(&args_file).map_err(|e| format!("{}: {e}", args_file.display()))?;
    let args: Vec<&str> = line.split_whitespace().collect();
    let o = run(wasmtap()
        .current_dir(&dir)
        .env("WASMTAP_PLUGIN_PATH", target_dir().join("wasm32-wasip2/wasm"))
        .args(&args));
    if o.status.code() != Some(0) {
        return Err(format!("{name}: `wasmtap {line}` failed: {}", stderr(&o)));
    }
    let got = normalize(&stdout(&o));
    let expected_file = dir.join("cases").join(format!("{name}.out"));
    if std::env::var_os("WASMTAP_BLESS").is_some() {
        std::fs::write(&expected_file, &got).map_err(|e| e.to_string())?;
        return Ok(());
    }
    let expected = std::fs::read_to_string(&expected_file).map_err(|e| format!("{}: {e}", expected_file.display()))?;
    if got != expected {
        let diff: Vec<String> = expected
            .lines()
            .zip(got.lines().chain(std::iter::repeat("<missing>")))
            .enumerate()
            .filter(|(_, (e, g))| e != g)
            .take(5)
            .map(|(i, (e, g))| format!("line {}:\n  expected: {e}\n  got:      {g}", i + 1))
            .collect();
        return Err(format!(
            "{name}: output differs from {} ({} vs {} lines)\n{}\n--- got ---\n{got}",
            expected_file.display(),
            expected.lines().count(),
            got.lines().count(),
            diff.join("\n")
        ));
    }
    Ok(())
}

/// The accounting record with what depends on the machine and the moment zeroed: the
/// host's memory, CPU times, and whether a plugin's code came from the cache.
fn normalize(out: &str) -> String {
    out.lines()
        .map(|line| {
            let Ok(mut v) = serde_json::from_str::<serde_json::Value>(line) else { return format!("{line}\n") };
            if v["type"] != "accounting" {
                return format!("{line}\n");
            }
            let data = &mut v["data"];
            data["host"] = serde_json::json!({"rss_bytes": 0, "peak_rss_bytes": 0});
            for p in data["plugins"].as_array_mut().into_iter().flatten() {
                p["cpu_ms"] = 0.into();
                p["longest_call_ms"] = 0.into();
                p["code"] = "".into();
            }
            format!("{v}\n")
        })
        .collect()
}

#[test]
fn every_case_renders_as_recorded() {
    let mut names: Vec<String> = std::fs::read_dir(golden_dir().join("cases"))
        .expect("tests/golden/cases")
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".args").map(str::to_string))
        .collect();
    names.sort();
    assert!(names.len() >= 10, "golden cases missing: {names:?}");
    let failures: Vec<String> = names.iter().filter_map(|n| check(n).err()).collect();
    assert!(
        failures.is_empty(),
        "{} of {} golden cases failed:\n{}",
        failures.len(),
        names.len(),
        failures.join("\n\n")
    );
}

#[test]
fn counts_in_the_recording_match_its_workload() {
    // The recorded workload made exactly 5 rounds of 200 getppid calls and 5 sleeps.
    let o = run(wasmtap().current_dir(golden_dir()).args(["replay", "syscalls.wtrec", "syscount", "--param", "top=0"]));
    let out = stdout(&o);
    assert_eq!(map_value(&out, "syscall", "getppid"), Some(1000), "{out}");
    assert_eq!(map_value(&out, "syscall", "clock_nanosleep"), Some(5), "{out}");
}

#[test]
fn flame_graph_names_the_hot_function() {
    let svg = target_dir().join("golden-profile.svg");
    let _ = std::fs::remove_file(&svg);
    let o =
        run(wasmtap().current_dir(golden_dir()).args(["replay", "profile.wtrec", "profile", "--flamegraph"]).arg(&svg));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = std::fs::read_to_string(&svg).expect("the SVG was written");
    assert!(text.trim_start().starts_with("<?xml") || text.trim_start().starts_with("<svg"), "not an SVG");
    assert!(text.trim_end().ends_with("</svg>"));
    // spin_func spends all its time in wasmtap_hot_loop: the widest frame above main.
    let title = text
        .split("<title>")
        .filter_map(|t| t.split("</title>").next())
        .find(|t| t.starts_with("wasmtap_hot_loop "))
        .unwrap_or_else(|| panic!("no frame for wasmtap_hot_loop in the flame graph"));
    let samples: u64 = title.split(['(', ' ']).nth(2).and_then(|n| n.parse().ok()).expect("sample count in the title");
    assert!(samples >= 90, "{title}");
}
