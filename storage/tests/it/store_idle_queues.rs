//! Idle queues leave memory: a queue neither read nor appended to between two looks, with all
//! its entries fsynced, is let go of, and its next read or append opens it again from its files
//! with every entry, appends going on at the next offset, also through a power cut after it.

use skiff_storage::disk::sim::SimDisk;
use skiff_storage::store::MessageStore;
use skiff_storage::testsuite::{message, queue_bodies, sim_store_config};

const IDLE: &str = "%LMQ%$Chats$idle";
const BUSY: &str = "%LMQ%$Chats$busy";

fn append(store: &mut MessageStore, topic: &str, body: &str) -> u64 {
    store
        .append_batch(&[message(topic, 0, body.to_owned())])
        .unwrap()
        .unwrap()[0]
        .queue_offset
}

#[test]
fn an_idle_queue_leaves_memory_and_comes_back_whole_on_its_next_use() {
    let disk = SimDisk::new();
    let mut store = MessageStore::open(sim_store_config(&disk)).unwrap();
    for i in 0..3 {
        append(&mut store, IDLE, &format!("idle-{i}"));
        append(&mut store, BUSY, &format!("busy-{i}"));
    }
    assert_eq!(store.release_idle_queues(), 0, "both were just written");
    assert_eq!(
        store.release_idle_queues(),
        0,
        "not fsynced yet: the entries are only in memory"
    );
    store.flush().unwrap();
    append(&mut store, BUSY, "busy-3");
    store.flush().unwrap();
    assert_eq!(store.release_idle_queues(), 1, "only the unused queue goes");
    assert_eq!(
        store.release_idle_queues(),
        1,
        "then the other, unused since"
    );
    assert_eq!(store.release_idle_queues(), 0);

    // A read opens it again with everything; so does an append, at the next offset.
    assert_eq!(store.reader().max_offset(IDLE, 0), 3);
    assert_eq!(queue_bodies(&store, IDLE), ["idle-0", "idle-1", "idle-2"]);
    assert_eq!(append(&mut store, IDLE, "idle-3"), 3);
    assert_eq!(append(&mut store, BUSY, "busy-4"), 4);
    assert_eq!(queue_bodies(&store, BUSY).len(), 5);
    let reader = store.reader();
    store.flush().unwrap();
    store.release_idle_queues();
    assert_eq!(store.release_idle_queues(), 2);
    // A reader made before the release reads on.
    assert_eq!(reader.max_offset(IDLE, 0), 4);

    // A power cut after a release, a reopen and more appends: recovery keeps all of it.
    append(&mut store, IDLE, "idle-4");
    store.flush().unwrap();
    append(&mut store, IDLE, "idle-5");
    disk.kill();
    drop(store);
    disk.power_cut(&mut |n| n - 1);
    let store = MessageStore::open(sim_store_config(&disk)).unwrap();
    let idle = queue_bodies(&store, IDLE);
    assert!(
        idle.len() >= 5 && idle[..5] == ["idle-0", "idle-1", "idle-2", "idle-3", "idle-4"],
        "{idle:?}"
    );
    assert_eq!(queue_bodies(&store, BUSY).len(), 5);
}
