//! Custom domains of apps: extra host names the proxy sends to an app, each with a TLS
//! certificate from the operator's files or from ACME ([`crate::certs`]).

use pandastack_api_types::{AppDomain, DomainTls};
use pandastack_store::{now_ms, AppRow, CertState, DomainRow, StoreError};

/// Why a custom domain operation failed.
#[derive(Debug, thiserror::Error)]
pub enum DomainError {
    /// A custom domain the platform cannot give an app.
    #[error("{0}")]
    BadDomain(String),
    /// A custom domain another app has.
    #[error("domain {0} belongs to another app")]
    DomainTaken(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Custom domains of this host's apps and their certificates.
#[derive(Clone)]
pub struct Domains {
    store: pandastack_store::Store,
    /// The platform's own domain (`<name>.<domain>` is an app): never a custom one.
    own: String,
    /// Certificates of custom domains (`None`: the proxy serves no TLS).
    certs: Option<crate::Certificates>,
}

impl Domains {
    pub fn new(
        store: pandastack_store::Store,
        own: String,
        certs: Option<crate::Certificates>,
    ) -> Self {
        Self { store, own, certs }
    }

    /// Makes `domains` the custom domains of `app`: new ones are added (an ACME order queued
    /// for each that no file certificate covers), missing ones removed with their
    /// certificates. A name under the platform's own domain, or one another app has, is
    /// refused and nothing changes.
    pub(crate) async fn set_domains(
        &self,
        app: &AppRow,
        domains: &[String],
    ) -> Result<(), DomainError> {
        let own = &self.own;
        for d in domains {
            if d == own || d.ends_with(&format!(".{own}")) {
                return Err(DomainError::BadDomain(format!(
                    "{d} is under this platform's domain {own}: apps answer at <name>.{own} already"
                )));
            }
            match self.store.domains().get(d).await {
                Ok(row) if row.app_id != app.id => return Err(DomainError::DomainTaken(d.clone())),
                Ok(_) | Err(StoreError::NotFound) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let added = match self
            .store
            .domains()
            .set_for_app(
                &app.id,
                &app.workspace_id,
                domains,
                CertState::None,
                now_ms(),
            )
            .await
        {
            Ok(a) => a,
            // Another app took one between the check and the write.
            Err(StoreError::Conflict) => {
                return Err(DomainError::DomainTaken(domains.join(", ")));
            }
            Err(e) => return Err(e.into()),
        };
        if let Some(certs) = &self.certs {
            for d in &added {
                if certs.config.initial_state(d) == CertState::Pending {
                    self.store
                        .domains()
                        .set_state(d, CertState::Pending, None, now_ms())
                        .await?;
                    certs.order(d).await?;
                }
            }
        }
        Ok(())
    }

    /// The name of the app serving custom domain `host` (lower case, without a port).
    pub async fn app_for_domain(&self, host: &str) -> Result<Option<String>, DomainError> {
        Ok(self.store.domains().app_name(host).await?)
    }

    /// The key authorization of a pending ACME HTTP-01 challenge with `token`.
    pub async fn acme_challenge(&self, token: &str) -> Result<Option<String>, DomainError> {
        Ok(self.store.domains().challenge(token).await?)
    }

    /// The API view of an app's domains.
    pub(crate) async fn domains_of(&self, app_id: &str) -> Result<Vec<DomainRow>, DomainError> {
        Ok(self.store.domains().for_app(app_id).await?)
    }

    /// How a stored domain shows in the API.
    pub fn domain_view(&self, d: &DomainRow) -> AppDomain {
        let files = self
            .certs
            .as_ref()
            .is_some_and(|c| c.config.files(&d.domain).is_some());
        let tls = match d.cert_state {
            _ if files => DomainTls::Files,
            CertState::None => DomainTls::None,
            CertState::Pending => DomainTls::Pending,
            CertState::Issued => DomainTls::Issued,
            CertState::Failed => DomainTls::Failed,
        };
        AppDomain {
            name: d.domain.clone(),
            tls,
            tls_expires_at: match tls {
                DomainTls::Issued => d.not_after.map(crate::databases::rfc3339),
                _ => None,
            },
            tls_error: match tls {
                DomainTls::Failed | DomainTls::Pending => d.cert_error.clone(),
                _ => None,
            },
        }
    }
}
