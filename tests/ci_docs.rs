//! The CI jobs of docs/ci.md, run as written so the docs cannot rot: the
//! GitHub Actions job's `run:` steps and the GitLab job's `script:`, read
//! from the fenced blocks tagged `yaml ci-github` and `yaml ci-gitlab`, on
//! a real repository with a base branch and proposed ones. The forge's API
//! is a local HTTP server that records what is posted (the forge cannot run
//! here; everything else is real: git, bash, jq, curl, tend).

mod util;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use util::TestRepo;

/// A request the forge's API received.
#[derive(Debug, Clone)]
struct Posted {
    method: String,
    path: String,
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

/// Answers every request with 201 and keeps it.
struct Forge {
    addr: std::net::SocketAddr,
    posted: Arc<Mutex<Vec<Posted>>>,
}

impl Forge {
    fn start() -> Forge {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let posted = Arc::new(Mutex::new(Vec::new()));
        let keep = posted.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                serve(stream, &keep);
            }
        });
        Forge { addr, posted }
    }

    fn take(&self) -> Vec<Posted> {
        std::mem::take(&mut *self.posted.lock().unwrap())
    }
}

/// Reads one request and keeps it, then answers: whoever got the answer
/// finds the request kept.
fn serve(stream: std::net::TcpStream, keep: &Mutex<Vec<Posted>>) -> Option<()> {
    let mut writer = stream.try_clone().ok()?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut headers = BTreeMap::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
    }
    if headers
        .get("expect")
        .is_some_and(|e| e.eq_ignore_ascii_case("100-continue"))
    {
        writer.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").ok()?;
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|l| l.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    keep.lock().unwrap().push(Posted {
        method,
        path,
        headers,
        body,
    });
    let answer = "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}";
    writer.write_all(answer.as_bytes()).ok()
}

/// The fenced block of docs/ci.md tagged `tag`, parsed.
fn job_file(tag: &str) -> serde_yaml::Value {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/ci.md"))
        .expect("docs/ci.md");
    let start = doc
        .find(&format!("```{tag}\n"))
        .unwrap_or_else(|| panic!("docs/ci.md has no block tagged {tag}"));
    let body = &doc[start + tag.len() + 4..];
    let end = body.find("\n```").expect("the block ends");
    serde_yaml::from_str(&body[..end]).unwrap_or_else(|e| panic!("{tag}: {e}"))
}

fn text(v: &serde_yaml::Value) -> String {
    match v {
        serde_yaml::Value::String(s) => s.clone(),
        serde_yaml::Value::Number(n) => n.to_string(),
        serde_yaml::Value::Bool(b) => b.to_string(),
        other => panic!("not a scalar: {other:?}"),
    }
}

/// A job's environment: its values, with the forge's `${{ }}` expressions
/// replaced by what the forge would give.
fn environment(map: &serde_yaml::Value, forge: &BTreeMap<&str, String>) -> Vec<(String, String)> {
    let Some(map) = map.as_mapping() else {
        return Vec::new();
    };
    map.iter()
        .map(|(k, v)| {
            let (k, v) = (text(k), text(v));
            if v.contains("${{") {
                let given = forge.get(k.as_str()).unwrap_or_else(|| {
                    panic!("docs/ci.md: {k} = {v}: the test does not know this expression")
                });
                return (k, given.clone());
            }
            (k, v)
        })
        .collect()
}

/// One script run as the runner does: bash, stop at the first failure.
fn run_script(script: &str, cwd: &Path, env: &[(String, String)]) -> std::process::Output {
    assert!(
        !script.contains("${{"),
        "`${{{{ }}}}` in a script: {script}"
    );
    let bin = Path::new(util::tend_bin()).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut c = Command::new("bash");
    c.args(["--noprofile", "--norc", "-eo", "pipefail", "-c", script]);
    for (k, _) in std::env::vars() {
        if k.starts_with("TEND_") || k.starts_with("GITHUB_") || k.starts_with("CI_") {
            c.env_remove(k);
        }
    }
    c.current_dir(cwd)
        .env("PATH", path)
        .envs(env.iter().cloned());
    c.output().expect("run bash")
}

/// What a job did: whether every step succeeded, and their output.
struct Outcome {
    ok: bool,
    log: String,
}

fn github_job(cwd: &Path, base: &str, api: &str) -> Outcome {
    let file = job_file("yaml ci-github");
    let jobs = file["jobs"].as_mapping().expect("jobs");
    assert_eq!(jobs.len(), 1, "one job");
    let job = jobs.values().next().unwrap();
    let forge: BTreeMap<&str, String> = [
        ("BASE", base.to_string()),
        ("PR", "7".to_string()),
        ("GITHUB_TOKEN", "test-token".to_string()),
    ]
    .into_iter()
    .collect();
    let mut env = environment(&file["env"], &forge);
    env.extend(environment(&job["env"], &forge));
    env.push(("GITHUB_API_URL".into(), api.into()));
    env.push(("GITHUB_REPOSITORY".into(), "ops/hosts".into()));
    let steps = job["steps"].as_sequence().expect("steps");
    assert!(
        steps
            .iter()
            .any(|s| s["name"].as_str() == Some("Install tend")),
        "the step the test skips is there"
    );
    let mut log = String::new();
    for step in steps {
        let Some(script) = step["run"].as_str() else {
            assert!(step["uses"].is_string(), "{step:?}");
            continue;
        };
        if step["name"].as_str() == Some("Install tend") {
            continue;
        }
        let mut env = env.clone();
        env.extend(environment(&step["env"], &forge));
        let out = run_script(script, cwd, &env);
        log.push_str(&format!(
            "$ {script}\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
        if !out.status.success() {
            return Outcome { ok: false, log };
        }
    }
    Outcome { ok: true, log }
}

fn gitlab_job(cwd: &Path, base: &str, api: &str) -> Outcome {
    let file = job_file("yaml ci-gitlab");
    let job = &file["tend"];
    let rules = serde_yaml::to_string(&job["rules"]).unwrap();
    assert!(rules.contains("merge_request_event"), "{rules}");
    let mut env = environment(&job["variables"], &BTreeMap::new());
    for (k, v) in [
        ("CI_PIPELINE_SOURCE", "merge_request_event"),
        ("CI_API_V4_URL", api),
        ("CI_PROJECT_ID", "42"),
        ("CI_MERGE_REQUEST_IID", "7"),
        ("CI_MERGE_REQUEST_DIFF_BASE_SHA", base),
        ("TEND_NOTES_TOKEN", "test-token"),
    ] {
        env.push((k.into(), v.into()));
    }
    let script: Vec<String> = job["script"]
        .as_sequence()
        .expect("script")
        .iter()
        .map(text)
        .collect();
    let out = run_script(&script.join("\n"), cwd, &env);
    Outcome {
        ok: out.status.success(),
        log: format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// The declarations directory the jobs point tend at (`TEND_PATH`).
fn declarations_dir() -> String {
    let file = job_file("yaml ci-github");
    let job = file["jobs"]
        .as_mapping()
        .unwrap()
        .values()
        .next()
        .unwrap()
        .clone();
    text(&job["env"]["TEND_PATH"])
}

/// A repository with `main` and the proposed branches `change` (valid),
/// `same` (no declared change) and `broken` (an invalid declaration).
fn origin(dir: &str) -> (TestRepo, String) {
    let repo = TestRepo::new();
    let decl = format!("{dir}/site.tend.yaml");
    repo.write(
        &decl,
        "kind: file\npath: etc/nginx/nginx.conf\nsource: nginx.conf\nowner: www-data-ci\non_change: nginx-reload\n---\nkind: file\npath: etc/app/token\ncontent: \"s3cret-one\"\nsensitive: true\n",
    )
    .write(&format!("{dir}/nginx.conf"), "worker_processes 1;\n");
    let base = repo.commit("base");
    repo.git(&["checkout", "-q", "-b", "change"]);
    repo.write(&format!("{dir}/nginx.conf"), "worker_processes 4;\n").write(
        &decl,
        "kind: file\npath: etc/nginx/nginx.conf\nsource: nginx.conf\nowner: www-data-ci\non_change: nginx-reload\nmode: \"0640\"\n---\nkind: file\npath: etc/app/token\ncontent: \"s3cret-two\"\nsensitive: true\n",
    );
    repo.commit("more workers");
    repo.git(&["checkout", "-q", "-b", "same", "main"]);
    repo.write("README", "notes\n");
    repo.commit("notes only");
    repo.git(&["checkout", "-q", "-b", "broken", "main"]);
    repo.write(
        &format!("{dir}/bad.tend.yaml"),
        "kind: file\npath: /etc/abs\ncontent: x\n",
    );
    repo.commit("broken");
    repo.git(&["checkout", "-q", "main"]);
    (repo, base)
}

/// A CI checkout of `branch`: a full clone, the branch checked out.
fn checkout(origin: &TestRepo, branch: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("tend-ci-")
        .tempdir()
        .unwrap();
    let out = Command::new("git")
        .args(["clone", "-q", "--branch", branch])
        .arg(origin.path())
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    dir
}

#[test]
fn the_ci_jobs_of_the_docs_run_and_fail_on_invalid_declarations() {
    for tool in ["jq", "curl"] {
        let found = Command::new(tool).arg("--version").output().is_ok();
        if !util::can_run(found, &format!("{tool} is not installed")) {
            return;
        }
    }
    let dir = declarations_dir();
    let (origin, base) = origin(&dir);
    let forge = Forge::start();
    type Job = fn(&Path, &str, &str) -> Outcome;
    let jobs: [(&str, Job, String, String); 2] = [
        (
            "github",
            github_job,
            format!("http://{}", forge.addr),
            "/repos/ops/hosts/issues/7/comments".into(),
        ),
        (
            "gitlab",
            gitlab_job,
            format!("http://{}/api/v4", forge.addr),
            "/api/v4/projects/42/merge_requests/7/notes".into(),
        ),
    ];
    for (name, job, api, comments) in &jobs {
        // A valid change: the steps pass, and the comment says what changes.
        let ci = checkout(&origin, "change");
        let done = job(ci.path(), &base, api);
        assert!(done.ok, "{name}: {}", done.log);
        let md = std::fs::read_to_string(ci.path().join("tend-diff.md")).expect("tend-diff.md");
        assert!(
            md.contains(
                "| update | `files/file/etc/nginx/nginx.conf` | `mode 0644 -> 0640`, `content` |"
            ),
            "{name}: {md}"
        );
        assert!(
            md.contains("| update | `files/file/etc/app/token` | `content (sensitive)` |"),
            "{md}"
        );
        assert!(md.contains("+worker_processes 4;"), "{md}");
        assert!(!md.contains("s3cret"), "{md}");
        let posted = forge.take();
        assert_eq!(posted.len(), 1, "{name}: {posted:?}");
        let p = &posted[0];
        assert_eq!(
            (p.method.as_str(), p.path.as_str()),
            ("POST", comments.as_str()),
            "{name}"
        );
        let body = match *name {
            "github" => {
                assert_eq!(
                    p.headers.get("authorization").map(String::as_str),
                    Some("Bearer test-token")
                );
                let v: serde_json::Value = serde_json::from_slice(&p.body).unwrap();
                v["body"].as_str().unwrap().to_string()
            }
            _ => {
                assert_eq!(
                    p.headers.get("private-token").map(String::as_str),
                    Some("test-token")
                );
                let form: Vec<(String, String)> = serde_urlencoded::from_bytes(&p.body).unwrap();
                form.into_iter().find(|(k, _)| k == "body").expect("body").1
            }
        };
        assert_eq!(body, md, "{name}: the comment is the Markdown");

        // Nothing declared changes: the steps pass and say so.
        let ci = checkout(&origin, "same");
        let done = job(ci.path(), &base, api);
        assert!(done.ok, "{name}: {}", done.log);
        let md = std::fs::read_to_string(ci.path().join("tend-diff.md")).unwrap();
        assert!(md.contains("No declared resource changes."), "{md}");
        assert_eq!(forge.take().len(), 1, "{name}");

        // An invalid declaration fails the job, naming it, and posts nothing.
        let ci = checkout(&origin, "broken");
        let done = job(ci.path(), &base, api);
        assert!(!done.ok, "{name}: {}", done.log);
        assert!(
            done.log.contains(&format!("{dir}/bad.tend.yaml:1:")),
            "{name}: {}",
            done.log
        );
        assert!(forge.take().is_empty(), "{name}");
    }
}
