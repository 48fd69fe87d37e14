//! Fetch memory does not grow with blob size: a 200 MB blob pushed to the
//! repository (refused by the declaration's 64 MiB limit) is fetched over
//! a local path with a peak resident size well below the blob's: the
//! kernel's own count for the `tend sync` process (`ru_maxrss` from
//! `wait4`), so a busy machine cannot blur it. Over smart HTTP, libgit2
//! maps the received pack whole once while completing a thin pack (clean
//! file pages, given back under pressure): there the anonymous memory is
//! what is bounded, sampled from /proc every few milliseconds (holding a
//! 200 MB blob would take far longer than that).

mod util;

use std::io::Write;
use std::process::{Command, Stdio};

use util::https::HttpsServer;
use util::{Env, Run};

const BLOB: usize = 200 << 20;
/// Far below the blob: a fetch that held it whole, or mapped all of its
/// pack at once, goes over.
const LIMIT_KIB: i64 = 120 << 10;
/// Anonymous memory: the process's own heap and stacks.
const ANON_LIMIT_KIB: i64 = 64 << 10;

/// What one run of tend took at most.
struct Peak {
    /// Resident set, file pages included (`ru_maxrss`), in KiB.
    total: i64,
    /// Anonymous resident memory, the most seen while sampling, in KiB.
    anon: i64,
}

/// Runs `cmd` and returns its outcome and peaks.
fn peak_rss(mut cmd: Command) -> (Run, Peak) {
    let out = tempfile::tempdir().unwrap();
    let (o, e) = (out.path().join("out"), out.path().join("err"));
    cmd.stdin(Stdio::null())
        .stdout(std::fs::File::create(&o).unwrap())
        .stderr(std::fs::File::create(&e).unwrap());
    let child = cmd.spawn().expect("start tend");
    let pid = child.id() as libc::pid_t;
    // Sampled until the process is a zombie (it is reaped only below).
    let sampler = std::thread::spawn(move || {
        let mut anon = 0;
        while let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            if status.contains("State:\tZ") {
                break;
            }
            let kib = status
                .lines()
                .find_map(|l| l.strip_prefix("RssAnon:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<i64>().ok());
            anon = anon.max(kib.unwrap_or(0));
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        anon
    });
    let mut status = 0;
    // SAFETY: plain out-parameters; `child` is never waited on elsewhere.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let anon = sampler.join().unwrap();
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid, "wait4: {}", std::io::Error::last_os_error());
    std::mem::forget(child);
    let run = Run {
        code: if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            -1
        },
        stdout: std::fs::read_to_string(o).unwrap(),
        stderr: std::fs::read_to_string(e).unwrap(),
    };
    let peak = Peak {
        total: usage.ru_maxrss,
        anon,
    };
    eprintln!(
        "peak: {} MiB, anonymous {} MiB",
        peak.total >> 10,
        peak.anon >> 10
    );
    (run, peak)
}

/// A repository with one small file.
fn small_repo(env: &Env) {
    env.repo.write("small.txt", "small");
    env.repo.commit("small");
}

/// A commit adding 200 MB that do not compress (xorshift noise).
fn add_big(env: &Env) {
    let mut f = std::fs::File::create(env.repo.path().join("big.bin")).unwrap();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut chunk = vec![0u8; 1 << 20];
    for _ in 0..BLOB / chunk.len() {
        for b in chunk.chunks_exact_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b.copy_from_slice(&x.to_le_bytes());
        }
        f.write_all(&chunk).unwrap();
    }
    drop(f);
    env.repo.write("small.txt", "small, again");
    env.repo.commit("big");
}

fn assert_refused(env: &Env, run: &Run) {
    assert_eq!(run.code, 3, "the big file is refused: {run:?}");
    assert!(run.all().contains("over the"), "{run:?}");
    assert_eq!(env.read("small.txt"), "small, again");
}

#[test]
fn a_big_blob_from_a_local_repository_is_fetched_in_bounded_memory() {
    let env = Env::new();
    small_repo(&env);
    assert_eq!(env.tend(&["sync", "--mirror"]).code, 0);
    add_big(&env);
    let (run, peak) = peak_rss(env.cmd(&["sync", "--mirror"]));
    assert_refused(&env, &run);
    assert!(
        peak.total < LIMIT_KIB,
        "peak resident size {} MiB while fetching a {} MiB blob",
        peak.total >> 10,
        BLOB >> 20
    );
}

#[test]
fn a_big_blob_over_https_is_fetched_in_bounded_memory() {
    let Some(server) = HttpsServer::start("tend", "secret") else {
        return;
    };
    let env = Env::new();
    small_repo(&env);
    server.publish("big.git", env.repo.path());
    let token = env.state.path().join("token");
    std::fs::write(&token, "secret").unwrap();
    let cfg = env.config(&format!(
        "source:\n  auth:\n    token_file: {}\n    ca_file: {}\n",
        token.display(),
        server.ca_file().display()
    ));
    let cmd = |env: &Env| {
        let mut c = util::tend_cmd();
        c.args(["sync", "--mirror", "-c"])
            .arg(&cfg)
            .args(["--repo", &server.url("big.git"), "--root"])
            .arg(env.root())
            .arg("--state-dir")
            .arg(env.state.path());
        c
    };
    let (first, _) = peak_rss(cmd(&env));
    assert_eq!(first.code, 0, "{first:?}");
    add_big(&env);
    let (run, peak) = peak_rss(cmd(&env));
    assert_refused(&env, &run);
    assert!(
        peak.anon < ANON_LIMIT_KIB,
        "anonymous memory {} MiB while fetching a {} MiB blob",
        peak.anon >> 10,
        BLOB >> 20
    );
}
