//! `browser.cdp_send`: a raw CDP command by name, and the methods it refuses.

use serde_json::Value;

/// CDP methods that read or write cookies or storage: refused through `browser.cdp_send`.
pub(super) fn touches_session_material(method: &str) -> bool {
    const DOMAINS: [&str; 4] = ["Storage.", "DOMStorage.", "IndexedDB.", "CacheStorage."];
    const NETWORK: [&str; 6] = [
        "Network.getCookies",
        "Network.getAllCookies",
        "Network.setCookie",
        "Network.setCookies",
        "Network.deleteCookies",
        "Network.clearBrowserCookies",
    ];
    DOMAINS.iter().any(|d| method.starts_with(d)) || NETWORK.contains(&method)
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
