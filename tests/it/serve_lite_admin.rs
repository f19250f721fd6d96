//! RocketMQ 5.5's lite admin requests on `skiff serve`, as `mqadmin getParentTopicInfo`,
//! `getLiteTopicInfo`, `getLiteClientInfo` and `getLiteGroupInfo` send them: a LITE parent's lite
//! topics and groups, one lite topic's offsets, a group's lag over its lite topics and in one,
//! and Java's refusals for a topic that is not LITE, a missing topic and a missing group.

use crate::common::{expect_code, request, Harness};
use anyhow::ensure;
use serde_json::Value;
use skiff::remoting::codes::{request as rc, response as code};
use skiff::remoting::{ClientConfig, RemotingClient};
use skiff::testsuite::send_v2;

const PARENT: &str = "Chats";
const GROUP: &str = "chat-readers";

fn body(answer: &skiff::remoting::RemotingCommand) -> anyhow::Result<Value> {
    Ok(serde_json::from_slice(&answer.body)?)
}

#[actix_rt::test]
async fn lite_admin_requests_answer_a_parents_lite_topics_offsets_and_lag() -> anyhow::Result<()> {
    let h = Harness::start().await?;
    let c = RemotingClient::new(ClientConfig::default());
    let topic = request(
        rc::UPDATE_AND_CREATE_TOPIC,
        &[
            ("topic", PARENT),
            ("defaultTopic", "TBW102"),
            ("readQueueNums", "4"),
            ("writeQueueNums", "4"),
            ("perm", "6"),
            ("topicFilterType", "SINGLE_TAG"),
            ("topicSysFlag", "0"),
            ("order", "false"),
            ("attributes", "+message.type=LITE,+lite.topic.expiration=30"),
        ],
    );
    expect_code(&h.call(&c, topic).await?, code::SUCCESS)?;
    let group = request(rc::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, &[]).with_body(
        format!(r#"{{"groupName":"{GROUP}","attributes":{{"+lite.bind.topic":"{PARENT}"}}}}"#)
            .into_bytes(),
    );
    expect_code(&h.call(&c, group).await?, code::SUCCESS)?;
    for (lite, count) in [("s1", 3), ("s2", 1)] {
        for i in 0..count {
            let send = send_v2(PARENT, format!("{lite}-{i}"))
                .properties(format!("__LITE_TOPIC\u{1}{lite}\u{2}WAIT\u{1}true\u{2}"))
                .build();
            expect_code(&h.call(&c, send).await?, code::SUCCESS)?;
        }
    }
    let commit = request(
        rc::UPDATE_CONSUMER_OFFSET,
        &[
            ("consumerGroup", GROUP),
            ("topic", "%LMQ%$Chats$s1"),
            ("queueId", "0"),
            ("commitOffset", "1"),
        ],
    );
    expect_code(&h.call(&c, commit).await?, code::SUCCESS)?;

    let parent = body(
        &h.call(&c, request(rc::GET_PARENT_TOPIC_INFO, &[("topic", PARENT)]))
            .await?,
    )?;
    ensure!(
        parent["ttl"] == 30 && parent["liteTopicCount"] == 2 && parent["groups"][0] == GROUP,
        "{parent}"
    );
    let lite = body(
        &h.call(
            &c,
            request(
                rc::GET_LITE_TOPIC_INFO,
                &[("parentTopic", PARENT), ("liteTopic", "s1")],
            ),
        )
        .await?,
    )?;
    ensure!(
        lite["topicOffset"]["maxOffset"] == 3 && lite["topicOffset"]["lastUpdateTimestamp"] != 0,
        "{lite}"
    );
    let lag = body(
        &h.call(
            &c,
            request(rc::GET_LITE_GROUP_INFO, &[("group", GROUP), ("topK", "20")]),
        )
        .await?,
    )?;
    ensure!(
        lag["totalLagCount"] == 2
            && lag["lagCountTopK"][0]["liteTopic"] == "s1"
            && lag["lagCountTopK"][0]["lagCount"] == 2,
        "{lag}"
    );
    let one = body(
        &h.call(
            &c,
            request(
                rc::GET_LITE_GROUP_INFO,
                &[("group", GROUP), ("liteTopic", "s1"), ("topK", "20")],
            ),
        )
        .await?,
    )?;
    ensure!(
        one["liteTopicOffsetWrapper"]["brokerOffset"] == 3
            && one["liteTopicOffsetWrapper"]["consumerOffset"] == 1,
        "{one}"
    );
    let client = body(
        &h.call(
            &c,
            request(
                rc::GET_LITE_CLIENT_INFO,
                &[
                    ("parentTopic", PARENT),
                    ("group", GROUP),
                    ("clientId", "nobody"),
                    ("maxCount", "10"),
                ],
            ),
        )
        .await?,
    )?;
    ensure!(client["liteTopicCount"] == -1, "{client}");
    // Java's refusals.
    let normal = request(
        rc::UPDATE_AND_CREATE_TOPIC,
        &[
            ("topic", "Plain"),
            ("readQueueNums", "1"),
            ("writeQueueNums", "1"),
            ("perm", "6"),
        ],
    );
    expect_code(&h.call(&c, normal).await?, code::SUCCESS)?;
    let refused = h
        .call(
            &c,
            request(rc::GET_PARENT_TOPIC_INFO, &[("topic", "Plain")]),
        )
        .await?;
    ensure!(
        refused.code == code::INVALID_PARAMETER
            && refused.remark.as_deref() == Some("Topic [Plain] type not match."),
        "{refused:?}"
    );
    let missing = h
        .call(&c, request(rc::GET_PARENT_TOPIC_INFO, &[("topic", "Nope")]))
        .await?;
    ensure!(missing.code == code::TOPIC_NOT_EXIST, "{missing:?}");
    let no_group = h
        .call(&c, request(rc::GET_LITE_GROUP_INFO, &[("group", "nope")]))
        .await?;
    ensure!(
        no_group.code == code::SUBSCRIPTION_GROUP_NOT_EXIST
            && no_group.remark.as_deref() == Some("Group [nope] not exist."),
        "{no_group:?}"
    );
    h.stop().await
}
