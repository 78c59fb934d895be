//! Imports flow one way between the crate's top-level modules (`src/<name>.rs` and
//! `src/<name>/`): no two of them name each other in `crate::` paths, `use crate::x` or inline
//! `crate::x::…` alike. Read from the source files, so a new circle fails the normal test run,
//! naming both modules and a file on each side. (`super::` stays inside a module; comments and
//! string literals are not imports; `lib.rs`, `main.rs` and `bin/` are not modules of the crate.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Circles known and left for now, each with why: `(module, module, reason)`. An entry that
/// is no longer a circle fails the test too, so the list cannot hide a new one.
const KNOWN_CIRCLES: &[(&str, &str, &str)] = &[];

#[test]
fn no_two_top_level_modules_import_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut sources = Vec::new();
    read_sources(&src, &src, &mut sources);
    assert!(sources.len() > 50, "read only {} files under {}", sources.len(), src.display());
    let problems = verdict(&circles(&sources), KNOWN_CIRCLES);
    assert!(problems.is_empty(), "imports must flow one way:\n{}", problems.join("\n"));
}

#[test]
fn two_modules_naming_each_other_are_a_circle_and_one_way_is_not() {
    let sources = [
        ("a/mod.rs", "use crate::b::Thing;"),
        ("a/inner.rs", "use super::x;"),
        ("b.rs", "fn f() { crate::a::g() }"),
        ("b/tests.rs", "use crate::a;"),
        ("c.rs", "use crate::a; use crate::b::{self, Thing};"),
    ]
    .map(|(p, t)| (p.to_string(), t.to_string()));
    let found = circles(&sources);
    assert_eq!(
        found,
        vec![Circle {
            modules: ("a".into(), "b".into()),
            files: ("a/mod.rs".into(), "b.rs".into())
        }]
    );
    let problems = verdict(&found, &[]);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("a ↔ b") && problems[0].contains("a/mod.rs"), "{problems:?}");
}

#[test]
fn a_known_circle_passes_and_a_known_one_that_is_gone_fails() {
    let found =
        vec![Circle { modules: ("a".into(), "b".into()), files: ("a.rs".into(), "b.rs".into()) }];
    assert!(verdict(&found, &[("b", "a", "being moved")]).is_empty());
    let problems = verdict(&[], &[("a", "b", "being moved")]);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("no longer a circle"), "{problems:?}");
}

#[test]
fn crate_paths_in_comments_and_literals_are_not_imports() {
    let text = r####"
        //! See [`crate::one`].
        /// And [`crate::two::Thing`].
        /* crate::three /* nested crate::four */ crate::five */
        const A: &str = "crate::six \" crate::seven";
        const B: &str = r#"crate::eight " crate::nine"#;
        const C: &[u8] = b"crate::ten";
        const Q: char = '"'; const E: char = '\''; const U: char = '\u{22}';
        fn f<'a>(x: &'a str) -> crate::kept::Type { crate::also_kept::g(x) } // crate::eleven
        pub(crate) fn h() { not_crate::twelve(); $crate::from_macro!(); }
        use super::thirteen;
    "####;
    assert_eq!(named_modules(&code_only(text)), set(&["also_kept", "from_macro", "kept"]));
}

#[test]
fn grouped_crate_paths_name_each_module_in_the_group() {
    let code = "use crate::{a::{B, c::D}, e, self as f, g::h as i};\nuse crate :: j;";
    assert_eq!(named_modules(code), set(&["a", "e", "g", "j"]));
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// Two top-level modules that name each other, with a file of each that names the other.
#[derive(Debug, PartialEq, Eq)]
struct Circle {
    modules: (String, String),
    files: (String, String),
}

/// Every circle among `sources` (path relative to `src/`, text), each pair once, in order.
fn circles(sources: &[(String, String)]) -> Vec<Circle> {
    // (from, to) → the first file of `from` naming `to`.
    let mut names: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut sorted: Vec<_> = sources.iter().collect();
    sorted.sort();
    for (path, text) in sorted {
        let Some(from) = top_level_module(path) else { continue };
        for to in named_modules(&code_only(text)) {
            if to != from {
                names.entry((from.to_string(), to)).or_insert_with(|| path.clone());
            }
        }
    }
    let mut found = Vec::new();
    for ((from, to), file) in &names {
        if from < to {
            if let Some(back) = names.get(&(to.clone(), from.clone())) {
                found.push(Circle {
                    modules: (from.clone(), to.clone()),
                    files: (file.clone(), back.clone()),
                });
            }
        }
    }
    found
}

/// What is wrong: circles not in `known`, and entries of `known` that are circles no longer.
fn verdict(found: &[Circle], known: &[(&str, &str, &str)]) -> Vec<String> {
    let is_known =
        |a: &str, b: &str| known.iter().any(|&(x, y, _)| (x, y) == (a, b) || (y, x) == (a, b));
    let mut problems = Vec::new();
    for c in found {
        let (a, b) = (&c.modules.0, &c.modules.1);
        if !is_known(a, b) {
            problems.push(format!(
                "{a} ↔ {b}: {a} names {b} in src/{}, {b} names {a} in src/{}; move what they \
                 share to the lower one or to a leaf module",
                c.files.0, c.files.1
            ));
        }
    }
    for &(x, y, _) in known {
        let still = found.iter().any(|c| {
            let (a, b) = (c.modules.0.as_str(), c.modules.1.as_str());
            (a, b) == (x, y) || (b, a) == (x, y)
        });
        if !still {
            problems.push(format!("{x} ↔ {y} is no longer a circle: take it off KNOWN_CIRCLES"));
        }
    }
    problems
}

/// The top-level module a file under `src/` belongs to; `None` for the crate root and binaries.
fn top_level_module(path: &str) -> Option<&str> {
    let first = path.split('/').next()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(name, "lib" | "main" | "bin")).then_some(name)
}

/// Every `.rs` file under `dir`, as (path relative to `root` with `/`, text).
fn read_sources(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            read_sources(root, &path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let rel = path.strip_prefix(root).expect("under the root");
            let rel = rel.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>();
            out.push((rel.join("/"), text));
        }
    }
}

/// The modules named right after `crate::` in `code`: `crate::x`, and each item's first name
/// in `crate::{x::…, y}` (`self` left out).
fn named_modules(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate") {
        let before = rest[..at].chars().next_back();
        let after = rest[at + "crate".len()..].trim_start();
        rest = &rest[at + "crate".len()..];
        if before.is_some_and(is_ident_char) {
            continue;
        }
        let Some(after) = after.strip_prefix("::") else { continue };
        let after = after.trim_start();
        match after.strip_prefix('{') {
            Some(group) => {
                for item in top_level_items(group) {
                    let name = leading_ident(item.trim_start());
                    if !name.is_empty() && name != "self" {
                        found.insert(name.to_string());
                    }
                }
            }
            None => {
                let name = leading_ident(after);
                if !name.is_empty() {
                    found.insert(name.to_string());
                }
            }
        }
    }
    found
}

/// The comma-separated items of a `{…}` group, `text` starting after its `{`: commas inside
/// nested groups belong to their item.
fn top_level_items(text: &str) -> Vec<&str> {
    let (mut items, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&text[start..i]);
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&text[start..]);
    items
}

fn leading_ident(text: &str) -> &str {
    let end = text.find(|c: char| !is_ident_char(c)).unwrap_or(text.len());
    &text[..end]
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// `text` with comments, string literals and char literals each replaced by a space, so only
/// code is left to read paths from. Lifetimes stay.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let at = |i: usize| chars.get(i).copied();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        i = match (c, at(i + 1)) {
            ('/', Some('/')) => (i..chars.len()).find(|&j| chars[j] == '\n').unwrap_or(chars.len()),
            ('/', Some('*')) => {
                // Block comments nest.
                let (mut j, mut depth) = (i, 0);
                while j < chars.len() {
                    match (chars[j], at(j + 1)) {
                        ('/', Some('*')) => {
                            depth += 1;
                            j += 2;
                        }
                        ('*', Some('/')) => {
                            depth -= 1;
                            j += 2;
                        }
                        _ => j += 1,
                    }
                    if depth == 0 {
                        break;
                    }
                }
                out.push(' ');
                j
            }
            ('"', _) => {
                let mut j = i + 1;
                while j < chars.len() && chars[j] != '"' {
                    j += if chars[j] == '\\' { 2 } else { 1 };
                }
                out.push(' ');
                j + 1
            }
            ('r', _) if raw_string_may_start(&chars, i) => {
                let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
                if at(i + 1 + hashes) == Some('"') {
                    let mut j = i + hashes + 2;
                    let closes = |j: usize| {
                        chars[j] == '"'
                            && chars
                                .get(j + 1..j + 1 + hashes)
                                .is_some_and(|h| h.iter().all(|&h| h == '#'))
                    };
                    while j < chars.len() && !closes(j) {
                        j += 1;
                    }
                    out.push(' ');
                    j + 1 + hashes
                } else {
                    out.push(c);
                    i + 1
                }
            }
            // A char literal: an escape, or one char between quotes. Otherwise a lifetime.
            ('\'', Some('\\')) => {
                let close = (i + 3..chars.len()).find(|&j| chars[j] == '\'');
                out.push(' ');
                close.map_or(chars.len(), |j| j + 1)
            }
            ('\'', _) if at(i + 2) == Some('\'') => {
                out.push(' ');
                i + 3
            }
            _ => {
                out.push(c);
                i + 1
            }
        };
    }
    out
}

/// Whether the `r` at `i` begins a raw string (`r"`, `r#"`, `br"`) rather than ends a name.
fn raw_string_may_start(chars: &[char], i: usize) -> bool {
    match i.checked_sub(1).map(|p| chars[p]) {
        None => true,
        Some('b') => i < 2 || !is_ident_char(chars[i - 2]),
        Some(p) => !is_ident_char(p),
    }
}
