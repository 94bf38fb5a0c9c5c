//! JSON-RPC errors the MCP library would not give: a message that is not JSON answers -32700
//! (rmcp drops such a line on stdio without a word and answers HTTP 415 with no body), and a
//! `tools/call` without a tool name answers -32602 (rmcp cannot read it as a call and answers
//! -32601, "method not found", for a method that exists). Both transports run every incoming
//! message through [`precheck`] before rmcp sees it; what passes goes on unchanged.
//!
//! The other codes the MCP spec asks for come from the handler itself: an unknown tool and an
//! invalid `tools/list` cursor are -32602 ([`crate::BrowserServer`]), an unknown method -32601
//! (rmcp).

use serde_json::{Value, json};

/// JSON-RPC 2.0's "Parse error": the message is not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC 2.0's "Invalid Request": JSON, but not a request object.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC 2.0's "Invalid params".
pub const INVALID_PARAMS: i64 = -32602;

/// `None` when `message` may go to rmcp as it is; otherwise the JSON-RPC error response to send
/// back in its place (with the request's `id` where it has one, `null` otherwise).
pub fn precheck(message: &[u8]) -> Option<Value> {
    let parsed: Value = match serde_json::from_slice(message) {
        Ok(parsed) => parsed,
        Err(error) => {
            return Some(error_response(
                &Value::Null,
                PARSE_ERROR,
                &format!("Parse error: the message is not JSON ({error})"),
            ));
        }
    };
    let Some(object) = parsed.as_object() else {
        // An array (a JSON-RPC batch, which MCP no longer has) or a scalar.
        return Some(error_response(
            &Value::Null,
            INVALID_REQUEST,
            "Invalid Request: a message is one JSON-RPC object (MCP has no batches)",
        ));
    };
    let id = object.get("id").cloned().unwrap_or(Value::Null);
    if object.get("method").and_then(Value::as_str) == Some("tools/call") {
        let name = object.get("params").and_then(|params| params.get("name"));
        if !name.is_some_and(Value::is_string) {
            return Some(error_response(
                &id,
                INVALID_PARAMS,
                "Invalid params: tools/call needs `params.name`, the tool's name as tools/list gives it",
            ));
        }
    }
    None
}

/// A JSON-RPC 2.0 error response.
fn error_response(id: &Value, code: i64, message: &str) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } })
}

/// Serves `server` over newline-delimited JSON-RPC on `input`/`output` (MCP's stdio transport),
/// answering what [`precheck`] refuses itself and passing the rest to rmcp. Returns when `input`
/// ends (the client went) or rmcp ends the session.
pub async fn serve_lines(
    server: crate::BrowserServer,
    input: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    output: impl tokio::io::AsyncWrite + Unpin + Send + 'static,
) -> std::io::Result<()> {
    use rmcp::ServiceExt as _;
    use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _};
    /// A line longer than this is not read whole: it answers a parse error and the rest of it
    /// is skipped.
    const MAX_LINE: usize = 4 * 1024 * 1024;
    let (to_rmcp, rmcp_in) = tokio::io::duplex(64 * 1024);
    let (rmcp_out, from_rmcp) = tokio::io::duplex(64 * 1024);
    let (lines, mut to_write) = tokio::sync::mpsc::channel::<Vec<u8>>(64);
    let writer = tokio::spawn(async move {
        let mut output = output;
        while let Some(mut line) = to_write.recv().await {
            line.push(b'\n');
            output.write_all(&line).await?;
            output.flush().await?;
        }
        Ok::<(), std::io::Error>(())
    });
    let answers = lines.clone();
    let relay = tokio::spawn(async move {
        let mut from_rmcp = tokio::io::BufReader::new(from_rmcp);
        let mut line = Vec::new();
        loop {
            line.clear();
            match from_rmcp.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let trimmed = line.trim_ascii_end().to_vec();
                    if answers.send(trimmed).await.is_err() {
                        break;
                    }
                }
            }
        }
    });
    let reader = tokio::spawn(async move {
        let mut to_rmcp = to_rmcp;
        let mut input = tokio::io::BufReader::new(input);
        let mut line = Vec::new();
        loop {
            line.clear();
            let read = (&mut input).take(MAX_LINE as u64).read_until(b'\n', &mut line).await?;
            if read == 0 {
                break;
            }
            let complete = line.ends_with(b"\n");
            let message = line.trim_ascii();
            if message.is_empty() {
                continue;
            }
            let refused = if complete {
                precheck(message)
            } else {
                // Too long: skip to the end of the line.
                skip_line(&mut input).await?;
                Some(error_response(
                    &Value::Null,
                    PARSE_ERROR,
                    "Parse error: the message is longer than this server reads",
                ))
            };
            match refused {
                Some(error) => {
                    if lines.send(error.to_string().into_bytes()).await.is_err() {
                        break;
                    }
                }
                None => {
                    to_rmcp.write_all(message).await?;
                    to_rmcp.write_all(b"\n").await?;
                }
            }
        }
        // Dropping `to_rmcp` ends rmcp's input: the session ends as with a closed stdin.
        Ok::<(), std::io::Error>(())
    });
    let served = server.serve((rmcp_in, rmcp_out)).await.map_err(std::io::Error::other)?;
    let ended = served.waiting().await;
    reader.abort();
    let _ = relay.await;
    let _ = writer.await;
    ended.map(|_| ()).map_err(std::io::Error::other)
}

/// Reads and drops the rest of a line.
async fn skip_line(input: &mut (impl tokio::io::AsyncBufRead + Unpin)) -> std::io::Result<()> {
    use tokio::io::AsyncBufReadExt as _;
    loop {
        let buffer = input.fill_buf().await?;
        if buffer.is_empty() {
            return Ok(());
        }
        match buffer.iter().position(|&b| b == b'\n') {
            Some(at) => {
                input.consume(at + 1);
                return Ok(());
            }
            None => {
                let length = buffer.len();
                input.consume(length);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(answer: &Option<Value>) -> Option<i64> {
        answer.as_ref()?.pointer("/error/code")?.as_i64()
    }

    #[test]
    fn what_rmcp_would_misanswer_gets_the_specs_code_and_the_rest_passes() {
        assert_eq!(code(&precheck(b"{not json")), Some(PARSE_ERROR));
        assert_eq!(code(&precheck(b"[{\"jsonrpc\":\"2.0\"}]")), Some(INVALID_REQUEST));
        let nameless = precheck(br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{}}"#);
        assert_eq!(code(&nameless), Some(INVALID_PARAMS));
        assert_eq!(nameless.and_then(|a| a.get("id").cloned()), Some(json!(7)));
        let numbered = br#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":3}}"#;
        assert_eq!(code(&precheck(numbered)), Some(INVALID_PARAMS));
        assert_eq!(
            precheck(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"browser_tabs"}}"#),
            None
        );
        assert_eq!(precheck(br#"{"jsonrpc":"2.0","id":1,"method":"no/such"}"#), None);
        assert_eq!(
            precheck(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            None
        );
    }

    /// Over stdio, every code the MCP spec names, in order, each with its request's id: what
    /// rmcp would drop or misanswer comes from [`precheck`], the rest from the handler.
    #[tokio::test]
    async fn stdio_answers_each_bad_message_with_its_json_rpc_code() {
        use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
        let state = std::env::temp_dir().join(format!("pap-host-jsonrpc-{}", std::process::id()));
        std::fs::create_dir_all(&state).unwrap();
        let consent = std::sync::Arc::new(
            pap_browser::consent::ConsentHost::open(
                &state,
                std::sync::Arc::new(pap_shared::SystemClock),
                std::sync::Arc::new(pap_shared::SystemRng),
            )
            .unwrap(),
        );
        let tools = pap_browser::tools::ToolHost::new(
            pap_browser::chromium::manifest().unwrap(),
            pap_browser::chromium::BrowserHost::new(),
            pap_browser::chromium::ChromiumConfig::new(state.clone()),
            pap_browser::spec::InstanceKey::try_from("jsonrpc").unwrap(),
            consent,
        );
        let server = crate::BrowserServer::per_request(tools);
        let (client_out, server_in) = tokio::io::duplex(64 * 1024);
        let (server_out, client_in) = tokio::io::duplex(64 * 1024);
        let served = tokio::spawn(serve_lines(server, server_in, server_out));
        let mut to_server = client_out;
        let mut from_server = tokio::io::BufReader::new(client_in).lines();
        let mut ask = async |line: &str| -> Value {
            to_server.write_all(format!("{line}\n").as_bytes()).await.unwrap();
            let answer = tokio::time::timeout(std::time::Duration::from_secs(10), from_server.next_line())
                .await
                .expect("no answer within 10 s")
                .unwrap()
                .expect("the server ended");
            serde_json::from_str(&answer).unwrap()
        };
        let init = ask(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#).await;
        assert_eq!(
            init.pointer("/result/serverInfo/name"),
            Some(&json!("pap-host")),
            "{init}"
        );
        // A notification has no answer: the next line answers the request after it.
        let listed = ask(concat!(
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":6,"method":"tools/list"}"#
        ))
        .await;
        assert!(listed.pointer("/result/tools/0/name").is_some(), "{listed}");
        for (line, id, code) in [
            ("{this is not json", json!(null), PARSE_ERROR),
            (
                r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{}}"#,
                json!(2),
                INVALID_PARAMS,
            ),
            (
                r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"no_such_tool"}}"#,
                json!(3),
                INVALID_PARAMS,
            ),
            (
                r#"{"jsonrpc":"2.0","id":4,"method":"tools/list","params":{"cursor":"x"}}"#,
                json!(4),
                INVALID_PARAMS,
            ),
            (
                r#"{"jsonrpc":"2.0","id":5,"method":"no/such/method"}"#,
                json!(5),
                -32601,
            ),
        ] {
            let answer = ask(line).await;
            assert_eq!(answer.get("id"), Some(&id), "{line}: {answer}");
            assert_eq!(answer.pointer("/error/code"), Some(&json!(code)), "{line}: {answer}");
        }
        drop(to_server);
        tokio::time::timeout(std::time::Duration::from_secs(10), served)
            .await
            .expect("the server did not end with its input")
            .unwrap()
            .unwrap();
        let _ = std::fs::remove_dir_all(&state);
    }
}
