//! `skiff admin groups` and `skiff admin group create|update|delete`: subscription (consumer)
//! groups' settings, as `mqadmin updateSubGroup` and `deleteSubGroup` change them.
//!
//! * `groups`: GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) of every master.
//! * `group create <group> [settings]`: UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200) on every
//!   master, RocketMQ's `SubscriptionGroupConfig` defaults for what is not given. A group some
//!   master has already is an error: 200 would reset its other settings.
//! * `group update <group> [settings]`: on every master that has the group, its current config
//!   (201) with the given settings changed, sent back as 200. A group no master has is an error.
//! * `group delete <group> [--clean-offsets]`: DELETE_SUBSCRIPTIONGROUP (207) on every master
//!   that has the group (the broker answers success for a group it does not have, so the
//!   command asks first). A group no master has is an error.
//!
//! After 200 each master's config is read again: a setting the broker did not keep (skiff's
//! broker keeps no `consumeEnable`) fails the command, naming it.

use serde_json::{json, Map, Value};

use super::cli::GroupSettings;
use super::{bad, table, Admin, AdminError, Rendered};
use crate::remoting::body::{JsonBody, SubscriptionGroupBody, SubscriptionGroupWrapper};
use crate::remoting::codes::request as rc;
use crate::remoting::frame::RemotingCommand;
use crate::remoting::headers::{CustomHeader, DeleteSubscriptionGroupRequestHeader};

const SETTING_OPTIONS: &str = "--retry-max-times, --retry-queue-nums, \
    --consume-message-orderly, --consume-broadcast-enable, --consume-from-min-enable, \
    --consume-enable";

/// The settings `group create|update` sets, by their JSON (and Java) names.
fn settings_json(g: &SubscriptionGroupBody) -> Value {
    json!({
        "retry_max_times": g.retry_max_times,
        "retry_queue_nums": g.retry_queue_nums,
        "consume_message_orderly": g.consume_message_orderly,
        "consume_broadcast_enable": g.consume_broadcast_enable,
        "consume_from_min_enable": g.consume_from_min_enable,
        "consume_enable": g.consume_enable,
    })
}

/// `body` with the given settings changed; the names (as in [`settings_json`]) of those given.
fn apply(settings: &GroupSettings, body: &mut SubscriptionGroupBody) -> Vec<&'static str> {
    let mut given = Vec::new();
    let clamp = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
    if let Some(n) = settings.retry_max_times {
        body.retry_max_times = clamp(n);
        given.push("retry_max_times");
    }
    if let Some(n) = settings.retry_queue_nums {
        body.retry_queue_nums = clamp(n);
        given.push("retry_queue_nums");
    }
    let switches = [
        (
            settings.consume_message_orderly,
            &mut body.consume_message_orderly,
            "consume_message_orderly",
        ),
        (
            settings.consume_broadcast_enable,
            &mut body.consume_broadcast_enable,
            "consume_broadcast_enable",
        ),
        (
            settings.consume_from_min_enable,
            &mut body.consume_from_min_enable,
            "consume_from_min_enable",
        ),
        (
            settings.consume_enable,
            &mut body.consume_enable,
            "consume_enable",
        ),
    ];
    for (wanted, field, name) in switches {
        if let Some(on) = wanted {
            *field = on;
            given.push(name);
        }
    }
    given
}

/// One line of settings for people: `retry_max_times=16, ...`.
fn settings_text(settings: &Value) -> String {
    settings
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

impl Admin {
    /// Every subscription-group config of the broker at `addr` (201).
    async fn all_group_configs(&self, addr: &str) -> Result<SubscriptionGroupWrapper, AdminError> {
        let request = RemotingCommand::new_request(rc::GET_ALL_SUBSCRIPTIONGROUP_CONFIG);
        let response = self.call(addr, request).await?;
        SubscriptionGroupWrapper::decode(&response.body)
            .map_err(|e| bad(addr, "subscription groups", e))
    }

    /// (master address, config) of every master that has `group`.
    pub(super) async fn group_configs(
        &self,
        group: &str,
    ) -> Result<Vec<(String, SubscriptionGroupBody)>, AdminError> {
        let mut found = Vec::new();
        for addr in self.all_masters().await? {
            let mut all = self.all_group_configs(&addr).await?;
            if let Some(config) = all.subscription_group_table.remove(group) {
                found.push((addr, config));
            }
        }
        Ok(found)
    }

    pub(super) async fn groups(&self) -> Result<Rendered, AdminError> {
        let mut all = std::collections::BTreeMap::new();
        for addr in self.all_masters().await? {
            all.extend(
                self.all_group_configs(&addr)
                    .await?
                    .subscription_group_table,
            );
        }
        let rows: Vec<Vec<String>> = all
            .values()
            .map(|g| {
                vec![
                    g.group_name.clone(),
                    g.consume_enable.to_string(),
                    g.retry_max_times.to_string(),
                    g.retry_queue_nums.to_string(),
                    g.consume_message_orderly.to_string(),
                    g.consume_broadcast_enable.to_string(),
                    g.consume_from_min_enable.to_string(),
                ]
            })
            .collect();
        let json = Value::Array(
            all.values()
                .map(|g| {
                    let mut object = Map::new();
                    object.insert("group".into(), json!(g.group_name));
                    if let Value::Object(settings) = settings_json(g) {
                        object.extend(settings);
                    }
                    Value::Object(object)
                })
                .collect(),
        );
        let mut text = table(
            &[
                "GROUP",
                "CONSUME ENABLED",
                "RETRY MAX TIMES",
                "RETRY QUEUES",
                "ORDERLY (POP/GRPC)",
                "BROADCAST ALLOWED",
                "FROM MIN ENABLED",
            ],
            &rows,
        );
        text.push_str(
            "(settings, not how members consume: ORDERLY is consumeMessageOrderly, the order \
             pop and gRPC consumers get; BROADCAST ALLOWED is consumeBroadcastEnable)\n",
        );
        Ok(Rendered { text, json })
    }

    pub(super) async fn group_create(
        &self,
        group: &str,
        settings: &GroupSettings,
    ) -> Result<Rendered, AdminError> {
        let existing = self.group_configs(group).await?;
        if !existing.is_empty() {
            let brokers: Vec<String> = existing.into_iter().map(|(addr, _)| addr).collect();
            return Err(AdminError::GroupExists {
                group: group.to_owned(),
                brokers: brokers.join(", "),
            });
        }
        let mut body = SubscriptionGroupBody {
            group_name: group.to_owned(),
            ..SubscriptionGroupBody::default()
        };
        let given = apply(settings, &mut body);
        let mut brokers = Vec::new();
        for addr in self.all_masters().await? {
            self.put_group(&addr, &body, &given).await?;
            brokers.push(addr);
        }
        Ok(done("created", group, &brokers, &body))
    }

    pub(super) async fn group_update(
        &self,
        group: &str,
        settings: &GroupSettings,
    ) -> Result<Rendered, AdminError> {
        if *settings == GroupSettings::default() {
            return Err(AdminError::NothingToChange {
                options: SETTING_OPTIONS,
            });
        }
        let existing = self.group_configs(group).await?;
        if existing.is_empty() {
            return Err(AdminError::GroupNotExist {
                group: group.to_owned(),
            });
        }
        let mut brokers = Vec::new();
        let mut last = None;
        for (addr, mut body) in existing {
            let given = apply(settings, &mut body);
            self.put_group(&addr, &body, &given).await?;
            brokers.push(addr);
            last = Some(body);
        }
        let body = last.unwrap_or_default();
        Ok(done("updated", group, &brokers, &body))
    }

    /// 200 with `body` at `addr`, then 201 to check that every setting in `given` was kept.
    async fn put_group(
        &self,
        addr: &str,
        body: &SubscriptionGroupBody,
        given: &[&str],
    ) -> Result<(), AdminError> {
        let request = RemotingCommand::new_request(rc::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP)
            .with_body(body.encode());
        self.call(addr, request).await?;
        let Some(kept) = self
            .all_group_configs(addr)
            .await?
            .subscription_group_table
            .remove(&body.group_name)
        else {
            return Err(AdminError::NotKept {
                addr: addr.to_owned(),
                group: body.group_name.clone(),
                settings: "anything (the group is not listed afterwards)".to_owned(),
            });
        };
        let (wanted, kept) = (settings_json(body), settings_json(&kept));
        let lost: Vec<String> = given
            .iter()
            .filter(|name| wanted[**name] != kept[**name])
            .map(|name| format!("{name}={} (it has {})", wanted[*name], kept[*name]))
            .collect();
        if lost.is_empty() {
            Ok(())
        } else {
            Err(AdminError::NotKept {
                addr: addr.to_owned(),
                group: body.group_name.clone(),
                settings: lost.join(", "),
            })
        }
    }

    pub(super) async fn group_delete(
        &self,
        group: &str,
        clean_offsets: bool,
    ) -> Result<Rendered, AdminError> {
        let existing = self.group_configs(group).await?;
        if existing.is_empty() {
            return Err(AdminError::GroupNotExist {
                group: group.to_owned(),
            });
        }
        let mut brokers = Vec::new();
        for (addr, _) in existing {
            let request = RemotingCommand::new_request(rc::DELETE_SUBSCRIPTIONGROUP)
                .with_ext_fields(
                    DeleteSubscriptionGroupRequestHeader {
                        group_name: group.to_owned(),
                        clean_offset: clean_offsets,
                    }
                    .to_ext(),
                );
            self.call(&addr, request).await?;
            brokers.push(addr);
        }
        Ok(Rendered {
            text: format!(
                "consumer group {group} deleted on {}{}\n",
                brokers.join(", "),
                if clean_offsets {
                    ", with its offsets"
                } else {
                    ""
                }
            ),
            json: json!({
                "group": group,
                "brokers": brokers,
                "clean_offsets": clean_offsets,
            }),
        })
    }
}

fn done(what: &str, group: &str, brokers: &[String], body: &SubscriptionGroupBody) -> Rendered {
    let settings = settings_json(body);
    Rendered {
        text: format!(
            "consumer group {group} {what} on {}: {}\n",
            brokers.join(", "),
            settings_text(&settings)
        ),
        json: json!({
            "group": group,
            "brokers": brokers,
            "settings": settings,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_given_settings_change() {
        let mut body = SubscriptionGroupBody::default();
        let given = apply(
            &GroupSettings {
                retry_max_times: Some(3),
                consume_enable: Some(false),
                ..GroupSettings::default()
            },
            &mut body,
        );
        assert_eq!(given, vec!["retry_max_times", "consume_enable"]);
        assert_eq!(body.retry_max_times, 3);
        assert!(!body.consume_enable);
        let defaults = SubscriptionGroupBody::default();
        assert_eq!(body.retry_queue_nums, defaults.retry_queue_nums);
        assert_eq!(
            body.consume_broadcast_enable,
            defaults.consume_broadcast_enable
        );
    }
}
