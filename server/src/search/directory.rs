//! Where the index keeps its files: tantivy's memory-mapped directory, less
//! its `fsync`s.
//!
//! tantivy makes every commit durable (each new file, `meta.json` and the
//! directory synced), which here would cost more than the store's own commit
//! for every document written. The index needs no durability of its own: the
//! store is the truth, and at start the index is compared with it and
//! mended. What it needs is to never be read half-written, and a file the
//! OS has been given is only lost when the OS stops without writing it back
//! (a power loss, a kernel crash), never when the process is killed. So:
//!
//! - files are written without `fsync`, and renamed into place (`meta.json`);
//! - opening the index notes the machine's boot in `STATE` (`open <boot id>`),
//!   and a clean close syncs every file then notes `closed`;
//! - an index found `open` under another boot (the machine stopped while it
//!   was open) may have lost files: it is rebuilt ([`check_state`]). Where the
//!   boot cannot be known, any index not closed cleanly is rebuilt.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tantivy::directory::error::{DeleteError, LockError, OpenReadError, OpenWriteError};
use tantivy::directory::{
    AntiCallToken, Directory, DirectoryLock, FileHandle, Lock, MmapDirectory, TerminatingWrite,
    WatchCallback, WatchHandle, WritePtr,
};

const STATE_FILE: &str = "STATE";

/// The machine's current boot, where the OS says (Linux).
fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok().map(|s| s.trim().to_string())
}

/// Whether the index in `dir` can be trusted to hold every file it was
/// given; if not, why.
pub(super) fn check_state(dir: &Path) -> Result<(), String> {
    let before = std::fs::read_to_string(dir.join(STATE_FILE)).unwrap_or_default();
    match before.trim().split_once(' ') {
        _ if before.trim() == "closed" => Ok(()),
        Some(("open", id)) if id != "unknown" && boot_id().as_deref() == Some(id) => Ok(()),
        Some(("open", _)) => {
            Err("the machine may have stopped while it was open (files may be lost)".to_string())
        }
        _ => Err("its state is unknown".to_string()),
    }
}

/// Notes the index open under this boot (synced: this one small file is
/// what [`check_state`] relies on).
pub(super) fn mark_open(dir: &Path) -> io::Result<()> {
    write_synced(dir, &format!("open {}", boot_id().as_deref().unwrap_or("unknown")))
}

/// Makes every file of the index durable, then notes the index closed.
pub(super) fn close_state(dir: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_file() {
            File::open(&path)?.sync_all()?;
        }
    }
    File::open(dir)?.sync_all()?;
    write_synced(dir, "closed")
}

fn write_synced(dir: &Path, state: &str) -> io::Result<()> {
    let tmp = dir.join(format!("{STATE_FILE}.tmp"));
    let mut f = File::create(&tmp)?;
    f.write_all(state.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(STATE_FILE))?;
    File::open(dir)?.sync_all()
}

/// [`MmapDirectory`] whose writes are not synced (see the module's docs).
#[derive(Clone, Debug)]
pub(super) struct Unsynced {
    root: PathBuf,
    inner: MmapDirectory,
    temps: Arc<AtomicU64>,
}

impl Unsynced {
    pub(super) fn open(root: &Path) -> Result<Self, tantivy::directory::error::OpenDirectoryError> {
        Ok(Unsynced {
            root: root.to_path_buf(),
            inner: MmapDirectory::open(root)?,
            temps: Default::default(),
        })
    }
}

/// A file written without `fsync`.
struct UnsyncedFile(File);

impl Write for UnsyncedFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl TerminatingWrite for UnsyncedFile {
    fn terminate_ref(&mut self, _: AntiCallToken) -> io::Result<()> {
        self.0.flush()
    }
}

impl Directory for Unsynced {
    fn get_file_handle(&self, path: &Path) -> Result<Arc<dyn FileHandle>, OpenReadError> {
        self.inner.get_file_handle(path)
    }

    fn delete(&self, path: &Path) -> Result<(), DeleteError> {
        self.inner.delete(path)
    }

    fn exists(&self, path: &Path) -> Result<bool, OpenReadError> {
        self.inner.exists(path)
    }

    fn open_write(&self, path: &Path) -> Result<WritePtr, OpenWriteError> {
        let file =
            OpenOptions::new().write(true).create_new(true).open(self.root.join(path)).map_err(|e| {
                if e.kind() == io::ErrorKind::AlreadyExists {
                    OpenWriteError::FileAlreadyExists(path.to_path_buf())
                } else {
                    OpenWriteError::wrap_io_error(e, path.to_path_buf())
                }
            })?;
        Ok(BufWriter::new(Box::new(UnsyncedFile(file))))
    }

    fn atomic_read(&self, path: &Path) -> Result<Vec<u8>, OpenReadError> {
        self.inner.atomic_read(path)
    }

    fn atomic_write(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        let n = self.temps.fetch_add(1, Ordering::Relaxed);
        let tmp = self.root.join(format!(".{}.{n}.tmp", path.display()));
        std::fs::write(&tmp, data)?;
        std::fs::rename(&tmp, self.root.join(path))
    }

    fn sync_directory(&self) -> io::Result<()> {
        Ok(())
    }

    fn acquire_lock(&self, lock: &Lock) -> Result<DirectoryLock, LockError> {
        self.inner.acquire_lock(lock)
    }

    fn watch(&self, watch_callback: WatchCallback) -> tantivy::Result<WatchHandle> {
        self.inner.watch(watch_callback)
    }
}
