//! Webhooks with the push-event examples GitHub, GitLab and Gitea document
//! (shortened, structure and `ref` kept), signed here as each service signs.

use axum::body::Body;
use axum::http::{Request, StatusCode};

use super::{call, fixture, hmac_hex};
use crate::server::BODY_LIMIT;

const GITHUB: &str = include_str!("payloads/github-push.json");
const GITLAB: &str = include_str!("payloads/gitlab-push.json");
const GITEA: &str = include_str!("payloads/gitea-push.json");
const SECRET: &str = "It's a Secret to Everybody";

#[derive(Debug, Clone, Copy, PartialEq)]
enum Sender {
    GitHub,
    GitLab,
    Gitea,
    Generic,
}

const ALL: [Sender; 4] = [
    Sender::GitHub,
    Sender::GitLab,
    Sender::Gitea,
    Sender::Generic,
];

impl Sender {
    fn name(self) -> &'static str {
        match self {
            Sender::GitHub => "github",
            Sender::GitLab => "gitlab",
            Sender::Gitea => "gitea",
            Sender::Generic => "generic",
        }
    }

    /// The documented example and the branch it pushes to.
    fn example(self) -> (String, &'static str) {
        match self {
            // GitHub's example pushes (deletes) a tag; the branch push is the
            // same document with a branch ref.
            Sender::GitHub => (
                GITHUB.replace("refs/tags/simple-tag", "refs/heads/main"),
                "main",
            ),
            Sender::GitLab => (GITLAB.to_string(), "master"),
            Sender::Gitea => (GITEA.to_string(), "develop"),
            Sender::Generic => (r#"{"ref": "refs/heads/main"}"#.to_string(), "main"),
        }
    }

    /// A request as the service sends it, authenticated with `secret`.
    fn request(self, secret: &str, body: impl Into<Vec<u8>>) -> Request<Body> {
        let body = body.into();
        let sig = hmac_hex(secret, &body);
        let b = Request::post(format!("/webhook/{}", self.name()))
            .header("content-type", "application/json");
        let b = match self {
            Sender::GitHub => b
                .header("x-github-event", "push")
                .header("x-hub-signature-256", format!("sha256={sig}")),
            Sender::GitLab => b
                .header("x-gitlab-event", "Push Hook")
                .header("x-gitlab-token", secret),
            Sender::Gitea => b
                .header("x-gitea-event", "push")
                .header("x-gitea-signature", sig),
            Sender::Generic => b.header("x-tend-signature", format!("sha256={sig}")),
        };
        b.body(Body::from(body)).unwrap()
    }
}

#[tokio::test]
async fn a_valid_push_to_the_followed_branch_triggers_one_fetch() {
    for sender in ALL {
        let (body, branch) = sender.example();
        let mut f = fixture(&[(sender.name(), SECRET)], Some(branch));
        let (status, _, text) = call(f.app(), sender.request(SECRET, body)).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{sender:?}: {text}");
        assert_eq!(f.sent(), 1, "{sender:?} sent no trigger");
        let metrics = f.state.metrics.encode();
        let series = format!(
            "tend_webhook_requests_total{{provider=\"{}\",result=\"triggered\"}} 1",
            sender.name()
        );
        assert!(metrics.contains(&series), "{sender:?}: {metrics}");
    }
}

#[tokio::test]
async fn a_wrong_or_missing_signature_is_401() {
    for sender in ALL {
        let (body, branch) = sender.example();
        let mut f = fixture(&[(sender.name(), SECRET)], Some(branch));
        let (status, _, _) = call(f.app(), sender.request("not the secret", body.clone())).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{sender:?}");
        let unsigned = Request::post(format!("/webhook/{}", sender.name()))
            .body(Body::from(body))
            .unwrap();
        let (status, _, _) = call(f.app(), unsigned).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{sender:?} unsigned");
        assert_eq!(
            f.sent(),
            0,
            "{sender:?}: an unauthenticated request triggered a fetch"
        );
    }
}

#[tokio::test]
async fn a_signature_over_another_body_is_401() {
    let (body, branch) = Sender::GitHub.example();
    let f = fixture(&[("github", SECRET)], Some(branch));
    let mut request = Sender::GitHub.request(SECRET, body.clone());
    *request.body_mut() = Body::from(body.replace("Codertocat", "Mallory"));
    let (status, _, _) = call(f.app(), request).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn an_oversized_body_is_413() {
    for sender in ALL {
        let (_, branch) = sender.example();
        let mut f = fixture(&[(sender.name(), SECRET)], Some(branch));
        let big = vec![b' '; BODY_LIMIT + 1];
        let mut declared = sender.request(SECRET, big.clone());
        declared
            .headers_mut()
            .insert("content-length", (BODY_LIMIT + 1).into());
        let (status, _, _) = call(f.app(), declared).await;
        assert_eq!(
            status,
            StatusCode::PAYLOAD_TOO_LARGE,
            "{sender:?} with a length"
        );
        let (status, _, _) = call(f.app(), sender.request(SECRET, big)).await;
        assert_eq!(
            status,
            StatusCode::PAYLOAD_TOO_LARGE,
            "{sender:?} without a length header"
        );
        assert_eq!(f.sent(), 0);
    }
}

/// Over a real port, a chunked body announces no length; the cap still
/// holds, and the answer comes while the sender is still sending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_oversized_body_is_413_over_a_real_port() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut f = fixture(&[("generic", SECRET)], None);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(crate::server::serve(
        listener,
        f.state.clone(),
        crate::server::Limits::default(),
        std::future::pending(),
    ));
    let conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut rx, mut tx) = conn.into_split();
    let reader = tokio::spawn(async move {
        let mut response = Vec::new();
        let _ = rx.read_to_end(&mut response).await;
        String::from_utf8_lossy(&response).into_owned()
    });
    let head = "POST /webhook/generic HTTP/1.1\r\nHost: tend\r\nTransfer-Encoding: chunked\r\n\
                X-Tend-Signature: sha256=00\r\n\r\n";
    tx.write_all(head.as_bytes()).await.unwrap();
    let chunk = [b"10000\r\n".to_vec(), vec![b'x'; 0x10000], b"\r\n".to_vec()].concat();
    let mut sent = 0;
    // An endless body: the server must answer without waiting for its end.
    while sent < 64 * BODY_LIMIT && !reader.is_finished() {
        match tokio::time::timeout(std::time::Duration::from_secs(5), tx.write_all(&chunk)).await {
            Ok(Ok(())) => sent += 0x10000,
            _ => break,
        }
    }
    let response = tokio::time::timeout(std::time::Duration::from_secs(10), reader)
        .await
        .unwrap()
        .unwrap();
    assert!(
        response.starts_with("HTTP/1.1 413"),
        "after {sent} bytes: {response:?}"
    );
    assert!(
        sent < 16 * BODY_LIMIT,
        "the server let {sent} bytes in before refusing"
    );
    assert_eq!(f.sent(), 0);
    server.abort();
}

#[tokio::test]
async fn garbage_json_with_a_valid_signature_is_400() {
    for sender in ALL {
        let mut f = fixture(&[(sender.name(), SECRET)], None);
        for garbage in [
            "{\"ref\": \"refs/heads/main\"",
            "not json at all",
            "[1,2,3]",
            "{\"ref\": 42}",
        ] {
            let (status, _, text) = call(f.app(), sender.request(SECRET, garbage)).await;
            assert_eq!(
                status,
                StatusCode::BAD_REQUEST,
                "{sender:?} {garbage:?}: {text}"
            );
        }
        let deep = "[".repeat(100_000);
        let (status, _, _) = call(f.app(), sender.request(SECRET, deep)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{sender:?}: deep nesting");
        assert_eq!(f.sent(), 0);
    }
}

#[tokio::test]
async fn garbage_without_a_valid_signature_is_401_not_parsed() {
    let f = fixture(&[("gitea", SECRET)], None);
    let (status, _, _) = call(f.app(), Sender::Gitea.request("wrong", "not json")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_push_to_another_branch_is_ignored() {
    for sender in ALL {
        let (body, _) = sender.example();
        let mut f = fixture(&[(sender.name(), SECRET)], Some("production"));
        let (status, _, text) = call(f.app(), sender.request(SECRET, body)).await;
        assert_eq!(status, StatusCode::OK, "{sender:?}: {text}");
        assert!(text.contains("ignored"), "{text}");
        assert_eq!(
            f.sent(),
            0,
            "{sender:?}: a push to another branch triggered a fetch"
        );
    }
    // GitHub's documented example exactly: a tag, not the followed branch.
    let mut f = fixture(&[("github", SECRET)], Some("main"));
    let (status, _, _) = call(f.app(), Sender::GitHub.request(SECRET, GITHUB)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(f.sent(), 0);
}

#[tokio::test]
async fn following_any_branch_or_a_tag_accepts_its_pushes() {
    let mut any = fixture(&[("gitlab", SECRET)], None);
    let (status, _, _) = call(any.app(), Sender::GitLab.request(SECRET, GITLAB)).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(any.sent(), 1);
    let mut tag = fixture(&[("github", SECRET)], Some("simple-tag"));
    let (status, _, _) = call(tag.app(), Sender::GitHub.request(SECRET, GITHUB)).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(tag.sent(), 1);
}

#[tokio::test]
async fn an_endpoint_without_a_secret_is_404() {
    for sender in ALL {
        let (body, branch) = sender.example();
        let others: Vec<(&str, &str)> = ALL
            .iter()
            .filter(|s| **s != sender)
            .map(|s| (s.name(), SECRET))
            .collect();
        let mut f = fixture(&others, Some(branch));
        let (status, _, _) = call(f.app(), sender.request(SECRET, body)).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{sender:?}");
        // Even an oversized body is 404 first: nothing is read for a closed endpoint.
        let (status, _, _) =
            call(f.app(), sender.request(SECRET, vec![b'x'; BODY_LIMIT + 10])).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{sender:?} oversized");
        assert_eq!(f.sent(), 0);
    }
    let f = fixture(&[("github", SECRET)], None);
    let (status, _, _) = call(f.app(), Sender::GitHub.request(SECRET, GITHUB)).await;
    assert_ne!(status, StatusCode::NOT_FOUND);
    let unknown = Request::post("/webhook/bitbucket")
        .body(Body::from("{}"))
        .unwrap();
    assert_eq!(call(f.app(), unknown).await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn github_ping_and_other_events_trigger_nothing() {
    let mut f = fixture(&[("github", SECRET), ("gitlab", SECRET)], None);
    for event in ["ping", "issues"] {
        let mut request = Sender::GitHub.request(
            SECRET,
            r#"{"zen": "Keep it logically awesome.", "hook_id": 1}"#,
        );
        request
            .headers_mut()
            .insert("x-github-event", event.parse().unwrap());
        let (status, _, text) = call(f.app(), request).await;
        assert_eq!(status, StatusCode::OK, "{event}: {text}");
    }
    let mut request = Sender::GitLab.request(SECRET, GITLAB);
    request
        .headers_mut()
        .insert("x-gitlab-event", "Merge Request Hook".parse().unwrap());
    assert_eq!(call(f.app(), request).await.0, StatusCode::OK);
    assert_eq!(f.sent(), 0);
}

#[tokio::test]
async fn github_form_encoded_payloads_are_understood() {
    let (json, branch) = Sender::GitHub.example();
    let body = serde_urlencoded::to_string([("payload", json.as_str())]).unwrap();
    let mut f = fixture(&[("github", SECRET)], Some(branch));
    let mut request = Sender::GitHub.request(SECRET, body);
    request.headers_mut().insert(
        "content-type",
        "application/x-www-form-urlencoded".parse().unwrap(),
    );
    let (status, _, text) = call(f.app(), request).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{text}");
    assert_eq!(f.sent(), 1);
}

#[tokio::test]
async fn a_generic_signed_request_without_a_ref_triggers() {
    let mut f = fixture(&[("generic", SECRET)], Some("main"));
    let (status, _, _) = call(f.app(), Sender::Generic.request(SECRET, "")).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (status, _, _) = call(f.app(), Sender::Generic.request(SECRET, "{}")).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    // The second joined the fetch the first asked for.
    assert_eq!(f.sent(), 1);
    let (status, _, _) = call(f.app(), Sender::Generic.request(SECRET, "{}")).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(f.sent(), 1, "after the loop took it, a new request is sent");
    // The bare hex form (without `sha256=`) is not the generic header's format.
    let mut bare = Sender::Generic.request(SECRET, "{}");
    bare.headers_mut()
        .insert("x-tend-signature", hmac_hex(SECRET, b"{}").parse().unwrap());
    assert_eq!(call(f.app(), bare).await.0, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_stopped_loop_is_503_not_a_silent_success() {
    let (body, branch) = Sender::Gitea.example();
    let f = fixture(&[("gitea", SECRET)], Some(branch));
    let app = f.app();
    drop(f.triggers);
    let (status, _, _) = call(app, Sender::Gitea.request(SECRET, body)).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
}
