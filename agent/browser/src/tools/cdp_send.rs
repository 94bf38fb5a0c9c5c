//! `browser.cdp_send`: a raw CDP command by name, among the methods it allows.
//!
//! An allowlist, not a denylist (security review M4): a method is sent only when it works on the
//! page's own document, styles, accessibility tree or scripts, or draws it. Nothing that reads or
//! writes cookies or storage, reaches the network (`Network.*`, `Fetch.*`, `IO.*`), navigates
//! (`Page.navigate`: only `browser.navigate` does), sets downloads or browser-wide state
//! (`Browser.*`, `Target.*`), synthesises trusted input (`Input.*`, gated by `trustedInput`) or
//! hands a page local files (`DOM.setFileInputFiles`).
//!
//! What the design cannot stop: a page's own script reads its non-HttpOnly cookies and storage,
//! and `Runtime.evaluate` (as `browser.evaluate`) runs with the page's powers. Exposure is limited
//! by what the browser holds: the grants in scope for the call.

use serde_json::Value;

/// Whole domains whose every method stays within the page's document and scripts.
const ALLOWED_DOMAINS: [&str; 5] = ["DOM.", "CSS.", "Accessibility.", "Overlay.", "Animation."];

/// Single methods allowed outside those domains.
const ALLOWED_METHODS: [&str; 12] = [
    "Runtime.evaluate",
    "Runtime.callFunctionOn",
    "Runtime.getProperties",
    "Runtime.releaseObject",
    "Runtime.releaseObjectGroup",
    "Page.captureScreenshot",
    "Page.getLayoutMetrics",
    "Page.getFrameTree",
    "Emulation.setDeviceMetricsOverride",
    "Emulation.clearDeviceMetricsOverride",
    "Emulation.setEmulatedMedia",
    "Performance.getMetrics",
];

/// Methods of allowed domains that are not allowed: they reach the host's files.
const REFUSED_METHODS: [&str; 2] = ["DOM.setFileInputFiles", "DOM.getFileInfo"];

/// Whether `browser.cdp_send` may send `method`.
pub(super) fn allowed(method: &str) -> bool {
    if REFUSED_METHODS.contains(&method) {
        return false;
    }
    ALLOWED_DOMAINS.iter().any(|d| method.starts_with(d)) || ALLOWED_METHODS.contains(&method)
}

/// A CDP command by name: its params are sent as given, its result comes back as JSON.
#[derive(Debug)]
pub(super) struct RawCommand {
    pub(super) method: String,
    pub(super) params: Value,
}

impl serde::Serialize for RawCommand {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.params.serialize(serializer)
    }
}

impl chromiumoxide::Method for RawCommand {
    fn identifier(&self) -> chromiumoxide::types::MethodId {
        self.method.clone().into()
    }
}

impl chromiumoxide::Command for RawCommand {
    type Response = Value;
}

#[cfg(test)]
mod tests {
    use super::allowed;

    #[test]
    fn the_review_s_probes_are_refused_and_page_work_is_allowed() {
        for refused in [
            "Network.setExtraHTTPHeaders",
            "Network.getRequestPostData",
            "Network.loadNetworkResource",
            "Network.getAllCookies",
            "Network.setCookie",
            "Fetch.enable",
            "IO.read",
            "Browser.setDownloadBehavior",
            "Page.setDownloadBehavior",
            "Page.navigate",
            "Target.createTarget",
            "Target.createBrowserContext",
            "Storage.getCookies",
            "DOMStorage.getDOMStorageItems",
            "IndexedDB.requestData",
            "Input.dispatchMouseEvent",
            "DOM.setFileInputFiles",
            "SystemInfo.getProcessInfo",
            "",
        ] {
            assert!(!allowed(refused), "{refused}");
        }
        for ok in [
            "Runtime.evaluate",
            "DOM.getDocument",
            "DOM.querySelector",
            "CSS.getComputedStyleForNode",
            "Accessibility.getFullAXTree",
            "Page.captureScreenshot",
        ] {
            assert!(allowed(ok), "{ok}");
        }
    }
}
