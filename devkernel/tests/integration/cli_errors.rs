//! The terminal front end's errors and exit statuses against an in-process `DevKernel`,
//! through the `rebuno-dev` binary.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use rebuno_devkernel::{AgentSpec, DevKernel};

use crate::common::{SECRET, rebuno_dev};

/// A kernel that knows `hello` and `other` (their webhooks are never called here).
async fn kernel() -> DevKernel {
    let kernel = DevKernel::start().await.unwrap();
    for id in ["other", "hello"] {
        let spec = AgentSpec::new(id, "http://127.0.0.1:9/webhook", SECRET);
        kernel.register_agent(spec).unwrap();
    }
    kernel
}

#[tokio::test]
async fn an_unknown_agent_is_named_with_the_kernel_and_its_agents() {
    let kernel = kernel().await;
    let url = kernel.url();
    let (code, out, err) = rebuno_dev(&["--url", &url, "exec", "create", "helo", r#""Ada""#]).await;
    assert_eq!(code, 1, "{err}");
    assert!(out.is_empty(), "{out}");
    assert_eq!(
        err.trim_end(),
        format!(
            "rebuno-dev: agent \"helo\" is not registered with the kernel at {url} \
             (registered: hello, other); add it to the manifest (--config) or POST /v0/agents"
        )
    );
    let (code, out, err) = rebuno_dev(&["exec", "create", "hello", &format!("--url={url}")]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.trim_end().ends_with("running"), "{out}");
}

#[tokio::test]
async fn an_unknown_agent_is_named_even_when_the_kernel_will_not_list_agents() {
    let kernel = kernel().await;
    let url = kernel.url();
    // This key may create executions but not read the agents.
    let key = kernel.create_api_key("ci", &["executions:write"]).unwrap();
    let words = ["exec", "create", "helo", "--token", &key, "--url", &url];
    let (code, _, err) = rebuno_dev(&words).await;
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "agent \"helo\" is not registered with the kernel at {url};"
        )),
        "{err}"
    );
    assert!(!err.contains("registered:"), "{err}");
    assert!(err.contains("POST /v0/agents"), "{err}");
}

#[tokio::test]
async fn client_options_work_in_every_position_against_a_kernel() {
    let kernel = kernel().await;
    let url = kernel.url();
    let inline = format!("--url={url}");
    for words in [
        &["--url", &url, "exec", "create", "hello", r#""Ada""#][..],
        &["exec", "--url", &url, "create", "hello"],
        &["exec", "create", "hello", r#""Ada""#, "--url", &url],
        &[&inline, "exec", "list"],
        &["exec", &inline, "list"],
        &["exec", "list", &inline],
        &["approvals", "list", "--url", &url],
    ] {
        let (code, _, err) = rebuno_dev(words).await;
        assert_eq!(code, 0, "{words:?}: {err}");
    }
    let (_, listed, _) = rebuno_dev(&["exec", "list", "--agent", "hello", &inline]).await;
    assert_eq!(listed.lines().count(), 3, "{listed}");
}

#[tokio::test]
async fn kernel_errors_show_their_code_and_message() {
    let kernel = kernel().await;
    let url = kernel.url();
    let missing = "0192f1a0-0000-7000-8000-000000000000";
    let (code, _, err) = rebuno_dev(&["exec", "get", missing, "--url", &url]).await;
    assert_eq!(code, 1);
    // The SDK's explanation of the kernel's `not found: execution`: which one, and why it may be gone.
    assert!(
        err.starts_with(&format!(
            "rebuno-dev: kernel answered 404 not_found: execution {missing} not found"
        )) && err.contains("retention"),
        "{err}"
    );
    let (_, _, err) = rebuno_dev(&["exec", "cancel", "nope", "--url", &url]).await;
    assert!(
        err.contains("400 validation_error: validation error: invalid id"),
        "{err}"
    );
}

#[tokio::test]
async fn an_unreachable_kernel_says_how_to_point_at_one() {
    // Bind and drop a listener: nothing listens on that port any more.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let (code, _, err) = rebuno_dev(&["exec", "list", "--url", &url]).await;
    assert_eq!(code, 1);
    let prefix = format!("rebuno-dev: could not reach the kernel at {url}: ");
    assert!(err.starts_with(&prefix), "{err}");
    assert!(
        err.trim_end()
            .ends_with("; is rebuno-dev running? (set --url or REBUNO_URL)"),
        "{err}"
    );
    // The cause is the socket's, not reqwest's "error sending request".
    assert!(!err.contains("error sending request"), "{err}");
}

#[tokio::test]
async fn the_binary_exits_2_on_usage_errors_and_0_on_help() {
    let (code, out, err) = rebuno_dev(&["--help"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("exit status:"), "{out}");
    assert!(out.contains("2  usage error"), "{out}");
    let (code, _, err) = rebuno_dev(&["--url", "http://127.0.0.1:1", "--config", "m.yaml"]).await;
    assert_eq!(code, 2);
    assert!(
        err.starts_with("rebuno-dev: --url is a client option"),
        "{err}"
    );
    let (code, _, err) = rebuno_dev(&["exec", "list", "--config", "m.yaml"]).await;
    assert_eq!(code, 2);
    assert!(
        err.starts_with("rebuno-dev: --config is a serving option"),
        "{err}"
    );
    assert!(
        err.contains("usage: rebuno-dev [client options] exec"),
        "{err}"
    );
    let (code, _, err) = rebuno_dev(&["--url", "http://127.0.0.1:1", "exec", "frobnicate"]).await;
    assert_eq!(code, 2);
    assert!(err.contains("unknown exec command \"frobnicate\""), "{err}");
    assert!(
        err.contains("usage: rebuno-dev [client options] exec"),
        "{err}"
    );
}

#[tokio::test]
async fn the_binary_refuses_a_status_no_listing_has() {
    let (code, _, err) = rebuno_dev(&["exec", "list", "--status", "done"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.starts_with("rebuno-dev: bad --status \"done\": pending, running,"),
        "{err}"
    );
    assert!(
        err.contains("usage: rebuno-dev [client options] exec"),
        "{err}"
    );
    let (code, _, err) = rebuno_dev(&["approvals", "list", "--status=all"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("pending, granted, denied or expired"), "{err}");
}
