//! `skiff admin lite <parent>`: a page of a LITE parent's lite topics on each master that has
//! the parent, by LIST_LITE_TOPICS (skiff's own request: RocketMQ 5.5 lists no lite topics;
//! its `mqadmin getParentTopicInfo` counts them).

use serde_json::{json, Value};
use std::collections::BTreeMap;

use super::{bad, format_time, missing, table, Admin, AdminError, Rendered};
use crate::remoting::body::lite::LiteTopicListBody;
use crate::remoting::body::JsonBody;
use crate::remoting::codes::request as rc;
use crate::remoting::frame::RemotingCommand;

impl Admin {
    pub(super) async fn lite(
        &self,
        parent: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Rendered, AdminError> {
        let mut text = String::new();
        let mut pages = Vec::new();
        for holder in self.topic_masters(parent).await? {
            let mut fields = BTreeMap::from([
                ("parentTopic".to_owned(), parent.to_owned()),
                ("limit".to_owned(), limit.to_string()),
            ]);
            if let Some(after) = after {
                fields.insert("after".to_owned(), after.to_owned());
            }
            let request =
                RemotingCommand::new_request(rc::LIST_LITE_TOPICS).with_ext_fields(fields);
            let response = self
                .call(&holder.addr, request)
                .await
                .map_err(|e| missing(e, Some(parent), None))?;
            let page = LiteTopicListBody::decode(&response.body)
                .map_err(|e| bad(&holder.addr, "lite topic list", e))?;
            text.push_str(&render_page(&holder.broker, &page));
            pages.push(json!({
                "broker": holder.broker,
                "parent": page.parent_topic,
                "total": page.total,
                "groups": page.groups,
                "lite_topics": page.lite_topics.iter().map(|t| json!({
                    "lite_topic": t.lite_topic,
                    "min_offset": t.min_offset,
                    "max_offset": t.max_offset,
                    "last_update_ms": t.last_update_timestamp,
                    "subscribers": t.subscribers.iter()
                        .map(|s| json!({"client_id": s.client_id, "group": s.group}))
                        .collect::<Vec<_>>(),
                    "lag": t.lag,
                })).collect::<Vec<_>>(),
                "next_after": page.next_after,
            }));
        }
        Ok(Rendered {
            text,
            json: Value::Array(pages),
        })
    }
}

/// One broker's page: a table with a lag column per bound group, then a count and how to ask
/// for the next page.
fn render_page(broker: &str, page: &LiteTopicListBody) -> String {
    let mut headers = vec!["LITE TOPIC", "MIN", "MAX", "LAST WRITE", "SUBSCRIBERS"];
    let lag_headers: Vec<String> = page.groups.iter().map(|g| format!("LAG {g}")).collect();
    headers.extend(lag_headers.iter().map(String::as_str));
    let rows: Vec<Vec<String>> = page
        .lite_topics
        .iter()
        .map(|t| {
            let mut row = vec![
                t.lite_topic.clone(),
                t.min_offset.to_string(),
                t.max_offset.to_string(),
                if t.last_update_timestamp > 0 {
                    format_time(t.last_update_timestamp)
                } else {
                    "-".into()
                },
                if t.subscribers.is_empty() {
                    "-".into()
                } else {
                    t.subscribers
                        .iter()
                        .map(|s| s.client_id.as_str())
                        .collect::<Vec<_>>()
                        .join(",")
                },
            ];
            row.extend(
                page.groups
                    .iter()
                    .map(|g| t.lag.get(g).map_or("-".into(), u64::to_string)),
            );
            row
        })
        .collect();
    let mut text = table(&headers, &rows);
    text.push_str(&format!(
        "{} of {} lite topics of {} on {broker}",
        page.lite_topics.len(),
        page.total,
        page.parent_topic
    ));
    match &page.next_after {
        Some(next) => text.push_str(&format!("; next page: --after {next}\n")),
        None => text.push('\n'),
    }
    text
}
