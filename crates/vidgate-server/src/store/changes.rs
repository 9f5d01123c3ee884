//! Changes of generations, heard in this process: who waits for which
//! generation, and waking them when it changes.
//!
//! A store announces every committed change of a generation's status (the
//! claim, the finish, a cancel, a rescue). SQLite, which one node serves,
//! hands the announcement straight to this node's `GenerationChanges`;
//! PostgreSQL sends it with `NOTIFY` to every node, whose listening task
//! hands it to its own. A watcher is woken, then reads the generation
//! afresh: an announcement carries no state, so one that is missed (a
//! listener reconnecting) or comes twice costs a read, never a wrong or lost
//! final state. Whether the announcements can be trusted now is said by
//! `announcements_heard`: always on SQLite, while its listener is
//! connected on PostgreSQL. Readers read again every second while it says
//! no.
//!
//! Watching holds no database connection: a watcher is an entry in a map
//! and a `watch` channel, a few hundred bytes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

/// This process's watchers, by generation id, and whether every committed
/// change is heard now.
pub struct GenerationChanges {
    watched: Mutex<HashMap<Box<str>, watch::Sender<()>>>,
    heard: watch::Sender<bool>,
}

impl GenerationChanges {
    /// Watchers whose announcements are heard from the start (`true`: an
    /// in-process signal) or only once a listener says so (`false`).
    pub fn new(heard_from_the_start: bool) -> GenerationChanges {
        GenerationChanges {
            watched: Mutex::default(),
            heard: watch::Sender::new(heard_from_the_start),
        }
    }

    /// Says whether every committed change is announced to this process
    /// from now on (a listener connected) or may be missed (one lost).
    pub fn set_heard(&self, heard: bool) {
        self.heard.send_if_modified(|before| {
            let changed = *before != heard;
            *before = heard;
            changed
        });
    }

    /// Whether every committed change is announced to this process now,
    /// and each change of that.
    pub fn heard(&self) -> watch::Receiver<bool> {
        self.heard.subscribe()
    }

    /// Wakes every watcher of `generation_id`; none is not an error.
    pub fn announce(&self, generation_id: &str) {
        let watched = self
            .watched
            .lock()
            .expect("the watcher map is never poisoned");
        if let Some(sender) = watched.get(generation_id) {
            sender.send_replace(());
        }
    }

    /// Wakes every watcher of every generation: announcements may have been
    /// missed (the listener lost its connection), so each reads again.
    pub fn announce_all(&self) {
        let watched = self
            .watched
            .lock()
            .expect("the watcher map is never poisoned");
        for sender in watched.values() {
            sender.send_replace(());
        }
    }

    /// Starts watching `generation_id`: every announcement from now on
    /// wakes the watch's next `changed`.
    pub fn watch(self: &Arc<Self>, generation_id: &str) -> GenerationWatch {
        let mut watched = self
            .watched
            .lock()
            .expect("the watcher map is never poisoned");
        let receiver = match watched.get(generation_id) {
            Some(sender) => sender.subscribe(),
            None => {
                let (sender, receiver) = watch::channel(());
                watched.insert(generation_id.into(), sender);
                receiver
            }
        };
        GenerationWatch {
            changes: self.clone(),
            generation_id: generation_id.into(),
            receiver: Some(receiver),
        }
    }

    /// How many generations have watchers now.
    pub fn watched_generations(&self) -> usize {
        self.watched
            .lock()
            .expect("the watcher map is never poisoned")
            .len()
    }
}

/// One watcher of one generation; dropping it stops watching.
pub struct GenerationWatch {
    changes: Arc<GenerationChanges>,
    generation_id: Box<str>,
    /// `None` only while being dropped.
    receiver: Option<watch::Receiver<()>>,
}

impl GenerationWatch {
    /// Returns once the generation was announced as changed since the watch
    /// began or since the last `changed` returned. Cancel-safe.
    pub async fn changed(&mut self) {
        let receiver = self
            .receiver
            .as_mut()
            .expect("the receiver is taken only on drop");
        // The sender lives in the map as long as any watch of the generation
        // does, this one included, so the channel cannot close under us.
        if receiver.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for GenerationWatch {
    fn drop(&mut self) {
        let mut watched = self
            .changes
            .watched
            .lock()
            .expect("the watcher map is never poisoned");
        drop(self.receiver.take());
        // The map's lock is held, so no watch of the generation can start
        // between this check and the removal.
        if watched
            .get(&self.generation_id)
            .is_some_and(|sender| sender.receiver_count() == 0)
        {
            watched.remove(&self.generation_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    async fn woken(watch: &mut GenerationWatch) -> bool {
        tokio::time::timeout(Duration::from_millis(50), watch.changed())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn an_announcement_wakes_the_watchers_of_its_generation_only() {
        let changes = Arc::new(GenerationChanges::new(true));
        let mut first = changes.watch("gen_a");
        let mut second = changes.watch("gen_a");
        let mut other = changes.watch("gen_b");
        changes.announce("gen_a");
        assert!(woken(&mut first).await);
        assert!(woken(&mut second).await);
        assert!(!woken(&mut other).await);
        // Woken once per announcement, not again without one.
        assert!(!woken(&mut first).await);
        changes.announce_all();
        assert!(woken(&mut first).await);
        assert!(woken(&mut other).await);
    }

    #[tokio::test]
    async fn an_announcement_before_the_wait_is_not_missed() {
        let changes = Arc::new(GenerationChanges::new(true));
        let mut watch = changes.watch("gen_a");
        // Between the watch's start (its caller then reads the generation)
        // and its wait: the wait must still return.
        changes.announce("gen_a");
        assert!(woken(&mut watch).await);
    }

    #[tokio::test]
    async fn whether_announcements_are_heard_is_told_on_each_change_only() {
        let changes = GenerationChanges::new(false);
        let mut heard = changes.heard();
        assert!(!*heard.borrow_and_update());
        changes.set_heard(true);
        assert!(heard.has_changed().unwrap());
        assert!(*heard.borrow_and_update());
        // Saying it again is no news.
        changes.set_heard(true);
        assert!(!heard.has_changed().unwrap());
        changes.set_heard(false);
        assert!(!*heard.borrow_and_update());
    }

    #[tokio::test]
    async fn the_last_watch_dropped_forgets_the_generation() {
        let changes = Arc::new(GenerationChanges::new(true));
        let first = changes.watch("gen_a");
        let second = changes.watch("gen_a");
        assert_eq!(changes.watched_generations(), 1);
        drop(first);
        assert_eq!(changes.watched_generations(), 1);
        drop(second);
        assert_eq!(changes.watched_generations(), 0);
        // Announcing a generation nobody watches is a no-op.
        changes.announce("gen_a");
        assert_eq!(changes.watched_generations(), 0);
    }
}
