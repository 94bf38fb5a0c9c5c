//! PAP messages on the wire, one module per message, each parsing next to its type.

pub(crate) mod browser_assertion;
pub(crate) mod discovery;
pub(crate) mod dpop;
pub(crate) mod ids;
pub(crate) mod jwt_assertion;
pub(crate) mod oauth;
pub(crate) mod operation;
