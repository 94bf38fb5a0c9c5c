//! The ways the suite's fake provider can be broken, each turning exactly one hook red.

/// One way to break a provider; each names the hook it must turn red.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Defect {
    /// A second launch starts another instance (L2).
    NonIdempotentLaunch,
    /// `health()` still says healthy after stop (L1).
    HealthyAfterStop,
    /// An unlisted tool fails untyped (T3).
    UntypedUnsupported,
    /// A tool call to a stopped instance fails as an opaque internal error (T4).
    OpaqueNotReady,
    /// `health()` opens a target to probe (L4).
    HealthOpensTarget,
    /// Stop also ends processes without the marker (L5).
    StopKillsUnmarked,
    /// The crash-looping refusal does not carry the last failure (L6).
    CrashLoopWithoutReason,
    /// A timer clears crash-looping (L7).
    CrashLoopClearedByTimer,
    /// The host sweeps nothing when it starts (L8).
    NoSweepOnStart,
    /// A launch is killed at its budget even while it progresses (L9).
    SlowLaunchKilled,
    /// A call while starting fails at once with an opaque timeout (L10).
    OpaqueTimeoutWhileStarting,
    /// The instance runs on the user's default Chromium profile (L13).
    DefaultProfile,
    /// `browser.navigate` goes anywhere: `file:`, `chrome:`, `data:`, loopback (SEC-H3).
    NavigatesAnywhere,
    /// The idle reaper closes keepAlive targets (L11).
    ReaperClosesKeepAlive,
    /// A handle from a previous boot is rebound to a new target (L12).
    StaleHandleRebound,
    /// Stop throws when the instance is already stopped (L5: stop is idempotent).
    StopThrowsSecondTime,
    /// An attach provider's stop ends the instance it did not launch (L5: only with force).
    ForeignStoppedWithoutForce,
    /// Cookies handed over at attach bypass grants (C1).
    GrantBypass,
    /// A wildcard domain is granted (C2).
    WildcardAccepted,
    /// The full-profile grant comes without its warning (C3).
    FullProfileNoWarning,
    /// A request without domains becomes a full-profile grant (C4).
    DefaultAllDomains,
    /// The presence scan reads and shows values (C5).
    ScanShowsValues,
    /// Material goes to a remote sink nobody acknowledged (C6).
    RemoteWithoutAck,
    /// An agent's refresh adds domains or changes the source (C7).
    AgentWidens,
    /// Revoke leaves the instance's cookies and tabs (C8).
    RevokeKeepsCookies,
    /// `browser.profile.list` shows what it read from the source (C9).
    ValueInList,
    /// `ledger verify` counts lines and detects nothing (C10).
    VerifyMissesTruncation,
    /// The grants file is left world-readable (C11).
    LooseFiles,
    /// An agent on any device sees every grant (C12).
    DeviceScopeIgnored,
    /// A revoked pairing changes nothing (C13).
    PairingIgnored,
    /// Every grant's cookies in one jar that every tab shares (SEC-M5).
    OneJar,
}

impl Defect {
    /// Every defect.
    pub const ALL: [Self; 31] = [
        Self::NonIdempotentLaunch,
        Self::HealthyAfterStop,
        Self::UntypedUnsupported,
        Self::OpaqueNotReady,
        Self::HealthOpensTarget,
        Self::StopKillsUnmarked,
        Self::CrashLoopWithoutReason,
        Self::CrashLoopClearedByTimer,
        Self::NoSweepOnStart,
        Self::SlowLaunchKilled,
        Self::OpaqueTimeoutWhileStarting,
        Self::DefaultProfile,
        Self::NavigatesAnywhere,
        Self::ReaperClosesKeepAlive,
        Self::StaleHandleRebound,
        Self::StopThrowsSecondTime,
        Self::ForeignStoppedWithoutForce,
        Self::GrantBypass,
        Self::WildcardAccepted,
        Self::FullProfileNoWarning,
        Self::DefaultAllDomains,
        Self::ScanShowsValues,
        Self::RemoteWithoutAck,
        Self::AgentWidens,
        Self::RevokeKeepsCookies,
        Self::ValueInList,
        Self::VerifyMissesTruncation,
        Self::LooseFiles,
        Self::DeviceScopeIgnored,
        Self::PairingIgnored,
        Self::OneJar,
    ];

    /// The hook this defect must turn red.
    pub fn hook(self) -> &'static str {
        match self {
            Self::NonIdempotentLaunch => "core.lifecycle.launch-idempotent",
            Self::HealthyAfterStop => "core.lifecycle.states",
            Self::UntypedUnsupported => "core.tools.unsupported",
            Self::OpaqueNotReady => "core.tools.error-codes",
            Self::HealthOpensTarget => "core.lifecycle.health-pure",
            Self::StopKillsUnmarked => "core.lifecycle.stop-sweep",
            Self::CrashLoopWithoutReason => "core.supervision.crash-loop",
            Self::CrashLoopClearedByTimer => "core.supervision.reset-operator-only",
            Self::NoSweepOnStart => "core.supervision.reap-on-start",
            Self::SlowLaunchKilled => "core.supervision.launch-budget",
            Self::OpaqueTimeoutWhileStarting => "core.supervision.starting-wait",
            Self::DefaultProfile => "core.lifecycle.chrome-fresh-userdir",
            Self::NavigatesAnywhere => "core.navigation.https-only",
            Self::ReaperClosesKeepAlive => "interaction.targets.keepalive",
            Self::StaleHandleRebound => "interaction.targets.stale-handle",
            Self::StopThrowsSecondTime => "core.lifecycle.stop-sweep",
            Self::ForeignStoppedWithoutForce => "core.lifecycle.stop-sweep",
            Self::GrantBypass => "profile.consent.grant-required",
            Self::WildcardAccepted => "profile.consent.domains-explicit",
            Self::FullProfileNoWarning => "profile.consent.full-profile",
            Self::DefaultAllDomains => "profile.consent.no-default-all",
            Self::ScanShowsValues => "profile.consent.presence-scan",
            Self::RemoteWithoutAck => "profile.consent.sink-ack",
            Self::AgentWidens => "profile.consent.agent-cannot-widen",
            Self::RevokeKeepsCookies => "profile.consent.revoke-deletes",
            Self::ValueInList => "profile.consent.never-print",
            Self::VerifyMissesTruncation => "profile.consent.ledger-append-only",
            Self::LooseFiles => "profile.consent.perms-and-encryption",
            Self::DeviceScopeIgnored => "profile.consent.device-scope",
            Self::PairingIgnored => "profile.consent.pairing-revoked",
            Self::OneJar => "profile.consent.context-isolation",
        }
    }
}
