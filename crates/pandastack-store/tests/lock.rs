//! The advisory lock that lets one replica of many run the control plane's workers.

mod common;

#[tokio::test]
async fn one_session_holds_the_workers_lock_until_it_lets_go() {
    for case in common::stores().await {
        let b = case.backend;
        let mut first = case
            .store
            .try_advisory_lock(42)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{b}: a free lock is taken"));
        first.check().await.unwrap();
        let second = case.other.try_advisory_lock(42).await.unwrap();
        if b == "postgres" {
            assert!(second.is_none(), "{b}: a held lock is not taken twice");
            // Another key is another lock.
            assert!(case.other.try_advisory_lock(43).await.unwrap().is_some());
            // Not even by the holder's own store handle: each try is its own session.
            assert!(case.store.try_advisory_lock(42).await.unwrap().is_none());
        } else {
            // One process on SQLite: nothing to share, always granted.
            assert!(second.is_some(), "{b}");
        }
        drop(second);
        drop(first);
        // Dropped: the session is closed, and the server frees the lock once its backend sees
        // the connection end (asynchronously: soon, not at once).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            if case.other.try_advisory_lock(42).await.unwrap().is_some() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{b}: a released lock is taken again"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}
