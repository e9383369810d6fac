//! What a failure of the database means to the store's callers: a database
//! that cannot answer now is [`StoreError::Unavailable`] (503, retry later),
//! a full disk [`StoreError::Full`], a conflict between concurrent
//! transactions a reason to run the commit again. Only what can be nothing
//! but a bug (a row this binary cannot read back) is [`StoreError::Io`].

use tokio_postgres::error::SqlState;

use crate::store::StoreError;

/// Why an operation on the database failed, before it is told to a caller.
#[derive(Debug)]
pub(super) enum Fault {
    /// The database refused or failed a statement, or could not be reached.
    Db(tokio_postgres::Error),
    /// A precondition of a commit did not hold (or a row did not decode).
    Store(StoreError),
}

impl From<tokio_postgres::Error> for Fault {
    fn from(e: tokio_postgres::Error) -> Self {
        Fault::Db(e)
    }
}

impl From<StoreError> for Fault {
    fn from(e: StoreError) -> Self {
        Fault::Store(e)
    }
}

/// The SQLSTATE of a statement's error, if the database answered with one.
pub(super) fn sqlstate(e: &tokio_postgres::Error) -> Option<&SqlState> {
    e.as_db_error().map(|d| d.code())
}

/// The constraint a unique violation (23505) broke.
pub(super) fn unique_violation(e: &tokio_postgres::Error) -> Option<&str> {
    let db = e.as_db_error()?;
    if *db.code() == SqlState::UNIQUE_VIOLATION { db.constraint() } else { None }
}

/// Whether running the whole transaction again may succeed: it lost a
/// serialization conflict or was chosen as a deadlock's victim.
pub(super) fn is_conflict(e: &tokio_postgres::Error) -> bool {
    matches!(sqlstate(e), Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED)
}

/// Whether the connection was lost (closed, or failing to read or write):
/// the client never heard the database's answer, so a `COMMIT` sent may or
/// may not have happened.
pub(super) fn connection_lost(e: &tokio_postgres::Error) -> bool {
    e.is_closed() || std::error::Error::source(e).is_some_and(|c| c.is::<std::io::Error>())
}

/// Whether a connection that answered `e` is no good for the next operation:
/// it was lost, ended by the database (shutting down, or an administrator),
/// or its database is now a standby (after a failover: a new connection finds
/// the primary).
pub(super) fn spoils_connection(e: &tokio_postgres::Error) -> bool {
    match sqlstate(e) {
        None => connection_lost(e),
        Some(code) => {
            *code == SqlState::READ_ONLY_SQL_TRANSACTION
                || *code == SqlState::ADMIN_SHUTDOWN
                || *code == SqlState::CRASH_SHUTDOWN
                || code.code().starts_with("08")
        }
    }
}

/// The caller's error for a failure of the database at `target`.
pub(super) fn store_error(target: &str, e: &tokio_postgres::Error) -> StoreError {
    let Some(db) = e.as_db_error() else {
        let text = with_causes(e);
        // A value that does not convert to or from its column is this binary's
        // bug; everything else without a SQLSTATE is the connection failing.
        if text.starts_with("error serializing") || text.starts_with("error deserializing") {
            return StoreError::Io(format!("the database at {target}: {text}"));
        }
        return unavailable(target, &text);
    };
    let code = db.code();
    let what = db.message();
    if *code == SqlState::DISK_FULL {
        return StoreError::Full(format!(
            "the database at {target} is out of disk space ({what}): nothing was written; \
             writes resume once its disk has room"
        ));
    }
    if *code == SqlState::READ_ONLY_SQL_TRANSACTION {
        return StoreError::Unavailable(format!(
            "the database at {target} is read-only (a standby?): nothing was written; connect to the \
             primary (several hosts in the URL with target_session_attrs=read-write follow a failover)"
        ));
    }
    let class = &code.code()[..2];
    if class == "40" {
        return StoreError::Unavailable(format!(
            "the database at {target} kept refusing the write for conflicts with concurrent ones ({what}): \
             nothing was written; retry it"
        ));
    }
    // Class 08: connection; 53: resources (too many connections, memory);
    // 57: operator intervention (statement timeout, shutdown, starting up);
    // 58: the database's own IO.
    if matches!(class, "08" | "53" | "57" | "58") || *code == SqlState::LOCK_NOT_AVAILABLE {
        return unavailable(target, what);
    }
    StoreError::Io(format!("the database at {target} refused a statement: {what} (SQLSTATE {})", code.code()))
}

/// An error and what caused it (tokio-postgres says only "error connecting
/// to server" or "db error"; its cause says "Connection refused" or what the
/// database refused).
pub(super) fn with_causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// The caller's error for a database that does not answer now.
pub(super) fn unavailable(target: &str, what: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(format!("the database at {target} does not answer ({what}); retry later"))
}

/// The caller's error for a pool that has no connection to give.
pub(super) fn pool_error(target: &str, e: &deadpool_postgres::PoolError) -> StoreError {
    use deadpool_postgres::{PoolError, TimeoutType};
    match e {
        // Opening a connection failed: whatever the database said (not
        // accepting connections, too many, starting up), it does not answer now.
        PoolError::Backend(e) => unavailable(target, with_causes(e)),
        PoolError::Timeout(TimeoutType::Wait) => {
            unavailable(target, "no connection to it became free in time")
        }
        PoolError::Timeout(TimeoutType::Create) => {
            unavailable(target, "a new connection did not open in time")
        }
        PoolError::Timeout(TimeoutType::Recycle) => {
            unavailable(target, "a pooled connection did not answer in time")
        }
        PoolError::Closed => StoreError::Unavailable(
            "the server is shutting down, so the request was not handled; retry on its next start".into(),
        ),
        other => unavailable(target, other),
    }
}
