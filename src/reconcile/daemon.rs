//! `tend run`: passes at every poll interval (with jitter) and resync,
//! until SIGTERM or SIGINT.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::{full_pass, recover, Context, PassOptions, Recorder};
use crate::config::Settings;
use crate::ledger::{Ledger, StateLock};

fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("tend: {message}");
    ExitCode::from(2)
}

/// Sets the returned flag on SIGTERM or SIGINT.
fn stop_flag() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    let f = flag.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("signal runtime");
        rt.block_on(async {
            use tokio::signal::unix::{signal, SignalKind};
            let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
            let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
            tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
            f.store(true, Ordering::SeqCst);
            // A second signal exits at once.
            tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
            std::process::exit(130);
        });
    });
    flag
}

fn jitter(d: Duration) -> Duration {
    d.mul_f64(rand::random_range(0.9..1.1))
}

pub fn run(settings: Settings) -> ExitCode {
    let stop = stop_flag();
    let _lock = match StateLock::acquire(&settings.state_dir, "tend run") {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    let ledger = match Ledger::open(&settings.state_dir) {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    let ctx = match Context::build(settings) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let mut rec = match Recorder::open(ledger) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    if let Err(e) = recover(&ctx, &rec) {
        return fail(e);
    }
    let opts = PassOptions { allow_mass_prune: false, dry_run: ctx.settings.policy.dry_run };
    let interval = ctx.settings.source.interval.min(ctx.settings.policy.resync);
    tracing::info!(repo = %crate::source::redact_url(&ctx.settings.source.repo), "tend run started");
    while !stop.load(Ordering::SeqCst) {
        let started = Instant::now();
        match super::fetch(&ctx, &rec, SystemTime::now()) {
            Ok(rev) => match full_pass(&ctx, &mut rec, rev, opts) {
                Ok(r) => tracing::info!(revision = %rev, applied = r.applied, failed = r.failed, converged = r.converged, "pass ended"),
                Err(e) => tracing::warn!(error = %e, "pass failed"),
            },
            Err(e) => tracing::warn!(error = %e, "fetch failed; the last good state stays"),
        }
        let wait = jitter(interval).saturating_sub(started.elapsed());
        let until = Instant::now() + wait;
        while Instant::now() < until && !stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    tracing::info!("stopped by signal");
    ExitCode::SUCCESS
}
