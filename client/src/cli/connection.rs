//! Where the command line finds the server and its key: flags, then the
//! environment (`AGENT_PLATFORM_URL`, `AGENT_PLATFORM_KEY`), then a profile of
//! the profile file (`$XDG_CONFIG_HOME/agent-platform/cli.toml`, else
//! `~/.config/agent-platform/cli.toml`):
//!
//! ```toml
//! [profiles.default]
//! url = "http://127.0.0.1:8080"
//! key = "ap_..."
//! ```
//!
//! The profile is `--profile`, else `AGENT_PLATFORM_PROFILE`, else `default`.
//! Resolution is pure (the environment and the file are passed in), so it is
//! tested without touching either.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What the flags said.
#[derive(Clone, Debug, Default)]
pub struct Flags {
    pub url: Option<String>,
    pub key: Option<String>,
    pub profile: Option<String>,
}

/// The server's root URL and the API key to send it.
#[derive(Clone, PartialEq, Eq)]
pub struct Connection {
    /// e.g. `http://127.0.0.1:8080`, no trailing slash.
    pub url: String,
    /// `None` only when none was given and none is needed.
    pub key: Option<String>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is a secret: never shown, not even by `{:?}`.
        f.debug_struct("Connection").field("url", &self.url).field("key", &"<hidden>").finish()
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileFile {
    #[serde(default)]
    profiles: BTreeMap<String, Profile>,
}

#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Profile {
    url: Option<String>,
    key: Option<String>,
}

/// The profile file's path: `$XDG_CONFIG_HOME/agent-platform/cli.toml` when
/// that variable holds an absolute path, else `$HOME/.config/agent-platform/cli.toml`.
pub fn profile_path(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let xdg = env("XDG_CONFIG_HOME").map(PathBuf::from).filter(|p| p.is_absolute());
    let config =
        xdg.or_else(|| env("HOME").filter(|h| !h.is_empty()).map(|h| Path::new(&h).join(".config")))?;
    Some(config.join("agent-platform").join("cli.toml"))
}

/// Resolves the connection: each of URL and key from the flags, else the
/// environment, else the profile. `read` answers a file's text (`None` when
/// it does not exist). A profile named by `--profile` or
/// `AGENT_PLATFORM_PROFILE` must exist; `default` is read only when something
/// is missing, and may be absent. A missing key is an error when `need_key`.
pub fn resolve(
    flags: &Flags,
    env: &dyn Fn(&str) -> Option<String>,
    read: &dyn Fn(&Path) -> std::io::Result<Option<String>>,
    need_key: bool,
) -> Result<Connection, String> {
    let env = |name: &str| env(name).filter(|v| !v.is_empty());
    let named = flags.profile.clone().or_else(|| env("AGENT_PLATFORM_PROFILE"));
    let name = named.clone().unwrap_or_else(|| "default".to_string());
    let path = profile_path(&env);
    let shown = path.as_ref().map_or_else(
        || "~/.config/agent-platform/cli.toml (no HOME is set)".to_string(),
        |p| p.display().to_string(),
    );
    let mut url = flags.url.clone().or_else(|| env("AGENT_PLATFORM_URL"));
    let mut key = flags.key.clone().or_else(|| env("AGENT_PLATFORM_KEY"));
    if named.is_some() || url.is_none() || key.is_none() {
        let profile = match &path {
            Some(path) => match read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))? {
                Some(text) => {
                    parse(&text).map_err(|e| format!("{}: {e}", path.display()))?.profiles.remove(&name)
                }
                None => None,
            },
            None => None,
        };
        let profile = match profile {
            Some(p) => p,
            None if named.is_some() => {
                return Err(format!(
                    "no profile '{name}': add [profiles.{name}] with `url` and `key` to {shown}"
                ));
            }
            None => Profile::default(),
        };
        url = url.or(profile.url);
        key = key.or(profile.key);
    }
    let missing = |what: &str, flag: &str, var: &str, field: &str| {
        format!("no {what}: pass {flag}, set {var}, or set `{field}` under [profiles.{name}] in {shown}")
    };
    let url = url.ok_or_else(|| missing("server URL", "--url", "AGENT_PLATFORM_URL", "url"))?;
    if key.is_none() && need_key {
        return Err(missing("API key", "--key", "AGENT_PLATFORM_KEY", "key"));
    }
    let parsed =
        reqwest::Url::parse(&url).map_err(|e| format!("the server URL '{url}' is not a URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("the server URL '{url}' is not http:// or https://"));
    }
    Ok(Connection { url: url.trim_end_matches('/').to_string(), key })
}

/// The profile file, its errors said without quoting its lines (they may hold a key).
fn parse(text: &str) -> Result<ProfileFile, String> {
    toml::from_str(text).map_err(|e| match e.span() {
        Some(span) => {
            let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
            format!("line {line}: {}", e.message())
        }
        None => e.message().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    fn file(text: &'static str) -> impl Fn(&Path) -> std::io::Result<Option<String>> {
        move |path| {
            assert_eq!(path, Path::new("/home/ada/.config/agent-platform/cli.toml"));
            Ok(Some(text.to_string()))
        }
    }

    fn no_file(_: &Path) -> std::io::Result<Option<String>> {
        Ok(None)
    }

    const PROFILES: &str = r#"
[profiles.default]
url = "http://profile-default:1"
key = "ap_profile_default"

[profiles.prod]
url = "https://prod.example/"
key = "ap_profile_prod"
"#;

    #[test]
    fn flags_beat_the_environment_which_beats_the_profile() {
        let home = [("HOME", "/home/ada")];
        let c = resolve(&Flags::default(), &env(&home), &file(PROFILES), true).unwrap();
        assert_eq!(
            c,
            Connection { url: "http://profile-default:1".into(), key: Some("ap_profile_default".into()) }
        );

        let vars = [("HOME", "/home/ada"), ("AGENT_PLATFORM_URL", "http://env:2")];
        let c = resolve(&Flags::default(), &env(&vars), &file(PROFILES), true).unwrap();
        assert_eq!(c, Connection { url: "http://env:2".into(), key: Some("ap_profile_default".into()) });

        let vars =
            [("HOME", "/home/ada"), ("AGENT_PLATFORM_URL", "http://env:2"), ("AGENT_PLATFORM_KEY", "ap_env")];
        let flags = Flags { key: Some("ap_flag".into()), ..Flags::default() };
        let c = resolve(&flags, &env(&vars), &file(PROFILES), true).unwrap();
        assert_eq!(c, Connection { url: "http://env:2".into(), key: Some("ap_flag".into()) });
    }

    #[test]
    fn the_profile_is_the_flag_else_the_environment_else_default() {
        let vars = [("HOME", "/home/ada"), ("AGENT_PLATFORM_PROFILE", "prod")];
        let c = resolve(&Flags::default(), &env(&vars), &file(PROFILES), true).unwrap();
        assert_eq!(c, Connection { url: "https://prod.example".into(), key: Some("ap_profile_prod".into()) });
        let flags = Flags { profile: Some("default".into()), ..Flags::default() };
        let c = resolve(&flags, &env(&vars), &file(PROFILES), true).unwrap();
        assert_eq!(c.key.as_deref(), Some("ap_profile_default"));
    }

    #[test]
    fn xdg_config_home_holds_the_file_when_absolute() {
        let vars = env(&[("HOME", "/home/ada"), ("XDG_CONFIG_HOME", "/etc/xdg")]);
        assert_eq!(profile_path(&vars).unwrap(), Path::new("/etc/xdg/agent-platform/cli.toml"));
        let vars = env(&[("HOME", "/home/ada"), ("XDG_CONFIG_HOME", "relative")]);
        assert_eq!(profile_path(&vars).unwrap(), Path::new("/home/ada/.config/agent-platform/cli.toml"));
    }

    #[test]
    fn a_missing_key_names_every_way_to_give_it() {
        let vars = [("HOME", "/home/ada"), ("AGENT_PLATFORM_URL", "http://env:2")];
        let err = resolve(&Flags::default(), &env(&vars), &no_file, true).unwrap_err();
        assert_eq!(
            err,
            "no API key: pass --key, set AGENT_PLATFORM_KEY, or set `key` under [profiles.default] in \
             /home/ada/.config/agent-platform/cli.toml"
        );
        let err = resolve(&Flags::default(), &env(&[("HOME", "/home/ada")]), &no_file, true).unwrap_err();
        assert!(err.starts_with("no server URL: pass --url, set AGENT_PLATFORM_URL, or set `url`"), "{err}");
    }

    #[test]
    fn an_operation_that_needs_no_key_goes_without() {
        let vars = [("HOME", "/home/ada"), ("AGENT_PLATFORM_URL", "http://env:2")];
        let c = resolve(&Flags::default(), &env(&vars), &no_file, false).unwrap();
        assert_eq!(c, Connection { url: "http://env:2".into(), key: None });
    }

    #[test]
    fn a_named_profile_must_exist() {
        let flags =
            Flags { profile: Some("staging".into()), url: Some("http://x".into()), key: Some("k".into()) };
        let err = resolve(&flags, &env(&[("HOME", "/home/ada")]), &file(PROFILES), true).unwrap_err();
        assert!(err.starts_with("no profile 'staging': add [profiles.staging]"), "{err}");
    }

    #[test]
    fn a_bad_profile_file_is_named_without_quoting_it() {
        let bad = "[profiles.default]\nurl = \"http://x\"\nkee = \"ap_secret_value\"\n";
        let read = |_: &Path| Ok(Some(bad.to_string()));
        let err = resolve(&Flags::default(), &env(&[("HOME", "/home/ada")]), &read, true).unwrap_err();
        assert!(
            err.starts_with("/home/ada/.config/agent-platform/cli.toml: line 3: unknown field `kee`"),
            "{err}"
        );
        assert!(!err.contains("ap_secret_value"), "{err}");
    }

    #[test]
    fn a_url_must_be_http() {
        let flags = Flags { url: Some("127.0.0.1:8080".into()), key: Some("k".into()), ..Flags::default() };
        let err = resolve(&flags, &env(&[]), &no_file, true).unwrap_err();
        assert!(err.contains("127.0.0.1:8080"), "{err}");
    }

    #[test]
    fn the_key_is_not_in_debug_output() {
        let c = Connection { url: "http://x".into(), key: Some("ap_secret".into()) };
        assert!(!format!("{c:?}").contains("ap_secret"));
    }
}
