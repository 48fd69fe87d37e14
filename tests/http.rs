//! The HTTP surface of a running `tend run`, over a real port (issue 7):
//! metrics present and moving and accepted by promtool, health and
//! readiness transitions, the status API equal to `tend status -o json`,
//! refresh and webhooks applying commits at once, the status page in a real
//! headless Chromium, and a sensitive canary that appears nowhere.
//!
//! Every daemon here polls once an hour and resyncs once an hour, so only
//! the request under test can explain a fast change.

mod util;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use util::http::{chromium, promtool_check, tool, Metrics, Served, QUIET};
use util::{wait_until, Env};

/// The metric names SPEC §6 promises, as they appear on samples.
const SPEC_METRICS: [&str; 10] = [
    "tend_resources",
    "tend_drifted_resources",
    "tend_drift_oldest_age_seconds",
    "tend_reconcile_total",
    "tend_reconcile_duration_seconds",
    "tend_writes_total",
    "tend_source_fetch_total",
    "tend_source_revision_info",
    "tend_last_converged_timestamp_seconds",
    "tend_queue_depth",
];

fn file_decl(path: &str, content: &str) -> String {
    format!("kind: file\npath: {path}\ncontent: {content:?}\n")
}

/// One managed file at `etc/a` with `content`, committed.
fn commit_a(env: &Env, content: &str) -> String {
    env.repo.write("a.tend.yaml", file_decl("etc/a", content));
    env.repo.commit(content)
}

fn started(env: &Env, extra: &str, args: &[&str]) -> Served {
    let s = env.serve(extra, args);
    assert!(s.ready(15), "never ready:\n{}", env.daemon_log());
    s
}

fn fetches_ok(s: &Served) -> f64 {
    s.metrics()
        .value("tend_source_fetch_total", &[("result", "ok")])
        .unwrap_or_else(|| panic!("no fetch counter:\n{}", s.metrics().0))
}

fn reads(env: &Env, rel: &str, want: &str) -> bool {
    std::fs::read_to_string(env.at(rel)).is_ok_and(|t| t == want)
}

/// Edits `etc/a` by hand, waits until tend has put it back, and returns
/// what it put there. The daemon takes a fetch asked for before the edit's
/// event ahead of it, so any fetch asked for by then has been made, and a
/// commit it brought is what the file now holds.
fn put_back(env: &Env) -> String {
    std::fs::write(env.at("etc/a"), "edited by hand\n").unwrap();
    let mut now = String::new();
    assert!(
        wait_until(20, || {
            now = std::fs::read_to_string(env.at("etc/a")).unwrap_or_default();
            now != "edited by hand\n"
        }),
        "the hand edit was not put back:\n{}",
        env.daemon_log()
    );
    now
}

/// Waits until the drift age of `id` is at least a second, so a wrong age
/// would show; returns its status entry.
fn aged(env: &Env, id: &str) -> Value {
    let mut r = Value::Null;
    assert!(
        wait_until(30, || {
            r = env.resource(id).unwrap_or_default();
            r["drift_age_seconds"].as_u64() >= Some(1)
        }),
        "{r}"
    );
    r
}

/// `etc/a` managed as usual, `etc/keep` with `self_heal: false`, so a hand
/// edit of it stays drifted.
fn commit_a_and_keep(env: &Env, a: &str) -> String {
    env.repo.write(
        "a.tend.yaml",
        format!(
            "{}---\n{}self_heal: false\n",
            file_decl("etc/a", a),
            file_decl("etc/keep", "k\n")
        ),
    );
    env.repo.commit(a)
}

#[test]
fn every_spec_metric_is_present_and_moves() {
    let env = Env::new();
    let first = commit_a_and_keep(&env, "a\n");
    let s = started(&env, "", &[]);
    let m = s.metrics();
    for name in SPEC_METRICS {
        assert!(
            m.0.contains(&format!("# HELP {name} ")),
            "no HELP for {name}:\n{}",
            m.0
        );
        let sampled = m.samples().iter().any(|(n, _, _)| {
            n == name
                || n.strip_prefix(name)
                    .is_some_and(|t| ["_bucket", "_sum", "_count"].contains(&t))
        });
        assert!(sampled, "no sample of {name}:\n{}", m.0);
    }
    assert!(m
        .0
        .contains("# TYPE tend_reconcile_duration_seconds histogram"));
    // Without `ha` this tend is no leader among replicas.
    assert!(m.0.contains("\ntend_ha_leader 0\n"), "{}", m.0);
    assert_eq!(
        m.label_values("tend_source_revision_info", "revision"),
        [first]
    );
    assert_eq!(m.value("tend_resources", &[("state", "InSync")]), Some(2.0));
    assert_eq!(m.value("tend_drifted_resources", &[]), Some(0.0));
    assert!(
        m.value("tend_last_converged_timestamp_seconds", &[])
            .unwrap()
            > 1.6e9
    );
    let writes = |m: &Metrics| {
        m.value("tend_writes_total", &[("target", "files")])
            .unwrap()
    };
    let applied = |m: &Metrics| {
        m.value("tend_reconcile_total", &[("result", "applied")])
            .unwrap()
    };
    let (writes0, applied0, fetched0) = (writes(&m), applied(&m), fetches_ok(&s));
    assert!(writes0 >= 2.0, "the first pass wrote two files:\n{}", m.0);

    // A commit, applied through a refresh.
    let second = commit_a_and_keep(&env, "a2\n");
    s.refresh();
    let moved = wait_until(30, || {
        let m = s.metrics();
        writes(&m) > writes0
            && m.label_values("tend_source_revision_info", "revision") == [second.clone()]
    });
    let m = s.metrics();
    assert!(
        moved,
        "metrics did not move:\n{}\n{}",
        m.0,
        env.daemon_log()
    );
    assert!(applied(&m) > applied0, "{}", m.0);
    assert!(fetches_ok(&s) > fetched0);
    assert_eq!(env.read("etc/a"), "a2\n");

    // Drift that stays: the drift gauges follow it, and its age grows
    // without any further event.
    std::fs::write(env.at("etc/keep"), "by hand\n").unwrap();
    let keep = [("id", "files/file/etc/keep")];
    let drifted = wait_until(30, || {
        let m = s.metrics();
        m.value("tend_drifted_resources", &[]) == Some(1.0)
            && m.value("tend_resources", &[("state", "Drifted")]) == Some(1.0)
            && m.value("tend_resource_drift_age_seconds", &keep).is_some()
    });
    assert!(drifted, "drift not in the metrics:\n{}", s.metrics().0);
    let aged = wait_until(30, || {
        let m = s.metrics();
        m.value("tend_drift_oldest_age_seconds", &[]) >= Some(2.0)
            && m.value("tend_resource_drift_age_seconds", &keep) >= Some(2.0)
    });
    assert!(aged, "drift ages stand still:\n{}", s.metrics().0);
}

#[test]
fn promtool_accepts_the_metrics() {
    let Some(promtool) = tool("promtool", "prometheus") else {
        return;
    };
    let env = Env::new();
    commit_a_and_keep(&env, "a\n");
    let secret = env.secret_file("github.secret", "s3cret\n");
    let s = started(
        &env,
        &format!(
            "server:\n  webhooks:\n    github: {{secret_file: {}}}\n",
            secret.display()
        ),
        &[],
    );
    // Drift and a refused webhook, so the per-resource and webhook
    // families have series too.
    std::fs::write(env.at("etc/keep"), "by hand\n").unwrap();
    assert!(wait_until(30, || s
        .metrics()
        .value("tend_drifted_resources", &[])
        == Some(1.0)));
    assert_eq!(
        s.post(
            "/webhook/github",
            &[("X-Hub-Signature-256", "sha256=00")],
            b"{}"
        )
        .status,
        401
    );
    let m = s.metrics();
    assert!(m.0.contains("tend_resource_drift_age_seconds{"), "{}", m.0);
    assert!(m.0.contains("tend_webhook_requests_total{"), "{}", m.0);
    let (ok, said) = promtool_check(&promtool, &m.0);
    assert!(ok && said.trim().is_empty(), "promtool: {said}\n{}", m.0);
    // The check can fail: promtool refuses a counter without `_total`.
    let (ok, _) = promtool_check(
        &promtool,
        "# HELP x_bytes a\n# TYPE x_bytes counter\nx_bytes 1\n",
    );
    assert!(
        !ok,
        "promtool accepts anything; the check above proves nothing"
    );
}

#[test]
fn readiness_waits_for_the_first_pass_and_health_fails_while_a_hook_hangs() {
    let env = Env::new();
    // No commit yet: every fetch fails, so no pass can end.
    let extra =
        "server:\n  stuck_after: 3s\nhooks:\n  hang: {run: [sleep, \"60\"], timeout: 120s}\n";
    let s = env.serve(extra, &[]);
    assert!(
        wait_until(30, || s.get("/healthz").status == 200),
        "{}",
        env.daemon_log()
    );
    assert_eq!(s.get("/readyz").status, 503);

    commit_a(&env, "a1\n");
    s.refresh();
    assert!(
        s.ready(30),
        "not ready after a good commit:\n{}",
        env.daemon_log()
    );
    // Idle longer than stuck_after: the loop still ticks, so healthz holds.
    // The first pass may still be settling (a beat is not recorded while a
    // fetch or pass runs), so wait for a healthy answer first, then watch
    // for longer than stuck_after.
    assert!(
        wait_until(30, || s.get("/healthz").status == 200),
        "not healthy once ready:\n{}",
        env.daemon_log()
    );
    let idle = Instant::now();
    while idle.elapsed() < Duration::from_secs(4) {
        let h = s.get("/healthz");
        assert_eq!(h.status, 200, "healthy idle loop reported: {}", h.text());
        std::thread::sleep(Duration::from_millis(250));
    }

    env.repo.write(
        "hang.tend.yaml",
        format!("{}on_change: hang\n", file_decl("etc/hung", "h\n")),
    );
    env.repo.commit("a resource whose hook hangs");
    s.refresh();
    assert!(wait_until(30, || env.at("etc/hung").exists()));
    // The hook sleeps 60 s, well past stuck_after (3 s) plus this wait.
    let stuck = wait_until(20, || s.get("/healthz").status == 503);
    assert!(
        stuck,
        "healthz stayed 200 while the pass hung:\n{}",
        env.daemon_log()
    );
    assert!(s.get("/healthz").text().contains("stuck"));
    assert_eq!(
        s.get("/readyz").status,
        200,
        "readiness is lost only by a restart"
    );
}

/// The time-derived fields of a status document, and the document without
/// them. Ages are turned back into the time they count from, through
/// `generated_at`, and checked against the time the document names.
fn without_ages(doc: &Value) -> Value {
    let at = |v: &Value| {
        humantime::parse_rfc3339(v.as_str().unwrap_or_else(|| panic!("not a time: {v}"))).unwrap()
    };
    let generated = at(&doc["generated_at"]);
    let mut doc = doc.clone();
    let check = |obj: &mut serde_json::Map<String, Value>, age: &str, since: &str| {
        let Some(a) = obj.remove(age).and_then(|a| a.as_u64()) else {
            return;
        };
        let recomputed = generated - Duration::from_secs(a);
        let named = at(&obj[since]);
        let gap = recomputed
            .duration_since(named)
            .unwrap_or_else(|e| e.duration());
        assert!(
            gap <= Duration::from_secs(1),
            "{age}={a} disagrees with {since}: {obj:?}"
        );
    };
    let obj = doc.as_object_mut().unwrap();
    obj.remove("generated_at");
    if let Some(src) = obj.get_mut("source").and_then(Value::as_object_mut) {
        check(
            src,
            "seconds_since_last_successful_fetch",
            "last_successful_fetch",
        );
        check(src, "drift_age_seconds", "drift_since");
    }
    for r in obj["resources"].as_array_mut().unwrap() {
        check(
            r.as_object_mut().unwrap(),
            "drift_age_seconds",
            "drift_since",
        );
    }
    doc
}

#[test]
fn the_status_api_equals_tend_status_json() {
    let env = Env::new();
    commit_a_and_keep(&env, "a\n");
    let s = started(&env, "", &[]);
    std::fs::write(env.at("etc/keep"), "by hand\n").unwrap();
    assert!(wait_until(30, || env
        .resource("files/file/etc/keep")
        .is_some_and(|r| r["state"] == "Drifted")));
    aged(&env, "files/file/etc/keep");
    let api = s.get("/api/v1/status");
    assert_eq!(api.status, 200);
    assert!(api
        .header("content-type")
        .unwrap()
        .starts_with("application/json"));
    let api = api.json();
    let cli = env.status();
    assert_ne!(cli, Value::Null);
    let keep = cli["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "files/file/etc/keep")
        .unwrap();
    assert!(keep["drift_age_seconds"].as_u64() >= Some(1), "{keep}");
    assert!(
        cli["source"]["seconds_since_last_successful_fetch"].is_u64(),
        "{cli}"
    );
    assert_eq!(
        without_ages(&api),
        without_ages(&cli),
        "API:\n{api:#}\nCLI:\n{cli:#}"
    );
}

#[test]
fn refresh_applies_a_new_commit_at_once() {
    let env = Env::new();
    commit_a(&env, "a1\n");
    let s = started(&env, "", &[]);
    let fetched = fetches_ok(&s);
    commit_a(&env, "a2\n");
    // Control: nothing but a request may pick the commit up, not even
    // while the daemon handles other events.
    assert_eq!(put_back(&env), "a1\n");
    assert_eq!(fetches_ok(&s), fetched);

    let asked = Instant::now();
    s.refresh();
    assert!(
        wait_until(20, || reads(&env, "etc/a", "a2\n")),
        "{}",
        env.daemon_log()
    );
    assert!(asked.elapsed() < Duration::from_secs(15));
    assert_eq!(fetches_ok(&s), fetched + 1.0);
}

const GITHUB_PUSH: &str = include_str!("../src/server/tests/payloads/github-push.json");
const GITLAB_PUSH: &str = include_str!("../src/server/tests/payloads/gitlab-push.json");

/// GitHub's documented push event, for a push of `after` onto `branch`.
fn github_push(branch: &str, before: &str, after: &str) -> Vec<u8> {
    let mut p: Value = serde_json::from_str(GITHUB_PUSH).unwrap();
    let commit = json!({
        "id": after,
        "tree_id": "f9d2a07e9488b91af2641b26b9407fe22a451433",
        "distinct": true,
        "message": "Update a",
        "timestamp": "2019-05-15T15:20:30-05:00",
        "url": format!("https://github.com/Codertocat/Hello-World/commit/{after}"),
        "author": {"name": "Codertocat", "email": "21031067+Codertocat@users.noreply.github.com", "username": "Codertocat"},
        "committer": {"name": "Codertocat", "email": "21031067+Codertocat@users.noreply.github.com", "username": "Codertocat"},
        "added": [],
        "removed": [],
        "modified": ["a.tend.yaml"]
    });
    p["ref"] = json!(format!("refs/heads/{branch}"));
    p["before"] = json!(before);
    p["after"] = json!(after);
    p["deleted"] = json!(false);
    p["commits"] = json!([commit.clone()]);
    p["head_commit"] = commit;
    serde_json::to_vec_pretty(&p).unwrap()
}

fn github_headers(signature: &str) -> Vec<(&'static str, String)> {
    vec![
        ("Content-Type", "application/json".into()),
        ("User-Agent", "GitHub-Hookshot/044aadd".into()),
        ("X-GitHub-Event", "push".into()),
        (
            "X-GitHub-Delivery",
            "72d3162e-cc78-11e3-81ab-4c9367dc0958".into(),
        ),
        ("X-GitHub-Hook-ID", "292430182".into()),
        ("X-Hub-Signature-256", format!("sha256={signature}")),
    ]
}

fn hmac_hex(secret: &str, body: &[u8]) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

fn send(
    s: &Served,
    provider: &str,
    headers: &[(&'static str, String)],
    body: &[u8],
) -> (u16, String) {
    let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let r = s.post(&format!("/webhook/{provider}"), &h, body);
    (r.status, r.text())
}

#[test]
fn webhooks_over_the_real_port() {
    const SECRET: &str = "It's a Secret to Everybody";
    let env = Env::new();
    let first = commit_a(&env, "a1\n");
    let github = env.secret_file("github.secret", &format!("{SECRET}\n"));
    let gitlab = env.secret_file("gitlab.secret", "gl-token\n");
    let extra = format!(
        "server:\n  webhooks:\n    github: {{secret_file: {}}}\n    gitlab: {{secret_file: {}}}\n",
        github.display(),
        gitlab.display()
    );
    let s = started(&env, &extra, &["--ref", "main"]);
    let fetched = fetches_ok(&s);
    let second = commit_a(&env, "a2\n");
    let push = github_push("main", &first, &second);
    let signed = github_headers(&hmac_hex(SECRET, &push));

    let (code, text) = send(
        &s,
        "github",
        &github_headers(&hmac_hex("not the secret", &push)),
        &push,
    );
    assert_eq!(code, 401, "wrong signature: {text}");
    let big = vec![b' '; (1 << 20) + 1];
    let (code, text) = send(&s, "github", &github_headers(&hmac_hex(SECRET, &big)), &big);
    assert_eq!(code, 413, "oversized: {text}");
    let garbage = b"{\"ref\": \"refs/heads/main\", ".to_vec();
    let (code, text) = send(
        &s,
        "github",
        &github_headers(&hmac_hex(SECRET, &garbage)),
        &garbage,
    );
    assert_eq!(code, 400, "garbage JSON: {text}");
    let other = github_push("feature", &first, &second);
    let (code, text) = send(
        &s,
        "github",
        &github_headers(&hmac_hex(SECRET, &other)),
        &other,
    );
    assert_eq!(code, 200, "another branch: {text}");
    assert!(text.contains("ignored"), "{text}");
    // No secret for Gitea: the endpoint does not exist, even for a request
    // signed with the GitHub secret.
    let gitea_headers = vec![
        ("Content-Type", "application/json".to_string()),
        ("X-Gitea-Event", "push".into()),
        ("X-Gitea-Signature", hmac_hex(SECRET, &push)),
    ];
    assert_eq!(send(&s, "gitea", &gitea_headers, &push).0, 404);
    assert_eq!(put_back(&env), "a1\n", "a refused webhook applied a commit");
    assert_eq!(fetches_ok(&s), fetched, "a refused webhook fetched");

    let (code, text) = send(&s, "github", &signed, &push);
    assert_eq!(code, 202, "valid push: {text}");
    assert!(
        wait_until(20, || reads(&env, "etc/a", "a2\n")),
        "{}",
        env.daemon_log()
    );
    assert_eq!(fetches_ok(&s), fetched + 1.0);

    let third = commit_a(&env, "a3\n");
    let mut gl: Value = serde_json::from_str(GITLAB_PUSH).unwrap();
    gl["ref"] = json!("refs/heads/main");
    gl["before"] = json!(second);
    gl["after"] = json!(third);
    gl["checkout_sha"] = json!(third);
    let gl = serde_json::to_vec(&gl).unwrap();
    let gl_headers = vec![
        ("Content-Type", "application/json".to_string()),
        ("User-Agent", "GitLab/16.11.0".into()),
        ("X-Gitlab-Event", "Push Hook".into()),
        ("X-Gitlab-Token", "gl-token".into()),
    ];
    let mut wrong = gl_headers.clone();
    wrong[3].1 = "gl-token2".into();
    assert_eq!(send(&s, "gitlab", &wrong, &gl).0, 401);
    let (code, text) = send(&s, "gitlab", &gl_headers, &gl);
    assert_eq!(code, 202, "valid GitLab push: {text}");
    assert!(
        wait_until(20, || reads(&env, "etc/a", "a3\n")),
        "{}",
        env.daemon_log()
    );
}

/// Where test artifacts go: target/test-artifacts.
fn artifacts() -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Text as Chromium serializes it inside an element.
fn in_dom(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[test]
fn the_status_page_in_headless_chromium() {
    let Some(browser) = tool("chromium", "chromium") else {
        return;
    };
    // The console check below can fail: a broken page is seen.
    let broken = tempfile::tempdir().unwrap();
    let page = broken.path().join("broken.html");
    std::fs::write(
        &page,
        "<!doctype html><p>x</p><script>undefinedFunction();</script>",
    )
    .unwrap();
    let control = chromium(&browser, &format!("file://{}", page.display()), None);
    assert!(
        control
            .console
            .iter()
            .any(|l| l.contains("undefinedFunction")),
        "Chromium's console is not seen; the check below proves nothing:\n{}",
        control.stderr
    );

    let env = Env::new();
    commit_a_and_keep(&env, "a\n");
    let s = started(&env, "", &[]);
    std::fs::write(env.at("etc/keep"), "by hand\n").unwrap();
    let id = "files/file/etc/keep";
    assert!(wait_until(30, || env
        .resource(id)
        .is_some_and(|r| r["state"] == "Drifted")));
    let before = aged(&env, id);
    let shot = artifacts().join("status-page.png");
    let _ = std::fs::remove_file(&shot);
    let page = chromium(&browser, &format!("http://{}/", s.addr), Some(&shot));
    let after = env.resource(id).unwrap();

    assert!(
        page.console.is_empty(),
        "console messages: {:?}",
        page.console
    );
    let row = page
        .dom
        .split("<tr")
        .find(|r| r.contains(id))
        .unwrap_or_else(|| panic!("no row for {id}:\n{}", page.dom));
    assert!(row.contains("Drifted"), "{row}");
    let reason = before["reason"]
        .as_str()
        .expect("a drifted resource has a reason");
    assert!(
        row.contains(&in_dom(reason)),
        "reason {reason:?} not in {row}"
    );
    let (lo, hi) = (
        before["drift_age_seconds"].as_u64().unwrap(),
        after["drift_age_seconds"].as_u64().unwrap(),
    );
    let shown = (lo..=hi).any(|a| {
        row.contains(&format!(
            ">{}<",
            tend::duration::short(Duration::from_secs(a))
        ))
    });
    assert!(shown, "no age in {lo}..={hi}s in {row}");
    assert!(lo >= 1, "{before}");

    let png =
        std::fs::read(&shot).unwrap_or_else(|e| panic!("no screenshot: {e}\n{}", page.stderr));
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(png[20..24].try_into().unwrap());
    assert_eq!((width, height), (412, 915));
}

/// Every file under `dir` but those under the named subdirectories.
fn files_except(dir: &std::path::Path, skip: &[&str]) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    util::snapshot_tree(dir)
        .into_iter()
        .filter(|(p, _)| {
            let rel = p.strip_prefix(dir).unwrap();
            !skip.iter().any(|s| rel.starts_with(s)) && p.is_file()
        })
        .collect()
}

fn assert_absent(canary: &str, what: &str, bytes: &[u8]) {
    let hit = bytes.windows(canary.len()).any(|w| w == canary.as_bytes());
    assert!(!hit, "the sensitive canary leaked into {what}");
}

#[test]
fn a_sensitive_canary_appears_nowhere() {
    let canary = format!("canary-{:032x}", rand::random::<u128>());
    let env = Env::new();
    let declare = |secret: &str| {
        env.repo.write(
            "a.tend.yaml",
            format!(
                "{}sensitive: true\n---\n{}sensitive: true\nself_heal: false\n---\n{}",
                file_decl("etc/secret", &format!("{secret}:{canary}\n")),
                file_decl("etc/held", &format!("held:{canary}\n")),
                file_decl("etc/plain", "plain\n"),
            ),
        );
        env.repo.commit(secret)
    };
    declare("A");
    let mut seen: Vec<(String, Vec<u8>)> = Vec::new();
    let mut s = started(&env, "", &[]);
    assert!(
        env.read("etc/secret").contains(&canary),
        "the canary is not even applied"
    );
    // Drift that stays: the diff must name etc/held without showing it.
    std::fs::write(env.at("etc/held"), format!("by hand:{canary}\n")).unwrap();
    let held = "files/file/etc/held";
    assert!(wait_until(30, || env
        .resource(held)
        .is_some_and(|r| r["state"] == "Drifted")));
    declare("B");
    s.refresh();
    assert!(
        wait_until(30, || env.read("etc/secret").starts_with("B:")),
        "{}",
        env.daemon_log()
    );

    let diff = env.tend(&["diff"]);
    assert_eq!(diff.code, 1, "{diff:?}");
    assert!(diff.stdout.contains(held), "{diff:?}");
    seen.push(("tend diff".into(), diff.all().into_bytes()));
    let diff_json = env.tend(&["diff", "-o", "json"]);
    assert!(diff_json.stdout.contains(held), "{diff_json:?}");
    seen.push(("tend diff -o json".into(), diff_json.all().into_bytes()));
    let state = env.state.path().to_str().unwrap();
    for args in [
        &["status", "-o", "json", "--state-dir", state][..],
        &["status", "--state-dir", state],
    ] {
        seen.push((format!("tend {args:?}"), env.raw(args).all().into_bytes()));
    }
    for path in [
        "/api/v1/status",
        "/",
        "/metrics",
        "/resources/files/file/etc/held",
    ] {
        let r = s.get(path);
        assert_eq!(r.status, 200, "{path}");
        seen.push((path.into(), r.body));
    }
    for id in [held, "files/file/etc/secret"] {
        let r = s.get(&format!("/api/v1/resources/{id}"));
        assert_eq!(r.status, 200, "{id}");
        seen.push((format!("/api/v1/resources/{id}"), r.body));
    }
    let api = s.get(&format!("/api/v1/resources/{held}")).json();
    assert!(
        api["diff"].as_str().is_some_and(|d| d.contains("etc/held")),
        "{api}"
    );
    assert_eq!(s.daemon.stop(10), Some(0));

    // The same again with JSON logs.
    let log_start = env.daemon_log().len();
    let s = started(&env, "", &["--log-format", "json"]);
    declare("C");
    s.refresh();
    assert!(
        wait_until(30, || env.read("etc/secret").starts_with("C:")),
        "{}",
        env.daemon_log()
    );
    // The file is in place before the line about it is logged.
    let logged = || {
        env.daemon_log()[log_start..]
            .lines()
            .any(|l| l.starts_with('{') && l.contains("etc/secret"))
    };
    assert!(
        wait_until(30, logged),
        "the JSON log does not mention the applied change:\n{}",
        &env.daemon_log()[log_start..]
    );
    let log = env.daemon_log();
    seen.push(("the daemon logs, text and JSON".into(), log.into_bytes()));
    let audit = std::fs::read_to_string(env.state.path().join("audit.jsonl")).unwrap();
    assert!(audit.contains("files/file/etc/secret"), "{audit}");
    drop(s);

    for (path, bytes) in files_except(env.state.path(), &["mirrors", "backups"]) {
        seen.push((path.display().to_string(), bytes));
    }
    for (what, bytes) in &seen {
        assert_absent(&canary, what, bytes);
    }
    assert!(seen.len() > 12, "too little was looked at: {}", seen.len());
}

#[test]
fn the_daemon_logs_as_its_config_says() {
    let env = Env::new();
    commit_a(&env, "a1\n");
    // No log flags: info by default, as plain text (no colour codes in a
    // file).
    let cfg = env.config(QUIET);
    let args = ["--listen", "127.0.0.1:0", "--interval", "1h", "-c"];
    let mut d = env.daemon_as_configured(&[&args[..], &[cfg.to_str().unwrap()]].concat());
    assert!(
        wait_until(30, || env.daemon_log().contains("first pass ended")),
        "no info lines by default:\n{}",
        env.daemon_log()
    );
    assert_eq!(d.stop(10), Some(0));
    let text = env.daemon_log();
    assert!(
        !text.contains('\x1b'),
        "colour codes in a log file:\n{text:?}"
    );
    let addr = util::http::listening_addr(&text).unwrap();
    assert!(text.contains(&format!("addr={addr}")), "{text}");

    // The config's log section alone switches to JSON.
    let cfg = env.config(&format!("{QUIET}log: {{format: json, level: info}}\n"));
    let _d = env.daemon_as_configured(&[&args[..], &[cfg.to_str().unwrap()]].concat());
    let json_lines = || {
        env.daemon_log()[text.len()..]
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .collect::<Vec<_>>()
    };
    assert!(
        wait_until(30, || json_lines()
            .iter()
            .any(|l| l["fields"]["message"] == "first pass ended: ready")),
        "the config's log section was ignored:\n{}",
        &env.daemon_log()[text.len()..]
    );
    let listening = json_lines()
        .into_iter()
        .find(|l| l["fields"]["message"] == "listening")
        .expect("a JSON listening line");
    let addr: std::net::SocketAddr = listening["fields"]["addr"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(util::http::get(addr, "/readyz").status, 200);
}
