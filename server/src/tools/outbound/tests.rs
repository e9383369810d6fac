use std::net::IpAddr;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

use super::{Outbound, refusal};

#[test]
fn addresses_are_classified() {
    let table: &[(&str, Option<&str>)] = &[
        ("8.8.8.8", None),
        ("1.1.1.1", None),
        ("172.32.0.1", None),
        ("100.128.0.1", None),
        ("169.253.0.1", None),
        ("2606:4700:4700::1111", None),
        ("0.0.0.0", Some("an unspecified")),
        ("0.1.2.3", Some("an unspecified")),
        ("::", Some("an unspecified")),
        ("127.0.0.1", Some("a loopback")),
        ("127.255.0.9", Some("a loopback")),
        ("::1", Some("a loopback")),
        ("169.254.169.254", Some("a link-local")),
        ("fe80::1", Some("a link-local")),
        ("febf::1", Some("a link-local")),
        ("10.1.2.3", Some("a private")),
        ("172.16.0.1", Some("a private")),
        ("172.31.255.255", Some("a private")),
        ("192.168.1.1", Some("a private")),
        ("fc00::1", Some("a private")),
        ("fd00:ec2::254", Some("a private")),
        ("100.64.0.1", Some("a shared (CGNAT)")),
        ("100.127.255.255", Some("a shared (CGNAT)")),
        // IPv4-mapped IPv6: as the IPv4 address they carry.
        ("::ffff:127.0.0.1", Some("a loopback")),
        ("::ffff:169.254.169.254", Some("a link-local")),
        ("::ffff:10.0.0.1", Some("a private")),
        ("::ffff:0.0.0.0", Some("an unspecified")),
        ("::ffff:8.8.8.8", None),
    ];
    for (ip, expected) in table {
        assert_eq!(refusal(ip.parse::<IpAddr>().unwrap()), *expected, "{ip}");
    }
}

#[test]
fn literal_addresses_are_checked_against_the_list() {
    let none = Outbound::new::<&str>([]).unwrap();
    for url in [
        "http://127.0.0.1:9000/",
        "http://[::1]/",
        "http://[::ffff:7f00:1]/",
        "http://0x7f.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://0.0.0.0:80/",
        "https://192.168.0.1/",
    ] {
        let err = none.check_url(&url.parse().unwrap()).unwrap_err();
        assert!(err.contains("is not allowed") && err.contains("tools.allowed_hosts"), "{url}: {err}");
        assert!(err.contains("AGENT_PLATFORM_TOOLS_ALLOWED_HOSTS"), "{err}");
    }
    let err = none.check_url(&"http://127.0.0.1:9000/x".parse().unwrap()).unwrap_err();
    assert!(err.starts_with("127.0.0.1:9000 is not allowed: it is a loopback address"), "{err}");
    // Public addresses and names pass (names are checked once resolved).
    for url in ["https://8.8.8.8/", "https://api.example.com/", "http://localhost:1/"] {
        none.check_url(&url.parse().unwrap()).unwrap();
    }
    let err = none.check_url(&"ftp://8.8.8.8/".parse().unwrap()).unwrap_err();
    assert!(err.contains("only http and https"), "{err}");

    let listed = Outbound::new(["127.0.0.1:9000", "[::1]", "API.Internal"]).unwrap();
    listed.check_url(&"http://127.0.0.1:9000/".parse().unwrap()).unwrap();
    listed.check_url(&"http://[::1]:1234/".parse().unwrap()).unwrap();
    listed.check_url(&"http://api.internal/".parse().unwrap()).unwrap();
    assert!(listed.check_url(&"http://127.0.0.1:9001/".parse().unwrap()).is_err());
    // A public host listed with a port: only that port.
    let public = Outbound::new(["api.example.com:8443"]).unwrap();
    public.check_url(&"https://api.example.com:8443/".parse().unwrap()).unwrap();
    assert!(public.check_url(&"https://api.example.com/".parse().unwrap()).is_err());
    assert!(listed.check_url(&"http://127.0.0.2:9000/".parse().unwrap()).is_err());
}

#[test]
fn entries_that_are_not_hosts_are_refused_naming_them() {
    for entry in ["", "http://x/", "a b", "user@host"] {
        let err = Outbound::new([entry]).unwrap_err();
        assert!(err.contains(&format!("{entry:?}")) && err.contains("tools.allowed_hosts"), "{err}");
    }
}

/// A server on 127.0.0.1 answering every connection with a 200.
async fn local_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                let _ = tokio::io::AsyncReadExt::read(&mut stream, &mut buf).await;
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
                    .await;
            });
        }
    });
    port
}

#[tokio::test]
async fn a_name_resolving_to_loopback_is_refused_when_connecting_unless_listed() {
    let port = local_server().await;
    let url = format!("http://localhost:{port}/");
    let none = Outbound::new::<&str>([]).unwrap();
    let err = none.client().get(&url).send().await.unwrap_err();
    let mut chain = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(cause) = source {
        chain.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    assert!(chain.contains("localhost is not allowed: it resolves to"), "{chain}");
    assert!(chain.contains("a loopback address") && chain.contains("tools.allowed_hosts"), "{chain}");

    // Listed by name, or by its address for any port: allowed.
    for entries in [vec!["localhost".to_string()], vec!["127.0.0.1".to_string(), "[::1]".to_string()]] {
        let listed = Outbound::new(&entries).unwrap();
        listed.check_url(&url.parse().unwrap()).unwrap();
        let answer = listed.client().get(&url).send().await.unwrap();
        assert_eq!(answer.status(), 200, "{entries:?}");
    }
    // Listed with another port: refused by the check of the URL, which callers run first.
    let other_port = Outbound::new([format!("localhost:{}", port.wrapping_add(1))]).unwrap();
    let err = other_port.check_url(&url.parse().unwrap()).unwrap_err();
    assert!(err.contains(&format!("lists localhost for port {} only", port.wrapping_add(1))), "{err}");
    // An address listed for one port only does not let a name resolving to it through.
    let ip_with_port = Outbound::new([format!("127.0.0.1:{port}"), format!("[::1]:{port}")]).unwrap();
    assert!(ip_with_port.client().get(&url).send().await.is_err());
}
