//! GET_ALL_TOPIC_CONFIG in pages, as RocketMQ 5.x clients and tools read it (`topicSeq`,
//! `maxTopicNum`, `dataVersion` in, `totalTopicNum` out): pages of at most 2,000 topics in name
//! order that together hold every topic once; a page asked for at a version the topics have
//! moved past starts again from the first; a request without paging fields still gets every
//! topic in one answer; and `skiff admin topics` lists them all through the pages.

use crate::common;

use std::collections::BTreeSet;

use anyhow::{ensure, Context};
use common::{expect_code, request, Harness};
use skiff::admin::{AdminArgs, AdminCommand};
use skiff::remoting::body::{DataVersion, JsonBody, TopicConfigWrapper};
use skiff::remoting::codes::{request as rc, response as code};
use skiff::remoting::frame::RemotingCommand;
use skiff::remoting::{ClientConfig, RemotingClient};

const TOPICS: usize = 4_500;

fn create(topic: &str) -> RemotingCommand {
    request(
        rc::UPDATE_AND_CREATE_TOPIC,
        &[
            ("topic", topic),
            ("defaultTopic", "TBW102"),
            ("readQueueNums", "2"),
            ("writeQueueNums", "2"),
            ("perm", "6"),
            ("topicFilterType", "SINGLE_TAG"),
            ("topicSysFlag", "0"),
            ("order", "false"),
        ],
    )
}

fn page_request(seq: usize, version: Option<DataVersion>) -> anyhow::Result<RemotingCommand> {
    let version = match version {
        Some(v) => serde_json::to_string(&v)?,
        None => String::new(),
    };
    Ok(request(
        rc::GET_ALL_TOPIC_CONFIG,
        &[
            ("topicSeq", &seq.to_string()),
            ("maxTopicNum", "100000"),
            ("dataVersion", &version),
        ],
    ))
}

struct Page {
    names: Vec<String>,
    total: usize,
    version: DataVersion,
}

async fn page(
    h: &Harness,
    c: &RemotingClient,
    seq: usize,
    version: Option<DataVersion>,
) -> anyhow::Result<Page> {
    let answer = h.call(c, page_request(seq, version)?).await?;
    expect_code(&answer, code::SUCCESS)?;
    let total = answer
        .ext("totalTopicNum")
        .context("a paged answer without totalTopicNum")?
        .parse()?;
    let wrapper = TopicConfigWrapper::decode(&answer.body)?;
    Ok(Page {
        names: wrapper.topic_config_table.keys().cloned().collect(),
        total,
        version: wrapper.data_version,
    })
}

#[actix_rt::test]
async fn every_topic_comes_once_through_the_pages_and_a_change_starts_them_over(
) -> anyhow::Result<()> {
    let h = Harness::start().await?;
    let c = RemotingClient::new(ClientConfig::default());
    let names: Vec<String> = (0..TOPICS).map(|i| format!("PagedT{i:05}")).collect();
    for name in &names {
        expect_code(&h.call(&c, create(name)).await?, code::SUCCESS)?;
    }

    let everything = h
        .call(&c, RemotingCommand::new_request(rc::GET_ALL_TOPIC_CONFIG))
        .await?;
    expect_code(&everything, code::SUCCESS)?;
    ensure!(
        everything.ext("totalTopicNum").is_none(),
        "an unpaged request got a paged answer"
    );
    let all: BTreeSet<String> = TopicConfigWrapper::decode(&everything.body)?
        .topic_config_table
        .into_keys()
        .collect();
    ensure!(
        names.iter().all(|n| all.contains(n)),
        "a created topic is missing"
    );

    let first = page(&h, &c, 0, None).await?;
    ensure!(
        first.total == all.len(),
        "totalTopicNum {} of {}",
        first.total,
        all.len()
    );
    ensure!(first.names.len() == 2000, "a page of {}", first.names.len());
    let mut seen = first.names.clone();
    let mut seq = first.names.len();
    while seq < first.total {
        let next = page(&h, &c, seq, Some(first.version)).await?;
        ensure!(
            next.version == first.version,
            "the version moved with no change"
        );
        ensure!(!next.names.is_empty() && next.names.len() <= 2000);
        seq += next.names.len();
        seen.extend(next.names);
    }
    let in_order: Vec<String> = all.iter().cloned().collect();
    ensure!(
        seen == in_order,
        "the pages are not every topic once, in name order"
    );

    expect_code(&h.call(&c, create("PagedLate")).await?, code::SUCCESS)?;
    let stale = page(&h, &c, 2000, Some(first.version)).await?;
    ensure!(
        stale.version != first.version,
        "a new topic did not move the version"
    );
    let new_first = in_order
        .first()
        .cloned()
        .into_iter()
        .chain(["PagedLate".to_string()])
        .min();
    ensure!(
        stale.names.first() == new_first.as_ref(),
        "a page at a stale version did not start over from {new_first:?}: {:?}",
        stale.names.first()
    );

    let listed = skiff::admin::run(AdminArgs {
        namesrv: Some(h.addr.clone()),
        json: false,
        access_key: None,
        secret_key: None,
        command: AdminCommand::Topics,
    })
    .await?;
    let rows = listed
        .lines()
        .filter(|l| l.starts_with("PagedT") && l.split_whitespace().nth(2) == Some("2"))
        .count();
    ensure!(
        rows == TOPICS,
        "skiff admin topics showed {rows} of {TOPICS} with their queues"
    );
    c.shutdown();
    h.stop().await
}
