//! The web console: a JSON API under `/api/v1` and the page that shows it, built into the node
//! and served on its HTTP listener beside `/metrics` (`src/http.rs`). Embedders mount the same
//! [`Console::router`] in their own server.
//!
//! * [`api`]: the endpoints, each a few broker calls made through the [`BrokerLink`] (axum runs
//!   handlers on `Send` tasks; the broker lives on its arbiter), the same calls `skiff admin`'s
//!   requests reach.
//! * [`traces`]: message traces as RocketMQ's clients write them, read into a timeline.
//! * [`samples`]: the last hour of produce and consume rates and group lag, which the sampler
//!   task [`start`] runs on the arbiter records.
//! * `assets/`: the page (`index.html`, its scripts and `style.css`), embedded in the binary:
//!   no CDN, no build step.
//!
//! Guards, on every route: a state-changing request (POST, PUT, DELETE) must carry the header
//! `X-Skiff-Console: 1`, which a cross-site form cannot add (CSRF); with ACL on, every request
//! must log in with HTTP Basic as a configured account (access key and secret key), changes
//! need an admin account and reading a topic's messages `SUB` on the topic.

pub mod api;
pub mod samples;
pub mod traces;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use base64::Engine;
use tracing::{debug, warn};

use skiff_actors::broker::BrokerHandle;

use crate::acl::{AclHandle, Identity};
use crate::broker_link::{self, BrokerLink, LinkTask};
use crate::listener::{Stopped, Tasks};
use samples::{Reading, Samples};

/// The header every state-changing request must carry.
pub const CSRF_HEADER: &str = "x-skiff-console";
/// How often the sampler records rates and lag by default.
pub const DEFAULT_SAMPLE_INTERVAL: Duration = Duration::from_secs(10);
/// Console requests waiting for the broker before it answers busy.
const LINK_CAPACITY: usize = 256;

/// What the overview shows of the node's configuration.
#[derive(Debug, Clone)]
pub struct ConsoleInfo {
    pub broker_name: String,
    pub cluster_name: String,
    pub listen: String,
    pub data_dir: PathBuf,
    pub retention: Duration,
    pub disk_max_used_ratio: f64,
    pub disk_full_ratio: f64,
    /// The node's running configuration as its file names the keys (`GET /cluster` shows it
    /// with every secret left out); `Null` when the embedder has none to show.
    pub settings: serde_json::Value,
}

/// The console's shared state; cheap to clone.
#[derive(Clone)]
pub struct Console {
    pub(crate) link: BrokerLink,
    pub(crate) samples: Arc<Mutex<Samples>>,
    pub(crate) info: Arc<ConsoleInfo>,
    pub(crate) started: Instant,
    pub(crate) acl: AclHandle,
    /// ACL 2.0 users and policies, for the users page.
    pub(crate) auth: Option<Arc<crate::acl::admin::AuthAdmin>>,
}

/// The console's tasks on the arbiter; [`ConsoleTask::shutdown`] stops them.
pub struct ConsoleTask {
    link: LinkTask,
    sampler: Tasks,
}

/// Starts the console's link to the broker and its sampler on the current arbiter (inside an
/// actix system / `LocalSet`).
pub fn start(
    broker: BrokerHandle,
    info: ConsoleInfo,
    acl: AclHandle,
    sample_interval: Duration,
) -> (Console, ConsoleTask) {
    let (link, link_task) = broker_link::spawn(broker.clone(), LINK_CAPACITY);
    let samples = Arc::new(Mutex::new(Samples::default()));
    let mut sampler = Tasks::new("console sampler");
    sampler.add(tokio::task::spawn_local(sample(
        broker,
        samples.clone(),
        sample_interval.max(Duration::from_millis(100)),
        sampler.stopped(),
    )));
    (
        Console {
            link,
            samples,
            info: Arc::new(info),
            started: Instant::now(),
            acl,
            auth: None,
        },
        ConsoleTask {
            link: link_task,
            sampler,
        },
    )
}

impl Console {
    /// This console with a users page over `auth`.
    pub fn with_auth(self, auth: Arc<crate::acl::admin::AuthAdmin>) -> Console {
        Console {
            auth: Some(auth),
            ..self
        }
    }
}

impl ConsoleTask {
    pub async fn shutdown(self) {
        self.sampler.shutdown().await;
        self.link.shutdown().await;
    }
}

/// Records rates and group lag every `interval` until stopped.
async fn sample(
    broker: BrokerHandle,
    samples: Arc<Mutex<Samples>>,
    interval: Duration,
    stopped: Stopped,
) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = stopped.wait() => return,
            _ = ticks.tick() => {}
        }
        let snapshot = match broker.metrics().await {
            Ok(snapshot) => snapshot,
            Err(e) => {
                debug!(
                    error = &e as &dyn std::error::Error,
                    "console sample skipped"
                );
                continue;
            }
        };
        let reading = Reading {
            at_ms: broker.now_ms(),
            produced: snapshot.produced.values().map(|q| q.messages).sum(),
            consumed: snapshot.consumed.values().sum(),
        };
        let mut lag: std::collections::BTreeMap<String, u64> = Default::default();
        for row in &snapshot.lag {
            *lag.entry(row.group.clone()).or_default() += row.lag;
        }
        match samples.lock() {
            Ok(mut samples) => samples.record(reading, lag),
            Err(poisoned) => poisoned.into_inner().record(reading, lag),
        }
    }
}

impl Console {
    /// The console's routes: the page at `/`, its assets under `/console/`, the API under
    /// `/api/v1`, behind the CSRF and login guards.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/", get(page))
            .route("/console/{file}", get(console_file))
            .nest("/api/v1", api::routes())
            .layer(axum::middleware::from_fn_with_state(self.clone(), guard))
            .with_state(self.clone())
    }

    pub(crate) fn samples(&self) -> std::sync::MutexGuard<'_, Samples> {
        match self.samples.lock() {
            Ok(samples) => samples,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

const INDEX_HTML: &str = include_str!("assets/index.html");
/// The page's scripts and stylesheet, served under `/console/`: `app.js` (what every page
/// shares) first, then one file per group of pages.
static FILES: [(&str, &str); 7] = [
    ("app.js", include_str!("assets/app.js")),
    ("topics.js", include_str!("assets/topics.js")),
    ("groups.js", include_str!("assets/groups.js")),
    ("messages.js", include_str!("assets/messages.js")),
    ("pages.js", include_str!("assets/pages.js")),
    ("users.js", include_str!("assets/users.js")),
    ("style.css", include_str!("assets/style.css")),
];

/// Where to read the page's files from instead of the embedded copies, for working on the page
/// without rebuilding: a directory holding `index.html` and the files of [`FILES`].
pub const ASSETS_DIR_VARIABLE: &str = "SKIFF_CONSOLE_ASSETS";

async fn page() -> impl IntoResponse {
    asset("text/html; charset=utf-8", "index.html", INDEX_HTML)
}

async fn console_file(axum::extract::Path(file): axum::extract::Path<String>) -> Response {
    let Some(&(name, embedded)) = FILES.iter().find(|(name, _)| *name == file) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let content_type = if name.ends_with(".css") {
        "text/css; charset=utf-8"
    } else {
        "text/javascript; charset=utf-8"
    };
    asset(content_type, name, embedded)
}

fn asset(content_type: &'static str, file: &str, embedded: &'static str) -> Response {
    let body = match std::env::var_os(ASSETS_DIR_VARIABLE) {
        Some(dir) => match std::fs::read_to_string(std::path::Path::new(&dir).join(file)) {
            Ok(text) => std::borrow::Cow::Owned(text),
            Err(e) => {
                warn!(file, error = %e, "console asset not read from {ASSETS_DIR_VARIABLE}; serving the embedded one");
                std::borrow::Cow::Borrowed(embedded)
            }
        },
        None => std::borrow::Cow::Borrowed(embedded),
    };
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}

/// The signed-in caller, when ACL is on.
#[derive(Clone)]
pub(crate) struct ConsoleUser(pub(crate) Identity);

/// CSRF and login, before any route.
async fn guard(State(console): State<Console>, mut request: Request, next: Next) -> Response {
    let changes = !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    if changes && request.headers().get(CSRF_HEADER).is_none_or(|v| v != "1") {
        return api::ApiError::forbidden(format!(
            "a request that changes state must carry the header {CSRF_HEADER}: 1 (the console's \
             page sends it; a form on another site cannot)"
        ))
        .into_response();
    }
    let acl = console.acl.current();
    if !acl.is_on() {
        return next.run(request).await;
    }
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::from([0, 0, 0, 0]), |c| c.0.ip());
    let Some((user, password)) = basic_credentials(request.headers()) else {
        return login_required("sign in with an account's access key and secret key");
    };
    let identity = acl.authenticate(Some(&user), peer, |secret| {
        same_secret(secret.as_bytes(), password.as_bytes())
    });
    let identity = match identity {
        Ok(identity) => identity,
        Err(refusal) => {
            debug!(access_key = %user, reason = %refusal, "console login refused");
            return login_required(&refusal.to_string());
        }
    };
    if changes {
        if let Identity::User(account) = &identity {
            if !account.is_admin() {
                return api::ApiError::forbidden(format!(
                    "User:{} is not an admin; changes need an admin account",
                    account.access_key
                ))
                .into_response();
            }
        }
    }
    request.extensions_mut().insert(ConsoleUser(identity));
    next.run(request).await
}

fn login_required(reason: &str) -> Response {
    let mut response = api::ApiError::new(StatusCode::UNAUTHORIZED, reason).into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"skiff\", charset=\"UTF-8\""),
    );
    response
}

/// `Authorization: Basic base64(user:password)`.
fn basic_credentials(headers: &HeaderMap) -> Option<(String, String)> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let encoded = value.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

/// Compares secrets in time independent of where they differ: both are MACed under one key and
/// the tags compared by `ring`'s constant-time verify.
fn same_secret(expected: &[u8], given: &[u8]) -> bool {
    use ring::hmac;
    let key = hmac::Key::new(hmac::HMAC_SHA256, b"skiff console login");
    hmac::verify(&key, given, hmac::sign(&key, expected).as_ref()).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_are_read_and_secrets_compared_whole() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Basic YWxpY2U6czNjcjp0"),
        );
        assert_eq!(
            basic_credentials(&headers),
            Some(("alice".to_string(), "s3cr:t".to_string()))
        );
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer x"));
        assert_eq!(basic_credentials(&headers), None);
        assert!(same_secret(b"s3cr:t", b"s3cr:t"));
        assert!(!same_secret(b"s3cr:t", b"s3cr:"));
        assert!(!same_secret(b"s3cr:t", b""));
    }
}
