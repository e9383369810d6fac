//! Opening the store: what the data dir holds decides what happens, before
//! anything is served.
//!
//! | the data dir holds                                   | at open                                  |
//! |------------------------------------------------------|------------------------------------------|
//! | nothing of ours (absent or empty)                    | a new store: [`Origin::Created`]         |
//! | sled's files and no manifest (release 0.1.0)         | adopted: the manifest is written from sled |
//! | the store its manifest describes                     | opened                                   |
//! | a store of an earlier format (any of the above but new) | opened, then upgraded before it serves (see `sled_store`'s `upgrade`) |
//! | a missing, empty, shorter or changed `db`, another store's `db`, a sequence behind the checkpoint | refused: [`OpenError::DataLoss`] or [`OpenError::Corrupt`], unless the loss is accepted |
//! | a `db` that sled cannot read (an error or a panic)   | refused: [`OpenError::Corrupt`]          |
//! | a `db` another process has locked                    | refused: [`OpenError::InUse`]            |
//!
//! Only a new store gets a first API key (see [`crate::server`]). A refusal
//! found before sled opens leaves every file as it was, so a restore or a
//! closer look is still possible; see [`super::manifest`] for what is kept where.

use std::cell::Cell;
use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};

use uuid::Uuid;

use super::manifest::{
    self, DB_FILE, DurablePoint, FileFingerprint, Manifest, PointFile, SEQUENCE_KEY, STORE_ID_KEY,
};

/// How the open went: printed in the banner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Opened {
    pub store_id: Uuid,
    /// The commit sequence sled holds: how many commits the store has taken.
    pub sequence: u64,
    pub origin: Origin,
    /// The format the data dir was in ([`manifest::FORMAT_VERSION`] for a new
    /// store; 1 when no manifest says): an older one is upgraded before the
    /// store serves, and until that is done the manifest says it is under way.
    pub format_version: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The data dir held nothing of ours: a new store.
    Created,
    /// A data dir of release 0.1.0 (no manifest): opened as it is, its
    /// manifest written, its commits counted from now.
    Adopted,
    /// The store the manifest describes (or, with no manifest, the store whose
    /// id sled holds); whether its last stop was clean.
    Reopened { last_stop_clean: bool },
    /// Something was lost (what), and `accept_data_loss` said to go on.
    AcceptedLoss(String),
}

impl Opened {
    /// A store that never took a commit: new now, or created by a start that
    /// failed before its first key (so the next start still gives one).
    pub fn is_new(&self) -> bool {
        match self.origin {
            Origin::Created => true,
            Origin::Reopened { .. } => self.sequence == 0,
            Origin::Adopted | Origin::AcceptedLoss(_) => false,
        }
    }
}

impl fmt::Display for Opened {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "id {}, {} commits, ", self.store_id, self.sequence)?;
        match &self.origin {
            Origin::Created => write!(f, "new"),
            Origin::Adopted => {
                write!(f, "adopted from a data dir without a manifest, commits counted from now")
            }
            Origin::Reopened { last_stop_clean: true } => write!(f, "last stop clean"),
            Origin::Reopened { last_stop_clean: false } => write!(f, "last stop unclean, recovered"),
            Origin::AcceptedLoss(_) => write!(f, "data loss accepted"),
        }
    }
}

const RESTORE_OR_ACCEPT: &str = "Restore the data dir from a backup, or, to serve what is left and accept the loss, \
     start once with --accept-data-loss (it records the store as it is now as the new checkpoint)";
const RESTORE: &str =
    "Restore the data dir from a backup: even with --accept-data-loss, sled cannot read what is left";

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(
        "another agent-platform process holds the store in {dir} (a running server?). Stop it first; \
         while it runs, manage keys with the HTTP API (/api/keys)"
    )]
    InUse { dir: PathBuf },
    #[error("the store in {dir} {what}. {RESTORE_OR_ACCEPT}")]
    DataLoss { dir: PathBuf, what: String },
    #[error("the store in {dir} is corrupt: {what}. {}", if *.accepting { RESTORE } else { RESTORE_OR_ACCEPT })]
    Corrupt {
        dir: PathBuf,
        what: String,
        /// Refused even with `accept_data_loss`: only a restore helps.
        accepting: bool,
    },
    #[error("cannot open the store in {dir}: {what}")]
    Io { dir: PathBuf, what: String },
}

impl OpenError {
    fn io(dir: &Path, e: impl fmt::Display) -> Self {
        OpenError::Io { dir: dir.to_path_buf(), what: e.to_string() }
    }
}

/// What is wrong with a store that was initialised before, if anything.
enum Damage {
    Lost(String),
    Corrupt(String),
}

impl Damage {
    fn what(&self) -> &str {
        match self {
            Damage::Lost(w) | Damage::Corrupt(w) => w,
        }
    }
    fn into_error(self, dir: &Path) -> OpenError {
        match self {
            Damage::Lost(what) => OpenError::DataLoss { dir: dir.to_path_buf(), what },
            Damage::Corrupt(what) => OpenError::Corrupt { dir: dir.to_path_buf(), what, accepting: false },
        }
    }
}

/// Opens sled in `dir` after the checks above, and records the open in the
/// durable point and the manifest (not clean until the store closes).
pub(super) fn open_checked(
    dir: &Path,
    accept_data_loss: bool,
    cache_bytes: u64,
) -> Result<(sled::Db, Opened, PointFile), OpenError> {
    let manifest = match Manifest::read(dir) {
        Ok(m) => m,
        Err(what) if accept_data_loss => {
            // Nothing says what the db held: sled rebuilds its page table from
            // the log rather than trust a snapshot (see below).
            set_aside_snapshots(dir).map_err(|e| OpenError::io(dir, e))?;
            return finish(dir, open_sled(dir, true, cache_bytes)?, None, 1, Origin::AcceptedLoss(what));
        }
        Err(what) => return Err(OpenError::Corrupt { dir: dir.to_path_buf(), what, accepting: false }),
    };
    // The durable point counts only beside the manifest of its store (a first
    // start writes it just before the manifest).
    let point = match manifest.as_ref().map(|_| DurablePoint::read(dir)) {
        Some(Ok(p)) => p,
        Some(Err(what)) if !accept_data_loss => {
            return Err(OpenError::Corrupt { dir: dir.to_path_buf(), what, accepting: false });
        }
        _ => None,
    };
    // The checkpoint is the later of the manifest's and the durable point's.
    let checkpoint = |m: &Manifest| match point {
        Some(p) if p.store_id == m.store_id => m.checkpoint.max(p.commits),
        _ => m.checkpoint,
    };
    let db_path = dir.join(DB_FILE);
    let db_bytes = match std::fs::metadata(&db_path) {
        Ok(m) => Some(m.len()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(OpenError::io(dir, format!("cannot read {}: {e}", db_path.display()))),
    };

    if manifest.is_none() && !holds_sled_files(dir).map_err(|e| OpenError::io(dir, e))? {
        std::fs::create_dir_all(dir).map_err(|e| OpenError::io(dir, e))?;
        return finish(
            dir,
            open_sled(dir, false, cache_bytes)?,
            None,
            manifest::FORMAT_VERSION,
            Origin::Created,
        );
    }

    // Checks that need no sled: a refusal here changes nothing in the dir.
    let before_open = match (&manifest, db_bytes) {
        (Some(m), None) => Some(Damage::Lost(format!(
            "has no db file, though its manifest says it was initialised (store {}, {} commits): \
             data was lost (a deleted db file, or a volume that is not mounted?)",
            m.store_id,
            checkpoint(m)
        ))),
        (Some(m), Some(0)) => Some(Damage::Lost(format!(
            "has an empty db file, though its manifest says it holds {} commits (store {}): data was lost",
            checkpoint(m),
            m.store_id
        ))),
        (None, None | Some(0)) => Some(Damage::Lost(
            "holds sled's files but no db file, or an empty one, and no manifest: either a data dir of \
             an earlier release lost its data, or the very first start was interrupted (then the dir \
             holds nothing: remove it)"
                .into(),
        )),
        (Some(m), Some(_)) => match (&m.clean_stop, &m.db_file) {
            (true, Some(then)) => {
                let now = FileFingerprint::of(&db_path).map_err(|e| OpenError::io(dir, e))?;
                then.difference(&now).map(|d| match now.bytes < then.bytes {
                    true => Damage::Lost(format!(
                        "was changed after its last clean stop: {d}; data was lost (a truncated or replaced db file?)"
                    )),
                    false => Damage::Corrupt(format!("{d}; something other than agent-platform wrote to it")),
                })
            }
            // Not stopped cleanly: every acknowledged write lies below the size
            // the durable point records, and sled never shrinks its file.
            _ => match point {
                Some(p) if p.store_id != m.store_id => Some(Damage::Corrupt(format!(
                    "its {} file belongs to another store ({}, but the manifest says {})",
                    manifest::POINT_FILE,
                    p.store_id,
                    m.store_id
                ))),
                Some(p) if db_bytes.is_some_and(|now| now < p.db_bytes) => Some(Damage::Lost(format!(
                    "was cut short: its db file is {} bytes, but was {} when its last acknowledged \
                     write was made durable; data was lost (a truncated or replaced db file?)",
                    db_bytes.unwrap_or(0),
                    p.db_bytes
                ))),
                _ => None,
            },
        },
        (None, Some(_)) => None,
    };
    let damage = match before_open {
        Some(d) if !accept_data_loss => return Err(d.into_error(dir)),
        d => d,
    };

    // A db file cut or changed since its clean stop no longer holds what the
    // snapshot of that stop points into: sled rebuilds from what log is left.
    if damage.is_some() {
        set_aside_snapshots(dir).map_err(|e| OpenError::io(dir, e))?;
    }
    let db = open_sled(dir, accept_data_loss, cache_bytes)?;
    let (sled_id, sled_seq, has_records) = quietly(|| {
        Ok::<_, sled::Error>((
            manifest::sled_store_id(&db)?,
            manifest::sled_sequence(&db)?,
            db.range(&[1u8][..]..).next().transpose()?.is_some(),
        ))
    })
    .map_err(|what| OpenError::Corrupt { dir: dir.to_path_buf(), what, accepting: accept_data_loss })?
    .map_err(|e| sled_error(dir, e, accept_data_loss))?;

    let found = damage.or_else(|| match &manifest {
        Some(m) => match sled_id {
            None => Some(Damage::Lost(format!(
                "holds none of its data: its db has no store id (a new or replaced db file?), \
                 though its manifest says it holds {} commits (store {})",
                checkpoint(m),
                m.store_id
            ))),
            Some(id) if id != m.store_id => Some(Damage::Lost(format!(
                "holds another store's db (store {id}, but the manifest says {}): a db file copied from elsewhere?",
                m.store_id
            ))),
            Some(_) if sled_seq.unwrap_or(0) < checkpoint(m) => Some(Damage::Lost(format!(
                "is behind its checkpoint: it holds commits up to {} but was checkpointed at {}; \
                 data was lost (a truncated or replaced db file?)",
                sled_seq.unwrap_or(0),
                checkpoint(m)
            ))),
            Some(_) => None,
        },
        // No manifest: release 0.1.0's layout, which always holds a record
        // (its first start created a key). sled's own id, when there, means only
        // the manifest was removed.
        None if sled_id.is_none() && !has_records => {
            Some(Damage::Lost("holds sled's files but no record (and no manifest): data was lost".into()))
        }
        None => None,
    });
    let origin = match (found, &manifest) {
        (Some(d), _) if !accept_data_loss => {
            drop(db);
            return Err(d.into_error(dir));
        }
        (Some(d), _) => Origin::AcceptedLoss(d.what().to_string()),
        // sled holds our id: only the manifest is gone (removed, or the first
        // start stopped before writing it); the sequence was checked against nothing.
        (None, None) if sled_id.is_some() => Origin::Reopened { last_stop_clean: false },
        (None, None) => Origin::Adopted,
        (None, Some(m)) => Origin::Reopened { last_stop_clean: m.clean_stop },
    };
    // Without a manifest the format is unknown: 1, since upgrading a store
    // already in the current format changes nothing.
    let format_version = manifest.as_ref().map_or(1, |m| m.upgrading_from.unwrap_or(m.format_version));
    finish(dir, db, manifest.map(|m| m.store_id), format_version, origin)
}

/// Writes the store id and sequence into sled when missing, flushes, and
/// records the open in the durable point, then in the manifest, with the
/// format the store is in.
fn finish(
    dir: &Path,
    db: sled::Db,
    manifest_id: Option<Uuid>,
    format_version: u32,
    origin: Origin,
) -> Result<(sled::Db, Opened, PointFile), OpenError> {
    let run = || -> Result<Opened, sled::Error> {
        let store_id = match manifest::sled_store_id(&db)? {
            Some(id) => id,
            None => {
                let id = manifest_id.filter(|_| origin != Origin::Created).unwrap_or_else(Uuid::now_v7);
                db.insert(STORE_ID_KEY, id.as_bytes())?;
                id
            }
        };
        let sequence = match manifest::sled_sequence(&db)? {
            Some(s) => s,
            None => {
                db.insert(SEQUENCE_KEY, &0u64.to_be_bytes())?;
                0
            }
        };
        db.flush()?;
        Ok(Opened { store_id, sequence, origin: origin.clone(), format_version })
    };
    let accepting = matches!(origin, Origin::AcceptedLoss(_));
    let opened = quietly(run)
        .map_err(|what| OpenError::Corrupt { dir: dir.to_path_buf(), what, accepting })?
        .map_err(|e| sled_error(dir, e, accepting))?;
    // Before the manifest: a start stopped in between is refused again, never served short.
    let point = PointFile::create(dir, opened.store_id, opened.sequence).map_err(|e| {
        OpenError::io(dir, format!("cannot write {}: {e}", dir.join(manifest::POINT_FILE).display()))
    })?;
    let running = manifest::running_manifest(opened.store_id, opened.sequence);
    let upgrading_from = Some(format_version).filter(|&v| v < manifest::FORMAT_VERSION);
    write_manifest(dir, &Manifest { upgrading_from, ..running })?;
    Ok((db, opened, point))
}

/// Replaces the manifest of `dir`.
pub(super) fn write_manifest(dir: &Path, manifest: &Manifest) -> Result<(), OpenError> {
    manifest.write(dir).map_err(|e| {
        OpenError::io(dir, format!("cannot write {}: {e}", dir.join(manifest::MANIFEST_FILE).display()))
    })
}

/// Opens sled. When accepting a loss and sled cannot open the store, its
/// snapshots are set aside (renamed `rejected-snap.*`) and it tries once more:
/// without them sled rebuilds its page table from whatever log is left, which
/// is what a cut or emptied `db` needs.
fn open_sled(dir: &Path, accept_data_loss: bool, cache_bytes: u64) -> Result<sled::Db, OpenError> {
    let open = |accepting| {
        quietly(|| sled::Config::new().path(dir).cache_capacity(cache_bytes).flush_every_ms(Some(500)).open())
            .map_err(|what| OpenError::Corrupt { dir: dir.to_path_buf(), what, accepting })?
            .map_err(|e| sled_error(dir, e, accepting))
    };
    match open(false) {
        Err(OpenError::Corrupt { .. }) if accept_data_loss => {
            set_aside_snapshots(dir).map_err(|e| OpenError::io(dir, e))?;
            open(true)
        }
        other => other,
    }
}

fn set_aside_snapshots(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("snap.") {
            std::fs::rename(dir.join(name.as_ref()), dir.join(format!("rejected-{name}")))?;
        }
    }
    File::open(dir)?.sync_all()
}

/// Whether sled could not open the store because a handle holds its file lock
/// (sled 0.34 reports it as an `Other` io error naming it).
pub(super) fn held_by_another(e: &sled::Error) -> bool {
    matches!(e, sled::Error::Io(io) if io.kind() == std::io::ErrorKind::WouldBlock
        || io.to_string().contains("could not acquire lock"))
}

/// sled's errors, in words (its own Display of a corruption carries a backtrace).
pub(super) fn sled_error(dir: &Path, e: sled::Error, accepting: bool) -> OpenError {
    match e {
        e if held_by_another(&e) => OpenError::InUse { dir: dir.to_path_buf() },
        sled::Error::Io(io) => OpenError::io(dir, io),
        sled::Error::Corruption { at, .. } => OpenError::Corrupt {
            dir: dir.to_path_buf(),
            what: match at {
                Some(sled::DiskPtr::Inline(offset)) => {
                    format!("sled found corrupted data at byte {offset} of its db file")
                }
                Some(sled::DiskPtr::Blob(_, blob)) => {
                    format!("sled found corrupted data in its blob file {blob}")
                }
                None => "sled found corrupted data in its db file".into(),
            },
            accepting,
        },
        other => OpenError::Corrupt {
            dir: dir.to_path_buf(),
            what: format!("sled cannot read it: {other}"),
            accepting,
        },
    }
}

/// Whether `dir` holds any of sled's files (`db`, `conf`, `blobs`, `snap.*`).
fn holds_sled_files(dir: &Path) -> std::io::Result<bool> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let name = entry?.file_name();
        let name = name.to_string_lossy();
        if matches!(name.as_ref(), "db" | "conf" | "blobs") || name.starts_with("snap.") {
            return Ok(true);
        }
    }
    Ok(false)
}

thread_local! {
    /// Set while [`quietly`] runs on this thread: its panics print nothing.
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f`, turning a panic into `Err(its message)` and keeping it off stderr.
///
/// sled 0.34 panics on some damaged files (e.g. "tried to serialize
/// Uninitialized") where it should return an error; the user gets our message
/// instead of a panic and a backtrace. Other threads' panics print as usual.
pub fn quietly<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                previous(info)
            }
        }));
    });
    let was = QUIET.with(|q| q.replace(true));
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    QUIET.with(|q| q.set(was));
    out.map_err(|payload| {
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".into());
        format!("sled failed reading it ({msg})")
    })
}

/// [`quietly`] for a future: each poll of `fut` runs quietly, on whichever
/// thread polls it, and a panic in one ends it with `Err(its message)`.
pub async fn quietly_async<F: Future>(fut: F) -> Result<F::Output, String> {
    let mut fut = std::pin::pin!(fut);
    std::future::poll_fn(|cx| match quietly(|| fut.as_mut().poll(cx)) {
        Ok(std::task::Poll::Ready(out)) => std::task::Poll::Ready(Ok(out)),
        Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
        Err(panic) => std::task::Poll::Ready(Err(panic)),
    })
    .await
}
