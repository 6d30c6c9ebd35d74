//! Custom domains of apps, their ACME certificates and pending HTTP-01 challenges, and the ACME
//! account of each directory.

use sqlx::AnyPool;

use crate::{col, found, parsed, StoreError};

/// Where a domain's ACME certificate stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CertState {
    /// No ACME order (the server has no ACME directory, or a file certificate covers it).
    None,
    /// An order is queued or under way.
    Pending,
    Issued,
    /// The last order failed (`cert_error`).
    Failed,
}

impl CertState {
    pub fn as_str(self) -> &'static str {
        match self {
            CertState::None => "none",
            CertState::Pending => "pending",
            CertState::Issued => "issued",
            CertState::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "none" => CertState::None,
            "pending" => CertState::Pending,
            "issued" => CertState::Issued,
            "failed" => CertState::Failed,
            _ => return None,
        })
    }
}

/// One custom domain as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct DomainRow {
    /// Lower case, no trailing dot.
    pub domain: String,
    pub app_id: String,
    pub workspace_id: String,
    pub cert_state: CertState,
    /// The certificate chain (PEM) of an issued certificate.
    pub cert_pem: Option<String>,
    /// Its private key (PEM).
    pub key_pem: Option<String>,
    /// The certificate's end of validity (unix ms).
    pub not_after: Option<i64>,
    pub cert_error: Option<String>,
    pub challenge_token: Option<String>,
    pub challenge_key_auth: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
}

pub struct DomainRepo<'a> {
    pub(crate) pool: &'a AnyPool,
}

const COLUMNS: &str = "domain, app_id, workspace_id, cert_state, cert_pem, key_pem, not_after, \
     cert_error, challenge_token, challenge_key_auth, created_at, updated_at";

fn row(r: &sqlx::any::AnyRow) -> Result<DomainRow, StoreError> {
    Ok(DomainRow {
        domain: col(r, "domain")?,
        app_id: col(r, "app_id")?,
        workspace_id: col(r, "workspace_id")?,
        cert_state: parsed(r, "cert_state", CertState::parse)?,
        cert_pem: col(r, "cert_pem")?,
        key_pem: col(r, "key_pem")?,
        not_after: col(r, "not_after")?,
        cert_error: col(r, "cert_error")?,
        challenge_token: col(r, "challenge_token")?,
        challenge_key_auth: col(r, "challenge_key_auth")?,
        created_at: col(r, "created_at")?,
        updated_at: col(r, "updated_at")?,
    })
}

impl DomainRepo<'_> {
    /// Makes `domains` the custom domains of app `app_id`, in one transaction: those no longer
    /// listed go, new ones are added in state `initial`, kept ones keep their certificates.
    /// [`StoreError::Conflict`] (and nothing changed) when another app has one of them.
    /// Returns the domains added.
    pub async fn set_for_app(
        &self,
        app_id: &str,
        workspace_id: &str,
        domains: &[String],
        initial: CertState,
        now: i64,
    ) -> Result<Vec<String>, StoreError> {
        let mut tx = self.pool.begin().await?;
        // Writing the app row first takes SQLite's write lock (and PostgreSQL's row lock), so
        // two changes of one app's domains run one after the other.
        found(
            sqlx::query("UPDATE apps SET updated_at = $2 WHERE id = $1")
                .bind(app_id)
                .bind(now)
                .execute(&mut *tx)
                .await?,
        )?;
        let rows = sqlx::query("SELECT domain FROM app_domains WHERE app_id = $1")
            .bind(app_id)
            .fetch_all(&mut *tx)
            .await?;
        let mut current = Vec::with_capacity(rows.len());
        for r in &rows {
            current.push(col::<String>(r, "domain")?);
        }
        for d in current.iter().filter(|d| !domains.contains(d)) {
            sqlx::query("DELETE FROM app_domains WHERE domain = $1")
                .bind(d)
                .execute(&mut *tx)
                .await?;
        }
        let mut added = Vec::new();
        for d in domains.iter().filter(|d| !current.contains(d)) {
            sqlx::query(&format!(
                "INSERT INTO app_domains ({COLUMNS}) \
                 VALUES ($1, $2, $3, $4, NULL, NULL, NULL, NULL, NULL, NULL, $5, $5)"
            ))
            .bind(d)
            .bind(app_id)
            .bind(workspace_id)
            .bind(initial.as_str())
            .bind(now)
            .execute(&mut *tx)
            .await?;
            added.push(d.clone());
        }
        tx.commit().await?;
        Ok(added)
    }

    /// An app's domains by name.
    pub async fn for_app(&self, app_id: &str) -> Result<Vec<DomainRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM app_domains WHERE app_id = $1 ORDER BY domain"
        ))
        .bind(app_id)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(row).collect()
    }

    pub async fn get(&self, domain: &str) -> Result<DomainRow, StoreError> {
        let r = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM app_domains WHERE domain = $1"
        ))
        .bind(domain)
        .fetch_one(self.pool)
        .await?;
        row(&r)
    }

    /// The name of the app `domain` belongs to (the proxy routes by it).
    pub async fn app_name(&self, domain: &str) -> Result<Option<String>, StoreError> {
        let r = sqlx::query(
            "SELECT apps.name AS name FROM app_domains JOIN apps ON apps.id = app_domains.app_id \
             WHERE app_domains.domain = $1",
        )
        .bind(domain)
        .fetch_optional(self.pool)
        .await?;
        r.map(|r| col(&r, "name")).transpose()
    }

    /// The key authorization for HTTP-01 token `token`, if an order is waiting for it.
    pub async fn challenge(&self, token: &str) -> Result<Option<String>, StoreError> {
        let r = sqlx::query(
            "SELECT challenge_key_auth FROM app_domains WHERE challenge_token = $1 \
             AND challenge_key_auth IS NOT NULL",
        )
        .bind(token)
        .fetch_optional(self.pool)
        .await?;
        r.map(|r| col(&r, "challenge_key_auth")).transpose()
    }

    /// Puts up (or, with `None`, takes down) the HTTP-01 challenge of `domain`.
    pub async fn set_challenge(
        &self,
        domain: &str,
        challenge: Option<(&str, &str)>,
        now: i64,
    ) -> Result<(), StoreError> {
        let (token, key_auth) = challenge.unzip();
        found(
            sqlx::query(
                "UPDATE app_domains SET challenge_token = $2, challenge_key_auth = $3, \
                 updated_at = $4 WHERE domain = $1",
            )
            .bind(domain)
            .bind(token)
            .bind(key_auth)
            .bind(now)
            .execute(self.pool)
            .await?,
        )
    }

    /// Sets `domain`'s certificate state (`pending`, `failed` with its reason, `none`).
    pub async fn set_state(
        &self,
        domain: &str,
        state: CertState,
        error: Option<&str>,
        now: i64,
    ) -> Result<(), StoreError> {
        found(
            sqlx::query(
                "UPDATE app_domains SET cert_state = $2, cert_error = $3, updated_at = $4 \
                 WHERE domain = $1",
            )
            .bind(domain)
            .bind(state.as_str())
            .bind(error)
            .bind(now)
            .execute(self.pool)
            .await?,
        )
    }

    /// Stores an issued certificate (and takes the challenge down).
    pub async fn set_certificate(
        &self,
        domain: &str,
        cert_pem: &str,
        key_pem: &str,
        not_after: i64,
        now: i64,
    ) -> Result<(), StoreError> {
        found(
            sqlx::query(
                "UPDATE app_domains SET cert_state = 'issued', cert_pem = $2, key_pem = $3, \
                 not_after = $4, cert_error = NULL, challenge_token = NULL, \
                 challenge_key_auth = NULL, updated_at = $5 WHERE domain = $1",
            )
            .bind(domain)
            .bind(cert_pem)
            .bind(key_pem)
            .bind(not_after)
            .bind(now)
            .execute(self.pool)
            .await?,
        )
    }

    /// Domains with an issued certificate changed after `since` (unix ms), oldest change first:
    /// how a proxy learns of certificates another host obtained.
    pub async fn issued_since(&self, since: i64) -> Result<Vec<DomainRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM app_domains WHERE cert_state = 'issued' AND updated_at > $1 \
             ORDER BY updated_at"
        ))
        .bind(since)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(row).collect()
    }

    /// Issued certificates that end before `before` (unix ms): due for renewal.
    pub async fn expiring(&self, before: i64) -> Result<Vec<DomainRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM app_domains WHERE cert_state = 'issued' AND not_after < $1"
        ))
        .bind(before)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(row).collect()
    }

    /// Domains whose last order failed before `before` (unix ms): tried again.
    pub async fn failed_before(&self, before: i64) -> Result<Vec<DomainRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM app_domains WHERE cert_state = 'failed' AND updated_at < $1"
        ))
        .bind(before)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(row).collect()
    }

    // ---- ACME accounts -----------------------------------------------------------------------

    /// The stored credentials of the account at ACME directory `directory`.
    pub async fn acme_account(&self, directory: &str) -> Result<Option<String>, StoreError> {
        let r = sqlx::query("SELECT credentials FROM acme_accounts WHERE directory = $1")
            .bind(directory)
            .fetch_optional(self.pool)
            .await?;
        r.map(|r| col(&r, "credentials")).transpose()
    }

    /// Stores an account's credentials unless one is stored already ([`StoreError::Conflict`]:
    /// another host created one first; use that).
    pub async fn put_acme_account(
        &self,
        directory: &str,
        credentials: &str,
        now: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO acme_accounts (directory, credentials, created_at) VALUES ($1, $2, $3)",
        )
        .bind(directory)
        .bind(credentials)
        .bind(now)
        .execute(self.pool)
        .await?;
        Ok(())
    }
}
