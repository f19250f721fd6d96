//! The consume queues the store holds in memory, and [`Shared`], the state the writer, the
//! readers, the waiters and the background threads share.
//!
//! A queue is opened on first use rather than at open (a store may hold hundreds of thousands),
//! so the queue map is the heart of the shared state: most of `Shared`'s own methods find,
//! open or list queues, and the directories new queues create wait here for the next thorough
//! checkpoint to fsync them. The commit-state, checkpoint and group-commit fields are
//! `durability`'s to use.

use super::deleted::DeletedQueues;
use super::settle::settle_queue;
use super::{is_valid_topic, lock, Shared, StoreConfig, StoreError};
use crate::commit_log::CommitLog;
use crate::consume_queue::{queue_on_disk, ConsumeQueue};
use crate::error::io_err;
use crate::file_cache::FileCache;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Every consume queue in memory, by topic then queue id.
pub(super) type QueueMap = HashMap<String, TopicQueues>;

/// Drops `topic`/`queue_id` from `map`, and the topic's entry once it has no queue left.
pub(super) fn remove_from(map: &mut QueueMap, topic: &str, queue_id: u32) {
    if let Some(queues) = map.get_mut(topic) {
        queues.remove(queue_id);
        if queues.len() == 0 {
            map.remove(topic);
        }
    }
}

/// One topic's queues in memory, sorted by id. A topic has a few; a vector of them costs a
/// fraction of a hash table each, which with tens of thousands of topics (and two maps: the
/// writer's and the readers') was megabytes.
#[derive(Clone, Default)]
pub(super) struct TopicQueues(Vec<Arc<ConsumeQueue>>);

impl TopicQueues {
    pub(super) fn get(&self, queue_id: &u32) -> Option<&Arc<ConsumeQueue>> {
        let at = self
            .0
            .binary_search_by_key(queue_id, |q| q.queue_id())
            .ok()?;
        self.0.get(at)
    }

    pub(super) fn insert(&mut self, queue_id: u32, queue: Arc<ConsumeQueue>) {
        match self.0.binary_search_by_key(&queue_id, |q| q.queue_id()) {
            Ok(at) => self.0[at] = queue,
            Err(at) => self.0.insert(at, queue),
        }
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Arc<ConsumeQueue>> {
        self.0.iter()
    }

    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    pub(super) fn retain(&mut self, keep: impl FnMut(&Arc<ConsumeQueue>) -> bool) {
        self.0.retain(keep);
    }

    pub(super) fn remove(&mut self, queue_id: u32) {
        if let Ok(at) = self.0.binary_search_by_key(&queue_id, |q| q.queue_id()) {
            self.0.remove(at);
        }
    }
}

/// Opens consume queues from disk on first use: the open itself (creating a new queue's
/// directory and file), and settling a queue that already existed against the commit log as
/// recovery left it (see [`settle_queue`]). Recovery and the running store share it.
pub(super) struct QueueOpener<'a> {
    pub(super) config: &'a StoreConfig,
    pub(super) log: &'a CommitLog,
    pub(super) files: &'a Arc<FileCache>,
    pub(super) new_dirs: &'a Mutex<NewDirs>,
    /// Deleted queues' ends, which settling a queue's re-index respects.
    pub(super) deleted: &'a Mutex<DeletedQueues>,
    pub(super) recovered_from: u64,
}

impl QueueOpener<'_> {
    /// The queue `topic`/`queue_id` as on disk, settled; `None` when it is not on disk and
    /// `create` is false.
    pub(super) fn open(
        &self,
        topic: &str,
        queue_id: u32,
        create: bool,
    ) -> Result<Option<Arc<ConsumeQueue>>, StoreError> {
        let disk = &self.config.disk;
        let root = queue_dir(&self.config.dir);
        let tdir = root.join(topic);
        let path = queue_path(&tdir, queue_id);
        if !create && !queue_on_disk(disk, &path).map_err(|e| io_err(&path, e))? {
            return Ok(None);
        }
        let new_topic = disk.kind(&tdir).map_err(|e| io_err(&tdir, e))?.is_none();
        if new_topic {
            disk.create_dir_all(&tdir).map_err(|e| io_err(&tdir, e))?;
        }
        let file_entries = self.config.queue_file_entries;
        let (q, repairs) = if new_topic {
            ConsumeQueue::create(self.files, topic, queue_id, &path, file_entries)
        } else {
            ConsumeQueue::open(self.files, topic, queue_id, &path, file_entries)
        }
        .map_err(|e| io_err(&path, e))?;
        if repairs.cut_bytes > 0 {
            tracing::warn!(dir = %path.display(), bytes = repairs.cut_bytes, "cut a partial consume-queue entry");
        }
        if repairs.dropped_files > 0 {
            tracing::warn!(dir = %path.display(), files = repairs.dropped_files, "deleted consume-queue files past a gap");
        }
        if !repairs.created {
            let damaged = repairs.cut_bytes > 0 || repairs.dropped_files > 0 || repairs.refilled;
            let deleted = lock(self.deleted);
            settle_queue(
                self.config,
                self.log,
                &q,
                self.recovered_from,
                damaged,
                &deleted,
            )?;
        }
        if new_topic || repairs.created {
            // Made durable by the next thorough checkpoint, which is what vouches for the
            // queue's entries: a crash before it re-creates the queue from the commit log.
            lock(self.new_dirs).add(new_topic, repairs.created.then_some((topic, queue_id)));
        }
        Ok(Some(Arc::new(q)))
    }
}

/// Directories created since the last thorough checkpoint, which fsyncs them before it counts
/// on what they hold. Kept as names, not paths: a burst of new queues (tens of thousands at a
/// start) would otherwise hold two paths apiece until then.
#[derive(Debug, Default)]
pub(super) struct NewDirs {
    /// The consume-queue root gained a topic directory.
    root: bool,
    /// Topic directories that gained queue directories, and those queues.
    queues: BTreeMap<String, Vec<u32>>,
}

impl NewDirs {
    pub(super) fn is_empty(&self) -> bool {
        !self.root && self.queues.is_empty()
    }

    /// Records a topic directory made in the root, and a queue directory made in its topic's.
    fn add(&mut self, new_topic: bool, new_queue: Option<(&str, u32)>) {
        self.root |= new_topic;
        if let Some((topic, queue_id)) = new_queue {
            match self.queues.get_mut(topic) {
                Some(ids) => ids.push(queue_id),
                None => {
                    self.queues.insert(topic.to_string(), vec![queue_id]);
                }
            }
        }
    }

    fn merge(&mut self, other: NewDirs) {
        self.root |= other.root;
        for (topic, ids) in other.queues {
            self.queues.entry(topic).or_default().extend(ids);
        }
    }
}

impl Shared {
    /// Closes every commit-log and consume-queue file. Readers outlive the store (they are
    /// cloned into every actor and handle), so the files are let go here, at close, rather than
    /// when the last reader drops; a read after this finds no segment and fails.
    pub(super) fn release_files(&self) {
        self.log.release_files();
        self.queues
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// The queue `topic`/`queue_id`, opened from disk if needed; `None` when it does not
    /// exist (or cannot be opened, which is logged: readers answer as for an empty queue).
    pub(super) fn queue(&self, topic: &str, queue_id: u32) -> Option<Arc<ConsumeQueue>> {
        if let Some(q) = self.queue_in_memory(topic, queue_id) {
            q.mark_used();
            return Some(q);
        }
        match self.load_queue(topic, queue_id, false) {
            Ok(q) => q,
            Err(e) => {
                tracing::warn!(
                    topic,
                    queue_id,
                    error = &e as &dyn std::error::Error,
                    "consume queue could not be opened"
                );
                None
            }
        }
    }

    /// The queue if it is in memory, without counting this as a use.
    pub(super) fn queue_in_memory(&self, topic: &str, queue_id: u32) -> Option<Arc<ConsumeQueue>> {
        self.queues
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(topic)
            .and_then(|q| q.get(&queue_id))
            .cloned()
    }

    /// The queue from memory, or opened from disk (created there when `create`).
    pub(super) fn load_queue(
        &self,
        topic: &str,
        queue_id: u32,
        create: bool,
    ) -> Result<Option<Arc<ConsumeQueue>>, StoreError> {
        if !is_valid_topic(topic) {
            return Ok(None);
        }
        // Held across the open: two opens of one queue would keep two tails.
        let mut queues = self.queues.write().unwrap_or_else(|e| e.into_inner());
        if let Some(q) = queues.get(topic).and_then(|m| m.get(&queue_id)) {
            return Ok(Some(q.clone()));
        }
        // A queue that left memory idle got entries from this run's writer, past where
        // recovery started: nothing of it is cut as recovery's leftovers.
        let released = lock(&self.released).take(topic, queue_id);
        let opener = QueueOpener {
            config: &self.config,
            log: &self.log,
            files: &self.files,
            new_dirs: &self.new_dirs,
            deleted: &self.deleted,
            recovered_from: if released {
                u64::MAX
            } else {
                self.recovered_from
            },
        };
        let q = opener.open(topic, queue_id, create)?;
        if let Some(q) = &q {
            queues
                .entry(topic.to_string())
                .or_default()
                .insert(queue_id, q.clone());
        }
        Ok(q)
    }

    /// Every queue in memory.
    pub(super) fn open_queues(&self) -> Vec<Arc<ConsumeQueue>> {
        self.open_queues_where(|_| true)
    }

    /// The queues in memory that `keep` selects, chosen under the lock so that a checkpoint
    /// looking for the few written since the last one clones no handle of the others.
    pub(super) fn open_queues_where(
        &self,
        keep: impl Fn(&ConsumeQueue) -> bool,
    ) -> Vec<Arc<ConsumeQueue>> {
        self.queues
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .flat_map(|m| m.values())
            .filter(|q| keep(q))
            .cloned()
            .collect()
    }

    /// Every (topic, queue id) on disk or in memory, sorted; lists directories, opens nothing.
    pub(super) fn known_queues(&self) -> Result<Vec<(String, u32)>, StoreError> {
        let disk = &self.config.disk;
        let root = queue_dir(&self.config.dir);
        let mut out: BTreeSet<(String, u32)> = self
            .queues
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .flat_map(|(t, m)| m.values().map(move |q| (t.clone(), q.queue_id())))
            .collect();
        for tentry in disk.read_dir(&root).map_err(|e| io_err(&root, e))? {
            let Some(topic) = tentry.name.filter(|t| tentry.is_dir && is_valid_topic(t)) else {
                continue;
            };
            let tpath = root.join(&topic);
            for qentry in disk.read_dir(&tpath).map_err(|e| io_err(&tpath, e))? {
                let id = qentry.name.as_deref().and_then(|n| {
                    let n = n.strip_suffix(".migrating").unwrap_or(n);
                    n.parse::<u32>().ok().filter(|id| id.to_string() == n)
                });
                if let Some(id) = id {
                    out.insert((topic.clone(), id));
                }
            }
        }
        Ok(out.into_iter().collect())
    }

    /// The topics whose name starts with `prefix` and that have queue `queue_id`, on disk or
    /// in memory, sorted. Lists only the queue root and looks `queue_id` up in each match: for
    /// the many one-queue topics a prefix selects (a parent's lite topics) no topic directory
    /// is listed, and a topic whose queue was deleted (a crash may leave its directory) is not
    /// answered.
    pub(super) fn topics_with_queue(
        &self,
        prefix: &str,
        queue_id: u32,
    ) -> Result<Vec<String>, StoreError> {
        let disk = &self.config.disk;
        let root = queue_dir(&self.config.dir);
        let mut out: BTreeSet<String> = self
            .queues
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(t, m)| t.starts_with(prefix) && m.get(&queue_id).is_some())
            .map(|(t, _)| t.clone())
            .collect();
        for entry in disk.read_dir(&root).map_err(|e| io_err(&root, e))? {
            let Some(topic) = entry.name.filter(|t| {
                entry.is_dir && t.starts_with(prefix) && is_valid_topic(t) && !out.contains(t)
            }) else {
                continue;
            };
            let path = queue_path(&root.join(&topic), queue_id);
            if queue_on_disk(disk, &path).map_err(|e| io_err(&path, e))? {
                out.insert(topic);
            }
        }
        Ok(out.into_iter().collect())
    }

    /// fsyncs the directories created since the last thorough checkpoint.
    pub(super) fn sync_new_dirs(&self) -> Result<(), StoreError> {
        let dirs = std::mem::take(&mut *lock(&self.new_dirs));
        if let Err(e) = self.sync_dirs(&dirs) {
            // Put them back, so the next checkpoint tries again (a second fsync of a directory
            // already done costs nothing but the call).
            lock(&self.new_dirs).merge(dirs);
            return Err(e);
        }
        Ok(())
    }

    fn sync_dirs(&self, dirs: &NewDirs) -> Result<(), StoreError> {
        let disk = &self.config.disk;
        let root = queue_dir(&self.config.dir);
        if dirs.root {
            disk.sync_dir(&root)?;
        }
        for (topic, ids) in &dirs.queues {
            let topic_dir = root.join(topic);
            disk.sync_dir(&topic_dir)?;
            for id in ids {
                disk.sync_dir(&queue_path(&topic_dir, *id))?;
            }
        }
        Ok(())
    }
}

/// The root of the consume-queue files under the store directory.
pub(super) fn queue_dir(dir: &Path) -> PathBuf {
    dir.join("consumequeue")
}

/// A queue's directory: its id under its topic's directory (`<queue root>/<topic>/<queue id>`).
pub(super) fn queue_path(topic_dir: &Path, queue_id: u32) -> PathBuf {
    topic_dir.join(queue_id.to_string())
}
