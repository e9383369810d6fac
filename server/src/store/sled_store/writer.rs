//! The writer thread: group commit, the durability point, and taking a failed
//! group back (in memory, or on disk after reopening sled), plus the watchdog
//! that wakes a stuck flush. See the parent module's docs for the why.

use super::*;

/// How to take one applied commit back: delete every key it wrote, then put
/// back every row it read from the store before (with that row's index keys
/// and unique key). Taken back in reverse order, the commits of a group
/// restore exactly the state before the group, whichever of them reached the
/// disk: each key ends as the first commit that touched it found it.
pub(super) struct Undo {
    pub(super) tenant: Uuid,
    pub(super) written: Vec<IVec>,
    /// Rows as stored before the commit, for every record it read.
    pub(super) originals: Vec<IVec>,
    /// Scopes the commit started purging (hidden while it is applied, shown again if undone).
    pub(super) purges_started: Vec<purge::Scope>,
    /// The scope whose purge the commit finished (shown no more once it is durable).
    pub(super) purge_finished: Option<purge::Scope>,
}

/// One batch restoring the state before `undos` (in the order they were applied).
pub(super) fn undo_batch(undos: &[Undo]) -> StoreResult<sled::Batch> {
    let mut batch = sled::Batch::default();
    for u in undos.iter().rev() {
        for k in &u.written {
            batch.remove(k.clone());
        }
        for raw in &u.originals {
            let r = decode(raw)?;
            for k in index_keys(&r, u.tenant) {
                batch.insert(k, IVec::default());
            }
            if let Some(name) = &r.unique {
                batch.insert(unique_key(r.kind, u.tenant, r.scope, name), r.id.as_bytes().to_vec());
            }
            batch.insert(row_key(r.kind, u.tenant, r.id), raw.clone());
        }
    }
    Ok(batch)
}

/// A failed group on its way back: the batch that undoes it, and whether the
/// sled handle must be reopened before it can be applied.
pub(super) struct Recovery {
    pub(super) undo: Option<sled::Batch>,
    pub(super) reopen: bool,
    /// The first attempt is at once; later ones once the disk takes a probe write.
    pub(super) attempts: u32,
    pub(super) since: Instant,
}

pub(super) struct Writer {
    pub(super) shared: Arc<Shared>,
    /// `None` only while reopening.
    pub(super) db: Option<sled::Db>,
    pub(super) rx: mpsc::Receiver<Job>,
    pub(super) durability: Durability,
    pub(super) sync_file: Option<File>,
    /// Set while the store cannot write.
    pub(super) recovery: Option<Recovery>,
    /// The commit sequence kept in sled beside the records ([`super::manifest`]).
    pub(super) sequence: Arc<Sequence>,
    /// Where each durable group is recorded before it is answered.
    pub(super) point: Arc<PointFile>,
}

impl Writer {
    pub(super) fn open_sync_file(&self) -> std::io::Result<Option<File>> {
        match self.durability {
            Durability::Fsync => File::open(self.shared.dir.join("db")).map(Some),
            Durability::Flush => Ok(None),
        }
    }

    pub(super) fn run(mut self) {
        let mut next_probe = Instant::now();
        loop {
            if self.recovery.is_some() {
                // Nothing queues behind a dead disk: answer at once, probe on time.
                match self.rx.recv_timeout(next_probe.saturating_duration_since(Instant::now())) {
                    Ok(job) => self.refuse(job),
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        self.recover();
                        next_probe = Instant::now() + PROBE_EVERY;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                }
                continue;
            }
            let Ok(first) = self.rx.recv() else { break };
            let mut group = vec![first];
            while group.len() < MAX_GROUP {
                match self.rx.try_recv() {
                    Ok(j) => group.push(j),
                    Err(_) => break,
                }
            }
            self.commit_group(group);
            next_probe = Instant::now() + PROBE_EVERY;
        }
        if self.recovery.is_none()
            && let Some(db) = &self.db
        {
            let _ = db.flush();
        }
    }

    pub(super) fn refuse(&self, job: Job) {
        let err = self.shared.health().err().unwrap_or_else(|| {
            StoreError::Unavailable("the store is recovering from a failed write; retry in a second".into())
        });
        let _ = job.reply.send(Err(err));
    }

    pub(super) fn commit_group(&mut self, mut group: Vec<Job>) {
        let stats = &self.shared.stats;
        stats.groups.fetch_add(1, Ordering::Relaxed);
        stats.commits.fetch_add(group.len() as u64, Ordering::Relaxed);
        let db = self.db.as_ref().expect("a healthy writer has a handle");
        let mut results = Vec::with_capacity(group.len());
        let mut undos = Vec::with_capacity(group.len());
        // One statvfs per group; each commit then spends from it.
        let reserve = self.shared.min_free_bytes.load(Ordering::Relaxed);
        let mut free = fs2::available_space(&self.shared.dir).ok().filter(|_| reserve > 0);
        let mut low_space = None;
        // sled failed inside a write: its handle may be wedged, so no flush on it.
        let mut sled_failed = None;
        // The group's writes so far, each commit's checked after the earlier
        // ones', applied as one sled batch: sled writes its log for every
        // batch (see `server/vendor/sled/PATCHED.md`), so one per group, not
        // one per commit.
        let (mut pending, mut pending_bytes) = (Writes::new(), 0);
        for job in &mut group {
            if !job.take() {
                // Its waiter has answered 503 "not saved": it must stay so.
                results
                    .push(Err(StoreError::Unavailable("the write timed out before it was applied".into())));
                continue;
            }
            if let Some(e) = &sled_failed {
                results.push(Err(StoreError::clone(e)));
                continue;
            }
            // Owned: a record is moved into its batch, not copied (records reach megabytes).
            let ops = std::mem::take(&mut job.ops);
            let r = build_writes(&self.shared, db, &pending, job.tenant, ops, job.purge.as_ref()).and_then(
                |(writes, undo, bytes)| {
                    if let Some(f) = free.as_mut() {
                        let needed = bytes.saturating_mul(SPACE_PER_BYTE);
                        if *f < reserve.saturating_add(needed) {
                            let e = self.shared.low_space_error();
                            low_space = Some(e.clone());
                            return Err(e);
                        }
                        *f -= needed;
                    }
                    // Hidden before the parent's deletion shows, so no reader sees orphans.
                    self.shared.purging.add(&undo.purges_started);
                    pending.extend(writes);
                    pending_bytes += bytes;
                    undos.push(undo);
                    Ok(())
                },
            );
            // A storage error from sled (reading or applying) that is not ours: its handle is broken.
            if let Err(e @ (StoreError::Full(_) | StoreError::Unavailable(_))) = &r
                && low_space.is_none()
            {
                sled_failed = Some(e.clone());
            }
            results.push(r);
            // Past the cap (and at the group's end, below) the held writes go to sled.
            if sled_failed.is_none() && pending_bytes > MAX_BATCH_BYTES {
                pending_bytes = 0;
                sled_failed = apply_writes(&self.shared, db, std::mem::take(&mut pending)).err();
            }
        }
        // A failed batch is atomic (none of it applied), yet its commits hear
        // "may or may not have been saved" below, as sled may have written some.
        if sled_failed.is_none() && !pending.is_empty() {
            sled_failed = apply_writes(&self.shared, db, pending).err();
        }
        // One flush for the whole group; nobody hears "done" before it.
        let durable = match &sled_failed {
            Some(e) => Err(e.clone()),
            None => self.make_durable(),
        };
        match durable {
            Ok(()) => {
                // The group is durable.
                self.sequence.group_flushed(db, results.iter().filter(|r| r.is_ok()).count());
                // Before anyone hears of it: the db file's size now bounds every
                // acknowledged write. A pwrite into a block the file already has
                // practically cannot fail; if it did, the point would only lag.
                let _ = self.point.record(self.sequence.durable(), false);
                let finished: Vec<_> = undos.iter().filter_map(|u| u.purge_finished).collect();
                self.shared.purging.remove(&finished);
                if undos.iter().any(|u| !u.purges_started.is_empty()) {
                    let _ = self.shared.purge_wake.send(());
                }
                if let Some(e) = low_space {
                    // Nothing was applied past the reserve: there is nothing to undo.
                    self.shared.set_failure(e);
                    self.recovery =
                        Some(Recovery { undo: None, reopen: false, attempts: 1, since: Instant::now() });
                }
                for (job, r) in group.into_iter().zip(results) {
                    let _ = job.reply.send(r);
                }
            }
            Err(e) => {
                // Taken back before anyone hears of the failure.
                self.fail(e.clone(), &undos, sled_failed.is_some());
                for (job, r) in group.into_iter().zip(results) {
                    let r = match r {
                        // sled failed inside a write: if its handle is wedged, the undo
                        // cannot reach the disk (the process exits, see `recover`), and
                        // what was applied before may be there after the restart.
                        Ok(()) if sled_failed.is_some() => Err(StoreError::Unavailable(
                            "the store's disk failed while saving this write: it may or may not have \
                             been saved; retry it with the same Idempotency-Key once the store is back"
                                .into(),
                        )),
                        Ok(()) | Err(StoreError::Full(_) | StoreError::Unavailable(_)) => Err(e.clone()),
                        other => other,
                    };
                    let _ = job.reply.send(r);
                }
                self.recover();
            }
        }
    }

    /// `flush()` then, when configured, `fdatasync`: the durability point.
    pub(super) fn make_durable(&self) -> StoreResult<()> {
        let db = self.db.as_ref().ok_or_else(|| StoreError::Unavailable("the store has no handle".into()))?;
        self.shared.flushing_since.store(self.shared.now_ms(), Ordering::Release);
        let r = db.flush().map_err(|e| self.shared.sled_write_error(e)).and_then(|_| match &self.sync_file {
            Some(f) => f.sync_data().map_err(|e| self.shared.io_write_error(e)),
            None => Ok(()),
        });
        self.shared.flushing_since.store(0, Ordering::Release);
        #[cfg(test)]
        if self.shared.fail_next_flush.swap(false, Ordering::AcqRel) {
            return Err(StoreError::Unavailable("injected flush failure".into()));
        }
        r
    }

    /// A group failed: refuse writes and take the group back in memory if sled lets us.
    pub(super) fn fail(&mut self, e: StoreError, undos: &[Undo], wedged: bool) {
        eprintln!("store: a write failed, refusing writes until the disk recovers: {e}");
        self.shared.set_failure(e);
        for u in undos {
            self.shared.purging.remove(&u.purges_started);
        }
        let undo = match undo_batch(undos) {
            Ok(b) => Some(b),
            Err(err) => {
                // Only a row that does not decode can get here, and it was decoded once already.
                eprintln!("store: cannot build the undo of a failed group: {err}");
                None
            }
        };
        // Take it back in memory at once, so no reader sees a write answered with an error.
        let undone = match (&undo, &self.db) {
            (Some(b), Some(db)) => db.apply_batch(b.clone()).is_ok(),
            _ => true,
        };
        let reopen = wedged || !undone;
        self.recovery = Some(Recovery { undo, reopen, attempts: 0, since: Instant::now() });
    }

    /// One attempt to make the store writable again (see the module docs).
    pub(super) fn recover(&mut self) {
        let Some(rec) = self.recovery.as_mut() else { return };
        rec.attempts += 1;
        // A quarter more than the reserve, so that writes do not flap around its edge.
        let reserve = self.shared.min_free_bytes.load(Ordering::Relaxed);
        if fs2::available_space(&self.shared.dir).is_ok_and(|f| f < reserve.saturating_add(reserve / 4)) {
            return self.shared.set_failure(self.shared.low_space_error());
        }
        if rec.attempts > 1
            && let Err(e) = probe_disk(&self.shared.dir)
        {
            self.shared.set_failure(self.shared.io_write_error(e));
            return;
        }
        if rec.reopen {
            // sled keeps its first IO error for good: only a new handle writes again,
            // and sled's file lock admits a new one only once every old one is gone.
            self.shared.db.write().expect("db lock").take();
            if let Some(old) = self.db.take() {
                // Dropping may wait on sled's threads forever: never in the writer.
                let closer = std::thread::Builder::new().name("store-close".into()).spawn(move || drop(old));
                // It usually takes milliseconds; readers wait for the new handle meanwhile.
                let deadline = Instant::now() + Duration::from_secs(1);
                while closer.as_ref().is_ok_and(|h| !h.is_finished()) && Instant::now() < deadline {
                    std::thread::park_timeout(Duration::from_millis(5));
                }
            }
            match open_db(&self.shared.dir, self.shared.cache_bytes) {
                Ok(db) => {
                    *self.shared.db.write().expect("db lock") = Some(db.clone());
                    self.db = Some(db);
                    rec.reopen = false;
                    match self.open_sync_file() {
                        Ok(f) => self.sync_file = f,
                        Err(e) => return self.shared.set_failure(self.shared.io_write_error(e)),
                    }
                }
                Err(e) => {
                    if e.to_string().contains("could not acquire lock")
                        && rec.since.elapsed() > REOPEN_GIVE_UP
                    {
                        // The old handle is wedged inside sled and keeps the file
                        // lock: only a new process can open the store again.
                        eprintln!(
                            "error: the store in {} cannot recover in-process: after a failed write \
                             sled does not let go of its files ({e}); exiting so that a supervisor \
                             restarts the server (free space or fix the disk first). Every write \
                             answered 2xx is on disk.",
                            self.shared.dir.display()
                        );
                        std::process::exit(75);
                    }
                    eprintln!("store: cannot reopen yet: {e}");
                    return;
                }
            }
        }
        let db = self.db.as_ref().expect("reopened above");
        let rec = self.recovery.as_mut().expect("recovering");
        if let Some(b) = &rec.undo
            && let Err(e) = db.apply_batch(b.clone())
        {
            rec.reopen = true;
            return self.shared.set_failure(self.shared.sled_write_error(e));
        }
        if let Err(e) = self.make_durable() {
            if let Some(rec) = self.recovery.as_mut() {
                rec.reopen = true;
            }
            return self.shared.set_failure(e);
        }
        self.recovery = None;
        self.shared.clear_failure();
        eprintln!("store: the disk takes writes again; writes resumed");
    }
}

/// Whether the disk holding `dir` takes a write now.
pub(super) fn probe_disk(dir: &Path) -> std::io::Result<()> {
    use std::io::Write;
    let path = dir.join(PROBE_FILE);
    let r = (|| {
        let mut f = File::create(&path)?;
        f.write_all(&vec![0u8; PROBE_BYTES])?;
        f.sync_all()
    })();
    let _ = std::fs::remove_file(&path);
    r
}

/// Wakes a writer stuck in `flush()`: a second flush sees sled's error and signals.
/// Runs until the store is dropped.
pub(super) fn watchdog(shared: std::sync::Weak<Shared>) {
    let kicking = Arc::new(AtomicBool::new(false));
    loop {
        std::thread::park_timeout(Duration::from_millis(200));
        let Some(shared) = shared.upgrade() else { return };
        let stuck = shared.flushing_for().unwrap_or_default();
        if stuck > 2 * shared.write_timeout() {
            // Not woken by the kick: sled is wedged (a write it gave up on left
            // its log buffer unfinished) and no handle of it can close.
            eprintln!(
                "error: the store in {} has not completed a write for {} s and sled cannot recover \
                 in-process; exiting so that a supervisor restarts the server (check the disk and \
                 free space first). Every write answered 2xx is on disk.",
                shared.dir.display(),
                stuck.as_secs()
            );
            std::process::exit(75);
        }
        if stuck > KICK_AFTER && !kicking.swap(true, Ordering::AcqRel) {
            // The kick itself may block (a disk that truly hangs): never in the watchdog.
            let db = shared.db.read().expect("db lock").clone();
            let kicking = kicking.clone();
            let _ = std::thread::Builder::new().name("store-kick".into()).spawn(move || {
                if let Some(db) = db {
                    let _ = db.flush();
                }
                kicking.store(false, Ordering::Release);
            });
        }
    }
}
