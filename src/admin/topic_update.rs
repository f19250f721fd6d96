//! `skiff admin topic update <topic> [--read-queues N] [--write-queues N] [--perm P] [--yes]`:
//! changes an existing topic's queue counts or permission on every master that has it
//! (GET_TOPIC_CONFIG 351 for the current config, then UPDATE_AND_CREATE_TOPIC 17 with what is
//! not given kept; the message type stays, as no `attributes` are sent).
//!
//! Consumers read queues `0..read`: with fewer read queues, the stored messages of the queues
//! past the new count (GET_TOPIC_STATS_INFO, 202) are hidden from every consumer, and with more
//! write than read queues, new messages land in queues nobody reads. Either is refused unless
//! `--yes`; the safe way to shrink is fewer write queues first, then, once consumers have
//! caught up, fewer read queues.

use std::fmt::Write as _;

use serde_json::{json, Value};

use super::topic_list::perm_name;
use super::{Admin, AdminError, Rendered};
use crate::remoting::codes::request as rc;
use crate::remoting::frame::RemotingCommand;
use crate::remoting::headers::{CreateTopicRequestHeader, CustomHeader};

/// What `topic update` changes; `None` keeps the current value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TopicChange {
    pub read_queues: Option<u32>,
    pub write_queues: Option<u32>,
    pub perm: Option<u32>,
}

fn clamp(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

impl Admin {
    pub(super) async fn topic_update(
        &self,
        topic: &str,
        change: TopicChange,
        yes: bool,
    ) -> Result<Rendered, AdminError> {
        if change == TopicChange::default() {
            return Err(AdminError::NothingToChange {
                options: "--read-queues, --write-queues, --perm",
            });
        }
        let holders = self.topic_masters(topic).await?;
        // Everything is checked before anything changes.
        let mut plans = Vec::new();
        let mut hidden = Vec::new();
        for holder in holders {
            let current = &holder.config;
            let read = change.read_queues.map_or(current.read_queue_nums, clamp);
            let write = change.write_queues.map_or(current.write_queue_nums, clamp);
            let perm = change.perm.map_or(current.perm, clamp);
            if read < current.read_queue_nums {
                let stats = self.topic_stats(&holder.addr, topic).await?;
                let mut messages = 0i64;
                let mut queues = Vec::new();
                for (mq, offsets) in &stats.offset_table {
                    let stored = offsets.max_offset - offsets.min_offset;
                    if mq.queue_id >= read && stored > 0 {
                        messages += stored;
                        queues.push(mq.queue_id.to_string());
                    }
                }
                if messages > 0 {
                    hidden.push(format!(
                        "{messages} stored messages in queues {} on {} would no longer be read \
                         (shrink --write-queues first and let consumers catch up)",
                        queues.join(","),
                        holder.broker
                    ));
                }
            }
            if write > read {
                hidden.push(format!(
                    "{} write queues but {read} read queues on {}: messages sent to queues \
                     {read}..{} would not be read",
                    write,
                    holder.broker,
                    write - 1
                ));
            }
            plans.push((holder, read, write, perm));
        }
        if !hidden.is_empty() && !yes {
            return Err(AdminError::WouldHide {
                topic: topic.to_owned(),
                detail: hidden.join("; "),
            });
        }
        let mut text = String::new();
        let mut changed = Vec::new();
        for (holder, read, write, perm) in plans {
            let current = &holder.config;
            let request = RemotingCommand::new_request(rc::UPDATE_AND_CREATE_TOPIC)
                .with_ext_fields(
                    CreateTopicRequestHeader {
                        topic: topic.to_owned(),
                        read_queue_nums: read,
                        write_queue_nums: write,
                        perm,
                        order: current.order,
                        attributes: String::new(),
                    }
                    .to_ext(),
                );
            self.call(&holder.addr, request).await?;
            let _ = writeln!(
                text,
                "topic {topic} updated on {} ({}): read queues {} -> {read}, write queues {} -> \
                 {write}, perm {} -> {}",
                holder.broker,
                holder.addr,
                current.read_queue_nums,
                current.write_queue_nums,
                perm_name(current.perm),
                perm_name(perm)
            );
            changed.push(json!({
                "broker": holder.broker,
                "addr": holder.addr,
                "read_queues": read,
                "write_queues": write,
                "perm": perm_name(perm),
                "previous": {
                    "read_queues": current.read_queue_nums,
                    "write_queues": current.write_queue_nums,
                    "perm": perm_name(current.perm),
                },
            }));
        }
        for warning in &hidden {
            let _ = writeln!(text, "applied with --yes: {warning}");
        }
        Ok(Rendered {
            text,
            json: json!({
                "topic": topic,
                "brokers": Value::Array(changed),
                "hidden": hidden,
            }),
        })
    }
}
