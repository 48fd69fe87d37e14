//! Hostile repository shapes, each made with Git's own plumbing (`git
//! hash-object`, `git mktree`, `git update-index --cacheinfo`): names Git
//! never checks out, names that are not UTF-8, paths that differ only in
//! case, submodules, LFS pointers, and symlinks in mirror mode. Each is
//! refused or left out at its own path, named in status, and never holds
//! prune: the rest of the revision applies and later deletions are pruned.

mod util;

use std::os::unix::ffi::OsStrExt;

use util::{Env, TestRepo};

fn blob(repo: &TestRepo, content: &str) -> String {
    repo.git_with_input(&["hash-object", "-w", "--stdin"], content.as_bytes())
}

/// A tree from `(mode, id, name)` entries; names are raw bytes.
fn tree(repo: &TestRepo, entries: &[(&str, &str, &[u8])]) -> String {
    let mut input = Vec::new();
    for (mode, id, name) in entries {
        let kind = if *mode == "040000" { "tree" } else { "blob" };
        input.extend(format!("{mode} {kind} {id}\t").as_bytes());
        input.extend(*name);
        input.push(b'\n');
    }
    repo.git_with_input(&["mktree"], &input)
}

/// Makes `tree` the next commit on main. The work tree is left as it was:
/// Git would refuse to check such a tree out.
fn commit_tree(repo: &TestRepo, tree: &str, message: &str) -> String {
    let parent = repo.git(&["rev-parse", "main"]);
    let commit = repo.git(&["commit-tree", tree, "-p", &parent, "-m", message]);
    repo.git(&["update-ref", "refs/heads/main", &commit]);
    commit
}

fn blocked_reason(env: &Env, id: &str) -> String {
    let r = env
        .resource(id)
        .unwrap_or_else(|| panic!("{id} not in status: {}", env.status()));
    assert_eq!(r["state"], "Blocked", "{r}");
    r["reason"].as_str().unwrap_or_default().to_string()
}

/// Every name Git refuses as `.git`, each as a directory holding a
/// repository's files (HEAD, config with a command in core.fsmonitor).
const DOT_GIT_NAMES: [&str; 8] = [
    ".git",
    ".GIT",
    "git~1",
    ".git. ",
    ".git...",
    ".git::$INDEX_ALLOCATION",
    ".g\u{200c}it",
    "\u{feff}.Git",
];

/// A commit whose `www` holds every name of [`DOT_GIT_NAMES`] beside
/// plain files (`old.html` only `with_old`), and `extra` files at the top.
fn crafted_dot_git_commit(env: &Env, with_old: bool, extra: &[(&str, &str)]) {
    let head = blob(&env.repo, "ref: refs/heads/main\n");
    let config = blob(
        &env.repo,
        "[core]\n\tfsmonitor = touch /tmp/pwned-by-tend\n",
    );
    let git_dir = tree(
        &env.repo,
        &[("100644", &head, b"HEAD"), ("100644", &config, b"config")],
    );
    let (index, old) = (blob(&env.repo, "<p>hi</p>"), blob(&env.repo, "old"));
    let mut www: Vec<(&str, &str, &[u8])> = vec![
        ("100644", &index, b"index.html"),
        // A file, too, named as a stream of `.git`.
        ("100644", &config, b".git:config"),
    ];
    if with_old {
        www.push(("100644", &old, b"old.html"));
    }
    for name in DOT_GIT_NAMES {
        www.push(("040000", &git_dir, name.as_bytes()));
    }
    let www = tree(&env.repo, &www);
    let top = blob(&env.repo, "top");
    let extra: Vec<(String, &str)> = extra
        .iter()
        .map(|(name, content)| (blob(&env.repo, content), *name))
        .collect();
    let mut root: Vec<(&str, &str, &[u8])> =
        vec![("100644", &top, b"top.txt"), ("040000", &www, b"www")];
    for (id, name) in &extra {
        root.push(("100644", id, name.as_bytes()));
    }
    let root = tree(&env.repo, &root);
    commit_tree(&env.repo, &root, "crafted .git entries");
}

/// No file or directory under the root is one Git would refuse.
fn assert_no_dot_git_under(root: &std::path::Path) {
    for (path, _) in util::snapshot_tree(root) {
        let name = path.file_name().unwrap().to_string_lossy().to_lowercase();
        assert!(
            !name.contains(".git") && !name.contains("git~1") && !name.contains(".g\u{200c}it"),
            "{path:?} was applied"
        );
    }
}

#[test]
fn crafted_dot_git_entries_are_refused_per_path_and_the_rest_applies() {
    let env = Env::new();
    env.repo.write("README", "first");
    env.repo.commit("first");
    crafted_dot_git_commit(&env, true, &[]);
    let s = env.tend(&["sync", "--mirror"]);
    assert_eq!(s.code, 3, "{s:?}");
    assert_eq!(env.read("www/index.html"), "<p>hi</p>");
    assert_eq!(env.read("top.txt"), "top");
    assert_no_dot_git_under(env.root());
    for name in DOT_GIT_NAMES {
        let reason = blocked_reason(&env, &format!("files/file/www/{name}"));
        assert!(
            reason.contains(&format!("www/{name}")) && reason.contains("`.git`"),
            "{name:?}: {reason}"
        );
    }
    blocked_reason(&env, "files/file/www/.git:config");
    assert!(
        s.stderr.contains("blocked: files/file/www/.GIT: www/.GIT:"),
        "{s:?}"
    );
    let v = env.tend(&["validate", "--mirror"]);
    assert_eq!(v.code, 1, "{v:?}");
    assert!(
        v.stdout
            .contains("refused files/file/www/git~1: www/git~1:")
            && v.stdout.contains("0 problems, 9 paths refused"),
        "{v:?}"
    );
    let status = env.status();
    assert!(
        status["problems"].as_array().unwrap().is_empty(),
        "refused paths are no declaration problems: {status}"
    );

    assert_eq!(env.read("www/old.html"), "old");
    // Prune is not held: a file deleted in a later commit goes.
    crafted_dot_git_commit(&env, false, &[]);
    let s = env.tend(&["sync", "--mirror"]);
    assert_eq!(s.code, 3, "{s:?}");
    assert!(!env.at("www/old.html").exists(), "{s:?}");
    assert_no_dot_git_under(env.root());
}

#[test]
fn a_declared_directory_holding_dot_git_applies_only_the_rest() {
    let env = Env::new();
    env.repo.write("README", "first");
    env.repo.commit("first");
    let decl = "kind: directory\npath: srv/site\nsource: www/\n---\nkind: file\npath: srv/.git/config\ncontent: \"[core]\\n\"\n";
    crafted_dot_git_commit(&env, true, &[("site.tend.yaml", decl)]);
    let s = env.tend(&["sync"]);
    assert_eq!(s.code, 3, "{s:?}");
    assert_eq!(env.read("srv/site/index.html"), "<p>hi</p>");
    assert_no_dot_git_under(env.root());
    blocked_reason(&env, "files/file/srv/site/.git");
    blocked_reason(&env, "files/file/srv/site/git~1");
    // A declared path with a `.git` component is an invalid declaration.
    let reason = blocked_reason(&env, "files/file/srv/.git/config");
    assert!(reason.contains("\".git\""), "{reason}");
}

#[test]
fn a_name_that_is_not_utf8_refuses_only_that_path() {
    let env = Env::new();
    env.repo.write("ok.html", "ok").write("gone.html", "gone");
    // Committed by `git add`, as a user would.
    let odd = env
        .repo
        .path()
        .join(std::ffi::OsStr::from_bytes(b"caf\xe9.html"));
    std::fs::write(&odd, "caf\u{e9}").unwrap();
    env.repo.commit("odd name");
    let s = env.tend(&["sync", "--mirror"]);
    assert_eq!(s.code, 3, "{s:?}");
    assert_eq!(env.read("ok.html"), "ok");
    assert!(!env
        .root()
        .join(std::ffi::OsStr::from_bytes(b"caf\xe9.html"))
        .exists());
    let reason = blocked_reason(&env, "files/file/caf\\xe9.html");
    assert!(
        reason.contains("caf\\xe9.html") && reason.contains("UTF-8"),
        "{reason}"
    );
    let text = env.tend(&["status"]);
    assert!(text.stdout.contains("caf\\xe9.html"), "{text:?}");

    // Prune goes on.
    env.repo.remove("gone.html");
    env.repo.commit("drop gone");
    let s = env.tend(&["sync", "--mirror"]);
    assert_eq!(s.code, 3, "{s:?}");
    assert!(!env.at("gone.html").exists());
}

#[test]
fn paths_that_differ_only_in_case_are_both_blocked() {
    let env = Env::new();
    env.repo
        .write("conf/README", "upper")
        .write("conf/readme", "lower")
        .write("conf/Caf\u{c9}", "upper")
        .write("conf/caf\u{e9}", "lower")
        .write("conf/other", "other");
    env.repo.commit("case");
    let s = env.tend(&["sync", "--mirror"]);
    assert_eq!(s.code, 3, "{s:?}");
    assert_eq!(env.read("conf/other"), "other");
    for p in [
        "conf/README",
        "conf/readme",
        "conf/Caf\u{c9}",
        "conf/caf\u{e9}",
    ] {
        assert!(!env.at(p).exists(), "{p} applied");
        let reason = blocked_reason(&env, &format!("files/file/{p}"));
        assert!(reason.contains("differ only in case"), "{reason}");
    }
    // Renaming one of them fixes it.
    env.repo
        .remove("conf/readme")
        .write("conf/readme.txt", "lower");
    env.repo.commit("rename");
    let s = env.tend(&["sync", "--mirror"]);
    assert_eq!(s.code, 3, "{s:?}");
    assert_eq!(env.read("conf/README"), "upper");
    assert_eq!(env.read("conf/readme.txt"), "lower");
}

#[test]
fn an_lfs_pointer_is_blocked_at_its_path_and_prune_goes_on() {
    let env = Env::new();
    env.repo
        .write(
            ".gitattributes",
            "*.bin filter=lfs diff=lfs merge=lfs -text\n",
        )
        .write(
            "data.bin",
            "version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 1\n",
        )
        .write("a.txt", "a")
        .write("b.txt", "b");
    env.repo.commit("lfs");
    let s = env.tend(&["sync", "--mirror"]);
    assert_eq!(s.code, 3, "{s:?}");
    assert!(!env.at("data.bin").exists());
    let reason = blocked_reason(&env, "files/file/data.bin");
    assert!(
        reason.contains("data.bin") && reason.contains("LFS"),
        "{reason}"
    );
    env.repo.remove("b.txt");
    env.repo.commit("drop b");
    assert_eq!(env.tend(&["sync", "--mirror"]).code, 3);
    assert!(!env.at("b.txt").exists());
    assert_eq!(env.read("a.txt"), "a");
}

/// A repository as git-sync users have them: a submodule, a link to a
/// directory, a dangling link, a link to a file.
fn sidecar_repo(env: &Env) {
    env.repo
        .write("site/v2/app.conf", "v2")
        .write("site/v2/old.txt", "old")
        .symlink("site/current", "v2")
        .symlink("site/gone", "missing.txt")
        .symlink("site/app.conf", "current/app.conf")
        .write("shared/common.conf", "common")
        .symlink("site/common.conf", "../shared/common.conf");
    env.repo.commit("site");
    // A gitlink, as `git submodule add` leaves one, without its repository.
    let pinned = env.repo.git(&["rev-parse", "HEAD"]);
    env.repo.git(&[
        "update-index",
        "--add",
        "--cacheinfo",
        &format!("160000,{pinned},site/vendor/lib"),
    ]);
    env.repo.write(
        ".gitmodules",
        "[submodule \"lib\"]\n\tpath = site/vendor/lib\n\turl = ../lib.git\n",
    );
    env.repo.git(&["add", ".gitmodules"]);
    env.repo.git(&["commit", "-q", "-m", "submodule"]);
}

#[test]
fn mirror_mode_publishes_links_as_links_and_leaves_submodules_out() {
    let env = Env::new();
    sidecar_repo(&env);
    let s = env.tend(&["sync", "--mirror", "--path", "site"]);
    assert_eq!(s.code, 0, "{s:?}");
    let link = |p: &str| std::fs::read_link(env.at(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
    assert_eq!(link("current"), std::path::Path::new("v2"));
    assert_eq!(link("gone"), std::path::Path::new("missing.txt"));
    assert!(!env.at("gone").exists(), "dangling, as in the repository");
    assert_eq!(link("app.conf"), std::path::Path::new("current/app.conf"));
    assert_eq!(env.read("app.conf"), "v2");
    // A link leaving the mirrored path is published as the file it names.
    assert!(!std::fs::symlink_metadata(env.at("common.conf"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(env.read("common.conf"), "common");
    assert!(!env.at("vendor/lib").exists());
    assert!(s.stderr.contains("vendor/lib"), "{s:?}");
    let status = env.status();
    let warnings = status["source"]["warnings"].to_string();
    assert!(
        warnings.contains("vendor/lib") && warnings.contains("submodule"),
        "{status}"
    );
    // Converged: a second sync writes nothing and still exits 0.
    assert_eq!(env.tend(&["sync", "--mirror", "--path", "site"]).code, 0);

    // A file deleted in a later commit is pruned.
    env.repo.remove("site/v2/old.txt");
    env.repo.commit("drop old");
    let s = env.tend(&["sync", "--mirror", "--path", "site"]);
    assert_eq!(s.code, 0, "{s:?}");
    assert!(!env.at("v2/old.txt").exists());
    assert_eq!(env.read("current/app.conf"), "v2");
}

#[test]
fn a_mirrored_link_out_of_the_repository_is_refused_and_the_rest_converges() {
    let env = Env::new();
    env.repo
        .write("a.txt", "a")
        .symlink("passwd", "/etc/passwd")
        .symlink("up", "../../../../etc");
    env.repo.commit("escapes");
    let s = env.tend(&["sync", "--mirror"]);
    assert_eq!(s.code, 3, "{s:?}");
    assert_eq!(env.read("a.txt"), "a");
    for p in ["passwd", "up"] {
        assert!(std::fs::symlink_metadata(env.at(p)).is_err(), "{p}");
        let reason = blocked_reason(&env, &format!("files/file/{p}"));
        assert!(reason.contains("outside the repository"), "{reason}");
    }
}

#[test]
fn recursive_submodules_are_a_clear_config_error() {
    let env = Env::new();
    env.repo.write("a", "a");
    env.repo.commit("a");
    let config = env.config("source:\n  mirror: true\n  submodules: recursive\n");
    let s = env.tend(&["sync", "-c", config.to_str().unwrap()]);
    assert_eq!(s.code, 2, "{s:?}");
    assert!(
        s.stderr.contains("tend.yaml:3") && s.stderr.contains("not supported yet"),
        "{s:?}"
    );
    let config = env.config("source:\n  mirror: true\n  submodules: skip\n");
    assert_eq!(env.tend(&["sync", "-c", config.to_str().unwrap()]).code, 0);
}

#[test]
fn ref_head_and_every_ref_git_accepts_work() {
    let env = Env::new();
    env.repo.write("v", "one");
    let first = env.repo.commit("one");
    env.repo.git(&["tag", "v1"]);
    env.repo.write("v", "two");
    env.repo.commit("two");
    for (reference, want) in [
        ("HEAD", "two"),
        ("v1", "one"),
        ("main", "two"),
        ("refs/heads/main", "two"),
        (first.as_str(), "one"),
        (&first[..10], "one"),
    ] {
        let s = env.tend(&["sync", "--mirror", "--ref", reference]);
        assert_eq!(s.code, 0, "{reference}: {s:?}");
        assert_eq!(env.read("v"), want, "{reference}");
    }
}

#[test]
fn the_daemon_follows_head_in_mirror_mode_with_links_and_submodules() {
    let env = Env::new();
    sidecar_repo(&env);
    let mut d = env.daemon(&[
        "--interval",
        "1s",
        "--mirror",
        "--path",
        "site",
        "--ref",
        "HEAD",
    ]);
    let converged = |env: &Env| {
        let s = env.status();
        s["counts"]["InSync"].as_u64().unwrap_or(0) > 0
            && s["resources"]
                .as_array()
                .is_some_and(|r| r.iter().all(|r| r["state"] == "InSync"))
    };
    assert!(
        util::wait_until(30, || converged(&env) && env.at("current").exists()),
        "{}\n{}",
        env.status(),
        env.daemon_log()
    );
    assert_eq!(
        std::fs::read_link(env.at("current")).unwrap(),
        std::path::Path::new("v2")
    );
    // The page names the submodule left out, in the source section.
    let addr = util::http::listening_addr(&env.daemon_log()).expect("listening");
    let page = util::http::get(addr, "/").text();
    assert!(
        page.contains("Left out") && page.contains("site/vendor/lib"),
        "{page}"
    );
    // A later commit deletes a file, retargets a link and adds one: the
    // changes are patched in (and checked against a whole read).
    env.repo.remove("site/v2/old.txt");
    env.repo.write("site/v3/app.conf", "v3");
    env.repo.symlink("site/current", "v3");
    env.repo.symlink("site/next", "v4");
    env.repo.commit("v3");
    assert!(
        util::wait_until(30, || !env.at("v2/old.txt").exists()
            && std::fs::read_link(env.at("current"))
                .is_ok_and(|l| l == std::path::Path::new("v3"))
            && std::fs::read_link(env.at("next")).is_ok()),
        "{}\n{}",
        env.status(),
        env.daemon_log()
    );
    assert_eq!(env.read("app.conf"), "v3");
    assert!(
        !env.daemon_log().contains("panicked"),
        "{}",
        env.daemon_log()
    );
    assert_eq!(d.stop(20), Some(0));
}
