//! Which paths are source-of-truth docs, and which signals flagged them.
//!
//! Pure string logic on the repo-relative, `/`-separated paths git reports, so the rules
//! (doc roots, excluded operational lanes, signal merging, precedent) are tested without
//! a repository.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Glossary docs that are single files.
pub const GLOSSARY_FILES: [&str; 2] = [".red/CONTEXT.md", ".red/CONTEXT-MAP.md"];
/// Glossary docs below this dir, at any depth.
pub const GLOSSARY_DIR: &str = ".red/contexts/";
/// ADR docs below this dir, at any depth.
pub const ADR_DIR: &str = ".red/adr/";

/// Operational surfaces: never a doc, whatever they contain. They cannot overlap the doc
/// roots today; the explicit check keeps it that way if a root is ever added.
pub const EXCLUDED_LANES: [&str; 5] = [
    ".red/tmp/",
    ".red/wiki/",
    ".red/memory/",
    ".red/brain/",
    ".red/state/",
];

/// The pathspecs git is asked about. Narrow on purpose: `.red/tmp/` can hold worker
/// worktrees with hundreds of thousands of ignored build files, and listing them with
/// `--ignored --untracked-files=all` would cost seconds at every boot.
pub const DOC_PATHSPECS: [&str; 4] = [GLOSSARY_FILES[0], GLOSSARY_FILES[1], GLOSSARY_DIR, ADR_DIR];

/// The two doc classes; precedent (a tracked doc on the base) is judged per class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DocClass {
    Glossary,
    Adr,
}

impl DocClass {
    pub fn as_str(self) -> &'static str {
        match self {
            DocClass::Glossary => "glossary",
            DocClass::Adr => "ADR",
        }
    }
}

impl fmt::Display for DocClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The class of a repo-relative path, or `None` when it is not a source-of-truth doc.
/// Directory entries (trailing `/`), absolute paths and paths with empty, `.` or `..`
/// components are never docs: only a normalized file path can be copied safely.
pub fn classify(path: &str) -> Option<DocClass> {
    if !is_normalized(path) || is_excluded(path) {
        return None;
    }
    if GLOSSARY_FILES.contains(&path) {
        return Some(DocClass::Glossary);
    }
    if path.strip_prefix(GLOSSARY_DIR).is_some() {
        return Some(DocClass::Glossary);
    }
    if path.strip_prefix(ADR_DIR).is_some() {
        return Some(DocClass::Adr);
    }
    None
}

/// Whether `path` lies in an operational lane the sweep must never touch.
pub fn is_excluded(path: &str) -> bool {
    EXCLUDED_LANES
        .iter()
        .any(|lane| path.starts_with(lane) || path == lane.trim_end_matches('/'))
}

fn is_normalized(path: &str) -> bool {
    !path.is_empty()
        && !path.contains('\0')
        && path
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

/// Why a path was looked at. One path can carry several (e.g. changed in a commit ahead
/// and edited again in the work tree).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Signal {
    /// Tracked and changed in the work tree or index.
    Modified,
    /// New in the index.
    Added,
    /// Tracked and gone from the work tree.
    Deleted,
    /// A rename in the index (the new path; the old one arrives as `Deleted`).
    Renamed,
    Untracked,
    /// Untracked and matched by an ignore rule, including a repo that ignores `.red/`.
    Ignored,
    /// Changed by a commit on HEAD that `origin/<base>` does not have.
    Ahead,
}

impl Signal {
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::Modified => "modified",
            Signal::Added => "added",
            Signal::Deleted => "deleted",
            Signal::Renamed => "renamed",
            Signal::Untracked => "untracked",
            Signal::Ignored => "ignored",
            Signal::Ahead => "ahead",
        }
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A doc path some signal flagged; whether it is really stranded is judged later against
/// the base.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub path: String,
    pub class: DocClass,
    pub signals: BTreeSet<Signal>,
}

impl Candidate {
    pub fn is_ignored(&self) -> bool {
        self.signals.contains(&Signal::Ignored)
    }

    /// The signals as one word for reports, e.g. `modified+ahead`.
    pub fn signal_label(&self) -> String {
        let words: Vec<&str> = self.signals.iter().map(|s| s.as_str()).collect();
        words.join("+")
    }
}

/// Keeps the doc paths among everything the signals reported, one candidate per path with
/// all its signals, sorted by path so reports and commits are deterministic.
pub fn collect<I>(found: I) -> Vec<Candidate>
where
    I: IntoIterator<Item = (String, Signal)>,
{
    let mut by_path: BTreeMap<String, Candidate> = BTreeMap::new();
    for (path, signal) in found {
        let Some(class) = classify(&path) else {
            continue;
        };
        by_path
            .entry(path.clone())
            .or_insert_with(|| Candidate {
                path,
                class,
                signals: BTreeSet::new(),
            })
            .signals
            .insert(signal);
    }
    by_path.into_values().collect()
}

/// Which classes have at least one tracked file on the base. An ignored doc of a class
/// without precedent is a question for a person: maybe the repo never wanted such docs
/// published.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Precedent {
    pub glossary: bool,
    pub adr: bool,
}

impl Precedent {
    /// From the paths tracked on the base (any paths; non-docs are ignored).
    pub fn from_tracked<'a, I>(tracked: I) -> Self
    where
        I: IntoIterator<Item = &'a str>,
    {
        let mut p = Precedent::default();
        for path in tracked {
            match classify(path) {
                Some(DocClass::Glossary) => p.glossary = true,
                Some(DocClass::Adr) => p.adr = true,
                None => {}
            }
        }
        p
    }

    pub fn has(self, class: DocClass) -> bool {
        match class {
            DocClass::Glossary => self.glossary,
            DocClass::Adr => self.adr,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doc_roots_are_classified() {
        for (p, c) in [
            (".red/CONTEXT.md", DocClass::Glossary),
            (".red/CONTEXT-MAP.md", DocClass::Glossary),
            (".red/contexts/billing.md", DocClass::Glossary),
            (".red/contexts/billing/CONTEXT.md", DocClass::Glossary),
            (".red/adr/0001-use-rust.md", DocClass::Adr),
            (".red/adr/archive/0000.md", DocClass::Adr),
            (".red/adr/with space.md", DocClass::Adr),
        ] {
            assert_eq!(classify(p), Some(c), "{p}");
        }
    }

    #[test]
    fn everything_else_is_not_a_doc() {
        for p in [
            "",
            ".red/context.md",
            ".red/CONTEXT.md.bak",
            ".red/CONTEXT-MAP.md/x",
            ".red/adr",
            ".red/adr/",
            ".red/adr/sub/",
            ".red/adrs/1.md",
            ".red/contexts",
            "red/adr/1.md",
            "docs/.red/adr/1.md",
            "/abs/.red/adr/1.md",
            ".red/adr//1.md",
            ".red/adr/./1.md",
            ".red/adr/../tmp/x.md",
            ".red/afk-supervisor.toml",
            ".red/researches/x.md",
        ] {
            assert_eq!(classify(p), None, "{p:?}");
        }
    }

    #[test]
    fn excluded_lanes_are_never_docs() {
        for p in [
            ".red/tmp/CONTEXT.md",
            ".red/tmp/docs-sweep/.red/adr/1.md",
            ".red/tmp/workers/w1/3-a1/worktree/.red/CONTEXT.md",
            ".red/wiki/adr/1.md",
            ".red/memory/CONTEXT.md",
            ".red/brain/contexts/x.md",
            ".red/state/adr/1.md",
        ] {
            assert!(is_excluded(p), "{p}");
            assert_eq!(classify(p), None, "{p}");
        }
        assert!(is_excluded(".red/tmp"));
        assert!(!is_excluded(".red/tmpfoo/x"));
        assert!(!is_excluded(".red/adr/tmp/x.md"));
        assert_eq!(classify(".red/adr/tmp/x.md"), Some(DocClass::Adr));
    }

    #[test]
    fn collect_merges_signals_and_drops_non_docs() {
        let found = vec![
            (".red/adr/2.md".to_string(), Signal::Ahead),
            (".red/tmp/x.md".to_string(), Signal::Ignored),
            (".red/adr/2.md".to_string(), Signal::Modified),
            (".red/CONTEXT.md".to_string(), Signal::Ignored),
            ("src/main.rs".to_string(), Signal::Modified),
            (".red/adr/2.md".to_string(), Signal::Ahead),
        ];
        let c = collect(found);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].path, ".red/CONTEXT.md");
        assert_eq!(c[0].class, DocClass::Glossary);
        assert!(c[0].is_ignored());
        assert_eq!(c[1].path, ".red/adr/2.md");
        assert_eq!(c[1].signal_label(), "modified+ahead");
        assert!(!c[1].is_ignored());
    }

    #[test]
    fn precedent_per_class() {
        let p = Precedent::from_tracked(["README.md", ".red/adr/1.md", ".red/tmp/CONTEXT.md"]);
        assert!(p.has(DocClass::Adr));
        assert!(!p.has(DocClass::Glossary));
        let p = Precedent::from_tracked([".red/contexts/a/b.md"]);
        assert!(p.has(DocClass::Glossary));
        assert!(!p.has(DocClass::Adr));
        assert_eq!(Precedent::from_tracked([]), Precedent::default());
    }
}
