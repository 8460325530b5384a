//! The supervisor's side of the operating system: starting workers (`spawn`, without copying
//! the supervisor's memory), the one door to their processes (`children`: pidfds, process
//! groups, cgroups), their ends as one descriptor (`pidfd_set`), the loop's signals, the
//! repo's lock and pid file, escaped descendants (`strays`), the isolation chosen at
//! start-up, what a worker's tree costs (`tree_usage`) and what its files say of its progress
//! (`stall`), and the service manager's readiness (`sd_notify`). What they read goes to the
//! fleet as events; what they do is what its effects ask.

pub mod children;
pub mod isolation;
pub mod lock;
pub mod pidfd_set;
pub mod sd_notify;
pub mod signals;
pub mod spawn;
pub mod stall;
pub mod strays;
pub mod tree_usage;
