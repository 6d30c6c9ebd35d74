//! A cluster CA in a temporary directory for tests of the cluster's links, issuing the
//! identities of agents and server replicas.

use pandastack_cluster::{ClusterCa, Identity, Role, San};

/// A cluster CA in a temporary directory (removed with it).
pub struct TestCa {
    _dir: tempfile::TempDir,
    pub ca: ClusterCa,
}

impl TestCa {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let ca = ClusterCa::init(&dir.path().join("ca")).expect("a cluster CA");
        Self { _dir: dir, ca }
    }

    /// A day's identity of `role` named `name`, with `sans` besides its name.
    pub fn identity(&self, role: Role, name: &str, sans: &[San]) -> Identity {
        let issued = self
            .ca
            .issue(role, name, sans, 1)
            .expect("a host certificate");
        Identity::from_pem(self.ca.cert_pem(), &issued.cert_pem, &issued.key_pem)
            .expect("an identity")
    }
}

impl Default for TestCa {
    fn default() -> Self {
        Self::new()
    }
}
