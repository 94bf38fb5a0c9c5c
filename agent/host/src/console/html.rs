//! The console's pages: server-written HTML, no script at all (the CSP says so), every value from
//! a file, a page or a device escaped.

use std::fmt::Write as _;

/// `text` safe in HTML text and in a quoted attribute.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A whole page.
pub(crate) fn page(title: &str, body: &str) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\"><title>{title} · pap-agent console</title>\
         <style>{STYLE}</style></head><body><header><strong>pap-agent console</strong> \
         <span class=\"muted\">what your agent's browser does, and what only you decide</span></header>\
         <main>{body}</main></body></html>",
        title = escape(title),
    )
}

/// A POST form with the CSRF token and one button (`class` styles it).
pub(crate) fn button_form(action: &str, csrf: &str, label: &str, class: &str, fields: &str) -> String {
    format!(
        "<form method=\"post\" action=\"{action}\">{fields}<input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
         <button class=\"{class}\">{label}</button></form>",
        action = escape(action),
        csrf = escape(csrf),
        label = escape(label),
    )
}

/// A table of `rows` (each already HTML) under `headers`, or `empty` when there are none.
pub(crate) fn table(headers: &[&str], rows: &[String], empty: &str) -> String {
    if rows.is_empty() {
        return format!("<p class=\"muted\">{}</p>", escape(empty));
    }
    let mut out = String::from("<table><thead><tr>");
    for header in headers {
        let _ = write!(out, "<th>{}</th>", escape(header));
    }
    out.push_str("</tr></thead><tbody>");
    for row in rows {
        out.push_str(row);
    }
    out.push_str("</tbody></table>");
    out
}

const STYLE: &str = "body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#1b1f24;background:#f6f7f9}\
header{background:#1b1f24;color:#fff;padding:10px 20px}header .muted{color:#aab}\
main{padding:10px 20px;max-width:1100px}h2{margin:22px 0 8px;font-size:18px}\
table{border-collapse:collapse;width:100%;background:#fff}th,td{text-align:left;padding:6px 8px;border-bottom:1px solid #e3e5e8;vertical-align:top}\
th{font-size:13px;color:#555}td.when{white-space:nowrap;font-size:13px}.muted{color:#667}form{display:inline-block;margin:0 4px 0 0}\
button{font:inherit;padding:3px 10px;border-radius:4px;border:1px solid #889;background:#fff;cursor:pointer}\
button.yes{background:#1f7a3a;color:#fff;border-color:#1f7a3a}button.no{background:#a32020;color:#fff;border-color:#a32020}\
.request{background:#fff8e1;border:1px solid #e8c65a;padding:10px 12px;margin:8px 0;border-radius:6px}\
.note{background:#e8f2ff;border:1px solid #9cc2f0;padding:8px 12px;border-radius:6px}code{font-size:13px}\
select,input[type=text]{font:inherit;padding:2px 4px}\
.live{max-width:none;border:1px solid #c5c8cd;display:block;margin:8px 0;background:#fff}";
