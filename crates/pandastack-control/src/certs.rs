//! TLS certificates of apps' custom domains: from files an operator keeps in a directory, or
//! issued by an ACME CA (Let's Encrypt, or Debian's `pebble` in tests) over HTTP-01.
//!
//! **Files** come first: `<dir>/<domain>/fullchain.pem` and `<dir>/<domain>/privkey.pem` (the
//! layout of certbot's `/etc/letsencrypt/live`, so that directory can be given as it is). A
//! domain with both files gets no ACME order.
//!
//! **ACME**: adding a domain that no file covers queues a durable job (`acme_order`, any host
//! may run it, three attempts a minute apart). The runner orders a certificate for the one
//! name, puts the HTTP-01 challenge's token and key authorization in the domain's row — the CA
//! fetches `http://<domain>/.well-known/acme-challenge/<token>` from whichever host its DNS
//! names, and every host's proxy answers from the store —, lets the CA validate, finalizes
//! with a fresh key (ECDSA P-256, made by rcgen) and stores chain and key in the row. Proxies
//! load certificates from the store when a client names the domain. One account per directory
//! URL is kept in the store, shared by all hosts. A renewal loop queues a new order for
//! certificates within 30 days of their end and, every hour, for domains whose order failed.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeType, Identifier, NewAccount,
    NewOrder, OrderStatus, RetryPolicy,
};
use pandastack_store::{now_ms, CertState, JobRow, NewJob, Store, StoreError};
use tokio::sync::Notify;

use crate::jobs::Runner;

/// Kind of the certificate-order jobs.
pub const ACME_JOB_KIND: &str = "acme_order";
/// A certificate this close to its end is renewed.
const RENEW_BEFORE: Duration = Duration::from_secs(30 * 86_400);
/// How often the renewal loop looks.
const RENEW_EVERY: Duration = Duration::from_secs(600);
/// A failed order is tried again after this long.
const RETRY_FAILED: Duration = Duration::from_secs(3600);
/// Longest the CA may take to validate, and then to issue.
const ORDER_TIMEOUT: Duration = Duration::from_secs(120);

/// Where an ACME CA is and how the account is made.
#[derive(Debug, Clone)]
pub struct AcmeConfig {
    /// The directory URL, e.g. `https://acme-v02.api.letsencrypt.org/directory`.
    pub directory: String,
    /// Contact of the account (`mailto:` is added to a bare address).
    pub contact: Option<String>,
    /// A PEM CA certificate to trust for the directory's HTTPS, instead of the system's roots
    /// (a test CA such as pebble's).
    pub root: Option<PathBuf>,
}

/// Where custom domains' certificates come from.
#[derive(Debug, Clone, Default)]
pub struct CertConfig {
    /// `<dir>/<domain>/{fullchain,privkey}.pem`.
    pub dir: Option<PathBuf>,
    pub acme: Option<AcmeConfig>,
}

/// Why a certificate could not be had.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("acme: {0}")]
    Acme(#[from] instant_acme::Error),
    #[error("acme: {0}")]
    Protocol(String),
    #[error("certificate: {0}")]
    Parse(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("acme account credentials: {0}")]
    Credentials(#[from] serde_json::Error),
}

impl CertConfig {
    /// The certificate and key files of `domain`, if both are there.
    pub fn files(&self, domain: &str) -> Option<(PathBuf, PathBuf)> {
        let d = self.dir.as_ref()?.join(domain);
        let (cert, key) = (d.join("fullchain.pem"), d.join("privkey.pem"));
        (cert.is_file() && key.is_file()).then_some((cert, key))
    }

    /// The state a newly added domain starts in: `pending` when an ACME order will be queued.
    pub fn initial_state(&self, domain: &str) -> CertState {
        if self.acme.is_some() && self.files(domain).is_none() {
            CertState::Pending
        } else {
            CertState::None
        }
    }
}

/// Issues certificates for custom domains over ACME (the `acme_order` jobs).
#[derive(Clone)]
pub struct Certificates {
    store: Store,
    host_id: String,
    pub config: Arc<CertConfig>,
    wake: Arc<Notify>,
}

impl Certificates {
    pub fn new(store: Store, host_id: String, config: CertConfig) -> Self {
        Self {
            store,
            host_id,
            config: Arc::new(config),
            wake: Arc::default(),
        }
    }

    /// Queues an order for `domain` (nothing when ACME is off or one is queued already).
    pub async fn order(&self, domain: &str) -> Result<(), StoreError> {
        if self.config.acme.is_none() {
            return Ok(());
        }
        let job = NewJob {
            kind: ACME_JOB_KIND.into(),
            resource: format!("domain:{domain}"),
            host_id: None,
            payload: serde_json::json!({ "domain": domain }),
            max_attempts: 3,
            run_after: now_ms(),
        };
        match self.store.jobs().enqueue(&job).await {
            Ok(_) | Err(StoreError::Conflict) => {}
            Err(e) => return Err(e),
        }
        self.wake.notify_one();
        Ok(())
    }

    /// Starts the order runner and the renewal loop (when ACME is configured); returns their
    /// tasks.
    pub fn start(&self) -> Vec<tokio::task::JoinHandle<()>> {
        if self.config.acme.is_none() {
            return Vec::new();
        }
        let runner = Runner {
            store: self.store.clone(),
            host_id: self.host_id.clone(),
            kind: ACME_JOB_KIND,
            wake: Arc::clone(&self.wake),
            retry_after: Duration::from_secs(60),
        };
        let me = self.clone();
        let orders = tokio::spawn(runner.run(move |job| {
            let me = me.clone();
            async move { me.run(job).await }
        }));
        let me = self.clone();
        let renewals = tokio::spawn(async move {
            loop {
                if let Err(e) = me.queue_renewals().await {
                    tracing::warn!(
                        error = &e as &dyn std::error::Error,
                        "queue certificate renewals"
                    );
                }
                tokio::time::sleep(RENEW_EVERY).await;
            }
        });
        vec![orders, renewals]
    }

    /// Orders for certificates near their end and for failed orders an hour old.
    async fn queue_renewals(&self) -> Result<(), StoreError> {
        let now = now_ms();
        let due = self
            .store
            .domains()
            .expiring(now + RENEW_BEFORE.as_millis() as i64)
            .await?;
        let failed = self
            .store
            .domains()
            .failed_before(now - RETRY_FAILED.as_millis() as i64)
            .await?;
        for d in due.iter().chain(&failed) {
            if self.config.files(&d.domain).is_none() {
                self.order(&d.domain).await?;
            }
        }
        Ok(())
    }

    /// One job: an order for the domain in its payload. The last attempt's failure is
    /// written to the domain (`failed`, with the reason).
    async fn run(&self, job: JobRow) -> Result<(), String> {
        let Some(domain) = job.payload["domain"].as_str().map(str::to_owned) else {
            return Err("job without a domain".into());
        };
        match self.store.domains().get(&domain).await {
            Ok(_) => {}
            // The domain was removed since: nothing to do.
            Err(StoreError::NotFound) => return Ok(()),
            Err(e) => return Err(e.to_string()),
        }
        let _ = self
            .store
            .domains()
            .set_state(&domain, CertState::Pending, None, now_ms())
            .await;
        match self.issue(&domain).await {
            Ok(()) => {
                tracing::info!(%domain, "certificate issued");
                Ok(())
            }
            Err(e) => {
                let message = pandastack_host::error_chain(&e);
                tracing::warn!(%domain, attempt = job.attempts, error = &e as &dyn std::error::Error, "certificate order");
                let last = job.attempts >= job.max_attempts;
                let state = if last {
                    CertState::Failed
                } else {
                    CertState::Pending
                };
                let _ = self
                    .store
                    .domains()
                    .set_state(&domain, state, Some(&message), now_ms())
                    .await;
                let _ = self
                    .store
                    .domains()
                    .set_challenge(&domain, None, now_ms())
                    .await;
                Err(message)
            }
        }
    }

    /// The account at the configured directory: the stored one, or a new one stored for all.
    async fn account(&self, acme: &AcmeConfig) -> Result<Account, CertError> {
        let builder = || match &acme.root {
            Some(root) => Account::builder_with_root(root),
            None => Account::builder(),
        };
        if let Some(creds) = self.store.domains().acme_account(&acme.directory).await? {
            let creds: AccountCredentials = serde_json::from_str(&creds)?;
            return Ok(builder()?.from_credentials(creds).await?);
        }
        let contact = acme.contact.as_ref().map(|c| {
            if c.contains(':') {
                c.clone()
            } else {
                format!("mailto:{c}")
            }
        });
        let contacts: Vec<&str> = contact.iter().map(String::as_str).collect();
        let (account, creds) = builder()?
            .create(
                &NewAccount {
                    contact: &contacts,
                    terms_of_service_agreed: true,
                    only_return_existing: false,
                },
                acme.directory.clone(),
                None,
            )
            .await?;
        let text = serde_json::to_string(&creds)?;
        match self
            .store
            .domains()
            .put_acme_account(&acme.directory, &text, now_ms())
            .await
        {
            Ok(()) => Ok(account),
            // Another host stored one first: use that one.
            Err(StoreError::Conflict) => {
                let creds = self
                    .store
                    .domains()
                    .acme_account(&acme.directory)
                    .await?
                    .ok_or(StoreError::NotFound)?;
                let creds: AccountCredentials = serde_json::from_str(&creds)?;
                Ok(builder()?.from_credentials(creds).await?)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Orders, validates and stores a certificate for `domain`.
    async fn issue(&self, domain: &str) -> Result<(), CertError> {
        let acme = self
            .config
            .acme
            .as_ref()
            .ok_or_else(|| CertError::Protocol("no ACME directory configured".into()))?;
        let account = self.account(acme).await?;
        let ids = [Identifier::Dns(domain.to_owned())];
        let mut order = account.new_order(&NewOrder::new(&ids)).await?;
        let mut auths = order.authorizations();
        while let Some(auth) = auths.next().await {
            let mut auth = auth?;
            match auth.status {
                AuthorizationStatus::Pending => {}
                AuthorizationStatus::Valid => continue,
                other => {
                    return Err(CertError::Protocol(format!(
                        "authorization of {domain} is {other:?}"
                    )))
                }
            }
            let mut challenge = auth.challenge(ChallengeType::Http01).ok_or_else(|| {
                CertError::Protocol(format!("the CA offers no http-01 challenge for {domain}"))
            })?;
            let key_auth = challenge.key_authorization();
            self.store
                .domains()
                .set_challenge(
                    domain,
                    Some((&challenge.token, key_auth.as_str())),
                    now_ms(),
                )
                .await?;
            challenge.set_ready().await?;
        }
        let retry = RetryPolicy::new()
            .initial_delay(Duration::from_millis(250))
            .backoff(1.5)
            .timeout(ORDER_TIMEOUT);
        let status = order.poll_ready(&retry).await?;
        if status != OrderStatus::Ready {
            return Err(CertError::Protocol(format!(
                "order for {domain} is {status:?}: {:?}",
                order.state().error
            )));
        }
        let key_pem = order.finalize().await?;
        let chain = order.poll_certificate(&retry).await?;
        let not_after = not_after(&chain)?;
        self.store
            .domains()
            .set_certificate(domain, &chain, &key_pem, not_after, now_ms())
            .await?;
        Ok(())
    }
}

/// The end of validity (unix ms) of the first certificate of a PEM chain.
pub fn not_after(chain_pem: &str) -> Result<i64, CertError> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(chain_pem.as_bytes())
        .map_err(|e| CertError::Parse(e.to_string()))?;
    let cert = pem
        .parse_x509()
        .map_err(|e| CertError::Parse(e.to_string()))?;
    Ok(cert.validity().not_after.timestamp() * 1000)
}
