//! Work per request that does not grow with what a client asks: a name the
//! ledger does not know costs no diff, diffs run one at a time however many
//! are asked for at once, and the page reads only the rows it shows.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;

use super::{call, fixture, get, populate, record};
use crate::ledger::{Ledger, State};

#[tokio::test]
async fn a_resource_the_ledger_does_not_know_costs_no_diff() {
    let mut f = fixture(&[], None);
    populate(f.dir.path());
    let diffs = Arc::new(AtomicUsize::new(0));
    let counted = diffs.clone();
    f.state.resource_diff = Arc::new(move |_: &str| {
        counted.fetch_add(1, Ordering::SeqCst);
        None
    });
    let long = format!("/api/v1/resources/files/file/{}", "x".repeat(4000));
    for uri in [
        "/api/v1/resources/files/file/nowhere",
        "/resources/files/file/nowhere",
        long.as_str(),
    ] {
        let (status, _, _) = call(f.app(), get(uri)).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{uri}");
    }
    assert_eq!(
        diffs.load(Ordering::SeqCst),
        0,
        "an unknown name was diffed"
    );
    let (status, _, _) = call(f.app(), get("/resources/files/file/etc/hosts")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(diffs.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diffs_asked_for_at_once_run_one_at_a_time() {
    let mut f = fixture(&[], None);
    populate(f.dir.path());
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let (r, m) = (running.clone(), most.clone());
    f.state.resource_diff = Arc::new(move |_: &str| {
        let now = r.fetch_add(1, Ordering::SeqCst) + 1;
        m.fetch_max(now, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(100));
        r.fetch_sub(1, Ordering::SeqCst);
        Some("--- a\n+++ b\n".into())
    });
    let asks: Vec<_> = (0..6)
        .map(|_| {
            let app = f.app();
            tokio::spawn(
                async move { call(app, get("/api/v1/resources/files/file/etc/hosts")).await },
            )
        })
        .collect();
    for a in asks {
        assert_eq!(a.await.unwrap().0, StatusCode::OK);
    }
    assert_eq!(most.load(Ordering::SeqCst), 1, "diffs ran side by side");
}

#[tokio::test]
async fn the_page_reads_the_rows_it_shows_and_counts_the_rest() {
    let f = fixture(&[], None);
    populate(f.dir.path());
    let ledger = Ledger::open(f.dir.path()).unwrap();
    for i in 0..600u64 {
        let id = format!("files/file/many/{i:04}");
        ledger
            .put_resource(&record(&id, State::Drifted, Some(10 + i), None))
            .unwrap();
    }
    let oldest = ledger.resources_not_in_sync_oldest(3).unwrap();
    let ids: Vec<_> = oldest.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "files/file/etc/nginx/nginx.conf",
            "files/file/many/0599",
            "files/file/many/0598"
        ]
    );
    let (status, _, page) = call(f.app(), get("/")).await;
    assert_eq!(status, StatusCode::OK);
    // 600 here and three from populate.
    assert!(page.contains("603 not in sync"), "{page}");
    assert!(page.contains("<h2>Not in sync (603)</h2>"));
    assert!(page.contains("103 more in"), "the rest is counted");
    assert!(page.contains(">files/file/many/0599</a>"));
    assert!(
        !page.contains(">files/file/many/0010</a>"),
        "more rows than shown were listed"
    );
}
