//! Who calls the API and the operations endpoint (PAP §4.3): a live, DPoP-bound Session Token
//! with a proof for this very request.

use http::{HeaderMap, Method, StatusCode, Uri, header};
use pap_shared::{ClientId, OAuthErrorCode, SessionId};

use super::ReferenceCompany;
use super::protocol::ApiError;

/// Who is calling: a live Session Token, its proof checked.
#[derive(Clone, Debug)]
pub(crate) struct Caller {
    pub(crate) client_id: ClientId,
    pub(crate) session: SessionId,
    pub(crate) record: pap_company::stores::SessionRecord,
}

impl ReferenceCompany {
    /// Authenticates an API call: `Authorization: DPoP <Session Token>` (exactly one header, the
    /// DPoP scheme; never a cookie, never a URL), a live token, a proof for this request with
    /// `ath`, made with the key the token is bound to.
    pub(crate) async fn caller(&self, headers: &HeaderMap, method: &Method, uri: &Uri) -> Result<Caller, ApiError> {
        let invalid_token = || ApiError::challenge(StatusCode::UNAUTHORIZED, OAuthErrorCode::InvalidToken);
        if uri
            .query()
            .is_some_and(|q| url::form_urlencoded::parse(q.as_bytes()).any(|(k, _)| k == "access_token"))
        {
            return Err(ApiError::bad_request(OAuthErrorCode::InvalidRequest));
        }
        let mut values = headers.get_all(header::AUTHORIZATION).iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            return Err(invalid_token());
        };
        let value = value.to_str().map_err(|_| invalid_token())?;
        let (scheme, token) = value.split_once(' ').ok_or_else(invalid_token)?;
        if !scheme.eq_ignore_ascii_case("DPoP") || token.is_empty() {
            return Err(invalid_token());
        }
        let record = self
            .access_token(token)
            .await
            .map_err(ApiError::store)?
            .ok_or_else(invalid_token)?;
        let thumbprint = self
            .check_dpop(headers, method.as_str(), uri.path(), Some(token), &record.client_id)
            .await?;
        if thumbprint != record.thumbprint {
            return Err(ApiError::challenge(
                StatusCode::UNAUTHORIZED,
                OAuthErrorCode::InvalidDpopProof,
            ));
        }
        let session = self.session_record(&record.session).await?.ok_or_else(invalid_token)?;
        Ok(Caller {
            client_id: record.client_id,
            session: record.session,
            record: session,
        })
    }
}
