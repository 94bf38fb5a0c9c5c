//! AIP-59 §3.5: the `e2e` channel. Every tunnel frame after the handshake travels as
//! `{"t":"e2e","n":n,"d":base64(AES-256-GCM(frame))}`, with `n` a counter per direction from 0,
//! the nonce four zero bytes and `u64be(n)`, the AAD `u64be(n)`. A receiver takes exactly the
//! next `n` and nothing that is not an `e2e` envelope; any failure ends the channel for good
//! (a [`Receiver`] that failed opens nothing more). A sender stops before `n` reaches 2³².

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

/// The most frames one direction sends with one key: then it must reconnect (a new handshake).
pub const MAX_FRAMES: u64 = 1 << 32;
const TAG_LEN: usize = 16;

/// Why the channel ended. The channel is closed on every one of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChannelError {
    /// A counter already passed: a replayed or duplicated frame.
    #[error("replayed frame")]
    Replay,
    /// A counter ahead of the next: a dropped or reordered frame.
    #[error("out-of-order or dropped frame")]
    Reorder,
    /// The tag does not verify: the ciphertext or its counter was altered.
    #[error("a frame failed authentication")]
    Auth,
    /// The envelope is not one, or its payload is not base64 holding a tag.
    #[error("a malformed e2e envelope")]
    Decode,
    /// A frame that is not an `e2e` envelope once the channel is live (a downgrade).
    #[error("a plaintext frame on an encrypted channel")]
    NotE2e,
    /// The send counter reached [`MAX_FRAMES`]: reconnect to rekey.
    #[error("the send counter reached its limit; reconnect")]
    Overflow,
    /// The channel already failed.
    #[error("the channel is closed")]
    Closed,
}

/// The envelope on the wire.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    /// Always `e2e`.
    pub t: String,
    /// The sender's counter.
    pub n: u64,
    /// The ciphertext and its tag, standard base64.
    pub d: String,
}

fn key(raw: &[u8; 32]) -> Result<LessSafeKey, ChannelError> {
    UnboundKey::new(&AES_256_GCM, raw)
        .map(LessSafeKey::new)
        .map_err(|_| ChannelError::Auth)
}

fn nonce(n: u64) -> Nonce {
    let mut bytes = [0_u8; 12];
    bytes[4..].copy_from_slice(&n.to_be_bytes());
    Nonce::assume_unique_for_key(bytes)
}

/// The sending half: seals frames in counter order.
pub struct Sender {
    key: LessSafeKey,
    next: u64,
}

impl std::fmt::Debug for Sender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender")
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

impl Sender {
    /// A sender with this side's send key.
    pub fn new(send_key: &[u8; 32]) -> Result<Self, ChannelError> {
        Ok(Self {
            key: key(send_key)?,
            next: 0,
        })
    }

    /// The envelope of `frame` (a tunnel frame's JSON), under the next counter.
    pub fn seal(&mut self, frame: &[u8]) -> Result<Envelope, ChannelError> {
        if self.next >= MAX_FRAMES {
            return Err(ChannelError::Overflow);
        }
        let n = self.next;
        let mut data = frame.to_vec();
        self.key
            .seal_in_place_append_tag(nonce(n), Aad::from(n.to_be_bytes()), &mut data)
            .map_err(|_| ChannelError::Auth)?;
        self.next += 1;
        Ok(Envelope {
            t: "e2e".to_owned(),
            n,
            d: STANDARD.encode(&data),
        })
    }

    /// How many frames it sealed.
    pub fn sent(&self) -> u64 {
        self.next
    }
}

/// The receiving half: opens exactly the next frame, and nothing once anything failed.
pub struct Receiver {
    key: LessSafeKey,
    expected: u64,
    failed: bool,
}

impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("expected", &self.expected)
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

impl Receiver {
    /// A receiver with this side's receive key.
    pub fn new(recv_key: &[u8; 32]) -> Result<Self, ChannelError> {
        Ok(Self {
            key: key(recv_key)?,
            expected: 0,
            failed: false,
        })
    }

    /// The frame a message carries (a WebSocket text message, as received).
    pub fn open(&mut self, message: &str) -> Result<Zeroizing<Vec<u8>>, ChannelError> {
        if self.failed {
            return Err(ChannelError::Closed);
        }
        let opened = self.open_next(message);
        if opened.is_err() {
            self.failed = true;
        }
        opened
    }

    fn open_next(&mut self, message: &str) -> Result<Zeroizing<Vec<u8>>, ChannelError> {
        let value: serde_json::Value = serde_json::from_str(message).map_err(|_| ChannelError::Decode)?;
        if value.get("t").and_then(serde_json::Value::as_str) != Some("e2e") {
            return Err(ChannelError::NotE2e);
        }
        let envelope: Envelope = serde_json::from_value(value).map_err(|_| ChannelError::Decode)?;
        if envelope.n < self.expected {
            return Err(ChannelError::Replay);
        }
        if envelope.n > self.expected {
            return Err(ChannelError::Reorder);
        }
        let mut data = Zeroizing::new(STANDARD.decode(&envelope.d).map_err(|_| ChannelError::Decode)?);
        if data.len() < TAG_LEN {
            return Err(ChannelError::Decode);
        }
        let n = envelope.n;
        let plain_len = self
            .key
            .open_in_place(nonce(n), Aad::from(n.to_be_bytes()), &mut data)
            .map_err(|_| ChannelError::Auth)?
            .len();
        data.truncate(plain_len);
        self.expected += 1;
        Ok(data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sender_stops_before_its_counter_reaches_two_to_the_32() {
        let mut sender = Sender::new(&[7; 32]).unwrap_or_else(|_| unreachable!());
        sender.next = MAX_FRAMES - 1;
        assert_eq!(sender.seal(b"{}").map(|e| e.n), Ok(MAX_FRAMES - 1));
        assert_eq!(sender.seal(b"{}"), Err(ChannelError::Overflow));
        assert_eq!(sender.sent(), MAX_FRAMES);
    }
}
