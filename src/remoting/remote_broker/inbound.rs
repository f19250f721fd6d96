//! Requests a broker sends to this client on its own connection, dispatched on the arbiter to
//! whoever answers them: NOTIFY_CONSUMER_IDS_CHANGED (40) to the notifiers heartbeats registered
//! ([`super::registrations`]), CHECK_TRANSACTION_STATE (39) and PUSH_REPLY_MESSAGE_TO_CLIENT (326)
//! to the producer side ([`super::producers`]), GET_CONSUMER_RUNNING_INFO (307) answered from the
//! heartbeats. Kept apart from both so neither needs the other.

use std::cell::RefCell;
use std::rc::Weak;
use std::sync::Arc;

use tokio::sync::mpsc;
use tracing::{debug, warn};

use skiff_actors::broker_api::ConsumerNotifier;

use super::producers::{dispatch_check, dispatch_reply, Producers};
use super::registrations::{running_info_answer, ClientFacts, Notifiers, Registrations};
use crate::remoting::client::InboundRequest;
use crate::remoting::codes::request as rc;
use crate::remoting::codes::response as code;
use crate::remoting::frame::RemotingCommand;
use crate::remoting::headers::{CustomHeader, NotifyConsumerIdsChangedRequestHeader};

/// Runs on the arbiter: NOTIFY_CONSUMER_IDS_CHANGED goes to the group's notifiers,
/// CHECK_TRANSACTION_STATE to the producer group's checker,
/// GET_CONSUMER_RUNNING_INFO is answered from the heartbeats, PUSH_REPLY_MESSAGE_TO_CLIENT goes
/// to the request waiting for it; other requests are answered REQUEST_CODE_NOT_SUPPORTED. Ends when the client is gone.
pub(super) async fn dispatch_inbound(
    mut inbound: mpsc::Receiver<InboundRequest>,
    notifiers: Weak<Notifiers>,
    registrations: Weak<RefCell<Registrations>>,
    producers: Weak<RefCell<Producers>>,
    facts: ClientFacts,
) {
    while let Some(request) = inbound.recv().await {
        let Some(notifiers) = notifiers.upgrade() else {
            break;
        };
        if request.request.code == rc::GET_CONSUMER_RUNNING_INFO {
            let answer = running_info_answer(&request.request, &registrations, &facts);
            let _ = request.reply(answer).await;
        } else if request.request.code == rc::NOTIFY_CONSUMER_IDS_CHANGED {
            match NotifyConsumerIdsChangedRequestHeader::from_command(&request.request) {
                Ok(header) => {
                    let group = header.consumer_group;
                    // Cloned out first: a notifier may call back into the broker.
                    let targets: Vec<Arc<dyn ConsumerNotifier>> = notifiers
                        .borrow()
                        .iter()
                        .filter(|((g, _), _)| *g == group)
                        .map(|(_, n)| n.clone())
                        .collect();
                    debug!(group = %group, consumers = targets.len(), "consumer ids changed");
                    for notifier in targets {
                        notifier.consumer_ids_changed(&group);
                    }
                }
                Err(e) => {
                    warn!(addr = %request.addr, error = %e, "bad NOTIFY_CONSUMER_IDS_CHANGED ignored")
                }
            }
            if !request.request.is_oneway() {
                let _ = request
                    .reply(RemotingCommand::success_to(&request.request))
                    .await;
            }
        } else if request.request.code == rc::CHECK_TRANSACTION_STATE {
            // Oneway: the answer is the END_TRANSACTION the checker sends.
            dispatch_check(&request, &producers);
        } else if request.request.code == rc::PUSH_REPLY_MESSAGE_TO_CLIENT {
            let answer = dispatch_reply(&request, &producers);
            if answer.code != code::SUCCESS {
                debug!(addr = %request.addr, remark = ?answer.remark, "reply push refused");
            }
            let _ = request.reply(answer).await;
        } else {
            debug!(addr = %request.addr, code = request.request.code, "server request not supported");
            let answer = RemotingCommand::not_supported(&request.request);
            let _ = request.reply(answer).await;
        }
    }
}
