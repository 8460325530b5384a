use crate::support;

#[test]
fn repo_with_origin_is_isolated_and_tracks_main() {
    let env = support::TestEnv::new();
    let repo = env.repo_with_origin();
    let head = env.git(&repo.path, &["rev-parse", "--abbrev-ref", "HEAD"]);
    assert_eq!(head.trim(), "main");
    let upstream = env.git(&repo.path, &["rev-parse", "origin/main"]);
    assert_eq!(upstream.trim().len(), 40);
    let who = env.git(&repo.path, &["config", "user.email"]);
    assert_eq!(who.trim(), "afk-test@example.invalid");
}
