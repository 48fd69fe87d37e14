//! With no watcher, drift made on disk is seen by the resync: corrected at
//! the resync interval (jittered by a tenth either way), not before.

use super::*;
use crate::ledger::State;

#[tokio::test(start_paused = true)]
async fn drift_is_corrected_at_each_resync_and_not_before() {
    let host = Host::new();
    host.repo.declare(&[("conf", "v1\n")], "v1");
    let (d, run) = host.start("1h", "resync: 2m");
    let resync = Duration::from_secs(120);
    run.beside(async {
        until(secs(1.0), "the first pass", || {
            host.read("conf").as_deref() == Some("v1\n")
        })
        .await;
        let mut last = Duration::ZERO;
        for _ in 0..2 {
            elapse(secs(1.0)).await;
            host.write("conf", "drifted\n");
            let reconciled = d.reconciled();
            // No pass at all until the resync's earliest time.
            elapse_to(&d, last + resync.mul_f64(0.9) - STEP).await;
            assert_eq!(host.read("conf").as_deref(), Some("drifted\n"));
            assert_eq!(d.reconciled(), reconciled);
            until(
                resync.mul_f64(0.2) + 3 * STEP,
                "corrected at the resync",
                || host.read("conf").as_deref() == Some("v1\n"),
            )
            .await;
            let at = d.elapsed();
            assert!(at <= last + resync.mul_f64(1.1) + 2 * STEP, "{at:?}");
            assert_eq!(d.reconciled(), reconciled + 1, "one full pass");
            assert!(is(&host.record(CONF), State::InSync));
            last = at;
        }
    })
    .await;
}
