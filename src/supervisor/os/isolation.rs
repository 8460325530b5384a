//! Which isolation the fleet runs with, chosen once at start-up (`isolation.mode`; README
//! "Isolation"): its own cgroup v2 subtree where one is writable, else process groups.
//! A limit asked for that cannot be enforced is one line here, never silent.

use std::sync::Arc;

use crate::cgroup::fleet::{self, FleetCgroups, Limit};
use crate::config::{Config, IsolationMode};
use crate::layout::Layout;

/// How the fleet's workers are kept apart and ended.
#[derive(Debug, Clone)]
pub enum Isolation {
    /// Every worker in its own cgroup: kill-all and "empty" come from the kernel.
    Cgroup(Arc<FleetCgroups>),
    /// Process groups, sessions, the subreaper and the environment tag; why no cgroup.
    ProcessGroup(String),
}

impl Isolation {
    /// As `status` and `state.toon` word it: `cgroup` or `process-group (why)`.
    pub fn describe(&self) -> String {
        match self {
            Isolation::Cgroup(_) => "cgroup".into(),
            Isolation::ProcessGroup(why) => format!("process-group ({why})"),
        }
    }

    pub fn cgroups(&self) -> Option<&Arc<FleetCgroups>> {
        match self {
            Isolation::Cgroup(c) => Some(c),
            Isolation::ProcessGroup(_) => None,
        }
    }
}

/// `isolation.mode = "cgroup"` asked for a subtree that is not there.
#[derive(Debug, thiserror::Error)]
#[error("isolation.mode = \"cgroup\" but {0}")]
pub struct CgroupRequired(pub String);

fn limits(asked: Vec<(&'static str, &'static str, String)>) -> Vec<Limit> {
    asked
        .into_iter()
        .map(|(key, file, value)| Limit { key, file, value })
        .collect()
}

/// The fleet directory's name for this repo.
pub fn fleet_name(layout: &Layout) -> String {
    fleet::fleet_name(layout.repo(), &layout.supervisor_lane())
}

/// The isolation chosen at start, with the lines to log for it.
pub type ChosenIsolation = (Isolation, Vec<String>);

/// The mode decided, not yet configured: the fleet's cgroup subtree entered (this process
/// in its leaf), or process groups and why. Start-up enters while the boot sweeps run and
/// settles after them (see [`fleet::Entered`]).
#[derive(Debug)]
pub enum Entering {
    Cgroup(fleet::Entered),
    ProcessGroup(String),
}

/// The mode decided and, in cgroup mode, the subtree made and this process moved into its
/// leaf; [`Entering::settle`] finishes the choice.
pub fn enter(config: &Config, layout: &Layout) -> Result<Entering, CgroupRequired> {
    let cfg = &config.isolation;
    let why = match cfg.mode {
        IsolationMode::ProcessGroup => "isolation.mode = process-group".to_string(),
        IsolationMode::Auto | IsolationMode::Cgroup => {
            match fleet::enter(cfg.cgroup_root.as_deref(), &fleet_name(layout)) {
                Ok(entered) => return Ok(Entering::Cgroup(entered)),
                Err(why) if cfg.mode == IsolationMode::Cgroup => {
                    return Err(CgroupRequired(why.to_string()));
                }
                Err(why) => why.to_string(),
            }
        }
    };
    Ok(Entering::ProcessGroup(why))
}

impl Entering {
    /// The choice finished: in cgroup mode the controllers enabled and the limits set; the
    /// mode with its lines to log, one per limit that cannot be enforced.
    pub fn settle(self, config: &Config) -> ChosenIsolation {
        let cfg = &config.isolation;
        let worker = limits(cfg.worker_limits());
        let fleet_wide = limits(cfg.fleet_limits());
        match self {
            Entering::Cgroup(entered) => {
                let s = entered.configure(&worker, &fleet_wide);
                let mut notes = vec![format!(
                    "isolation: cgroup at {} (controllers: {})",
                    s.cgroups.root().dir().display(),
                    match s.cgroups.controllers() {
                        [] => "none delegated".to_string(),
                        c => c.join(" "),
                    }
                )];
                notes.extend(s.notes);
                (Isolation::Cgroup(Arc::new(s.cgroups)), notes)
            }
            Entering::ProcessGroup(why) => {
                let mut notes = vec![format!("isolation: process-group ({why})")];
                for l in worker.iter().chain(&fleet_wide) {
                    notes.push(format!(
                        "{} = {:?} not enforceable: isolation is process-group ({why})",
                        l.key, l.value
                    ));
                }
                (Isolation::ProcessGroup(why), notes)
            }
        }
    }

    /// A start that ends before the fleet runs (its boot halted or was stopped): the
    /// fleet's cgroups taken down as a stop takes them down. An error names what is left.
    pub fn abandon(self) -> Result<(), crate::cgroup::CgroupError> {
        match self {
            Entering::Cgroup(entered) => entered.teardown(),
            Entering::ProcessGroup(_) => Ok(()),
        }
    }
}

/// What a successor found in the fleet's attempt cgroups.
#[derive(Debug, Default)]
pub struct CgroupTakeover {
    /// Live workers `state.toon` did not record (a supervisor killed before its
    /// heartbeat), found in their cgroups.
    pub found: Vec<crate::supervisor::core::fleet::Adoptee>,
    /// Lines for the event log: cgroups of dead attempts ended.
    pub notes: Vec<String>,
}

/// Takeover by cgroups first: each populated attempt cgroup either holds a recorded live
/// worker (which gets its cgroup), or is an attempt `state.toon` never recorded (its
/// worker is the oldest session leader carrying the worker id the cgroup's name implies),
/// or is what a dead attempt left (`cgroup.kill`: no worker is left to finish it). Empty
/// attempt cgroups are removed. `recorded` are the slots `state.toon` named.
pub fn adopt_by_cgroups(
    cgroups: &FleetCgroups,
    adoptees: &mut [crate::supervisor::core::fleet::Adoptee],
    recorded: &[usize],
) -> CgroupTakeover {
    let mut out = CgroupTakeover::default();
    for (slot, cg) in cgroups.attempts() {
        let procs = cg.procs();
        if procs.is_empty() {
            let _ = cg.remove_tree();
            continue;
        }
        if let Some(a) = adoptees.iter_mut().find(|a| procs.contains(&a.pid)) {
            a.cgroup = Some(cg);
            continue;
        }
        let expected = expected_worker_id(&cg, slot);
        let worker = (!recorded.contains(&slot))
            .then(|| oldest_leader(&procs, expected.as_deref()))
            .flatten();
        match worker {
            Some(p) => out.found.push(crate::supervisor::core::fleet::Adoptee {
                slot,
                pid: p.pid,
                start: p.start,
                worker_id: expected,
                started_epoch: crate::process::start_epoch(p.start),
                restarts: 0,
                cgroup: Some(cg),
            }),
            None => {
                crate::supervisor::os::children::signal_cgroup(
                    &cg,
                    nix::sys::signal::Signal::SIGKILL,
                );
                out.notes.push(format!(
                    "ended {} processes a dead attempt left in {}",
                    procs.len(),
                    cg.dir().display()
                ));
            }
        }
    }
    out
}

/// `attempt-<sup pid>-<seq>` of slot N holds worker `sup-<sup pid>-slot-<N>-<seq>`.
fn expected_worker_id(cg: &crate::cgroup::Cgroup, slot: usize) -> Option<String> {
    let name = cg.dir().file_name()?.to_str()?;
    let (pid, seq) = name.strip_prefix("attempt-")?.split_once('-')?;
    Some(format!("sup-{pid}-slot-{slot}-{seq}"))
}

/// The oldest process of `procs` that leads its session and carries worker id `id`: the
/// worker (a descendant that called `setsid` with its environment is younger).
fn oldest_leader(procs: &[i32], id: Option<&str>) -> Option<crate::process::Proc> {
    let id = id?;
    procs
        .iter()
        .filter_map(|pid| crate::process::read(*pid))
        .filter(|p| p.sid == p.pid && !p.is_zombie())
        .filter(|p| crate::process::environ_has(p.pid, crate::afk_env::WORKER_ID, id))
        .min_by_key(|p| p.start)
}
