//! The Agent Client Protocol on the wire: external agents inside mia's chat
//! (mia as the client, [`client`]) and mia's own agent served to other
//! editors (`mia-acp`, [`server`]).

mod approved_writes;
pub mod client;
mod client_requests;
pub mod client_sessions;
pub mod guarded_lines;
pub mod line_cap;
pub mod mcp_servers;
mod permission_diff;
pub mod server;
pub mod session_list;
