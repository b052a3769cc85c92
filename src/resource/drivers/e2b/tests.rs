//! The driver against the fake transport: the requests it sends (as E2B's spec has them) and
//! how it reads the answers.

use http::Method;
use serde_json::json;

use super::fake::{Answer, Fake, KEY, sandbox_json};
use super::*;

#[tokio::test]
async fn create_sends_the_spec_request_and_binds_the_sandbox_id() {
    let fake = Fake::default();
    fake.answer(Answer::Json(201, sandbox_json("i1", "token-1", None)));
    let driver = fake.driver();
    let (sandbox, binding) = driver.create(None).await.unwrap();
    assert_eq!(sandbox.sandbox_id(), "i1");
    assert_eq!(
        serde_json::to_value(&binding).unwrap(),
        json!({ "sandbox_id": "i1" })
    );
    assert_eq!(driver.driver_id(), "rebuno.e2b.v1");
    assert_eq!(
        driver.configuration(),
        json!({ "template": "base" }),
        "the lifetime may change between deliveries"
    );

    let [create] = fake.take().try_into().unwrap();
    assert_eq!(create.method, Method::POST);
    assert_eq!(create.url, "https://api.e2b.app/sandboxes");
    assert_eq!(create.header("x-api-key"), Some(KEY));
    assert_eq!(create.header("content-type"), Some("application/json"));
    assert_eq!(
        create.json(),
        json!({ "templateID": "base", "timeout": 600, "secure": true })
    );

    fake.answer(Answer::Json(
        200,
        json!([{ "name": "a b.txt", "type": "file", "path": "/home/user/a b.txt" }]),
    ));
    sandbox.write("a b.txt", "hi there").await.unwrap();
    let [upload] = fake.take().try_into().unwrap();
    assert_eq!(upload.url, "https://49983-i1.e2b.app/files?path=a%20b.txt");
    assert_eq!(upload.header("e2b-sandbox-id"), Some("i1"));
    assert_eq!(upload.header("e2b-sandbox-port"), Some("49983"));
    assert_eq!(upload.header("x-access-token"), Some("token-1"));
    assert!(upload.header("x-api-key").is_none());
    let content_type = upload.header("content-type").unwrap();
    let boundary = content_type
        .strip_prefix("multipart/form-data; boundary=")
        .unwrap();
    let body = String::from_utf8(upload.body.to_vec()).unwrap();
    assert!(body.starts_with(&format!("--{boundary}\r\n")), "{body}");
    assert!(
        body.contains("name=\"file\"; filename=\"a b.txt\""),
        "{body}"
    );
    assert!(
        body.ends_with(&format!("\r\n\r\nhi there\r\n--{boundary}--\r\n")),
        "{body}"
    );
}

#[tokio::test]
async fn a_missing_snapshot_is_checkpoint_unavailable() {
    let fake = Fake::default();
    let driver = fake.driver();
    let missing = json!({ "code": 404, "message": "template 'snap1' not found" });
    fake.answer(Answer::Json(404, missing.clone()));
    let error = driver.create(Some("snap1:default")).await.unwrap_err();
    let unavailable = error.downcast_ref::<CheckpointUnavailable>().unwrap();
    assert!(unavailable.0.contains("\"snap1:default\""), "{unavailable}");
    assert!(
        unavailable.0.contains("template 'snap1' not found"),
        "{unavailable}"
    );
    let [create] = fake.take().try_into().unwrap();
    assert_eq!(create.json()["templateID"], "snap1:default");

    // Any other failure is the driver's error; so is a missing template without a snapshot.
    fake.answer(Answer::Json(500, json!({ "code": 500, "message": "boom" })));
    let error = driver.create(Some("snap1:default")).await.unwrap_err();
    let error = error.downcast_ref::<E2bError>().unwrap();
    assert_eq!(error.kind(), E2bErrorKind::Api);
    assert_eq!(
        error.to_string(),
        "POST /sandboxes: 500 Internal Server Error: \"boom\""
    );
    fake.answer(Answer::Json(404, missing));
    let error = driver.create(None).await.unwrap_err();
    assert_eq!(
        error.downcast_ref::<E2bError>().map(E2bError::kind),
        Some(E2bErrorKind::NotFound)
    );
}

#[tokio::test]
async fn a_refused_key_says_what_to_check_and_is_never_printed() {
    let fake = Fake::default();
    let driver = fake.driver();
    fake.answer(Answer::Json(
        401,
        json!({ "code": 401, "message": "Invalid API key" }),
    ));
    let error = driver.create(None).await.unwrap_err();
    let e2b = error.downcast_ref::<E2bError>().unwrap();
    assert_eq!(e2b.kind(), E2bErrorKind::Unauthorized);
    let text = error.to_string();
    assert!(text.contains("E2B_API_KEY"), "{text}");
    for shown in [text, format!("{error:?}"), format!("{driver:?}")] {
        assert!(!shown.contains(KEY), "{shown}");
    }
    let sandbox = fake.sandbox().await;
    let shown = format!("{sandbox:?}");
    assert!(
        !shown.contains("token-1") && !shown.contains(KEY),
        "{shown}"
    );
    assert!(shown.contains("i1"), "{shown}");
}

#[tokio::test]
async fn open_connects_again_for_the_lifetime() {
    let fake = Fake::default();
    fake.answer(Answer::Json(201, sandbox_json("i1", "token-2", None)));
    let driver = fake.driver().timeout(std::time::Duration::from_secs(900));
    let binding = SandboxBinding {
        sandbox_id: "i1".into(),
    };
    let sandbox = driver.open(binding).await.unwrap();
    assert_eq!(sandbox.sandbox_id(), "i1");
    let [connect] = fake.take().try_into().unwrap();
    assert_eq!(connect.url, "https://api.e2b.app/sandboxes/i1/connect");
    assert_eq!(connect.header("x-api-key"), Some(KEY));
    assert_eq!(connect.json(), json!({ "timeout": 900 }));

    fake.answer(Answer::Json(
        404,
        json!({ "code": 404, "message": "sandbox \"i2\" doesn't exist" }),
    ));
    let binding = SandboxBinding {
        sandbox_id: "i2".into(),
    };
    let error = driver.open(binding).await.unwrap_err();
    let error = error.downcast_ref::<E2bError>().unwrap();
    assert_eq!(error.kind(), E2bErrorKind::NotFound);
    assert_eq!(error.sandbox_id(), Some("i2"));
}

#[tokio::test]
async fn a_checkpoint_refreshes_the_connection_of_every_clone() {
    let fake = Fake::default();
    let driver = fake.driver();
    let sandbox = fake.sandbox().await;
    let clone = sandbox.clone();
    fake.answer(Answer::Json(
        201,
        json!({ "snapshotID": "snap9:default", "names": ["team/snap9:default"] }),
    ));
    fake.answer(Answer::Json(
        200,
        sandbox_json("i1", "token-2", Some("other.dev")),
    ));
    assert_eq!(driver.checkpoint(&sandbox).await.unwrap(), "snap9:default");
    let [snapshot, connect] = fake.take().try_into().unwrap();
    assert_eq!(snapshot.url, "https://api.e2b.app/sandboxes/i1/snapshots");
    assert_eq!(snapshot.json(), json!({}));
    assert_eq!(connect.url, "https://api.e2b.app/sandboxes/i1/connect");
    assert_eq!(connect.json(), json!({ "timeout": 600 }));

    fake.answer(Answer::Json(200, json!({ "entry": { "name": "x" } })));
    assert!(clone.exists("x").await.unwrap());
    let [stat] = fake.take().try_into().unwrap();
    assert_eq!(
        stat.url,
        "https://49983-i1.other.dev/filesystem.Filesystem/Stat"
    );
    assert_eq!(stat.header("x-access-token"), Some("token-2"));
}

fn blocked() -> DispatchEnd {
    DispatchEnd::Suspended(Suspension::Blocked)
}

#[tokio::test]
async fn kill_when_done_kills_once_the_execution_is_done_and_not_before() {
    let fake = Fake::default();
    let sandbox = fake.sandbox().await;
    fake.driver()
        .release(&sandbox, DispatchEnd::Completed)
        .await
        .unwrap();
    assert!(fake.take().is_empty(), "off by default");

    let driver = fake.driver().kill_when_done(true);
    driver.release(&sandbox, blocked()).await.unwrap();
    assert!(
        fake.take().is_empty(),
        "a waiting execution needs its sandbox"
    );
    for end in [
        DispatchEnd::Completed,
        DispatchEnd::Failed,
        DispatchEnd::Suspended(Suspension::Terminated),
    ] {
        fake.answer(Answer::Empty(204));
        driver.release(&sandbox, end).await.unwrap();
        let [kill] = fake.take().try_into().unwrap();
        assert_eq!(kill.method, Method::DELETE, "{end:?}");
        assert_eq!(kill.url, "https://api.e2b.app/sandboxes/i1");
    }
}

#[tokio::test]
async fn pause_while_waiting_pauses_when_the_execution_waits() {
    let fake = Fake::default();
    let sandbox = fake.sandbox().await;
    fake.driver().release(&sandbox, blocked()).await.unwrap();
    assert!(fake.take().is_empty(), "off by default");

    let driver = fake.driver().pause_while_waiting(true);
    driver
        .release(&sandbox, DispatchEnd::Suspended(Suspension::Terminated))
        .await
        .unwrap();
    assert!(
        fake.take().is_empty(),
        "nothing resumes a terminated execution"
    );
    fake.answer(Answer::Empty(204));
    driver.release(&sandbox, blocked()).await.unwrap();
    fake.answer(Answer::Json(
        409,
        json!({ "code": 409, "message": "Error pausing sandbox - sandbox 'i1' is already paused" }),
    ));
    driver.release(&sandbox, blocked()).await.unwrap();
    driver
        .release(
            &sandbox,
            DispatchEnd::Suspended(Suspension::DeadlineReached),
        )
        .await
        .unwrap();
    let [pause, again] = fake.take().try_into().unwrap();
    assert_eq!(pause.url, "https://api.e2b.app/sandboxes/i1/pause");
    assert_eq!(pause.method, Method::POST);
    assert!(pause.body.is_empty() && pause.header("content-type").is_none());
    assert_eq!(again.url, pause.url);

    fake.answer(Answer::Json(
        404,
        json!({ "code": 404, "message": "sandbox not found" }),
    ));
    driver.release(&sandbox, blocked()).await.unwrap();
    assert_eq!(
        fake.take().len(),
        1,
        "a sandbox already gone needs no pause"
    );
}

#[tokio::test]
async fn a_stand_in_serves_every_sandbox_at_one_url() {
    let fake = Fake::default();
    let driver = fake
        .driver()
        .api_url("http://127.0.0.1:4000/")
        .sandbox_url("http://127.0.0.1:4000");
    fake.answer(Answer::Json(201, sandbox_json("i7", "token-7", None)));
    let (sandbox, _) = driver.create(None).await.unwrap();
    fake.answer(Answer::Stream(200, vec![Ok("contents".into())]));
    assert_eq!(
        sandbox.read_to_string("/tmp/a.txt").await.unwrap(),
        "contents"
    );
    let [create, read] = fake.take().try_into().unwrap();
    assert_eq!(create.url, "http://127.0.0.1:4000/sandboxes");
    assert_eq!(read.method, Method::GET);
    assert_eq!(read.url, "http://127.0.0.1:4000/files?path=%2Ftmp%2Fa.txt");
    assert_eq!(read.header("e2b-sandbox-id"), Some("i7"));
    assert_eq!(read.header("e2b-sandbox-port"), Some("49983"));
}

#[tokio::test]
async fn files_use_the_filesystem_service() {
    let fake = Fake::default();
    let sandbox = fake.sandbox().await;
    fake.answer(Answer::Json(
        200,
        json!({ "entries": [
        { "name": "a.txt", "type": "FILE_TYPE_FILE", "path": "/home/user/a.txt", "size": "3" },
        { "name": "src", "type": "FILE_TYPE_DIRECTORY", "path": "/home/user/src", "size": "4096" },
    ] }),
    ));
    let entries = sandbox.list("/home/user").await.unwrap();
    assert_eq!(
        entries
            .iter()
            .map(|e| (e.name.as_str(), e.kind))
            .collect::<Vec<_>>(),
        [("a.txt", EntryKind::File), ("src", EntryKind::Dir)]
    );
    let not_found = json!({ "code": "not_found", "message": "file not found" });
    fake.answer(Answer::Json(404, not_found));
    assert!(!sandbox.exists("nope").await.unwrap());
    fake.answer(Answer::Json(
        409,
        json!({ "code": "already_exists", "message": "exists" }),
    ));
    assert!(!sandbox.make_dir("src").await.unwrap());
    fake.answer(Answer::Json(200, json!({})));
    sandbox.remove("a.txt").await.unwrap();
    let denied = json!({ "code": "internal", "message": "error removing file or directory" });
    fake.answer(Answer::Json(500, denied));
    let error = sandbox.remove("a.txt").await.unwrap_err();
    assert_eq!(
        (error.kind(), error.code()),
        (E2bErrorKind::Api, Some("internal"))
    );
    assert_eq!(error.call(), "files.remove a.txt");

    let seen = fake.take();
    let rpcs: Vec<_> = seen.iter().map(|s| (s.url.as_str(), s.json())).collect();
    let base = "https://49983-i1.e2b.app/filesystem.Filesystem";
    assert_eq!(
        rpcs,
        [
            (
                &*format!("{base}/ListDir"),
                json!({ "path": "/home/user", "depth": 1 })
            ),
            (&*format!("{base}/Stat"), json!({ "path": "nope" })),
            (&*format!("{base}/MakeDir"), json!({ "path": "src" })),
            (&*format!("{base}/Remove"), json!({ "path": "a.txt" })),
            (&*format!("{base}/Remove"), json!({ "path": "a.txt" })),
        ]
    );
    for request in &seen {
        assert_eq!(request.header("content-type"), Some("application/json"));
        assert_eq!(request.header("connect-protocol-version"), Some("1"));
        assert_eq!(request.header("connect-timeout-ms"), Some("60000"));
        assert!(request.header("authorization").is_none());
    }
}

#[tokio::test]
async fn a_missing_file_names_the_call_and_the_sandbox() {
    let fake = Fake::default();
    let sandbox = fake.sandbox().await;
    let missing = json!({ "code": 404, "message": "path '/home/user/nope' does not exist" });
    fake.answer(Answer::Json(404, missing));
    let error = sandbox.read("nope").await.unwrap_err();
    assert_eq!(error.kind(), E2bErrorKind::NotFound);
    assert_eq!(
        error.to_string(),
        "files.read nope (sandbox i1): 404 Not Found: \"path '/home/user/nope' does not exist\""
    );
}

#[tokio::test]
async fn an_old_envd_gets_the_user_named() {
    let fake = Fake::default();
    let mut old = sandbox_json("i3", "token-3", None);
    old["envdVersion"] = json!("0.3.2");
    fake.answer(Answer::Json(201, old));
    let (sandbox, _) = fake.driver().create(None).await.unwrap();
    fake.answer(Answer::Stream(200, vec![Ok("x".into())]));
    sandbox.read("a.txt").await.unwrap();
    fake.answer(Answer::Json(200, json!({})));
    sandbox.exists("a.txt").await.unwrap();
    let [_, read, stat] = fake.take().try_into().unwrap();
    assert_eq!(
        read.url,
        "https://49983-i3.e2b.app/files?path=a.txt&username=user"
    );
    assert_eq!(stat.header("authorization"), Some("Basic dXNlcjo="));
}

#[tokio::test]
async fn transport_failures_name_the_url() {
    let fake = Fake::default();
    let error = fake.driver().create(None).await.unwrap_err();
    let error = error.downcast_ref::<E2bError>().unwrap();
    assert_eq!(error.kind(), E2bErrorKind::Unreachable);
    assert!(
        error.to_string().contains("https://api.e2b.app/sandboxes"),
        "{error}"
    );
}
