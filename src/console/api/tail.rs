//! `GET /topics/{name}/tail`: a live stream (server-sent events) of the messages stored in a
//! topic after the page opened it.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::Extension;
use tokio_stream::Stream;

use skiff_storage::message::decode_records;

use super::lookup::summary;
use super::{may_read, ApiError};
use crate::console::{Console, ConsoleUser};

/// How often a live tail looks for new messages.
const TAIL_POLL: Duration = Duration::from_millis(250);

pub(super) async fn tail(
    State(console): State<Console>,
    user: Option<Extension<ConsoleUser>>,
    Path(topic): Path<String>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    may_read(user.as_deref(), &topic)?;
    let name = topic.clone();
    let queues = console
        .on_broker(move |broker| async move {
            let Some(config) = broker.topic(&name)? else {
                return Err(ApiError::not_found(format!("topic {name} does not exist")));
            };
            let reader = broker.reader();
            Ok((0..config.read_queue_nums.max(config.write_queue_nums))
                .map(|q| (q, reader.max_offset(&name, q)))
                .collect::<Vec<_>>())
        })
        .await?;
    let (events, receiver) = tokio::sync::mpsc::channel::<Event>(64);
    tokio::spawn(follow(console, topic, queues, events));
    let stream = tokio_stream::StreamExt::map(
        tokio_stream::wrappers::ReceiverStream::new(receiver),
        Ok::<Event, Infallible>,
    );
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// Sends each message stored in `topic` after `positions` until the page goes away.
async fn follow(
    console: Console,
    topic: String,
    mut positions: Vec<(u32, u64)>,
    events: tokio::sync::mpsc::Sender<Event>,
) {
    let mut poll = tokio::time::interval(TAIL_POLL);
    loop {
        tokio::select! {
            () = events.closed() => return,
            _ = poll.tick() => {}
        }
        let name = topic.clone();
        let from = positions.clone();
        let read = console
            .on_broker(move |broker| async move {
                let reader = broker.reader();
                let mut found = Vec::new();
                let mut next = Vec::with_capacity(from.len());
                for (queue, offset) in from {
                    let read = reader.read(&name, queue, offset, 32, 1 << 20, None)?;
                    if let Ok(messages) = decode_records(read.records) {
                        found.extend(messages.iter().map(summary));
                    }
                    next.push((queue, read.next_begin_offset.max(offset)));
                }
                Ok((found, next))
            })
            .await;
        let Ok((found, next)) = read else {
            // A busy or stopping broker: the page sees the stream end and may reopen it.
            return;
        };
        positions = next;
        for message in found {
            let event = Event::default().event("message").data(message.to_string());
            if events.send(event).await.is_err() {
                return;
            }
        }
    }
}
