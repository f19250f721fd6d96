//! `/api/v1`: the console's JSON API (documented in `docs/console.md`). Each handler reads or
//! changes the broker through the console's [`BrokerLink`](crate::broker_link::BrokerLink), with
//! the broker's own calls; errors are `{"error": "..."}` with a status that says whose fault it
//! is (400 bad input, 401 no or a wrong login, 403 refused, 404 unknown, 409 exists, 503 broker
//! busy or stopping).
//!
//! One file per subject: [`overview`], [`cluster`] (the node's settings, and producers),
//! [`topics`], [`groups`], [`group_admin`] (create, change and delete a group's configuration),
//! [`members`] (a group's clients and their queues), [`messages`] (browse, one message,
//! traces), [`time_search`] (a topic's messages by time), [`tail`] (the live stream),
//! [`dead_letters`] (resending them), [`sends`] (the test message) and [`users`] (ACL 2.0
//! users and their policies); [`lookup`] holds the
//! lookups they share. This file holds the routes, the error type and what every handler
//! shares: the JSON and query extractors, the hop onto the broker and the read check.

mod cluster;
mod dead_letters;
mod group_admin;
mod groups;
mod lite;
mod lookup;
mod members;
mod messages;
mod overview;
mod sends;
mod tail;
mod time_search;
mod topics;
mod users;

use axum::extract::Query;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use serde_json::json;

use skiff_actors::broker::BrokerHandle;
use skiff_actors::broker_api::BrokerError;
use skiff_actors::logic::sends::IllegalSend;
use skiff_actors::refused::Refused;

use super::{Console, ConsoleUser};
use crate::acl::{Acl, Action, Check, Need};
use crate::broker_link::LinkError;
use crate::error_text::error_chain;

pub(super) fn routes() -> Router<Console> {
    Router::new()
        .route("/overview", get(overview::overview))
        .route("/cluster", get(cluster::cluster))
        .route("/producers", get(cluster::producers))
        .route("/topics", get(topics::topics).post(topics::create_topic))
        .route(
            "/topics/{name}",
            get(topics::topic).delete(topics::delete_topic),
        )
        .route("/topics/{name}/messages", post(sends::send_message))
        .route("/topics/{name}/tail", get(tail::tail))
        .route("/topics/{name}/lite", get(lite::lite_topics))
        .route(
            "/groups",
            get(groups::groups).post(group_admin::create_group),
        )
        .route(
            "/groups/{name}",
            get(groups::group)
                .put(group_admin::update_group)
                .delete(group_admin::delete_group),
        )
        .route("/groups/{name}/reset-offset", post(groups::reset_offset))
        .route("/messages", get(messages::browse))
        .route("/messages/{id}", get(messages::message))
        .route("/messages/{id}/resend", post(dead_letters::resend_one))
        .route("/messages/{id}/traces", get(messages::traces))
        .route(
            "/groups/{name}/dlq/resend",
            post(dead_letters::resend_dead_letters),
        )
        .route("/users", get(users::users).post(users::create_user))
        .route(
            "/users/{name}",
            axum::routing::put(users::update_user).delete(users::delete_user),
        )
        .route(
            "/users/{name}/acl",
            post(users::set_acl).delete(users::delete_acl),
        )
        .fallback(unknown_route)
        .method_not_allowed_fallback(wrong_method)
}

/// A path under `/api/v1` that names no route: the documented JSON error, not an empty 404.
async fn unknown_route(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!("no API route /api/v1{}", uri.path()))
}

async fn wrong_method(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{} does not take {method}", uri.path()),
    )
}

/// An API error: its status and the message the page shows.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(json!({ "error": self.message }))).into_response()
    }
}

impl From<LinkError> for ApiError {
    fn from(e: LinkError) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
    }
}

impl From<BrokerError> for ApiError {
    fn from(e: BrokerError) -> ApiError {
        match &e {
            BrokerError::Refused(Refused::TopicNotExist { topic }) => {
                ApiError::not_found(format!("topic {topic} does not exist"))
            }
            BrokerError::Refused(Refused::GroupNotExist { group }) => {
                ApiError::not_found(format!("group {group} does not exist"))
            }
            BrokerError::Refused(
                refused @ (Refused::IllegalSend(IllegalSend::Forbidden { .. })
                | Refused::TopicNotWritable { .. }
                | Refused::NoWriteQueue { .. }
                | Refused::BrokerCursor { .. }),
            ) => ApiError::new(StatusCode::FORBIDDEN, refused.to_string()),
            BrokerError::Refused(refused) => ApiError::bad_request(refused.to_string()),
            _ => {
                tracing::warn!(
                    error = &e as &dyn std::error::Error,
                    "console request failed"
                );
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, error_chain(&e))
            }
        }
    }
}

impl From<skiff_storage::store::StoreError> for ApiError {
    fn from(e: skiff_storage::store::StoreError) -> ApiError {
        BrokerError::Store(e).into()
    }
}

type ApiResult<T> = Result<Json<T>, ApiError>;

/// A JSON body, any content type; a body that does not parse is a 400 in the API's shape.
pub(super) struct ApiJson<T>(pub T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> axum::extract::FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        let body = Bytes::from_request(request, state).await.map_err(|e| {
            ApiError::bad_request(format!("the request body could not be read: {e}"))
        })?;
        let body: &[u8] = if body.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            &body
        };
        serde_json::from_slice(body).map(ApiJson).map_err(|e| {
            ApiError::bad_request(format!("the request body is not the JSON expected: {e}"))
        })
    }
}

/// Query parameters; ones that do not parse are a 400 in the API's shape.
pub(super) struct ApiQuery<T>(pub T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> axum::extract::FromRequestParts<S>
    for ApiQuery<T>
{
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(q)| ApiQuery(q))
            .map_err(|e| ApiError::bad_request(e.body_text()))
    }
}

impl Console {
    /// Runs `call` with the broker on its arbiter.
    async fn on_broker<T, F, Fut>(&self, call: F) -> Result<T, ApiError>
    where
        F: FnOnce(BrokerHandle) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<T, ApiError>> + 'static,
        T: Send + 'static,
    {
        self.link.call(call).await?
    }
}

/// With ACL on, reading a topic's messages needs `SUB` on it.
fn may_read(user: Option<&ConsoleUser>, topic: &str) -> Result<(), ApiError> {
    let Some(ConsoleUser(identity)) = user else {
        return Ok(());
    };
    let need = Need::Access(vec![Check::topic(topic, Action::Sub)]);
    Acl::authorize(identity, &need, 0, std::net::IpAddr::from([0, 0, 0, 0]))
        .map_err(|refusal| ApiError::forbidden(refusal.to_string()))
}
