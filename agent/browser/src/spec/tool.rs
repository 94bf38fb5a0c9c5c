//! AIP-63 §2, the tool table: the reserved tool ids with their capability gates and the
//! conformance level that tests each (T1), and the resolver that considers only providers
//! declaring a needed capability, in AIP-30's preference order (T2).
//!
//! Ids, capabilities, gates and levels are closed sets here: a typo does not compile, and the
//! table is one exhaustive `match`.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::aip14::{ToolError, ToolErrorCode};

/// A capability a provider declares under `browser.capabilities` (AIP-63 §1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Capability {
    /// A CDP endpoint.
    Cdp,
    /// Downloads land in a host path.
    Downloads,
    /// A design goal, never a promise.
    Stealth,
    /// Full-page screenshots.
    FullPageScreenshot,
    /// Input at browser or OS level (the `trusted` option of click and fill).
    TrustedInput,
    /// More than one target per instance.
    MultiTarget,
    /// Natural-language actions.
    AiActions,
    /// The host can set and read cookies on a context.
    Cookies,
    /// Full storage state can be loaded.
    StorageState,
    /// A named profile survives stop.
    PersistentProfile,
}

impl Capability {
    /// Every boolean capability of the manifest (`recording` is a mode, not one of them).
    pub const ALL: [Capability; 10] = [
        Self::Cdp,
        Self::Downloads,
        Self::Stealth,
        Self::FullPageScreenshot,
        Self::TrustedInput,
        Self::MultiTarget,
        Self::AiActions,
        Self::Cookies,
        Self::StorageState,
        Self::PersistentProfile,
    ];

    /// As the spec spells it (`fullPageScreenshot`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cdp => "cdp",
            Self::Downloads => "downloads",
            Self::Stealth => "stealth",
            Self::FullPageScreenshot => "fullPageScreenshot",
            Self::TrustedInput => "trustedInput",
            Self::MultiTarget => "multiTarget",
            Self::AiActions => "aiActions",
            Self::Cookies => "cookies",
            Self::StorageState => "storageState",
            Self::PersistentProfile => "persistentProfile",
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a tool (or a level, or a profile mode) needs declared: one capability, or either of
/// `cookies` and `storageState` (session material, AIP-63 §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Gate {
    /// This capability.
    One(Capability),
    /// `cookies` or `storageState`.
    SessionMaterial,
}

impl Gate {
    /// The name a `browser:unsupported` error gives in `cause.capability` (T3).
    pub fn name(self) -> &'static str {
        match self {
            Self::One(capability) => capability.as_str(),
            Self::SessionMaterial => "cookies|storageState",
        }
    }
}

impl fmt::Display for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The conformance level that tests a tool, as a manifest claims it in `browser.conformance`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Every provider.
    Core,
    /// Input tools.
    Interaction,
    /// CDP network tools.
    Network,
    /// Downloads.
    Download,
    /// Consent and profiles.
    Profile,
}

impl Level {
    /// Every level, in the spec's order.
    pub const ALL: [Level; 5] = [
        Self::Core,
        Self::Interaction,
        Self::Network,
        Self::Download,
        Self::Profile,
    ];

    /// The level's name (`network`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Core => "core",
            Self::Interaction => "interaction",
            Self::Network => "network",
            Self::Download => "download",
            Self::Profile => "profile",
        }
    }

    /// The level named `name`, if there is one.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|level| level.name() == name)
    }

    /// What a provider must declare to claim the level (M6).
    pub fn gate(self) -> Option<Gate> {
        match self {
            Self::Core | Self::Interaction => None,
            Self::Network => Some(Gate::One(Capability::Cdp)),
            Self::Download => Some(Gate::One(Capability::Downloads)),
            Self::Profile => Some(Gate::SessionMaterial),
        }
    }
}

/// A tool id this kit serves: the ids AIP-63 reserves (T1, [`ToolId::ALL`]), and the vendor
/// tools of the page model under this project's own namespace, `pap.browser.` (T1: "a provider
/// MAY add vendor tools under its own namespace"; [`ToolId::VENDOR`]). No id creates or widens a
/// grant (C7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ToolId {
    /// `browser.navigate`: load a URL in a target.
    Navigate,
    /// `browser.evaluate`: evaluate an expression in a target.
    Evaluate,
    /// `browser.get_dom`: the document, or one selector's subtree.
    GetDom,
    /// `browser.screenshot`: the viewport, or the full page.
    Screenshot,
    /// `browser.click`: pointer input.
    Click,
    /// `browser.fill`: text input.
    Fill,
    /// `browser.act`: a natural-language action.
    Act,
    /// `browser.tabs`: list, open and close targets.
    Tabs,
    /// `browser.list_requests`: the requests a target made.
    ListRequests,
    /// `browser.get_request_body`: a captured response body.
    GetRequestBody,
    /// `browser.cdp_send`: a raw CDP command.
    CdpSend,
    /// `browser.download`: a download captured to a host path.
    Download,
    /// `browser.profile.list`: the grants in force, never values.
    ProfileList,
    /// `browser.profile.refresh`: re-read a grant's domains from its own source.
    ProfileRefresh,
    /// `browser.profile.revoke`: revoke a grant or some of its domains.
    ProfileRevoke,
    /// `pap.browser.snapshot` (vendor): the page's accessibility tree as text, a ref per
    /// actionable element, for the acting tools to name it by.
    Snapshot,
    /// `pap.browser.press_key` (vendor): one key pressed at browser level.
    PressKey,
    /// `pap.browser.hover` (vendor): the pointer moved over an element, at browser level.
    Hover,
    /// `pap.browser.select_option` (vendor): options of a `<select>` chosen.
    SelectOption,
    /// `pap.browser.wait_for` (vendor): until a text appears or goes, a navigation, or a time.
    WaitFor,
    /// `pap.browser.navigate_back` (vendor): the previous page of the tab's history.
    NavigateBack,
    /// `pap.browser.navigate_forward` (vendor): the next page of the tab's history.
    NavigateForward,
    /// `pap.browser.resize` (vendor): the tab's viewport size.
    Resize,
    /// `pap.browser.console_messages` (vendor): what the tab's pages logged to the console.
    ConsoleMessages,
    /// `pap.browser.pdf_save` (vendor): the tab's page printed to a PDF in a host path.
    PdfSave,
    /// `pap.browser.handle_dialog` (vendor): the tab's open JavaScript dialog accepted or
    /// dismissed.
    HandleDialog,
    /// `pap.browser.drag` (vendor): one element dragged onto another, at browser level.
    Drag,
    /// `pap.browser.file_upload` (vendor): files of a directory the person named, handed to a
    /// file input.
    FileUpload,
}

/// A reserved tool: its id, the gate of the tool itself (or `None`), its level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToolSpec {
    /// The tool.
    pub id: ToolId,
    /// What the tool needs at all, if anything.
    pub gate: Option<Gate>,
    /// The level that tests it.
    pub level: Level,
}

impl ToolId {
    /// Every reserved id, in the table's order.
    pub const ALL: [ToolId; 15] = [
        Self::Navigate,
        Self::Evaluate,
        Self::GetDom,
        Self::Screenshot,
        Self::Click,
        Self::Fill,
        Self::Act,
        Self::Tabs,
        Self::ListRequests,
        Self::GetRequestBody,
        Self::CdpSend,
        Self::Download,
        Self::ProfileList,
        Self::ProfileRefresh,
        Self::ProfileRevoke,
    ];

    /// The page model's vendor tools (`pap.browser.*`), in the order tools list them.
    pub const VENDOR: [ToolId; 13] = [
        Self::Snapshot,
        Self::PressKey,
        Self::Hover,
        Self::SelectOption,
        Self::WaitFor,
        Self::NavigateBack,
        Self::NavigateForward,
        Self::Resize,
        Self::ConsoleMessages,
        Self::PdfSave,
        Self::HandleDialog,
        Self::Drag,
        Self::FileUpload,
    ];

    /// Every id this kit serves: the reserved ones, then the vendor ones.
    pub fn every() -> impl Iterator<Item = ToolId> {
        Self::ALL.into_iter().chain(Self::VENDOR)
    }

    /// Whether AIP-63 reserves the id (not one of the vendor tools).
    pub fn is_reserved(self) -> bool {
        !Self::VENDOR.contains(&self)
    }

    /// The AIP-14 id (`browser.get_dom`, `pap.browser.snapshot`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Navigate => "browser.navigate",
            Self::Evaluate => "browser.evaluate",
            Self::GetDom => "browser.get_dom",
            Self::Screenshot => "browser.screenshot",
            Self::Click => "browser.click",
            Self::Fill => "browser.fill",
            Self::Act => "browser.act",
            Self::Tabs => "browser.tabs",
            Self::ListRequests => "browser.list_requests",
            Self::GetRequestBody => "browser.get_request_body",
            Self::CdpSend => "browser.cdp_send",
            Self::Download => "browser.download",
            Self::ProfileList => "browser.profile.list",
            Self::ProfileRefresh => "browser.profile.refresh",
            Self::ProfileRevoke => "browser.profile.revoke",
            Self::Snapshot => "pap.browser.snapshot",
            Self::PressKey => "pap.browser.press_key",
            Self::Hover => "pap.browser.hover",
            Self::SelectOption => "pap.browser.select_option",
            Self::WaitFor => "pap.browser.wait_for",
            Self::NavigateBack => "pap.browser.navigate_back",
            Self::NavigateForward => "pap.browser.navigate_forward",
            Self::Resize => "pap.browser.resize",
            Self::ConsoleMessages => "pap.browser.console_messages",
            Self::PdfSave => "pap.browser.pdf_save",
            Self::HandleDialog => "pap.browser.handle_dialog",
            Self::Drag => "pap.browser.drag",
            Self::FileUpload => "pap.browser.file_upload",
        }
    }

    /// The tool spelled `id`, reserved or one of this kit's vendor tools; any other vendor's
    /// id is none of ours.
    pub fn parse(id: &str) -> Option<Self> {
        Self::every().find(|tool| tool.as_str() == id)
    }

    /// Its row of the table (T1): gate and level.
    pub fn spec(self) -> ToolSpec {
        use Capability::{AiActions, Cdp, Downloads, TrustedInput};
        let (gate, level) = match self {
            Self::Navigate | Self::Evaluate | Self::GetDom | Self::Screenshot => (None, Level::Core),
            // The page model (vendor): reading, waiting and history as core tools; keys and the
            // pointer are browser-level input, as the `trusted` option of click and fill.
            Self::Snapshot
            | Self::WaitFor
            | Self::NavigateBack
            | Self::NavigateForward
            | Self::Resize
            | Self::ConsoleMessages
            | Self::PdfSave => (None, Level::Core),
            Self::SelectOption | Self::HandleDialog | Self::FileUpload => (None, Level::Interaction),
            Self::PressKey | Self::Hover | Self::Drag => (Some(Gate::One(TrustedInput)), Level::Interaction),
            Self::Click | Self::Fill | Self::Tabs => (None, Level::Interaction),
            Self::Act => (Some(Gate::One(AiActions)), Level::Interaction),
            Self::ListRequests | Self::GetRequestBody | Self::CdpSend => (Some(Gate::One(Cdp)), Level::Network),
            Self::Download => (Some(Gate::One(Downloads)), Level::Download),
            Self::ProfileList | Self::ProfileRefresh | Self::ProfileRevoke => {
                (Some(Gate::SessionMaterial), Level::Profile)
            }
        };
        ToolSpec { id: self, gate, level }
    }

    /// Parses `input` as this tool's input `T`, once, at the tool surface (`null` reads as
    /// `{}`). A missing or mistyped field is `input_invalid` naming the field; an unknown one
    /// names the fields expected. Nothing the caller sent is quoted back, as an input may be a
    /// secret the caller was handed (C9): a value serde would quote is cut off, and the name of
    /// an unknown field or variant is dropped.
    pub fn parse_input<T: serde::de::DeserializeOwned>(self, input: &serde_json::Value) -> Result<T, ToolError> {
        let input = if input.is_null() {
            serde_json::json!({})
        } else {
            input.clone()
        };
        serde_json::from_value(input).map_err(|e| {
            let text = without_callers_name(&e.to_string());
            let cut = text
                .split(['"', '\''])
                .next()
                .unwrap_or_default()
                .trim_end_matches([' ', ':']);
            ToolError::new(ToolErrorCode::InputInvalid, format!("{self}: {cut}"))
        })
    }

    /// The capability a manifest must declare to list the tool in `implements[]` (M4): the
    /// network tools need `cdp`, `download` needs `downloads`, `act` needs `aiActions`; of the
    /// vendor tools, press_key, hover and drag need `trustedInput`.
    pub fn implements_gate(self) -> Option<Capability> {
        match self.spec().gate {
            Some(Gate::One(capability)) => Some(capability),
            Some(Gate::SessionMaterial) | None => None,
        }
    }
}

impl fmt::Display for ToolId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The reserved tools (T1), each with its gate and level.
pub fn reserved_tools() -> impl Iterator<Item = ToolSpec> {
    ToolId::ALL.into_iter().map(ToolId::spec)
}

/// serde's message without the caller's own name: "unknown field `NAME`, expected one of ..."
/// (and the same for a variant) quotes a key or tag the caller chose, which is dropped; what
/// follows (the names expected, ours) is kept. The last ", expected" is serde's own, whatever
/// the caller's name holds.
fn without_callers_name(text: &str) -> String {
    for lead in ["unknown field", "unknown variant"] {
        if let Some(at) = text.find(lead) {
            let rest = &text[at..];
            let tail = [", expected", ", there are no"]
                .iter()
                .filter_map(|t| rest.rfind(t))
                .max()
                .map_or("", |i| &rest[i..]);
            return format!("{}{lead}{tail}", &text[..at]);
        }
    }
    text.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_ids_keep_their_gates_and_none_creates_a_grant() {
        assert_eq!(reserved_tools().count(), 15);
        let cdp = Some(Gate::One(Capability::Cdp));
        assert_eq!(ToolId::ListRequests.spec().gate, cdp);
        assert_eq!(ToolId::Download.spec().gate, Some(Gate::One(Capability::Downloads)));
        assert_eq!(ToolId::Act.spec().gate, Some(Gate::One(Capability::AiActions)));
        assert_eq!(ToolId::ProfileRevoke.spec().gate, Some(Gate::SessionMaterial));
        assert!(reserved_tools().all(|t| !t.id.as_str().contains("grant") && !t.id.as_str().ends_with(".create")));
        // M4 gates exactly the tools with a single-capability gate.
        let m4: Vec<ToolId> = ToolId::ALL
            .into_iter()
            .filter(|t| t.implements_gate().is_some())
            .collect();
        assert_eq!(
            m4,
            [
                ToolId::Act,
                ToolId::ListRequests,
                ToolId::GetRequestBody,
                ToolId::CdpSend,
                ToolId::Download
            ]
        );
    }

    #[test]
    fn ids_and_names_round_trip_and_nothing_else_parses() {
        for tool in ToolId::ALL {
            assert_eq!(ToolId::parse(tool.as_str()), Some(tool));
        }
        for tool in ToolId::VENDOR {
            assert_eq!(ToolId::parse(tool.as_str()), Some(tool));
            assert!(
                tool.as_str().starts_with("pap.browser.") && !tool.is_reserved(),
                "{tool}"
            );
        }
        assert!(ToolId::ALL.into_iter().all(ToolId::is_reserved));
        assert_eq!(ToolId::parse("browser.Navigate"), None);
        assert_eq!(ToolId::parse("browser.snapshot"), None);
        assert_eq!(ToolId::parse("vendor.scrape"), None);
        for level in Level::ALL {
            assert_eq!(Level::from_name(level.name()), Some(level));
            assert_eq!(serde_json::to_value(level).unwrap(), level.name());
        }
        assert_eq!(Gate::SessionMaterial.name(), "cookies|storageState");
        assert_eq!(Capability::FullPageScreenshot.to_string(), "fullPageScreenshot");
    }
}
