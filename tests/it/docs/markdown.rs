//! The markdown side of the documentation test: reading fenced blocks and
//! their markers, and the checks that need no binary (markers, links,
//! "After reading", no internal history).

use std::path::Path;

/// The shell languages whose blocks need a marker.
const SHELLS: [&str; 4] = ["sh", "bash", "console", "shell"];

/// One fenced block of a markdown file.
#[derive(Debug)]
pub(super) struct Block {
    /// Where it is, for messages: `README.md:42`.
    pub(super) place: String,
    /// Its info string (`sh`, `toml` …).
    pub(super) lang: String,
    /// The HTML comment on the last non-blank line before it, if any.
    pub(super) marker: Option<String>,
    /// Its text, without the fences.
    pub(super) body: String,
}

pub(super) fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// README.md, BENCHMARKS.md and every docs/*.md, relative to the crate root.
pub(super) fn markdown_files() -> Vec<String> {
    let mut files = vec!["README.md".to_owned(), "BENCHMARKS.md".to_owned()];
    let mut docs: Vec<String> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|entry| entry.expect("a docs/ entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

pub(super) fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|err| panic!("{path}: {err}"))
}

/// Every fenced block of `file`, with the marker before it.
pub(super) fn blocks(file: &str) -> Vec<Block> {
    let text = read(file);
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    let mut index = 0;
    while index < lines.len() {
        let Some(info) = lines[index].trim_start().strip_prefix("```") else {
            index += 1;
            continue;
        };
        let start = index;
        let indent = lines[index].len() - lines[index].trim_start().len();
        let end = (start + 1..lines.len())
            .find(|&i| lines[i].trim() == "```")
            .unwrap_or_else(|| panic!("{file}:{}: a block that never closes", start + 1));
        let marker = lines[..start]
            .iter()
            .rev()
            .find(|line| !line.trim().is_empty())
            .map(|line| line.trim())
            .filter(|line| line.starts_with("<!--"))
            .map(str::to_owned);
        let body: Vec<&str> =
            lines[start + 1..end].iter().map(|line| line.get(indent..).unwrap_or(line.trim())).collect();
        found.push(Block {
            place: format!("{file}:{}", start + 1),
            lang: info.trim().to_owned(),
            marker,
            body: body.join("\n") + "\n",
        });
        index = end + 1;
    }
    found
}

/// The shell block whose marker names `name`.
pub(super) fn named_block(file: &str, name: &str) -> String {
    let wanted = format!("({name}) -->");
    let mut matching = blocks(file).into_iter().filter(|b| b.marker.as_deref().is_some_and(|m| m.ends_with(&wanted)));
    let block = matching.next().unwrap_or_else(|| panic!("{file} has no block marked ({name})"));
    assert!(matching.next().is_none(), "{file}: two blocks marked ({name})");
    block.body
}

#[test]
fn every_shell_block_is_run_by_a_test_or_says_why_not() {
    let mut wrong = Vec::new();
    for file in markdown_files() {
        for block in blocks(&file).into_iter().filter(|b| SHELLS.contains(&b.lang.as_str())) {
            if let Err(why) = check_marker(&block) {
                wrong.push(format!("{}: {why}", block.place));
            }
        }
    }
    assert!(wrong.is_empty(), "shell blocks without a true marker:\n{}", wrong.join("\n"));
}

fn check_marker(block: &Block) -> Result<(), String> {
    let marker = block.marker.as_deref().ok_or("no <!-- run by: … --> or <!-- not run: … --> before it")?;
    let inner = marker.strip_prefix("<!--").and_then(|m| m.strip_suffix("-->")).map(str::trim).unwrap_or("");
    if let Some(reason) = inner.strip_prefix("not run:") {
        return if reason.trim().is_empty() { Err("`not run` without a reason".into()) } else { Ok(()) };
    }
    let Some(runner) = inner.strip_prefix("run by:").map(str::trim) else {
        return Err(format!("`{marker}` is neither `run by:` nor `not run:`"));
    };
    let (path, name) = match runner.split_once(" (") {
        Some((path, name)) => (path, name.strip_suffix(')')),
        None => (runner, None),
    };
    let text = std::fs::read_to_string(root().join(path)).map_err(|err| format!("run by {path}: {err}"))?;
    match name {
        Some(name) if text.contains(&format!("\"{name}\"")) => Ok(()),
        Some(name) => Err(format!("{path} never names the block \"{name}\"")),
        None => {
            let lines: Vec<&str> = text.lines().map(str::trim).collect();
            let missing: Vec<&str> = block
                .body
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .filter(|l| !lines.contains(l))
                .collect();
            if missing.is_empty() {
                Ok(())
            } else {
                Err(format!("{path} does not run {missing:?}"))
            }
        }
    }
}

#[test]
fn every_docs_page_says_what_its_reader_can_do_after_it() {
    for file in markdown_files().into_iter().filter(|f| f.starts_with("docs/")) {
        let text = read(&file);
        let first_paragraph = text.lines().find(|l| !l.starts_with('#') && !l.trim().is_empty());
        assert!(
            first_paragraph.is_some_and(|l| l.starts_with("After reading this you can")),
            "{file} opens with \"After reading this you can …\""
        );
    }
}

#[test]
fn no_page_cites_internal_history_except_the_perf_history() {
    let mut wrong = Vec::new();
    for file in markdown_files().into_iter().filter(|f| f != "docs/perf-history.md") {
        for (number, line) in read(&file).lines().enumerate() {
            if cites_history(&line.to_ascii_lowercase()) {
                wrong.push(format!("{file}:{}: {line}", number + 1));
            }
        }
    }
    assert!(wrong.is_empty(), "internal history outside docs/perf-history.md:\n{}", wrong.join("\n"));
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut broken = Vec::new();
    for file in markdown_files() {
        let base = Path::new(&file).parent().unwrap_or(Path::new("")).to_path_buf();
        for target in links(&read(&file)) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let linked = if path.is_empty() { file.clone() } else { normalize(&base.join(path)) };
            if !root().join(&linked).exists() {
                broken.push(format!("{file}: {target} (no such file)"));
                continue;
            }
            if !anchor.is_empty() && !read(&linked).lines().filter_map(heading).any(|h| slug(h) == anchor) {
                broken.push(format!("{file}: {target} (no such heading)"));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The targets of `[text](target)` links.
fn links(text: &str) -> Vec<String> {
    text.match_indices("](")
        .filter_map(|(at, _)| text[at + 2..].split_once(')').map(|(target, _)| target.to_owned()))
        .filter(|target| !target.contains(' '))
        .collect()
}

fn heading(line: &str) -> Option<&str> {
    line.starts_with('#').then(|| line.trim_start_matches('#').trim())
}

/// A heading's anchor as GitHub makes it: lower case, punctuation dropped,
/// spaces as hyphens.
fn slug(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// `docs/../README.md` → `README.md`.
fn normalize(path: &Path) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.iter().map(|p| p.to_str().unwrap_or("")) {
        match part {
            ".." => {
                parts.pop();
            }
            "." | "" => {}
            _ => parts.push(part),
        }
    }
    parts.join("/")
}

/// "issue 15", "issue #5", "round 3", or a commit hash in backticks.
fn cites_history(line: &str) -> bool {
    let numbered = ["issue ", "issues ", "round "].iter().any(|word| {
        line.match_indices(word).any(|(at, _)| {
            let rest = line[at + word.len()..].trim_start_matches('#');
            rest.starts_with(|c: char| c.is_ascii_digit())
        })
    });
    let hash = line.split('`').skip(1).step_by(2).any(|code| {
        (7..=40).contains(&code.len())
            && code.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
            && code.chars().any(|c| c.is_ascii_digit())
            && code.chars().any(|c| c.is_ascii_alphabetic())
    });
    numbered || hash
}
