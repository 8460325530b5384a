//! Finding the candidates (the three signals) and judging each against the base.

use std::collections::BTreeSet;
use std::path::Path;

use super::classify::{self, Candidate, DOC_PATHSPECS, Precedent, Signal};
use super::fsops::{self, Entry};
use super::judge::{self, Judged, Observed, Verdict, WorkState};
use super::probe;
use crate::git::{ChangeKind, Git, GitResult};
use crate::sweeps::{Decision, Disposition, SweepName};
use crate::text;

/// Why the sweep could not even look: the repo itself misbehaves (not a halt reason; the
/// suite reports it as a failure).
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    #[error(transparent)]
    Git(#[from] crate::git::GitError),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

/// The doc paths the three signals flag: work-tree changes and deletions, untracked and
/// ignored files (git walks into ignored dirs, so a repo ignoring all of `.red/` still
/// shows each doc), and paths changed by commits on HEAD that `base_ref` lacks. `fork` is
/// `merge-base HEAD base_ref`; without one (no base ref, unborn HEAD, unrelated histories)
/// nothing is "ahead".
///
/// Doc paths that are not UTF-8 come back apart, as bytes, sorted and once each: the sweep
/// cannot name them to git or the file system without decoding them into another name, so
/// it reports them (see [`not_utf8_decisions`]) and judges the rest.
pub fn candidates(
    git: &Git,
    base_ref: Option<&str>,
    fork: Option<&str>,
) -> GitResult<(Vec<Candidate>, Vec<Vec<u8>>)> {
    let mut found: Vec<(String, Signal)> = Vec::new();
    let mut odd: BTreeSet<Vec<u8>> = BTreeSet::new();
    for spec in DOC_PATHSPECS {
        let c = git.changed_paths(spec)?;
        odd.extend(c.not_utf8);
        found.extend(c.paths.into_iter().map(|c| (c.path, signal_of(c.kind))));
    }
    if let (Some(base_ref), Some(_)) = (base_ref, fork) {
        for spec in DOC_PATHSPECS {
            let c = git.paths_changed_ahead(base_ref, spec)?;
            odd.extend(c.not_utf8);
            found.extend(c.paths.into_iter().map(|c| (c.path, Signal::Ahead)));
        }
    }
    Ok((classify::collect(found), odd.into_iter().collect()))
}

/// One `skip` decision per doc path that is not UTF-8, shown with its bytes escaped.
pub fn not_utf8_decisions(paths: &[Vec<u8>]) -> Vec<Decision> {
    paths
        .iter()
        .map(|raw| Decision {
            sweep: SweepName::DocsSweep,
            subject: text::escape_bytes(raw),
            issue: None,
            state: None,
            verdict: Disposition::Skip,
            reason: "name is not UTF-8: the sweep cannot land it; land it by hand".into(),
        })
        .collect()
}

fn signal_of(kind: ChangeKind) -> Signal {
    match kind {
        ChangeKind::Modified => Signal::Modified,
        ChangeKind::Added => Signal::Added,
        ChangeKind::Deleted => Signal::Deleted,
        ChangeKind::Renamed => Signal::Renamed,
        ChangeKind::Untracked => Signal::Untracked,
        ChangeKind::Ignored => Signal::Ignored,
    }
}

/// The fork point of HEAD and `base_ref`, `None` when HEAD is unborn or they share no
/// history.
pub fn fork_point(git: &Git, base_ref: &str) -> GitResult<Option<String>> {
    if git.rev_parse("HEAD")?.is_none() {
        return Ok(None);
    }
    probe::merge_base(git, "HEAD", base_ref)
}

/// Every candidate judged against `base_ref`, plus which doc classes the base tracks.
pub fn judge_all(
    git: &Git,
    repo: &Path,
    base_ref: &str,
    fork: Option<&str>,
    candidates: Vec<Candidate>,
) -> Result<(Vec<Judged>, Precedent), ScanError> {
    let theirs = probe::doc_blobs(git, base_ref)?;
    let precedent = Precedent::from_tracked(theirs.keys().map(String::as_str));
    if candidates.is_empty() {
        return Ok((Vec::new(), precedent));
    }
    let forked = match fork {
        Some(f) => probe::doc_blobs(git, f)?,
        None => Default::default(),
    };

    let mut entries = Vec::with_capacity(candidates.len());
    for c in &candidates {
        let e = fsops::inspect(repo, &c.path).map_err(|source| ScanError::Io {
            path: c.path.clone(),
            source,
        })?;
        entries.push(e);
    }
    let regular: Vec<&str> = candidates
        .iter()
        .zip(&entries)
        .filter(|(_, e)| **e == Entry::Regular)
        .map(|(c, _)| c.path.as_str())
        .collect();
    let mut oids = probe::hash_objects(git, &regular)?.into_iter();

    let mut judged = Vec::with_capacity(candidates.len());
    for (candidate, entry) in candidates.into_iter().zip(entries) {
        let work = match entry {
            Entry::Absent => WorkState::Absent,
            Entry::Regular => match oids.next() {
                Some(oid) => WorkState::File(oid),
                None => {
                    return Err(ScanError::Git(crate::git::GitError::Parse {
                        argv: "git hash-object".into(),
                        what: "fewer ids than files".into(),
                    }));
                }
            },
            other => WorkState::Unpublishable(other.unpublishable().unwrap_or("unreadable")),
        };
        let mut observed = Observed {
            work,
            origin: theirs.get(&candidate.path).cloned(),
            fork: forked.get(&candidate.path).cloned(),
            seen_on_origin: false,
        };
        let mut verdict = judge::verdict(&observed);
        // Only a would-be divergence pays for a walk of the path's history on the base.
        if verdict == Verdict::Diverged
            && let WorkState::File(ours) = &observed.work
        {
            observed.seen_on_origin =
                probe::history_blobs(git, base_ref, &candidate.path)?.contains(ours);
            verdict = judge::verdict(&observed);
        }
        judged.push(Judged {
            deleted: observed.work == WorkState::Absent,
            on_base: observed.origin.is_some(),
            candidate,
            verdict,
        });
    }
    Ok((judged, precedent))
}
