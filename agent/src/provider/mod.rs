//! The AIP-63 provider kit (agentbrowser/v1): the instance lifecycle and its supervisor.
//! (Manifests, the tool surface and the conformance suite build on these.)

pub(crate) mod lifecycle;
pub(crate) mod manifest;
pub(crate) mod processes;
pub(crate) mod supervisor;
pub(crate) mod tools;
