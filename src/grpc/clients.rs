//! gRPC clients by client id: the settings each sent on its Telemetry stream, and the channel
//! back to it.
//!
//! A gRPC client is one `x-mq-client-id` over however many HTTP/2 connections it opens: a
//! session, registered in the broker's connection registry under one [`ClientSessionId`] for
//! its lifetime here. What it reported (description, producer topics, consumer data) is kept
//! there, as for every door; this table keeps what serving and reaching it needs: its
//! settings and its way back, the Telemetry stream (a transaction check-back becomes a
//! `RecoverOrphanedTransactionCommand` written there). The table lives on the `Send` side (the
//! RPC handlers read settings on every receive); the broker holds only the listener.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::mpsc;
use tracing::debug;

use skiff_actors::broker_api::{
    ConnectionId, ConsumerNotifier, TransactionCheck, TransactionCheckListener,
};

use super::convert::message_from_stored;
use super::pb;
use super::transaction_id::TransactionId;

/// What the server writes on a client's Telemetry stream.
pub type TelemetrySender = mpsc::Sender<Result<pb::TelemetryCommand, tonic::Status>>;

/// Commands waiting to be written to one client's Telemetry stream.
pub const TELEMETRY_QUEUE: usize = 64;

/// A gRPC client session, which the broker's registry knows as one [`ConnectionId`] whatever
/// number of HTTP/2 connections carry it (see [`ConnectionId`]): not a transport connection.
pub type ClientSessionId = ConnectionId;

/// One client, as its last settings describe it.
#[derive(Clone)]
pub struct Client {
    pub session: ClientSessionId,
    pub settings: Option<pb::Settings>,
    pub telemetry: Option<TelemetrySender>,
}

/// Every gRPC client the server has seen and not forgotten.
#[derive(Clone, Default)]
pub struct Clients {
    table: Arc<Mutex<HashMap<String, Client>>>,
}

impl Clients {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Client>> {
        // A panic while holding the lock leaves plain data behind; keep serving it.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The client's entry, made on first sight with a fresh session id.
    pub fn get_or_insert(&self, client_id: &str) -> Client {
        self.lock()
            .entry(client_id.to_owned())
            .or_insert_with(|| Client {
                session: ClientSessionId::next(),
                settings: None,
                telemetry: None,
            })
            .clone()
    }

    pub fn get(&self, client_id: &str) -> Option<Client> {
        self.lock().get(client_id).cloned()
    }

    /// Records settings and the stream to answer on; answers the client's entry.
    pub fn update_settings(
        &self,
        client_id: &str,
        settings: pb::Settings,
        telemetry: TelemetrySender,
    ) -> Client {
        let mut table = self.lock();
        let client = table.entry(client_id.to_owned()).or_insert_with(|| Client {
            session: ClientSessionId::next(),
            settings: None,
            telemetry: None,
        });
        client.settings = Some(settings);
        client.telemetry = Some(telemetry);
        client.clone()
    }

    /// The client's Telemetry stream ended: nothing can reach it any more.
    pub fn telemetry_closed(&self, client_id: &str, stream: &TelemetrySender) {
        if let Some(client) = self.lock().get_mut(client_id) {
            if client
                .telemetry
                .as_ref()
                .is_some_and(|t| t.same_channel(stream))
            {
                client.telemetry = None;
            }
        }
    }

    pub fn remove(&self, client_id: &str) -> Option<Client> {
        self.lock().remove(client_id)
    }

    /// Tells a lite consumer it lost `lite_topic` (another client of its Exclusive group took
    /// it): a `NotifyUnsubscribeLiteCommand` on its Telemetry stream, best effort as the
    /// proxy's.
    pub fn notify_unsubscribe_lite(&self, client_id: &str, lite_topic: &str) {
        let Some(telemetry) = self.get(client_id).and_then(|c| c.telemetry) else {
            debug!(
                client_id,
                lite_topic, "evicted lite client has no telemetry stream"
            );
            return;
        };
        let command = pb::TelemetryCommand {
            status: None,
            command: Some(
                pb::telemetry_command::Command::NotifyUnsubscribeLiteCommand(
                    pb::NotifyUnsubscribeLiteCommand {
                        lite_topic: lite_topic.to_owned(),
                    },
                ),
            ),
        };
        if let Err(e) = telemetry.try_send(Ok(command)) {
            debug!(client_id, lite_topic, error = %e, "unsubscribe notice not written to the telemetry stream");
        }
    }
}

/// How the broker reaches a gRPC consumer. Assignment is the server's (pop), so a change of
/// members needs no notice.
pub struct GrpcConsumer {
    pub connection: ConnectionId,
}

impl ConsumerNotifier for GrpcConsumer {
    fn connection(&self) -> ConnectionId {
        self.connection
    }

    fn consumer_ids_changed(&self, _group: &str) {}
}

/// How the broker asks a gRPC producer about a pending transaction: a
/// `RecoverOrphanedTransactionCommand` on its Telemetry stream.
pub struct GrpcTransactionChecker {
    pub connection: ConnectionId,
    pub client_id: String,
    pub telemetry: TelemetrySender,
}

impl TransactionCheckListener for GrpcTransactionChecker {
    fn connection(&self) -> ConnectionId {
        self.connection
    }

    fn check_transaction_state(&self, check: TransactionCheck) {
        let transaction_id = TransactionId {
            commit_log_offset: check.commit_log_offset,
            tran_state_table_offset: check.tran_state_table_offset,
        };
        let command = pb::TelemetryCommand {
            status: None,
            command: Some(
                pb::telemetry_command::Command::RecoverOrphanedTransactionCommand(
                    pb::RecoverOrphanedTransactionCommand {
                        message: Some(message_from_stored(&check.message)),
                        transaction_id: transaction_id.to_string(),
                    },
                ),
            ),
        };
        // Best effort, as over remoting: an unanswered check is asked again next round.
        if let Err(e) = self.telemetry.try_send(Ok(command)) {
            debug!(client_id = %self.client_id, commit_log_offset = check.commit_log_offset, error = %e, "transaction check not written to the telemetry stream");
        }
    }
}
