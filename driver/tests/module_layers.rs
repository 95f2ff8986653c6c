//! The driver's modules point one way: no import cycles between `driver/src`'s top-level
//! modules, and every import goes down the layer list written at the top of `lib.rs`.
//!
//! The check reads the sources: every `crate::x` (and `super::x` that reaches the crate root)
//! outside test code is an edge from the file's top-level module to `x`. A new cycle, or an
//! import of a higher layer, fails this test and names the edges.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Top-level module → the top-level modules it refers to, with one example file per edge.
type Graph = BTreeMap<String, BTreeMap<String, String>>;

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .expect("driver/src is readable")
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a source file, e.g. `controller/admin.rs` → `["controller", "admin"]`.
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// Test-only files: unit-test modules kept in files of their own.
fn is_test_file(rel: &Path) -> bool {
    let name = rel.file_name().unwrap_or_default().to_string_lossy();
    name.ends_with("_tests.rs") || name.ends_with("_loom.rs") || rel.iter().any(|p| p == "tests")
}

/// The source without comments and without inline `#[cfg(test)]` modules.
fn production_code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]") || trimmed.starts_with("#[cfg(all(test") {
            // Skip the item that follows: to the end of its braces, or to its `;`.
            let mut depth = 0i32;
            let mut opened = false;
            for next in lines.by_ref() {
                for c in next.chars() {
                    match c {
                        '{' => {
                            depth += 1;
                            opened = true;
                        }
                        '}' => depth -= 1,
                        _ => {}
                    }
                }
                if (opened && depth <= 0) || (!opened && next.trim_end().ends_with(';')) {
                    break;
                }
            }
            continue;
        }
        let code = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        out.push_str(code);
        out.push('\n');
    }
    out
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The crate-root modules a piece of code names: `crate::x`, `crate::{x, y::z}`, and `super::x`
/// where `super` is the crate root.
fn referenced_roots(code: &str, super_is_root: bool) -> BTreeSet<String> {
    let mut roots = BTreeSet::new();
    let mut prefixes = vec!["crate::"];
    if super_is_root {
        prefixes.push("super::");
    }
    for prefix in prefixes {
        let mut rest = code;
        while let Some(i) = rest.find(prefix) {
            let before = rest[..i].chars().last();
            rest = &rest[i + prefix.len()..];
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            if let Some(group) = rest.strip_prefix('{') {
                // A use group: the first identifier of each top-level item.
                let mut depth = 0;
                let mut at_item_start = true;
                for (j, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => at_item_start = true,
                        c if at_item_start && (c.is_ascii_alphanumeric() || c == '_') => {
                            roots.insert(ident_at(&group[j..]).to_string());
                            at_item_start = false;
                        }
                        _ => {}
                    }
                }
            } else {
                let id = ident_at(rest);
                if !id.is_empty() {
                    roots.insert(id.to_string());
                }
            }
        }
    }
    roots
}

fn module_graph() -> Graph {
    let src = src_dir();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph = Graph::new();
    for file in files {
        let rel = file.strip_prefix(&src).expect("under src").to_path_buf();
        if is_test_file(&rel) {
            continue;
        }
        let path = module_path(&rel);
        let Some(top) = path.first().cloned() else {
            continue; // lib.rs: the crate root only declares and re-exports
        };
        let text = fs::read_to_string(&file).expect("source is readable");
        let code = production_code(&text);
        let edges = graph.entry(top.clone()).or_default();
        for root in referenced_roots(&code, path.len() == 1) {
            if root != top && root != "self" && root != "super" {
                edges
                    .entry(root)
                    .or_insert_with(|| rel.display().to_string());
            }
        }
    }
    // Names that are not modules (items re-exported at the root) are not edges.
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for edges in graph.values_mut() {
        edges.retain(|to, _| modules.contains(to));
    }
    graph
}

/// Strongly connected components with more than one module (Tarjan's algorithm).
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    struct State<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g str) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph[v].keys() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.out.push(component);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// The layer list at the top of `lib.rs`: lines `//! N. [`module`]...`, bottom layer first;
/// modules on one line share a layer.
fn declared_layers() -> Vec<Vec<String>> {
    let lib = fs::read_to_string(src_dir().join("lib.rs")).expect("lib.rs is readable");
    let mut layers = Vec::new();
    for line in lib.lines() {
        let Some(doc) = line.strip_prefix("//! ") else {
            continue;
        };
        let numbered = doc
            .split_once(". ")
            .filter(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        let Some((_, rest)) = numbered else {
            continue;
        };
        let head = rest.split(':').next().unwrap_or("");
        let names: Vec<String> = head
            .split("[`")
            .skip(1)
            .filter_map(|s| s.split("`]").next())
            .map(|s| s.to_string())
            .collect();
        if !names.is_empty() {
            layers.push(names);
        }
    }
    layers
}

fn print_graph(graph: &Graph) {
    for (from, edges) in graph {
        let to: Vec<&str> = edges.keys().map(String::as_str).collect();
        println!("  {from} -> {}", to.join(", "));
    }
}

#[test]
fn driver_modules_have_no_import_cycles() {
    let graph = module_graph();
    assert!(graph.len() >= 5, "found too few modules: {graph:?}");
    println!("module graph of driver/src (production code):");
    print_graph(&graph);
    let found = cycles(&graph);
    println!("import cycles: {}", found.len());
    let mut report = String::new();
    for component in &found {
        report.push_str(&format!("cycle among {{{}}}:\n", component.join(", ")));
        for from in component {
            for (to, file) in &graph[from] {
                if component.contains(to) {
                    report.push_str(&format!("  {from} -> {to} (e.g. {file})\n"));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "import cycles between driver modules:\n{report}"
    );
}

#[test]
fn driver_imports_only_go_down_the_declared_layers() {
    let graph = module_graph();
    let layers = declared_layers();
    assert!(
        layers.len() >= 3,
        "lib.rs must list the layers as `//! N. [`module`]: job`, bottom first; found {layers:?}"
    );
    let level: BTreeMap<&str, usize> = layers
        .iter()
        .enumerate()
        .flat_map(|(i, names)| names.iter().map(move |n| (n.as_str(), i)))
        .collect();
    let mut wrong = Vec::new();
    for (from, edges) in &graph {
        let Some(&lf) = level.get(from.as_str()) else {
            wrong.push(format!(
                "module `{from}` is missing from lib.rs's layer list"
            ));
            continue;
        };
        for (to, file) in edges {
            match level.get(to.as_str()) {
                Some(&lt) if lt < lf => {}
                Some(_) => wrong.push(format!(
                    "{from} (layer {lf}) imports {to} (layer {}), e.g. in {file}",
                    level[to.as_str()]
                )),
                None => wrong.push(format!("module `{to}` is missing from lib.rs's layer list")),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layer order:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_checker_finds_a_cycle_and_a_group_import() {
    let mut graph = Graph::new();
    graph
        .entry("a".into())
        .or_default()
        .insert("b".into(), "a.rs".into());
    graph
        .entry("b".into())
        .or_default()
        .insert("a".into(), "b.rs".into());
    graph
        .entry("c".into())
        .or_default()
        .insert("a".into(), "c.rs".into());
    assert_eq!(cycles(&graph), vec![vec!["a".to_string(), "b".to_string()]]);

    let code = "use crate::{queue::ring::{Rings, X}, spec};\nlet x = crate::error::Error::Foo;";
    let roots = referenced_roots(code, false);
    let want: BTreeSet<String> = ["queue", "spec", "error"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(roots, want);
    let test_code =
        production_code("use crate::a;\n#[cfg(test)]\nmod tests {\n use crate::b;\n}\n");
    assert_eq!(
        referenced_roots(&test_code, false),
        ["a".to_string()].into()
    );
}
