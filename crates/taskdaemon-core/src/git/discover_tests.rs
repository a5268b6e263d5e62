use super::*;
use crate::git::testrepo::{commit_all, git, init};

/// Whatever the files say must be git's answer, field by field; `expect_read` says whether
/// the files are expected to answer at all in this shape.
fn same_as_git(dir: &Path, expect_read: bool) {
    let read = discover(dir);
    assert_eq!(read.is_some(), expect_read, "{}: {read:?}", dir.display());
    let Some(read) = read else { return };
    let asked = RepoFacts::ask(dir).expect("git answers where the files did");
    assert_eq!(read.toplevel, asked.toplevel, "{}", dir.display());
    assert_eq!(read.object_format, asked.object_format);
    assert_eq!(read.git_dir, asked.git_dir);
    assert_eq!(read.common_dir, asked.common_dir);
    assert_eq!(read.index, asked.index);
    assert_eq!(read.info_exclude, asked.info_exclude);
}

fn repo_with_a_commit(dir: &Path) {
    fs::create_dir_all(dir).unwrap();
    init(dir);
    fs::create_dir_all(dir.join("sub/deeper")).unwrap();
    fs::write(dir.join("sub/deeper/f"), "1").unwrap();
    commit_all(dir, "one");
}

#[test]
fn a_work_tree_its_subdirectories_and_a_symlinked_path_read_as_git_says() {
    let d = tempfile::tempdir().unwrap();
    let repo = d.path().join("r");
    repo_with_a_commit(&repo);
    same_as_git(&repo, true);
    same_as_git(&repo.join("sub"), true);
    same_as_git(&repo.join("sub/deeper"), true);
    std::os::unix::fs::symlink(&repo, d.path().join("link")).unwrap();
    same_as_git(&d.path().join("link/sub"), true);
    // An unborn branch: no commit yet.
    let fresh = d.path().join("fresh");
    fs::create_dir(&fresh).unwrap();
    init(&fresh);
    same_as_git(&fresh, true);
}

#[test]
fn linked_worktrees_with_absolute_and_relative_paths_read_as_git_says() {
    let d = tempfile::tempdir().unwrap();
    let repo = d.path().join("r");
    repo_with_a_commit(&repo);
    let wt = d.path().join("wt");
    git(
        &repo,
        &["worktree", "add", "-q", "-b", "w", wt.to_str().unwrap()],
    );
    same_as_git(&wt, true);
    same_as_git(&wt.join("sub/deeper"), true);
    let rel = d.path().join("rel");
    git(
        &repo,
        &[
            "-c",
            "worktree.useRelativePaths=true",
            "worktree",
            "add",
            "-q",
            "-b",
            "x",
            rel.to_str().unwrap(),
        ],
    );
    // Older git writes an absolute path either way; both must read right.
    same_as_git(&rel, true);
}

#[test]
fn a_sha256_repository_reads_its_format() {
    let d = tempfile::tempdir().unwrap();
    let out = std::process::Command::new("git")
        .args(["init", "-q", "--object-format=sha256"])
        .arg(d.path())
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .status()
        .unwrap();
    assert!(out.success());
    same_as_git(d.path(), true);
    assert_eq!(discover(d.path()).unwrap().object_format, "sha256");
}

#[test]
fn unusual_shapes_are_left_to_git() {
    let d = tempfile::tempdir().unwrap();
    let repo = d.path().join("r");
    repo_with_a_commit(&repo);
    // Inside the git directory, a bare repository, no repository at all.
    assert!(discover(&repo.join(".git")).is_none());
    assert!(discover(&repo.join(".git/refs")).is_none());
    let bare = d.path().join("bare");
    git(d.path(), &["init", "-q", "--bare", bare.to_str().unwrap()]);
    assert!(discover(&bare).is_none());
    // `core.worktree`, an include, an unknown extension, a continued line.
    for (key, value) in [
        ("core.worktree", repo.to_str().unwrap()),
        ("include.path", "/dev/null"),
        ("extensions.partialClone", "origin"),
    ] {
        let copy = d.path().join(format!("copy-{}", key.replace('.', "-")));
        repo_with_a_commit(&copy);
        git(&copy, &["config", key, value]);
        assert!(discover(&copy).is_none(), "{key}");
    }
    let odd = d.path().join("odd");
    repo_with_a_commit(&odd);
    let config = odd.join(".git/config");
    let text = fs::read_to_string(&config).unwrap();
    fs::write(
        &config,
        format!("{text}[alias]\n\tlong = log \\\n\t--oneline\n"),
    )
    .unwrap();
    assert!(discover(&odd).is_none());
    // A `.git` file that names nothing.
    let broken = d.path().join("broken");
    fs::create_dir(&broken).unwrap();
    fs::write(broken.join(".git"), "gitdir: /nowhere/at/all\n").unwrap();
    assert!(discover(&broken).is_none());
    fs::write(broken.join(".git"), "not a gitdir line\n").unwrap();
    assert!(discover(&broken).is_none());
}

#[test]
fn a_submodule_is_left_to_git_and_git_answers() {
    let d = tempfile::tempdir().unwrap();
    let inner = d.path().join("inner");
    repo_with_a_commit(&inner);
    let outer = d.path().join("outer");
    repo_with_a_commit(&outer);
    git(
        &outer,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            inner.to_str().unwrap(),
            "sub/inner",
        ],
    );
    // Its git directory's config sets `core.worktree`.
    let sub = outer.join("sub/inner");
    assert!(discover(&sub).is_none());
    assert_eq!(
        RepoFacts::of(&sub).unwrap().toplevel,
        fs::canonicalize(&sub).unwrap()
    );
}

#[test]
fn the_config_reader_takes_only_what_it_reads_for_certain() {
    assert_eq!(read_config("").as_deref(), Some("sha1"));
    assert_eq!(
        read_config("[core]\n\tbare = false ; comment\n\trepositoryformatversion = 1\n[extensions]\n\tobjectFormat = \"SHA256\"\n").as_deref(),
        Some("sha256")
    );
    assert_eq!(read_config("[Core]\n\tBare\n"), None);
    assert_eq!(read_config("[core]\n\tbare # a comment\n"), None);
    assert_eq!(read_config("[core]\n\tbare = yes\n"), None);
    assert_eq!(read_config("[core] bare = false\n"), None);
    assert_eq!(read_config("[core]\n\trepositoryformatversion = 2\n"), None);
    assert_eq!(read_config("[includeIf \"gitdir:~/\"]\n\tpath = x\n"), None);
    assert_eq!(read_config("[extensions]\n\tobjectformat = md5\n"), None);
    assert_eq!(read_config("[core]\n\tworktree = \"a\\\"b\"\n"), None);
    // A subsection named like a key is another section.
    assert_eq!(
        read_config("[core \"x\"]\n\tworktree = /elsewhere\n").as_deref(),
        Some("sha1")
    );
}

#[test]
fn a_commondir_planted_in_a_main_checkout_is_refused_not_followed() {
    let d = tempfile::tempdir().unwrap();
    let (repo, other) = (d.path().join("r"), d.path().join("other"));
    repo_with_a_commit(&repo);
    repo_with_a_commit(&other);
    assert!(discover(&repo).is_some());
    // What a sandboxed agent can write into a main checkout's `.git/`.
    fs::write(
        repo.join(".git/commondir"),
        format!("{}\n", other.join(".git").display()),
    )
    .unwrap();
    assert!(discover(&repo).is_none(), "git must be asked");
    let e = RepoFacts::of(&repo.join("sub")).unwrap_err().to_string();
    assert!(e.contains(".git/commondir sends every git command"), "{e}");
    assert!(e.contains("hint: read it"), "{e}");
    fs::remove_file(repo.join(".git/commondir")).unwrap();
    assert!(RepoFacts::of(&repo.join("sub")).is_ok());
}
