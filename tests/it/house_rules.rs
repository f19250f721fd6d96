//! Two rules of the source tree that no compiler checks, checked here so the next feature cannot
//! undo them:
//!
//! - no production file is over 700 lines before its tests, so a file stays one job a reader
//!   can hold (generated code and test-only files aside);
//! - within each crate, the files' imports form no circle: a file never reaches itself through
//!   `use` paths (edges between a module and the modules inside it are left out, as a parent
//!   naturally names its children and re-exports them).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::Context;

const MAX_LINES_BEFORE_TESTS: usize = 700;
/// The crate roots of the workspace, relative to it.
const CRATE_ROOTS: [&str; 3] = ["src", "actors/src", "storage/src"];
/// Generated from the RocketMQ 5 schema.
const GENERATED: [&str; 1] = ["src/grpc/pb.rs"];

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    Ok(())
}

/// The file's code before its `#[cfg(test)]` module (all of it when it has none).
fn before_tests(text: &str) -> Vec<&str> {
    text.lines()
        .take_while(|line| !line.starts_with("#[cfg(test)]"))
        .collect()
}

#[test]
fn no_production_file_is_over_700_lines_before_its_tests() -> anyhow::Result<()> {
    let root = workspace();
    let mut over = Vec::new();
    let mut counted = 0;
    for crate_root in CRATE_ROOTS {
        let mut files = Vec::new();
        rust_files(&root.join(crate_root), &mut files)?;
        for file in files {
            let relative = file.strip_prefix(&root)?.to_string_lossy().into_owned();
            let test_only = file.file_name().is_some_and(|n| n == "tests.rs");
            if test_only || GENERATED.contains(&relative.as_str()) {
                continue;
            }
            let lines = before_tests(&std::fs::read_to_string(&file)?).len();
            counted += 1;
            if lines > MAX_LINES_BEFORE_TESTS {
                over.push(format!("{relative}: {lines} lines"));
            }
        }
    }
    assert!(
        counted > 100,
        "only {counted} files found under {CRATE_ROOTS:?}"
    );
    assert!(
        over.is_empty(),
        "over {MAX_LINES_BEFORE_TESTS} lines before the tests; split by job:\n{}",
        over.join("\n")
    );
    Ok(())
}

/// A module's path inside its crate (`["broker", "pop", "ack"]`), from its file.
fn module_of(crate_root: &Path, file: &Path) -> Option<Vec<String>> {
    let relative = file.strip_prefix(crate_root).ok()?.with_extension("");
    let mut path: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    match path.last().map(String::as_str) {
        Some("mod") => {
            path.pop();
        }
        Some("lib") if path.len() == 1 => path.clear(),
        Some("main") if path.len() == 1 => return None,
        _ => {}
    }
    Some(path)
}

/// Every path a `use` tree names, with its groups spread out: `a::{b, c::{d, e}}` is `a::b`,
/// `a::c::d` and `a::c::e`.
fn spread(tree: &str) -> Vec<String> {
    let Some(open) = tree.find('{') else {
        return vec![tree.to_owned()];
    };
    let (head, rest) = tree.split_at(open);
    let body = rest
        .strip_prefix('{')
        .and_then(|r| r.strip_suffix('}'))
        .unwrap_or(rest);
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in body.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&body[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&body[start..]);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(|p| spread(&format!("{head}{p}")))
        .collect()
}

/// The crate-relative module paths `code` imports or names, as written from `module`.
fn named_paths(module: &[String], code: &str) -> Vec<Vec<String>> {
    let code: String = code
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let mut written = Vec::new();
    for statement in code.split(';') {
        let Some(at) = statement.find("use ") else {
            continue;
        };
        let before = &statement[..at];
        if !(before.trim().is_empty()
            || before.trim_end().ends_with("pub")
            || before.trim_end().ends_with(')'))
        {
            continue;
        }
        let tree: String = statement[at + 4..]
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        written.extend(spread(&tree));
    }
    // Paths written in the code itself (`crate::grpc::until_stopped(...)`).
    for word in code.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')) {
        if word.starts_with("crate::") || word.starts_with("super::") {
            written.push(word.to_owned());
        }
    }
    written
        .into_iter()
        .filter_map(|path| {
            let segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
            let (first, rest) = segments.split_first()?;
            match *first {
                "crate" => Some(rest.iter().map(|s| s.to_string()).collect()),
                "self" => Some(
                    module
                        .iter()
                        .cloned()
                        .chain(rest.iter().map(|s| s.to_string()))
                        .collect(),
                ),
                "super" => {
                    let mut base = module.to_vec();
                    let mut rest = segments.as_slice();
                    while let Some((&"super", tail)) = rest.split_first() {
                        base.pop();
                        rest = tail;
                    }
                    base.extend(rest.iter().map(|s| s.to_string()));
                    Some(base)
                }
                _ => None,
            }
        })
        .collect()
}

/// The longest prefix of `path` that is a module of the crate.
fn resolve<'a>(modules: &'a BTreeSet<Vec<String>>, path: &[String]) -> Option<&'a Vec<String>> {
    (1..=path.len())
        .rev()
        .find_map(|n| modules.get(&path[..n].to_vec()))
}

/// A circle in `edges`, as the modules along it, if there is one.
fn circle(edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Option<Vec<Vec<String>>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        at: &Vec<String>,
        edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        marks: &mut BTreeMap<Vec<String>, Mark>,
        trail: &mut Vec<Vec<String>>,
    ) -> Option<Vec<Vec<String>>> {
        match marks.get(at) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let from = trail.iter().position(|m| m == at).unwrap_or(0);
                let mut found = trail[from..].to_vec();
                found.push(at.clone());
                return Some(found);
            }
            None => {}
        }
        marks.insert(at.clone(), Mark::Open);
        trail.push(at.clone());
        for next in edges.get(at).into_iter().flatten() {
            if let Some(found) = visit(next, edges, marks, trail) {
                return Some(found);
            }
        }
        trail.pop();
        marks.insert(at.clone(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for start in edges.keys() {
        if let Some(found) = visit(start, edges, &mut marks, &mut Vec::new()) {
            return Some(found);
        }
    }
    None
}

#[test]
fn no_crate_has_a_circle_of_imports_between_its_files() -> anyhow::Result<()> {
    let root = workspace();
    for crate_root in CRATE_ROOTS {
        let crate_root = root.join(crate_root);
        let mut files = Vec::new();
        rust_files(&crate_root, &mut files)?;
        let mut code = BTreeMap::new();
        for file in &files {
            if let Some(module) = module_of(&crate_root, file) {
                let text = std::fs::read_to_string(file)?;
                code.insert(module, before_tests(&text).join("\n"));
            }
        }
        let modules: BTreeSet<Vec<String>> = code.keys().cloned().collect();
        let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
        for (module, text) in &code {
            for path in named_paths(module, text) {
                let Some(target) = resolve(&modules, &path) else {
                    continue;
                };
                let related = target.starts_with(module) || module.starts_with(target);
                if !related {
                    edges
                        .entry(module.clone())
                        .or_default()
                        .insert(target.clone());
                }
            }
        }
        let edge_count: usize = edges.values().map(BTreeSet::len).sum();
        assert!(
            edge_count > 50,
            "{}: only {edge_count} imports found",
            crate_root.display()
        );
        if let Some(found) = circle(&edges) {
            let shown: Vec<String> = found.iter().map(|m| m.join("/")).collect();
            panic!(
                "{}: a circle of imports: {}",
                crate_root.display(),
                shown.join(" -> ")
            );
        }
    }
    Ok(())
}

#[test]
fn a_use_tree_spreads_into_every_path_it_names() {
    assert_eq!(
        spread("crate::a::{b,c::{d,e}}"),
        ["crate::a::b", "crate::a::c::d", "crate::a::c::e"]
    );
    let edges = BTreeMap::from([
        (vec!["a".to_owned()], BTreeSet::from([vec!["b".to_owned()]])),
        (vec!["b".to_owned()], BTreeSet::from([vec!["a".to_owned()]])),
    ]);
    assert!(circle(&edges).is_some(), "a -> b -> a is a circle");
}
