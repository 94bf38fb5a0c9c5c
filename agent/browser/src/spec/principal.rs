//! Who acts (AIP-63 C7, L7): a human on an operator channel, or an agent's tool call. They are
//! different types, so a function that needs the operator cannot be handed an agent, and the
//! tool surface, which only ever holds an [`AgentCaller`], has nothing to hand over.
//!
//! ```
//! use pap_browser::spec::{Operator, OperatorReset};
//! // The operator's channel names itself (the command line), and only then may reset.
//! let operator = Operator::from_operator_channel("cli");
//! let _reset = OperatorReset::new(&operator);
//! ```
//!
//! ```compile_fail
//! // An operator cannot be assembled from its parts: the only constructor is the named one.
//! let operator = pap_browser::spec::Operator { via: "tool" };
//! ```
//!
//! ```compile_fail
//! // Leaving crash-looping takes the operator's proof; an agent caller is not one (L7).
//! use pap_browser::spec::{AgentCaller, OperatorReset};
//! let reset = OperatorReset::new(&AgentCaller::local());
//! ```

/// Proof that a human, on an operator channel (the `pap-agent` command line, a person's own
/// UI), is acting. Grants, sink acknowledgements, pairing revocations and crash-loop resets
/// need one; agent tool calls never hold one.
#[derive(Clone, Debug)]
pub struct Operator {
    via: &'static str,
}

impl Operator {
    /// The operator, on the channel `via` (`cli`).
    ///
    /// # Security Warning
    ///
    /// Call this only where a person is at the controls: a command line or UI that an agent's
    /// tool calls cannot reach. A tool surface never makes one; anything made here can grant
    /// session material for any domain (C7).
    pub fn from_operator_channel(via: &'static str) -> Self {
        Self { via }
    }

    /// The channel (`cli`), as the ledger records it.
    pub fn via(&self) -> &'static str {
        self.via
    }
}

/// An agent's tool call: from the local runtime, or from an AIP-59 paired device (C12).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AgentCaller {
    device_id: Option<String>,
}

impl AgentCaller {
    /// A call from the local agent runtime (no paired device).
    pub fn local() -> Self {
        Self { device_id: None }
    }

    /// A call from the paired device `device_id`.
    pub fn paired(device_id: impl Into<String>) -> Self {
        Self {
            device_id: Some(device_id.into()),
        }
    }

    /// The paired device the call came from, if any.
    pub fn device_id(&self) -> Option<&str> {
        self.device_id.as_deref()
    }
}
