//! Databases of a lost host (#39): in a cluster, a database whose volume's host is declared
//! dead comes back on another host — restored in place (same id, name, password and connection
//! strings) from its newest finished base backup and every WAL segment archived since, onto a
//! new volume placed on a live host, by the replica running the workers. What it had committed
//! but not yet archived is lost: the RPO is the archive's lag (the VM switches segments at
//! most every second while it writes, and the archiver ships them every `POLL`).
//!
//! The old volume's row (renamed `pgdata-<id>-x…`) and its lost VM's row go; their files stay
//! with the dead host. A database with no finished base backup yet (one is taken
//! when it first starts) cannot be failed over: it waits for its host, logged.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use super::Databases;

/// How often the workers look for databases of dead hosts.
const EVERY: Duration = Duration::from_secs(2);

impl Databases {
    /// Fails over, every [`EVERY`], the databases whose volume's host is dead.
    pub async fn failover_worker(self) {
        let mut said = HashSet::new();
        loop {
            tokio::time::sleep(EVERY).await;
            self.fail_over_lost(&mut said).await;
        }
    }

    /// One pass: each database whose volume's host is dead restored on another host. `said`
    /// holds the databases already logged as unable to fail over (logged once).
    pub async fn fail_over_lost(&self, said: &mut HashSet<String>) -> usize {
        let rows = match self.store.databases().on_dead_hosts().await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(
                    error = &e as &dyn std::error::Error,
                    "failover: cannot read the databases of dead hosts"
                );
                return 0;
            }
        };
        let mut done = 0;
        for row in rows {
            let (id, started) = (row.id.clone(), Instant::now());
            match self.fail_over(row).await {
                Ok(Some(info)) => {
                    done += 1;
                    said.remove(&id);
                    tracing::info!(
                        database = %id,
                        sandbox = ?info.sandbox.as_ref().map(|s| &s.id),
                        host = ?info.sandbox.as_ref().map(|s| &s.host_id),
                        took_ms = started.elapsed().as_secs_f64() * 1e3,
                        "database of a dead host failed over from its base backup and archived WAL"
                    );
                }
                Ok(None) => {
                    if said.insert(id.clone()) {
                        tracing::warn!(database = %id, "failover: no finished base backup to restore from; it waits for its host");
                    }
                }
                Err(e) => {
                    if said.insert(id.clone()) {
                        tracing::warn!(database = %id, error = &e as &dyn std::error::Error, "failover failed; trying again");
                    }
                }
            }
        }
        done
    }
}
