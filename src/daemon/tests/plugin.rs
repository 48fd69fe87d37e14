//! A plugin that keeps crashing is started again by the one retry rule:
//! however often its resources are looked at, each start waits the backoff
//! of the starts that failed before it, on the loop's clock.

use super::*;
use crate::ledger::State;
use crate::reconcile::backoff;

#[tokio::test(start_paused = true)]
async fn a_crashing_plugin_is_started_again_with_growing_backoff() {
    let host = Host::new();
    let starts = host.state.with_extension("starts");
    let store = host.state.with_extension("flags.json");
    let faulty = format!("{}/fixtures/plugins/faulty", env!("CARGO_MANIFEST_DIR"));
    // Each start leaves a line, then the plugin answers `initialize` and
    // crashes at every `observe`.
    let script = format!(
        "echo started >> '{}'; exec '{faulty}' --store '{}' --fault crash --on observe",
        starts.display(),
        store.display()
    );
    std::fs::write(
        host.repo.dir.join("flags.tend.yaml"),
        "kind: flag\nname: beta\nspec: {on: true}\n",
    )
    .unwrap();
    host.repo.declare(&[("conf", "v1\n")], "v1");
    let more = More {
        targets: format!(", flags: {{type: exec, command: [sh, -c, {script:?}], timeout: 15s}}"),
        ..More::default()
    };
    let started = || {
        std::fs::read_to_string(&starts)
            .map(|s| s.lines().count())
            .unwrap_or(0)
    };
    let (d, run) = host.start_with(host.settings_with("1h", "resync: 1h", more));
    run.beside(async {
        until(secs(1.0), "the first start crashed", || {
            is(&host.record("flags/flag/beta"), State::Unknown)
        })
        .await;
        assert_eq!(started(), 1);
        let mut at = vec![Duration::ZERO];
        for n in 2..=6 {
            until(secs(40.0), &format!("start {n}"), || started() >= n).await;
            assert_eq!(started(), n, "one start at a time");
            at.push(d.elapsed());
        }
        let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
        for (k, gap) in gaps.iter().enumerate() {
            let delay = backoff::delay(k as u32 + 1);
            // Started at the first look after the backoff: the resource is
            // looked at again a second after each failure.
            assert!(
                *gap >= delay.mul_f64(0.89) && *gap <= delay.mul_f64(1.11) + secs(1.0) + 2 * STEP,
                "start {} after {gap:?}, the backoff is {delay:?}: {gaps:?}",
                k + 2
            );
        }
        assert!(gaps.windows(2).all(|w| w[1] > w[0]), "{gaps:?}");
        // The files target is not held up by the plugin.
        assert_eq!(host.read("conf").as_deref(), Some("v1\n"));
    })
    .await;
}
