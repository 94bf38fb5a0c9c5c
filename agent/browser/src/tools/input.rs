//! Each reserved tool's input, parsed once at the tool surface (serde, closed shapes): a field
//! that is missing, unknown or of the wrong type is `input_invalid` naming the field, before
//! anything touches the browser. Nothing here echoes an input's value back.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use zeroize::Zeroizing;

use crate::spec::{ToolError, ToolErrorCode};

/// `browser.navigate`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Navigate {
    /// Where to go.
    pub(super) url: String,
    /// An open target; absent opens a new one.
    #[serde(default)]
    pub(super) target: Option<String>,
    /// For a new target: no idle reaper closes it (L11).
    #[serde(default)]
    pub(super) keep_alive: bool,
}

/// A tool that acts on one target.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct OnTarget {
    /// The target handle.
    pub(super) target: String,
}

/// `browser.evaluate`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Evaluate {
    /// The target handle.
    pub(super) target: String,
    /// The expression.
    pub(super) expression: String,
}

/// `browser.get_dom`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct GetDom {
    /// The target handle.
    pub(super) target: String,
    /// One element's subtree; absent: the document.
    #[serde(default)]
    pub(super) selector: Option<String>,
}

/// `browser.screenshot`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Screenshot {
    /// The target handle.
    pub(super) target: String,
    /// The whole page, not the viewport (gate `fullPageScreenshot`).
    #[serde(default)]
    pub(super) full_page: bool,
    /// One element only: a ref from `browser_snapshot` (`e12`, `f2e7` in a frame of another origin).
    #[serde(default, rename = "ref")]
    pub(super) element_ref: Option<String>,
    /// `png` (the default) or `jpeg`.
    #[serde(default)]
    pub(super) format: ImageFormat,
    /// JPEG quality, 0 to 100 (80 by default).
    #[serde(default)]
    #[schemars(range(max = 100))]
    pub(super) quality: Option<u8>,
}

/// The image formats of `browser.screenshot`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(super) enum ImageFormat {
    /// Lossless (the default).
    #[default]
    Png,
    /// Smaller, lossy.
    Jpeg,
}

impl ImageFormat {
    /// As CDP and MIME name it.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Png => "png",
            Self::Jpeg => "jpeg",
        }
    }
}

/// Where an acting tool acts: a CSS selector, or a ref from `browser_snapshot`.
#[derive(Debug, Clone, Copy)]
pub(super) enum Locate<'a> {
    /// `document.querySelector(selector)` in the tab's main document.
    Selector(&'a str),
    /// The element a snapshot named `e<number>` (kept by the snapshot's isolated world).
    Ref(&'a str),
}

impl<'a> Locate<'a> {
    /// Exactly one of `selector` and `ref`.
    pub(super) fn of(selector: Option<&'a str>, element_ref: Option<&'a str>) -> Result<Self, ToolError> {
        match (selector, element_ref) {
            (Some(selector), None) => Ok(Self::Selector(selector)),
            (None, Some(element_ref)) => Ok(Self::Ref(element_ref)),
            _ => Err(ToolError::new(
                ToolErrorCode::InputInvalid,
                "name the element by exactly one of selector (CSS) and ref (from browser_snapshot)",
            )),
        }
    }
}

/// `browser.click`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Click {
    /// The target handle.
    pub(super) target: String,
    /// The element, by CSS selector (or give `ref`).
    #[serde(default)]
    pub(super) selector: Option<String>,
    /// The element, by a ref from `browser_snapshot` (`e12`, `f2e7` in a frame of another origin; or give `selector`).
    #[serde(default, rename = "ref")]
    pub(super) element_ref: Option<String>,
    /// What the element is, in words, for the person reading the log (never acted on).
    #[serde(default)]
    #[allow(
        dead_code,
        reason = "taken from the clients that send it (Playwright MCP's shape); the ref acts"
    )]
    pub(super) element: Option<String>,
    /// Input at browser level (gate `trustedInput`); otherwise a page-level click.
    #[serde(default)]
    pub(super) trusted: bool,
}

/// `browser.fill`. The value is kept in memory that is wiped when dropped, and never echoed.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Fill {
    /// The target handle.
    pub(super) target: String,
    /// The element, by CSS selector (or give `ref`).
    #[serde(default)]
    pub(super) selector: Option<String>,
    /// The element, by a ref from `browser_snapshot` (`e12`, `f2e7` in a frame of another origin; or give `selector`).
    #[serde(default, rename = "ref")]
    pub(super) element_ref: Option<String>,
    /// What the element is, in words, for the person reading the log (never acted on).
    #[serde(default)]
    #[allow(
        dead_code,
        reason = "taken from the clients that send it (Playwright MCP's shape); the ref acts"
    )]
    pub(super) element: Option<String>,
    /// What to type.
    #[serde(deserialize_with = "zeroizing")]
    #[schemars(with = "String")]
    pub(super) value: Zeroizing<String>,
    /// Input at browser level (gate `trustedInput`); otherwise set at page level.
    #[serde(default)]
    pub(super) trusted: bool,
    /// Then submit: the element's form is submitted (page level), or Enter is pressed (trusted).
    #[serde(default)]
    pub(super) submit: bool,
}

impl std::fmt::Debug for Fill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fill")
            .field("target", &self.target)
            .field("selector", &self.selector)
            .field("ref", &self.element_ref)
            .field("value", &"[not shown]")
            .field("trusted", &self.trusted)
            .field("submit", &self.submit)
            .finish()
    }
}

fn zeroizing<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Zeroizing<String>, D::Error> {
    String::deserialize(deserializer).map(Zeroizing::new)
}

/// `browser.tabs`, by action.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(tag = "action", rename_all = "camelCase", deny_unknown_fields)]
pub(super) enum Tabs {
    /// The targets of the running boot.
    List,
    /// A new target (a second one needs `multiTarget`).
    #[serde(rename_all = "camelCase")]
    Open {
        /// No idle reaper closes it (L11).
        #[serde(default)]
        keep_alive: bool,
        /// Where to go.
        #[serde(default)]
        url: Option<String>,
    },
    /// Close a target.
    Close {
        /// The target handle.
        target: String,
    },
}

/// What `browser.tabs` lists as its input schema: one object with an `action` field, rather than
/// the `oneOf` of [`Tabs`]'s three shapes (model APIs refuse a tool whose input schema has
/// `oneOf`, `anyOf` or `allOf` at the top level). The call is still parsed as [`Tabs`], so a
/// field that does not go with its action is refused by name.
#[derive(Debug, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code, reason = "a schema only: calls are parsed as Tabs")]
pub(super) struct TabsSchema {
    /// `list` (the default), `open` or `close`.
    action: Option<TabsAction>,
    /// With `open`: no idle reaper closes the new tab (L11).
    keep_alive: Option<bool>,
    /// With `open`: where the new tab goes.
    url: Option<String>,
    /// With `close`: the target handle to close.
    target: Option<String>,
}

/// The actions of `browser.tabs`.
#[derive(Debug, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code, reason = "a schema only")]
enum TabsAction {
    /// The targets of the running boot.
    List,
    /// A new target.
    Open,
    /// Close a target.
    Close,
}

/// `browser.get_request_body`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct GetRequestBody {
    /// The target handle.
    pub(super) target: String,
    /// A request id from `browser.list_requests`.
    pub(super) request_id: String,
}

/// `browser.cdp_send`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct CdpSend {
    /// The target handle.
    pub(super) target: String,
    /// The CDP method.
    pub(super) method: String,
    /// Its parameters.
    #[serde(default)]
    pub(super) params: Option<Value>,
}

/// `browser.download`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Download {
    /// The target handle.
    pub(super) target: String,
    /// What to download.
    pub(super) url: String,
}

/// `pap.browser.snapshot`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Snapshot {
    /// The target handle.
    pub(super) target: String,
    /// The longest snapshot to answer, in characters (40000 by default, at most 200000); a
    /// longer one is cut at a line with a marker that says so.
    #[serde(default)]
    #[schemars(range(min = 1000, max = 200000))]
    pub(super) max_chars: Option<usize>,
}

/// `pap.browser.press_key`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct PressKey {
    /// The target handle.
    pub(super) target: String,
    /// A key name (`Enter`, `Tab`, `Escape`, `Backspace`, `ArrowDown`, `PageDown`, ...) or one
    /// character (`a`).
    pub(super) key: String,
}

/// `pap.browser.hover`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Hover {
    /// The target handle.
    pub(super) target: String,
    /// The element, by a ref from `browser_snapshot` (`e12`, `f2e7` in a frame of another origin).
    #[serde(rename = "ref")]
    pub(super) element_ref: String,
    /// What the element is, in words (never acted on).
    #[serde(default)]
    #[allow(
        dead_code,
        reason = "taken from the clients that send it (Playwright MCP's shape); the ref acts"
    )]
    pub(super) element: Option<String>,
}

/// `pap.browser.select_option`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct SelectOption {
    /// The target handle.
    pub(super) target: String,
    /// The `<select>`, by a ref from `browser_snapshot` (`e12`, `f2e7` in a frame of another origin).
    #[serde(rename = "ref")]
    pub(super) element_ref: String,
    /// What the element is, in words (never acted on).
    #[serde(default)]
    #[allow(
        dead_code,
        reason = "taken from the clients that send it (Playwright MCP's shape); the ref acts"
    )]
    pub(super) element: Option<String>,
    /// The options to choose, each by its value or its label (one, unless the select is
    /// `multiple`).
    pub(super) values: Vec<String>,
}

/// `pap.browser.wait_for`: exactly one of `text`, `textGone`, `navigation`, `time`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct WaitFor {
    /// The target handle.
    pub(super) target: String,
    /// Until this text shows in the page.
    #[serde(default)]
    pub(super) text: Option<String>,
    /// Until this text no longer shows.
    #[serde(default)]
    pub(super) text_gone: Option<String>,
    /// Until the tab's next page has loaded.
    #[serde(default)]
    pub(super) navigation: bool,
    /// This many seconds (at most 30).
    #[serde(default)]
    #[schemars(range(min = 0, max = 30))]
    pub(super) time: Option<f64>,
    /// How long to wait for a text or a navigation, ms (10000 by default, at most 30000).
    #[serde(default)]
    #[schemars(range(min = 0, max = 30000))]
    pub(super) timeout_ms: Option<u64>,
}

/// `pap.browser.resize`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Resize {
    /// The target handle.
    pub(super) target: String,
    /// CSS pixels, 100 to 4000.
    #[schemars(range(min = 100, max = 4000))]
    pub(super) width: u32,
    /// CSS pixels, 100 to 4000.
    #[schemars(range(min = 100, max = 4000))]
    pub(super) height: u32,
}

/// `pap.browser.drag`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Drag {
    /// The target handle.
    pub(super) target: String,
    /// What to drag: a ref from `browser_snapshot`.
    pub(super) start_ref: String,
    /// Where to drop it: a ref from `browser_snapshot`.
    pub(super) end_ref: String,
    /// What is dragged, in words (never acted on).
    #[serde(default)]
    #[allow(
        dead_code,
        reason = "taken from the clients that send it (Playwright MCP's shape); the ref acts"
    )]
    pub(super) start_element: Option<String>,
    /// Where it is dropped, in words (never acted on).
    #[serde(default)]
    #[allow(
        dead_code,
        reason = "taken from the clients that send it (Playwright MCP's shape); the ref acts"
    )]
    pub(super) end_element: Option<String>,
}

/// `pap.browser.file_upload`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct FileUpload {
    /// The target handle.
    pub(super) target: String,
    /// The file input, by a ref from `browser_snapshot`.
    #[serde(rename = "ref")]
    pub(super) element_ref: String,
    /// The files, by absolute path, each in a directory the person named for uploads (at most
    /// 20, 100 MiB each).
    pub(super) paths: Vec<String>,
}

/// `pap.browser.handle_dialog`. The prompt's text is wiped when dropped and never echoed.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct HandleDialog {
    /// The target handle.
    pub(super) target: String,
    /// Accept (OK) or dismiss (Cancel).
    pub(super) accept: bool,
    /// For a `prompt()`: the text to answer with.
    #[serde(default, deserialize_with = "zeroizing_option")]
    #[schemars(with = "Option<String>")]
    pub(super) prompt_text: Option<Zeroizing<String>>,
}

impl std::fmt::Debug for HandleDialog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandleDialog")
            .field("target", &self.target)
            .field("accept", &self.accept)
            .field("prompt_text", &self.prompt_text.as_ref().map(|_| "[not shown]"))
            .finish()
    }
}

fn zeroizing_option<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Zeroizing<String>>, D::Error> {
    Option::<String>::deserialize(deserializer).map(|text| text.map(Zeroizing::new))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::spec::{ToolErrorCode, ToolId};

    fn parse<T: serde::de::DeserializeOwned>(tool: ToolId, input: &Value) -> Result<T, crate::spec::ToolError> {
        tool.parse_input(input)
    }

    #[test]
    fn inputs_are_closed_and_errors_name_the_field_never_the_value() {
        let missing = parse::<Evaluate>(ToolId::Evaluate, &json!({"target": "t1-1"})).unwrap_err();
        assert_eq!(missing.code, ToolErrorCode::InputInvalid);
        assert!(missing.message.contains("expression"), "{}", missing.message);
        // An unknown field is not named back (the caller chose the name, C9); the expected are.
        let unknown = parse::<OnTarget>(ToolId::ListRequests, &json!({"target": "t", "extra-secret": 1})).unwrap_err();
        assert!(!unknown.message.contains("extra-secret"), "{}", unknown.message);
        assert!(
            unknown.message.contains("unknown field, expected"),
            "{}",
            unknown.message
        );
        assert!(unknown.message.contains("target"), "{}", unknown.message);
        let variant = parse::<Tabs>(ToolId::Tabs, &json!({"action": "secret-variant"})).unwrap_err();
        assert!(!variant.message.contains("secret-variant"), "{}", variant.message);
        assert!(variant.message.contains("open"), "{}", variant.message);
        let wrong = parse::<Fill>(ToolId::Fill, &json!({"target": "t", "selector": "#a", "value": 7})).unwrap_err();
        assert!(
            wrong.message.contains("value") || wrong.message.contains("integer"),
            "{}",
            wrong.message
        );
        let secret = parse::<Click>(
            ToolId::Click,
            &json!({"target": "t", "selector": "#a", "trusted": "hunter2-secret"}),
        )
        .unwrap_err();
        assert!(!secret.message.contains("hunter2"), "{}", secret.message);
        let tabs = parse::<Tabs>(ToolId::Tabs, &json!({"action": "open", "keepAlive": true})).unwrap();
        assert!(matches!(
            tabs,
            Tabs::Open {
                keep_alive: true,
                url: None
            }
        ));
        assert!(parse::<Tabs>(ToolId::Tabs, &json!({"action": "shred"})).is_err());
        let fill: Fill = parse(ToolId::Fill, &json!({"target": "t", "selector": "#a", "value": "pw"})).unwrap();
        assert!(!format!("{fill:?}").contains("pw\""));
    }
}
