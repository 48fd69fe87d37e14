//! `tend diff` against a root and `tend validate` without a state dir:
//! they make none (the default one included) and leave nothing behind.

mod util;

use util::sandbox::Sandbox;
use util::{servers, snapshot_tree, Env};

#[test]
fn diff_and_validate_without_a_state_dir_leave_nothing_behind() {
    let env = Env::new();
    env.repo
        .write("a.tend.yaml", "kind: file\npath: etc/motd\ncontent: \"hello\\n\"\n---\nkind: file\npath: etc/same\ncontent: \"same\\n\"\n");
    env.repo.commit("init");
    std::fs::create_dir_all(env.at("etc")).unwrap();
    std::fs::write(env.at("etc/same"), "same\n").unwrap();
    std::fs::write(env.at("etc/motd"), "by hand\n").unwrap();
    let root_before = (snapshot_tree(env.root()), util::stamps(env.root()));
    let sandbox = Sandbox::new();
    let root = env.root().to_str().unwrap();
    let url = env.repo.url();
    let d = sandbox.tend(env.root(), &["diff", "--repo", &url, "--root", root]);
    assert_eq!(d.code, 1, "{d:?}");
    assert!(d.stdout.contains("-by hand\n+hello\n"), "{d:?}");
    assert!(!d.stdout.contains("etc/same"), "{d:?}");
    let md = sandbox.tend(
        env.root(),
        &["diff", "--repo", &url, "--root", root, "-o", "markdown"],
    );
    assert_eq!(md.code, 1, "{md:?}");
    assert!(
        md.stdout
            .contains("| update | `files/file/etc/motd` | `content` |"),
        "{md:?}"
    );
    let v = sandbox.tend(env.root(), &["validate", "--repo", &url]);
    assert_eq!(v.code, 0, "{v:?}");
    assert!(
        v.stdout.contains("2 resources declared, 0 problems"),
        "{v:?}"
    );
    assert_eq!(
        (snapshot_tree(env.root()), util::stamps(env.root())),
        root_before
    );
    sandbox.assert_untouched();
}

/// Not root, the default state dir is `$XDG_STATE_HOME/tend`: it is not
/// made either.
#[test]
fn as_another_user_the_default_state_dir_is_not_made_either() {
    if !util::can_run(
        servers::is_root(),
        "running tend as another user needs root",
    ) {
        return;
    }
    let env = Env::new();
    env.repo.write(
        "a.tend.yaml",
        "kind: file\npath: etc/motd\ncontent: \"hello\\n\"\n",
    );
    env.repo.commit("init");
    const NOBODY: u32 = 65534;
    for dir in [env.repo.path(), env.root()] {
        let chown = std::process::Command::new("chown")
            .args(["-R", "65534:65534"])
            .arg(dir)
            .status()
            .unwrap();
        assert!(chown.success());
    }
    let sandbox = Sandbox::for_user(NOBODY);
    let root = env.root().to_str().unwrap();
    let url = env.repo.url();
    let d = sandbox.tend(env.root(), &["diff", "--repo", &url, "--root", root]);
    assert_eq!(d.code, 1, "{d:?}");
    assert!(d.stdout.contains("files/file/etc/motd: create"), "{d:?}");
    let v = sandbox.tend(env.root(), &["validate", "--repo", &url]);
    assert_eq!(v.code, 0, "{v:?}");
    assert!(snapshot_tree(env.root()).is_empty());
    sandbox.assert_untouched();
}

/// A root that is not there is not made by a command that only looks:
/// `diff` and `explain` see it empty, so everything declared is to be
/// created, and the path stays absent. `sync` makes it.
#[test]
fn diff_and_explain_do_not_make_a_missing_root() {
    let env = Env::new();
    env.repo.write(
        "a.tend.yaml",
        "kind: file\npath: etc/motd\ncontent: \"hello\\n\"\n",
    );
    env.repo.commit("init");
    let missing = env.root().join("not/there");
    let (url, state) = (
        env.repo.url(),
        env.state.path().to_str().unwrap().to_string(),
    );
    let tend = |cmd: &str, more: &[&str]| {
        let mut args = vec![cmd, "--repo", &url, "--root", missing.to_str().unwrap()];
        args.extend_from_slice(&["--state-dir", &state]);
        args.extend_from_slice(more);
        env.raw(&args)
    };
    let d = tend("diff", &[]);
    assert_eq!(d.code, 1, "{d:?}");
    assert!(d.stdout.contains("+hello"), "{d:?}");
    assert!(!missing.exists(), "diff made the root");
    assert!(
        !env.root().join("not").exists(),
        "diff made the root's parent"
    );
    let s = tend("sync", &[]);
    assert_eq!(s.code, 0, "{s:?}");
    assert_eq!(
        std::fs::read_to_string(missing.join("etc/motd")).unwrap(),
        "hello\n"
    );
    // The root goes (an unmounted volume): looking does not bring it back.
    std::fs::remove_dir_all(&missing).unwrap();
    let e = tend("explain", &["files/file/etc/motd"]);
    assert_eq!(e.code, 0, "{e:?}");
    assert!(e.stdout.contains("etc/motd"), "{e:?}");
    assert!(!missing.exists(), "explain made the root");
    let d = tend("diff", &[]);
    assert_eq!(d.code, 1, "{d:?}");
    assert!(!missing.exists(), "diff made the root");
}
