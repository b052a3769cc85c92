//! A kernel stand-in for the client's unit tests: one canned answer, every request recorded.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;

use super::Client;
use crate::transport::{Transport, TransportFuture};

/// A recorded request: method, path with query, and whether it carried a bearer token.
pub(super) type Seen = (String, String, bool);

/// Answers every request with the same status and body.
#[derive(Debug, Clone)]
pub(super) struct FakeKernel {
    status: StatusCode,
    body: &'static str,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl FakeKernel {
    pub(super) fn answering(status: StatusCode, body: &'static str) -> Self {
        Self {
            status,
            body,
            seen: Arc::default(),
        }
    }

    /// A client with a token, talking to this kernel only.
    pub(super) fn client(&self) -> Client {
        self.builder().build().unwrap()
    }

    /// A builder of such a client, for tests of other settings.
    pub(super) fn builder(&self) -> super::ClientBuilder {
        Client::builder()
            .base_url("http://kernel.test")
            .api_key("k")
            .transport(self.clone())
    }

    /// The requests so far, in order.
    pub(super) fn requests(&self) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Transport for FakeKernel {
    fn send(&self, request: http::Request<Bytes>, _: Duration) -> TransportFuture {
        let target = request
            .uri()
            .path_and_query()
            .map_or_else(String::new, |p| p.as_str().to_owned());
        let authorized = request.headers().contains_key(http::header::AUTHORIZATION);
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((request.method().to_string(), target, authorized));
        let response = http::Response::builder()
            .status(self.status)
            .body(Bytes::from_static(self.body.as_bytes()))
            .unwrap();
        Box::pin(async move { Ok(response) })
    }
}
