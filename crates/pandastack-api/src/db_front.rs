//! The database connection front: a listener of its own that takes `postgres://` connections
//! (TLS required: PostgreSQL's SSLRequest, or direct TLS with ALPN `postgresql`), finds the
//! database by the TLS server name — `<id>.<domain>` for PostgreSQL, `<id>-pooler.<domain>`
//! for its PgBouncer — or, for clients that send no SNI, Neon's `options=endpoint=<id>`
//! (`endpoint=<id>-pooler` for the pooler), wakes or starts its VM and joins the client to the
//! cluster through the host boundary ([`pandastack_host::Host::connect_port`]). PostgreSQL
//! itself checks the password. What goes wrong before the cluster answers is told to the
//! client as a PostgreSQL error (unknown database `3D000`, waking too long `57P03`), not a
//! dropped socket. Open connections count as activity, so a database in use never hibernates.
//!
//! Not handled: cancel requests (answered by closing: a `CancelRequest` carries no database
//! name, and the front does not map backend keys to databases yet).

use std::sync::Arc;
use std::time::Duration;

use pandastack_control::{DatabaseError, DB_PORT, POOLER_PORT};
use pandastack_pgwire::front::{self, Front, Incoming};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::App;

/// Activity is written this often while a connection is open.
const TOUCH_EVERY: Duration = Duration::from_secs(5);
/// Longest a client may take to finish TLS and send its startup message.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves the front on `listener` until the task is dropped.
pub async fn serve_db_front(
    app: Arc<App>,
    listener: TcpListener,
    front: Arc<Front>,
    wake_timeout: Duration,
) {
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "database front: accept");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let (app, front) = (Arc::clone(&app), Arc::clone(&front));
        tokio::spawn(async move {
            if let Err(e) = connection(&app, &front, tcp, wake_timeout).await {
                tracing::debug!(%peer, error = %e, "database front: connection ended");
            }
        });
    }
}

/// Which database and port a connection names: the SNI label, else `endpoint=`.
fn route(label: &str) -> (String, u16) {
    match label.strip_suffix("-pooler") {
        Some(id) => (id.to_owned(), POOLER_PORT),
        None => (label.to_owned(), DB_PORT),
    }
}

async fn connection(
    app: &Arc<App>,
    front: &Front,
    tcp: tokio::net::TcpStream,
    wake_timeout: Duration,
) -> anyhow::Result<()> {
    let incoming = match tokio::time::timeout(HANDSHAKE_TIMEOUT, front.accept(tcp)).await {
        Ok(i) => i?,
        Err(_) => anyhow::bail!("no startup message within {HANDSHAKE_TIMEOUT:?}"),
    };
    let mut accepted = match incoming {
        Incoming::Startup(a) => a,
        Incoming::Cancel { .. } => return Ok(()),
    };
    let domain = &app.databases.address.domain;
    let label = accepted
        .sni
        .as_deref()
        .and_then(|sni| front::host_label(sni, domain))
        .map(str::to_owned)
        .or_else(|| accepted.startup.endpoint());
    let Some(label) = label else {
        return refuse(
            &mut accepted.stream,
            "08004",
            &format!(
                "which database? connect to <database id>.{domain} (TLS server name), or add \
                 options=endpoint=<database id> to the connection string"
            ),
        )
        .await;
    };
    let (id, port) = route(&label.to_ascii_lowercase());
    let row = match app.databases.by_id(&id).await {
        Ok(r) => r,
        Err(DatabaseError::NotFound(_)) => {
            return refuse(
                &mut accepted.stream,
                "3D000",
                &format!("database {id} does not exist"),
            )
            .await
        }
        Err(DatabaseError::NotReady(_)) => {
            return refuse(
                &mut accepted.stream,
                "57P03",
                &format!("database {id} is being created; try again shortly"),
            )
            .await
        }
        Err(e) => return Err(e.into()),
    };
    // The start runs as a task of its own: a client that gives up never cuts it off half-way.
    let dbs = app.databases.clone();
    let start_row = row.clone();
    let started = tokio::spawn(async move { dbs.running(&start_row).await });
    let sandbox = match tokio::time::timeout(wake_timeout, started).await {
        Ok(Ok(Ok(s))) => s,
        Ok(Ok(Err(e))) => {
            tracing::warn!(database = %id, error = %e, "database front: could not start the database");
            return refuse(
                &mut accepted.stream,
                "57P03",
                &format!("database {id} could not be started: {e}"),
            )
            .await;
        }
        Ok(Err(e)) => return Err(e.into()),
        Err(_) => {
            return refuse(
                &mut accepted.stream,
                "57P03",
                &format!("database {id} is waking up; try again in a few seconds"),
            )
            .await
        }
    };
    let mut upstream = match app.host.connect_port(&sandbox.id, port).await {
        Ok(s) => s,
        Err(e) => {
            return refuse(
                &mut accepted.stream,
                "08006",
                &format!("database {id} did not accept the connection: {e}"),
            )
            .await
        }
    };
    upstream
        .write_all(&accepted.startup.encode_for_upstream())
        .await?;
    app.databases.touch(&sandbox.id).await;
    let (dbs, sb) = (app.databases.clone(), sandbox.id.clone());
    let ticker = tokio::spawn(async move {
        let mut every = tokio::time::interval(TOUCH_EVERY);
        every.tick().await;
        loop {
            every.tick().await;
            dbs.touch(&sb).await;
        }
    });
    let joined = join(&mut accepted.stream, &mut upstream).await;
    ticker.abort();
    app.databases.touch(&sandbox.id).await;
    joined
}

async fn join<A, B>(a: &mut A, b: &mut B) -> anyhow::Result<()>
where
    A: AsyncRead + AsyncWrite + Unpin + ?Sized,
    B: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    tokio::io::copy_bidirectional(a, b).await?;
    Ok(())
}

async fn refuse<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    code: &str,
    message: &str,
) -> anyhow::Result<()> {
    front::write_error(stream, front::Severity::Fatal, code, message, None).await?;
    Ok(())
}
