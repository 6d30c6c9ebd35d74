//! Web console sessions on both backends: a session is found by its secret (stored only
//! hashed) until it expires or is revoked, acts as the key it was made for, and old sessions
//! are pruned; another replica sees a revocation at once.

mod common;

#[tokio::test(flavor = "multi_thread")]
async fn sessions_verify_expire_revoke_and_prune() {
    for c in common::stores().await {
        let b = c.backend;
        let sessions = c.store.sessions();
        let now = 1_000_000;
        let (s, secret) = sessions.create("key-1", now, 60_000).await.unwrap();
        assert!(secret.starts_with("pss_"), "{b}");
        assert_ne!(s.id, secret, "{b}: the secret is not stored");
        assert_eq!((s.key_id.as_str(), s.expires_at), ("key-1", now + 60_000));
        assert_eq!(s.csrf_token.len(), 64, "{b}");

        // Found by its secret (on the other replica too), not by its id or a near miss.
        let got = c.other.sessions().verify(&secret, now + 1).await.unwrap();
        assert_eq!(got.as_ref(), Some(&s), "{b}");
        assert_eq!(sessions.verify(&s.id, now).await.unwrap(), None, "{b}");
        let mut wrong = secret.clone();
        wrong.pop();
        wrong.push(if secret.ends_with('0') { '1' } else { '0' });
        assert_eq!(sessions.verify(&wrong, now).await.unwrap(), None, "{b}");
        assert_eq!(sessions.verify("pds_x", now).await.unwrap(), None, "{b}");

        // Expired at its deadline.
        assert_eq!(
            sessions.verify(&secret, now + 60_000).await.unwrap(),
            None,
            "{b}"
        );

        // Revoked: gone for both replicas; revoking again changes nothing.
        let (s2, secret2) = sessions.create("key-1", now, 60_000).await.unwrap();
        assert_ne!(s2.id, s.id, "{b}");
        assert_ne!(s2.csrf_token, s.csrf_token, "{b}");
        assert!(sessions.revoke(&s2.id, now + 5).await.unwrap(), "{b}");
        assert!(!sessions.revoke(&s2.id, now + 6).await.unwrap(), "{b}");
        assert_eq!(
            c.other.sessions().verify(&secret2, now + 7).await.unwrap(),
            None,
            "{b}"
        );
        // The first is untouched.
        assert!(
            sessions.verify(&secret, now + 7).await.unwrap().is_some(),
            "{b}"
        );

        // Pruned once past: the expired one and the revoked one go, a live one stays.
        let (_, live) = sessions.create("key-2", now, 10_000_000).await.unwrap();
        assert_eq!(sessions.prune(now + 100_000).await.unwrap(), 2, "{b}");
        assert!(
            sessions
                .verify(&live, now + 100_001)
                .await
                .unwrap()
                .is_some(),
            "{b}"
        );
    }
}
