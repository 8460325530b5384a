//! `afk-supervisor`: a process supervisor for fleets of unattended coding-agent workers.
//!
//! The binary is a thin shell over this library so that tests drive the same code paths
//! an operator does. The contract it keeps with other tools is `docs/SPEC.md`.
//!
//! Module map, top to bottom: a module imports only from modules below it (checked by the
//! tests in `module_order`, which read every `crate::` and `super::` path and this list;
//! the one exception is `tracker` naming a thread's comments by `claim::marks::Comment` and
//! telling a mark from another comment by `claim::marks::Mark::parse`, to keep only the
//! marks of trusted authors).
//! - `cli`: parsing, dispatch, exit codes and the one printed line per failure (`Failure`
//!   and the one printer of an error's chain); with `demo_project` (the `demo` command's
//!   scratch project and fleet), `diagnostics` (tracing), `service_unit` (the systemd
//!   instance) and `mcp_server` (the
//!   MCP server on stdio, over the same library calls as the commands) beside it.
//! - `status`: how `status` looks to a person: the plain table and the live view (ratatui).
//! - `worker` (the built-in worker: one file per step, ending in a typed outcome or error
//!   the cli turns into its exit code) and `program` (finding the agent's program).
//! - `control`: the client of a running supervisor, through its files and verified signals:
//!   `status`, `scale`, `stop` (with `rescue_killed`, the work `stop --force` killed kept)
//!   and `operator` (the operator pause, one slot's stop/restart, an issue given back, who
//!   asked).
//! - `supervisor`: the fleet, by role (each part imports only those after it): `main_loop`
//!   (start-up and the tokio event loop), `timers` (the belts and slot-log expiry on a
//!   timer), `cluster_belt` (the claims belt of a fleet whose claims live in etcd),
//!   `driver` (feeds the fleet events, carries its effects out, feeds the answers back),
//!   `release_dead` (a dead worker's issues back), `takeover` (the workers a killed
//!   supervisor left: adopted at a start, ended by a stop during the boot), `journal` (the event log's writer),
//!   `slot_logs`, `unblock_belt` (the unblock pass, one belt per tracker on the host),
//!   `claim_holds` (what holds the fleet's claims, read for the fleet), `os` (processes,
//!   spawn, pidfds, cgroups, signals, strays, the lock, sd-notify, tree usage), `core` (the
//!   pure state machine: `fleet::handle(event, now)` returns effects; it imports no `os`,
//!   tokio, nix or `std::fs`), `log_texts` (the fixed texts of its event-log records).
//! - `notify` (telling the humans: `[[notify]]` sinks fed from the event log by one thread
//!   of their own, its cursor kept across restarts).
//! - `landing` (a finished issue's pull request, `docs/SPEC.md` §11.22: the fleet's record of
//!   it, its texts and events, and the belt that watches it until it is merged).
//! - `bootstrap` (`.red/` and its `.gitignore` lines), `exit_code` (the codes, in one table),
//!   `slot_log_view` (the slot logs for people), `budget` (spend per day and per issue, from the ledger,
//!   and the reservations a claim takes against the day's budget; on a cluster
//!   `budget::fleet_day` and `budget::fleet_issue`, the day's budget and an issue's spend
//!   kept in etcd for every host).
//! - `sweeps`: one module per sweep, and `suite`, which runs them at boot and folds their
//!   reports (no sweep imports it); `transition` (a tracker label change with its comment);
//!   `base_fetch` (the one fetch of `origin/<base>` a suite run's sweeps share).
//! - `claim` (claims, the one home: taken, marked on the tracker, judged alive or stale,
//!   released; `claim::approval`, the belt that gives a held issue back once approved),
//!   `attempt_state`, `ledger` (attempts and quarantine), `pidfile`,
//!   `safe_delete` (the only remover inside `.red/tmp/`), `host_lock` (host-wide flocks),
//!   `fleets` (the checkouts whose supervisors this user ran, for `list`).
//! - `cluster` (the fleet's shared state in etcd when `[cluster]` is set: the client of
//!   etcd's JSON gateway, the claim transactions and their fencing tokens, the host's lease
//!   and its keeper, the lease file the workers stop by, the pauses and write windows
//!   shared, the steward that publishes the ready queue; `cluster::cas`, the one
//!   compare-and-swap every shared record changes by).
//! - `tracker` (gh and the local store; `tracker::pace`, the write budget per account;
//!   `tracker::trust`, whose hands count; `tracker::provenance`, whether an issue's text may
//!   reach an agent, judged from `tracker::gh_provenance`'s one GraphQL call; `tracker::gh_queue`, the
//!   ready queue read with conditional requests; `tracker::gh_output`, the error of every
//!   parser of gh's output),
//!   `config`, `lanes` (the lane's files more than one process shares: the heartbeat, the
//!   operator's directives, the fleet-wide pauses).
//! - `rescue` (a dead attempt's work committed, kept on a ref and pushed: the one home,
//!   called by every end of an attempt that is not a clean hand-off and by every sweep
//!   before it removes an attempt's tree).
//! - `sandbox` (the agent's reach: its allowlisted environment and private home, the
//!   bubblewrap plan, its own object directory taken in afterwards, the tamper check).
//! - `agent_profile` (what the agent CLIs print and how a run ended; pure, it imports
//!   only `text`).
//! - `event_log` (`supervisor.log.toonl`: its record and row, `Kind`, every kind the crate
//!   writes, the writers, the stream with a cursor that survives rotation, and the tail
//!   that follows it for people).
//! - `toonl` (the one TOONL reader and appender) and `toon_doc` (a TOON document writer for the
//!   heartbeat's flat shapes, and the row writer for the event log's records, byte for byte
//!   the general encoder's, at a fraction of its cost).
//! - `git`, `cmd` (running a command with a deadline), `fsutil`, `layout`, `text`,
//!   `timeutil`, `cgroup` (every cgroup v2 fact: the hierarchy, the fleet's subtree, kill,
//!   `populated`, figures, limits), `process` (every OS-process fact: `/proc`, pidfds,
//!   identities, signals), `afk_env` (every `RED_AFK_*` name; it imports nothing of the crate).

// `println!` panics on a closed stdout (`| head -1`): commands write through `cli::out`.
#![deny(clippy::print_stdout)]

pub mod afk_env;
pub mod agent_profile;
pub mod attempt_state;
pub mod bootstrap;
pub mod budget;
pub mod cgroup;
pub mod claim;
pub mod cli;
pub mod cluster;
pub mod cmd;
pub mod config;
pub mod control;
pub mod demo_project;
pub mod diagnostics;
pub mod event_log;
pub mod exit_code;
pub mod fleets;
pub mod fsutil;
pub mod git;
pub mod host_lock;
pub mod landing;
pub mod lanes;
pub mod layout;
pub mod ledger;
pub mod mcp_server;
#[cfg(test)]
mod module_order;
pub mod notify;
pub mod pidfile;
pub mod process;
pub mod program;
pub mod rescue;
pub mod safe_delete;
pub mod sandbox;
pub mod service_unit;
pub mod slot_log_view;
pub mod status;
pub mod supervisor;
pub mod sweeps;
pub mod text;
pub mod timeutil;
pub mod toon_doc;
pub mod toonl;
pub mod tracker;
pub mod worker;
