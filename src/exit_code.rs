//! Exit codes (`docs/SPEC.md` §9), in one table; `cli::Failure` carries one to the edge.

/// One row per code: `$variant = $code, $NAME, "$meaning"`. Everything that shows the codes
/// reads [`Exit::ALL`] (`--help`'s footer, the man page, the tests that check the README and
/// the SPEC quote them), so a code is added here or nowhere.
macro_rules! exit_codes {
    ($( $(#[$doc:meta])* $variant:ident = $code:literal, $name:ident, $meaning:literal; )*) => {
        /// An exit code of this program or of a child it spawns.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Exit {
            $( $(#[$doc])* $variant, )*
        }

        impl Exit {
            /// Every code, in ascending order.
            pub const ALL: &'static [Exit] = &[$(Exit::$variant),*];

            pub const fn code(self) -> i32 {
                match self { $(Exit::$variant => $code,)* }
            }

            /// The constant's name (`AGENT_PAUSED`), as the SPEC's table names it.
            pub const fn name(self) -> &'static str {
                match self { $(Exit::$variant => stringify!($name),)* }
            }

            /// One line for a person, as `--help`, the man page and the README show it.
            pub const fn meaning(self) -> &'static str {
                match self { $(Exit::$variant => $meaning,)* }
            }
        }

        $(
            #[doc = concat!("`", $code, "`: ", $meaning, ".")]
            pub const $name: i32 = $code;
        )*
    };
}

exit_codes! {
    Ok = 0, OK, "done";
    Failed = 1, FAILED, "failed; status: the fleet runs but is degraded";
    Usage = 2, USAGE, "usage error";
    NotRunning = 3, NOT_RUNNING, "status: no supervisor is running (like systemctl is-active)";
    BootHalted = 4, BOOT_HALTED, "boot halted; nothing was spawned";
    /// From a worker: it stopped because the tracker failed transiently (EX_UNAVAILABLE:
    /// network, timeout, 5xx, a held store lock). Not a death.
    TrackerUnavailable = 69, TRACKER_UNAVAILABLE,
        "worker: stopped because the tracker failed transiently (not a death)";
    /// From a worker: it stopped because GitHub rate-limited it (EX_TEMPFAIL). Not a death.
    RateLimited = 75, RATE_LIMITED,
        "worker: stopped by a tracker rate limit, or the fleet is paused for one (not a death)";
    /// From a worker: it stopped because the agent's account ran out (usage limit, login,
    /// credit, overload) or the day's budget is used up. Not a death: the fleet holds.
    AgentPaused = 76, AGENT_PAUSED,
        "worker: the agent's account ran out, or the day's budget is used up (not a death; the fleet holds)";
    Config = 78, CONFIG, "configuration error";
    /// A child of the supervisor that lost it between the fork and the exec (it never became
    /// a worker) ends with this code; a successor reads no death into it.
    Orphaned = 111, ORPHANED,
        "a child that lost the supervisor between fork and exec (never a worker; not a death)";
    /// A child of the supervisor whose `execve` failed ends with this code, as a shell's
    /// would; the supervisor reports the spawn's failure.
    ExecFailed = 127, EXEC_FAILED, "a child whose exec failed: the command is missing or cannot be run";
    Sighup = 129, SIGHUP, "stopped by SIGHUP";
    Sigint = 130, SIGINT, "stopped by SIGINT";
    Sigterm = 143, SIGTERM, "stopped by SIGTERM";
}

/// The code of a process stopped by `signal`, as a shell reports it (`docs/SPEC.md` §9):
/// what [`SIGHUP`], [`SIGINT`] and [`SIGTERM`] are, for any signal.
pub const fn signalled(signal: i32) -> i32 {
    128 + signal
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table is in ascending order with no code twice, and the signal rows are what
    /// [`signalled`] makes of their signals.
    #[test]
    fn the_table_ascends_and_its_signal_rows_are_shells_codes() {
        let codes: Vec<i32> = Exit::ALL.iter().map(|e| e.code()).collect();
        assert!(codes.windows(2).all(|w| w[0] < w[1]), "{codes:?}");
        for (exit, signal) in [
            (Exit::Sighup, nix::sys::signal::Signal::SIGHUP),
            (Exit::Sigint, nix::sys::signal::Signal::SIGINT),
            (Exit::Sigterm, nix::sys::signal::Signal::SIGTERM),
        ] {
            assert_eq!(exit.code(), signalled(signal as i32));
            assert_eq!(exit.name(), signal.as_str());
        }
        assert_eq!(Exit::AgentPaused.code(), AGENT_PAUSED);
        assert_eq!(Exit::AgentPaused.name(), "AGENT_PAUSED");
    }
}
