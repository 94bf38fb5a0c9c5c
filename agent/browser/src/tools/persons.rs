//! Pages that belong to the person (AIP-7: agents never decide).
//!
//! A company shows the person a page where they decide (an operation's page, with its confirm
//! and cancel forms). In the agent's browser that page runs in a tab a tool caller holds, with
//! the Session's cookie and the page's own CSRF token: a click on its confirm button, or a
//! script that submits its form, would *be* the person's decision, made by the caller. So the
//! layer that knows what a Session is (the PAP tools) tells the tool host which pages are the
//! person's, and the tool host refuses to drive them:
//!
//! | the tab shows                                   | refused (`permission_denied`, rule AIP-7)            |
//! |-------------------------------------------------|------------------------------------------------------|
//! | a page under a decision path of its origin      | click, fill, act, download, evaluate, cdp_send        |
//! | any page of an origin a Session was joined on   | evaluate, cdp_send                                    |
//!
//! Reading (screenshot, get_dom, list_requests) stays open, and so does navigating. Scripts are
//! kept off the whole joined origin because a script on *any* same-origin page can fetch the
//! decision page (cookie attached, same origin), read its CSRF token and post the confirm form;
//! a page of another origin cannot (CORS, `SameSite=Lax`, and the company's
//! `frame-ancestors 'none'`). The page-level click and fill re-check the document's own
//! `location` inside the script that acts, so a navigation between the host's check and the act
//! cannot slip a decision page under them. A browser-level (`trusted`) click is dispatched at
//! coordinates by CDP and has no such hook: a page that navigates itself onto a decision page
//! in the milliseconds between the check and the click is the residual risk (README, security).
//!
//! Capacity is bounded: a reservation past [`MAX_ORIGINS`] or [`MAX_PATHS`] is refused, and
//! the step that asked for it fails (nothing is left unprotected silently).

use std::collections::HashMap;

use serde_json::json;

use crate::spec::{ToolError, ToolErrorCode, ToolId};

/// Origins with reservations, at most.
pub const MAX_ORIGINS: usize = 1024;
/// Decision paths per origin, at most.
pub const MAX_PATHS: usize = 64;

/// What is the person's, by origin (`https://shop.example`).
#[derive(Debug, Default)]
pub(super) struct PersonsPages {
    origins: HashMap<String, Reserved>,
}

#[derive(Debug, Default)]
struct Reserved {
    /// Path prefixes of decision pages (`/operations/`).
    decisions: Vec<String>,
    /// A Session was joined on the origin: scripts stay off it.
    joined: bool,
}

/// Which tools a reservation stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reach {
    /// The tool acts on the page as input would (click, fill, act, download).
    Input,
    /// The tool runs script or raw CDP in the page (evaluate, cdp_send).
    Script,
    /// The tool reads or navigates.
    Read,
}

fn reach(tool: ToolId) -> Reach {
    match tool {
        ToolId::Click | ToolId::Fill | ToolId::Act | ToolId::Download => Reach::Input,
        ToolId::Evaluate | ToolId::CdpSend => Reach::Script,
        _ => Reach::Read,
    }
}

/// `url`'s origin and path, when it is a URL with a host.
fn origin_and_path(url: &str) -> Option<(String, String)> {
    let url = url::Url::parse(url).ok()?;
    url.host_str()?;
    Some((url.origin().ascii_serialization(), url.path().to_owned()))
}

fn full(what: &str) -> ToolError {
    ToolError::new(
        ToolErrorCode::Internal,
        format!("the host keeps no more {what} for the person's pages; refused so that none goes unprotected"),
    )
}

impl PersonsPages {
    /// Reserves the pages under `path_prefix` on `origin`'s site (`origin` as a URL or an
    /// origin) as decision pages.
    pub(super) fn reserve_decisions(&mut self, origin: &str, path_prefix: &str) -> Result<(), ToolError> {
        let (origin, _) = origin_and_path(origin).ok_or_else(|| invalid_origin(origin))?;
        if !path_prefix.starts_with('/') {
            return Err(ToolError::new(
                ToolErrorCode::InputInvalid,
                "a decision path starts with /",
            ));
        }
        let reserved = self.entry(origin)?;
        if reserved.decisions.iter().any(|p| path_prefix.starts_with(p.as_str())) {
            return Ok(());
        }
        if reserved.decisions.len() >= MAX_PATHS {
            return Err(full("decision paths"));
        }
        reserved.decisions.push(path_prefix.to_owned());
        Ok(())
    }

    /// Marks `origin` as one a Session was joined on.
    pub(super) fn reserve_joined(&mut self, origin: &str) -> Result<(), ToolError> {
        let (origin, _) = origin_and_path(origin).ok_or_else(|| invalid_origin(origin))?;
        self.entry(origin)?.joined = true;
        Ok(())
    }

    fn entry(&mut self, origin: String) -> Result<&mut Reserved, ToolError> {
        if !self.origins.contains_key(&origin) && self.origins.len() >= MAX_ORIGINS {
            return Err(full("origins"));
        }
        Ok(self.origins.entry(origin).or_default())
    }

    /// The decision paths of `url`'s origin (for the in-page re-check), none when it has none.
    pub(super) fn decision_paths(&self, url: &str) -> Vec<String> {
        origin_and_path(url)
            .and_then(|(origin, _)| self.origins.get(&origin))
            .map(|r| r.decisions.clone())
            .unwrap_or_default()
    }

    /// Why `tool` may not act on a tab showing `url`, if it may not. A URL that does not parse
    /// (`about:blank`, a page mid-navigation) is judged as it is: it is no reserved page.
    pub(super) fn refuses(&self, tool: ToolId, target: &str, url: &str) -> Option<ToolError> {
        let reach = reach(tool);
        if reach == Reach::Read {
            return None;
        }
        let (origin, path) = origin_and_path(url)?;
        let reserved = self.origins.get(&origin)?;
        let decision = reserved.decisions.iter().any(|p| path.starts_with(p.as_str()));
        let why = if decision {
            "this tab shows a page where the person decides (AIP-7): tools may read it, never act on it"
        } else if reach == Reach::Script && reserved.joined {
            "scripts do not run on the pages of a company whose Session the browser joined (AIP-7: \
             a script there reaches the person's decisions with the Session's cookie)"
        } else {
            return None;
        };
        Some(
            ToolError::new(ToolErrorCode::PermissionDenied, why)
                .with_cause(json!({ "rule": "AIP-7", "target": target, "tool": tool.as_str() })),
        )
    }
}

fn invalid_origin(origin: &str) -> ToolError {
    // The origin is the host's own input (a discovered company), never a caller's secret.
    ToolError::new(
        ToolErrorCode::InputInvalid,
        format!("{origin} is not an origin with a host"),
    )
}

/// The in-page re-check: a script prefix that makes the acting script answer `"reserved"` when
/// the document it runs in is under one of `paths`.
pub(super) fn in_page_guard(paths: &[String]) -> String {
    if paths.is_empty() {
        return String::new();
    }
    // A JSON array of strings is a JavaScript array literal.
    let list = serde_json::Value::from(paths.to_vec()).to_string();
    format!("if ({list}.some(p => location.pathname.startsWith(p))) return 'reserved'; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decision_pages_refuse_input_and_script_and_a_joined_origin_refuses_script() {
        let mut pages = PersonsPages::default();
        pages.reserve_decisions("https://shop.example", "/operations/").unwrap();
        let op = "https://shop.example/operations/op_1";
        for tool in [
            ToolId::Click,
            ToolId::Fill,
            ToolId::Evaluate,
            ToolId::CdpSend,
            ToolId::Download,
            ToolId::Act,
        ] {
            let refused = pages.refuses(tool, "t1", op).expect("refused");
            assert_eq!(refused.code, ToolErrorCode::PermissionDenied);
            assert_eq!(refused.cause.unwrap()["rule"], "AIP-7");
        }
        for tool in [
            ToolId::GetDom,
            ToolId::Screenshot,
            ToolId::Navigate,
            ToolId::ListRequests,
            ToolId::Tabs,
        ] {
            assert!(pages.refuses(tool, "t1", op).is_none(), "{tool}");
        }
        // Another page of the origin: free until a Session is joined there, then script-free.
        let home = "https://shop.example/";
        assert!(pages.refuses(ToolId::Evaluate, "t1", home).is_none());
        pages.reserve_joined("https://shop.example/anything").unwrap();
        assert!(pages.refuses(ToolId::Evaluate, "t1", home).is_some());
        assert!(pages.refuses(ToolId::CdpSend, "t1", home).is_some());
        assert!(pages.refuses(ToolId::Click, "t1", home).is_none());
        // Another origin, another port, another scheme: not the company's pages.
        for other in [
            "https://shop.example.evil.example/operations/op_1",
            "https://shop.example:8443/operations/op_1",
            "http://shop.example/operations/op_1",
            "about:blank",
        ] {
            assert!(pages.refuses(ToolId::Click, "t1", other).is_none(), "{other}");
        }
    }

    #[test]
    fn reservations_are_bounded_and_a_full_table_refuses_rather_than_forgets() {
        let mut pages = PersonsPages::default();
        for i in 0..MAX_PATHS {
            pages
                .reserve_decisions("https://a.example", &format!("/p{i}/"))
                .unwrap();
        }
        // A prefix already covered costs nothing.
        pages.reserve_decisions("https://a.example", "/p1/deeper/").unwrap();
        assert_eq!(
            pages.reserve_decisions("https://a.example", "/more/").unwrap_err().code,
            ToolErrorCode::Internal
        );
        for i in 1..MAX_ORIGINS {
            pages.reserve_joined(&format!("https://o{i}.example")).unwrap();
        }
        assert!(pages.reserve_joined("https://one-too-many.example").is_err());
        assert!(pages.reserve_joined("not a url").is_err());
        assert!(pages.reserve_decisions("https://b.example", "no-slash").is_err());
    }

    #[test]
    fn the_in_page_guard_lists_the_paths_as_a_literal() {
        assert_eq!(in_page_guard(&[]), "");
        let guard = in_page_guard(&["/operations/".to_owned(), "/a'b\"/".to_owned()]);
        assert!(guard.starts_with(r#"if (["/operations/","/a'b\"/"].some("#), "{guard}");
    }
}
