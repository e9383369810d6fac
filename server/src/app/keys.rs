//! API keys and tenants.
//!
//! A key is 24 random bytes shown once as `ap_<hex>`; the store keeps only its
//! SHA-256 (keys are random, not passwords, so a fast hash is the right one),
//! indexed as the key record's unique name for a constant-time lookup.
//!
//! Keys are managed by the CLI (while the server is stopped on sled, which
//! admits one process) and through the API, each tenant its own keys
//! ([`App::tenant_key_create`], [`App::tenant_key_list`], [`App::tenant_key_revoke`]).
//! Through the API a tenant holds at least one key (its last cannot be
//! deleted: rotate by creating the new key first) and at most
//! `server.max_keys_per_tenant`; the CLI, the operator's tool, may do either.
//! A revoked key is refused at once: the revocation commits, then drops the
//! key from the cache of known keys, and a lookup that raced with it does not
//! put it back (see [`App::authenticate`]).
//!
//! On a shared store other servers (and `keys revoke` run against the
//! database) revoke keys too: their notifications flush the cache (see
//! [`super::changes`]), and, since a notification may be lost, a cached key is
//! trusted for [`SHARED_KEY_TTL`] at most, so a key revoked anywhere is
//! refused everywhere within a second.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::records::RETRIES;
use super::{App, Error, NotFound, Result, Tenant};
use crate::store::{Expect, Kind, ListQuery, Op, Record, SortBy, StoreError, new_id};

/// How many keys a tenant may hold unless configured (`server.max_keys_per_tenant`).
pub const DEFAULT_MAX_KEYS_PER_TENANT: usize = 100;

/// Keys and tenants live outside every tenant, in the nil tenant.
const SYSTEM: Uuid = Uuid::nil();
pub const DEFAULT_TENANT: &str = "default";

#[derive(Serialize, Deserialize)]
struct KeyData {
    tenant_id: Uuid,
    tenant: String,
    /// The first characters of the key, to recognise it in `keys list`.
    prefix: String,
}

#[derive(Serialize, Deserialize)]
struct TenantData {
    name: String,
}

/// How long a server trusts a key it looked up in a shared store: half the
/// second within which a key revoked elsewhere must be refused, counted from
/// before the lookup read the store.
pub const SHARED_KEY_TTL: Duration = Duration::from_millis(500);

/// The cache of known keys: key hash → tenant (and when the lookup that found
/// it began), and how many times keys were forgotten (so a lookup racing with
/// a revocation does not cache its key again).
#[derive(Default)]
pub struct KeyCache {
    keys: HashMap<String, (Tenant, Instant)>,
    forgotten: u64,
    /// How long an entry is trusted; `None`: until the key is revoked (a store
    /// that no other process writes).
    ttl: Option<Duration>,
}

impl KeyCache {
    /// The cache for `store`: entries expire when other processes write it.
    pub fn for_store(store: &dyn crate::store::Store) -> Self {
        KeyCache { ttl: store.shared().then_some(SHARED_KEY_TTL), ..Default::default() }
    }

    fn get(&self, hashed: &str) -> Option<Tenant> {
        let (tenant, since) = self.keys.get(hashed)?;
        self.ttl.is_none_or(|ttl| since.elapsed() < ttl).then_some(*tenant)
    }

    /// Forgets every key (a key changed, or changes may have been missed).
    pub fn forget_all(&mut self) {
        self.forgotten += 1;
        self.keys.clear();
    }
}

/// What `keys list` shows of a key (never the key itself).
#[derive(Debug, Serialize)]
pub struct KeyInfo {
    pub id: Uuid,
    pub tenant: String,
    pub prefix: String,
    pub created_at: DateTime<Utc>,
}

/// The op that commits only if `tenant` is unchanged since it was read (and
/// changes it, so that a concurrent change of its keys does not commit).
fn unchanged(tenant: Record) -> Op {
    let version = tenant.version;
    Op::Put { record: tenant, expect: Expect::Version(version) }
}

fn hash(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

impl App {
    /// The tenant of a presented key, if the key is known.
    pub async fn authenticate(&self, key: &str) -> Result<Option<Tenant>> {
        let hashed = hash(key);
        if let Some(t) = self.key_cache.read().expect("key cache").get(&hashed) {
            return Ok(Some(t));
        }
        // A revocation that commits after this read must not find its key
        // cached afterwards: remember the count, cache only if it is unchanged.
        let forgotten = self.key_cache.read().expect("key cache").forgotten;
        let asked = Instant::now();
        let Some(id) = self.store.lookup_unique(SYSTEM, Kind::ApiKey, SYSTEM, &hashed).await? else {
            return Ok(None);
        };
        let Some(rec) = self.store.get(SYSTEM, Kind::ApiKey, id).await? else { return Ok(None) };
        let data: KeyData = serde_json::from_value(rec.data).map_err(|e| Error::Internal(e.to_string()))?;
        let tenant = Tenant(data.tenant_id);
        let mut cache = self.key_cache.write().expect("key cache");
        if cache.forgotten == forgotten {
            cache.keys.insert(hashed, (tenant, asked));
        }
        Ok(Some(tenant))
    }

    /// Creates a key for a tenant (creating the tenant on first use); answers the
    /// plain key, which is never stored and cannot be shown again.
    pub async fn key_create(&self, tenant_name: &str) -> Result<(String, KeyInfo)> {
        let tenant_name = tenant_name.trim();
        if tenant_name.is_empty() || tenant_name.len() > 255 {
            return Err(Error::BadRequest("a tenant name has 1 to 255 characters".into()));
        }
        let mut ops = Vec::new();
        let tenant_id = match self.store.lookup_unique(SYSTEM, Kind::Tenant, SYSTEM, tenant_name).await? {
            Some(id) => {
                ops.push(Op::Require { kind: Kind::Tenant, id });
                id
            }
            None => {
                let id = new_id();
                let mut rec = Record::new(
                    Kind::Tenant,
                    id,
                    SYSTEM,
                    serde_json::to_value(TenantData { name: tenant_name.into() })
                        .map_err(|e| Error::Internal(e.to_string()))?,
                );
                rec.unique = Some(tenant_name.to_string());
                ops.push(Op::Put { record: rec, expect: Expect::Absent });
                id
            }
        };
        self.mint_key(tenant_id, tenant_name, ops).await
    }

    /// Makes a key of an existing tenant and commits it with `ops`.
    async fn mint_key(&self, tenant_id: Uuid, tenant_name: &str, ops: Vec<Op>) -> Result<(String, KeyInfo)> {
        Ok(self.try_mint_key(tenant_id, tenant_name, ops).await??)
    }

    /// [`App::mint_key`], with the commit's own error apart (to retry a stale one).
    async fn try_mint_key(
        &self,
        tenant_id: Uuid,
        tenant_name: &str,
        mut ops: Vec<Op>,
    ) -> Result<Result<(String, KeyInfo), StoreError>> {
        let mut bytes = [0u8; 24];
        rand::rng().fill_bytes(&mut bytes);
        let key = format!("ap_{}", hex::encode(bytes));
        let data = KeyData { tenant_id, tenant: tenant_name.into(), prefix: key[..11].to_string() };
        let mut rec = Record::new(
            Kind::ApiKey,
            new_id(),
            SYSTEM,
            serde_json::to_value(&data).map_err(|e| Error::Internal(e.to_string()))?,
        );
        rec.unique = Some(hash(&key));
        let info =
            KeyInfo { id: rec.id, tenant: data.tenant, prefix: data.prefix, created_at: rec.created_at };
        ops.push(Op::Put { record: rec, expect: Expect::Absent });
        Ok(self.store.commit(SYSTEM, ops).await.map(|()| (key, info)))
    }

    pub async fn key_list(&self) -> Result<Vec<KeyInfo>> {
        Ok(self.keys().await?.into_iter().map(|(info, _)| info).collect())
    }

    /// Every key, newest first, with its tenant's id.
    async fn keys(&self) -> Result<Vec<(KeyInfo, Uuid)>> {
        let q = ListQuery { limit: usize::MAX, sort_by: SortBy::CreatedAt, ..Default::default() };
        self.store
            .list(SYSTEM, Kind::ApiKey, SYSTEM, &q)
            .await?
            .into_iter()
            .map(|rec| {
                let d: KeyData =
                    serde_json::from_value(rec.data).map_err(|e| Error::Internal(e.to_string()))?;
                let info =
                    KeyInfo { id: rec.id, tenant: d.tenant, prefix: d.prefix, created_at: rec.created_at };
                Ok((info, d.tenant_id))
            })
            .collect()
    }

    /// The caller's tenant's keys, newest first. A tenant holds at most
    /// [`App::max_keys_per_tenant`] of them: they are read from every key (as
    /// the CLI lists them) and filtered.
    async fn tenant_keys(&self, t: Tenant) -> Result<Vec<KeyInfo>> {
        Ok(self
            .keys()
            .await?
            .into_iter()
            .filter(|(_, tenant)| *tenant == t.0)
            .map(|(info, _)| info)
            .collect())
    }

    /// The caller's tenant's record. Every change of its keys through the API
    /// commits with [`unchanged`] of it, so what the change checked (how many
    /// keys the tenant holds) still holds when it commits, whatever other
    /// requests or servers do meanwhile.
    async fn tenant_record(&self, t: Tenant) -> Result<Record> {
        self.store
            .get(SYSTEM, Kind::Tenant, t.0)
            .await?
            .ok_or_else(|| Error::Unauthorized(format!("tenant {} no longer exists", t.0)))
    }

    /// A new key of the caller's own tenant (`POST /api/keys`); a 409 naming
    /// `server.max_keys_per_tenant` when the tenant holds that many already.
    pub async fn tenant_key_create(&self, t: Tenant) -> Result<(String, KeyInfo)> {
        let _queue = self.lock_record(t, Kind::Tenant, t.0).await;
        for _ in 0..RETRIES {
            let tenant = self.tenant_record(t).await?;
            let data: TenantData =
                serde_json::from_value(tenant.data.clone()).map_err(|e| Error::Internal(e.to_string()))?;
            let held = self.tenant_keys(t).await?.len();
            if held >= self.max_keys_per_tenant {
                return Err(Error::Conflict(format!(
                    "the tenant holds {held} API keys, the most the server's `max_keys_per_tenant` \
                     setting (AGENT_PLATFORM_MAX_KEYS_PER_TENANT) allows: delete one \
                     (DELETE /api/keys/{{key_id}}) before creating another"
                )));
            }
            match self.try_mint_key(t.0, &data.name, vec![unchanged(tenant)]).await? {
                Err(StoreError::Stale) => continue,
                done => return Ok(done?),
            }
        }
        Err(StoreError::Stale.into())
    }

    /// A page of the caller's tenant's keys (`GET /api/keys`): `offset` and
    /// `limit` over them, newest first unless `oldest_first`.
    pub async fn tenant_key_list(
        &self,
        t: Tenant,
        offset: usize,
        limit: usize,
        oldest_first: bool,
    ) -> Result<Vec<KeyInfo>> {
        let mut keys = self.tenant_keys(t).await?;
        if oldest_first {
            keys.reverse();
        }
        Ok(keys.into_iter().skip(offset).take(limit).collect())
    }

    /// Revokes a key of the caller's tenant (`DELETE /api/keys/{id}`); another
    /// tenant's key is as missing as one that does not exist. The caller's own
    /// key may be revoked (its next request is a 401), but not the tenant's
    /// last one: nothing could make the tenant a key through the API again, so
    /// that is a 409 saying how to rotate.
    pub async fn tenant_key_revoke(&self, t: Tenant, id: Uuid) -> Result<()> {
        let _queue = self.lock_record(t, Kind::Tenant, t.0).await;
        for _ in 0..RETRIES {
            let rec = self.store.get(SYSTEM, Kind::ApiKey, id).await?;
            let owned = rec.as_ref().and_then(|r| serde_json::from_value::<KeyData>(r.data.clone()).ok());
            let rec = match (rec, owned) {
                (Some(rec), Some(d)) if d.tenant_id == t.0 => rec,
                _ => return Err(Error::not_found(Kind::ApiKey, id)),
            };
            let tenant = self.tenant_record(t).await?;
            if self.tenant_keys(t).await?.len() <= 1 {
                return Err(Error::Conflict(format!(
                    "API key {id} is the tenant's last key, and deleting it would lock the tenant \
                     out: to rotate it, create a new key first (POST /api/keys), then delete this one"
                )));
            }
            match self.revoke(&rec, vec![unchanged(tenant)]).await {
                Err(StoreError::Stale) => continue,
                done => return Ok(done?),
            }
        }
        Err(StoreError::Stale.into())
    }

    /// Deletes a key record (committing `ops` with it), then forgets the key
    /// in the cache (see [`App::authenticate`]).
    async fn revoke(&self, rec: &Record, mut ops: Vec<Op>) -> Result<(), StoreError> {
        ops.push(Op::Delete { kind: Kind::ApiKey, id: rec.id, version: None });
        let deleted = self.store.commit(SYSTEM, ops).await;
        // Whether or not the delete landed, the cache must not outlive it.
        let mut cache = self.key_cache.write().expect("key cache");
        cache.forgotten += 1;
        if let Some(hashed) = &rec.unique {
            cache.keys.remove(hashed);
        }
        drop(cache);
        deleted
    }

    /// Revokes a key given its id, its listed prefix, or the key itself.
    pub async fn key_revoke(&self, which: &str) -> Result<KeyInfo> {
        let keys = self.key_list().await?;
        let by_hash = self.store.lookup_unique(SYSTEM, Kind::ApiKey, SYSTEM, &hash(which)).await?;
        let matches: Vec<&KeyInfo> = keys
            .iter()
            .filter(|k| Some(k.id) == by_hash || k.id.to_string() == which || k.prefix == which)
            .collect();
        let found = match matches.as_slice() {
            [one] => *one,
            [] => {
                return Err(Error::NotFound(NotFound::KeyMatching { which: which.to_string() }));
            }
            _ => return Err(Error::Conflict(format!("'{which}' matches several keys; give the key id"))),
        };
        let rec = self.load(Tenant(SYSTEM), Kind::ApiKey, found.id).await?;
        self.revoke(&rec, Vec::new()).await?;
        Ok(KeyInfo {
            id: found.id,
            tenant: found.tenant.clone(),
            prefix: found.prefix.clone(),
            created_at: found.created_at,
        })
    }

    /// True when no key exists yet (a fresh store).
    pub async fn no_keys(&self) -> Result<bool> {
        let q = ListQuery { limit: 1, ..Default::default() };
        Ok(self.store.list(SYSTEM, Kind::ApiKey, SYSTEM, &q).await?.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{KeyData, TenantData};
    use crate::app::stored::tests::keeps;

    #[test]
    fn keys_and_tenants_as_stored_by_0_1_0_still_read_and_write_the_same() {
        keeps::<KeyData>(json!({
            "tenant_id": "01900000-0000-7000-8000-000000000001", "tenant": "acme", "prefix": "ap_0123abcd"}));
        keeps::<TenantData>(json!({"name": "acme"}));
    }
}
