//! A client's configuration mistakes, over real HTTP with the dev kernel: a refused API key says
//! which key to check (without showing it), and an `https://` URL for a plain-HTTP kernel fails
//! at once with what to change, not after retrying for seconds.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use rebuno::ErrorKind;
use rebuno::client::Client;
use rebuno_devkernel::DevKernel;

const TOKEN: &str = "the-bootstrap-token";
const WRONG_KEY: &str = "rbk_not-a-key-of-this-kernel";

/// The error and its causes, `outer: inner: ...`.
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

async fn kernel_with_token() -> DevKernel {
    DevKernel::builder()
        .bearer_token(Some(TOKEN.to_owned()))
        .start()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_refused_api_key_says_which_key_to_check_without_showing_it() {
    let kernel = kernel_with_token().await;
    let client = Client::builder()
        .base_url(kernel.url())
        .api_key(WRONG_KEY)
        .build()
        .unwrap();
    let error = client.agents().await.unwrap_err();
    let text = chain(&error);
    assert_eq!(error.kind(), ErrorKind::Unauthorized, "{text}");
    assert_eq!(error.status().map(|s| s.as_u16()), Some(401), "{text}");
    assert!(
        text.contains("ClientBuilder::api_key") && text.contains("the kernel's API keys"),
        "{text}"
    );
    assert!(!text.contains(WRONG_KEY), "the key is shown: {text}");
    assert!(!format!("{error:?}").contains(WRONG_KEY), "{error:?}");

    let right = Client::builder()
        .base_url(kernel.url())
        .api_key(TOKEN)
        .build()
        .unwrap();
    right.agents().await.unwrap();
}

#[tokio::test]
async fn a_missing_api_key_says_to_set_one() {
    let kernel = kernel_with_token().await;
    // An empty key is no key (and REBUNO_API_KEY is not read when the builder is given one).
    let client = Client::builder()
        .base_url(kernel.url())
        .api_key("")
        .build()
        .unwrap();
    let error = client.agents().await.unwrap_err();
    let text = chain(&error);
    assert_eq!(error.kind(), ErrorKind::Unauthorized, "{text}");
    assert!(
        text.contains("requires an API key") && text.contains("set REBUNO_API_KEY"),
        "{text}"
    );
}

#[tokio::test]
async fn an_https_url_for_a_plain_http_kernel_fails_at_once() {
    let kernel = DevKernel::start().await.unwrap();
    let url = kernel.url().replacen("http://", "https://", 1);
    // The default retries: six tries over about 8 s for an unreachable kernel.
    let client = Client::builder().base_url(url).build().unwrap();
    let started = Instant::now();
    let error = client
        .get("0192f1a0-0000-7000-8000-000000000000")
        .await
        .unwrap_err();
    let took = started.elapsed();
    let text = chain(&error);
    assert_eq!(error.kind(), ErrorKind::Network, "{text}");
    assert!(
        text.contains("answered in plain HTTP") && text.contains("use http://"),
        "{text}"
    );
    assert!(took < Duration::from_millis(900), "took {took:?}: {text}");
}
