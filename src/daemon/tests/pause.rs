//! A pause with an end (`tend pause --for`) holds corrections back until
//! the clock passes its end; the next tick then runs a pass that corrects.

use super::*;
use crate::ledger::State;

#[tokio::test(start_paused = true)]
async fn a_pause_holds_corrections_back_until_it_runs_out() {
    let host = Host::new();
    host.repo.declare(&[("conf", "v1\n")], "v1");
    let (d, run) = host.start("1h", "resync: 1h");
    let ours = || host.read("conf").as_deref() == Some("v1\n");
    run.beside(async {
        until(secs(1.0), "the first pass", ours).await;
        let ends = secs(30.5);
        host.ledger().pause(Some(CONF), Some(d.at(ends))).unwrap();
        // The tick sees the pause; then drift is left alone.
        elapse(secs(2.0)).await;
        host.write("conf", "emergency\n");
        d.changed(&[CONF]);
        until(secs(1.0), "paused", || {
            is(&host.record(CONF), State::Paused)
        })
        .await;
        elapse_to(&d, ends - STEP).await;
        assert_eq!(host.read("conf").as_deref(), Some("emergency\n"));
        assert!(is(&host.record(CONF), State::Paused));
        // Once it ran out, the next tick (once a second) corrects.
        until(secs(1.0) + STEP, "corrected after the pause", || {
            ours() && is(&host.record(CONF), State::InSync)
        })
        .await;
        assert!(d.elapsed() >= ends);
    })
    .await;
}
