//! What a browser gets outside the API: a dashboard build from a folder with
//! the reference's static rules, or the built-in status page.

use queen_tests::TestBroker;

fn header<'r>(reply: &'r queen_testkit::http::Reply, name: &str) -> &'r str {
    reply
        .headers
        .get(name)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dashboard_folder_is_served_with_the_static_rules() {
    let site = tempfile::tempdir().unwrap();
    std::fs::write(site.path().join("index.html"), "<html>the dashboard</html>").unwrap();
    std::fs::create_dir(site.path().join("assets")).unwrap();
    std::fs::write(site.path().join("assets/app.js"), "console.log(1)").unwrap();
    std::fs::write(site.path().join("logo.svg"), "<svg/>").unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "secret").unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret.txt"),
        site.path().join("leak.txt"),
    )
    .unwrap();
    let broker = TestBroker::start_serving(queen_http::ServeOptions {
        webapp: Some(queen_http::Webapp::open(site.path()).unwrap()),
        ..queen_http::ServeOptions::default()
    })
    .await;
    let client = &broker.client;

    let root = client.get("/").await;
    assert_eq!(root.status, 200);
    assert_eq!(&root.body[..], b"<html>the dashboard</html>");
    assert_eq!(
        header(&root, "cache-control"),
        "no-cache, no-store, must-revalidate"
    );
    assert_eq!(header(&root, "content-type"), "text/html; charset=utf-8");
    assert_eq!(header(&root, "access-control-allow-origin"), "*");

    let asset = client.get("/assets/app.js").await;
    assert_eq!(asset.status, 200);
    assert_eq!(&asset.body[..], b"console.log(1)");
    assert_eq!(
        header(&asset, "cache-control"),
        "public, max-age=31536000, immutable"
    );
    assert_eq!(
        header(&asset, "content-type"),
        "text/javascript; charset=utf-8"
    );
    assert_eq!(client.get("/assets/missing.js").await.status, 404);

    let logo = client.get("/logo.svg").await;
    assert_eq!(header(&logo, "content-type"), "image/svg+xml");
    assert_eq!(header(&logo, "cache-control"), "public, max-age=3600");

    // The single-page app's routes fall back to index.html ...
    let spa = client.get("/queues/orders").await;
    assert_eq!(spa.status, 200);
    assert_eq!(&spa.body[..], b"<html>the dashboard</html>");
    assert_eq!(
        header(&spa, "cache-control"),
        "no-cache, no-store, must-revalidate"
    );
    // ... but never the API's paths.
    for path in [
        "/api/v1/nothing-here",
        "/metrics/nope",
        "/streams/v1/nope",
        "/health/x",
    ] {
        let reply = client.get(path).await;
        assert_eq!(reply.status, 404, "{path}");
        assert!(
            reply.json()["error"]
                .as_str()
                .unwrap()
                .contains("route not found"),
            "{path}"
        );
    }
    assert_eq!(client.get("/health").await.json()["status"], "healthy");

    // Nothing outside the folder: a symbolic link out, or `..` spelled out.
    let leak = client.get("/leak.txt").await;
    assert_eq!(leak.status, 403);
    assert_eq!(leak.json()["error"], "path escapes the dashboard folder");
    let dots = client.get("/%2e%2e/%2e%2e/etc/passwd").await;
    assert_eq!(dots.status, 403);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_folder_the_root_is_the_built_in_status_page() {
    let broker = TestBroker::start().await;
    let page = broker.client.get("/").await;
    assert_eq!(page.status, 200);
    assert_eq!(header(&page, "content-type"), "text/html; charset=utf-8");
    let text = String::from_utf8(page.body.to_vec()).unwrap();
    assert!(text.contains("Built-in status page"));
    assert!(
        !text.contains("http://") && !text.contains("https://"),
        "no CDN, works offline"
    );
    assert_eq!(broker.client.get("/queues").await.status, 404);
    broker.stop().await;
}

#[test]
fn a_folder_without_an_index_is_refused() {
    let empty = tempfile::tempdir().unwrap();
    let error = queen_http::Webapp::open(empty.path()).unwrap_err();
    assert!(error.to_string().contains("holds no index.html"), "{error}");
}
