//! A provider as a plain tower service with its own body type: what `DurableLlmLayer` wraps and
//! what a provider SDK sends through. It answers every request with one canned completion.

use bytes::Bytes;

/// Answers `{"choices":[{"message":{"content":"canned"}}]}` as JSON, every time.
#[derive(Clone)]
pub struct Canned;

impl tower_service::Service<http::Request<Bytes>> for Canned {
    type Response = http::Response<http_body_util::Full<Bytes>>;
    type Error = std::convert::Infallible;
    type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Request<Bytes>) -> Self::Future {
        let mut response = http::Response::new(http_body_util::Full::new(Bytes::from_static(
            br#"{"choices":[{"message":{"content":"canned"}}]}"#,
        )));
        response.headers_mut().insert(
            "content-type",
            http::HeaderValue::from_static("application/json"),
        );
        std::future::ready(Ok(response))
    }
}
