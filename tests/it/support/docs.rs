//! The project's documents as the tests read them: the README, the guide pages under
//! `docs/guide/`, `benches/README.md` and `CHANGELOG.md`. Tests that hold a document to what
//! the code does (the tested blocks, the `jq` lines, the real agents' setup) find their text
//! here, so a page that moves is renamed in one place.

use std::path::{Path, PathBuf};

/// The guide page of the operators' documentation that `name` names (`"running.md"`).
pub fn guide(name: &str) -> PathBuf {
    Path::new("docs/guide").join(name)
}

/// `rel` (relative to the crate's root) as text; a missing document fails the test by name.
pub fn read(rel: &Path) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The files whose ```` ```console ```` blocks marked `<!-- tested -->` are run: the README,
/// then every guide page in file-name order.
pub fn tested_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/guide");
    let mut pages: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().ends_with(".md"))
        .map(|n| guide(&n.to_string_lossy()))
        .collect();
    pages.sort();
    let mut files = vec![PathBuf::from("README.md")];
    files.extend(pages);
    files
}

/// The documents whose relative links must resolve.
pub fn linked_files() -> Vec<PathBuf> {
    let mut files = tested_files();
    files.push(PathBuf::from("benches/README.md"));
    files.push(PathBuf::from("CHANGELOG.md"));
    files.push(PathBuf::from("docs/ARCHITECTURE.md"));
    files
}

/// The body of the fenced block right after `marker` in `rel`.
pub fn block_after(rel: &Path, marker: &str) -> String {
    let text = read(rel);
    let at = text
        .find(marker)
        .unwrap_or_else(|| panic!("{} has no {marker}", rel.display()));
    let rest = &text[at + marker.len()..];
    let open = rest.find("```").unwrap();
    let body = &rest[open..];
    let start = body.find('\n').unwrap() + 1;
    let end = body[start..].find("```").unwrap();
    body[start..start + end].to_string()
}

/// The line of `rel` that starts with `prefix`, its trailing `   #` comment removed.
pub fn line_starting(rel: &Path, prefix: &str) -> String {
    let text = read(rel);
    let line = text
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("{} has no line starting {prefix:?}", rel.display()));
    line.split("   #").next().unwrap().trim().to_string()
}
