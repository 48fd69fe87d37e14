//! Command hooks: the only commands tend runs, told the revision and the
//! number of changed resources in `TEND_REVISION` and `TEND_CHANGED`.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::Delivery;

/// Runs `argv` to completion or until `timeout`, logging its output.
pub(super) fn run(
    name: &str,
    argv: &[String],
    timeout: Duration,
    delivery: &Delivery,
) -> Result<(), String> {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .env("TEND_REVISION", delivery.revision)
        .env("TEND_CHANGED", delivery.changed.to_string());
    // A hook dies with tend: if tend is killed mid-hook, the intent stays
    // pending and the hook runs again after the restart, rather than a
    // half-finished copy racing the next one. Killed between fork and the
    // prctl, tend would never send the signal: the child sees its parent
    // changed and does not start.
    let tend = rustix::process::getpid();
    // SAFETY: prctl(PR_SET_PDEATHSIG) and getppid are single
    // async-signal-safe system calls that touch no memory of the parent.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
                .map_err(std::io::Error::from)?;
            match rustix::process::getppid() {
                Some(parent) if parent == tend => Ok(()),
                _ => Err(std::io::Error::other("tend is gone")),
            }
        });
    }
    crate::open_files::put_back_for(&mut cmd);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("hook {name}: cannot start {:?}: {e}", argv[0]))?;
    let (mut out, mut err) = (child.stdout.take(), child.stderr.take());
    // Readers on threads so a chatty hook cannot block on a full pipe.
    let read = |p: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = p {
                let _ = p.by_ref().take(64 << 10).read_to_end(&mut buf);
                let _ = std::io::copy(&mut p, &mut std::io::sink());
            }
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out_t = read(out.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let err_t = read(err.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break Err(format!("hook {name}: timed out after {timeout:?}"));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => break Err(format!("hook {name}: {e}")),
        }
    };
    let (stdout, stderr) = (
        out_t.join().unwrap_or_default(),
        err_t.join().unwrap_or_default(),
    );
    if !stdout.trim().is_empty() {
        tracing::info!(hook = name, output = stdout.trim(), "hook stdout");
    }
    if !stderr.trim().is_empty() {
        tracing::info!(hook = name, output = stderr.trim(), "hook stderr");
    }
    let status = status?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("hook {name}: exited with {status}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DELIVERY: Delivery = Delivery {
        revision: "0123abcd",
        changed: 3,
    };

    fn run_ms(args: &[&str], timeout: u64) -> Result<(), String> {
        let argv: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        run("h", &argv, Duration::from_millis(timeout), &DELIVERY)
    }

    #[test]
    fn success_failure_and_timeout() {
        assert!(run_ms(&["true"], 5000).is_ok());
        assert!(run_ms(&["false"], 5000).unwrap_err().contains("exited"));
        let started = Instant::now();
        assert!(run_ms(&["sleep", "10"], 200)
            .unwrap_err()
            .contains("timed out"));
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(run_ms(&["/nonexistent/hook"], 100)
            .unwrap_err()
            .contains("cannot start"));
    }

    #[test]
    fn a_command_is_told_the_revision_and_the_change_count() {
        let script = r#"[ "$TEND_REVISION" = 0123abcd ] && [ "$TEND_CHANGED" = 3 ]"#;
        assert!(run_ms(&["sh", "-c", script], 5000).is_ok());
        let wrong = r#"[ "$TEND_CHANGED" = 4 ]"#;
        assert!(run_ms(&["sh", "-c", wrong], 5000).is_err());
    }
}
