//! Whose claim marks count on GitHub (SPEC §11.5). On a public repository anyone may
//! comment, so a well-formed mark proves nothing by itself: it counts only when its author
//! is the login the fleet's `gh` uses (`gh api user`, asked once per process), one of
//! `claims.trusted_authors`, or, with `claims.trust_members`, an owner, member or
//! collaborator of the repository. The `local` store has no outsiders and no authors.

use crate::config::Claims;

/// The trust policy of one checkout's configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trust {
    pub authors: Vec<String>,
    pub members: bool,
}

/// The author of one comment as gh reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Author {
    pub login: String,
    /// GitHub's `authorAssociation`: `OWNER`, `MEMBER`, `COLLABORATOR`, `CONTRIBUTOR`, …
    pub association: String,
}

/// What [`Trust::judge`] needs to know about the fleet's own login.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Trusted,
    /// Trusted only when `login` is the fleet's own.
    IfFleet,
}

impl Trust {
    pub fn from_config(c: &Claims) -> Trust {
        Trust {
            authors: c.trusted_authors.clone(),
            members: c.trust_members,
        }
    }

    /// Whether `author` makes marks without asking who the fleet is. GitHub logins are
    /// case-insensitive.
    pub fn judge(&self, author: &Author) -> Verdict {
        let named = self
            .authors
            .iter()
            .any(|a| a.eq_ignore_ascii_case(&author.login));
        let member = self.members
            && ["OWNER", "MEMBER", "COLLABORATOR"].contains(&author.association.as_str());
        if named || member {
            Verdict::Trusted
        } else {
            Verdict::IfFleet
        }
    }

    /// Whether `author`'s marks count, the fleet's login being `fleet`.
    pub fn counts(&self, author: &Author, fleet: &str) -> bool {
        self.judge(author) == Verdict::Trusted || author.login.eq_ignore_ascii_case(fleet)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(login: &str, association: &str) -> Author {
        Author {
            login: login.into(),
            association: association.into(),
        }
    }

    #[test]
    fn only_the_fleet_and_the_named_count_unless_members_are_trusted() {
        let t = Trust::default();
        assert!(t.counts(&a("Fleet-Bot", "NONE"), "fleet-bot"));
        assert!(!t.counts(&a("mallory", "NONE"), "fleet-bot"));
        assert!(!t.counts(&a("owner", "OWNER"), "fleet-bot"));
        let t = Trust {
            authors: vec!["Other-Bot".into()],
            members: false,
        };
        assert!(t.counts(&a("other-bot", "NONE"), "fleet-bot"));
        let t = Trust {
            authors: Vec::new(),
            members: true,
        };
        for assoc in ["OWNER", "MEMBER", "COLLABORATOR"] {
            assert!(t.counts(&a("x", assoc), "fleet-bot"), "{assoc}");
        }
        for assoc in ["CONTRIBUTOR", "FIRST_TIME_CONTRIBUTOR", "NONE", ""] {
            assert!(!t.counts(&a("x", assoc), "fleet-bot"), "{assoc}");
        }
    }
}
