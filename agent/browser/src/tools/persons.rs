//! The tool host's side of AIP-7 (agents never decide): typed refusals in front of the request
//! guard ([`crate::persons`]), which is what holds when these are raced.
//!
//! The person's sites are read anew for every call from durable state ([`crate::persons::Persons`]),
//! never from what this process saw. Each rule is judged where nothing can move under it:
//!
//! | tool                                   | refused (`permission_denied`, rule AIP-7) when                                  | judged on                     |
//! |----------------------------------------|----------------------------------------------------------------------------------|-------------------------------|
//! | evaluate, cdp_send (every method)      | the tab's cookie jar can hold a Session on a person's site: the jar of a grant that reaches one, or the browser's default jar while any site is the person's | the tab's jar, fixed when it opened: no navigation changes it |
//! | click, fill (page-level)               | the element is in (or labels a control of) a form that is not `GET`, in a document of a person's site (by its origin: an `about:blank` or `srcdoc` frame is its maker's, an opaque origin is the person's) or sending to one | the document the acting script runs in, in the same script, in an isolated world the page cannot patch |
//! | click, fill (`trusted`)                | the same                                                                         | the document before the browser-level input; if the page moves meanwhile, the request guard refuses what the input sends |
//!
//! Reading (get_dom, screenshot, list_requests), navigating (`GET`) and downloading (`GET`)
//! stay open. A `cdp_send` of any method is refused in such a jar because `DOM.*` can write
//! markup that runs script (`<img onerror>`), and `Runtime.*` is script.
//!
//! The person acts in a tab of their own ([`super::ToolHost::persons_page`]): a new tab in the
//! same jar, opened for the person and held by them from before its first request, that no tool
//! has a handle to, so no tool's effect, early or late, can ride the person's allowance.

use serde_json::json;

use crate::spec::{ToolError, ToolErrorCode, ToolId};

/// What an agent runtime is told to do instead.
pub(super) const ASK_THE_PERSON: &str = "ask the person to confirm or cancel on the page themselves";

/// The refusal of `tool` on `target`: `why`, then what to do instead.
pub(super) fn refusal(tool: ToolId, target: &str, why: &str) -> ToolError {
    ToolError::new(ToolErrorCode::PermissionDenied, format!("{why}; {ASK_THE_PERSON}"))
        .with_cause(json!({ "rule": "AIP-7", "target": target, "tool": tool.as_str() }))
}

/// Why scripts do not run in a jar that can hold the person's Session.
pub(super) const SCRIPTS_IN_PERSONS_JAR: &str = "scripts do not run in a browser context whose cookies can hold a \
     Session on a site where the person decides (AIP-7: a script there could post the person's decision)";

/// Why a page-level act on a person's form is refused.
pub(super) const PERSONS_FORM: &str = "this element belongs to a form that changes state on a site where the person decides (AIP-7): tools may read \
     it, never submit it";

/// Why the person's sites could not be judged.
pub(super) fn unreadable(error: &std::io::Error) -> ToolError {
    ToolError::new(
        ToolErrorCode::Internal,
        format!(
            "the sites where the person decides could not be read ({}); refused so that none goes unprotected",
            error.kind()
        ),
    )
}

/// The in-page check, a script fragment run right after `const e = …` in the script that acts,
/// in the page-model isolated world ([`super::ToolHost::in_world`], [`super::ToolHost::on_ref`]):
/// the page shares the DOM with it but not its prototypes, so a page that patches
/// `Array.prototype.some`, `String.prototype.toLowerCase` or a form's `action` getter in its
/// own world changes nothing the check calls.
/// it answers `"reserved"` when `e` is in (or labels a control of) a form whose method is not
/// `GET` (or `dialog`, which sends nothing) and either the document `e` is in belongs to one of
/// `domains` (judged by its origin, so an `about:blank` or `srcdoc` frame counts as the page that
/// made it, and an opaque origin, which cannot be judged, as the person's) or the form would
/// send to one of them (`formAction`).
pub(super) fn in_page_guard(domains: &[String]) -> String {
    if domains.is_empty() {
        return String::new();
    }
    // A JSON array of strings is a JavaScript array literal.
    let list = serde_json::Value::from(domains.to_vec()).to_string();
    format!(
        "{{ const c = (e.tagName === 'LABEL' && e.control) ? e.control : e; \
         const f = c.form || (c.closest ? c.closest('form') : null); \
         if (f) {{ const m = String((c.getAttribute && c.getAttribute('formmethod')) || f.method || 'get').toLowerCase(); \
         if (m !== 'get' && m !== 'dialog') {{ \
         const host = (u) => {{ try {{ return new URL(u).hostname.replace(/\\.$/, '').toLowerCase(); }} catch (_) {{ return ''; }} }}; \
         const w = (c.ownerDocument && c.ownerDocument.defaultView) || self; \
         const here = host(w.origin); const to = host(c.formAction || f.action || w.location.href); \
         const mine = (h) => {list}.some(d => h === d || h.endsWith('.' + d)); \
         if (here === '' || mine(here) || mine(to)) return 'reserved'; }} }} }} "
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_in_page_guard_lists_the_sites_as_a_literal_and_is_empty_without_any() {
        assert_eq!(in_page_guard(&[]), "");
        let guard = in_page_guard(&["shop.example".to_owned(), "a'b\"c.example".to_owned()]);
        assert!(guard.contains(r#"["shop.example","a'b\"c.example"].some("#), "{guard}");
        assert!(guard.contains("return 'reserved'"), "{guard}");
    }

    #[test]
    fn a_refusal_is_permission_denied_by_aip_7_and_says_what_to_do_instead() {
        let refused = refusal(ToolId::Click, "t1-1", PERSONS_FORM);
        assert_eq!(refused.code, ToolErrorCode::PermissionDenied);
        assert!(refused.message.ends_with(ASK_THE_PERSON), "{}", refused.message);
        let cause = refused.cause.unwrap();
        assert_eq!(cause["rule"], "AIP-7");
        assert_eq!(cause["tool"], "browser.click");
    }
}
