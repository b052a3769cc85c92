//! Routes requests: the webhook to the agent, a health check, and 404 for the rest.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;

use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use rebuno::rt::Spawner;
use rebuno::{Agent, Body};

/// The per-connection hyper service.
#[derive(Debug, Clone)]
pub(crate) struct Router {
    agent: Agent,
    spawner: Spawner,
}

impl Router {
    pub(crate) fn new(agent: Agent, spawner: Spawner) -> Self {
        Self { agent, spawner }
    }
}

impl hyper::service::Service<Request<Incoming>> for Router {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn call(&self, mut request: Request<Incoming>) -> Self::Future {
        let agent = self.agent.clone();
        request.extensions_mut().insert(self.spawner.clone());
        Box::pin(async move { Ok(route(agent, request).await) })
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
