//! `MetadataStore`: topic and subscription-group configuration in sled.

use std::path::PathBuf;

use skiff_storage::metadata::{
    open_db, MetadataError, MetadataStore, SubscriptionGroupConfig, TopicConfig, TopicMessageType,
    PERM_READ, SUBSCRIPTION_GROUPS_TREE, SUBSCRIPTION_GROUP_RECORD_VERSION, TOPICS_TREE,
    TOPIC_RECORD_VERSION,
};
use skiff_storage::offset_table::{OffsetKey, OffsetTable, SledOffsetTable};
use skiff_storage::record;

struct Fixture {
    _dir: tempfile::TempDir,
    path: PathBuf,
    db: sled::Db,
    store: MetadataStore,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("meta");
    let db = open_db(&path).unwrap();
    let store = MetadataStore::open(&db, path.clone()).unwrap();
    Fixture {
        _dir: dir,
        path,
        db,
        store,
    }
}

#[test]
fn defaults_match_rocketmq() {
    let topic = TopicConfig::new("TopicTest", 8);
    assert_eq!(topic.name, "TopicTest");
    assert_eq!(topic.read_queue_nums, 8);
    assert_eq!(topic.write_queue_nums, 8);
    assert_eq!(topic.perm, 6);
    assert_eq!(topic.message_type, None);
    let group = SubscriptionGroupConfig::new("CID_1");
    assert_eq!(
        group,
        SubscriptionGroupConfig {
            name: "CID_1".into(),
            retry_max_times: 16,
            retry_queue_nums: 1,
            consume_broadcast_enable: true,
            consume_from_min_enable: true,
            consume_message_orderly: false,
            attributes: Default::default(),
        }
    );
}

#[test]
fn topics_put_get_remove_list() {
    let f = fixture();
    assert_eq!(f.store.get_topic("TopicTest").unwrap(), None);
    assert_eq!(f.store.list_topics().unwrap(), vec![]);
    let b = TopicConfig::new("b", 4);
    let a = TopicConfig::new("a", 1);
    let ab = TopicConfig::new("a-b", 2);
    let retry = TopicConfig::new("%RETRY%CID_1", 1);
    for t in [&b, &a, &ab, &retry] {
        f.store.put_topic(t).unwrap();
    }
    assert_eq!(f.store.get_topic("b").unwrap(), Some(b.clone()));
    assert_eq!(
        f.store.list_topics().unwrap(),
        vec![retry.clone(), a.clone(), ab.clone(), b.clone()]
    );
    // Overwrite.
    let read_only = TopicConfig {
        perm: PERM_READ,
        message_type: Some(TopicMessageType::Fifo),
        ..b.clone()
    };
    f.store.put_topic(&read_only).unwrap();
    assert_eq!(f.store.get_topic("b").unwrap(), Some(read_only.clone()));
    assert!(!read_only.is_writable());
    assert!(f.store.remove_topic("a").unwrap());
    assert!(!f.store.remove_topic("a").unwrap());
    assert_eq!(f.store.get_topic("a").unwrap(), None);
    assert_eq!(f.store.list_topics().unwrap(), vec![retry, ab, read_only]);
    // Groups are a separate tree.
    assert_eq!(f.store.list_subscription_groups().unwrap(), vec![]);
}

#[test]
fn subscription_groups_put_get_remove_list() {
    let f = fixture();
    let g2 = SubscriptionGroupConfig {
        retry_max_times: 3,
        retry_queue_nums: 0,
        consume_broadcast_enable: false,
        consume_message_orderly: true,
        ..SubscriptionGroupConfig::new("g2")
    };
    let g1 = SubscriptionGroupConfig::new("g1");
    f.store.put_subscription_group(&g2).unwrap();
    f.store.put_subscription_group(&g1).unwrap();
    assert_eq!(
        f.store.get_subscription_group("g2").unwrap(),
        Some(g2.clone())
    );
    assert_eq!(f.store.get_subscription_group("g3").unwrap(), None);
    assert_eq!(
        f.store.list_subscription_groups().unwrap(),
        vec![g1.clone(), g2.clone()]
    );
    assert!(f.store.remove_subscription_group("g1").unwrap());
    assert_eq!(f.store.list_subscription_groups().unwrap(), vec![g2]);
    assert_eq!(f.store.list_topics().unwrap(), vec![]);
}

#[test]
fn empty_name_is_rejected() {
    let f = fixture();
    assert!(matches!(
        f.store.put_topic(&TopicConfig::new("", 1)),
        Err(MetadataError::MalformedKey {
            tree: TOPICS_TREE,
            ..
        })
    ));
    assert!(matches!(
        f.store
            .put_subscription_group(&SubscriptionGroupConfig::new("")),
        Err(MetadataError::MalformedKey {
            tree: SUBSCRIPTION_GROUPS_TREE,
            ..
        })
    ));
}

#[test]
fn survives_reopen_and_shares_the_db_with_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("meta");
    {
        let db = open_db(&path).unwrap();
        let store = MetadataStore::open(&db, path.clone()).unwrap();
        let mut offsets = SledOffsetTable::open(&db, path.clone()).unwrap();
        store.put_topic(&TopicConfig::new("TopicTest", 4)).unwrap();
        store
            .put_subscription_group(&SubscriptionGroupConfig::new("g"))
            .unwrap();
        offsets
            .commit(&OffsetKey::new("TopicTest", "g"), 1, 10)
            .unwrap();
        store.flush().unwrap();
        offsets.flush().unwrap();
    }
    let db = open_db(&path).unwrap();
    let store = MetadataStore::open(&db, path.clone()).unwrap();
    let offsets = SledOffsetTable::open(&db, path.clone()).unwrap();
    assert_eq!(
        store.list_topics().unwrap(),
        vec![TopicConfig::new("TopicTest", 4)]
    );
    assert_eq!(
        store.list_subscription_groups().unwrap(),
        vec![SubscriptionGroupConfig::new("g")]
    );
    // The offset tree holds only offsets (a topic record there would be a malformed key).
    assert_eq!(
        offsets.list_all().unwrap(),
        vec![(OffsetKey::new("TopicTest", "g"), 1, 10)]
    );
}

fn assert_corrupt<T: std::fmt::Debug>(
    result: Result<T, MetadataError>,
    tree: &str,
    key: &str,
    path: &std::path::Path,
) {
    let err = result.expect_err("a corrupt record must be an error");
    let message = err.to_string();
    match &err {
        MetadataError::Corrupt {
            tree: t,
            key: k,
            file,
            ..
        } => {
            assert_eq!(*t, tree);
            assert_eq!(k, key);
            assert_eq!(file, path);
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert!(message.contains(tree), "{message}");
    assert!(message.contains(key), "{message}");
    assert!(message.contains(&path.display().to_string()), "{message}");
}

#[test]
fn corrupt_topic_record_is_an_error() {
    let f = fixture();
    f.store
        .put_topic(&TopicConfig::new("TopicTest", 4))
        .unwrap();
    let tree = f.db.open_tree(TOPICS_TREE).unwrap();
    let mut raw = tree.get("TopicTest").unwrap().unwrap().to_vec();
    let i = raw.len() - 2;
    raw[i] ^= 0x10;
    tree.insert("TopicTest", raw).unwrap();
    assert_corrupt(
        f.store.get_topic("TopicTest"),
        TOPICS_TREE,
        "TopicTest",
        &f.path,
    );
    assert_corrupt(f.store.list_topics(), TOPICS_TREE, "TopicTest", &f.path);
    // Removing a corrupt record is allowed (it is how an operator clears it).
    assert!(f.store.remove_topic("TopicTest").unwrap());
    assert_eq!(f.store.list_topics().unwrap(), vec![]);
}

#[test]
fn corrupt_group_record_is_an_error() {
    let f = fixture();
    f.store
        .put_subscription_group(&SubscriptionGroupConfig::new("CID_1"))
        .unwrap();
    let tree = f.db.open_tree(SUBSCRIPTION_GROUPS_TREE).unwrap();
    tree.insert("CID_1", &b"\x01\x00\x00"[..]).unwrap(); // truncated header
    assert_corrupt(
        f.store.get_subscription_group("CID_1"),
        SUBSCRIPTION_GROUPS_TREE,
        "CID_1",
        &f.path,
    );
    assert_corrupt(
        f.store.list_subscription_groups(),
        SUBSCRIPTION_GROUPS_TREE,
        "CID_1",
        &f.path,
    );
}

#[test]
fn record_under_the_wrong_key_is_corrupt() {
    let f = fixture();
    let tree = f.db.open_tree(TOPICS_TREE).unwrap();
    tree.insert(
        "Alias",
        record::encode(TOPIC_RECORD_VERSION, &TopicConfig::new("Other", 1)),
    )
    .unwrap();
    assert_corrupt(f.store.get_topic("Alias"), TOPICS_TREE, "Alias", &f.path);
}

#[test]
fn unknown_version_is_reported() {
    let f = fixture();
    let tree = f.db.open_tree(SUBSCRIPTION_GROUPS_TREE).unwrap();
    let future = SUBSCRIPTION_GROUP_RECORD_VERSION + 1;
    tree.insert(
        "CID_1",
        record::encode(future, &SubscriptionGroupConfig::new("CID_1")),
    )
    .unwrap();
    for result in [
        f.store.get_subscription_group("CID_1").map(|_| ()),
        f.store.list_subscription_groups().map(|_| ()),
    ] {
        let err = result.expect_err("unknown version must be an error");
        let message = err.to_string();
        match err {
            MetadataError::UnknownVersion {
                tree,
                key,
                file,
                version,
            } => {
                assert_eq!(tree, SUBSCRIPTION_GROUPS_TREE);
                assert_eq!(key, "CID_1");
                assert_eq!(file, f.path);
                assert_eq!(version, future);
            }
            other => panic!("expected UnknownVersion, got {other:?}"),
        }
        assert!(message.contains("CID_1"), "{message}");
        assert!(message.contains(SUBSCRIPTION_GROUPS_TREE), "{message}");
    }
}

/// A topic record as version 1 wrote it: the fields before `message_type`, in their order.
#[derive(serde::Serialize)]
struct TopicConfigV1<'a> {
    name: &'a str,
    read_queue_nums: u32,
    write_queue_nums: u32,
    perm: u32,
}

/// A group record as version 1 wrote it: the fields before `consume_message_orderly`.
#[derive(serde::Serialize)]
struct SubscriptionGroupConfigV1<'a> {
    name: &'a str,
    retry_max_times: u32,
    retry_queue_nums: u32,
    consume_broadcast_enable: bool,
    consume_from_min_enable: bool,
}

/// A group record as version 2 wrote it: the fields before `attributes`.
#[derive(serde::Serialize)]
struct SubscriptionGroupConfigV2<'a> {
    name: &'a str,
    retry_max_times: u32,
    retry_queue_nums: u32,
    consume_broadcast_enable: bool,
    consume_from_min_enable: bool,
    consume_message_orderly: bool,
}

/// A topic record as version 2 wrote it: the fields before `attributes`.
#[derive(serde::Serialize)]
struct TopicConfigV2<'a> {
    name: &'a str,
    read_queue_nums: u32,
    write_queue_nums: u32,
    perm: u32,
    message_type: Option<TopicMessageType>,
}

#[test]
fn a_version_2_topic_is_upgraded_on_read_and_rewritten_with_its_attributes() {
    let f = fixture();
    let topics = f.db.open_tree(TOPICS_TREE).unwrap();
    let v2 = TopicConfigV2 {
        name: "Chats",
        read_queue_nums: 8,
        write_queue_nums: 8,
        perm: 6,
        message_type: Some(TopicMessageType::Lite),
    };
    topics.insert("Chats", record::encode(2, &v2)).unwrap();
    let topic = TopicConfig {
        message_type: Some(TopicMessageType::Lite),
        ..TopicConfig::new("Chats", 8)
    };
    assert_eq!(f.store.get_topic("Chats").unwrap(), Some(topic.clone()));
    let mut with_attributes = topic;
    with_attributes
        .attributes
        .insert("lite.topic.expiration".to_owned(), "30".to_owned());
    f.store.put_topic(&with_attributes).unwrap();
    assert_eq!(
        topics.get("Chats").unwrap().unwrap()[0],
        TOPIC_RECORD_VERSION
    );
    assert_eq!(f.store.get_topic("Chats").unwrap(), Some(with_attributes));
}

#[test]
fn a_version_2_group_is_upgraded_on_read_and_rewritten_with_its_attributes() {
    let f = fixture();
    let groups = f.db.open_tree(SUBSCRIPTION_GROUPS_TREE).unwrap();
    let v2_group = SubscriptionGroupConfigV2 {
        name: "Orderly",
        retry_max_times: 3,
        retry_queue_nums: 1,
        consume_broadcast_enable: true,
        consume_from_min_enable: false,
        consume_message_orderly: true,
    };
    groups
        .insert("Orderly", record::encode(2, &v2_group))
        .unwrap();
    let group = SubscriptionGroupConfig {
        retry_max_times: 3,
        consume_from_min_enable: false,
        consume_message_orderly: true,
        ..SubscriptionGroupConfig::new("Orderly")
    };
    assert!(group.attributes.is_empty());
    assert_eq!(
        f.store.get_subscription_group("Orderly").unwrap(),
        Some(group.clone())
    );
    let mut with_attributes = group;
    with_attributes
        .attributes
        .insert("priority.factor".to_owned(), "30".to_owned());
    f.store.put_subscription_group(&with_attributes).unwrap();
    assert_eq!(
        groups.get("Orderly").unwrap().unwrap()[0],
        SUBSCRIPTION_GROUP_RECORD_VERSION
    );
    assert_eq!(
        f.store.get_subscription_group("Orderly").unwrap(),
        Some(with_attributes)
    );
}

#[test]
fn version_1_records_are_upgraded_on_read_and_rewritten_in_the_current_version() {
    assert_eq!(
        (TOPIC_RECORD_VERSION, SUBSCRIPTION_GROUP_RECORD_VERSION),
        (3, 3)
    );
    let f = fixture();
    let topics = f.db.open_tree(TOPICS_TREE).unwrap();
    let groups = f.db.open_tree(SUBSCRIPTION_GROUPS_TREE).unwrap();
    let v1_topic = TopicConfigV1 {
        name: "Old",
        read_queue_nums: 3,
        write_queue_nums: 2,
        perm: PERM_READ,
    };
    topics.insert("Old", record::encode(1, &v1_topic)).unwrap();
    let v1_group = SubscriptionGroupConfigV1 {
        name: "OldGroup",
        retry_max_times: 5,
        retry_queue_nums: 0,
        consume_broadcast_enable: false,
        consume_from_min_enable: true,
    };
    groups
        .insert("OldGroup", record::encode(1, &v1_group))
        .unwrap();

    let topic = TopicConfig {
        read_queue_nums: 3,
        write_queue_nums: 2,
        perm: PERM_READ,
        ..TopicConfig::new("Old", 0)
    };
    assert_eq!(topic.message_type, None);
    assert_eq!(f.store.get_topic("Old").unwrap(), Some(topic.clone()));
    assert_eq!(f.store.list_topics().unwrap(), vec![topic.clone()]);
    let group = SubscriptionGroupConfig {
        retry_max_times: 5,
        retry_queue_nums: 0,
        consume_broadcast_enable: false,
        ..SubscriptionGroupConfig::new("OldGroup")
    };
    assert!(!group.consume_message_orderly);
    assert_eq!(
        f.store.get_subscription_group("OldGroup").unwrap(),
        Some(group.clone())
    );
    assert_eq!(f.store.list_subscription_groups().unwrap(), vec![group]);

    // Storing the upgraded config writes the current version, with the new field.
    let fifo = TopicConfig {
        message_type: Some(TopicMessageType::Fifo),
        ..topic
    };
    f.store.put_topic(&fifo).unwrap();
    assert_eq!(topics.get("Old").unwrap().unwrap()[0], TOPIC_RECORD_VERSION);
    assert_eq!(f.store.get_topic("Old").unwrap(), Some(fifo));
}

#[test]
fn a_corrupt_version_1_record_is_still_an_error() {
    let f = fixture();
    let tree = f.db.open_tree(TOPICS_TREE).unwrap();
    let mut raw = record::encode(
        1,
        &TopicConfigV1 {
            name: "Old",
            read_queue_nums: 1,
            write_queue_nums: 1,
            perm: 6,
        },
    );
    let last = raw.len() - 1;
    raw[last] ^= 0x01;
    tree.insert("Old", raw).unwrap();
    assert_corrupt(f.store.get_topic("Old"), TOPICS_TREE, "Old", &f.path);
}

#[test]
fn every_message_type_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("meta");
    let topics: Vec<TopicConfig> = TopicMessageType::ALL
        .into_iter()
        .map(Some)
        .chain([None])
        .enumerate()
        .map(|(i, message_type)| TopicConfig {
            message_type,
            ..TopicConfig::new(format!("T{i}"), 1)
        })
        .collect();
    {
        let db = open_db(&path).unwrap();
        let store = MetadataStore::open(&db, path.clone()).unwrap();
        for t in &topics {
            store.put_topic(t).unwrap();
        }
        store.flush().unwrap();
    }
    let db = open_db(&path).unwrap();
    let store = MetadataStore::open(&db, path.clone()).unwrap();
    assert_eq!(store.list_topics().unwrap(), topics);
}

#[test]
fn non_utf8_key_is_malformed() {
    let f = fixture();
    let tree = f.db.open_tree(TOPICS_TREE).unwrap();
    tree.insert(&b"\xff\xfe"[..], &b"x"[..]).unwrap();
    assert!(matches!(
        f.store.list_topics(),
        Err(MetadataError::MalformedKey {
            tree: TOPICS_TREE,
            ..
        })
    ));
}

#[test]
fn open_db_error_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let err = open_db(file.join("meta")).expect_err("a file is in the way");
    assert_eq!(err.path, file.join("meta"));
    assert!(err.to_string().contains("not-a-dir"), "{err}");
}
