//! Signals and systemd: stop on SIGTERM/SIGINT, reload on SIGHUP, keep the start timeout and
//! the watchdog fed only while the loop shows signs of life.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::Notify;

use super::notify::Notifier;
use crate::reconcile::Control;

/// Cancels on SIGTERM or SIGINT; a second signal exits at once.
pub(super) fn watch_signals(ctl: Arc<Control>, stop: Arc<Notify>) {
    tokio::spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        tracing::info!("stopping: finishing in-flight writes");
        ctl.cancel();
        stop.notify_waiters();
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        std::process::exit(130);
    });
}

/// SIGHUP (systemd's reload, git-sync's "sync now"): a reload, never an end.
pub(super) fn watch_hangup(
    mut hangup: tokio::signal::unix::Signal,
    tx: tokio::sync::mpsc::UnboundedSender<super::Trigger>,
) {
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            tracing::info!("SIGHUP received");
            if tx.send(super::Trigger::Reload).is_err() {
                break;
            }
        }
    });
}

/// systemd: extend the start timeout while the first pass runs, and ping
/// the watchdog only while the loop shows signs of life.
pub(super) fn keep_systemd_informed(
    notifier: Arc<Notifier>,
    ready: Arc<AtomicBool>,
    ctl: Arc<Control>,
) {
    if !notifier.enabled() {
        return;
    }
    let n = notifier.clone();
    tokio::spawn(async move {
        while !ready.load(Ordering::SeqCst) {
            n.extend(Duration::from_secs(30));
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
    });
    if let Some(period) = notifier.watchdog_period() {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            loop {
                tick.tick().await;
                let age = crate::reconcile::unix_millis(SystemTime::now())
                    .saturating_sub(ctl.last_beat_millis());
                if Duration::from_millis(age) < period * 2 {
                    notifier.watchdog();
                }
            }
        });
    }
}
