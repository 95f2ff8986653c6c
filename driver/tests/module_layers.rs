//! The workspace points one way, at two levels.
//!
//! Modules: no import cycles between the top-level modules of `driver/src`, `hal/src`,
//! `tcp-target/src` and `ffi/src`, and every import of the driver goes down the layer list
//! written at the top of `driver/src/lib.rs`. The check reads the sources: every `crate::x` (and `super::x` that
//! reaches the crate root) outside test code is an edge from the file's top-level module to
//! `x`; `crate::Name` of an item the crate root re-exports (`pub use x::...::Name`) is an edge
//! to `x`. A new cycle, or an import of a higher layer, fails a test here and names the edges.
//!
//! Crates: the workspace members' `Cargo.toml`s form no dependency cycle, counting
//! `[dependencies]`, `[build-dependencies]` and, separately, `[dev-dependencies]` too; and the
//! seam stays where it belongs: `vfnvme-hal` depends on no other member, the model
//! (`vfnvme-model`) does not depend on the driver (`vfnvme`), and the driver uses the model only
//! as a dev-dependency; the NVMe/TCP target (`vfnvme-target`) sits above the driver (hal →
//! driver → target → tools): nothing below depends on it, it uses the model only in its tests
//! and never depends on the CLI.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Top-level module → the top-level modules it refers to, with one example file per edge.
type Graph = BTreeMap<String, BTreeMap<String, String>>;

/// The workspace's root directory (the driver's manifest sits in `driver/`).
fn workspace_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the driver is a workspace member")
        .to_path_buf()
}

/// `src/` of the workspace member in folder `member` (`driver`, `hal`, `ffi`).
fn src_dir(member: &str) -> PathBuf {
    workspace_dir().join(member).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .expect("the source folder is readable")
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

/// The top-level modules the crate root declares under `#[cfg(test)]` or
/// `#[cfg(all(test, ...))]` (test support kept in files of their own, e.g.
/// `ffi/src/abi_model_support.rs`).
fn test_only_modules(root: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut test_cfg = false;
    for line in root.lines() {
        let t = line.trim();
        if t.starts_with("#[cfg(test)]") || t.starts_with("#[cfg(all(test") {
            test_cfg = true;
            continue;
        }
        if t.starts_with("#[") {
            continue; // other attributes of the same item
        }
        if test_cfg {
            let decl = t.strip_prefix("pub ").unwrap_or(t);
            let decl = decl.strip_prefix("pub(crate) ").unwrap_or(decl);
            if let Some(name) = decl.strip_prefix("mod ") {
                out.insert(ident_at(name).to_string());
            }
        }
        test_cfg = false;
    }
    out
}

/// Items the crate root re-exports from its own modules: `pub use x::y::{A, B as C};` gives
/// `A → x` and `C → x` (re-exports of other crates, `pub use other as o;`, give nothing).
fn root_reexports(root: &str) -> BTreeMap<String, String> {
    let code = production_code(root);
    let mut out = BTreeMap::new();
    for stmt in code.split(';') {
        let t = stmt.trim();
        let Some(path) = t.strip_prefix("pub use ") else {
            continue;
        };
        let path = path
            .trim()
            .trim_start_matches("self::")
            .trim_start_matches("crate::");
        let module = ident_at(path).to_string();
        let Some(rest) = path[module.len()..].strip_prefix("::") else {
            continue; // `pub use x;` or `pub use x as y;`: not an item of a module of ours
        };
        // The last segment, or each name of a trailing `{...}` group.
        let names: Vec<&str> = match rest.rfind('{') {
            Some(i) => rest[i + 1..]
                .trim_end_matches('}')
                .split(',')
                .map(str::trim)
                .collect(),
            None => vec![rest.rsplit("::").next().unwrap_or("")],
        };
        for name in names {
            let exported = name.rsplit(" as ").next().unwrap_or(name).trim();
            if !exported.is_empty() && exported != "self" && exported != "*" {
                out.insert(exported.to_string(), module.clone());
            }
        }
    }
    out
}

/// The module graph of the crate whose sources are in `src` (production code only).
fn module_graph(src: &Path) -> Graph {
    let root = ["lib.rs", "main.rs"]
        .iter()
        .find_map(|f| fs::read_to_string(src.join(f)).ok())
        .expect("the crate root is readable");
    let test_only = test_only_modules(&root);
    let reexports = root_reexports(&root);
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut graph = Graph::new();
    for file in files {
        let rel = file.strip_prefix(src).expect("under src").to_path_buf();
        if is_test_file(&rel) {
            continue;
        }
        let path = module_path(&rel);
        let Some(top) = path.first().cloned() else {
            continue; // lib.rs: the crate root only declares and re-exports
        };
        if test_only.contains(&top) {
            continue;
        }
        let text = fs::read_to_string(&file).expect("source is readable");
        let code = production_code(&text);
        let edges = graph.entry(top.clone()).or_default();
        for root in referenced_roots(&code, path.len() == 1) {
            let root = reexports.get(&root).cloned().unwrap_or(root);
            if root != top && root != "self" && root != "super" {
                edges
                    .entry(root)
                    .or_insert_with(|| rel.display().to_string());
            }
        }
    }
    // Names that are not modules (other items at the root, macros) are not edges.
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
    let lib = fs::read_to_string(src_dir("driver").join("lib.rs")).expect("lib.rs is readable");
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

/// The cycles of `graph`, each with its edges and an example file (or manifest) per edge.
fn cycle_report(graph: &Graph) -> String {
    let mut report = String::new();
    for component in &cycles(graph) {
        report.push_str(&format!("cycle among {{{}}}:\n", component.join(", ")));
        for from in component {
            for (to, file) in &graph[from] {
                if component.contains(to) {
                    report.push_str(&format!("  {from} -> {to} (e.g. {file})\n"));
                }
            }
        }
    }
    report
}

/// Checks that the top-level modules of `member/src` import each other without cycles.
fn assert_no_module_cycles(member: &str, at_least: usize) {
    let graph = module_graph(&src_dir(member));
    assert!(
        graph.len() >= at_least,
        "found too few modules in {member}/src: {graph:?}"
    );
    println!("module graph of {member}/src (production code):");
    print_graph(&graph);
    let report = cycle_report(&graph);
    println!("import cycles: {}", cycles(&graph).len());
    assert!(
        report.is_empty(),
        "import cycles between modules of {member}/src:\n{report}"
    );
}

#[test]
fn driver_modules_have_no_import_cycles() {
    assert_no_module_cycles("driver", 5);
}

#[test]
fn hal_modules_have_no_import_cycles() {
    assert_no_module_cycles("hal", 5);
}

#[test]
fn target_modules_have_no_import_cycles() {
    assert_no_module_cycles("tcp-target", 10);
}

#[test]
fn ffi_modules_have_no_import_cycles() {
    assert_no_module_cycles("ffi", 5);
}

#[test]
fn driver_imports_only_go_down_the_declared_layers() {
    let graph = module_graph(&src_dir("driver"));
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

#[test]
fn the_checker_follows_root_reexports_and_skips_test_only_modules() {
    let root = "pub mod a;\n#[cfg(all(test, feature = \"m\"))]\nmod support;\n\
                pub use a::inner::{Thing, Other as Renamed};\npub use b::Item;\n\
                pub use other_crate as oc;\npub use other_crate::module;\n";
    let reexports = root_reexports(root);
    let want: BTreeMap<String, String> = [("Thing", "a"), ("Renamed", "a"), ("Item", "b")]
        .iter()
        .map(|(n, m)| (n.to_string(), m.to_string()))
        .collect();
    // `other_crate::module` maps to `other_crate`, which is no module of the crate: dropped
    // with the other names that are not modules.
    let mut got = reexports.clone();
    got.remove("module");
    assert_eq!(got, want);
    assert_eq!(test_only_modules(root), ["support".to_string()].into());
}

// ---- Crates ----------------------------------------------------------------------------------

/// Which table of a manifest a dependency is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum DepKind {
    /// `[dependencies]` or `[target.'...'.dependencies]`.
    Normal,
    /// `[build-dependencies]` (also target-specific).
    Build,
    /// `[dev-dependencies]` (also target-specific).
    Dev,
}

/// One workspace member: its package name and dependencies (by package name, with their kind
/// and where they are written).
#[derive(Debug)]
struct Manifest {
    name: String,
    deps: Vec<(String, DepKind, String)>,
}

/// A line of TOML without its comment (a `#` outside a string).
fn strip_toml_comment(line: &str) -> &str {
    let mut quote = None;
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '#') => return &line[..i],
            _ => {}
        }
    }
    line
}

/// The change in bracket depth (`[`/`{` minus `]`/`}`) of a line, outside strings.
fn bracket_delta(line: &str) -> i32 {
    let mut quote = None;
    let mut delta = 0;
    for c in line.chars() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '[' | '{') => delta += 1,
            (None, ']' | '}') => delta -= 1,
            _ => {}
        }
    }
    delta
}

/// The value of `key = "value"` inside an inline table such as `{ package = "x", path = "y" }`.
fn inline_string(table: &str, key: &str) -> Option<String> {
    let mut rest = table;
    while let Some(i) = rest.find(key) {
        let before = rest[..i].chars().last();
        let after = rest[i + key.len()..].trim_start();
        rest = &rest[i + key.len()..];
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            continue;
        }
        if let Some(value) = after.strip_prefix('=') {
            let value = value.trim_start();
            let q = value.chars().next()?;
            if q == '"' || q == '\'' {
                return value[1..].split(q).next().map(str::to_string);
            }
        }
    }
    None
}

fn bare_key(s: &str) -> String {
    s.trim().trim_matches('"').trim_matches('\'').to_string()
}

/// The dependency tables of a manifest: `(key, package, kind)` for each dependency, where
/// `package` is the `package = "..."` of a renamed dependency, or the key. Understands
/// `[dependencies]`, `[dev-dependencies]`, `[build-dependencies]`, their `[target.X.*]`
/// forms, and `[dependencies.name]` tables; multi-line arrays and tables are skipped over.
fn parse_dependencies(text: &str) -> Vec<(String, String, DepKind)> {
    let kind_of = |table: &str| -> Option<DepKind> {
        let table = match table.strip_prefix("target.") {
            // `target.'cfg(x)'.dependencies`: the kind is the part after the platform.
            Some(t) => t
                .rsplit_once("'.")
                .or(t.rsplit_once("\"."))
                .map(|(_, k)| k)?,
            None => table,
        };
        let (kind, _) = table.split_once('.').unwrap_or((table, ""));
        match kind {
            "dependencies" => Some(DepKind::Normal),
            "build-dependencies" => Some(DepKind::Build),
            "dev-dependencies" => Some(DepKind::Dev),
            _ => None,
        }
    };
    let mut out = Vec::new();
    let mut section: Option<DepKind> = None;
    // `[dependencies.name]`: the dependency the table is about, and its package if renamed.
    let mut table_dep: Option<(String, String)> = None;
    let mut depth = 0;
    let flush = |table_dep: &mut Option<(String, String)>,
                 section: Option<DepKind>,
                 out: &mut Vec<(String, String, DepKind)>| {
        if let (Some((key, package)), Some(kind)) = (table_dep.take(), section) {
            out.push((key, package, kind));
        }
    };
    for raw in text.lines() {
        let line = strip_toml_comment(raw);
        let t = line.trim();
        if depth == 0 && t.starts_with('[') {
            flush(&mut table_dep, section, &mut out);
            let header = t.trim_start_matches('[').trim_end_matches(']').trim();
            section = kind_of(header);
            // A `[dependencies.name]` table (or `[target.X.dependencies.name]`).
            if section.is_some() {
                let tail = header
                    .rsplit_once("dependencies.")
                    .map(|(_, name)| bare_key(name));
                if let Some(name) = tail.filter(|n| !n.is_empty()) {
                    table_dep = Some((name.clone(), name));
                }
            }
            continue;
        }
        if let (0, Some(kind)) = (depth, section) {
            if let Some((key, value)) = t.split_once('=') {
                let key = key.trim();
                if let Some((_, package)) = table_dep.as_mut() {
                    if key == "package" {
                        *package = bare_key(value);
                    }
                } else {
                    // `name = ...`, `name.workspace = true`, `"name" = { ... }`.
                    let name = bare_key(key.split('.').next().unwrap_or(key));
                    let package = inline_string(value, "package").unwrap_or_else(|| name.clone());
                    out.push((name, package, kind));
                }
            }
        }
        depth += bracket_delta(t);
    }
    flush(&mut table_dep, section, &mut out);
    out
}

/// `name = "..."` of the `[package]` table.
fn package_name(text: &str) -> Option<String> {
    let mut in_package = false;
    for raw in text.lines() {
        let t = strip_toml_comment(raw).trim();
        if t.starts_with('[') {
            in_package = t == "[package]";
        } else if in_package {
            if let Some((key, value)) = t.split_once('=') {
                if key.trim() == "name" {
                    return Some(bare_key(value));
                }
            }
        }
    }
    None
}

/// `members = [...]` of the root manifest's `[workspace]`.
fn workspace_members(text: &str) -> Vec<String> {
    let start = text
        .find("members")
        .expect("the root manifest lists its members");
    let list = &text[start..];
    let open = list.find('[').expect("members = [");
    let close = list.find(']').expect("members = [...]");
    list[open + 1..close]
        .split(',')
        .map(bare_key)
        .filter(|m| !m.is_empty())
        .collect()
}

/// The workspace's manifests as `(path, text)`, root first.
fn read_manifests() -> Vec<(String, String)> {
    let root = workspace_dir();
    let text = fs::read_to_string(root.join("Cargo.toml")).expect("the root manifest");
    let mut out = Vec::new();
    for member in workspace_members(&text) {
        let path = format!("{member}/Cargo.toml");
        let member_text = fs::read_to_string(root.join(&path)).expect("a member's manifest");
        out.push((path, member_text));
    }
    out.insert(0, ("Cargo.toml".to_string(), text));
    out
}

/// The members' manifests: the root's `[workspace.dependencies]` resolve `x.workspace = true`
/// to the package they name (a renamed workspace dependency).
fn manifests(files: &[(String, String)]) -> Vec<Manifest> {
    let (_, root) = files.first().expect("the root manifest comes first");
    let workspace_renames: BTreeMap<String, String> =
        parse_dependencies(&root.replace("[workspace.dependencies]", "[dependencies]"))
            .into_iter()
            .map(|(key, package, _)| (key, package))
            .collect();
    files[1..]
        .iter()
        .map(|(path, text)| Manifest {
            name: package_name(text).unwrap_or_else(|| panic!("{path} names its package")),
            deps: parse_dependencies(text)
                .into_iter()
                .map(|(key, package, kind)| {
                    let package = if key == package {
                        workspace_renames.get(&key).cloned().unwrap_or(package)
                    } else {
                        package
                    };
                    let table = match kind {
                        DepKind::Normal => "[dependencies]",
                        DepKind::Build => "[build-dependencies]",
                        DepKind::Dev => "[dev-dependencies]",
                    };
                    (package, kind, format!("{path} {table}"))
                })
                .collect(),
        })
        .collect()
}

/// The dependency graph among the members, with the edges of the given kinds (each edge
/// names the manifest and table it comes from).
fn crate_graph(members: &[Manifest], kinds: &[DepKind]) -> Graph {
    let names: BTreeSet<&str> = members.iter().map(|m| m.name.as_str()).collect();
    let mut graph = Graph::new();
    for m in members {
        let edges = graph.entry(m.name.clone()).or_default();
        for (dep, kind, place) in &m.deps {
            if kinds.contains(kind) && names.contains(dep.as_str()) && dep != &m.name {
                edges.entry(dep.clone()).or_insert_with(|| place.clone());
            }
        }
    }
    graph
}

/// Everything wrong with the members' dependencies, one line each, naming the edge.
fn crate_violations(members: &[Manifest]) -> Vec<String> {
    let mut wrong = Vec::new();
    let built = crate_graph(members, &[DepKind::Normal, DepKind::Build]);
    let report = cycle_report(&built);
    if !report.is_empty() {
        wrong.push(format!("dependency cycle between crates:\n{report}"));
    }
    let all = crate_graph(members, &[DepKind::Normal, DepKind::Build, DepKind::Dev]);
    let report = cycle_report(&all);
    if !report.is_empty() {
        wrong.push(format!(
            "dependency cycle between crates counting dev-dependencies (a crate's tests \
             would link a second copy of it):\n{report}"
        ));
    }
    let find = |name: &str| members.iter().find(|m| m.name == name);
    let member_names: BTreeSet<&str> = members.iter().map(|m| m.name.as_str()).collect();
    if let Some(hal) = find("vfnvme-hal") {
        for (dep, _, place) in &hal.deps {
            if member_names.contains(dep.as_str()) && dep != &hal.name {
                wrong.push(format!(
                    "vfnvme-hal -> {dep} ({place}): the hal depends on no other member"
                ));
            }
        }
    }
    let forbid = |wrong: &mut Vec<String>, from: &str, to: &str, why: &str| {
        if let Some(m) = find(from) {
            for (dep, kind, place) in &m.deps {
                if dep == to && *kind != DepKind::Dev {
                    wrong.push(format!("{from} -> {to} ({place}): {why}"));
                }
            }
        }
    };
    forbid(
        &mut wrong,
        "vfnvme-model",
        "vfnvme",
        "the model builds on vfnvme-hal's platform seam, not on the driver",
    );
    forbid(
        &mut wrong,
        "vfnvme",
        "vfnvme-model",
        "the driver may use the model only as a dev-dependency",
    );
    // hal → driver → target → tools: the target (vfnvme-target) builds on the driver's public
    // API; nothing below it depends on it, and it reaches the model only in its tests.
    for below in ["vfnvme-hal", "vfnvme", "vfnvme-model"] {
        forbid(
            &mut wrong,
            below,
            "vfnvme-target",
            "the NVMe/TCP target sits above the driver and the model",
        );
    }
    forbid(
        &mut wrong,
        "vfnvme-target",
        "vfnvme-model",
        "the target may use the model only as a dev-dependency (the CLI makes model backends)",
    );
    forbid(
        &mut wrong,
        "vfnvme-target",
        "vfnvme-tools",
        "the target is a library under the CLI",
    );
    wrong
}

#[test]
fn crates_point_one_way() {
    let files = read_manifests();
    let members = manifests(&files);
    let names: BTreeSet<&str> = members.iter().map(|m| m.name.as_str()).collect();
    for expected in [
        "vfnvme-hal",
        "vfnvme",
        "vfnvme-model",
        "vfnvme-target",
        "vfnvme-ffi",
        "vfnvme-tools",
    ] {
        assert!(
            names.contains(expected),
            "workspace member {expected} not found: {names:?}"
        );
    }
    println!("crate graph ([dependencies] and [build-dependencies]):");
    print_graph(&crate_graph(&members, &[DepKind::Normal, DepKind::Build]));
    println!("dev-dependencies:");
    print_graph(&crate_graph(&members, &[DepKind::Dev]));
    // The graph this test guards must have its edges: a parser that found none would pass.
    let driver = crate_graph(&members, &[DepKind::Normal]);
    assert!(driver["vfnvme"].contains_key("vfnvme-hal"), "{driver:?}");
    assert!(
        driver["vfnvme-model"].contains_key("vfnvme-hal"),
        "{driver:?}"
    );
    assert!(driver["vfnvme-target"].contains_key("vfnvme"), "{driver:?}");
    let dev = crate_graph(&members, &[DepKind::Dev]);
    assert!(dev["vfnvme"].contains_key("vfnvme-model"), "{dev:?}");
    let wrong = crate_violations(&members);
    assert!(
        wrong.is_empty(),
        "the crates' dependencies:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_crate_checker_names_the_edges_of_a_cycle() {
    let files: Vec<(String, String)> = [
        (
            "Cargo.toml",
            "[workspace]\nmembers = [\"hal\", \"driver\", \"model\"]\n\n\
             [workspace.dependencies]\nvfnvme-hal = { path = \"hal\" }\n\
             vfnvme = { path = \"driver\" }\nvfnvme-model = { path = \"model\" }\n",
        ),
        (
            "hal/Cargo.toml",
            "[package]\nname = \"vfnvme-hal\"\n\n[dependencies]\nlog.workspace = true\n\n\
             [dev-dependencies.model]\npackage = \"vfnvme-model\"\npath = \"../model\"\n",
        ),
        (
            "driver/Cargo.toml",
            "[package]\nname = \"vfnvme\"\n\n[dependencies]\n# the model, by mistake\n\
             features = { package = \"vfnvme-model\", path = \"../model\", features = [\n\
             \"a\",\n] }\nvfnvme-hal.workspace = true\n",
        ),
        (
            "model/Cargo.toml",
            "[package]\nname = \"vfnvme-model\"\n\n\
             [target.'cfg(unix)'.dependencies]\nvfnvme = { workspace = true }\n\
             vfnvme-hal.workspace = true\n",
        ),
    ]
    .iter()
    .map(|(p, t)| (p.to_string(), t.to_string()))
    .collect();
    let members = manifests(&files);
    let wrong = crate_violations(&members).join("\n");
    println!("{wrong}");
    for needle in [
        "dependency cycle between crates:\ncycle among {vfnvme, vfnvme-model}",
        "vfnvme -> vfnvme-model (e.g. driver/Cargo.toml [dependencies])",
        "vfnvme-model -> vfnvme (e.g. model/Cargo.toml [dependencies])",
        "cycle among {vfnvme, vfnvme-hal, vfnvme-model}",
        "vfnvme-hal -> vfnvme-model (e.g. hal/Cargo.toml [dev-dependencies])",
        "vfnvme-hal -> vfnvme-model (hal/Cargo.toml [dev-dependencies]): the hal depends on no",
        "vfnvme-model -> vfnvme (model/Cargo.toml [dependencies]): the model builds on",
        "vfnvme -> vfnvme-model (driver/Cargo.toml [dependencies]): the driver may use",
    ] {
        assert!(wrong.contains(needle), "missing {needle:?} in:\n{wrong}");
    }
    // The multi-line array inside the renamed dependency hid no dependency, made up none.
    let driver = members.iter().find(|m| m.name == "vfnvme").expect("driver");
    let deps: Vec<&str> = driver.deps.iter().map(|(d, _, _)| d.as_str()).collect();
    assert_eq!(deps, ["vfnvme-model", "vfnvme-hal"]);
}
