//! The crate's layout holds: data flows one way between the top-level modules of `src/` (no
//! import circle), and no hand-written source file is over 900 lines.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file below `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The top-level module a file of `src/` belongs to (`collector` for `src/collector/row.rs`);
/// `None` for the crate root and the binary, which only wire and re-export.
fn module_of(file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src()).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    match first {
        "lib.rs" | "bin" => None,
        f => Some(f.trim_end_matches(".rs").to_string()),
    }
}

/// The names the crate root re-exports, with the module each comes from
/// (`Profiler` -> `profiler`), read from `pub use` lines of `src/lib.rs`.
fn root_names() -> BTreeMap<String, String> {
    let lib = std::fs::read_to_string(src().join("lib.rs")).expect("src/lib.rs");
    let mut names = BTreeMap::new();
    // Joined so that a `pub use a::{b, c};` over several lines is one statement.
    for stmt in lib.split(';') {
        let stmt = stmt.split_whitespace().collect::<Vec<_>>().join(" ");
        let Some(rest) = stmt
            .rsplit("pub use ")
            .next()
            .filter(|_| stmt.contains("pub use "))
        else {
            continue;
        };
        let Some((module, items)) = rest.split_once("::") else {
            continue;
        };
        let items = items.trim_start_matches('{').trim_end_matches('}');
        for item in items.split(',') {
            let item = item.trim();
            let name = item.rsplit(" as ").next().unwrap_or(item);
            let name = name.rsplit("::").next().unwrap_or(name).trim();
            if !name.is_empty() {
                names.insert(name.to_string(), module.to_string());
            }
        }
    }
    names
}

/// The top-level modules each module's code names through `crate::` (comments left out).
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let roots = root_names();
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let Some(from) = module_of(&file) else {
            continue;
        };
        let text = std::fs::read_to_string(&file).expect("a source file");
        let deps = graph.entry(from.clone()).or_default();
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or("");
            for (i, _) in code.match_indices("crate::") {
                let after = &code[i + "crate::".len()..];
                let after = after.trim_start_matches('{');
                let name: String = after
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                let to = roots.get(&name).cloned().unwrap_or(name);
                if !to.is_empty() && to != from {
                    deps.insert(to);
                }
            }
        }
    }
    graph
}

/// A circle of imports through `start`, if there is one.
fn circle_through(graph: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Option<Vec<String>> {
    let mut stack = vec![(start.to_string(), vec![start.to_string()])];
    let mut seen = BTreeSet::new();
    while let Some((node, path)) = stack.pop() {
        for next in graph.get(&node).into_iter().flatten() {
            if next == start {
                let mut circle = path.clone();
                circle.push(start.to_string());
                return Some(circle);
            }
            if seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(next.clone());
                stack.push((next.clone(), longer));
            }
        }
    }
    None
}

#[test]
fn no_import_circle_among_the_top_level_modules() {
    let graph = imports();
    assert!(
        graph.contains_key("collector") && graph["collector"].contains("run"),
        "the import reader sees the collector's imports: {graph:?}"
    );
    let circles: Vec<String> = graph
        .keys()
        .filter_map(|m| circle_through(&graph, m))
        .map(|c| c.join(" -> "))
        .collect();
    assert!(circles.is_empty(), "import circles: {circles:#?}");
}

#[test]
fn the_circle_finder_finds_a_circle() {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    graph.entry("a".into()).or_default().insert("b".into());
    graph.entry("b".into()).or_default().insert("c".into());
    graph.entry("c".into()).or_default().insert("a".into());
    graph.entry("d".into()).or_default().insert("a".into());
    assert_eq!(
        circle_through(&graph, "a"),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    assert_eq!(circle_through(&graph, "d"), None);
}

#[test]
fn no_source_file_is_over_900_lines() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    assert!(files.len() > 20, "the files of src/ are found");
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let lines = std::fs::read_to_string(f).ok()?.lines().count();
            (lines > 900).then(|| format!("{}: {lines} lines", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "split these by what they do: {long:#?}");
}
