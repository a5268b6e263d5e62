use super::*;
use crate::git::testrepo::{commit_all, git, init};
use std::os::unix::fs::symlink;

fn repo() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let r = d.path().join("r");
    fs::create_dir(&r).unwrap();
    init(&r);
    fs::write(r.join("a"), "a").unwrap();
    commit_all(&r, "one");
    fs::create_dir_all(r.join(".git/hooks")).unwrap();
    fs::write(r.join(".git/hooks/pre-push"), "#!/bin/sh\nexit 0\n").unwrap();
    fs::set_permissions(
        r.join(".git/hooks/pre-push"),
        fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    (d, r)
}

fn paths(changes: &[GitChange], top: &Path) -> Vec<String> {
    changes
        .iter()
        .map(|c| {
            format!(
                "{} {}{}",
                c.path.strip_prefix(top).unwrap_or(&c.path).display(),
                c.change.label(),
                if c.not_restored.is_some() {
                    " kept"
                } else {
                    ""
                }
            )
        })
        .collect()
}

fn mode(p: &Path) -> u32 {
    fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn nothing_changed_is_nothing_reported() {
    let (_d, r) = repo();
    let g = GitGuard::record([r.as_path()]);
    // config, hooks, config.worktree, commondir.
    assert_eq!(g.len(), 4);
    assert!(g.restore().is_empty());
    // Git's own work (a commit, a status) changes none of it.
    fs::write(r.join("a"), "b").unwrap();
    commit_all(&r, "two");
    git(&r, &["status", "--porcelain"]);
    assert!(g.restore().is_empty());
}

#[test]
fn a_changed_config_planted_hooks_and_a_commondir_are_put_back() {
    let (_d, r) = repo();
    let config = fs::read(r.join(".git/config")).unwrap();
    let hook = fs::read(r.join(".git/hooks/pre-push")).unwrap();
    let g = GitGuard::record([r.as_path()]);
    git(&r, &["config", "core.fsmonitor", "touch /tmp/x #"]);
    for h in ["post-checkout", "reference-transaction"] {
        fs::write(r.join(".git/hooks").join(h), "#!/bin/sh\ntouch /tmp/x\n").unwrap();
    }
    fs::write(r.join(".git/hooks/pre-push"), "#!/bin/sh\ntouch /tmp/x\n").unwrap();
    fs::set_permissions(
        r.join(".git/hooks/pre-push"),
        fs::Permissions::from_mode(0o700),
    )
    .unwrap();
    fs::write(r.join(".git/commondir"), "/tmp/elsewhere\n").unwrap();
    let changes = g.restore();
    assert_eq!(
        paths(&changes, &r),
        [
            ".git/config changed",
            ".git/hooks/post-checkout added",
            ".git/hooks/reference-transaction added",
            ".git/hooks/pre-push changed",
            ".git/commondir added",
        ]
    );
    assert_eq!(fs::read(r.join(".git/config")).unwrap(), config);
    assert_eq!(fs::read(r.join(".git/hooks/pre-push")).unwrap(), hook);
    assert_eq!(mode(&r.join(".git/hooks/pre-push")), 0o755);
    assert!(!r.join(".git/hooks/post-checkout").exists());
    assert!(!r.join(".git/commondir").exists());
    // Once put back, nothing more to say.
    assert!(g.restore().is_empty());
}

#[test]
fn links_planted_in_place_of_the_files_are_removed_never_written_through() {
    let (d, r) = repo();
    let outside = d.path().join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("config"), "[core]\n\tfsmonitor = evil\n").unwrap();
    fs::write(outside.join("post-commit"), "evil").unwrap();
    let config = fs::read(r.join(".git/config")).unwrap();
    let g = GitGuard::record([r.as_path()]);
    fs::remove_file(r.join(".git/config")).unwrap();
    symlink(outside.join("config"), r.join(".git/config")).unwrap();
    fs::rename(r.join(".git/hooks"), d.path().join("old-hooks")).unwrap();
    symlink(&outside, r.join(".git/hooks")).unwrap();
    let changes = g.restore();
    assert_eq!(
        paths(&changes, &r),
        [".git/config changed", ".git/hooks changed"]
    );
    assert_eq!(fs::read(r.join(".git/config")).unwrap(), config);
    assert!(
        !fs::symlink_metadata(r.join(".git/hooks"))
            .unwrap()
            .is_symlink()
    );
    assert_eq!(
        fs::read_to_string(r.join(".git/hooks/pre-push")).unwrap(),
        "#!/bin/sh\nexit 0\n"
    );
    assert!(!r.join(".git/hooks/post-commit").exists());
    // The link's targets are as they were.
    assert_eq!(
        fs::read_to_string(outside.join("config")).unwrap(),
        "[core]\n\tfsmonitor = evil\n"
    );
    assert_eq!(
        fs::read_to_string(outside.join("post-commit")).unwrap(),
        "evil"
    );
    assert_eq!(fs::read_dir(&outside).unwrap().count(), 2);
}

#[test]
fn a_replaced_git_directory_is_reported_and_left_alone() {
    let (d, r) = repo();
    let g = GitGuard::record([r.as_path()]);
    fs::rename(r.join(".git"), d.path().join("moved")).unwrap();
    fs::create_dir(r.join(".git")).unwrap();
    fs::write(r.join(".git/config"), "evil").unwrap();
    let changes = g.restore();
    assert!(!changes.is_empty());
    assert!(
        changes.iter().all(|c| c.not_restored.is_some()),
        "{changes:?}"
    );
    assert_eq!(fs::read_to_string(r.join(".git/config")).unwrap(), "evil");
    assert!(
        changes[0].to_string().contains("NOT restored"),
        "{}",
        changes[0]
    );
}

#[test]
fn a_linked_worktree_watches_its_dot_git_file_commondir_and_the_common_config() {
    let (d, r) = repo();
    let wt = d.path().join("wt");
    git(
        &r,
        &["worktree", "add", "-q", wt.to_str().unwrap(), "-b", "w"],
    );
    let dot_git = fs::read(wt.join(".git")).unwrap();
    let g = GitGuard::record([r.as_path(), wt.as_path()]);
    fs::write(wt.join(".git"), "gitdir: /tmp/evil\n").unwrap();
    let common = r.join(".git/worktrees/wt/commondir");
    fs::write(&common, "/tmp/evil\n").unwrap();
    fs::write(r.join(".git/hooks/post-checkout"), "x").unwrap();
    let changes = g.restore();
    let p = paths(&changes, d.path());
    assert!(p.contains(&"wt/.git changed".to_string()), "{p:?}");
    assert!(
        p.contains(&"r/.git/worktrees/wt/commondir changed".to_string()),
        "{p:?}"
    );
    // The common hooks are watched once, for both.
    assert_eq!(
        p.iter().filter(|l| l.contains("post-checkout")).count(),
        1,
        "{p:?}"
    );
    assert_eq!(fs::read(wt.join(".git")).unwrap(), dot_git);
    assert_eq!(fs::read_to_string(&common).unwrap(), "../..\n");
}
