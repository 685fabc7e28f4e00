//! The Agent Client Protocol on the wire: external agents inside mia's chat
//! (mia as the client, [`client`]).

pub mod client;
mod client_requests;
