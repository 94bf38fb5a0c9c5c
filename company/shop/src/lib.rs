#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod local;
mod metrics;
mod reference;

pub use local::{LocalCompany, LocalCompanyError};
pub use metrics::{MetricsError, install_metrics};
pub use reference::{
    AccountConfig, CompanyConfig, CompanyStores, ConfigError, ProposalConfig, ReadConfig, ReferenceCompany, ScopeConfig,
};

/// Every bound the reference company puts on what strangers can make it hold or do, in one
/// place: its own (record capacity, attempts, operations, pending sign-ins) beside the
/// verifier's ([`pap_company::limits`]) and the server's ([`pap_net::serve::ServeLimits`]). A
/// store at its capacity refuses new work (429 or 503) rather than drop what must not be lost.
pub mod limits {
    pub use crate::reference::{
        ACCOUNT_ATTEMPTS, ADDRESS_ATTEMPTS, ATTEMPT_WINDOW, LOOKUP_ATTEMPTS, OPERATION_RETENTION,
        OPERATIONS_PER_ACCOUNT, PENDING_PER_CLIENT, RECORD_CAPACITY, SESSION_TOKENS_PER_SESSION,
    };
    pub use pap_company::limits::*;
    pub use pap_net::serve::RESERVED_FILES;
}
