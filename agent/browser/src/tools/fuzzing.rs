//! Entry point for the `tool_input` fuzz target in `conformance/fuzz/` (feature `fuzzing`, never in a
//! product build): a tool caller's input, parsed as each reserved tool of the tool host parses
//! it. Not a stable interface.

use serde_json::Value;

use super::input::{
    CdpSend, Click, Download, Evaluate, Fill, GetDom, GetRequestBody, Navigate, OnTarget, Screenshot, Tabs,
};
use super::tabs_input;
use crate::spec::{ToolError, ToolId};

/// The errors of parsing `input` as the input of every tool the tool host serves (the consent
/// tools parse theirs the same way, through [`ToolId::parse_input`]).
pub fn tool_input_errors(input: &Value) -> Vec<ToolError> {
    fn parsed<T: serde::de::DeserializeOwned>(tool: ToolId, input: &Value) -> Option<ToolError> {
        tool.parse_input::<T>(input).err()
    }
    [
        parsed::<Navigate>(ToolId::Navigate, input),
        parsed::<Evaluate>(ToolId::Evaluate, input),
        parsed::<GetDom>(ToolId::GetDom, input),
        parsed::<Screenshot>(ToolId::Screenshot, input),
        parsed::<Click>(ToolId::Click, input),
        parsed::<Fill>(ToolId::Fill, input),
        parsed::<Tabs>(ToolId::Tabs, &tabs_input(input)),
        parsed::<OnTarget>(ToolId::ListRequests, input),
        parsed::<GetRequestBody>(ToolId::GetRequestBody, input),
        parsed::<CdpSend>(ToolId::CdpSend, input),
        parsed::<Download>(ToolId::Download, input),
    ]
    .into_iter()
    .flatten()
    .collect()
}
