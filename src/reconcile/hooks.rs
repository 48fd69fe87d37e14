//! Runs the hooks named in the local config: the only commands tend runs.
//! Declarations only refer to them by name.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::config::Hook;

/// Runs `hook` to completion or until its timeout, logging its output.
pub fn run(name: &str, hook: &Hook) -> Result<(), String> {
    let mut cmd = Command::new(&hook.run[0]);
    cmd.args(&hook.run[1..]);
    // A hook dies with tend: if tend is killed mid-hook, the intent stays
    // pending and the hook runs again after the restart, rather than a
    // half-finished copy racing the next one.
    // SAFETY: prctl(PR_SET_PDEATHSIG) is a single async-signal-safe system
    // call that touches no memory of the parent.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
                .map_err(std::io::Error::from)
        });
    }
    crate::open_files::put_back_for(&mut cmd);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("hook {name}: cannot start {:?}: {e}", hook.run[0]))?;
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
    let deadline = Instant::now() + hook.timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break Err(format!("hook {name}: timed out after {:?}", hook.timeout));
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
        tracing::info!(hook = name, "hook ran");
        Ok(())
    } else {
        Err(format!("hook {name}: exited with {status}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(args: &[&str], timeout: u64) -> Hook {
        Hook {
            run: args.iter().map(|s| s.to_string()).collect(),
            timeout: Duration::from_millis(timeout),
        }
    }

    #[test]
    fn success_failure_and_timeout() {
        assert!(run("ok", &hook(&["true"], 5000)).is_ok());
        assert!(run("bad", &hook(&["false"], 5000))
            .unwrap_err()
            .contains("exited"));
        let started = Instant::now();
        assert!(run("slow", &hook(&["sleep", "10"], 200))
            .unwrap_err()
            .contains("timed out"));
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(run("missing", &hook(&["/nonexistent/hook"], 100))
            .unwrap_err()
            .contains("cannot start"));
    }
}
