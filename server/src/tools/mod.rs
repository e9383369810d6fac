//! The outbound side of tools the server runs: where they may send requests
//! ([`outbound`], for `api_call` and MCP tools alike), the `api_call` request
//! itself ([`api_call`]) and the MCP client ([`mcp`]). What a tool is, and when one runs, belong to the domain (`app`)
//! and the executions (`exec`).

pub mod api_call;
pub mod mcp;
pub mod outbound;
