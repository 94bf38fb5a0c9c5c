//! `pap-agent host stdio` driven by an MCP client of the official Rust SDK (`rmcp`), which spawns
//! it as a client spawns its servers: the tools the provider serves are listed with their input
//! schemas, a page of our company (over TLS, its name routed to loopback) loads and comes back as
//! a screenshot (MCP image content), and a refused navigation is an MCP tool error carrying its
//! AIP-14 code. The client is a paired device (`install-mcp` configured it): once unpaired, its
//! next call is refused. The browser starts with the first call and ends with the client.

#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;
use std::time::Duration;

use rmcp::ServiceExt as _;
use rmcp::model::{CallToolRequestParams, ContentBlock};
use rmcp::transport::TokioChildProcess;
use serde_json::json;
use support::Stage;
use support::cli_agent::{browsers, installed, pap, stdio_host, until_a_browser_runs};

fn arguments(value: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    match value {
        serde_json::Value::Object(object) => object,
        _ => unreachable!("arguments are objects"),
    }
}

/// Ends the client, as a client closes the host it spawned; the host must end with it.
async fn end(client: rmcp::service::RunningService<rmcp::RoleClient, ()>) {
    tokio::time::timeout(Duration::from_secs(30), client.cancel())
        .await
        .expect("the host did not end with its client")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn an_mcp_client_lists_the_tools_loads_a_page_and_gets_a_screenshot_and_typed_errors() {
    let stage = Stage::new("mcp-stdio", &["shop.example"]).await;
    let (_company, addr) = support::start_reference_company(&stage).await;
    let state = stage.work.join("state");
    let (bearer_file, device) = installed(&stage, &state);
    let host = stdio_host(&stage, &state, addr, &bearer_file, &[]);
    let client = ().serve(TokioChildProcess::new(host).unwrap()).await.unwrap();
    // The client is told which program serves it, not the MCP library's name.
    let info = client.peer_info().expect("the server's initialize answer");
    let server = info.server_info.as_ref().expect("serverInfo");
    assert_eq!(server.name, "pap-agent");
    assert_eq!(server.version, env!("CARGO_PKG_VERSION"));

    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    for wanted in [
        "browser_navigate",
        "browser_screenshot",
        "browser_get_dom",
        "browser_profile_list",
    ] {
        assert!(names.contains(&wanted), "{wanted} is not listed: {names:?}");
    }
    assert!(
        !names.contains(&"browser_act"),
        "a tool the provider cannot serve is listed"
    );
    let navigate = tools.iter().find(|t| t.name == "browser_navigate").unwrap();
    assert_eq!(navigate.input_schema["required"], json!(["url"]));

    let call = |name: &'static str, input: serde_json::Value| {
        CallToolRequestParams::new(name).with_arguments(arguments(input))
    };
    let opened = client
        .call_tool(call("browser_navigate", json!({"url": "https://shop.example/"})))
        .await
        .unwrap();
    assert_ne!(opened.is_error, Some(true), "{opened:?}");
    let landed = opened.structured_content.unwrap();
    assert_eq!(landed["url"], "https://shop.example/");
    let target = landed["target"].as_str().unwrap().to_owned();

    let shot = client
        .call_tool(call("browser_screenshot", json!({"target": target})))
        .await
        .unwrap();
    let image = shot
        .content
        .iter()
        .find_map(|c| match c {
            ContentBlock::Image(image) => Some(image.clone()),
            _ => None,
        })
        .expect("the screenshot is image content");
    assert_eq!(image.mime_type, "image/png");
    use base64::Engine as _;
    let png = base64::engine::general_purpose::STANDARD.decode(&image.data).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");

    // The model's eye (issue 39): the shop's front page as a snapshot, then a click by the ref
    // of its first link to another of its pages, and the page that click led to.
    let text_of = |result: &rmcp::model::CallToolResult| {
        result
            .content
            .iter()
            .find_map(|c| match c {
                ContentBlock::Text(text) => Some(text.text.clone()),
                _ => None,
            })
            .unwrap_or_default()
    };
    let front = client
        .call_tool(call("browser_snapshot", json!({"target": target})))
        .await
        .unwrap();
    assert_ne!(front.is_error, Some(true), "{front:?}");
    let front_text = text_of(&front);
    assert!(
        front_text.starts_with("- Page URL: https://shop.example/\n"),
        "{front_text}"
    );
    let link = front_text
        .lines()
        .find(|line| {
            line.trim_start().starts_with("- link ")
                && line.contains("[ref=")
                && line.contains("[url=\"https://shop.example/")
                && !line.contains("[url=\"https://shop.example/\"]")
        })
        .unwrap_or_else(|| panic!("no link of the shop in\n{front_text}"));
    let element_ref = link[link.find("[ref=").unwrap() + 5..]
        .split(']')
        .next()
        .unwrap()
        .to_owned();
    // The URL is a JSON string (what the page wrote is quoted).
    let url: String = serde_json::Deserializer::from_str(&link[link.find("[url=").unwrap() + 5..])
        .into_iter::<String>()
        .next()
        .unwrap()
        .unwrap();
    let clicked = client
        .call_tool(call("browser_click", json!({"target": target, "ref": element_ref})))
        .await
        .unwrap();
    assert_ne!(clicked.is_error, Some(true), "{clicked:?}");
    // The click starts a navigation; the tab's snapshot names the page it reached.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    let after = loop {
        let now = client
            .call_tool(call("browser_snapshot", json!({"target": target})))
            .await
            .unwrap();
        let now_text = text_of(&now);
        if now_text.starts_with(&format!("- Page URL: {url}\n")) {
            break now_text;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the click on {link} did not reach {url}: {now_text}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    if let Some(dir) = std::env::var_os("PAP_ARTIFACTS") {
        let dir = std::path::PathBuf::from(dir);
        std::fs::create_dir_all(&dir).unwrap();
        let head: String = after.lines().take(12).collect::<Vec<_>>().join("\n");
        std::fs::write(
            dir.join("model-eye.md"),
            format!(
                "browser_snapshot {{\"target\": \"{target}\"}}\n\n{front_text}\nbrowser_click {{\"target\": \"{target}\", \"ref\": \"{element_ref}\"}}\n\n{}\n\nbrowser_snapshot (its first lines)\n\n{head}\n",
                text_of(&clicked)
            ),
        )
        .unwrap();
    }

    // H3 through MCP: a tool error with the AIP-14 code, and the call's transport unharmed.
    let refused = client
        .call_tool(call("browser_navigate", json!({"url": "file:///etc/passwd"})))
        .await
        .unwrap();
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    let error = refused.structured_content.unwrap();
    assert_eq!(error["code"], "permission_denied");
    let unknown = client
        .call_tool(call("browser_act", json!({"instruction": "buy"})))
        .await
        .unwrap();
    assert_eq!(unknown.structured_content.unwrap()["code"], "browser:unsupported");
    // A name that is no tool at all is MCP's "unknown tool": a protocol error, -32602.
    let nothing = client
        .call_tool(call("no_such_tool", json!({})))
        .await
        .expect_err("an unknown tool answered a result");
    assert!(
        matches!(&nothing, rmcp::ServiceError::McpError(e) if e.code.0 == -32602),
        "{nothing:?}"
    );

    // The operator unpairs the device: its very next call is refused (C13).
    pap(&state, &["devices", "revoke", &device]);
    let after = client
        .call_tool(call("browser_get_dom", json!({"target": target})))
        .await
        .unwrap();
    assert_eq!(after.is_error, Some(true), "an unpaired device's call ran: {after:?}");
    assert_eq!(after.structured_content.unwrap()["code"], "permission_denied");

    end(client).await;
    let left = browsers(&state);
    assert!(left.is_empty(), "the host left its browser running: {left:?}");
    let _ = std::fs::remove_dir_all(&stage.work);
}

/// `host stdio --launch-at-start` (issue 42): the browser runs before the client calls
/// anything, and a call that comes while the launch is under way waits for it, not answered
/// `not_ready`, and launches no second browser.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium; .ci/run runs it"]
async fn a_host_launching_at_start_runs_its_browser_before_any_call_and_a_call_meanwhile_waits_for_it() {
    let stage = Stage::new("mcp-stdio-start", &["shop.example"]).await;
    let (_company, addr) = support::start_reference_company(&stage).await;
    let state = stage.work.join("state");
    let (bearer_file, _) = installed(&stage, &state);
    let launching = ["--launch-at-start"];

    // No call: the browser comes anyway, and goes with the client.
    let host = stdio_host(&stage, &state, addr, &bearer_file, &launching);
    let client = ().serve(TokioChildProcess::new(host).unwrap()).await.unwrap();
    until_a_browser_runs(&state).await;
    end(client).await;
    assert!(browsers(&state).is_empty(), "the host left its browser running");

    // A call at once, while the launch at start is under way: answered once the browser runs.
    let host = stdio_host(&stage, &state, addr, &bearer_file, &launching);
    let client = ().serve(TokioChildProcess::new(host).unwrap()).await.unwrap();
    let opened = client
        .call_tool(
            CallToolRequestParams::new("browser_navigate")
                .with_arguments(arguments(json!({"url": "https://shop.example/"}))),
        )
        .await
        .unwrap();
    assert_ne!(opened.is_error, Some(true), "{opened:?}");
    assert_eq!(opened.structured_content.unwrap()["url"], "https://shop.example/");
    let running = browsers(&state);
    assert_eq!(running.len(), 1, "{running:?}");
    end(client).await;
    assert!(browsers(&state).is_empty(), "the host left its browser running");
    let _ = std::fs::remove_dir_all(&stage.work);
}
