//! A loopback TCP proxy that delays every answer: a kernel (or an agent) across a network.
//!
//! Requests pass at once; each chunk the upstream sends back waits `delay` before it is passed
//! on, in order. Every request-and-answer exchange through it thus takes `delay` longer, as a
//! round trip over a network of that latency would (Tokio's timers round up to the
//! millisecond).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context as _, Result};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Starts a proxy to `upstream` (`http://host:port[/path]`) and returns its URL, with the
/// same path.
pub(crate) async fn start(upstream: &str, delay: Duration) -> Result<String> {
    let rest = upstream
        .strip_prefix("http://")
        .with_context(|| format!("the proxy takes http:// URLs, not {upstream}"))?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let target: SocketAddr = authority
        .parse()
        .with_context(|| format!("{authority} is no ip:port"))?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}{path}", listener.local_addr()?);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let _ = client.set_nodelay(true);
            tokio::spawn(relay(client, target, delay));
        }
    });
    Ok(url)
}

/// Relays one connection until either side closes it.
async fn relay(client: TcpStream, target: SocketAddr, delay: Duration) {
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let mut server_write = server_write;
    let requests = async {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
        let _ = server_write.shutdown().await;
    };
    tokio::join!(requests, delayed(server_read, &mut client_write, delay));
}

/// Copies `from` to `to`, each chunk `delay` after it was read.
async fn delayed<R, W>(mut from: R, to: &mut W, delay: Duration)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin,
{
    let (chunks, mut queued) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    tokio::spawn(async move {
        let mut buffer = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = from.read(&mut buffer).await {
            if chunks
                .send((Instant::now() + delay, buffer[..n].to_vec()))
                .is_err()
            {
                return;
            }
        }
    });
    while let Some((due, chunk)) = queued.recv().await {
        tokio::time::sleep_until(due).await;
        if to.write_all(&chunk).await.is_err() {
            return;
        }
    }
    let _ = to.shutdown().await;
}
