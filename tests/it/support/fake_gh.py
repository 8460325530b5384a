# A fake GitHub CLI for tests. Installed as `gh` by tests/it/support/fake_gh.rs, which
# prepends a shebang naming the python3 interpreter it found.
#
# It accepts exactly the argv of docs/SPEC.md section 7 plus the worker's oldest-first claim
# listing (`--search sort:created-asc`), each optionally with `--repo X` (never on
# `auth status`, which the real gh rejects) and answers from `state.json` beside this
# script. Anything else exits 2 with `unknown gh invocation: <argv>` on stderr.
#
# Files beside the script:
#   state.json   issues, PRs, auth flag, a queue of scripted replies and an optional
#                `chaos: {rate, seed, calls, failed}` (see fake_gh.rs)
#   state.lock   flock serialising every read-modify-write of state.json
#   calls.jsonl  one JSON array per call: the argv after the program name
#   pids         one pid per call, written first thing
#   hung         one pid per child a `hang` reply started (it shares the call's group)
#   stamps.jsonl one JSON object per call: {"t": epoch seconds, "argv": [...]}
#   conditional  one line per answer of the steward's conditional listing: 200 or 304
#
# A `rate_limit: {"reset": EPOCH, "hits": N}` in state.json makes every repository call
# fail as GitHub's primary rate limit does until EPOCH (counting them in `hits`), and
# `gh api rate_limit` report the core and graphql limits spent until EPOCH.
#
# `viewer` (default "fake") is the login `gh api user` answers and the author of every
# comment the fake posts (association `viewer_association`, default "OWNER"); a stored
# comment may name its own `author` and `authorAssociation` (an outsider's comment). A
# scripted step with `apply: true` runs the call against the state first and then answers
# with its code and stderr: a write GitHub applied though the answer failed (a 502).
import copy
import fcntl
import hashlib
import json
import os
import random
import re
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
STATE = os.path.join(HERE, "state.json")
LOCK = os.path.join(HERE, "state.lock")
CALLS = os.path.join(HERE, "calls.jsonl")
PIDS = os.path.join(HERE, "pids")
HUNG = os.path.join(HERE, "hung")
STAMPS = os.path.join(HERE, "stamps.jsonl")
CONDITIONAL = os.path.join(HERE, "conditional")
RATE_LIMIT_STDERR = "GraphQL: API rate limit exceeded for user ID 1.\n"

POSITIVE = re.compile(r"^[1-9][0-9]*$")

# What chaos mode prints: gh's own text for a dropped connection (a transient failure).
CHAOS_STDERR = (
    "error connecting to api.github.com\n"
    "check your internet connection or https://githubstatus.com\n"
)


class Reply(Exception):
    def __init__(self, code, stdout="", stderr=""):
        super().__init__(code)
        self.code = code
        self.stdout = stdout
        self.stderr = stderr


def append(path, line):
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()


def load():
    try:
        with open(STATE, encoding="utf-8") as f:
            state = json.load(f)
    except FileNotFoundError:
        state = {}
    state.setdefault("repo", "fake-owner/fake-repo")
    state.setdefault("auth", True)
    state.setdefault("issues", [])
    state.setdefault("prs", [])
    state.setdefault("script", [])
    return state


def save(state):
    tmp = STATE + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(state, f, indent=2)
    os.replace(tmp, STATE)


def unknown(argv):
    raise Reply(2, stderr="unknown gh invocation: " + shlex.join(argv))


def split_repo(argv):
    """Removes one `--repo X`; returns (rest, repo or None)."""
    if "--repo" not in argv:
        return list(argv), None
    i = argv.index("--repo")
    if i + 1 >= len(argv) or "--repo" in argv[i + 2 :]:
        unknown(argv)
    return argv[:i] + argv[i + 2 :], argv[i + 1]


def match(rest, pattern):
    """`pattern` items are literal strings or callables that take the value; returns the
    values of the callable slots, or None when the argv does not fit."""
    if len(rest) != len(pattern):
        return None
    values = []
    for got, want in zip(rest, pattern):
        if callable(want):
            if not want(got):
                return None
            values.append(got)
        elif got != want:
            return None
    return values


def positive(s):
    return bool(POSITIVE.match(s))


def anything(_s):
    return True


def label_objs(names):
    return [
        {"id": "LA_" + n, "name": n, "description": "", "color": "ededed"} for n in names
    ]


def find_issue(state, n):
    for issue in state["issues"]:
        if issue["number"] == n:
            return issue
    raise Reply(
        1,
        stderr="GraphQL: Could not resolve to an issue or pull request with the number of %d. (repository.issue)"
        % n,
    )


# --- issue provenance (SPEC section 7, section 11.20) ---------------------------------
# The one GraphQL query the tracker sends, byte for byte (src/tracker/gh_provenance.rs).
PROVENANCE_QUERY = (
    "query($owner:String!,$repo:String!,$number:Int!){repository(owner:$owner,name:$repo){issue(number:$number)"
    "{title body createdAt lastEditedAt editor{login} author{login} authorAssociation "
    "userContentEdits(last:100){totalCount nodes{editedAt editor{login}}} "
    "timelineItems(last:100,itemTypes:[LABELED_EVENT,RENAMED_TITLE_EVENT]){filteredCount nodes{__typename "
    "... on LabeledEvent{createdAt actor{login} label{name}} ... on RenamedTitleEvent{createdAt actor{login}}}} "
    "comments(last:100){nodes{author{login} authorAssociation body createdAt}}}}}"
)
# An issue may carry `author`, `authorAssociation`, `title`, `createdAt`, `updatedAt`,
# `edits: [{part: "body"|"title", by, at}]` and `labelEvents: [{label, by, at}]`. Without
# `labelEvents`, every label it carries was applied by the viewer when it was created;
# `issue edit --add-label` records a label event by the viewer, and every write moves
# `updatedAt`.
EPOCH0 = "2026-01-01T00:00:00Z"


def now_iso():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def touch(issue):
    issue["updatedAt"] = now_iso()


def label_events(state, issue):
    if "labelEvents" not in issue:
        issue["labelEvents"] = [
            {"label": l, "by": viewer(state), "at": issue.get("createdAt", EPOCH0)} for l in issue["labels"]
        ]
    return issue["labelEvents"]


def login_obj(login):
    return None if login is None else {"login": login}


def provenance(state, issue):
    edits = [e for e in issue.get("edits", []) if e.get("part", "body") == "body"]
    renames = [e for e in issue.get("edits", []) if e.get("part") == "title"]
    items = [
        {"__typename": "LabeledEvent", "createdAt": e["at"], "actor": login_obj(e["by"]), "label": {"name": e["label"]}}
        for e in label_events(state, issue)
    ] + [{"__typename": "RenamedTitleEvent", "createdAt": e["at"], "actor": login_obj(e["by"])} for e in renames]
    items.sort(key=lambda i: i["createdAt"])
    comments = [
        {
            "author": login_obj(c.get("author") or viewer(state)),
            "authorAssociation": c.get("authorAssociation") or state.get("viewer_association", "OWNER"),
            "body": c["body"],
            "createdAt": c.get("createdAt", EPOCH0),
        }
        for c in issue.get("comments", [])
    ]
    author = issue.get("author", viewer(state))
    last = edits[-1] if edits else None
    return {
        "data": {
            "repository": {
                "issue": {
                    "title": issue.get("title", ""),
                    "body": issue.get("body", ""),
                    "createdAt": issue.get("createdAt", EPOCH0),
                    "lastEditedAt": last["at"] if last else None,
                    "editor": login_obj(last["by"]) if last else None,
                    "author": login_obj(author),
                    "authorAssociation": issue.get("authorAssociation")
                    or (state.get("viewer_association", "OWNER") if author == viewer(state) else "NONE"),
                    "userContentEdits": {
                        "totalCount": len(edits),
                        "nodes": [{"editedAt": e["at"], "editor": login_obj(e["by"])} for e in edits[-100:]],
                    },
                    "timelineItems": {"filteredCount": len(items), "nodes": items[-100:]},
                    "comments": {"nodes": comments[-100:]},
                }
            }
        }
    }


def api_tail(rest):
    """What follows `api [--hostname H]`, or None for another command."""
    if rest[:1] != ["api"]:
        return None
    tail = rest[1:]
    if tail[:1] == ["--hostname"]:
        return tail[2:] if len(tail) > 2 and tail[1] else None
    return tail


def graphql_argv(rest):
    """`api [--hostname H] graphql -f query=Q -F owner=O -F repo=R -F number=N` -> N."""
    tail = api_tail(rest)
    if tail is None:
        return None
    v = match(
        tail,
        ["graphql", "-f", "query=" + PROVENANCE_QUERY, "-F", anything, "-F", anything, "-F", anything],
    )
    if v is None:
        return None
    owner, repo, number = v
    if not owner.startswith("owner=") or not repo.startswith("repo=") or not number.startswith("number="):
        return None
    n = number[len("number="):]
    return int(n) if positive(n) else None


QUEUE_QUERY = "labels=ready-for-agent&state=open&sort=created&direction=asc&per_page=100&page="


def queue_argv(rest, state):
    """`api [--hostname H] -i [-H "If-None-Match: E"] repos/O/R/issues?<QUEUE_QUERY>P`
    (SPEC section 11.23's steward) -> (page, etag or None)."""
    tail = api_tail(rest)
    if tail is None or tail[:1] != ["-i"]:
        return None
    tail = tail[1:]
    etag = None
    if tail[:1] == ["-H"] and len(tail) == 3:
        if not tail[1].startswith("If-None-Match: ") or len(tail[1]) == len("If-None-Match: "):
            return None
        etag = tail[1][len("If-None-Match: "):]
        tail = tail[2:]
    if len(tail) != 1:
        return None
    prefix = "repos/" + state["repo"] + "/issues?" + QUEUE_QUERY
    if not tail[0].startswith(prefix) or not positive(tail[0][len(prefix):]):
        return None
    return int(tail[0][len(prefix):]), etag


def queue_page(state, page):
    """One page of the REST listing as GitHub prints it, and its weak ETag."""
    rows = [
        {
            "number": i["number"],
            "title": i.get("title", ""),
            "state": "open",
            "body": i.get("body", ""),
            "labels": label_objs(i["labels"]),
        }
        for i in oldest_first(state["issues"])
        if i["state"] == "OPEN" and "ready-for-agent" in i["labels"]
    ][(page - 1) * 100 : page * 100]
    body = dump(rows)
    return body, 'W/"' + hashlib.sha1(body.encode()).hexdigest() + '"'


def newest_first(issues):
    return sorted(issues, key=lambda i: i["number"], reverse=True)


def oldest_first(issues):
    return sorted(issues, key=lambda i: i["number"])


def dump(value):
    return json.dumps(value, indent=2) + "\n"


def viewer(state):
    return state.get("viewer") or "fake"


# The repository's labels: `labels` in the state when a test sets it (GitHub then refuses to
# add any other, as it does); without it, a repository set up for the fleet already, which
# has the fleet's labels and every label its issues carry.
FLEET_LABELS = ["ready-for-agent", "running", "ready-for-human", "needs-triage", "needs-info",
                "afk:quarantined", "afk:needs-approval", "afk:pr-open"]


def repo_labels(state):
    if "labels" in state:
        return list(state["labels"])
    seen = list(FLEET_LABELS)
    for issue in state.get("issues", []):
        for l in issue.get("labels", []):
            if l not in seen:
                seen.append(l)
    return seen


def has_label(state, name):
    return "labels" not in state or any(l.lower() == name.lower() for l in state["labels"])


def handle(argv, state):
    """Runs one call against `state` (mutated in place); raises Reply."""
    rest, repo = split_repo(argv)
    url = "https://github.com/" + (repo or state["repo"])

    q = queue_argv(rest, state)
    if q is not None:
        if repo is not None:
            unknown(argv)
        page, sent = q
        body, etag = queue_page(state, page)
        if sent == etag:
            # gh prints the status and headers, says `gh: HTTP 304`, exits 1; GitHub does
            # not count a 304 against the rate limit.
            raise Reply(1, stdout="HTTP/2.0 304 Not Modified\nEtag: " + etag + "\n\n", stderr="gh: HTTP 304\n")
        head = "HTTP/2.0 200 OK\nContent-Type: application/json; charset=utf-8\nEtag: " + etag + "\n\n"
        raise Reply(0, stdout=head + body)

    n = graphql_argv(rest)
    if n is not None:
        if repo is not None:
            unknown(argv)
        raise Reply(0, stdout=dump(provenance(state, find_issue(state, n))))

    v = match(rest, ["issue", "list", "--label", anything, "--state", "open", "--limit", positive, "--json", "number,updatedAt"])
    if v is not None:
        label, limit = v[0], int(v[1])
        rows = [
            {"number": i["number"], "updatedAt": i.get("updatedAt", i.get("createdAt", EPOCH0))}
            for i in newest_first(state["issues"])
            if i["state"] == "OPEN" and label in i["labels"]
        ][:limit]
        raise Reply(0, stdout=dump(rows))

    if match(rest, ["api", "rate_limit"]) is not None:
        if repo is not None:
            unknown(argv)
        limit = state.get("rate_limit")
        reset = int(limit["reset"]) if limit else int(time.time()) + 3600
        # Without a scripted limit nothing is spent (a scripted rate-limit reply is then a
        # secondary-style limit with no reset to report).
        spent = bool(limit) and time.time() < reset
        limits = {
            name: {"limit": 5000, "remaining": 0 if spent else 5000, "reset": reset, "used": 5000 if spent else 0}
            for name in ("core", "graphql")
        }
        limits["search"] = {"limit": 30, "remaining": 30, "reset": int(time.time()) + 60, "used": 0}
        raise Reply(0, stdout=dump({"resources": limits, "rate": limits["core"]}))

    if match(rest, ["api", "user"]) is not None:
        if repo is not None:
            unknown(argv)
        raise Reply(0, stdout=dump({"login": viewer(state), "id": 1, "type": "User"}))

    if match(rest, ["auth", "status"]) is not None:
        if repo is not None:
            # The real gh: `unknown flag: --repo`.
            unknown(argv)
        if state["auth"]:
            raise Reply(0, stderr="github.com\n  \u2713 Logged in to github.com as fake (GH_TOKEN)\n")
        raise Reply(1, stderr="You are not logged into any GitHub hosts. Run gh auth login to authenticate.\n")

    v = match(rest, ["issue", "list", "--state", "all", "--limit", positive, "--json", "number,state,labels,closedAt"])
    if v is not None:
        rows = [
            {
                "closedAt": i.get("closedAt"),
                "labels": label_objs(i["labels"]),
                "number": i["number"],
                "state": i["state"],
            }
            for i in newest_first(state["issues"])[: int(v[0])]
        ]
        raise Reply(0, stdout=dump(rows))

    # The worker's claim listing adds `--search sort:created-asc` (guide, "The built-in
    # worker"): GitHub then sorts oldest first before cutting at the limit.
    labeled = ["issue", "list", "--label", anything, "--state", "open", "--limit", positive]
    json_fields = ["--json", "number,body,labels"]
    for extra, order in (([], newest_first), (["--search", "sort:created-asc"], oldest_first)):
        v = match(rest, labeled + extra + json_fields)
        if v is not None:
            label, limit = v[0], int(v[1])
            rows = [
                {"body": i.get("body", ""), "labels": label_objs(i["labels"]), "number": i["number"]}
                for i in order(state["issues"])
                if i["state"] == "OPEN" and label in i["labels"]
            ][:limit]
            raise Reply(0, stdout=dump(rows))

    v = match(rest, ["issue", "view", positive, "--json", "state,labels"])
    if v is not None:
        issue = find_issue(state, int(v[0]))
        raise Reply(0, stdout=dump({"labels": label_objs(issue["labels"]), "state": issue["state"]}))

    v = match(rest, ["issue", "view", positive, "--json", "state,labels,comments"])
    if v is not None:
        issue = find_issue(state, int(v[0]))
        comments = [
            {
                "author": {"login": c.get("author") or viewer(state)},
                "authorAssociation": c.get("authorAssociation") or state.get("viewer_association", "OWNER"),
                "body": c["body"],
                "createdAt": c.get("createdAt", ""),
            }
            for c in issue.get("comments", [])
        ]
        raise Reply(
            0,
            stdout=dump({"comments": comments, "labels": label_objs(issue["labels"]), "state": issue["state"]}),
        )

    v = match(rest, ["label", "list", "--limit", positive, "--json", "name"])
    if v is not None:
        names = repo_labels(state)
        raise Reply(0, stdout=dump([{"name": l} for l in names[: int(v[0])]]))

    v = match(rest, ["label", "create", anything, "--color", anything, "--description", anything, "--force"])
    if v is not None:
        if not re.fullmatch(r"[0-9a-fA-F]{6}", v[1]):
            raise Reply(1, stderr="HTTP 422: Validation Failed (color)\n")
        if "labels" in state and not any(l.lower() == v[0].lower() for l in state["labels"]):
            state["labels"].append(v[0])
        raise Reply(0, stdout="")

    if rest[:2] == ["issue", "edit"] and len(rest) >= 5 and positive(rest[2]):
        flags = rest[3:]
        add, remove = None, None
        if flags[:1] == ["--add-label"] and len(flags) >= 2:
            add, flags = flags[1], flags[2:]
        if flags[:1] == ["--remove-label"] and len(flags) >= 2:
            remove, flags = flags[1], flags[2:]
        if flags or (add is None and remove is None):
            unknown(argv)
        n = int(rest[2])
        issue = find_issue(state, n)
        for label in (add or "").split(","):
            if label and not has_label(state, label):
                raise Reply(1, stderr="failed to update %s/issues/%d: '%s' not found\n" % (url, n, label))
        events = label_events(state, issue)
        for label in (add or "").split(","):
            if label and label not in issue["labels"]:
                issue["labels"].append(label)
                events.append({"label": label, "by": viewer(state), "at": now_iso()})
        touch(issue)
        gone = set((remove or "").split(","))
        issue["labels"] = [l for l in issue["labels"] if l not in gone]
        raise Reply(0, stdout="%s/issues/%d\n" % (url, n))

    v = match(rest, ["issue", "comment", positive, "--body", anything])
    if v is not None:
        n = int(v[0])
        issue = find_issue(state, n)
        issue.setdefault("comments", []).append({"body": v[1], "createdAt": now_iso()})
        touch(issue)
        raise Reply(0, stdout="%s/issues/%d#issuecomment-%d\n" % (url, n, len(issue["comments"])))

    v = match(rest, ["pr", "create", "--base", anything, "--head", anything, "--title", anything, "--body", anything])
    if v is not None:
        open_pr(state, url, v, False)

    v = match(rest, ["pr", "merge", anything, "--merge", "--delete-branch"])
    if v is not None:
        head = v[0]
        for pr in state["prs"]:
            if pr["state"] == "OPEN" and pr["head"] == head:
                pr["state"] = "MERGED"
                raise Reply(0, stdout="")
        raise Reply(1, stderr='no pull requests found for branch "%s"\n' % head)

    handle_landing(rest, argv, state, url)

    unknown(argv)


# ---- issue 50: the landing (docs/SPEC.md section 11.20) --------------------------------
# The pull-request calls of the landing, each as strictly matched as the ones above. A PR
# in `state.json` may carry `isDraft`, `headRefOid`, `checks` (rows of `gh pr checks
# --json name,bucket,link,workflow`, each optionally `required`), `reviews` and `comments`
# (each {body, author, authorAssociation, state?, submittedAt?/createdAt?}), `autoMerge`
# (the method asked) and `mergeable_when` ("checks": `--auto` merges at once when no
# required check fails or is pending, else it waits). `runs` maps a run id to the text of
# `gh run view <id> --log-failed`. `gh pr ready <pr>` takes `isDraft` off an open PR (one
# already ready: exit 0 with gh's note; a closed one is refused).


def open_pr(state, url, values, draft):
    """`gh pr create` (the docs lane's and the landing's): refused when an open PR has the
    same head and base, as GitHub does; numbered after every issue and PR."""
    base, head, title, body = values
    for pr in state["prs"]:
        if pr["state"] == "OPEN" and pr["head"] == head and pr["base"] == base:
            raise Reply(
                1,
                stderr='a pull request for branch "%s" into branch "%s" already exists:\n%s/pull/%d\n'
                % (head, base, url, pr["number"]),
            )
    number = 1 + max([p["number"] for p in state["prs"]] + [i["number"] for i in state["issues"]] + [0])
    pr = {"number": number, "base": base, "head": head, "title": title, "body": body, "state": "OPEN"}
    # `new_pr_checks`: the CI every new pull request starts with (a test's CI, set before
    # a host opens it).
    if "new_pr_checks" in state:
        pr["checks"] = copy.deepcopy(state["new_pr_checks"])
    if draft:
        pr["isDraft"] = True
    state["prs"].append(pr)
    raise Reply(0, stdout="%s/pull/%d\n" % (url, number))


def verb_step(argv, state):
    """A scripted reply aimed at one kind of call (`verb_script: {"pr create": [step, ...]}`),
    taken when the queue is empty: a failure of the landing's call whatever comes before it."""
    steps = state.get("verb_script", {}).get(" ".join(argv[:2]))
    return steps.pop(0) if steps else None


def find_pr(state, ref):
    for pr in state["prs"]:
        if str(pr["number"]) == ref:
            return pr
    raise Reply(1, stderr="GraphQL: Could not resolve to a PullRequest with the number of %s. (repository.pullRequest)\n" % ref)


def handle_landing(rest, argv, state, url):
    v = match(
        rest,
        ["pr", "create", "--base", anything, "--head", anything, "--title", anything, "--body", anything, "--draft"],
    )
    if v is not None:
        open_pr(state, url, v, True)

    v = match(rest, ["pr", "view", positive, "--json", "state,isDraft,headRefOid,reviews,comments"])
    if v is not None:
        pr = find_pr(state, v[0])
        settle_auto_merge(state, pr)
        notes = lambda key, stamp: [
            dict(
                {
                    "id": n.get("id") or "%s-%d" % (key, i),
                    "author": {"login": n.get("author") or viewer(state)},
                    "authorAssociation": n.get("authorAssociation") or state.get("viewer_association", "OWNER"),
                    "body": n.get("body", ""),
                    stamp: n.get(stamp, "2026-01-01T00:00:00Z"),
                },
                **({"state": n["state"]} if "state" in n else {}),
            )
            for i, n in enumerate(pr.get(key, []))
        ]
        raise Reply(
            0,
            stdout=dump(
                {
                    "comments": notes("comments", "createdAt"),
                    "headRefOid": pr.get("headRefOid", "0" * 40),
                    "isDraft": bool(pr.get("isDraft")),
                    "reviews": notes("reviews", "submittedAt"),
                    "state": pr["state"],
                }
            ),
        )

    for required in (True, False):
        pattern = ["pr", "checks", positive] + (["--required"] if required else []) + ["--json", "name,bucket,link"]
        v = match(rest, pattern)
        if v is not None:
            pr = find_pr(state, v[0])
            rows = [c for c in pr.get("checks", []) if c.get("required") or not required]
            if not rows:
                raise Reply(1, stderr="no %schecks reported on the '%s' branch\n" % ("required " if required else "", pr["head"]))
            out = dump([{"bucket": c["bucket"], "link": c.get("link", ""), "name": c["name"]} for c in rows])
            buckets = [c["bucket"] for c in rows]
            # As gh: 1 when a check failed, 8 while one is pending.
            raise Reply(1 if "fail" in buckets or "cancel" in buckets else 8 if "pending" in buckets else 0, stdout=out)

    v = match(rest, ["run", "view", positive, "--log-failed"])
    if v is not None:
        log = state.get("runs", {}).get(v[0])
        if log is None:
            raise Reply(1, stderr="could not find any workflow run with ID %s\n" % v[0])
        raise Reply(0, stdout=log)

    v = match(rest, ["pr", "ready", positive])
    if v is not None:
        pr = find_pr(state, v[0])
        if pr["state"] != "OPEN":
            raise Reply(1, stderr="Pull request #%s is closed. Only draft pull requests can be marked as \"ready for review\"\n" % v[0])
        if not pr.get("isDraft"):
            raise Reply(0, stderr="! Pull request #%s is already \"ready for review\"\n" % v[0])
        pr["isDraft"] = False
        settle_auto_merge(state, pr)
        raise Reply(0, stderr="✓ Pull request #%s is marked as \"ready for review\"\n" % v[0])

    for method in ("--squash", "--merge", "--rebase"):
        v = match(rest, ["pr", "merge", positive, "--auto", method])
        if v is not None:
            pr = find_pr(state, v[0])
            if pr["state"] != "OPEN":
                raise Reply(1, stderr="Pull request #%s is not open\n" % v[0])
            pr["autoMerge"] = method
            settle_auto_merge(state, pr)
            raise Reply(0, stdout="")

    v = match(rest, ["pr", "comment", positive, "--body", anything])
    if v is not None:
        pr = find_pr(state, v[0])
        pr.setdefault("comments", []).append({"body": v[1]})
        raise Reply(0, stdout="%s/pull/%s#issuecomment-%d\n" % (url, v[0], len(pr["comments"])))

    v = match(rest, ["pr", "edit", positive, "--add-label", anything])
    if v is not None:
        pr = find_pr(state, v[0])
        for label in v[1].split(","):
            if not has_label(state, label):
                raise Reply(1, stderr="failed to update %s/pull/%s: '%s' not found\n" % (url, v[0], label))
        for label in v[1].split(","):
            if label not in pr.setdefault("labels", []):
                pr["labels"].append(label)
        raise Reply(0, stdout="%s/pull/%s\n" % (url, v[0]))


def settle_auto_merge(state, pr):
    """GitHub's auto-merge: once asked, the PR merges when no required check fails or is
    pending (never past a failing one); its `Closes #N` then closes the issue."""
    if pr["state"] != "OPEN" or not pr.get("autoMerge") or pr.get("isDraft"):
        return
    required = [c["bucket"] for c in pr.get("checks", []) if c.get("required")]
    if any(b in ("fail", "cancel", "pending") for b in required):
        return
    pr["state"] = "MERGED"
    for m in re.finditer(r"(?im)^closes #([0-9]+)", pr.get("body", "")):
        for issue in state["issues"]:
            if issue["number"] == int(m.group(1)):
                issue["state"] = "CLOSED"
                issue["closedAt"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# ---- issue 49: GitHub's limits on content-creating requests, per identity ----
# GitHub allows about 80 content-creating requests a minute and 500 an hour per user
# ("Rate limits for the REST API"); past either, the call fails with the secondary limit's
# text (nothing applied) and counts in `write_limits.hits`, which a test expects to stay 0.
# `write_limits: {"per_min": 80, "per_hour": 500, "min_s": 60, "hour_s": 3600}` in
# state.json narrows them (a test's short hour); the times of each login's writes are kept
# in `write_limits.times`. Reads never count, and neither would a conditional request
# answered 304 (no argv of SPEC §7 sends one yet).
WRITE_LIMIT_STDERR = (
    "HTTP 403: You have exceeded a secondary rate limit. Please wait a few minutes before "
    "you try again.\n"
)


def is_write(argv):
    rest, _ = split_repo(argv)
    return rest[:2] in (
        ["issue", "comment"],
        ["issue", "edit"],
        ["pr", "create"],
        ["pr", "merge"],
        ["pr", "ready"],
        ["pr", "comment"],
        ["pr", "edit"],
        ["label", "create"],
    )


def write_limit_step(state):
    lim = state.setdefault("write_limits", {})
    per_min, per_hour = int(lim.get("per_min", 80)), int(lim.get("per_hour", 500))
    min_s, hour_s = float(lim.get("min_s", 60)), float(lim.get("hour_s", 3600))
    login = viewer(state)
    now = time.time()
    times = [t for t in lim.setdefault("times", {}).get(login, []) if now - t < max(min_s, hour_s)]
    lim["times"][login] = times
    if sum(1 for t in times if now - t < min_s) >= per_min or len(
        [t for t in times if now - t < hour_s]
    ) >= per_hour:
        lim["hits"] = lim.get("hits", 0) + 1
        return {"code": 1, "stderr": WRITE_LIMIT_STDERR}
    times.append(now)
    return None


# ---- end issue 49 ----


def chaos_strikes(state):
    """Chaos mode: whether this call fails, before doing anything. Call k of a run with seed
    S fails when a generator seeded with "S:k" draws below `rate`, so a seed replays the
    same failures whatever else runs; `failed` counts them for the test to check."""
    chaos = state.get("chaos")
    if not chaos:
        return False
    k = chaos.get("calls", 0)
    chaos["calls"] = k + 1
    if random.Random("%s:%d" % (chaos["seed"], k)).random() >= float(chaos["rate"]):
        return False
    chaos["failed"] = chaos.get("failed", 0) + 1
    return True


def run(argv, state):
    try:
        handle(argv, state)
        return Reply(0)
    except Reply as r:
        return r


def finish(reply):
    sys.stdout.write(reply.stdout)
    sys.stderr.write(reply.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(reply.code)


def main():
    argv = sys.argv[1:]
    append(PIDS, str(os.getpid()))
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        append(CALLS, json.dumps(argv))
        append(STAMPS, json.dumps({"t": time.time(), "argv": argv}))
        state = load()
        # An argv outside the contract is refused before any scripted reply is used, so a
        # scripted failure can never hide a wrong invocation.
        probe = run(argv, copy.deepcopy(state))
        if probe.code == 2:
            finish(probe)
        step = state["script"].pop(0) if state["script"] else None
        if step is None:
            step = verb_step(argv, state)
        limit = state.get("rate_limit")
        if step is None and limit and argv[:2] not in (["auth", "status"], ["api", "rate_limit"]):
            if time.time() < float(limit["reset"]):
                limit["hits"] = limit.get("hits", 0) + 1
                step = {"code": 1, "stderr": RATE_LIMIT_STDERR}
        # issue 49: GitHub's write limits per identity (see write_limit_step).
        if step is None and is_write(argv):
            step = write_limit_step(state)
        if step is None and chaos_strikes(state):
            step = {"code": 1, "stderr": CHAOS_STDERR}
        save(state)
        fcntl.flock(lock, fcntl.LOCK_UN)
    if step and step.get("hang"):
        # Never answers, like a gh stuck on a dead connection; its child (as a real gh's
        # pager or credential helper would) holds the output pipes too.
        child = subprocess.Popen(["sleep", "3600"])
        append(HUNG, str(child.pid))
        while True:
            time.sleep(3600)
    if step and step.get("delay"):
        time.sleep(float(step["delay"]))
    if step and step.get("apply"):
        with open(LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = load()
            if run(argv, state).code == 0:
                save(state)
            fcntl.flock(lock, fcntl.LOCK_UN)
    if step and "code" in step:
        finish(Reply(int(step["code"]), step.get("stdout", ""), step.get("stderr", "")))
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = load()
        reply = run(argv, state)
        if reply.code == 0:
            save(state)
        fcntl.flock(lock, fcntl.LOCK_UN)
    if argv[:1] == ["api"] and "-i" in argv and reply.code in (0, 1):
        append(CONDITIONAL, "304" if reply.code == 1 else "200")
    finish(reply)


if __name__ == "__main__":
    main()
