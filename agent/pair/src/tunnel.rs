//! AIP-59 §5: the tunnel frames that travel inside the `e2e` channel, one JSON object each
//! (`agentproto/tunnel/v1`, the reference's names and fields).
//!
//! ```text
//!  daemon → client  hello{version, capabilities, label}           first frame of every channel
//!  client → daemon  http_request{reqId, method, path, headers, body}
//!  daemon → client  http_response{reqId, status, headers, body}    a short response, whole
//!                   http_response_head{reqId, status, headers}     or a streamed one: its head,
//!                   http_response_chunk{reqId, data, end}          then chunks, the last `end`
//!  client → daemon  http_cancel{reqId}                             abort it; no more frames
//!  either           error{code, message}, ping{nonce}, pong{nonce}
//! ```
//!
//! Bodies travel as standard base64; the raw bytes of one frame's `body` or `data` are at most
//! [`MAX_FRAME_BODY`], so every envelope stays under the broker's 1 MiB message cap.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};

/// The tunnel protocol a `hello` names.
pub const TUNNEL_VERSION: &str = "agentproto/tunnel/v1";
/// The most raw bytes in one frame's `body` or `data` (§5.5): 256 KiB.
pub const MAX_FRAME_BODY: usize = 256 * 1024;
/// The most bytes of one frame's JSON a peer accepts: the body's base64 and room for headers.
pub const MAX_FRAME_JSON: usize = 512 * 1024;
/// The `error` code a revoked pairing's last frame carries (§6).
pub const PAIRING_REVOKED: &str = "pairing_revoked";

/// What the daemon says it can do (`hello.capabilities`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Capabilities {
    /// Spawning processes in a terminal: never, here.
    #[serde(default)]
    pub pty: bool,
    /// `http_cancel` aborts a request upstream.
    #[serde(default)]
    pub http_cancel: bool,
    /// `http_request` with `bodyChunked` and `http_request_chunk` frames.
    #[serde(default)]
    pub http_request_chunks: bool,
}

/// A failure carried by a response frame.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameError {
    /// Stable and machine-readable: `timeout`, `upstream_failed`, `busy`, …
    pub code: String,
    /// For a person; never carries a secret.
    pub message: String,
}

/// One tunnel frame.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum Frame {
    /// The daemon's first frame on every channel.
    Hello {
        /// [`TUNNEL_VERSION`].
        version: String,
        /// What it can do.
        capabilities: Capabilities,
        /// Its name, shown to the person beside the fingerprint (§3.6).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label: Option<String>,
    },
    /// A request for the daemon's HTTP surface.
    HttpRequest {
        /// Chosen by the client, unique among its requests in flight.
        #[serde(rename = "reqId")]
        req_id: String,
        /// `GET`, `POST`, `DELETE`, …
        method: String,
        /// The path and query (`/mcp`): never an absolute URL.
        path: String,
        /// The request's headers (the daemon drops hop-by-hop ones and credentials).
        #[serde(default)]
        headers: BTreeMap<String, String>,
        /// The body, standard base64.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        body: Option<String>,
        /// The body follows in `http_request_chunk` frames (only to a daemon that offers it).
        #[serde(rename = "bodyChunked", default, skip_serializing_if = "std::ops::Not::not")]
        body_chunked: bool,
        /// How long the daemon may take, in milliseconds (30 s when absent).
        #[serde(rename = "timeoutMs", default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
    },
    /// A short response, whole.
    HttpResponse {
        /// The request's.
        #[serde(rename = "reqId")]
        req_id: String,
        /// The status (502 or 504 with `error` when the daemon could not get one).
        status: u16,
        /// Its headers.
        #[serde(default)]
        headers: BTreeMap<String, String>,
        /// The body, standard base64.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        body: Option<String>,
        /// Set when the daemon failed to complete the call.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<FrameError>,
    },
    /// A streamed response's status and headers, before its chunks.
    HttpResponseHead {
        /// The request's.
        #[serde(rename = "reqId")]
        req_id: String,
        /// The status.
        status: u16,
        /// Its headers.
        #[serde(default)]
        headers: BTreeMap<String, String>,
    },
    /// Some bytes of a streamed response; the last has `end`.
    HttpResponseChunk {
        /// The request's.
        #[serde(rename = "reqId")]
        req_id: String,
        /// The bytes, standard base64 (absent on a bare end marker).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data: Option<String>,
        /// The last chunk.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        end: bool,
        /// The upstream failed mid-stream.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<FrameError>,
    },
    /// The client gave up on a request: the daemon aborts it and sends nothing more for it.
    HttpCancel {
        /// The request's.
        #[serde(rename = "reqId")]
        req_id: String,
    },
    /// A failure of the tunnel (`pairing_revoked`, …).
    Error {
        /// Stable and machine-readable.
        code: String,
        /// For a person.
        message: String,
    },
    /// Either side checks the other is alive; the answer is a `pong` with the same nonce.
    Ping {
        /// Echoed.
        nonce: String,
    },
    /// The answer to a `ping`.
    Pong {
        /// The ping's.
        nonce: String,
    },
}

/// Why a frame was not read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameDecodeError {
    /// Longer than [`MAX_FRAME_JSON`].
    #[error("a tunnel frame over {MAX_FRAME_JSON} bytes")]
    TooLong,
    /// Not a frame this side knows (its type or fields).
    #[error("not a tunnel frame this side knows")]
    Unknown,
    /// A `body` or `data` that is not base64, or over [`MAX_FRAME_BODY`] bytes.
    #[error("a frame body that is not base64 of at most {MAX_FRAME_BODY} bytes")]
    Body,
}

impl Frame {
    /// Reads a frame (the plaintext of one `e2e` envelope).
    pub fn decode(json: &[u8]) -> Result<Self, FrameDecodeError> {
        if json.len() > MAX_FRAME_JSON {
            return Err(FrameDecodeError::TooLong);
        }
        let frame: Self = serde_json::from_slice(json).map_err(|_| FrameDecodeError::Unknown)?;
        let body = match &frame {
            Self::HttpRequest { body, .. } | Self::HttpResponse { body, .. } => body.as_deref(),
            Self::HttpResponseChunk { data, .. } => data.as_deref(),
            _ => None,
        };
        if let Some(body) = body {
            decode_body(body)?;
        }
        Ok(frame)
    }

    /// The frame's JSON.
    pub fn encode(&self) -> Vec<u8> {
        // A frame of strings, numbers and maps of strings always serialises.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// Base64 of a body of at most [`MAX_FRAME_BODY`] bytes (the caller splits larger ones).
pub fn encode_body(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

/// The bytes of a frame's `body` or `data`.
pub fn decode_body(text: &str) -> Result<Vec<u8>, FrameDecodeError> {
    // Its base64 first (no decoding of an obviously long one), then the bytes themselves.
    if text.len() > MAX_FRAME_BODY.div_ceil(3) * 4 {
        return Err(FrameDecodeError::Body);
    }
    let bytes = STANDARD.decode(text).map_err(|_| FrameDecodeError::Body)?;
    if bytes.len() > MAX_FRAME_BODY {
        return Err(FrameDecodeError::Body);
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_carry_the_reference_names() {
        let request = Frame::HttpRequest {
            req_id: "r1".into(),
            method: "POST".into(),
            path: "/mcp".into(),
            headers: BTreeMap::from([("content-type".into(), "application/json".into())]),
            body: Some(encode_body(b"{}")),
            body_chunked: false,
            timeout_ms: None,
        };
        let json = String::from_utf8(request.encode()).unwrap_or_default();
        assert_eq!(
            json,
            r#"{"t":"http_request","reqId":"r1","method":"POST","path":"/mcp","headers":{"content-type":"application/json"},"body":"e30="}"#
        );
        assert_eq!(Frame::decode(json.as_bytes()), Ok(request));
        let hello = Frame::Hello {
            version: TUNNEL_VERSION.into(),
            capabilities: Capabilities {
                http_cancel: true,
                ..Capabilities::default()
            },
            label: Some("laptop".into()),
        };
        assert_eq!(
            String::from_utf8(hello.encode()).unwrap_or_default(),
            r#"{"t":"hello","version":"agentproto/tunnel/v1","capabilities":{"pty":false,"httpCancel":true,"httpRequestChunks":false},"label":"laptop"}"#
        );
        let end = Frame::decode(br#"{"t":"http_response_chunk","reqId":"r1","end":true}"#);
        assert!(matches!(
            end,
            Ok(Frame::HttpResponseChunk {
                end: true,
                data: None,
                ..
            })
        ));
    }

    #[test]
    fn unknown_oversized_and_bad_bodies_are_refused() {
        assert_eq!(
            Frame::decode(br#"{"t":"spawn","execId":"x"}"#),
            Err(FrameDecodeError::Unknown)
        );
        assert_eq!(Frame::decode(b"not json"), Err(FrameDecodeError::Unknown));
        let long = vec![b' '; MAX_FRAME_JSON + 1];
        assert_eq!(Frame::decode(&long), Err(FrameDecodeError::TooLong));
        let bad = br#"{"t":"http_response","reqId":"r","status":200,"body":"***"}"#;
        assert_eq!(Frame::decode(bad), Err(FrameDecodeError::Body));
        let over = encode_body(&vec![0_u8; MAX_FRAME_BODY + 1]);
        let frame = format!(r#"{{"t":"http_response_chunk","reqId":"r","data":"{over}"}}"#);
        // (Compared without printing: a failure would print 350 KB of base64.)
        assert!(Frame::decode(frame.as_bytes()) == Err(FrameDecodeError::Body));
        let most = encode_body(&vec![0_u8; MAX_FRAME_BODY]);
        let frame = format!(r#"{{"t":"http_response_chunk","reqId":"r","data":"{most}"}}"#);
        assert!(Frame::decode(frame.as_bytes()).is_ok());
    }
}
