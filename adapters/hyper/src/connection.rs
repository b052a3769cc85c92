//! Serving one accepted connection: hyper over activity-stamped IO, under its watchdog.

use std::pin::Pin;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rebuno::Agent;
use rebuno::rt::Spawner;
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::accept::Accepted;
use crate::activity::{Activity, TrackedIo};
use crate::router::Router;
use crate::watchdog::{self, GracefulClose, IdleRules};

type Io = TokioIo<TrackedIo<TcpStream>>;

impl GracefulClose for auto::Connection<'static, Io, Router, TokioExecutor> {
    fn close_gracefully(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

/// Everything a connection task needs besides its socket.
#[derive(Debug, Clone)]
pub(crate) struct Context {
    pub(crate) agent: Agent,
    pub(crate) spawner: Spawner,
    pub(crate) builder: auto::Builder<TokioExecutor>,
    pub(crate) rules: IdleRules,
}

impl Context {
    /// Serves `accepted` on its own task until it ends, is found idle or `shutdown` fires. The
    /// task holds the connection's slot and its `shutdown` receiver until the connection is gone.
    pub(crate) fn spawn(&self, accepted: Accepted, shutdown: watch::Receiver<()>) {
        let Accepted {
            stream,
            peer,
            permit,
        } = accepted;
        let activity = Activity::new();
        let io = TokioIo::new(TrackedIo::new(stream, activity.clone()));
        let router = Router::new(self.agent.clone(), self.spawner.clone(), activity.clone());
        let connection = self.builder.serve_connection(io, router).into_owned();
        let rules = self.rules;
        tokio::spawn(async move {
            watchdog::watch(connection, activity, rules, shutdown, peer).await;
            drop(permit);
        });
    }
}
