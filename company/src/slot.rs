//! Where a record lives in a Redis Cluster: its *hash tag* (`--store redis-cluster://…`).
//!
//! Redis Cluster spreads keys over 16,384 slots by a hash of the key, or, when the key has one,
//! of the part between its first `{` and the next `}` (its hash tag). A script may touch the
//! keys of one slot only, and everything the company does at most once is one script: a
//! commit of records, a replay mark with its owner's tally, a join (the Session's version, the
//! mark and the cookie's binding). So every key one of them touches carries one tag, its
//! **owner's** ([`Owner`], review N3: the registrable domain of the client whose records they
//! are). A client's Sessions, tokens, operations, replay marks and cookies live in its owner's
//! slot: owners spread over the cluster's shards, and one owner's load stays on one shard (the
//! price of its share of the replay guard being one atomic tally).
//!
//! Keys are found from what a stranger presents (a cookie, a token, a Session id, an operation
//! id, a device code), so every value the company mints carries its tag in its first
//! characters after its prefix (`ses_` + tag + random, [`SlotTag::mint`]), and
//! [`SlotTag::of_minted`] reads it back. A value that carries no tag is keyed without one, and
//! is simply not found. [`crate::records::Commit::apply`] refuses a commit whose keys have
//! different tags in every store, so a test in memory finds what a cluster would refuse.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use pap_shared::SessionId;

use crate::share::Owner;

/// How many characters a tag has: four hex digits, 65,536 tags over the cluster's 16,384 slots.
const TAG_LEN: usize = 4;

/// An owner's hash tag: four lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlotTag([u8; TAG_LEN]);

impl SlotTag {
    /// The tag of `owner`'s records.
    pub fn of(owner: Owner) -> Self {
        let mut tag = [0; TAG_LEN];
        for (i, byte) in owner.as_bytes()[..TAG_LEN / 2].iter().enumerate() {
            tag[2 * i] = HEX[usize::from(byte >> 4)];
            tag[2 * i + 1] = HEX[usize::from(byte & 0x0f)];
        }
        Self(tag)
    }

    /// A fresh value `prefix` + this tag + `random` (base64url), e.g. `ses_1f2eAbC…`. Written
    /// into the one string it returns, sized for it: minting a token leaves no other copy of
    /// it in memory (a base64 string of its own, or a buffer left behind by growing).
    pub fn mint(self, prefix: &str, random: &[u8]) -> String {
        let encoded = random.len().div_ceil(3) * 4;
        let mut value = String::with_capacity(prefix.len() + TAG_LEN + encoded);
        value.push_str(prefix);
        value.push_str(self.as_str());
        URL_SAFE_NO_PAD.encode_string(random, &mut value);
        value
    }

    /// The tag a value [`Self::mint`]ed with `prefix` carries; `None` for any other value.
    pub fn of_minted(value: &str, prefix: &str) -> Option<Self> {
        let tag = value.strip_prefix(prefix)?.as_bytes().get(..TAG_LEN)?;
        tag.iter()
            .all(|b| HEX.contains(b))
            .then(|| Self([tag[0], tag[1], tag[2], tag[3]]))
    }

    /// The tag of a Session id the company minted (`ses_` + tag + random).
    pub fn of_session(id: &SessionId) -> Option<Self> {
        Self::of_minted(id.as_str(), SESSION_ID_PREFIX)
    }

    /// The four digits.
    pub fn as_str(&self) -> &str {
        // Always four ASCII hex digits (built only from `HEX`).
        std::str::from_utf8(&self.0).unwrap_or("0000")
    }
}

impl fmt::Debug for SlotTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SlotTag({})", self.as_str())
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// What a Session id starts with.
pub const SESSION_ID_PREFIX: &str = "ses_";

/// The key `kind:{tag}rest`, or `kind:rest` for no tag (a value the company did not mint).
pub fn key(kind: &str, tag: Option<SlotTag>, rest: &str) -> String {
    format!("{kind}:{}", tagged(tag, rest))
}

/// `{tag}rest`, or `rest` for no tag.
pub fn tagged(tag: Option<SlotTag>, rest: &str) -> String {
    match tag {
        Some(tag) => format!("{{{}}}{rest}", tag.as_str()),
        None => rest.to_owned(),
    }
}

/// The part of `key` Redis Cluster hashes to find its slot: the text between the first `{` and
/// the next `}` when it is not empty, otherwise the whole key.
pub fn hash_tag(key: &str) -> &str {
    if let Some(open) = key.find('{')
        && let Some(length) = key[open + 1..].find('}')
        && length > 0
    {
        return &key[open + 1..open + 1 + length];
    }
    key
}

/// Whether every key lies in one slot of a Redis Cluster (by having one hash tag).
pub fn one_slot<'a>(mut keys: impl Iterator<Item = &'a str>) -> bool {
    let Some(first) = keys.next() else {
        return true;
    };
    let tag = hash_tag(first);
    keys.all(|key| hash_tag(key) == tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minted_value_carries_its_owners_tag_and_nothing_else_reads_as_one() {
        let owner = Owner::named("domain", "atlas.example");
        let tag = SlotTag::of(owner);
        assert_eq!(tag.as_str(), &Owner::named("domain", "atlas.example").to_hex()[..4]);
        let value = tag.mint("ses_", &[7; 16]);
        assert_eq!(value.len(), 4 + 4 + 22);
        assert_eq!(
            value,
            format!("ses_{}{}", tag.as_str(), URL_SAFE_NO_PAD.encode([7; 16]))
        );
        assert_eq!(SlotTag::of_minted(&value, "ses_"), Some(tag));
        assert_eq!(SlotTag::of_minted(&value, "sat_"), None);
        assert_eq!(SlotTag::of_minted("ses_AB12rest", "ses_"), None, "not lowercase hex");
        assert_eq!(SlotTag::of_minted("ses_ab1", "ses_"), None, "too short");
        assert_eq!(SlotTag::of_minted("ses_ab1é", "ses_"), None);
    }

    #[test]
    fn keys_hash_by_their_tag_as_redis_cluster_does() {
        let tag = SlotTag::of(Owner::named("domain", "atlas.example"));
        let session = key("session", Some(tag), "ses_x");
        assert_eq!(hash_tag(&session), tag.as_str());
        assert_eq!(hash_tag("pap:record:account:{1f2e}acct_1f2e"), "1f2e");
        assert_eq!(hash_tag("count:plain"), "count:plain");
        assert_eq!(hash_tag("a{}b{c}"), "a{}b{c}", "an empty first tag: the whole key");
        assert_eq!(hash_tag("a{b"), "a{b");
        assert!(one_slot([session.as_str()].into_iter()));
        assert!(one_slot(
            [session.as_str(), key("tokens", Some(tag), "y").as_str()].into_iter()
        ));
        assert!(!one_slot([session.as_str(), "count:plain"].into_iter()));
    }
}
