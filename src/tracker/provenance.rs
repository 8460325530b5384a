//! Whose words an issue's text is (SPEC §11.20). The fleet runs its agent unattended on the
//! issue's title and body, so on a public repository the text is the attacker's way in: an
//! outsider files an issue, a maintainer labels it, and the outsider edits it afterwards.
//! The text reaches an agent only when every hand that wrote it is trusted (the author,
//! every later editor and renamer) and a trusted hand labelled it `ready-for-agent`, or
//! when a trusted `/afk approve` came after the last untrusted hand. Everything here is
//! pure: the tracker fetches a [`Provenance`], [`vet`] judges it.

use super::trust::{Author, Trust};

/// The comment that approves an issue's text as it stands (its first line, trimmed).
pub const APPROVE: &str = "/afk approve";

/// Everything one judgement needs, as one tracker call reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provenance {
    pub title: String,
    pub body: String,
    /// `None`: a deleted account (GitHub's ghost), never trusted.
    pub author: Option<Author>,
    /// Epoch seconds.
    pub created_at: u64,
    /// Every change to the title or the body after creation, oldest first.
    pub changes: Vec<Change>,
    /// Every time `ready-for-agent` was applied, oldest first.
    pub labelled: Vec<Hand>,
    /// The comments the call returned, oldest first (approvals and our own notices).
    pub comments: Vec<Said>,
    /// True when the tracker had more edits, label events or comments than one call
    /// returns: the judgement then fails closed.
    pub truncated: bool,
}

/// Someone's act at a time: `login` `None` for a deleted account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hand {
    pub login: Option<String>,
    pub at: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Title,
    Body,
}

impl Part {
    fn name(self) -> &'static str {
        match self {
            Part::Title => "title",
            Part::Body => "body",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub part: Part,
    pub by: Hand,
}

/// One comment: its author (with GitHub's association) and text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Said {
    pub author: Option<Author>,
    pub body: String,
    pub at: u64,
}

/// What the agent may be given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Vetting {
    /// The tracker has no outsiders (the `local` store: every hand is the local user's).
    NoOutsiders,
    /// The text as vetted; the agent gets exactly this.
    Trusted { title: String, body: String },
    /// Held for a person; `newest_comment` lets the holder skip a notice already given.
    Held {
        hold: Hold,
        newest_comment: Option<String>,
    },
}

/// Why an issue's text is held (the first reason found, in the order below).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hold {
    /// The tracker returned only part of the history.
    TooLong,
    Author {
        login: Option<String>,
    },
    Changed {
        part: Part,
        by: Option<String>,
        at: u64,
    },
    /// No `ready-for-agent` by a trusted hand (or none at all on record).
    Labeller {
        login: Option<Option<String>>,
    },
}

fn who(login: &Option<String>) -> String {
    login
        .as_deref()
        .map_or("a deleted account".to_string(), |l| format!("@{l}"))
}

impl Hold {
    /// Why, in a few words (log lines, the held comment).
    pub fn reason(&self) -> String {
        match self {
            Hold::TooLong => {
                "its history is longer than one tracker call returns, so it cannot be checked"
                    .into()
            }
            Hold::Author { login } => format!("its author {} is not trusted", who(login)),
            Hold::Changed { part, by, at } => format!(
                "its {} was changed by {}, who is not trusted, at {}",
                part.name(),
                who(by),
                crate::timeutil::rfc3339(
                    std::time::UNIX_EPOCH + std::time::Duration::from_secs(*at)
                )
            ),
            Hold::Labeller { login: None } => {
                "no `ready-for-agent` label event is on record".into()
            }
            Hold::Labeller { login: Some(l) } => {
                format!(
                    "`ready-for-agent` was applied by {}, who is not trusted",
                    who(l)
                )
            }
        }
    }

    /// The one comment a held issue gets (SPEC §11.20).
    pub fn comment(&self) -> String {
        format!(
            "🤖 /afk held this issue for a person: {}. An agent gets an issue's text only when a trusted author wrote it and labelled it. A trusted maintainer who has read the title and body as they stand now can comment `{APPROVE}` to let an agent take it.",
            self.reason()
        )
    }
}

/// Judges `p` under `trust`; `fleet` is the login the fleet's tracker acts as (its own
/// relabels are trusted hands).
pub fn vet(p: &Provenance, trust: &Trust, fleet: &str) -> Vetting {
    let held = |hold| Vetting::Held {
        hold,
        newest_comment: p.comments.last().map(|c| c.body.clone()),
    };
    if p.truncated {
        return held(Hold::TooLong);
    }
    let trusted_login = |login: &Option<String>, association: &str| {
        login.as_ref().is_some_and(|l| {
            trust.counts(
                &Author {
                    login: l.clone(),
                    association: association.to_string(),
                },
                fleet,
            )
        })
    };
    // A hand other than the author's that edits, renames or labels must hold triage access
    // or more on GitHub: a member in the sense of `claims.trust_members`.
    let author_login = p.author.as_ref().map(|a| a.login.to_ascii_lowercase());
    let hand_trusted = |login: &Option<String>| {
        let is_author = login
            .as_ref()
            .is_some_and(|l| Some(l.to_ascii_lowercase()) == author_login);
        let association = match (&p.author, is_author) {
            (Some(a), true) => a.association.as_str(),
            _ => "COLLABORATOR",
        };
        trusted_login(login, association)
    };
    let approved_at = p
        .comments
        .iter()
        .filter(|c| c.body.lines().next().map(str::trim) == Some(APPROVE))
        .filter(|c| c.author.as_ref().is_some_and(|a| trust.counts(a, fleet)))
        .map(|c| c.at)
        .max();
    // An approval forgives every hand before it, never one at or after it.
    let since_approval = |at: u64| approved_at.is_none_or(|a| at >= a);
    if since_approval(p.created_at) {
        let author_trusted = p.author.as_ref().is_some_and(|a| trust.counts(a, fleet));
        if !author_trusted {
            return held(Hold::Author {
                login: p.author.as_ref().map(|a| a.login.clone()),
            });
        }
    }
    if let Some(c) = p
        .changes
        .iter()
        .find(|c| since_approval(c.by.at) && !hand_trusted(&c.by.login))
    {
        return held(Hold::Changed {
            part: c.part,
            by: c.by.login.clone(),
            at: c.by.at,
        });
    }
    if approved_at.is_none() {
        match p.labelled.last() {
            None => return held(Hold::Labeller { login: None }),
            Some(h) if !hand_trusted(&h.login) => {
                return held(Hold::Labeller {
                    login: Some(h.login.clone()),
                });
            }
            Some(_) => {}
        }
    }
    Vetting::Trusted {
        title: p.title.clone(),
        body: p.body.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLEET: &str = "fleet-bot";

    fn author(login: &str, association: &str) -> Option<Author> {
        Some(Author {
            login: login.into(),
            association: association.into(),
        })
    }

    fn hand(login: &str, at: u64) -> Hand {
        Hand {
            login: Some(login.into()),
            at,
        }
    }

    fn issue(by: Option<Author>) -> Provenance {
        Provenance {
            title: "Fix the parser".into(),
            body: "It crashes.".into(),
            author: by,
            created_at: 100,
            changes: Vec::new(),
            labelled: vec![hand("maint", 200)],
            comments: Vec::new(),
            truncated: false,
        }
    }

    fn named(logins: &[&str]) -> Trust {
        Trust {
            authors: logins.iter().map(|s| s.to_string()).collect(),
            members: false,
        }
    }

    fn approve(login: &str, association: &str, at: u64) -> Said {
        Said {
            author: author(login, association),
            body: "/afk approve\nread it, fine".into(),
            at,
        }
    }

    fn is_trusted(v: &Vetting) -> bool {
        matches!(v, Vetting::Trusted { .. })
    }

    #[test]
    fn a_trusted_authors_issue_labelled_by_a_trusted_hand_is_trusted() {
        let p = issue(author("maint", "OWNER"));
        let v = vet(&p, &named(&["maint"]), FLEET);
        assert_eq!(
            v,
            Vetting::Trusted {
                title: "Fix the parser".into(),
                body: "It crashes.".into()
            }
        );
        // The fleet's own login is trusted without naming it.
        let mut p = issue(author(FLEET, "NONE"));
        p.labelled = vec![hand(FLEET, 200)];
        assert!(is_trusted(&vet(&p, &Trust::default(), FLEET)));
    }

    #[test]
    fn an_outsiders_issue_is_held_even_when_a_maintainer_labelled_it() {
        let p = issue(author("mallory", "NONE"));
        let v = vet(&p, &named(&["maint"]), FLEET);
        let Vetting::Held { hold, .. } = v else {
            panic!("{v:?}")
        };
        assert_eq!(
            hold,
            Hold::Author {
                login: Some("mallory".into())
            }
        );
        assert!(hold.comment().contains("@mallory"), "{}", hold.comment());
        // A deleted account is nobody's.
        assert!(!is_trusted(&vet(&issue(None), &named(&["maint"]), FLEET)));
    }

    #[test]
    fn an_edit_by_an_untrusted_hand_holds_until_a_later_approval() {
        let mut p = issue(author("maint", "MEMBER"));
        p.changes.push(Change {
            part: Part::Body,
            by: hand("mallory", 300),
        });
        let trust = named(&["maint"]);
        assert!(matches!(
            vet(&p, &trust, FLEET),
            Vetting::Held {
                hold: Hold::Changed {
                    part: Part::Body,
                    at: 300,
                    ..
                },
                ..
            }
        ));
        // An approval before the edit does not cover it.
        p.comments.push(approve("maint", "MEMBER", 250));
        assert!(!is_trusted(&vet(&p, &trust, FLEET)));
        // An untrusted approval counts for nothing.
        p.comments.push(approve("mallory", "NONE", 400));
        assert!(!is_trusted(&vet(&p, &trust, FLEET)));
        // A trusted one after it approves the text as it stands.
        p.comments.push(approve("maint", "MEMBER", 400));
        assert!(is_trusted(&vet(&p, &trust, FLEET)));
        // A change after the approval holds it again, whoever's.
        p.changes.push(Change {
            part: Part::Title,
            by: hand("mallory", 500),
        });
        assert!(!is_trusted(&vet(&p, &trust, FLEET)));
    }

    #[test]
    fn an_approval_lets_an_outsiders_issue_through_without_a_trusted_label() {
        let mut p = issue(author("mallory", "NONE"));
        p.labelled = vec![hand("triager", 150)];
        p.comments.push(approve("maint", "OWNER", 160));
        assert!(is_trusted(&vet(&p, &named(&["maint"]), FLEET)));
        // The author editing after the approval holds it again.
        p.changes.push(Change {
            part: Part::Body,
            by: hand("mallory", 170),
        });
        let v = vet(&p, &named(&["maint"]), FLEET);
        assert!(
            matches!(
                &v,
                Vetting::Held {
                    hold: Hold::Changed { at: 170, .. },
                    ..
                }
            ),
            "{v:?}"
        );
    }

    #[test]
    fn the_label_must_come_from_a_trusted_hand() {
        let mut p = issue(author("maint", "OWNER"));
        p.labelled = vec![hand("maint", 150), hand("stranger", 200)];
        let v = vet(&p, &named(&["maint"]), FLEET);
        assert!(
            matches!(
                &v,
                Vetting::Held {
                    hold: Hold::Labeller { login: Some(Some(l)) },
                    ..
                } if l == "stranger"
            ),
            "{v:?}"
        );
        p.labelled.clear();
        assert!(matches!(
            vet(&p, &named(&["maint"]), FLEET),
            Vetting::Held {
                hold: Hold::Labeller { login: None },
                ..
            }
        ));
    }

    #[test]
    fn with_trust_members_collaborators_hands_count_and_an_outside_author_still_does_not() {
        let members = Trust {
            authors: Vec::new(),
            members: true,
        };
        let mut p = issue(author("dev", "MEMBER"));
        p.changes.push(Change {
            part: Part::Body,
            by: hand("other-dev", 300),
        });
        assert!(is_trusted(&vet(&p, &members, FLEET)));
        // The author's own later edit carries the author's association.
        let mut p = issue(author("drive-by", "CONTRIBUTOR"));
        p.comments.push(approve("dev", "MEMBER", 150));
        p.changes.push(Change {
            part: Part::Body,
            by: hand("drive-by", 300),
        });
        assert!(!is_trusted(&vet(&p, &members, FLEET)));
    }

    #[test]
    fn a_truncated_history_fails_closed_and_the_notice_is_not_repeated() {
        let mut p = issue(author("maint", "OWNER"));
        p.truncated = true;
        p.comments.push(Said {
            author: author(FLEET, "NONE"),
            body: Hold::TooLong.comment(),
            at: 300,
        });
        let v = vet(&p, &named(&["maint"]), FLEET);
        assert_eq!(
            v,
            Vetting::Held {
                hold: Hold::TooLong,
                newest_comment: Some(Hold::TooLong.comment())
            }
        );
    }
}
