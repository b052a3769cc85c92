//! The future [`Agent`](super::Agent)'s `Service` implementation returns.

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::body::Body;
use crate::rt::{BoxFuture, MaybeSend};

/// Response future of [`Agent`](super::Agent) as a `tower_service::Service`.
pub struct ResponseFuture(BoxFuture<'static, Result<http::Response<Body>, Infallible>>);

impl ResponseFuture {
    pub(super) fn new(
        future: impl Future<Output = Result<http::Response<Body>, Infallible>> + MaybeSend + 'static,
    ) -> Self {
        Self(Box::pin(future))
    }
}

impl Future for ResponseFuture {
    type Output = Result<http::Response<Body>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.as_mut().poll(cx)
    }
}

impl fmt::Debug for ResponseFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ResponseFuture")
    }
}
