//! The parts of the client that need no server; the client against MCP
//! servers is tested end to end (tests/tests/e2e/mcp_client.rs).

use std::collections::BTreeMap;

use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};
use serde_json::json;

use super::{McpServer, cache_key, output_text};

#[test]
fn text_is_joined_and_other_content_described() {
    let result = CallToolResult::success(vec![
        ContentBlock::text("first"),
        ContentBlock::image("aGk=", "image/png"),
        ContentBlock::embedded_text("file:///notes.txt", "the notes"),
        ContentBlock::resource(ResourceContents::BlobResourceContents {
            uri: "file:///a.bin".into(),
            mime_type: Some("application/octet-stream".into()),
            blob: "AAAA".into(),
            meta: None,
        }),
        ContentBlock::text("last"),
    ]);
    assert_eq!(
        output_text(result),
        "first\n[image: image/png]\n[resource file:///notes.txt (text/plain)]\nthe notes\n\
         [resource file:///a.bin (application/octet-stream)] (binary, not shown)\nlast"
    );
    // Structured content alone (no text block): its JSON.
    let mut structured = CallToolResult::structured(json!({"n": 1}));
    structured.content.clear();
    assert_eq!(output_text(structured), "{\"n\":1}");
}

#[test]
fn lists_are_cached_per_url_and_headers() {
    let server = |headers: &[(&str, &str)]| McpServer {
        label: "s".into(),
        url: "https://mcp.example.com/mcp".into(),
        headers: headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>(),
    };
    let plain = cache_key(&server(&[]));
    assert_eq!(plain, cache_key(&server(&[])));
    let bearer = |token: &str| cache_key(&server(&[("authorization", token)]));
    assert_ne!(plain, bearer("Bearer a"));
    assert_ne!(bearer("Bearer a"), bearer("Bearer b"));
    assert_ne!(cache_key(&server(&[("a", "bc")])), cache_key(&server(&[("ab", "c")])));
}
