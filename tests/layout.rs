//! The workspace's layout holds, in every crate: data flows one way between the modules that share
//! a parent (no import circle at any level of the module tree), no hand-written source file is
//! over 900 lines, and no function is over 100 lines but the two hot matches that are one
//! decoder each.
//!
//! The imports are read from the source text with comments and string literals blanked out: every
//! path that starts with `crate::`, `super::` or `self::` (and every `use` path that starts with a
//! child module's name), with `use` trees expanded, is resolved to the file module it names; a
//! name a module re-exports (`pub use x::Y`) is followed to where it is defined, and a module name
//! always wins over a re-export, so `pub use crate::a::{b as a}` cannot hide module `a`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Functions allowed past 100 lines: each is one hot match over the kinds it decodes.
const LONG_FUNCTIONS_ALLOWED: &[&str] = &["decode", "capture_api_call"];

/// The `src/` of every crate of the workspace: the root and each sibling with a Cargo.toml.
fn crate_sources() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut siblings = Vec::new();
    for entry in std::fs::read_dir(root).expect("the workspace root is readable") {
        let dir = entry.expect("a directory entry").path();
        if dir.join("Cargo.toml").is_file() && dir.join("src").is_dir() {
            siblings.push(dir.join("src"));
        }
    }
    siblings.sort();
    // The profiler's own sources first.
    std::iter::once(root.join("src")).chain(siblings).collect()
}

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

/// The source with comments, string and character literals blanked (newlines kept), so that
/// only code is read.
fn mask(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        let after_ident = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        if rest.starts_with(b"//") {
            let end = rest
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |p| i + p);
            blank(&mut out, i, end);
            i = end;
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (1, i + 2);
            while j < b.len() && depth > 0 {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if !after_ident && raw_string_start(rest).is_some() {
            let (open, hashes) = raw_string_start(rest).expect("checked");
            let close: Vec<u8> = std::iter::once(b'"').chain(vec![b'#'; hashes]).collect();
            let end = b[i + open..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(b.len(), |p| i + open + p + close.len());
            blank(&mut out, i, end);
            i = end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if b[i] == b'\'' {
            // A character literal ('a', '\n', '\u{1F600}'); a lifetime has no closing quote.
            let len = char_literal_len(rest);
            blank(&mut out, i, i + len);
            i += len.max(1);
        } else {
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `r"`, `r#"`, `br"`...: the bytes up to and including the quote, and the number of `#`.
fn raw_string_start(rest: &[u8]) -> Option<(usize, usize)> {
    let after_b = if rest.first() == Some(&b'b') { 1 } else { 0 };
    if rest.get(after_b) != Some(&b'r') {
        return None;
    }
    let hashes = rest[after_b + 1..]
        .iter()
        .take_while(|&&c| c == b'#')
        .count();
    (rest.get(after_b + 1 + hashes) == Some(&b'"')).then_some((after_b + 2 + hashes, hashes))
}

/// The length of a character literal at the start of `rest`, or 0 for a lifetime.
fn char_literal_len(rest: &[u8]) -> usize {
    let body = &rest[1..];
    let len = if body.first() == Some(&b'\\') {
        body.iter().skip(1).position(|&c| c == b'\'').map(|p| p + 2)
    } else {
        // One character, which may take up to four bytes.
        (1..=4).find(|&n| body.get(n) == Some(&b'\''))
    };
    match len {
        Some(n) if n <= 12 => n + 2,
        _ => 0,
    }
}

/// The tokens of masked code that paths are made of: identifiers, `::`, and single punctuation.
fn tokens(code: &str) -> Vec<(usize, String)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push((start, code[start..i].to_string()));
        } else if ["::", "->", "=>"].iter().any(|p| code[i..].starts_with(p)) {
            out.push((i, code[i..i + 2].to_string()));
            i += 2;
        } else {
            if !c.is_ascii_whitespace() {
                out.push((i, (c as char).to_string()));
            }
            i += 1;
        }
    }
    out
}

/// One crate's modules, the paths each file names, and what each module re-exports.
#[derive(Default)]
struct ModuleTree {
    /// Every file module, as its path from the crate root (`["analysis", "compare"]`).
    modules: BTreeSet<Vec<String>>,
    /// For each file module: the absolute paths its code names.
    uses: BTreeMap<Vec<String>, Vec<Vec<String>>>,
    /// (module, name) → the absolute path a `use` in that module binds the name to.
    bindings: BTreeMap<(Vec<String>, String), Vec<String>>,
}

/// The module path of a file of `src` (`src/analysis/compare/mod.rs` → `analysis::compare`);
/// `None` for the files of `src/bin/`, which are crates of their own.
fn module_of(src: &Path, file: &Path) -> Option<Vec<String>> {
    let rel = file.strip_prefix(src).ok()?;
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.first().is_some_and(|p| p == "bin") {
        return None;
    }
    let last = parts.pop()?;
    let stem = last.trim_end_matches(".rs");
    if !(stem == "mod" || (parts.is_empty() && (stem == "lib" || stem == "main"))) {
        parts.push(stem.to_string());
    }
    Some(parts)
}

/// Reads the crate whose sources are under `src`.
fn read_tree(src: &Path) -> ModuleTree {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut tree = ModuleTree::default();
    let mut texts = Vec::new();
    for file in files {
        if let Some(module) = module_of(src, &file) {
            tree.modules.insert(module.clone());
            let text = std::fs::read_to_string(&file).expect("a source file");
            texts.push((module, mask(&text)));
        }
    }
    for (module, code) in texts {
        read_paths(&mut tree, &module, &code);
    }
    tree
}

/// Records the paths a file's code names and the names its `use` statements bind.
fn read_paths(tree: &mut ModuleTree, file_module: &[String], code: &str) {
    let toks = tokens(code);
    // Inline modules (`mod tests { ... }`): their names and the brace depth they close at.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        let t = toks[i].1.as_str();
        let current: Vec<String> = file_module
            .iter()
            .cloned()
            .chain(inline.iter().map(|(n, _)| n.clone()))
            .collect();
        match t {
            "{" => depth += 1,
            "}" => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(_, d)| *d > depth) {
                    inline.pop();
                }
            }
            "mod" if toks.get(i + 2).is_some_and(|t| t.1 == "{") => {
                inline.push((toks[i + 1].1.clone(), depth + 1));
            }
            "use" => {
                let (paths, next) = use_tree(&toks, i + 1, Vec::new());
                for (path, bound) in paths {
                    let abs = absolute(tree, &current, &path, true);
                    if let (Some(abs), Some(name)) = (abs, bound) {
                        tree.bindings
                            .insert((file_module.to_vec(), name), abs.clone());
                        tree.uses.entry(file_module.to_vec()).or_default().push(abs);
                    }
                }
                i = next;
                continue;
            }
            "crate" | "super" | "self" if toks.get(i + 1).is_some_and(|t| t.1 == "::") => {
                let (paths, next) = use_tree(&toks, i, Vec::new());
                for (path, _) in paths {
                    if let Some(abs) = absolute(tree, &current, &path, false) {
                        tree.uses.entry(file_module.to_vec()).or_default().push(abs);
                    }
                }
                i = next;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
}

/// Parses a path or `use` tree from token `i` with `prefix` before it: every leaf path, with the
/// name it binds (`None` for a glob), and the index after the tree.
#[allow(clippy::type_complexity)]
fn use_tree(
    toks: &[(usize, String)],
    mut i: usize,
    mut prefix: Vec<String>,
) -> (Vec<(Vec<String>, Option<String>)>, usize) {
    let mut out = Vec::new();
    while let Some((_, t)) = toks.get(i) {
        match t.as_str() {
            "{" => {
                i += 1;
                while i < toks.len() && toks[i].1 != "}" {
                    let (mut leaves, next) = use_tree(toks, i, prefix.clone());
                    out.append(&mut leaves);
                    // Something that is no path (a macro's tokens) is stepped over.
                    i = next.max(i + 1);
                    if toks.get(i).is_some_and(|t| t.1 == ",") {
                        i += 1;
                    }
                }
                return (out, i + 1);
            }
            "*" => {
                out.push((prefix, None));
                return (out, i + 1);
            }
            name if name.chars().all(|c| c.is_alphanumeric() || c == '_') => {
                prefix.push(name.to_string());
                i += 1;
                if toks.get(i).is_some_and(|t| t.1 == "::") {
                    i += 1;
                    continue;
                }
                let mut bound = prefix.last().cloned();
                if toks.get(i).is_some_and(|t| t.1 == "as") {
                    bound = toks.get(i + 1).map(|t| t.1.clone());
                    i += 2;
                }
                out.push((prefix, bound));
                return (out, i);
            }
            _ => break,
        }
    }
    (out, i)
}

/// The absolute path (from the crate root) that `path`, written in module `current`, names;
/// `None` for a path into another crate. In a `use`, a first segment that is a child module of
/// `current` is relative to it (the 2018 edition's rule).
fn absolute(
    tree: &ModuleTree,
    current: &[String],
    path: &[String],
    in_use: bool,
) -> Option<Vec<String>> {
    let mut abs: Vec<String> = match path.first().map(String::as_str) {
        Some("crate") => Vec::new(),
        Some("self") => current.to_vec(),
        Some("super") => current.to_vec(),
        Some(first) if in_use => {
            let child: Vec<String> = current.iter().cloned().chain([first.to_string()]).collect();
            if !tree.modules.contains(&child) {
                return None;
            }
            current.to_vec()
        }
        _ => return None,
    };
    for seg in path {
        match seg.as_str() {
            "crate" | "self" => {}
            "super" => {
                abs.pop();
            }
            s => abs.push(s.to_string()),
        }
    }
    Some(abs)
}

/// The file module an absolute path lands in, following re-exports: the longest prefix that is a
/// file module, or, when the next name is one that module binds with `use`, where that leads.
fn target_module(tree: &ModuleTree, path: &[String], hops: usize) -> Vec<String> {
    let mut len = path.len();
    while len > 0 && !tree.modules.contains(&path[..len]) {
        len -= 1;
    }
    let module = path[..len].to_vec();
    if hops > 0 && len < path.len() {
        if let Some(to) = tree.bindings.get(&(module.clone(), path[len].clone())) {
            let mut further = to.clone();
            further.extend_from_slice(&path[len + 1..]);
            if further != path {
                return target_module(tree, &further, hops - 1);
            }
        }
    }
    module
}

/// For each parent module, the edges between its children: `child → child` when code below the
/// first names something below the second.
type SiblingGraphs = BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>>;

fn sibling_graphs(tree: &ModuleTree) -> SiblingGraphs {
    let mut graphs = SiblingGraphs::new();
    for (from, paths) in &tree.uses {
        for path in paths {
            let to = target_module(tree, path, 8);
            let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            // A module naming its ancestor or its descendant is no edge between siblings.
            if common == from.len() || common == to.len() {
                continue;
            }
            graphs
                .entry(from[..common].to_vec())
                .or_default()
                .entry(from[common].clone())
                .or_default()
                .insert(to[common].clone());
        }
    }
    graphs
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

/// Every import circle of the crate under `src`, as `parent: a -> b -> a`.
fn circles(src: &Path) -> Vec<String> {
    let tree = read_tree(src);
    let mut out = Vec::new();
    for (parent, graph) in sibling_graphs(&tree) {
        for child in graph.keys() {
            if let Some(c) = circle_through(&graph, child) {
                out.push(format!("{}: {}", parent.join("::"), c.join(" -> ")));
            }
        }
    }
    out
}

#[test]
fn no_import_circle_inside_any_crate() {
    let sources = crate_sources();
    assert!(sources.len() >= 5, "the crates are found: {sources:?}");
    let root = read_tree(&sources[0]);
    let graphs = sibling_graphs(&root);
    assert!(
        graphs[&Vec::new()]["collector"].contains("run"),
        "the import reader sees the collector's imports: {graphs:?}"
    );
    let found: Vec<String> = sources
        .iter()
        .flat_map(|s| {
            circles(s)
                .into_iter()
                .map(move |c| format!("{}: {c}", s.display()))
        })
        .collect();
    assert!(found.is_empty(), "import circles: {found:#?}");
}

/// Writes the source files of a crate, (path, text), into a fresh temporary directory, which is
/// removed when the returned value drops.
fn planted(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary directory");
    for (path, text) in files {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().expect("a parent")).expect("a temporary directory");
        std::fs::write(p, text).expect("a temporary file");
    }
    dir
}

#[test]
fn a_circle_behind_a_re_export_of_the_same_name_is_found() {
    // A re-export that binds a module's own name (`cupti`) to an item inside it once made every
    // `crate::cupti::...` look like a path into the crate root.
    let src = planted(&[
        (
            "lib.rs",
            "mod config; mod cupti; mod pcsampling;\n\
                 pub use crate::cupti::{api as cupti, check};\n\
                 pub mod internals { pub use crate::cupti::{api as cupti}; }\n",
        ),
        (
            "cupti.rs",
            "use crate::config::NvtxImport;\npub fn api() {}\npub fn check() {}\n",
        ),
        (
            "config.rs",
            "pub struct NvtxImport;\nuse crate::pcsampling::Setup;\n",
        ),
        (
            "pcsampling.rs",
            "pub struct Setup;\nfn f() { crate::cupti::api(); }\n",
        ),
    ]);
    let found = circles(src.path());
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(found
        .iter()
        .all(|c| c.contains("cupti") && c.contains("pcsampling")));
}

#[test]
fn a_circle_between_nested_modules_and_through_a_re_export_is_found() {
    let src = planted(&[
        ("lib.rs", "pub mod analysis;\n"),
        (
            "analysis/mod.rs",
            "pub mod compare; pub mod series;\npub use series::Series;\n",
        ),
        (
            "analysis/series.rs",
            "use super::compare::SplitMix64;\npub struct Series;\n",
        ),
        (
            "analysis/compare/mod.rs",
            "mod bootstrap;\npub use bootstrap::SplitMix64;\n",
        ),
        (
            "analysis/compare/bootstrap.rs",
            "pub struct SplitMix64;\nfn f(_: crate::analysis::Series) {}\n",
        ),
        (
            "other.rs",
            "// crate::analysis::series in a comment is no import\n",
        ),
    ]);
    let found = circles(src.path());
    assert_eq!(
        found,
        vec![
            "analysis: compare -> series -> compare".to_string(),
            "analysis: series -> compare -> series".to_string()
        ]
    );
}

#[test]
fn a_crate_without_a_circle_passes() {
    let src = planted(&[
        ("lib.rs", "mod a; mod b;\npub use a::A;\n"),
        (
            "a.rs",
            "pub struct A;\nuse crate::b::B;\n#[cfg(test)]\nmod tests { use super::*; }\n",
        ),
        (
            "b.rs",
            "pub struct B;\nconst S: &str = \"crate::a::A\";\nuse super::*;\n",
        ),
    ]);
    let found = circles(src.path());
    assert!(found.is_empty(), "{found:?}");
}

#[test]
fn no_source_file_is_over_900_lines() {
    let mut files = Vec::new();
    for src in crate_sources() {
        rust_files(&src, &mut files);
    }
    assert!(files.len() > 20, "the files of src/ are found");
    let long: Vec<String> = files
        .iter()
        .filter(|f| !f.ends_with("bindings.rs") && !f.ends_with("release_cbids.rs"))
        .filter_map(|f| {
            let lines = std::fs::read_to_string(f).ok()?.lines().count();
            (lines > 900).then(|| format!("{}: {lines} lines", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "split these by what they do: {long:#?}");
}

/// Every `fn` of masked `code` with a body: its name, first line and number of lines.
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let toks = tokens(code);
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let mut out = Vec::new();
    for (k, (at, t)) in toks.iter().enumerate() {
        if t != "fn"
            || toks
                .get(k + 1)
                .is_none_or(|n| !n.1.starts_with(char::is_alphabetic))
        {
            continue;
        }
        // The body opens at the first `{` outside the signature's brackets, unless a `;` ends it.
        let mut nest = 0i32;
        let mut open = None;
        for (pos, tok) in &toks[k + 2..] {
            match tok.as_str() {
                "(" | "[" | "<" => nest += 1,
                ")" | "]" | ">" => nest -= 1,
                ";" if nest <= 0 => break,
                "{" if nest <= 0 => {
                    open = Some(*pos);
                    break;
                }
                _ => {}
            }
        }
        let Some(open) = open else { continue };
        let mut depth = 0;
        let close = code[open..]
            .char_indices()
            .find(|&(_, c)| {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                depth == 0
            })
            .map_or(code.len(), |(p, _)| open + p);
        out.push((
            toks[k + 1].1.clone(),
            line_of(*at),
            line_of(close) - line_of(*at) + 1,
        ));
    }
    out
}

#[test]
fn no_function_is_over_100_lines() {
    let mut long = Vec::new();
    let mut count = 0;
    for src in crate_sources() {
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for file in files.iter().filter(|f| !f.ends_with("bindings.rs")) {
            let code = mask(&std::fs::read_to_string(file).expect("a source file"));
            for (name, line, lines) in functions(&code) {
                count += 1;
                if lines > 100 && !LONG_FUNCTIONS_ALLOWED.contains(&name.as_str()) {
                    long.push(format!("{}:{line}: {name}: {lines} lines", file.display()));
                }
            }
        }
    }
    assert!(count > 1000, "the functions are found: {count}");
    assert!(long.is_empty(), "split these into steps: {long:#?}");
}

#[test]
fn the_function_reader_measures_bodies_not_signatures_or_strings() {
    let code = mask(
        "fn a() -> Vec<u8> {\n    let s = \"}}}\";\n    vec![]\n}\n\
         trait T { fn b(&self); }\nfn c<F: Fn() -> ()>(f: F) where F: Copy {\n}\n",
    );
    let found = functions(&code);
    // `b` has no body; `c`'s `->` inside its bounds does not close a bracket.
    assert_eq!(found, vec![("a".into(), 1, 4), ("c".into(), 6, 2)]);
}
