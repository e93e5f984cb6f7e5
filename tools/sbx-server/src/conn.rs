//! The accept loop. axum::serve sets no header-read timeout (hyper needs a
//! timer for one) and takes every connection, so a client that opened
//! connections and sent half a request line, or nothing, held a file
//! descriptor each for good until the server could accept no one. Here
//! a request head has [`HEADER_TIMEOUT`] to arrive (idle keep-alive
//! connections included), and at most `max` connections are open at once:
//! one over is closed as soon as it is accepted.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

/// How long a client may take to send a request's head (the request
/// line and headers), and how long a kept-alive connection may idle.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Serve `router` on `listener` until `shutdown`, then let the open
/// connections finish their requests.
pub async fn serve(
    listener: TcpListener,
    router: axum::Router,
    max: usize,
    shutdown: impl Future<Output = ()>,
) {
    let open = Arc::new(Semaphore::new(max));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, addr) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                // Out of descriptors, or a connection reset before it was
                // accepted: wait, do not spin.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(permit) = Arc::clone(&open).try_acquire_owned() else {
            drop(stream);
            continue;
        };
        let router = router.clone();
        let svc = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo(addr));
            let mut r = router.clone();
            async move {
                let resp: Result<axum::response::Response, Infallible> =
                    tower_service::Service::call(&mut r, req.map(axum::body::Body::new)).await;
                resp
            }
        });
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let mut b = hyper::server::conn::http1::Builder::new();
            b.timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT);
            let conn = b
                .serve_connection(TokioIo::new(stream), svc)
                .with_upgrades();
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => return,
                _ = stop.wait_for(|s| *s) => {}
            }
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        });
    }
    let _ = stop_tx.send(true);
    // Every permit back: every connection has ended.
    let _ = open
        .acquire_many(u32::try_from(max).unwrap_or(u32::MAX))
        .await;
}
