//! The HTTP door of `skiff serve` (`metrics_listen`, alias `http_listen`; 127.0.0.1:5557 by
//! default, RocketMQ's exporter port): `GET /metrics` for Prometheus, answered with
//! [`MetricsSnapshot::to_prometheus`](skiff_actors::metrics::MetricsSnapshot::to_prometheus),
//! and the web console ([`crate::console`]) at `/` with its API under `/api/v1`. Its port is
//! accepted by [`crate::listener`] like the others, plaintext, under the node's connection cap;
//! axum serves what the port hands over.
//!
//! Protected mode applies to every route: with no users configured, a peer beyond loopback is
//! answered 403. With users, the console serves such a peer after it logs in, but `/metrics`,
//! which Prometheus scrapes without credentials, stays loopback-only unless protected mode is
//! turned off.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::serve::ListenerExt;
use axum::Router;
use tracing::{debug, warn};

use skiff_actors::broker::BrokerHandle;

use crate::acl::AclHandle;
use crate::broker_link::{self, BrokerLink, LinkTask};
use crate::console::{self, ConsoleInfo, ConsoleTask};
use crate::listener::{Inbox, Tasks, SHUTDOWN_GRACE};
use crate::protected::{self, PeerPolicy};

/// Scrapes waiting for the broker before it answers busy.
const METRICS_LINK_CAPACITY: usize = 16;

/// What the listener serves besides `/metrics`.
pub struct HttpConfig {
    pub peers: PeerPolicy,
    pub acl: AclHandle,
    /// The console's view of the node; `None` serves `/metrics` only.
    pub console: Option<ConsoleInfo>,
    /// How often the console samples rates and lag.
    pub sample_interval: Duration,
    /// ACL 2.0 users and policies, for the console's users page; `None` hides it.
    pub auth: Option<std::sync::Arc<crate::acl::admin::AuthAdmin>>,
}

/// The running server; [`HttpEndpoint::shutdown`] stops it.
pub struct HttpEndpoint {
    server: Tasks,
    metrics_link: LinkTask,
    console: Option<ConsoleTask>,
}

#[derive(Clone)]
struct Guard {
    peers: PeerPolicy,
    acl: AclHandle,
}

impl HttpEndpoint {
    /// Serves the connections the HTTP port sends to `inbox`'s handoff; must run on the broker's
    /// arbiter (inside an actix system / `LocalSet`), where the console's broker calls run.
    pub fn start(inbox: Inbox, broker: BrokerHandle, config: HttpConfig) -> HttpEndpoint {
        let (metrics, metrics_link) = broker_link::spawn(broker.clone(), METRICS_LINK_CAPACITY);
        let mut router = Router::new().route("/metrics", get(scrape).with_state(metrics));
        let mut console_task = None;
        if let Some(info) = config.console {
            let (console, task) =
                console::start(broker, info, config.acl.clone(), config.sample_interval);
            let console = match config.auth {
                Some(auth) => console.with_auth(auth),
                None => console,
            };
            router = router.merge(console.router());
            console_task = Some(task);
        }
        let guard = Guard {
            peers: config.peers,
            acl: config.acl,
        };
        let router = router.layer(axum::middleware::from_fn_with_state(guard, protect));
        let mut server = Tasks::new("http server");
        let stopped = server.stopped();
        server.add(tokio::spawn(async move {
            // axum gives `ConnectInfo<SocketAddr>` (what `protect` and the console read) for the
            // address a tapped listener answers; the tap itself does nothing.
            let connections = inbox.tap_io(|_| {});
            let serving = axum::serve(
                connections,
                router.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .with_graceful_shutdown(async move { stopped.wait().await });
            if let Err(e) = serving.await {
                warn!(error = %e, "http server failed");
            }
        }));
        HttpEndpoint {
            server,
            metrics_link,
            console: console_task,
        }
    }

    /// Ends open requests (waiting [`SHUTDOWN_GRACE`] for them), then the console's tasks.
    pub async fn shutdown(self) {
        self.server.shutdown_within(SHUTDOWN_GRACE).await;
        if let Some(console) = self.console {
            console.shutdown().await;
        }
        self.metrics_link.shutdown().await;
    }
}

/// Protected mode, before any route.
async fn protect(State(guard): State<Guard>, request: Request, next: Next) -> Response {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::from([0, 0, 0, 0]), |c| c.0.ip());
    if guard.peers.serves(peer) {
        return next.run(request).await;
    }
    // The console logs its users in; /metrics cannot.
    if guard.acl.current().is_on() && request.uri().path() != "/metrics" {
        return next.run(request).await;
    }
    debug!(peer = %peer, path = %request.uri().path(), "http request refused: protected mode serves loopback peers only");
    (
        StatusCode::FORBIDDEN,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{}\n", protected::REFUSAL),
    )
        .into_response()
}

async fn scrape(State(metrics): State<BrokerLink>) -> Response {
    let snapshot = metrics
        .call(|broker| async move { broker.metrics().await })
        .await;
    match snapshot {
        Ok(Ok(snapshot)) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            snapshot.to_prometheus(),
        )
            .into_response(),
        Ok(Err(e)) => {
            warn!(
                error = &e as &dyn std::error::Error,
                "reading metrics failed"
            );
            unavailable()
        }
        Err(_) => unavailable(),
    }
}

fn unavailable() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "the broker is not available\n",
    )
        .into_response()
}
