//! Authentication as a frontend: SCRAM-SHA-256 without channel binding, MD5, cleartext,
//! trust. Runs from the `StartupMessage` to `AuthenticationOk`.

use fallible_iterator::FallibleIterator;
use postgres_protocol::authentication::md5_hash;
use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256, SCRAM_SHA_256};
use postgres_protocol::message::backend::Message;
use postgres_protocol::message::frontend;
use tokio::io::{AsyncRead, AsyncWrite};

use super::conn::Conn;
use super::{ClientError, ConnectOptions, DbError};

/// The most PBKDF2 iterations a server may ask for. The count comes from the server (its
/// `scram_iterations` when the password was set; 4096 by default): a larger one would let a
/// guest make the host spin.
const MAX_SCRAM_ITERATIONS: u32 = 1_000_000;

pub(super) async fn authenticate<S>(
    conn: &mut Conn<S>,
    opts: &ConnectOptions,
) -> Result<(), ClientError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    loop {
        match conn.message().await? {
            Message::AuthenticationOk => return Ok(()),
            Message::AuthenticationCleartextPassword => {
                let password = password(opts)?;
                send_password(conn, password.as_bytes()).await?;
            }
            Message::AuthenticationMd5Password(body) => {
                let hash = md5_hash(
                    opts.user.as_bytes(),
                    password(opts)?.as_bytes(),
                    body.salt(),
                );
                send_password(conn, hash.as_bytes()).await?;
            }
            Message::AuthenticationSasl(body) => {
                let mut offered = Vec::new();
                let mut mechanisms = body.mechanisms();
                while let Some(mechanism) = mechanisms.next().map_err(ClientError::Malformed)? {
                    offered.push(mechanism.to_owned());
                }
                if !offered.iter().any(|m| m == SCRAM_SHA_256) {
                    return Err(ClientError::Auth(format!(
                        "server offers SASL {offered:?}; only {SCRAM_SHA_256} without channel binding is supported"
                    )));
                }
                scram(conn, password(opts)?).await?;
            }
            Message::ErrorResponse(body) => {
                return Err(ClientError::Db(Box::new(DbError::parse(body.fields())?)))
            }
            Message::NoticeResponse(_) => {}
            Message::AuthenticationKerberosV5
            | Message::AuthenticationGss
            | Message::AuthenticationGssContinue(_)
            | Message::AuthenticationSspi
            | Message::AuthenticationScmCredential => {
                return Err(ClientError::Auth(
                    "server asks for an unsupported authentication method".into(),
                ))
            }
            _ => {
                return Err(ClientError::Protocol(
                    "unexpected message during authentication".into(),
                ))
            }
        }
    }
}

fn password(opts: &ConnectOptions) -> Result<&str, ClientError> {
    opts.password
        .as_deref()
        .ok_or_else(|| ClientError::Auth("server asks for a password and none was given".into()))
}

async fn send_password<S>(conn: &mut Conn<S>, password: &[u8]) -> Result<(), ClientError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    frontend::password_message(password, &mut conn.wbuf)
        .map_err(|e| ClientError::Auth(format!("password cannot be sent: {e}")))?;
    conn.flush().await
}

/// The SCRAM exchange after `AuthenticationSASL`, up to and including the check of the
/// server's signature in `AuthenticationSASLFinal`.
async fn scram<S>(conn: &mut Conn<S>, password: &str) -> Result<(), ClientError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    // The hop to the server is plaintext: there is no TLS session to bind to.
    let mut scram = ScramSha256::new(password.as_bytes(), ChannelBinding::unsupported());
    frontend::sasl_initial_response(SCRAM_SHA_256, scram.message(), &mut conn.wbuf)
        .map_err(ClientError::Io)?;
    conn.flush().await?;

    let server_first = match conn.message().await? {
        Message::AuthenticationSaslContinue(body) => body.data().to_vec(),
        Message::ErrorResponse(body) => {
            return Err(ClientError::Db(Box::new(DbError::parse(body.fields())?)))
        }
        _ => {
            return Err(ClientError::Protocol(
                "expected AuthenticationSASLContinue".into(),
            ))
        }
    };
    check_iterations(&server_first)?;
    // PBKDF2 over thousands of rounds: off the async worker.
    let (scram, updated) = tokio::task::spawn_blocking(move || {
        let result = scram.update(&server_first);
        (scram, result)
    })
    .await
    .map_err(|e| ClientError::Auth(format!("scram task: {e}")))?;
    let mut scram = scram;
    updated.map_err(|e| ClientError::Auth(format!("server-first-message: {e}")))?;
    frontend::sasl_response(scram.message(), &mut conn.wbuf).map_err(ClientError::Io)?;
    conn.flush().await?;

    match conn.message().await? {
        Message::AuthenticationSaslFinal(body) => scram
            .finish(body.data())
            .map_err(|e| ClientError::Auth(format!("server signature: {e}"))),
        Message::ErrorResponse(body) => {
            Err(ClientError::Db(Box::new(DbError::parse(body.fields())?)))
        }
        _ => Err(ClientError::Protocol(
            "expected AuthenticationSASLFinal".into(),
        )),
    }
}

fn check_iterations(server_first: &[u8]) -> Result<(), ClientError> {
    let text = String::from_utf8_lossy(server_first);
    let iterations = text
        .split(',')
        .find_map(|attr| attr.strip_prefix("i="))
        .and_then(|i| i.parse::<u32>().ok());
    match iterations {
        Some(i) if i > MAX_SCRAM_ITERATIONS => Err(ClientError::Auth(format!(
            "server asks for {i} SCRAM iterations (at most {MAX_SCRAM_ITERATIONS})"
        ))),
        // A missing or malformed count is reported by the SCRAM parser.
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_scram_iterations() {
        assert!(check_iterations(b"r=abc,s=c2FsdA==,i=4096").is_ok());
        assert!(check_iterations(b"r=abc,s=c2FsdA==").is_ok());
        assert!(matches!(
            check_iterations(b"r=abc,s=c2FsdA==,i=2000000000"),
            Err(ClientError::Auth(_))
        ));
    }
}
