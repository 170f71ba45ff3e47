//! The layering of `src/lib.rs`'s Layout section, checked against the code:
//! every `crate::…` path a module names must be of a layer below it (or its
//! own). A new import that breaks a layer fails here, naming the file.

use std::collections::BTreeMap;
use std::path::Path;

/// What each top-level module may name, besides itself.
fn allowed() -> BTreeMap<&'static str, &'static [&'static str]> {
    const BASE: &[&str] = &["error", "ids"];
    BTreeMap::from([
        ("error", &[][..]),
        ("ids", &[][..]),
        ("child_process", &[][..]),
        ("protocol", BASE),
        ("entries", &["error", "ids", "protocol"][..]),
        ("event", &["error", "ids", "protocol"][..]),
        ("metrics", &["error", "ids", "protocol"][..]),
        ("config", &["error", "ids", "protocol"][..]),
        ("store", &["error", "ids", "protocol", "entries", "metrics", "config"][..]),
        ("tools", &["error", "ids", "protocol", "metrics", "config", "child_process"][..]),
        ("runtime", &["error", "ids", "protocol", "entries", "event", "metrics", "config", "store", "tools"][..]),
        ("ops", &["error", "ids", "protocol", "entries", "event", "metrics", "config", "store", "runtime"][..]),
        ("admin", &["error", "ids", "protocol", "entries", "event", "metrics", "config", "store", "runtime"][..]),
        (
            "adapter",
            &[
                "error",
                "ids",
                "protocol",
                "entries",
                "event",
                "metrics",
                "config",
                "store",
                "runtime",
                "ops",
                "tools",
                "child_process",
            ][..],
        ),
        (
            "session",
            &[
                "error", "ids", "protocol", "entries", "event", "metrics", "config", "store", "runtime", "ops",
                "admin", "tools",
            ][..],
        ),
        (
            "transport",
            &[
                "error", "ids", "protocol", "entries", "event", "metrics", "config", "store", "runtime", "ops",
                "admin", "session", "tools",
            ][..],
        ),
    ])
}

/// Every `crate::NAME` a source text names outside its comments.
fn named_modules(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let after = &rest[at + "crate::".len()..];
            let name: String = after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !name.is_empty() {
                names.push(name);
            }
            rest = after;
        }
    }
    names
}

fn visit(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            visit(&path, files);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
}

#[test]
fn every_module_names_only_the_layers_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let allowed = allowed();
    let mut files = Vec::new();
    visit(&src, &mut files);
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        let relative = file.strip_prefix(&src).unwrap();
        let top =
            relative.components().next().unwrap().as_os_str().to_string_lossy().trim_end_matches(".rs").to_owned();
        // The crate root, the binary and the service wiring sit above all.
        let Some(may) = allowed.get(top.as_str()) else { continue };
        checked += 1;
        for name in named_modules(&std::fs::read_to_string(file).unwrap()) {
            if name != top && allowed.contains_key(name.as_str()) && !may.contains(&name.as_str()) {
                broken.push(format!("{} names crate::{name}", relative.display()));
            }
        }
    }
    assert!(checked > 100, "only {checked} files checked: is the src layout as this test thinks?");
    broken.sort();
    broken.dedup();
    assert!(broken.is_empty(), "imports against the layering:\n{}", broken.join("\n"));
}
