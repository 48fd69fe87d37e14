//! One repository for many hosts (SPEC §12): `{host}` and `{label.KEY}` in
//! `source.path`, `hosts:` selectors in declarations, and `tend validate
//! --host/--label` showing what another host would get. Each host here is
//! a `tend sync` with its own config, root and state dir.

mod util;

use std::path::{Path, PathBuf};

use util::repo::TestRepo;
use util::{tend_cmd, Run};

/// One host of the fleet: its config, root and state dir.
struct Host {
    dir: tempfile::TempDir,
}

impl Host {
    fn new(repo: &TestRepo, host: &str, path: &str) -> Host {
        let dir = tempfile::Builder::new()
            .prefix("tend-host-")
            .tempdir()
            .unwrap();
        let cfg = format!(
            "source:\n  repo: {}\n  path: {path:?}\n{host}\ntargets:\n  files:\n    type: files\n    root: {}\nstate_dir: {}\n",
            repo.url(),
            dir.path().join("root").display(),
            dir.path().join("state").display(),
        );
        std::fs::write(dir.path().join("tend.yaml"), cfg).unwrap();
        Host { dir }
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("tend.yaml")
    }

    fn tend(&self, args: &[&str]) -> Run {
        let out = tend_cmd()
            .args(args)
            .arg("-c")
            .arg(self.config())
            .output()
            .expect("run tend");
        Run::from(out)
    }

    /// The files under its root, relative and sorted.
    fn files(&self) -> Vec<String> {
        let root = self.dir.path().join("root");
        let mut out = Vec::new();
        walk(&root, &root, &mut out);
        out.sort();
        out
    }
}

fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(base, &p, out);
        } else {
            out.push(p.strip_prefix(base).unwrap().display().to_string());
        }
    }
}

fn file(path: &str, hosts: &str) -> String {
    format!("kind: file\npath: {path}\ncontent: \"{path}\\n\"\n{hosts}")
}

/// A repository with a folder per host and one shared file of
/// declarations, three selected.
fn fleet_repo() -> TestRepo {
    let repo = TestRepo::new();
    repo.write("hosts/web-1/own.tend.yaml", file("etc/web-1", ""));
    repo.write("hosts/web-2/own.tend.yaml", file("etc/web-2", ""));
    repo.write("zones/a/zone.tend.yaml", file("etc/zone-a", ""));
    repo.write("zones/b/zone.tend.yaml", file("etc/zone-b", ""));
    repo.write(
        "common/all.tend.yaml",
        [
            file("etc/everyone", ""),
            file("etc/web-1-by-name", "hosts: {names: [web-1]}\n"),
            file("etc/webs", "hosts: {labels: {role: web}}\n"),
            file("etc/web-in-b", "hosts: {labels: {role: web, zone: b}}\n"),
            file("etc/db-or-web-2", "hosts: {names: [web-2, db-1]}\n"),
        ]
        .join("---\n"),
    );
    repo.commit("fleet");
    repo
}

#[test]
fn each_host_gets_exactly_its_declarations() {
    let repo = fleet_repo();
    let web1 = Host::new(
        &repo,
        "host:\n  name: web-1\n  labels: {role: web, zone: a}",
        "hosts/{host}",
    );
    let web2 = Host::new(
        &repo,
        "host:\n  name: web-2\n  labels: {role: web, zone: b}",
        "zones/{label.zone}",
    );
    let db1 = Host::new(&repo, "host:\n  name: db-1\n  labels: {role: db}", "common");
    let web3 = Host::new(
        &repo,
        "host:\n  name: web-3\n  labels: {role: web}",
        "common",
    );
    for h in [&web1, &web2, &db1, &web3] {
        let r = h.tend(&["sync"]);
        assert_eq!(r.code, 0, "{r:?}");
    }
    assert_eq!(web1.files(), ["etc/web-1"]);
    assert_eq!(web2.files(), ["etc/zone-b"]);
    assert_eq!(db1.files(), ["etc/db-or-web-2", "etc/everyone"]);
    assert_eq!(web3.files(), ["etc/everyone", "etc/webs"]);
}

#[test]
fn a_declaration_no_longer_for_this_host_is_pruned() {
    let repo = fleet_repo();
    let web3 = Host::new(
        &repo,
        "host:\n  name: web-3\n  labels: {role: web}",
        "common",
    );
    assert_eq!(web3.tend(&["sync"]).code, 0);
    assert_eq!(web3.files(), ["etc/everyone", "etc/webs"]);
    // The web file is now for zone b only.
    repo.write(
        "common/all.tend.yaml",
        [
            file("etc/everyone", ""),
            file("etc/webs", "hosts: {labels: {role: web, zone: b}}\n"),
        ]
        .join("---\n"),
    );
    repo.commit("webs in b only");
    let r = web3.tend(&["sync"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(web3.files(), ["etc/everyone"]);
}

fn resources(r: &Run) -> u64 {
    let v: serde_json::Value =
        serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {r:?}"));
    v["resources"].as_u64().unwrap()
}

#[test]
fn validate_shows_what_another_host_would_get() {
    let repo = fleet_repo();
    let web3 = Host::new(
        &repo,
        "host:\n  name: web-3\n  labels: {role: web}",
        "common",
    );
    let r = web3.tend(&["validate", "-o", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(resources(&r), 2, "everyone and webs: {r:?}");
    // As web-1 (labels from the config, the name from the flag).
    let r = web3.tend(&["validate", "-o", "json", "--host", "web-1"]);
    assert_eq!(resources(&r), 3, "everyone, web-1-by-name, webs: {r:?}");
    // As a web host in zone b: the flags' labels replace the config's.
    let r = web3.tend(&[
        "validate", "-o", "json", "--host", "web-9", "--label", "role=web", "--label", "zone=b",
    ]);
    assert_eq!(resources(&r), 3, "everyone, webs, web-in-b: {r:?}");
    // The host's own folder follows --host too.
    let web1 = Host::new(&repo, "host:\n  name: web-1", "hosts/{host}");
    let r = web1.tend(&["validate", "-o", "json", "--host", "web-2"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(resources(&r), 1, "{r:?}");
    assert!(
        !web1.dir.path().join("root").exists(),
        "validate wrote a root"
    );
    // As written, with no host named, every declaration counts.
    let anonymous = Host::new(&repo, "", "common");
    let r = anonymous.tend(&["validate", "-o", "json", "--as-written"]);
    assert_eq!(resources(&r), 5, "{r:?}");
    let r = anonymous.tend(&["validate", "-o", "json", "--as-written", "--host", "db-1"]);
    assert_eq!(resources(&r), 2, "{r:?}");
}

#[test]
fn a_placeholder_the_host_cannot_fill_names_the_config_line() {
    let repo = fleet_repo();
    let h = Host::new(&repo, "host:\n  name: web-1", "zones/{label.zone}");
    let r = h.tend(&["sync"]);
    assert_eq!(r.code, 2, "{r:?}");
    let cfg = h.config().display().to_string();
    assert!(
        r.stderr.contains(&format!("{cfg}:3:")) && r.stderr.contains("no label \"zone\""),
        "{r:?}"
    );
    let h = Host::new(&repo, "host:\n  name: \"../etc\"", "hosts/{host}");
    let r = h.tend(&["sync"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("is not a host name"), "{r:?}");
    let r = h.tend(&["validate", "--host", "web-1", "--label", "zone"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("expected KEY=VALUE"), "{r:?}");
}
