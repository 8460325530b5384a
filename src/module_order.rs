//! The module map at the top of `lib.rs` checked against the code: every `crate::`,
//! `super::` and `self::` path in `src/` is resolved to the module it names, so an import
//! that goes up the map, or a circle among the supervisor's parts, fails a test that names
//! the file and the path instead of waiting for a reviewer to notice.
//!
//! The reader is a small tokenizer, not a parser: comments and literals are blanked, inline
//! `mod name { … }` blocks are followed (a `super::` inside `mod tests` is the file's own
//! module), and `use` groups (`crate::{a::b, c}`) are expanded. A path that starts with a
//! name (`std::…`, a `use`d alias) is not the crate's and is skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The one upward edge the map documents: `tracker` names `claim::marks` (its head says why).
const ALLOWED_UP: &[(&str, &[&str])] = &[("tracker", &["claim", "marks"])];

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    Path,
    Open,
    Close,
    Comma,
    Other,
}

/// `src` with comments removed and every string, byte string, raw string and char literal
/// replaced by a blank, so nothing a message or a doc says is read as a path.
fn blank_comments_and_literals(src: &str) -> String {
    let b: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if (c == 'r' || (c == 'b' && next == Some('r')))
            && !prev_is_ident(&b, i)
            && raw_string_start(&b, if c == 'b' { i + 1 } else { i }).is_some()
        {
            let at = if c == 'b' { i + 1 } else { i };
            let (hashes, body) = raw_string_start(&b, at).unwrap_or((0, at));
            i = body;
            loop {
                if i >= b.len() {
                    break;
                }
                if b[i] == '"' && (1..=hashes).all(|k| b.get(i + k) == Some(&'#')) {
                    i += 1 + hashes;
                    break;
                }
                i += 1;
            }
            out.push_str("\"\"");
        } else if c == '"' || (c == 'b' && next == Some('"') && !prev_is_ident(&b, i)) {
            i += if c == 'b' { 2 } else { 1 };
            while i < b.len() && b[i] != '"' {
                i += if b[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a): only the literal goes.
            if next == Some('\\') {
                i += 3;
                while i < b.len() && b[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
            } else if b.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push(' ');
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn prev_is_ident(b: &[char], i: usize) -> bool {
    i > 0 && (b[i - 1].is_alphanumeric() || b[i - 1] == '_')
}

/// At `b[at] == 'r'`: `r"`, `r#"`, `r##"`…: the number of hashes and where the body starts.
fn raw_string_start(b: &[char], at: usize) -> Option<(usize, usize)> {
    if b.get(at) != Some(&'r') {
        return None;
    }
    let mut j = at + 1;
    while b.get(j) == Some(&'#') {
        j += 1;
    }
    (b.get(j) == Some(&'"')).then_some((j - at - 1, j + 1))
}

fn tokens(src: &str) -> Vec<Tok> {
    let b: Vec<char> = blank_comments_and_literals(src).chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < b.len() && (b[i].is_alphanumeric() || b[i] == '_') {
                i += 1;
            }
            out.push(Tok::Ident(b[start..i].iter().collect()));
            continue;
        }
        out.push(match c {
            ':' if b.get(i + 1) == Some(&':') => {
                i += 1;
                Tok::Path
            }
            '{' => Tok::Open,
            '}' => Tok::Close,
            ',' => Tok::Comma,
            c if c.is_whitespace() => {
                i += 1;
                continue;
            }
            _ => Tok::Other,
        });
        i += 1;
    }
    out
}

/// The paths of one `use` group, from just after its `{`; `end` is just past its `}`.
fn group(t: &[Tok], mut i: usize) -> (Vec<Vec<String>>, usize) {
    let mut all = Vec::new();
    while i < t.len() {
        match &t[i] {
            Tok::Close => return (all, i + 1),
            Tok::Comma => i += 1,
            Tok::Ident(_) | Tok::Open => {
                let (paths, end) = path_at(t, i);
                all.extend(paths);
                i = end.max(i + 1);
            }
            _ => i += 1,
        }
    }
    (all, i)
}

/// The path (or the paths of a group) starting at `t[i]`, and where it ends.
fn path_at(t: &[Tok], mut i: usize) -> (Vec<Vec<String>>, usize) {
    let mut segs = Vec::new();
    loop {
        match t.get(i) {
            Some(Tok::Ident(s)) => {
                segs.push(s.clone());
                i += 1;
            }
            Some(Tok::Open) => {
                let (inner, end) = group(t, i + 1);
                let paths = inner
                    .into_iter()
                    .map(|p| {
                        // `self` in a group names the prefix itself.
                        let rest = p.into_iter().skip_while(|s| s == "self");
                        segs.iter().cloned().chain(rest).collect()
                    })
                    .collect();
                return (paths, end);
            }
            _ => return (vec![segs], i),
        }
        if t.get(i) == Some(&Tok::Path) {
            i += 1;
        } else {
            return (vec![segs], i);
        }
    }
}

/// Every module-relative path in `src` (a file whose module is `module`), resolved to the
/// absolute path it names from the crate's root; paths that do not start with `crate`,
/// `super` or `self` are not the crate's and are left out.
fn crate_paths(src: &str, module: &[String]) -> Vec<Vec<String>> {
    let t = tokens(src);
    let mut out = Vec::new();
    // Inline modules open at this file's brace depth: (name, depth inside it).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < t.len() {
        match &t[i] {
            Tok::Open => {
                depth += 1;
                if i >= 2
                    && t[i - 2] == Tok::Ident("mod".into())
                    && let Tok::Ident(name) = &t[i - 1]
                {
                    inline.push((name.clone(), depth));
                }
                i += 1;
            }
            Tok::Close => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
            }
            Tok::Ident(first)
                if matches!(first.as_str(), "crate" | "super" | "self")
                    && t.get(i + 1) == Some(&Tok::Path)
                    && (i == 0 || t[i - 1] != Tok::Path) =>
            {
                let here: Vec<String> = module
                    .iter()
                    .cloned()
                    .chain(inline.iter().map(|(n, _)| n.clone()))
                    .collect();
                let (paths, end) = path_at(&t, i);
                for p in paths {
                    if let Some(abs) = resolve(&p, &here) {
                        out.push(abs);
                    }
                }
                i = end.max(i + 1);
            }
            _ => i += 1,
        }
    }
    out
}

fn resolve(path: &[String], here: &[String]) -> Option<Vec<String>> {
    let mut base: Vec<String> = match path.first()?.as_str() {
        "crate" => Vec::new(),
        "self" | "super" => here.to_vec(),
        _ => return None,
    };
    let mut rest = &path[1..];
    if path[0] == "super" {
        base.pop()?;
    }
    while rest.first().is_some_and(|s| s == "super") {
        base.pop()?;
        rest = &rest[1..];
    }
    base.extend(rest.iter().filter(|s| *s != "self").cloned());
    Some(base)
}

/// The module a file under `src/` is: `src/a/b.rs` and `src/a/b/mod.rs` are `a::b`.
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs");
        if stem != "mod" && stem != "lib" {
            parts.push(stem.to_string());
        }
    }
    parts
}

/// Every `.rs` file of the library (not `main.rs`, not this checker), with its module.
fn library_files() -> Vec<(PathBuf, Vec<String>)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    files.sort();
    files
        .into_iter()
        .filter_map(|f| {
            let rel = f.strip_prefix(&src).unwrap().to_path_buf();
            let m = module_of(&rel);
            (rel != Path::new("main.rs") && m.first().is_none_or(|s| s != "module_order"))
                .then_some((rel, m))
        })
        .collect()
}

fn read_src(rel: &Path) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(rel)).unwrap()
}

/// The top-level modules in the order of lib.rs's module map: each at its first mention in
/// a bullet that is not inside parentheses (a bullet's asides name modules placed
/// elsewhere), among the modules lib.rs declares.
fn map_order(lib: &str, declared: &BTreeSet<String>) -> Vec<String> {
    let mut text = String::new();
    let mut in_list = false;
    for doc in map_lines(lib) {
        if doc.starts_with("- ") {
            in_list = true;
        }
        if in_list {
            text.push_str(doc);
            text.push(' ');
        }
    }
    named_in_order(&text, declared)
}

/// The lines of the crate's head comment, without their `//!`.
fn map_lines(lib: &str) -> impl Iterator<Item = &str> {
    lib.lines()
        .map_while(|line| line.strip_prefix("//!"))
        .map(str::trim_start)
}

/// The supervisor's parts in the order the map's `supervisor` entry lists them.
fn supervisor_order(lib: &str, parts: &BTreeSet<String>) -> Vec<String> {
    let mut text = String::new();
    let mut in_entry = false;
    for doc in map_lines(lib) {
        if doc.starts_with("- ") {
            in_entry = doc.starts_with("- `supervisor`");
        }
        if in_entry {
            text.push_str(doc);
            text.push(' ');
        }
    }
    named_in_order(&text, parts)
}

/// The names of `names` that `text` puts in backticks outside parentheses, in the order
/// of their first mention.
fn named_in_order(text: &str, names: &BTreeSet<String>) -> Vec<String> {
    let mut order: Vec<String> = Vec::new();
    let mut parens = 0i32;
    let mut in_tick = false;
    let mut name = String::new();
    for c in text.chars() {
        match c {
            '`' if in_tick => {
                in_tick = false;
                if parens == 0 && names.contains(&name) && !order.contains(&name) {
                    order.push(name.clone());
                }
            }
            '`' => {
                in_tick = true;
                name.clear();
            }
            _ if in_tick => name.push(c),
            '(' => parens += 1,
            ')' => parens -= 1,
            _ => {}
        }
    }
    order
}

fn declared_modules(src: &str, visibility: &str) -> BTreeSet<String> {
    src.lines()
        .filter_map(|l| l.trim().strip_prefix(visibility)?.strip_suffix(';'))
        .map(|m| m.trim().to_string())
        .collect()
}

/// One cycle through each circle of `edges`, as `a -> b -> … -> a`: a depth-first walk
/// that keeps its path, where an edge back into the path closes a cycle.
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    fn visit(
        n: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
        found: &mut Vec<String>,
    ) {
        if let Some(at) = path.iter().position(|p| p == n) {
            let mut c = path[at..].to_vec();
            c.push(n.to_string());
            found.push(c.join(" -> "));
            return;
        }
        if !seen.insert(n.to_string()) {
            return;
        }
        path.push(n.to_string());
        for m in edges.get(n).into_iter().flatten() {
            visit(m, edges, path, seen, found);
        }
        path.pop();
    }
    let mut found = Vec::new();
    let mut seen = BTreeSet::new();
    for start in edges.keys() {
        visit(start, edges, &mut Vec::new(), &mut seen, &mut found);
    }
    found
}

/// Fails naming `what` unless every one of `declared` has a place in `order`; then each
/// one's place.
fn placed<'a>(
    declared: &BTreeSet<String>,
    order: &'a [String],
    what: &str,
) -> impl Fn(&str) -> Option<usize> + 'a {
    let unplaced: Vec<&String> = declared.iter().filter(|m| !order.contains(m)).collect();
    assert!(
        unplaced.is_empty(),
        "{what} but not in lib.rs's module map: {unplaced:?}"
    );
    move |m: &str| order.iter().position(|o| o == m)
}

#[test]
fn paths_are_read_as_the_compiler_resolves_them() {
    let m = |s: &str| s.split("::").map(String::from).collect::<Vec<_>>();
    let src = r##"
        use crate::{a::b, c::{self, d}, e};
        use super::f::G; // crate::commented::out
        /* crate::blocked::out */
        fn x() { let _ = "crate::quoted::out"; let _ = r#"crate::raw::out"#; let _: &'static str = ""; crate::h::i(); std::j::k(); let _ = 'c'; }
        mod tests { use super::*; use super::super::l::M; }
    "##;
    let found = crate_paths(src, &m("top::file"));
    assert_eq!(
        found,
        vec![
            m("a::b"),
            m("c"),
            m("c::d"),
            m("e"),
            m("top::f::G"),
            m("h::i"),
            m("top::file"),
            m("top::l::M"),
        ],
        "{found:?}"
    );
}

#[test]
fn a_cycle_is_found_and_printed() {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (a, b) in [
        ("run", "fleet"),
        ("fleet", "children"),
        ("children", "fleet"),
        ("x", "run"),
    ] {
        edges.entry(a.into()).or_default().insert(b.into());
    }
    assert_eq!(
        cycles(&edges),
        vec!["children -> fleet -> children".to_string()]
    );
    edges.get_mut("children").unwrap().clear();
    assert!(cycles(&edges).is_empty());
}

/// Each top-level module names only modules below it in the map (or the one documented
/// exception), and every module lib.rs declares has its place in the map.
#[test]
fn top_level_modules_import_only_modules_below_them() {
    let lib = read_src(Path::new("lib.rs"));
    let declared = declared_modules(&lib, "pub mod ");
    let order = map_order(&lib, &declared);
    let rank = placed(&declared, &order, "modules declared in lib.rs");
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (rel, module) in library_files() {
        let Some(top) = module.first() else { continue };
        let Some(own) = rank(top) else { continue };
        for path in crate_paths(&read_src(&rel), &module) {
            let Some(target) = path.first() else { continue };
            let Some(theirs) = rank(target) else { continue };
            if target == top {
                continue;
            }
            checked += 1;
            let allowed = ALLOWED_UP.iter().any(|(from, to)| {
                *from == top.as_str() && path.iter().take(to.len()).eq(to.iter().copied())
            });
            if theirs < own && !allowed {
                wrong.push(format!(
                    "src/{}: `{top}` names `crate::{}`, but `{target}` is above it in the module map",
                    rel.display(),
                    path.join("::")
                ));
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    // A reader that found nothing would pass anything.
    assert!(checked > 500, "only {checked} cross-module paths read");
    assert!(
        wrong.is_empty(),
        "imports up the module map:\n{}",
        wrong.join("\n")
    );
}

/// Which of the supervisor's parts (its direct children) each part names, `crate::` or
/// `super::`, itself left out. Test code is left out: the fleet's tests feed signals through
/// the OS side's one mapping (`os::signals::heard`) rather than a copy of it.
fn supervisor_edges(children: &BTreeSet<String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (rel, module) in library_files() {
        let [sup, child, ..] = module.as_slice() else {
            continue;
        };
        if sup != "supervisor" {
            continue;
        }
        if module.iter().any(|m| m == "tests") {
            continue;
        }
        for path in crate_paths(&without_test_modules(&read_src(&rel)), &module) {
            if let [s, other, ..] = path.as_slice()
                && s == "supervisor"
                && other != child
                && children.contains(other)
            {
                edges
                    .entry(child.clone())
                    .or_default()
                    .insert(other.clone());
            }
        }
    }
    edges
}

/// `src` without its `#[cfg(test)] mod … { … }` blocks (comments and literals blanked
/// first, so a brace in a string does not end a block early).
fn without_test_modules(src: &str) -> String {
    let blank = blank_comments_and_literals(src);
    let mut out = String::with_capacity(blank.len());
    let mut rest = blank.as_str();
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let Some(open) = after.find('{') else {
            rest = "";
            break;
        };
        // Only a module is skipped; a test-only item (a `use`, a fn) is too small to matter.
        if !after[..open].contains("mod ") {
            out.push_str("#[cfg(test)]");
            rest = &after["#[cfg(test)]".len()..];
            continue;
        }
        let mut depth = 0usize;
        let mut end = after.len();
        for (i, c) in after[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// The supervisor's core decides without an OS: no file of `supervisor::core` outside its
/// tests names `supervisor::os`, tokio, nix or `std::fs`, so every decision is tested as a
/// pure function and the driver stays the one place that acts.
#[test]
fn the_core_names_no_os() {
    let mut wrong = Vec::new();
    let mut read = 0;
    for (rel, module) in library_files() {
        if !module.starts_with(&["supervisor".to_string(), "core".to_string()])
            || module.iter().any(|m| m == "tests")
        {
            continue;
        }
        read += 1;
        let code = without_test_modules(&read_src(&rel));
        for path in crate_paths(&code, &module) {
            if path.starts_with(&["supervisor".to_string(), "os".to_string()]) {
                wrong.push(format!(
                    "{}: names crate::{}",
                    rel.display(),
                    path.join("::")
                ));
            }
        }
        for t in tokens(&code).windows(3) {
            if let [Tok::Ident(a), Tok::Path, Tok::Ident(b)] = t
                && (matches!(a.as_str(), "tokio" | "nix") || (a == "std" && b == "fs"))
            {
                wrong.push(format!("{}: names {a}::{b}", rel.display()));
            }
        }
    }
    assert!(read > 10, "only {read} files of the core read");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn test_modules_are_left_out_and_other_code_kept() {
    let src = "use crate::a::b;\n#[cfg(test)]\nmod tests { fn x() { let _ = \"}\"; crate::c::d(); } }\nfn y() { crate::e::f(); }";
    let kept = without_test_modules(src);
    let paths = crate_paths(&kept, &[]);
    let names: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(names, ["a::b", "e::f"]);
}

/// One name per file across the crate: a maintainer who searches for `spawn.rs` finds one
/// file, not two that do different things. `mod.rs` and `tests.rs` are Rust's own names
/// for a folder's module and its tests.
#[test]
fn no_two_files_share_a_name() {
    let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (rel, _) in library_files() {
        let name = rel
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name == "mod.rs" || name == "tests.rs" {
            continue;
        }
        seen.entry(name)
            .or_default()
            .push(rel.display().to_string());
    }
    assert!(seen.len() > 100, "only {} files read", seen.len());
    let twice: Vec<String> = seen
        .iter()
        .filter(|(_, files)| files.len() > 1)
        .map(|(name, files)| format!("{name}: {}", files.join(", ")))
        .collect();
    assert!(
        twice.is_empty(),
        "files sharing a name:\n{}",
        twice.join("\n")
    );
}

/// The supervisor's parts (its direct children) import each other in no circle.
#[test]
fn the_supervisor_parts_form_no_cycle() {
    let children = declared_modules(&read_src(Path::new("supervisor/mod.rs")), "pub mod ");
    let edges = supervisor_edges(&children);
    assert!(
        edges.len() >= 5,
        "only {} parts import another",
        edges.len()
    );
    let found = cycles(&edges);
    assert!(
        found.is_empty(),
        "the supervisor's parts import each other in a circle:\n{}",
        found.join("\n")
    );
}

/// What the map says of the supervisor's parts holds: each is listed, and each imports only
/// parts listed after it, so the list is the order to read them in.
#[test]
fn the_supervisor_parts_import_only_parts_after_them_in_the_map() {
    let children = declared_modules(&read_src(Path::new("supervisor/mod.rs")), "pub mod ");
    let order = supervisor_order(&read_src(Path::new("lib.rs")), &children);
    let rank = placed(&children, &order, "parts of the supervisor");
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (from, tos) in supervisor_edges(&children) {
        for to in tos {
            checked += 1;
            if rank(&to) < rank(&from) {
                wrong.push(format!(
                    "supervisor::{from} names supervisor::{to}, listed before it in lib.rs's map"
                ));
            }
        }
    }
    assert!(checked > 12, "only {checked} imports between parts read");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
