//! For the domain's unit tests: a sled store whose commits pass through a
//! hook (to watch them, or to hold one back), every read going straight to sled
//! (a scan tells the hook when it has read its records).

use async_trait::async_trait;
use uuid::Uuid;

use super::sled_store::SledStore;
use super::{Kind, ListQuery, Op, Record, Store, StoreResult};

/// What a test does with each commit; it commits through `inner` itself.
#[async_trait]
pub trait CommitHook: Send + Sync + 'static {
    async fn commit(&self, inner: &SledStore, tenant: Uuid, ops: Vec<Op>) -> StoreResult<()>;
    /// Called once a `scan_kind` or `scan_ids` has read, before it answers.
    async fn scanned(&self, _kind: Kind) {}
}

/// A sled store whose commits go through `hook`.
pub struct Intercepted<H> {
    pub inner: SledStore,
    pub hook: H,
}

#[async_trait]
impl<H: CommitHook> Store for Intercepted<H> {
    async fn get(&self, tenant: Uuid, kind: Kind, id: Uuid) -> StoreResult<Option<Record>> {
        self.inner.get(tenant, kind, id).await
    }
    async fn list(&self, tenant: Uuid, kind: Kind, scope: Uuid, q: &ListQuery) -> StoreResult<Vec<Record>> {
        self.inner.list(tenant, kind, scope, q).await
    }
    async fn referencing(&self, tenant: Uuid, kind: Kind, target: Uuid) -> StoreResult<Vec<Uuid>> {
        self.inner.referencing(tenant, kind, target).await
    }
    async fn lookup_unique(
        &self,
        tenant: Uuid,
        kind: Kind,
        scope: Uuid,
        name: &str,
    ) -> StoreResult<Option<Uuid>> {
        self.inner.lookup_unique(tenant, kind, scope, name).await
    }
    async fn scan_kind(&self, kind: Kind) -> StoreResult<Vec<(Uuid, Record)>> {
        let records = self.inner.scan_kind(kind).await;
        self.hook.scanned(kind).await;
        records
    }
    async fn scan_ids(&self, kind: Kind) -> StoreResult<Vec<(Uuid, Uuid, Uuid)>> {
        let ids = self.inner.scan_ids(kind).await;
        self.hook.scanned(kind).await;
        ids
    }
    async fn commit(&self, tenant: Uuid, ops: Vec<Op>) -> StoreResult<()> {
        self.hook.commit(&self.inner, tenant, ops).await
    }
    async fn health(&self) -> StoreResult<()> {
        self.inner.health().await
    }
}
