//! The attempt's own object directory, taken into the repository's store once the agent
//! has ended: before anything of the fleet reads its commits (the tamper check, the count,
//! the push, a rescue). Until then a commit of the agent exists only there, so every reader
//! that may come first (a rescue after the worker died) calls [`take_in`] too.

use std::path::Path;

use crate::git::{Git, GitResult};

/// Takes every object of `dir` into `git`'s store; returns how many (0 when `dir` does not
/// exist: an attempt outside bubblewrap, or one already taken in).
pub fn take_in(git: &Git, dir: &Path) -> GitResult<usize> {
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => {}
        _ => return Ok(0),
    }
    let ids = git.objects_in(dir)?;
    git.import_objects(dir, &ids)
}

/// The variables the agent's git reads inside the sandbox: new objects to `dir`, existing
/// ones from the repository's store as an alternate, and no automatic maintenance (it
/// would try to repack a store the agent cannot write). Appended after the operator's
/// `GIT_CONFIG_COUNT` entries, as [`crate::git::hardening`] does.
pub fn agent_git_env(dir: &Path, store: &Path, have_config: usize) -> Vec<(String, String)> {
    let mut env = vec![
        ("GIT_OBJECT_DIRECTORY".into(), dir.display().to_string()),
        (
            "GIT_ALTERNATE_OBJECT_DIRECTORIES".into(),
            store.display().to_string(),
        ),
    ];
    let settings = [("maintenance.auto", "false"), ("gc.auto", "0")];
    for (i, (k, v)) in settings.iter().enumerate() {
        env.push((format!("GIT_CONFIG_KEY_{}", have_config + i), (*k).into()));
        env.push((format!("GIT_CONFIG_VALUE_{}", have_config + i), (*v).into()));
    }
    env.push((
        "GIT_CONFIG_COUNT".into(),
        (have_config + settings.len()).to_string(),
    ));
    env
}
