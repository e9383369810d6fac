//! Where tools run by the server may send requests: one policy for `api_call`
//! and MCP tools alike.
//!
//! - **Public destinations are allowed.** Loopback, link-local (cloud metadata
//!   services included), private, shared (CGNAT) and unspecified addresses,
//!   and their IPv4-mapped IPv6 forms, are refused — unless the host is listed
//!   in `[tools] allowed_hosts` (`AGENT_PLATFORM_TOOLS_ALLOWED_HOSTS`; the
//!   former `api_call_allowed_hosts` is read as the same list).
//! - **An entry** is a host name or IP (`mcp.internal`, `127.0.0.1`, `[::1]`:
//!   any port) or a host and port (`mcp.internal:8443`: that port only); names
//!   compare without regard to case.
//! - **Checked on the address connected to**: [`Outbound::client`] resolves
//!   names itself and drops the refused addresses before it connects, so a
//!   name cannot pass the check and then resolve elsewhere (DNS rebinding); a
//!   URL with a literal IP is not resolved, so [`Outbound::check_url`], which
//!   every caller runs first, checks it (and the port of a listed host).
//! - **No redirects are followed** (a 3xx is the answer), and no proxy from
//!   the environment is used: through a proxy, the address checked would be
//!   the proxy's, not the destination's.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::config::ToolsConfig;

/// Where the setting is, for messages.
const SETTING: &str = "tools.allowed_hosts (the server's config; AGENT_PLATFORM_TOOLS_ALLOWED_HOSTS)";

/// The outbound policy, and the one HTTP client that enforces it (cheap to clone).
#[derive(Clone)]
pub struct Outbound {
    allowed: Arc<[Allowed]>,
    client: reqwest::Client,
}

impl std::fmt::Debug for Outbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbound").field("allowed", &self.allowed).finish_non_exhaustive()
    }
}

/// One entry of the list: a host as a URL spells it (lower case, IPv6 in
/// brackets) and, when given, the only port allowed.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Allowed {
    host: String,
    port: Option<u16>,
}

impl Outbound {
    /// The policy of `[tools]` (both lists, merged).
    pub fn from_config(tools: &ToolsConfig) -> Result<Outbound, String> {
        Outbound::new(tools.allowed_hosts())
    }

    /// The policy allowing, besides public destinations, the hosts `allowed`
    /// (entries as in the module's docs). An entry that is not a host (or
    /// host and port) is an error naming it.
    pub fn new<S: AsRef<str>>(allowed: impl IntoIterator<Item = S>) -> Result<Outbound, String> {
        let allowed: Arc<[Allowed]> = allowed
            .into_iter()
            .map(|entry| parse_entry(entry.as_ref()))
            .collect::<Result<Vec<_>, _>>()?
            .into();
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .dns_resolver(PolicyResolver { allowed: allowed.clone() })
            .build()
            .map_err(|e| format!("cannot build the HTTP client of server-run tools: {e}"))?;
        Ok(Outbound { allowed, client })
    }

    /// Whether a request to `url` may go out: an http(s) URL whose host is
    /// listed (with its port, when the entries give ports), or not an address the
    /// policy refuses. A name that is not listed passes here; the client checks
    /// what it resolves to. A host listed only with other ports is refused.
    pub fn check_url(&self, url: &Url) -> Result<(), String> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("{url}: only http and https URLs can be called"));
        }
        let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
            return Err(format!("{url} has no host"));
        };
        let listed: Vec<Option<u16>> =
            self.allowed.iter().filter(|a| a.host == host).map(|a| a.port).collect();
        if !listed.is_empty() {
            if listed.iter().any(|p| p.is_none_or(|p| p == port)) {
                return Ok(());
            }
            // The resolver lets a listed name reach any address (it does not
            // see the port), so the port is checked here.
            let ports: Vec<String> = listed.iter().flatten().map(u16::to_string).collect();
            return Err(format!(
                "{host}:{port} is not allowed: {SETTING} lists {host} for port {} only",
                ports.join(", ")
            ));
        }
        // A URL spells an IPv6 host in brackets, and an IPv4 one in dotted
        // decimal whatever form it was written in (`0x7f.1` is `127.0.0.1`).
        let Ok(ip) = host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() else {
            return Ok(());
        };
        match refusal(ip) {
            None => Ok(()),
            Some(kind) => {
                let shown = match url.port() {
                    Some(port) => format!("{host}:{port}"),
                    None => host.to_string(),
                };
                Err(format!(
                    "{shown} is not allowed: it is {kind} address, refused unless listed in {SETTING}"
                ))
            }
        }
    }

    /// The HTTP client that keeps to the policy: follows no redirect, uses no
    /// proxy, connects to no refused address a name resolves to. Callers still
    /// run [`Outbound::check_url`] first (literal IPs, ports of listed hosts).
    pub fn client(&self) -> reqwest::Client {
        self.client.clone()
    }
}

fn parse_entry(entry: &str) -> Result<Allowed, String> {
    let entry = entry.trim();
    // Parsed as a URL's authority, so that case, IDNA and IPv6 brackets
    // compare the way a request's URL does.
    let parsed = Url::parse(&format!("http://{entry}/"))
        .ok()
        .filter(|u| u.username().is_empty() && u.password().is_none() && u.host_str().is_some())
        .filter(|u| u.path() == "/" && u.query().is_none() && u.fragment().is_none());
    match parsed {
        Some(url) if !entry.is_empty() => {
            Ok(Allowed { host: url.host_str().unwrap_or_default().to_string(), port: url.port() })
        }
        _ => Err(format!(
            "tools.allowed_hosts: {entry:?} is not a host name, an IP, or one of them with a port \
             (e.g. \"mcp.internal\", \"10.0.0.5:8080\", \"[::1]\")"
        )),
    }
}

/// Why `ip` is refused unless listed ("a loopback", ...), or `None` for a
/// public address.
pub fn refusal(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => refusal_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => refusal_v4(v4),
            None => refusal_v6(v6),
        },
    }
}

fn refusal_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    match (a, b) {
        // 0.0.0.0/8: "this network"; connecting to it reaches this host.
        (0, _) => Some("an unspecified"),
        (127, _) => Some("a loopback"),
        // Cloud metadata services (169.254.169.254) live here.
        (169, 254) => Some("a link-local"),
        (10, _) | (192, 168) => Some("a private"),
        (172, 16..=31) => Some("a private"),
        (100, 64..=127) => Some("a shared (CGNAT)"),
        _ => None,
    }
}

fn refusal_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let first = ip.segments()[0];
    if ip.is_unspecified() {
        Some("an unspecified")
    } else if ip.is_loopback() {
        Some("a loopback")
    } else if first & 0xffc0 == 0xfe80 {
        Some("a link-local")
    } else if first & 0xfe00 == 0xfc00 {
        // Unique local addresses (fd00:ec2::254 is a cloud's metadata service).
        Some("a private")
    } else {
        None
    }
}

/// Resolves names, then keeps only the addresses the policy allows.
struct PolicyResolver {
    allowed: Arc<[Allowed]>,
}

impl Resolve for PolicyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allowed = self.allowed.clone();
        let host = name.as_str().to_ascii_lowercase();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            // A listed name was checked with its port by `check_url`.
            if allowed.iter().any(|a| a.host == host) {
                return Ok(Box::new(addrs.into_iter()) as Addrs);
            }
            let listed_ip = |ip: IpAddr| {
                let spelled = match ip {
                    IpAddr::V4(v4) => v4.to_string(),
                    IpAddr::V6(v6) => format!("[{v6}]"),
                };
                // Only an entry for any port: the resolver does not see the port.
                allowed.iter().any(|a| a.host == spelled && a.port.is_none())
            };
            let (kept, refused): (Vec<SocketAddr>, Vec<SocketAddr>) =
                addrs.into_iter().partition(|addr| refusal(addr.ip()).is_none() || listed_ip(addr.ip()));
            match (kept.is_empty(), refused.first()) {
                (true, Some(addr)) => {
                    let kind = refusal(addr.ip()).unwrap_or("a refused");
                    Err(format!(
                        "{host} is not allowed: it resolves to {}, {kind} address, refused unless the host \
                         is listed in {SETTING}",
                        addr.ip()
                    )
                    .into())
                }
                _ => Ok(Box::new(kept.into_iter()) as Addrs),
            }
        })
    }
}

#[cfg(test)]
mod tests;
