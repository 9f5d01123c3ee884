//! Modules depend downwards only (ARCHITECTURE.md, "Invariants"): every
//! `crate::` path in the server's source names a module of its own layer or
//! of a layer below, and no modules import each other in a loop. The layers
//! are written here as ARCHITECTURE.md lists them, so a new module must be
//! given its place, and an import that runs upward fails with its file.
//!
//! The unit tests inside a file (its `#[cfg(test)] mod tests`) are left
//! out: a test may build its fixtures with the helpers of a higher layer.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The server's modules by layer, top first.
const LAYERS: &[(&str, &[&str])] = &[
    ("wiring", &["startup", "checks", "options"]),
    ("http", &["http"]),
    // The three doors callers come in by: the API, the operator's actions
    // (called by the operator API and the CLI) and the dashboard.
    ("operator actions", &["operator_actions"]),
    ("dashboard", &["dashboard"]),
    // Everything the doors share, in its own folder (`src/application/`).
    ("application", &["application"]),
    (
        "services",
        &[
            "workers",
            "health",
            "webhook_senders",
            "representation",
            "dialects",
            "retention",
            "backend",
            "media",
            "bound_media",
            "live_status",
            "rate_limit",
            "storage",
            "stripe",
        ],
    ),
    ("metrics", &["metrics"]),
    ("store", &["store"]),
    (
        "foundations",
        &[
            "limits",
            "ids",
            "secrets",
            "diagnostics",
            "allocator",
            "spend_limits",
            "telemetry",
        ],
    ),
];

/// One `crate::` import: the file it is in and the module it names.
struct Import {
    file: String,
    module: String,
}

#[test]
fn every_module_imports_only_its_own_layer_and_the_layers_below() {
    let layer_of = layer_of_each_module();
    let imports = imports_by_module();
    let unplaced: Vec<&String> = imports
        .keys()
        .filter(|module| !layer_of.contains_key(module.as_str()))
        .collect();
    assert!(
        unplaced.is_empty(),
        "modules without a layer in tests/it/layers.rs (and ARCHITECTURE.md): {unplaced:?}"
    );
    let mut upward = Vec::new();
    for (module, imports) in &imports {
        let (own_rank, own_layer) = layer_of[module.as_str()];
        for import in imports {
            let Some(&(rank, layer)) = layer_of.get(import.module.as_str()) else {
                upward.push(format!(
                    "{} imports crate::{}, which has no layer",
                    import.file, import.module
                ));
                continue;
            };
            if rank < own_rank {
                upward.push(format!(
                    "{} (layer {own_layer}) imports crate::{} (layer {layer}, above it)",
                    import.file, import.module
                ));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports that run upward:\n{}",
        upward.join("\n")
    );
}

#[test]
fn no_modules_import_each_other_in_a_loop() {
    let imports = imports_by_module();
    let graph: BTreeMap<&str, BTreeSet<&str>> = imports
        .iter()
        .map(|(module, imports)| {
            let targets = imports
                .iter()
                .map(|import| import.module.as_str())
                .collect();
            (module.as_str(), targets)
        })
        .collect();
    for start in graph.keys() {
        if let Some(path) = path_back_to(start, &graph) {
            let files: Vec<String> = path
                .windows(2)
                .map(|step| {
                    let file = &imports[step[0]]
                        .iter()
                        .find(|import| import.module == step[1])
                        .expect("an import on the path")
                        .file;
                    format!("{file} imports crate::{}", step[1])
                })
                .collect();
            panic!(
                "modules import each other in a loop: {}\n{}",
                path.join(" -> "),
                files.join("\n")
            );
        }
    }
}

fn layer_of_each_module() -> BTreeMap<&'static str, (usize, &'static str)> {
    let mut layer_of = BTreeMap::new();
    for (rank, (layer, modules)) in LAYERS.iter().enumerate() {
        for module in *modules {
            assert!(
                layer_of.insert(*module, (rank, *layer)).is_none(),
                "{module} has two layers"
            );
        }
    }
    layer_of
}

/// A path of imports from `start` back to itself, if there is one.
fn path_back_to<'a>(
    start: &'a str,
    graph: &BTreeMap<&'a str, BTreeSet<&'a str>>,
) -> Option<Vec<&'a str>> {
    let mut stack = vec![vec![start]];
    let mut seen = BTreeSet::new();
    while let Some(path) = stack.pop() {
        let last = *path.last().expect("a path is never empty");
        for &next in graph.get(last).into_iter().flatten() {
            if next == start {
                let mut found = path.clone();
                found.push(start);
                return Some(found);
            }
            if seen.insert(next) {
                let mut longer = path.clone();
                longer.push(next);
                stack.push(longer);
            }
        }
    }
    None
}

/// Each top-level module of `src/` (a file, or a folder with its files)
/// with the other modules its files name through `crate::`.
fn imports_by_module() -> BTreeMap<String, Vec<Import>> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut imports: BTreeMap<String, Vec<Import>> = BTreeMap::new();
    for path in rust_files(&source) {
        let relative = path.strip_prefix(&source).expect("a file under src/");
        let first = relative
            .components()
            .next()
            .expect("a file has a name")
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_owned();
        // The crate root declares the modules; it is no layer of its own.
        if module == "lib" || module == "main" {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a readable source file");
        let file = format!("src/{}", relative.display());
        let entry = imports.entry(module.clone()).or_default();
        for named in crate_modules_named(&production_code(&text)) {
            if named != module {
                entry.push(Import {
                    file: file.clone(),
                    module: named,
                });
            }
        }
    }
    imports
}

fn rust_files(directory: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(directory).expect("a readable directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// The file without its comment lines and its unit-test modules (a
/// `#[cfg(test)]`-like attribute over a `mod … {` at the start of a line,
/// up to the `}` that closes it at the start of a line, as rustfmt writes
/// it).
fn production_code(text: &str) -> String {
    let mut kept = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(")
            && trimmed.contains("test")
            && lines
                .peek()
                .is_some_and(|next| next.starts_with("mod ") && next.ends_with('{'))
        {
            for skipped in lines.by_ref() {
                if skipped == "}" {
                    break;
                }
            }
            continue;
        }
        if trimmed.starts_with("//") {
            continue;
        }
        kept.push_str(line);
        kept.push('\n');
    }
    kept
}

/// The first segment of every `crate::` path in `code`: `crate::store::X`
/// names `store`, and `crate::{a, b::c}` names `a` and `b`.
fn crate_modules_named(code: &str) -> Vec<String> {
    let mut named = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let preceded_by_name = rest[..at]
            .chars()
            .next_back()
            .is_some_and(|before| before.is_alphanumeric() || before == '_' || before == '$');
        rest = &rest[at + "crate::".len()..];
        if preceded_by_name {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut item_start = true;
            for (index, character) in group.char_indices() {
                match character {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        rest = &group[index + 1..];
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    character if item_start && !character.is_whitespace() => {
                        item_start = false;
                        named.push(leading_name(&group[index..]));
                    }
                    _ => {}
                }
            }
        } else {
            named.push(leading_name(rest));
        }
    }
    named.retain(|name| !name.is_empty());
    named
}

fn leading_name(text: &str) -> String {
    text.chars()
        .take_while(|character| character.is_alphanumeric() || *character == '_')
        .collect()
}
