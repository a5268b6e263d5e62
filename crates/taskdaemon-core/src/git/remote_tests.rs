//! Real bare repositories and clones: what two machines sharing a remote see.

use std::path::{Path, PathBuf};

use super::*;
use crate::git::testrepo::{commit_all, git, init};
use crate::git::worktree::DEFAULT_BASE;

struct Fx {
    _d: tempfile::TempDir,
    bare: PathBuf,
    a: PathBuf,
    b: PathBuf,
}

/// A bare remote whose `main` has `a.txt`, and two clones of it (machines A and B).
fn fx() -> Fx {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().canonicalize().unwrap();
    let seed = root.join("seed");
    std::fs::create_dir(&seed).unwrap();
    init(&seed);
    std::fs::write(seed.join("a.txt"), "a1\na2\na3\n").unwrap();
    commit_all(&seed, "initial");
    let bare = root.join("remote.git");
    git(&root, &["clone", "-q", "--bare", "seed", "remote.git"]);
    let clone = |name: &str| {
        git(&root, &["clone", "-q", "remote.git", name]);
        let p = root.join(name);
        git(&p, &["config", "user.name", name]);
        git(&p, &["config", "user.email", "t@example.com"]);
        p
    };
    let a = clone("a");
    let b = clone("b");
    Fx { _d: d, bare, a, b }
}

fn remote(repo: &Path) -> (Worktrees, Remote) {
    let wt = Worktrees::open(repo, Path::new(DEFAULT_BASE)).unwrap();
    let r = Remote::open(&wt, "origin").unwrap();
    (wt, r)
}

/// A loop's worktree `name` on `taskdaemon/<name>` in `repo` with a commit writing `file`.
fn work(wt: &Worktrees, name: &str, file: &str, text: &str) -> PathBuf {
    let p = wt
        .ensure(name, &format!("taskdaemon/{name}"), "main")
        .unwrap();
    std::fs::write(p.join(file), text).unwrap();
    commit_all(&p, &format!("{name}: {file}"));
    p
}

fn remote_rev(f: &Fx, r: &str) -> String {
    git(&f.bare, &["rev-parse", r])
}

#[test]
fn a_missing_remote_is_an_error_with_a_hint() {
    let f = fx();
    let wt = Worktrees::open(&f.a, Path::new(DEFAULT_BASE)).unwrap();
    let e = Remote::open(&wt, "shared").unwrap_err().to_string();
    assert!(e.contains("no git remote `shared`"), "{e}");
    assert!(e.contains("queue-remote"), "{e}");
}

#[test]
fn a_remote_that_never_answers_is_given_up_on_and_its_transport_ended() {
    let f = fx();
    let (wt, _) = remote(&f.a);
    work(&wt, "s1", "x.txt", "x\n");
    // An ssh that connects and then waits forever (as one asking for a host key does).
    let pid_file = f.a.join(".git/ssh.pid");
    let ssh = format!("sh -c 'echo $$ > {}; exec sleep 600'", pid_file.display());
    git(
        &f.a,
        &["remote", "add", "slow", "ssh://taskdaemon.invalid/repo.git"],
    );
    git(&f.a, &["config", "core.sshCommand", &ssh]);
    let r = Remote::open(&wt, "slow")
        .unwrap()
        .with_timeout(std::time::Duration::from_secs(1));
    let t = std::time::Instant::now();
    let e = r.push_branch("taskdaemon/s1").unwrap_err();
    assert!(
        t.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        t.elapsed()
    );
    assert!(
        matches!(e, RemoteError::Git(GitError::TimedOut { .. })),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("did not finish within 1.0s and was ended"),
        "{msg}"
    );
    assert!(msg.contains("TASKDAEMON_REMOTE_TIMEOUT"), "{msg}");
    // Killed with its group (SIGKILL takes effect when it next runs): gone, or a zombie.
    // (No pid file: git was ended before it started the transport.)
    let pid = std::fs::read_to_string(&pid_file).unwrap_or_default();
    let stat = || {
        if pid.is_empty() {
            return String::new();
        }
        std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).unwrap_or_default()
    };
    let dead = |s: &str| {
        s.is_empty()
            || s.rsplit_once(')')
                .is_some_and(|(_, s)| s.trim_start().starts_with('Z'))
    };
    let t = std::time::Instant::now();
    while !dead(&stat()) && t.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(dead(&stat()), "the transport survived: {}", stat());
    assert!(matches!(
        r.fetch("main"),
        Err(RemoteError::Git(GitError::TimedOut { .. }))
    ));
}

#[test]
fn a_branch_whose_commits_add_a_secret_is_held_back_and_pushed_once_they_no_longer_do() {
    let f = fx();
    let (wt, r) = remote(&f.a);
    let p = work(&wt, "s1", "x.txt", "x\n");
    assert!(matches!(
        r.push_branch("taskdaemon/s1").unwrap(),
        Pushed::Pushed { .. }
    ));
    let pushed = remote_rev(&f, "refs/heads/taskdaemon/s1");
    std::fs::write(p.join(".env"), "TOKEN=1\n").unwrap();
    std::fs::write(p.join("y.txt"), "y\n").unwrap();
    commit_all(&p, "y and a key");
    assert_eq!(
        r.push_branch("taskdaemon/s1").unwrap(),
        Pushed::Held {
            paths: vec![".env".into()]
        }
    );
    assert_eq!(remote_rev(&f, "refs/heads/taskdaemon/s1"), pushed);
    // A new branch is looked at whole (what no other branch holds): held too.
    let q = work(&wt, "s2", "id_rsa", "KEY\n");
    assert!(matches!(
        r.push_branch("taskdaemon/s2").unwrap(),
        Pushed::Held { paths } if paths == ["id_rsa"]
    ));
    assert!(
        git_ok(
            &f.bare,
            &["rev-parse", "--verify", "-q", "refs/heads/taskdaemon/s2"]
        )
        .is_none()
    );
    // The agent takes it out of its commits: the branch goes.
    git(&p, &["rm", "-q", "--cached", ".env"]);
    git(&p, &["commit", "-q", "--amend", "-m", "y"]);
    let head = git(&p, &["rev-parse", "HEAD"]);
    assert_eq!(
        r.push_branch("taskdaemon/s1").unwrap(),
        Pushed::Pushed { commit: head }
    );
    assert!(p.join(".env").exists());
    let _ = q;
}

/// `git ARGS` in `dir`: its output, `None` when it fails.
fn git_ok(dir: &Path, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[test]
fn a_pushed_branch_is_on_the_remote_and_a_second_push_sends_nothing() {
    let f = fx();
    let (wt, r) = remote(&f.a);
    let p = work(&wt, "s1", "x.txt", "x\n");
    let head = git(&p, &["rev-parse", "HEAD"]);
    assert_eq!(
        r.push_branch("taskdaemon/s1").unwrap(),
        Pushed::Pushed {
            commit: head.clone()
        }
    );
    assert_eq!(remote_rev(&f, "refs/heads/taskdaemon/s1"), head);
    assert_eq!(r.push_branch("taskdaemon/s1").unwrap(), Pushed::UpToDate);
    // One more commit goes too.
    std::fs::write(p.join("y.txt"), "y\n").unwrap();
    commit_all(&p, "y");
    let head2 = git(&p, &["rev-parse", "HEAD"]);
    assert!(
        matches!(r.push_branch("taskdaemon/s1").unwrap(), Pushed::Pushed { commit } if commit == head2)
    );
    assert_eq!(remote_rev(&f, "refs/heads/taskdaemon/s1"), head2);
}

#[test]
fn a_push_the_remote_refuses_is_an_error_not_a_moved_branch() {
    use std::os::unix::fs::PermissionsExt;
    let f = fx();
    let hook = f.bare.join("hooks/pre-receive");
    std::fs::write(
        &hook,
        "#!/bin/sh\necho 'protected: no pushes' >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (wt, r) = remote(&f.a);
    work(&wt, "s1", "x.txt", "x\n");
    match r.push_branch("taskdaemon/s1") {
        Err(RemoteError::Refused { reason, .. }) => {
            assert!(reason.contains("remote rejected"), "{reason}")
        }
        other => panic!("a hook's refusal must be Refused, got {other:?}"),
    }
}

#[test]
fn a_takeover_continues_from_the_pushed_branch_and_the_old_holder_cannot_overwrite_it() {
    let f = fx();
    let (wa, ra) = remote(&f.a);
    let pa = work(&wa, "s1", "x.txt", "x\n");
    ra.push_branch("taskdaemon/s1").unwrap();
    let pushed = git(&pa, &["rev-parse", "HEAD"]);

    // B takes the run over: the branch is made from the remote's, its worktree on it.
    let (wb, rb) = remote(&f.b);
    let pb_dir = wb.path_for("s1");
    assert_eq!(
        rb.adopt("taskdaemon/s1", &pb_dir).unwrap(),
        Adopted::Created {
            commit: pushed.clone()
        }
    );
    let pb = wb.ensure("s1", "taskdaemon/s1", "main").unwrap();
    assert_eq!(git(&pb, &["rev-parse", "HEAD"]), pushed);
    assert_eq!(std::fs::read_to_string(pb.join("x.txt")).unwrap(), "x\n");
    std::fs::write(pb.join("z.txt"), "z\n").unwrap();
    commit_all(&pb, "z on B");
    assert!(matches!(
        rb.push_branch("taskdaemon/s1").unwrap(),
        Pushed::Pushed { .. }
    ));
    let b_head = git(&pb, &["rev-parse", "HEAD"]);

    // A (a zombie that committed after losing its lease) is refused: B's work stays.
    std::fs::write(pa.join("late.txt"), "late\n").unwrap();
    commit_all(&pa, "late on A");
    assert!(matches!(
        ra.push_branch("taskdaemon/s1").unwrap(),
        Pushed::Rejected { .. }
    ));
    assert_eq!(remote_rev(&f, "refs/heads/taskdaemon/s1"), b_head);
}

#[test]
fn a_stale_worktree_is_replaced_by_the_remote_branch_after_its_work_is_kept() {
    let f = fx();
    let (wa, ra) = remote(&f.a);
    let pa = work(&wa, "s1", "x.txt", "x\n");
    ra.push_branch("taskdaemon/s1").unwrap();
    // A dies with a local commit it never pushed and an edit it never committed.
    std::fs::write(pa.join("unpushed.txt"), "u\n").unwrap();
    commit_all(&pa, "unpushed on A");
    let unpushed = git(&pa, &["rev-parse", "HEAD"]);
    std::fs::write(pa.join("x.txt"), "half-done edit\n").unwrap();

    // B went on meanwhile.
    let (wb, rb) = remote(&f.b);
    rb.adopt("taskdaemon/s1", &wb.path_for("s1")).unwrap();
    let pb = wb.ensure("s1", "taskdaemon/s1", "main").unwrap();
    std::fs::write(pb.join("b.txt"), "b\n").unwrap();
    commit_all(&pb, "b");
    rb.push_branch("taskdaemon/s1").unwrap();
    let b_head = git(&pb, &["rev-parse", "HEAD"]);

    // A restarts and gets the spec's next phase: the remote's branch is the truth.
    let got = ra.adopt("taskdaemon/s1", &pa).unwrap();
    let Adopted::Replaced {
        commit,
        saved,
        stash,
    } = got
    else {
        panic!("{got:?}")
    };
    assert_eq!(commit, b_head);
    assert_eq!(git(&pa, &["rev-parse", "HEAD"]), b_head);
    assert_eq!(git(&pa, &["status", "--porcelain"]), "");
    assert_eq!(git(&f.a, &["rev-parse", &saved]), unpushed);
    let stash = stash.expect("the edit was stashed");
    assert!(git(&pa, &["show", &format!("{stash}:x.txt")]).contains("half-done edit"));
}

#[test]
fn a_local_branch_behind_is_fast_forwarded_and_one_ahead_is_kept() {
    let f = fx();
    let (wa, ra) = remote(&f.a);
    let pa = work(&wa, "s1", "x.txt", "x\n");
    ra.push_branch("taskdaemon/s1").unwrap();
    let (wb, rb) = remote(&f.b);
    rb.adopt("taskdaemon/s1", &wb.path_for("s1")).unwrap();
    let pb = wb.ensure("s1", "taskdaemon/s1", "main").unwrap();
    std::fs::write(pb.join("b.txt"), "b\n").unwrap();
    commit_all(&pb, "b");
    rb.push_branch("taskdaemon/s1").unwrap();
    let b_head = git(&pb, &["rev-parse", "HEAD"]);

    assert_eq!(
        ra.adopt("taskdaemon/s1", &pa).unwrap(),
        Adopted::FastForwarded {
            commit: b_head.clone()
        }
    );
    assert_eq!(git(&pa, &["rev-parse", "HEAD"]), b_head);
    assert_eq!(std::fs::read_to_string(pa.join("b.txt")).unwrap(), "b\n");
    std::fs::write(pa.join("c.txt"), "c\n").unwrap();
    commit_all(&pa, "c");
    assert_eq!(ra.adopt("taskdaemon/s1", &pa).unwrap(), Adopted::Ahead);
    assert_eq!(
        ra.adopt("taskdaemon/none", &wa.path_for("none")).unwrap(),
        Adopted::NotOnRemote
    );
}

#[test]
fn merges_from_two_clones_both_land_on_the_remote_target_once() {
    let f = fx();
    let (wa, ra) = remote(&f.a);
    let (wb, rb) = remote(&f.b);
    let pa = work(&wa, "s1", "one.txt", "1\n");
    let pb = work(&wb, "s2", "two.txt", "2\n");
    let a = ra.merge("taskdaemon/s1", "main", "merge s1", 3).unwrap();
    assert!(
        matches!(
            a,
            RemoteMerge::Merged {
                fast_forward: true,
                ..
            }
        ),
        "{a:?}"
    );
    let b = rb.merge("taskdaemon/s2", "main", "merge s2", 3).unwrap();
    assert!(
        matches!(
            b,
            RemoteMerge::Merged {
                fast_forward: false,
                ..
            }
        ),
        "{b:?}"
    );
    let tip = remote_rev(&f, "refs/heads/main");
    for (p, file) in [(&pa, "one.txt"), (&pb, "two.txt")] {
        let c = git(p, &["rev-parse", "HEAD"]);
        git(&f.bare, &["merge-base", "--is-ancestor", &c, &tip]);
        git(&f.bare, &["cat-file", "-e", &format!("{tip}:{file}")]);
    }
    // Again: nothing is merged twice.
    assert_eq!(
        ra.merge("taskdaemon/s1", "main", "merge s1", 3).unwrap(),
        RemoteMerge::AlreadyIn {
            commit: tip.clone()
        }
    );
    assert_eq!(remote_rev(&f, "refs/heads/main"), tip);
}

#[test]
fn a_rejected_push_of_the_target_is_redone_on_the_new_tip_and_bounded() {
    let f = fx();
    let (wa, ra) = remote(&f.a);
    let (wb, rb) = remote(&f.b);
    work(&wa, "s1", "one.txt", "1\n");
    work(&wb, "s2", "two.txt", "2\n");
    // B's merge lands just before A pushes its first attempt.
    let mut moved = false;
    let got = ra
        .merge_hooked("taskdaemon/s1", "main", "merge s1", 3, &mut |_| {
            if !moved {
                moved = true;
                rb.merge("taskdaemon/s2", "main", "merge s2", 3).unwrap();
            }
        })
        .unwrap();
    assert!(
        matches!(
            got,
            RemoteMerge::Merged {
                tries: 2,
                fast_forward: false,
                ..
            }
        ),
        "{got:?}"
    );
    let tip = remote_rev(&f, "refs/heads/main");
    git(&f.bare, &["cat-file", "-e", &format!("{tip}:one.txt")]);
    git(&f.bare, &["cat-file", "-e", &format!("{tip}:two.txt")]);

    // A target that moves before every push: bounded, an error with a hint.
    work(&wb, "s3", "three.txt", "3\n");
    work(&wa, "s4", "four.txt", "4\n");
    let mut n = 0;
    let e = ra
        .merge_hooked("taskdaemon/s4", "main", "merge s4", 2, &mut |_| {
            n += 1;
            let p = wb.path_for("s3");
            std::fs::write(p.join(format!("bump{n}.txt")), "b\n").unwrap();
            commit_all(&p, "bump");
            git(
                &p,
                &["push", "-q", "origin", "HEAD:refs/heads/main", "--force"],
            );
        })
        .unwrap_err();
    assert!(matches!(e, RemoteError::KeptMoving { tries: 2, .. }), "{e}");
    assert!(e.to_string().contains("hint:"), "{e}");
}

#[test]
fn merging_a_branch_this_clone_does_not_have_is_an_error() {
    let f = fx();
    let (_wa, ra) = remote(&f.a);
    let e = ra.merge("taskdaemon/none", "main", "m", 2).unwrap_err();
    assert!(matches!(e, RemoteError::NoBranch(_)), "{e}");
    assert!(e.to_string().contains("hint:"), "{e}");
}

#[test]
fn a_conflict_changes_nothing_on_the_remote() {
    let f = fx();
    let (wa, ra) = remote(&f.a);
    let (wb, rb) = remote(&f.b);
    work(&wa, "s1", "a.txt", "A side\n");
    work(&wb, "s2", "a.txt", "B side\n");
    ra.merge("taskdaemon/s1", "main", "merge s1", 3).unwrap();
    let tip = remote_rev(&f, "refs/heads/main");
    let got = rb.merge("taskdaemon/s2", "main", "merge s2", 3).unwrap();
    assert_eq!(
        got,
        RemoteMerge::Conflict {
            files: vec!["a.txt".to_string()]
        }
    );
    assert_eq!(remote_rev(&f, "refs/heads/main"), tip);
}

#[test]
fn documents_published_by_one_clone_are_read_by_the_other() {
    let f = fx();
    let (_wa, ra) = remote(&f.a);
    let (_wb, rb) = remote(&f.b);
    assert_eq!(rb.fetch_files("docs/p1").unwrap(), None);
    let files = vec![
        (".taskdaemon/plans/p1.md".to_string(), b"# Plan\n".to_vec()),
        (
            ".taskdaemon/specs/p1/01-a.md".to_string(),
            b"---\ntitle: a\n---\n".to_vec(),
        ),
    ];
    ra.publish_files("docs/p1", &files).unwrap();
    let mut got = rb.fetch_files("docs/p1").unwrap().unwrap();
    got.sort();
    assert_eq!(got, files);
    // Published again (a later iteration): the new set replaces the old one.
    let fewer = vec![(
        ".taskdaemon/plans/p1.md".to_string(),
        b"# Plan v2\n".to_vec(),
    )];
    ra.publish_files("docs/p1", &fewer).unwrap();
    assert_eq!(rb.fetch_files("docs/p1").unwrap().unwrap(), fewer);
    // No branch of the remote changed.
    assert_eq!(git(&f.bare, &["branch", "--list"]), "* main");
}

#[test]
fn only_what_the_remote_lacks_is_kept_before_a_stale_worktree_goes() {
    let f = fx();
    let (wa, ra) = remote(&f.a);
    let pa = work(&wa, "s1", "x.txt", "x\n");
    ra.push_branch("taskdaemon/s1").unwrap();
    // Everything is on the remote: nothing to keep.
    assert!(
        ra.keep_unpushed("taskdaemon/s1", "main", &pa)
            .unwrap()
            .is_empty()
    );
    // A commit never pushed and an edit never committed are kept.
    std::fs::write(pa.join("y.txt"), "y\n").unwrap();
    commit_all(&pa, "unpushed");
    let unpushed = git(&pa, &["rev-parse", "HEAD"]);
    std::fs::write(pa.join("x.txt"), "edit\n").unwrap();
    let kept = ra.keep_unpushed("taskdaemon/s1", "main", &pa).unwrap();
    assert_eq!(kept.len(), 2, "{kept:?}");
    let saved = format!("refs/taskdaemon/stale/taskdaemon/s1/{}", &unpushed[..12]);
    assert_eq!(git(&f.a, &["rev-parse", &saved]), unpushed);
    assert!(git(&pa, &["stash", "show", "-p"]).contains("edit"));
    assert_eq!(git(&pa, &["status", "--porcelain"]), "");
}
