//! Secrets of a tenant, encrypted at rest.
//!
//! A secret is a [`Kind::Secret`] record of the tenant (scope: the nil id),
//! its name the record's unique name (a clash is a 409). Its value is sealed
//! with XChaCha20-Poly1305 under the server's [`SecretsKey`] (32 bytes, from
//! the environment variable that `[secrets] key_env` names), with a random
//! 24-byte nonce per value and the tenant's id and the secret's name as
//! associated data: a sealed value copied into another tenant's record, or
//! under another name, does not open. The record keeps the nonce, the
//! ciphertext with its tag, and the key's id (a digest of the key), so that a
//! value sealed under another key is told apart from a damaged one.
//!
//! The value is never answered and never logged: only [`App::secret_value`]
//! and [`App::resolve_secrets`] open it, for the tools the server runs. With
//! no key configured, secrets are listed and deleted, but none is created,
//! replaced or opened (a 409 saying how to configure one).

use std::sync::{Arc, LazyLock};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand::RngCore;
use regex::Regex;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::records::{Resource, decode_data, encode};
use super::{App, Error, NotFound, Result, Tenant};
use crate::api::types::{CreateSecretRequest, Secret, UpdateSecretRequest};
use crate::config::SecretsConfig;
use crate::store::{Kind, ListQuery, Op, Record};

/// Secrets live in the tenant's nil scope: one namespace per tenant.
const SCOPE: Uuid = Uuid::nil();
/// The start of every sealed value's associated data (then the tenant's id and the name).
const AD_CONTEXT: &[u8] = b"agent-platform secret v1\0";

/// What the configuration says of how to configure a key (in every message
/// that needs one).
const HOW_TO_CONFIGURE: &str = "set `[secrets] key_env` in the config file (or \
     AGENT_PLATFORM_SECRETS_KEY_ENV) to the name of an environment variable that holds a 32-byte \
     key as 64 hex characters (`openssl rand -hex 32`) or as base64, and restart the server";

/// The key that seals tenants' secrets. Its `Debug` shows its id only.
pub struct SecretsKey {
    cipher: XChaCha20Poly1305,
    /// Names the key in stored records: hex of the first 8 bytes of a SHA-256 of it.
    id: String,
    /// What idempotency fingerprints of secret requests are keyed with.
    request_key: [u8; 32],
}

impl std::fmt::Debug for SecretsKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretsKey").field("id", &self.id).finish_non_exhaustive()
    }
}

impl SecretsKey {
    /// A key from its 32 bytes.
    pub fn from_bytes(bytes: &[u8; 32]) -> Self {
        let derive = |purpose: &[u8]| -> [u8; 32] {
            Sha256::new().chain_update(purpose).chain_update(bytes).finalize().into()
        };
        SecretsKey {
            cipher: XChaCha20Poly1305::new(bytes.into()),
            id: hex::encode(&derive(b"agent-platform secrets key id\0")[..8]),
            request_key: derive(b"agent-platform secrets request key\0"),
        }
    }

    /// A key written as 64 hex characters or as base64 (padded or not) of 32
    /// bytes; the error never repeats the text.
    pub fn parse(text: &str) -> std::result::Result<Self, String> {
        let text = text.trim();
        let bytes = if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
            hex::decode(text).ok()
        } else {
            STANDARD.decode(text).or_else(|_| STANDARD_NO_PAD.decode(text)).ok()
        };
        match bytes.as_deref().map(<[u8; 32]>::try_from) {
            Some(Ok(bytes)) => Ok(SecretsKey::from_bytes(&bytes)),
            Some(Err(_)) => {
                Err(format!("it decodes to {} bytes, not 32", bytes.as_ref().map_or(0, Vec::len)))
            }
            None => Err(format!(
                "its {} characters are neither 64 hex characters nor base64",
                text.chars().count()
            )),
        }
    }

    /// The key `config` names, read through `env`: `None` when it names none;
    /// an error (the server does not start) when the variable it names is
    /// missing or does not hold a key.
    pub fn from_config(
        config: &SecretsConfig,
        env: impl Fn(&str) -> Option<String>,
    ) -> anyhow::Result<Option<Self>> {
        let Some(var) = config.key_env.as_deref().filter(|v| !v.is_empty()) else { return Ok(None) };
        let Some(text) = env(var).filter(|t| !t.trim().is_empty()) else {
            anyhow::bail!(
                "secrets.key_env names the environment variable {var}, which is not set (or empty): \
                 set it to a 32-byte key as 64 hex characters (`openssl rand -hex 32`) or as base64, \
                 or unset secrets.key_env to run without secrets"
            );
        };
        let key = SecretsKey::parse(&text).map_err(|why| {
            anyhow::anyhow!(
                "the environment variable {var} (secrets.key_env) does not hold a secrets key: {why}; \
                 expected 32 bytes as 64 hex characters (`openssl rand -hex 32`) or as base64"
            )
        })?;
        Ok(Some(key))
    }

    /// The associated data of a tenant's secret `name`.
    fn associated_data(t: Tenant, name: &str) -> Vec<u8> {
        [AD_CONTEXT, t.0.as_bytes(), name.as_bytes()].concat()
    }

    /// Seals `value` as the tenant's secret `name`, under a new random nonce.
    fn seal(&self, t: Tenant, name: &str, value: &str, description: String) -> Result<SecretData> {
        let mut nonce = [0u8; 24];
        rand::rng().fill_bytes(&mut nonce);
        let aad = Self::associated_data(t, name);
        let sealed = self
            .cipher
            .encrypt(&XNonce::from(nonce), Payload { msg: value.as_bytes(), aad: &aad })
            .map_err(|_| Error::Internal(format!("secret '{name}' could not be encrypted")))?;
        Ok(SecretData {
            name: name.to_string(),
            description,
            nonce: STANDARD.encode(nonce),
            sealed: STANDARD.encode(sealed),
            key_id: self.id.clone(),
        })
    }

    /// Opens the tenant's sealed secret: a clear error, naming the secret,
    /// when it was sealed under another key, or does not open (damaged, or
    /// moved to another tenant or name).
    fn open(&self, t: Tenant, d: &SecretData) -> Result<String> {
        let name = &d.name;
        if d.key_id != self.id {
            return Err(Error::Conflict(format!(
                "secret '{name}' was encrypted with another secrets key (key id {}; the server's is {}): \
                 the key in the variable secrets.key_env names changed since. Set the secret again \
                 (PUT /api/secrets/{name}), or start the server with the key it was stored with",
                d.key_id, self.id
            )));
        }
        let damaged = || Error::Internal(format!("stored secret '{name}' does not decrypt: it is damaged"));
        let nonce =
            STANDARD.decode(&d.nonce).ok().and_then(|n| <[u8; 24]>::try_from(n).ok()).ok_or_else(damaged)?;
        let sealed = STANDARD.decode(&d.sealed).map_err(|_| damaged())?;
        let aad = Self::associated_data(t, name);
        let plain = self
            .cipher
            .decrypt(&XNonce::from(nonce), Payload { msg: &sealed, aad: &aad })
            .map_err(|_| damaged())?;
        String::from_utf8(plain).map_err(|_| damaged())
    }
}

/// What a secret's record keeps.
#[derive(Clone, Serialize, Deserialize)]
pub struct SecretData {
    name: String,
    description: String,
    /// Base64 of the 24-byte nonce.
    nonce: String,
    /// Base64 of the ciphertext and its 16-byte tag.
    sealed: String,
    /// The id of the key that sealed it ([`SecretsKey`]).
    key_id: String,
}

impl Resource for Secret {
    const KIND: Kind = Kind::Secret;
    type Data = SecretData;
    fn from_parts(rec: &Record, d: SecretData) -> Self {
        Secret {
            name: d.name,
            description: d.description,
            created_at: rec.created_at,
            updated_at: rec.updated_at,
        }
    }
}

/// `{{ secrets.NAME }}`, with or without spaces inside the braces.
static REFERENCE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\{\{\s*secrets\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}").expect("the pattern compiles")
});

impl App {
    /// The key, or the 409 saying how to configure one.
    fn secrets_key(&self, doing: &str) -> Result<&SecretsKey> {
        self.secrets_key.as_deref().ok_or_else(|| {
            Error::Conflict(format!("no secrets key is configured, so {doing}: {HOW_TO_CONFIGURE}"))
        })
    }

    /// The id of the tenant's secret `name`, or a 404 naming it.
    async fn secret_id(&self, t: Tenant, name: &str) -> Result<Uuid> {
        self.store
            .lookup_unique(t.0, Kind::Secret, SCOPE, name)
            .await?
            .ok_or_else(|| Error::NotFound(NotFound::Secret { name: name.to_string() }))
    }

    /// A 404 of the record of secret `name` (deleted meanwhile) as one naming it.
    fn named(name: &str) -> impl Fn(Error) -> Error + '_ {
        move |e| match e {
            Error::NotFound(NotFound::Record { kind: Kind::Secret, .. }) => {
                Error::NotFound(NotFound::Secret { name: name.to_string() })
            }
            e => e,
        }
    }

    pub async fn secret_create(&self, t: Tenant, req: CreateSecretRequest) -> Result<Secret> {
        let key = self.secrets_key("secrets cannot be stored")?;
        let data = key.seal(t, &req.name, &req.value, req.description)?;
        let mut rec = Record::fresh(Kind::Secret, SCOPE, encode(&data)?);
        rec.unique = Some(req.name.clone());
        // The one record is new (a fresh id): a conflict is its name's.
        self.insert_resource(t, rec, Vec::new()).await.map_err(|e| match e {
            Error::Conflict(_) => Error::Conflict(format!(
                "a secret named '{}' already exists: replace its value with PUT /api/secrets/{}",
                req.name, req.name
            )),
            e => e,
        })
    }

    /// The tenant's secrets (never their values).
    pub async fn secret_list(&self, t: Tenant, q: &ListQuery) -> Result<Vec<Secret>> {
        self.list_resources(t, SCOPE, q).await
    }

    /// Replaces the value and description of the tenant's secret `name` (which must exist).
    pub async fn secret_update(&self, t: Tenant, name: &str, req: UpdateSecretRequest) -> Result<Secret> {
        let key = self.secrets_key("secrets cannot be stored")?;
        let id = self.secret_id(t, name).await?;
        let data = encode(&key.seal(t, name, &req.value, req.description)?)?;
        self.update_resource(t, id, |rec| {
            rec.data = data.clone();
            Ok(())
        })
        .await
        .map_err(Self::named(name))
    }

    pub async fn secret_delete(&self, t: Tenant, name: &str) -> Result<()> {
        let id = self.secret_id(t, name).await?;
        let op = Op::Delete { kind: Kind::Secret, id, version: None };
        self.store.commit(t.0, vec![op]).await.map_err(|e| Self::named(name)(e.into()))
    }

    /// The value of the tenant's secret `name`: for the tools the server
    /// runs, never for an answer. A 404 naming it when there is none; a 409
    /// when no key is configured or the value was sealed under another key.
    pub async fn secret_value(&self, t: Tenant, name: &str) -> Result<String> {
        let id = self.secret_id(t, name).await?;
        let rec = self.load(t, Kind::Secret, id).await.map_err(Self::named(name))?;
        let data = decode_data::<Secret>(&rec)?;
        self.secrets_key(&format!("secret '{name}' cannot be read"))?.open(t, &data)
    }

    /// `text` with every `{{ secrets.NAME }}` (spaces inside the braces
    /// optional) replaced by the value of the tenant's secret NAME; an unknown
    /// name is an error naming it. Anything else in braces is left as it is.
    pub async fn resolve_secrets(&self, t: Tenant, text: &str) -> Result<String> {
        let mut out = String::with_capacity(text.len());
        let mut values: Vec<(&str, String)> = Vec::new();
        let mut last = 0;
        for caps in REFERENCE.captures_iter(text) {
            let (whole, name) = (caps.get(0).expect("a match"), caps.get(1).expect("a name").as_str());
            let value = match values.iter().find(|(n, _)| *n == name) {
                Some((_, v)) => v.clone(),
                None => {
                    let v = self.secret_value(t, name).await?;
                    values.push((name, v.clone()));
                    v
                }
            };
            out.push_str(&text[last..whole.start()]);
            out.push_str(&value);
            last = whole.end();
        }
        out.push_str(&text[last..]);
        Ok(out)
    }

    /// The digest an `Idempotency-Key` remembers of a secret request's body:
    /// keyed, since the body holds a value that a plain digest would let
    /// anyone reading the store guess at. Unkeyed without a key (such a
    /// request is refused, and a refusal is not remembered).
    pub fn secret_request_digest(&self, body: [u8; 32]) -> [u8; 32] {
        match &self.secrets_key {
            Some(key) => Sha256::new().chain_update(key.request_key).chain_update(body).finalize().into(),
            None => body,
        }
    }

    /// Installs the key that seals secrets (none: secrets cannot be created).
    pub fn with_secrets_key(mut self, key: Option<SecretsKey>) -> Self {
        self.secrets_key = key.map(Arc::new);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sled_store::{Durability, SledStore};

    const HEX_KEY: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

    fn key() -> SecretsKey {
        SecretsKey::parse(HEX_KEY).unwrap()
    }

    fn tenant(n: u128) -> Tenant {
        Tenant(Uuid::from_u128(n))
    }

    async fn app_with(key: Option<SecretsKey>) -> (tempfile::TempDir, App) {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SledStore::open(dir.path(), Durability::Flush).unwrap());
        (dir, App::new(store).await.unwrap().with_secrets_key(key))
    }

    fn create(name: &str, value: &str) -> CreateSecretRequest {
        CreateSecretRequest { name: name.into(), value: value.into(), description: String::new() }
    }

    #[test]
    fn a_key_is_64_hex_characters_or_base64_of_32_bytes() {
        let bytes: Vec<u8> = (0u8..32).collect();
        let id = key().id;
        assert_eq!(SecretsKey::parse(&STANDARD.encode(&bytes)).unwrap().id, id);
        assert_eq!(SecretsKey::parse(&STANDARD_NO_PAD.encode(&bytes)).unwrap().id, id);
        assert_eq!(SecretsKey::parse(&format!(" {}\n", HEX_KEY.to_uppercase())).unwrap().id, id);
        let short = SecretsKey::parse(&HEX_KEY[..62]).unwrap_err();
        assert!(short.contains("62 characters"), "{short}");
        let wrong = SecretsKey::parse(&STANDARD.encode([1u8; 16])).unwrap_err();
        assert!(wrong.contains("16 bytes, not 32"), "{wrong}");
    }

    #[test]
    fn a_named_variable_that_is_missing_or_malformed_is_an_error_naming_it() {
        let config = SecretsConfig { key_env: Some("MY_SECRETS_KEY".into()) };
        let missing = SecretsKey::from_config(&config, |_| None).unwrap_err().to_string();
        assert!(missing.contains("MY_SECRETS_KEY") && missing.contains("not set"), "{missing}");
        let bad =
            SecretsKey::from_config(&config, |_| Some("not-a-key-at-all".into())).unwrap_err().to_string();
        assert!(bad.contains("MY_SECRETS_KEY") && !bad.contains("not-a-key-at-all"), "{bad}");
        let good = SecretsKey::from_config(&config, |k| (k == "MY_SECRETS_KEY").then(|| HEX_KEY.into()));
        assert!(good.unwrap().is_some());
        assert!(SecretsKey::from_config(&SecretsConfig::default(), |_| None).unwrap().is_none());
        assert!(!format!("{:?}", key()).contains(HEX_KEY), "Debug shows the key's id only");
    }

    #[test]
    fn a_sealed_value_holds_no_plaintext_and_opens_only_as_its_tenant_and_name() {
        let (key, t) = (key(), tenant(1));
        let value = "hunter2-very-secret-value";
        let data = key.seal(t, "API_TOKEN", value, "d".into()).unwrap();
        let stored = serde_json::to_string(&data).unwrap();
        assert!(!stored.contains(value) && !stored.contains(&STANDARD.encode(value)), "{stored}");
        assert_eq!(key.open(t, &data).unwrap(), value);
        // Two seals of one value differ (a new nonce each).
        assert_ne!(key.seal(t, "API_TOKEN", value, "d".into()).unwrap().sealed, data.sealed);
        // Moved to another tenant, or renamed: it does not open.
        assert!(matches!(key.open(tenant(2), &data), Err(Error::Internal(_))));
        let renamed = SecretData { name: "OTHER".into(), ..data.clone() };
        assert!(matches!(key.open(t, &renamed), Err(Error::Internal(_))));
        // Another key: a 409 saying so, naming the secret.
        let other = SecretsKey::from_bytes(&[7u8; 32]);
        match other.open(t, &data) {
            Err(Error::Conflict(m)) => {
                assert!(m.contains("API_TOKEN") && m.contains("another secrets key"), "{m}")
            }
            other => panic!("expected a conflict, got {:?}", other.map(|_| ())),
        }
        // A key id forged to match does not help either.
        let forged = SecretData { key_id: other.id.clone(), ..data };
        assert!(matches!(other.open(t, &forged), Err(Error::Internal(_))));
    }

    #[tokio::test]
    async fn secret_value_answers_the_value_of_the_tenants_own_secret() {
        let (_dir, app) = app_with(Some(key())).await;
        let (a, b) = (tenant(1), tenant(2));
        app.secret_create(a, create("TOKEN", "value-a")).await.unwrap();
        app.secret_create(b, create("TOKEN", "value-b")).await.unwrap();
        assert_eq!(app.secret_value(a, "TOKEN").await.unwrap(), "value-a");
        assert_eq!(app.secret_value(b, "TOKEN").await.unwrap(), "value-b");
        let missing = app.secret_value(a, "NOPE").await.unwrap_err();
        assert_eq!(missing.to_string(), "secret 'NOPE' not found");
        let replaced = UpdateSecretRequest { value: "rotated".into(), description: "new".into() };
        assert_eq!(app.secret_update(a, "TOKEN", replaced).await.unwrap().description, "new");
        assert_eq!(app.secret_value(a, "TOKEN").await.unwrap(), "rotated");
        // The record holds no plaintext.
        let id = app.secret_id(a, "TOKEN").await.unwrap();
        let rec = app.store.get(a.0, Kind::Secret, id).await.unwrap().unwrap();
        assert!(!serde_json::to_string(&rec).unwrap().contains("rotated"));
    }

    #[tokio::test]
    async fn resolve_secrets_replaces_every_reference_and_names_an_unknown_one() {
        let (_dir, app) = app_with(Some(key())).await;
        let t = tenant(1);
        app.secret_create(t, create("TOKEN", "s3cr3t")).await.unwrap();
        app.secret_create(t, create("_user2", "ada")).await.unwrap();
        let text = "Bearer {{ secrets.TOKEN }} as {{secrets._user2}}:{{  secrets.TOKEN}} {{ other.x }} {{ secrets. }}";
        assert_eq!(
            app.resolve_secrets(t, text).await.unwrap(),
            "Bearer s3cr3t as ada:s3cr3t {{ other.x }} {{ secrets. }}"
        );
        assert_eq!(app.resolve_secrets(t, "no references").await.unwrap(), "no references");
        let err = app.resolve_secrets(t, "{{ secrets.TOKEN }} {{ secrets.MISSING }}").await.unwrap_err();
        assert!(matches!(err, Error::NotFound(_)) && err.to_string().contains("'MISSING'"), "{err}");
        // Another tenant's secrets are not there.
        let err = app.resolve_secrets(tenant(2), "{{ secrets.TOKEN }}").await.unwrap_err();
        assert_eq!(err.to_string(), "secret 'TOKEN' not found");
    }

    #[tokio::test]
    async fn without_a_key_secrets_are_listed_and_deleted_but_not_created_or_read() {
        let (dir, app) = app_with(Some(key())).await;
        let t = tenant(1);
        app.secret_create(t, create("TOKEN", "v")).await.unwrap();
        let app = app.with_secrets_key(None);
        let err = app.secret_create(t, create("OTHER", "v")).await.unwrap_err();
        assert!(matches!(&err, Error::Conflict(m) if m.contains("key_env")), "{err}");
        let err = app.secret_value(t, "TOKEN").await.unwrap_err();
        assert!(matches!(&err, Error::Conflict(m) if m.contains("'TOKEN'")), "{err}");
        let q = ListQuery::oldest_first(0, 10);
        assert_eq!(app.secret_list(t, &q).await.unwrap().len(), 1);
        app.secret_delete(t, "TOKEN").await.unwrap();
        assert!(app.secret_list(t, &q).await.unwrap().is_empty());
        drop(dir);
    }
}
