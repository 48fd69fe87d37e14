//! Signal hooks: the process whose id a pidfile holds gets a signal (an
//! nginx or a Prometheus that reloads on SIGHUP).

use std::io::Read;
use std::path::Path;

use rustix::process::{kill_process, Pid, Signal};

/// A pidfile is a number and a newline; anything longer is not one.
const PIDFILE_MAX: u64 = 64;

/// Why a signal hook failed, said of its pidfile.
#[derive(Debug, thiserror::Error)]
pub enum SignalError {
    #[error("cannot read: {0}")]
    Read(#[source] std::io::Error),
    #[error("holds no process id: {0:?}")]
    NoPid(String),
    #[error("cannot send {signal:?} to process {pid}: {source}")]
    Send {
        signal: Signal,
        pid: i32,
        source: rustix::io::Errno,
    },
}

pub(super) fn send(pidfile: &Path, signal: Signal) -> Result<(), SignalError> {
    let mut text = String::new();
    std::fs::File::open(pidfile)
        .and_then(|f| f.take(PIDFILE_MAX).read_to_string(&mut text))
        .map_err(SignalError::Read)?;
    let pid = text
        .trim()
        .parse::<i32>()
        .ok()
        .and_then(Pid::from_raw)
        .filter(|p| p.as_raw_nonzero().get() > 0)
        .ok_or_else(|| SignalError::NoPid(text.trim().to_string()))?;
    kill_process(pid, signal).map_err(|source| SignalError::Send {
        signal,
        pid: pid.as_raw_nonzero().get(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn the_process_in_the_pidfile_gets_the_signal() {
        let dir = tempfile::tempdir().unwrap();
        let got = dir.path().join("got");
        let script = format!(
            "trap 'echo hup > {}; exit 0' HUP; echo ready; while :; do sleep 0.05; done",
            got.display()
        );
        // HUP as by default, so the trap takes even under a parent that
        // ignores it (`nohup`): a shell cannot trap a signal ignored when it
        // started.
        let mut child = std::process::Command::new("env")
            .args(["--default-signal=HUP", "sh", "-c", &script])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The trap is set once the shell has said so.
        let mut ready = [0u8; 6];
        child.stdout.take().unwrap().read_exact(&mut ready).unwrap();
        let pidfile = dir.path().join("app.pid");
        std::fs::write(&pidfile, format!("{}\n", child.id())).unwrap();
        send(&pidfile, Signal::HUP).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !got.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(std::fs::read_to_string(&got).unwrap(), "hup\n");
        child.wait().unwrap();

        let err = send(&dir.path().join("none.pid"), Signal::HUP).unwrap_err();
        assert!(matches!(err, SignalError::Read(_)), "{err}");
        std::fs::write(&pidfile, "nginx\n").unwrap();
        let err = send(&pidfile, Signal::HUP).unwrap_err();
        assert!(err.to_string().contains("holds no process id"), "{err}");
    }
}
