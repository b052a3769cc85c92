//! Routes requests: the webhook to the agent, a health check, and 404 for the rest.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use rebuno::rt::Spawner;
use rebuno::{Agent, Body};

use crate::activity::Activity;

/// The per-connection hyper service; it marks each request in flight on the connection's
/// [`Activity`] until its response is ready.
#[derive(Debug, Clone)]
pub(crate) struct Router {
    agent: Agent,
    spawner: Spawner,
    activity: Arc<Activity>,
}

impl Router {
    /// Routes to `agent`, spawning runs on `spawner`, for the connection behind `activity`.
    pub(crate) fn new(agent: Agent, spawner: Spawner, activity: Arc<Activity>) -> Self {
        Self {
            agent,
            spawner,
            activity,
        }
    }
}

impl hyper::service::Service<Request<Incoming>> for Router {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn call(&self, mut request: Request<Incoming>) -> Self::Future {
        let agent = self.agent.clone();
        request.extensions_mut().insert(self.spawner.clone());
        let in_flight = self.activity.begin();
        Box::pin(async move {
            let response = route(agent, request).await;
            drop(in_flight);
            Ok(response)
        })
    }
}

async fn route(agent: Agent, request: Request<Incoming>) -> Response<Body> {
    let path = request.uri().path();
    if path == agent.webhook_path() {
        return agent.fetch(request).await;
    }
    if path == "/healthz" && request.method() == Method::GET {
        return Response::new(Body::from("ok"));
    }
    let mut response = Response::new(Body::from("not found"));
    *response.status_mut() = StatusCode::NOT_FOUND;
    response
}
