//! `tend diff --against`, driven through the binary on real repositories,
//! in a sandbox that shows whatever it leaves behind (HOME,
//! XDG_STATE_HOME, TMPDIR and, as root, an empty /var/lib in a private
//! mount namespace).

mod util;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use util::sandbox::Sandbox;
use util::{servers, snapshot_tree, Run, TestRepo};

/// `-o json` changes as id -> (action, fields).
fn changes(run: &Run) -> BTreeMap<String, (String, Vec<String>)> {
    let v: serde_json::Value =
        serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {run:?}"));
    v["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let fields = c["fields"].as_array().unwrap();
            (
                c["id"].as_str().unwrap().to_string(),
                (
                    c["action"].as_str().unwrap().to_string(),
                    fields
                        .iter()
                        .map(|f| f.as_str().unwrap().to_string())
                        .collect(),
                ),
            )
        })
        .collect()
}

fn expect(list: &[(&str, &str, &[&str])]) -> BTreeMap<String, (String, Vec<String>)> {
    list.iter()
        .map(|(id, action, fields)| {
            let fields = fields.iter().map(|f| f.to_string()).collect();
            (id.to_string(), (action.to_string(), fields))
        })
        .collect()
}

const BEFORE: &str = "kind: file\npath: etc/motd\ncontent: \"hello\\n\"\n---\nkind: file\npath: etc/app.conf\nsource: app.conf\nmode: \"0644\"\n---\nkind: file\npath: etc/old\ncontent: \"old\\n\"\n---\nkind: symlink\npath: etc/current\ntarget_path: app.conf\n---\nkind: file\npath: etc/owned\ncontent: \"o\\n\"\nowner: www-data-ci\n";

const AFTER: &str = "kind: file\npath: etc/motd\ncontent: \"hello, world\\n\"\non_change: motd-reload\n---\nkind: file\npath: etc/app.conf\nsource: app.conf\nmode: \"0600\"\n---\nkind: file\npath: etc/new\ncontent: \"new\\n\"\n---\nkind: symlink\npath: etc/current\ntarget_path: app.conf.new\n---\nkind: file\npath: etc/owned\ncontent: \"o\\n\"\nowner: nginx-ci\n---\nkind: flag\nname: beta\nspec: {on: true}\n";

/// Two commits: returns (before, after) commit ids.
fn two_commits(repo: &TestRepo) -> (String, String) {
    repo.write("hosts/web-1/site.tend.yaml", BEFORE)
        .write("hosts/web-1/app.conf", "port=80\n");
    let before = repo.commit("before");
    repo.write("hosts/web-1/site.tend.yaml", AFTER);
    let after = repo.commit("after");
    (before, after)
}

#[test]
fn against_lists_exactly_the_declared_changes_and_touches_nothing() {
    let repo = TestRepo::new();
    let (before, after) = two_commits(&repo);
    let repo_before = snapshot_tree(repo.path());
    let sandbox = Sandbox::new();
    let base = [
        "diff",
        "--repo",
        ".",
        "--path",
        "hosts/web-1",
        "--against",
        &before,
    ];

    let json = sandbox.tend(repo.path(), &[&base[..], &["-o", "json"]].concat());
    assert_eq!(json.code, 1, "{json:?}");
    assert_eq!(
        changes(&json),
        expect(&[
            ("?/flag/beta", "create", &["/spec/on", "exists"]),
            ("files/file/etc/app.conf", "update", &["mode"]),
            ("files/file/etc/motd", "update", &["content", "on_change"]),
            ("files/file/etc/new", "create", &["exists"]),
            ("files/file/etc/old", "delete", &[]),
            ("files/file/etc/owned", "update", &["owner"]),
            ("files/symlink/etc/current", "update", &["target"]),
        ])
    );
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(
        (v["revision"].as_str(), v["against"].as_str()),
        (Some(&*after), Some(&*before))
    );

    let text = sandbox.tend(repo.path(), &base);
    assert_eq!(text.code, 1, "{text:?}");
    for line in [
        "files/file/etc/app.conf: mode 0644 -> 0600\n",
        "files/file/etc/motd: on_change none -> motd-reload\n",
        "--- live/files/file/etc/motd\n+++ desired/files/file/etc/motd\n",
        "-hello\n+hello, world\n",
        "files/file/etc/new: create\nfiles/file/etc/new: mode 0644\n",
        "files/file/etc/old: delete\n",
        "files/file/etc/owned: owner www-data-ci -> nginx-ci\n",
        "files/symlink/etc/current: target app.conf -> app.conf.new\n",
        "?/flag/beta: /spec/on: absent -> true\n",
    ] {
        assert!(text.stdout.contains(line), "{line:?} in {text:?}");
    }
    // The same revisions named the other way round: the opposite changes.
    let back = sandbox.tend(
        repo.path(),
        &[
            "diff",
            "--repo",
            ".",
            "--path",
            "hosts/web-1",
            "--ref",
            &before,
            "--against",
            "HEAD",
            "-o",
            "json",
        ],
    );
    assert_eq!(back.code, 1, "{back:?}");
    assert_eq!(changes(&back)["files/file/etc/old"].0, "create");
    assert_eq!(changes(&back)["files/file/etc/new"].0, "delete");

    assert_eq!(
        snapshot_tree(repo.path()),
        repo_before,
        "the repository was changed"
    );
    sandbox.assert_untouched();
}

#[test]
fn against_exits_0_when_equal_and_2_on_errors_or_invalid_declarations() {
    let repo = TestRepo::new();
    let (before, _) = two_commits(&repo);
    let sandbox = Sandbox::new();
    let url = repo.url();
    let diff = |extra: &[&str]| {
        let args = [
            &["diff", "--repo", &url, "--path", "hosts/web-1"][..],
            extra,
        ]
        .concat();
        sandbox.tend(repo.path(), &args)
    };
    let same = diff(&["--against", "HEAD"]);
    assert_eq!((same.code, same.stdout.as_str()), (0, ""), "{same:?}");
    let same = diff(&["--ref", &before, "--against", "main~1", "-o", "markdown"]);
    assert_eq!(same.code, 0, "{same:?}");
    assert!(
        same.stdout.contains("No declared resource changes."),
        "{same:?}"
    );

    let unknown = diff(&["--against", "no-such-branch"]);
    assert_eq!(unknown.code, 2, "{unknown:?}");
    assert!(
        unknown.stderr.contains("\"no-such-branch\" not found"),
        "{unknown:?}"
    );

    // An invalid declaration at the newer side fails, naming file and line.
    repo.write(
        "hosts/web-1/bad.tend.yaml",
        "kind: file\npath: etc/bad\nmode: \"0999\"\ncontent: x\n",
    );
    let broken = repo.commit("broken");
    let invalid = diff(&["--against", &before]);
    assert_eq!(invalid.code, 2, "{invalid:?}");
    assert!(
        invalid.stderr.contains("hosts/web-1/bad.tend.yaml:1:"),
        "{invalid:?}"
    );
    assert!(
        invalid.stderr.contains("tend: 1 problem at HEAD"),
        "{invalid:?}"
    );
    let md = diff(&["--against", &before, "-o", "markdown"]);
    assert_eq!(md.code, 2, "{md:?}");
    assert!(
        md.stdout.contains("**1 problem in the declaration**"),
        "{md:?}"
    );

    // Only the older side invalid: it is compared, not failed on.
    repo.remove("hosts/web-1/bad.tend.yaml");
    repo.commit("fixed");
    let fixed = diff(&["--against", &broken]);
    assert_eq!(fixed.code, 0, "{fixed:?}");
    assert!(fixed.stderr.contains("has 1 problem;"), "{fixed:?}");
    sandbox.assert_untouched();
}

#[test]
fn sensitive_content_is_never_shown_in_any_format() {
    let repo = TestRepo::new();
    repo.write(
        "s.tend.yaml",
        "kind: file\npath: etc/token\ncontent: \"s3cret-old-XYZ\"\nsensitive: true\n---\nkind: file\npath: etc/key\nsource: key\n---\nkind: file\npath: etc/plain\ncontent: \"plain one\\n\"\n",
    )
    .write("key", "plain-old-key-XYZ\n");
    let before = repo.commit("before");
    repo.write(
        "s.tend.yaml",
        "kind: file\npath: etc/token\ncontent: \"s3cret-new-XYZ\"\nsensitive: true\n---\nkind: file\npath: etc/key\nsource: key\nsensitive: true\n---\nkind: file\npath: etc/plain\ncontent: \"plain two\\n\"\n",
    )
    .write("key", "s3cret-key-XYZ\n");
    repo.commit("after");
    let sandbox = Sandbox::new();
    for output in ["text", "json", "markdown"] {
        let r = sandbox.tend(
            repo.path(),
            &["diff", "--repo", ".", "--against", &before, "-o", output],
        );
        assert_eq!(r.code, 1, "{r:?}");
        for secret in ["s3cret", "plain-old-key"] {
            assert!(!r.all().contains(secret), "{output} shows {secret}: {r:?}");
        }
        assert!(r.stdout.contains("plain two"), "{output}: {r:?}");
    }
    let md = sandbox.tend(
        repo.path(),
        &[
            "diff",
            "--repo",
            ".",
            "--against",
            &before,
            "-o",
            "markdown",
        ],
    );
    for row in [
        "| update | `files/file/etc/token` | `content (sensitive)` |",
        "| update | `files/file/etc/key` | `sensitive false -> true`, `content (sensitive)` |",
        "| update | `files/file/etc/plain` | `content` |",
        "<details><summary><code>files/file/etc/plain</code> (update)</summary>",
        "**3 resources change**: 3 updated.",
    ] {
        assert!(md.stdout.contains(row), "{row:?} in {md:?}");
    }
    assert!(
        !md.stdout.contains("<code>files/file/etc/token</code>"),
        "{md:?}"
    );
    assert!(
        !md.stdout.contains("<code>files/file/etc/key</code>"),
        "{md:?}"
    );
    let text = sandbox.tend(repo.path(), &["diff", "--repo", ".", "--against", &before]);
    assert!(
        text.stdout
            .contains("files/file/etc/token: content hmac-sha256:"),
        "{text:?}"
    );
    sandbox.assert_untouched();
}

#[test]
fn mirror_mode_compares_every_file() {
    let repo = TestRepo::new();
    repo.write("site/a", "a1\n")
        .executable("site/b", "#!/bin/sh\n")
        .write("site/c", "c\n")
        .write("elsewhere", "not mirrored\n");
    let before = repo.commit("before");
    use std::os::unix::fs::PermissionsExt;
    let b = repo.path().join("site/b");
    std::fs::set_permissions(&b, std::fs::Permissions::from_mode(0o644)).unwrap();
    repo.write("site/a", "a2\n")
        .remove("site/c")
        .write("site/d", "d\n")
        .write("elsewhere", "still not\n");
    repo.commit("after");
    let sandbox = Sandbox::new();
    let r = sandbox.tend(
        repo.path(),
        &[
            "diff",
            "--repo",
            ".",
            "--mirror",
            "--path",
            "site",
            "--against",
            &before,
            "-o",
            "json",
        ],
    );
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(
        changes(&r),
        expect(&[
            ("files/file/a", "update", &["content"]),
            ("files/file/b", "update", &["mode"]),
            ("files/file/c", "delete", &[]),
            ("files/file/d", "create", &["exists"]),
        ])
    );
    sandbox.assert_untouched();
}

/// A remote (here `git://` from a real `git daemon`) is fetched into a
/// throwaway mirror that is gone afterwards.
#[test]
fn a_remote_repository_is_read_through_a_throwaway_mirror() {
    let daemon = Path::new("/usr/lib/git-core/git-daemon");
    if !util::can_run(daemon.exists(), "git daemon is not installed") {
        return;
    }
    let repo = TestRepo::new();
    let (before, _) = two_commits(&repo);
    let port = servers::free_port();
    let mut command = Command::new("git");
    command
        .args([
            "daemon",
            "--reuseaddr",
            "--export-all",
            "--listen=127.0.0.1",
        ])
        .arg(format!("--port={port}"))
        .arg(format!(
            "--base-path={}",
            repo.path().parent().unwrap().display()
        ))
        .arg(repo.path().parent().unwrap());
    let _server = servers::Group::spawn(command);
    assert!(
        servers::wait_for_port(port, 10),
        "git daemon did not listen"
    );
    let name = repo.path().file_name().unwrap().to_str().unwrap();
    let url = format!("git://127.0.0.1:{port}/{name}");
    let sandbox = Sandbox::new();
    let cwd = tempfile::tempdir().unwrap();
    let r = sandbox.tend(
        cwd.path(),
        &[
            "diff",
            "--repo",
            &url,
            "--path",
            "hosts/web-1",
            "--against",
            &before,
            "-o",
            "json",
        ],
    );
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(changes(&r).len(), 7, "{r:?}");
    // A remote takes what a fetch can name: a relative revision is refused.
    let r = sandbox.tend(cwd.path(), &["diff", "--repo", &url, "--against", "main~1"]);
    assert_eq!(r.code, 2, "{r:?}");
    sandbox.assert_untouched();
}

/// A checkout owned by another user (a container job) is refused as git
/// refuses it, saying how to mark it safe; marked safe, it is read.
#[test]
fn a_checkout_of_another_user_is_read_once_marked_safe() {
    if !util::can_run(servers::is_root(), "changing a checkout's owner needs root") {
        return;
    }
    let repo = TestRepo::new();
    let (before, _) = two_commits(&repo);
    let chown = Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(repo.path())
        .status()
        .unwrap();
    assert!(chown.success());
    let args = [
        "diff",
        "--repo",
        ".",
        "--path",
        "hosts/web-1",
        "--against",
        &before,
    ];
    let sandbox = Sandbox::new();
    let r = sandbox.tend(repo.path(), &args);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains(&format!(
            "git config --global --add safe.directory {}",
            repo.path().display()
        )),
        "{r:?}"
    );
    let safe = Sandbox::new();
    std::fs::write(
        safe.home.path().join(".gitconfig"),
        format!("[safe]\n\tdirectory = {}\n", repo.path().display()),
    )
    .unwrap();
    let r = safe.tend(repo.path(), &args);
    assert_eq!(r.code, 1, "{r:?}");
}
