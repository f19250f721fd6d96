//! Deleting whole queues (an expired lite topic's): the queue's entries and files go, the next
//! append to it starts again at offset 0, other queues keep theirs, and a power cut at any file
//! operation of the deletion leaves the queue either whole or gone (never partly there), and a
//! deleted queue never comes back, whatever recovery re-indexes.

use skiff_storage::disk::sim::SimDisk;
use skiff_storage::store::MessageStore;
use skiff_storage::testsuite::{message, queue_bodies, sim_store_config};

const LITE: &str = "%LMQ%$Chats$room-1";
const KEEP: &str = "%LMQ%$Chats$room-2";

fn fill(store: &mut MessageStore) {
    for i in 0..5 {
        store
            .append_batch(&[
                message(LITE, 0, format!("old-{i}")),
                message(KEEP, 0, format!("keep-{i}")),
            ])
            .unwrap()
            .unwrap();
    }
}

#[test]
fn a_deleted_queue_starts_again_at_zero_and_the_others_keep_theirs() {
    let disk = SimDisk::new();
    let mut store = MessageStore::open(sim_store_config(&disk)).unwrap();
    fill(&mut store);
    assert_eq!(
        store
            .delete_queues(&[(LITE.into(), 0), ("Never".into(), 3)])
            .unwrap(),
        1
    );
    assert_eq!(store.reader().max_offset(LITE, 0), 0);
    assert!(queue_bodies(&store, LITE).is_empty());
    assert_eq!(queue_bodies(&store, KEEP).len(), 5);
    assert!(!store
        .reader()
        .queues()
        .unwrap()
        .contains(&(LITE.to_string(), 0)));
    let again = store
        .append_batch(&[message(LITE, 0, "new-0")])
        .unwrap()
        .unwrap();
    assert_eq!(again[0].queue_offset, 0);
    // A crash right after: recovery re-indexes from the checkpoint the deletion wrote, so the
    // old records are not indexed again, and the new one is.
    disk.kill();
    drop(store);
    disk.power_cut(&mut |n| n - 1);
    let store = MessageStore::open(sim_store_config(&disk)).unwrap();
    assert_eq!(queue_bodies(&store, LITE), ["new-0"]);
    assert_eq!(queue_bodies(&store, KEEP).len(), 5);
}

#[test]
fn a_power_cut_at_any_step_of_a_deletion_leaves_the_queue_whole_or_gone() {
    // Writeback before the cut: none of the unsynced writes, or all of them.
    let writebacks: [fn(u64) -> u64; 2] = [|_| 0, |n| n - 1];
    for writeback in writebacks {
        for cut_after in 0..40 {
            let disk = SimDisk::new();
            let mut store = MessageStore::open(sim_store_config(&disk)).unwrap();
            fill(&mut store);
            disk.cut_power_after(cut_after);
            let finished = store.delete_queues(&[(LITE.into(), 0)]).is_ok() && !disk.is_dead();
            disk.kill();
            drop(store);
            disk.power_cut(&mut |n| writeback(n));
            let store = MessageStore::open(sim_store_config(&disk)).unwrap();
            let lite = queue_bodies(&store, LITE);
            let whole: Vec<String> = (0..5).map(|i| format!("old-{i}")).collect();
            assert!(
                lite.is_empty() || lite == whole,
                "cut after {cut_after}: the queue holds {lite:?}"
            );
            if finished {
                assert!(
                    lite.is_empty(),
                    "cut after {cut_after}: a finished deletion came back"
                );
            }
            // Async flush: the other queue's entries are durable once the deletion's
            // checkpoint is; before it, they may be lost with the unflushed log.
            let kept = queue_bodies(&store, KEEP).len();
            assert!(
                kept == 5 || (!finished && kept == 0),
                "cut after {cut_after}: another queue holds {kept} of 5"
            );
        }
    }
}
