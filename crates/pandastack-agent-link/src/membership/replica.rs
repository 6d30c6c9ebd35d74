//! The replica's side: [`MembershipService`] takes agents' `Attend` streams, and its
//! [`LeaseBatcher`] renews the leases of every host that sent a heartbeat since the last tick
//! in one [`Members::renew`] call, and passes on what changed in their heartbeats (capacity,
//! templates) in one [`Members::report`] call.
//!
//! ```text
//!   stream task (one per agent):  Join ──► peer is agent `host_id`? ──► Members::join ──► Joined
//!                                 Heartbeat ──► marks the host due (or answers Fenced); notes
//!                                               its capacity and templates if they changed
//!   batcher (one per replica):    every tick: due hosts ──► Members::renew ──► Renewed / Fenced
//!                                             changed hosts (not fenced) ──► Members::report
//!                                 store unreachable: logged, hosts stay due (and changed),
//!                                 streams stay open
//! ```

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::Stream;
use pandastack_cluster::{Identity, Peer, Role};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::{capacity_from_pb, join_from_pb, Capacity, HostUpdate, Members, MembersError};
use crate::pb;
use crate::pb::agent_says::Says;
use crate::pb::membership_server::{Membership, MembershipServer};
use crate::pb::replica_says::Says as Answer;
use crate::ServeError;

type Outbox = mpsc::Sender<Result<pb::ReplicaSays, Status>>;

/// Messages queued to one agent before the replica stops waiting for it to read.
const OUTBOX: usize = 16;

/// What a host said it has, at its join or in its last heartbeat.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Said {
    capacity: Capacity,
    templates: Vec<String>,
}

/// One agent's open stream.
struct Attendee {
    /// Which stream (a host that joined again on a new stream replaces its old one).
    stream: u64,
    epoch: i64,
    /// A heartbeat came since the last renewal.
    due: bool,
    /// The newest heartbeat's number (`Heartbeat.seq`; 0: its agent numbers none).
    seq: u64,
    /// The last renewal said this epoch is not current: every heartbeat answers `Fenced`.
    fenced: bool,
    said: Said,
    /// `said` changed (a heartbeat differed from what came before) since the last report.
    changed: bool,
    outbox: Outbox,
}

/// What a heartbeat found.
enum Beat {
    Due,
    Fenced(i64),
    /// Not attending on this stream any more (replaced by a newer stream of the same host).
    Gone,
}

/// What one [`LeaseBatcher::tick`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchTick {
    /// Hosts in the renewal (0: no heartbeat came, and the store was not called).
    pub asked: usize,
    pub renewed: usize,
    pub fenced: usize,
    /// Hosts whose changed capacity or templates the store took (0 also when its
    /// [`Members::report`] failed: they are reported again next tick).
    pub reported: usize,
}

/// The open streams of one replica and their batched renewals.
pub struct LeaseBatcher {
    members: Arc<dyn Members>,
    attending: Mutex<HashMap<String, Attendee>>,
    next_stream: AtomicU64,
    /// The last report failed (logged once until one goes through).
    report_failing: AtomicBool,
}

impl LeaseBatcher {
    pub fn new(members: Arc<dyn Members>) -> Arc<Self> {
        Arc::new(Self {
            members,
            attending: Mutex::new(HashMap::new()),
            next_stream: AtomicU64::new(1),
            report_failing: AtomicBool::new(false),
        })
    }

    /// How many hosts stream to this replica.
    pub fn attending(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Attendee>> {
        self.attending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Host `host_id` joined with `epoch`, saying it has `said` (the join stored that), on a
    /// stream answering into `outbox`; returns the stream's number.
    fn attend(
        &self,
        host_id: &str,
        epoch: i64,
        said: Said,
        outbox: Outbox,
        stream: Option<u64>,
    ) -> u64 {
        let stream = stream.unwrap_or_else(|| self.next_stream.fetch_add(1, Ordering::Relaxed));
        self.lock().insert(
            host_id.to_owned(),
            Attendee {
                stream,
                epoch,
                due: false,
                seq: 0,
                fenced: false,
                said,
                changed: false,
                outbox,
            },
        );
        stream
    }

    /// A heartbeat of host `host_id` on stream `stream`, saying it has `said` now.
    fn beat(&self, host_id: &str, stream: u64, seq: u64, said: Said) -> Beat {
        match self.lock().get_mut(host_id) {
            Some(a) if a.stream == stream && a.fenced => Beat::Fenced(a.epoch),
            Some(a) if a.stream == stream => {
                a.due = true;
                a.seq = a.seq.max(seq);
                if a.said != said {
                    a.said = said;
                    a.changed = true;
                }
                Beat::Due
            }
            _ => Beat::Gone,
        }
    }

    fn leave(&self, host_id: &str, stream: u64) {
        let mut attending = self.lock();
        if attending.get(host_id).is_some_and(|a| a.stream == stream) {
            attending.remove(host_id);
        }
    }

    /// Renews, in one [`Members::renew`] call, every host that sent a heartbeat since the last
    /// tick, and tells each stream what became of it; then reports, in one [`Members::report`]
    /// call, the hosts (not fenced) whose heartbeats changed what they have. On a renewal's
    /// error the hosts stay due and changed (the next tick asks again), nothing is reported,
    /// and every stream stays open; a report's error is logged and the hosts stay changed.
    pub async fn tick(&self) -> Result<BatchTick, MembersError> {
        let (due, seqs, mut updates) = self.take_due();
        if due.is_empty() && updates.is_empty() {
            return Ok(BatchTick::default());
        }
        let renewal = if due.is_empty() {
            super::Renewal::default()
        } else {
            match self.members.renew(&due).await {
                Ok(r) => r,
                Err(e) => {
                    self.again(&due, &updates);
                    return Err(e);
                }
            }
        };
        let mut tell = Vec::with_capacity(due.len());
        {
            let mut attending = self.lock();
            for (id, epoch) in &renewal.renewed {
                if let Some(a) = attending.get(id).filter(|a| a.epoch == *epoch) {
                    let says = Answer::Renewed(pb::Renewed {
                        epoch: *epoch,
                        lease_until: renewal.lease_until,
                        seq: seqs.get(id).copied().unwrap_or_default(),
                    });
                    tell.push((a.outbox.clone(), says));
                }
            }
            for (id, epoch) in &renewal.fenced {
                if let Some(a) = attending.get_mut(id).filter(|a| a.epoch == *epoch) {
                    a.fenced = true;
                    tell.push((a.outbox.clone(), fenced(*epoch)));
                }
            }
        }
        // A full outbox drops a `Renewed`; a `Fenced` is repeated at the next heartbeat.
        for (outbox, says) in tell {
            let _ = outbox.try_send(Ok(pb::ReplicaSays { says: Some(says) }));
        }
        // A host fenced just now must join again, which stores what it has then.
        updates.retain(|u| {
            !renewal
                .fenced
                .iter()
                .any(|(id, epoch)| *id == u.host_id && *epoch == u.epoch)
        });
        let mut reported = 0;
        if !updates.is_empty() {
            match self.members.report(&updates).await {
                Ok(()) => {
                    reported = updates.len();
                    if self.report_failing.swap(false, Ordering::Relaxed) {
                        tracing::info!(
                            hosts = reported,
                            "membership: storing hosts' capacity again"
                        );
                    }
                }
                Err(e) => {
                    if !self.report_failing.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            error = &e as &dyn std::error::Error,
                            hosts = updates.len(),
                            "membership: cannot store hosts' capacity and templates; asking again \
                             every tick"
                        );
                    }
                    self.again(&[], &updates);
                }
            }
        }
        Ok(BatchTick {
            asked: due.len(),
            renewed: renewal.renewed.len(),
            fenced: renewal.fenced.len(),
            reported,
        })
    }

    /// The hosts due a renewal (with their newest heartbeat's number: every heartbeat up to
    /// it came before the renewal) and those whose heartbeats changed what they have (fenced
    /// ones left out), their marks cleared.
    #[allow(clippy::type_complexity)]
    fn take_due(&self) -> (Vec<(String, i64)>, HashMap<String, u64>, Vec<HostUpdate>) {
        let (mut due, mut seqs, mut updates) = (Vec::new(), HashMap::new(), Vec::new());
        for (id, a) in self.lock().iter_mut().filter(|(_, a)| !a.fenced) {
            if std::mem::take(&mut a.due) {
                due.push((id.clone(), a.epoch));
                seqs.insert(id.clone(), a.seq);
            }
            if std::mem::take(&mut a.changed) {
                updates.push(HostUpdate {
                    host_id: id.clone(),
                    epoch: a.epoch,
                    capacity: a.said.capacity,
                    templates: a.said.templates.clone(),
                });
            }
        }
        (due, seqs, updates)
    }

    /// Marks again what a failed call took (hosts still on the same epoch): the next tick
    /// asks again, with what they say by then.
    fn again(&self, due: &[(String, i64)], updates: &[HostUpdate]) {
        let mut attending = self.lock();
        for (id, epoch) in due {
            if let Some(a) = attending.get_mut(id).filter(|a| a.epoch == *epoch) {
                a.due = true;
            }
        }
        for u in updates {
            if let Some(a) = attending.get_mut(&u.host_id).filter(|a| a.epoch == u.epoch) {
                a.changed = true;
            }
        }
    }

    /// Ticks every `every` until dropped; logs when the store stops and starts answering.
    pub async fn run(self: Arc<Self>, every: Duration) {
        let mut interval = tokio::time::interval(every);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut answering = true;
        loop {
            interval.tick().await;
            match self.tick().await {
                Ok(t) => {
                    if !answering {
                        tracing::info!(hosts = t.asked, "membership: renewing leases again");
                    }
                    answering = true;
                    if t.fenced > 0 {
                        tracing::info!(hosts = t.fenced, "membership: agents fenced");
                    }
                }
                Err(e) => {
                    if answering {
                        tracing::warn!(
                            error = &e as &dyn std::error::Error,
                            "membership: cannot renew leases; agents' streams stay open"
                        );
                    }
                    answering = false;
                }
            }
        }
    }
}

fn fenced(epoch: i64) -> Answer {
    Answer::Fenced(pb::Fenced { epoch })
}

fn say(says: Answer) -> Result<pb::ReplicaSays, Status> {
    Ok(pb::ReplicaSays { says: Some(says) })
}

/// The replica's `Membership` service over `members`.
pub struct MembershipService {
    members: Arc<dyn Members>,
    batcher: Arc<LeaseBatcher>,
}

impl MembershipService {
    pub fn new(members: Arc<dyn Members>) -> Self {
        let batcher = LeaseBatcher::new(Arc::clone(&members));
        Self { members, batcher }
    }

    /// The batcher: run it ([`LeaseBatcher::run`]) beside the service, or tick it by hand.
    pub fn batcher(&self) -> Arc<LeaseBatcher> {
        Arc::clone(&self.batcher)
    }

    pub fn into_server(self) -> MembershipServer<Self> {
        MembershipServer::new(self)
    }
}

/// Serves `members` to agents on `listener` as `identity` (a replica's), renewing their leases
/// every `every`, until an error stops it (or the future is dropped). The handshake requires a
/// certificate from the cluster CA; `Attend` requires an agent's, named as the host it joins.
pub async fn serve_membership(
    identity: &Identity,
    listener: TcpListener,
    members: Arc<dyn Members>,
    every: Duration,
) -> Result<(), ServeError> {
    let (accept, incoming) = crate::tls::accept(identity, listener, "membership", |_| true)?;
    let service = MembershipService::new(members);
    let batcher = service.batcher().run(every);
    let server = tonic::transport::Server::builder()
        .add_service(service.into_server())
        .serve_with_incoming(incoming);
    tokio::select! {
        r = accept => r,
        r = server => r.map_err(ServeError::Transport),
        () = batcher => Ok(()),
    }
}

type AttendStream = Pin<Box<dyn Stream<Item = Result<pb::ReplicaSays, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl Membership for MembershipService {
    type AttendStream = AttendStream;

    async fn attend(
        &self,
        req: Request<Streaming<pb::AgentSays>>,
    ) -> Result<Response<AttendStream>, Status> {
        let peer = req
            .extensions()
            .get::<Peer>()
            .cloned()
            .ok_or_else(|| Status::unauthenticated("no cluster identity"))?;
        if peer.role != Role::Agent {
            tracing::warn!(%peer, "membership: refused a peer that is not an agent");
            return Err(Status::permission_denied(format!("{peer} is not an agent")));
        }
        let (outbox, rx) = mpsc::channel(OUTBOX);
        let stream = Attending {
            peer,
            members: Arc::clone(&self.members),
            batcher: Arc::clone(&self.batcher),
            outbox,
        };
        tokio::spawn(stream.run(req.into_inner()));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// One agent's stream, on its own task until the agent goes (or breaks the protocol).
struct Attending {
    peer: Peer,
    members: Arc<dyn Members>,
    batcher: Arc<LeaseBatcher>,
    outbox: Outbox,
}

impl Attending {
    async fn run(self, mut inbound: Streaming<pb::AgentSays>) {
        let mut stream: Option<u64> = None;
        let host = self.peer.name.clone();
        let refusal = loop {
            let says = match inbound.message().await {
                Ok(Some(m)) => m.says,
                Ok(None) | Err(_) => break None,
            };
            match says {
                Some(Says::Join(join)) => {
                    if join.host_id != self.peer.name {
                        tracing::warn!(peer = %self.peer, claimed = join.host_id, "membership: refused a join for another host");
                        break Some(Status::permission_denied(format!(
                            "{} may not join as host {:?}",
                            self.peer, join.host_id
                        )));
                    }
                    let report = join_from_pb(join);
                    let said = Said {
                        capacity: report.capacity,
                        templates: report.templates.clone(),
                    };
                    match self.members.join(report).await {
                        Ok(joined) => {
                            stream = Some(self.batcher.attend(
                                &host,
                                joined.epoch,
                                said,
                                self.outbox.clone(),
                                stream,
                            ));
                            tracing::info!(host, epoch = joined.epoch, "membership: host joined");
                            let says = say(Answer::Joined(pb::Joined {
                                epoch: joined.epoch,
                                lease_ms: joined.lease_ms,
                            }));
                            if self.outbox.send(says).await.is_err() {
                                break None;
                            }
                        }
                        Err(e) => {
                            // Another replica may reach the store: the agent tries the next.
                            tracing::warn!(
                                host,
                                error = &e as &dyn std::error::Error,
                                "membership: cannot take a join"
                            );
                            break Some(Status::unavailable("the membership store is unreachable"));
                        }
                    }
                }
                Some(Says::Heartbeat(beat)) => {
                    let Some(s) = stream else {
                        break Some(Status::failed_precondition("a heartbeat before a join"));
                    };
                    let said = Said {
                        capacity: capacity_from_pb(beat.capacity),
                        templates: beat.templates,
                    };
                    match self.batcher.beat(&host, s, beat.seq, said) {
                        Beat::Due => {}
                        Beat::Fenced(epoch) => {
                            if self.outbox.send(say(fenced(epoch))).await.is_err() {
                                break None;
                            }
                        }
                        Beat::Gone => {
                            break Some(Status::aborted("this host attends on a newer stream"))
                        }
                    }
                }
                // A message of a later protocol: ignored.
                None => {}
            }
        };
        if let Some(s) = stream {
            self.batcher.leave(&host, s);
        }
        if let Some(status) = refusal {
            let _ = self.outbox.send(Err(status)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;
    use crate::membership::{HostReport, Joined, Renewal};

    /// Renews every pair whose epoch is 1, fences the rest; fails while `down`. Records calls.
    #[derive(Default)]
    struct Book {
        down: AtomicBool,
        calls: Mutex<Vec<Vec<(String, i64)>>>,
        reports: Mutex<Vec<Vec<HostUpdate>>>,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("down")]
    struct Down;

    #[async_trait::async_trait]
    impl Members for Book {
        async fn join(&self, _: HostReport) -> Result<Joined, MembersError> {
            unreachable!()
        }

        async fn renew(&self, hosts: &[(String, i64)]) -> Result<Renewal, MembersError> {
            if self.down.load(Ordering::SeqCst) {
                return Err(MembersError::new(Down));
            }
            let mut asked = hosts.to_vec();
            asked.sort();
            self.calls.lock().unwrap().push(asked);
            let (renewed, fenced) = hosts.iter().cloned().partition(|(_, e)| *e == 1);
            Ok(Renewal {
                lease_until: 42,
                renewed,
                fenced,
            })
        }

        async fn report(&self, reports: &[HostUpdate]) -> Result<(), MembersError> {
            if self.down.load(Ordering::SeqCst) {
                return Err(MembersError::new(Down));
            }
            let mut r = reports.to_vec();
            r.sort_by(|a, b| a.host_id.cmp(&b.host_id));
            self.reports.lock().unwrap().push(r);
            Ok(())
        }
    }

    /// What a host with `memory_mib` and `templates` says.
    fn says(memory_mib: i64, templates: &[&str]) -> Said {
        Said {
            capacity: Capacity {
                memory_mib,
                ..Capacity::default()
            },
            templates: templates.iter().map(|t| t.to_string()).collect(),
        }
    }

    fn said(rx: &mut mpsc::Receiver<Result<pb::ReplicaSays, Status>>) -> Vec<Answer> {
        std::iter::from_fn(|| rx.try_recv().ok())
            .map(|m| m.unwrap().says.unwrap())
            .collect()
    }

    #[tokio::test]
    async fn a_tick_renews_the_due_hosts_in_one_call_and_answers_each_stream() {
        let book = Arc::new(Book::default());
        let b = LeaseBatcher::new(book.clone());
        let (tx_a, mut rx_a) = mpsc::channel(OUTBOX);
        let (tx_b, mut rx_b) = mpsc::channel(OUTBOX);
        let (tx_c, _rx_c) = mpsc::channel(OUTBOX);
        let a = b.attend("a", 1, Said::default(), tx_a, None);
        let s = b.attend("b", 2, Said::default(), tx_b, None);
        b.attend("c", 1, Said::default(), tx_c, None);
        // No heartbeat yet: the store is not asked.
        assert_eq!(b.tick().await.unwrap(), BatchTick::default());
        assert!(matches!(b.beat("a", a, 1, Said::default()), Beat::Due));
        assert!(matches!(b.beat("b", s, 1, Said::default()), Beat::Due));
        assert!(matches!(b.beat("a", a, 2, Said::default()), Beat::Due));
        let t = b.tick().await.unwrap();
        assert_eq!((t.asked, t.renewed, t.fenced), (2, 1, 1));
        assert_eq!(
            *book.calls.lock().unwrap(),
            [vec![("a".to_owned(), 1), ("b".to_owned(), 2)]]
        );
        assert!(matches!(
            said(&mut rx_a)[..],
            [Answer::Renewed(pb::Renewed {
                epoch: 1,
                lease_until: 42,
                // The newest heartbeat the renewal took.
                seq: 2,
            })]
        ));
        assert!(matches!(
            said(&mut rx_b)[..],
            [Answer::Fenced(pb::Fenced { epoch: 2 })]
        ));
        // A fenced host is not asked about again; its heartbeats answer `Fenced` until it joins.
        assert!(matches!(
            b.beat("b", s, 0, Said::default()),
            Beat::Fenced(2)
        ));
        assert_eq!(b.tick().await.unwrap().asked, 0);
        let (tx_b, _rx_b) = mpsc::channel(OUTBOX);
        assert_eq!(b.attend("b", 1, Said::default(), tx_b, Some(s)), s);
        assert!(matches!(b.beat("b", s, 0, Said::default()), Beat::Due));
        assert_eq!(b.tick().await.unwrap().renewed, 1);
    }

    #[tokio::test]
    async fn a_store_error_keeps_hosts_due_and_streams_open() {
        let book = Arc::new(Book::default());
        let b = LeaseBatcher::new(book.clone());
        let (tx, mut rx) = mpsc::channel(OUTBOX);
        let a = b.attend("a", 1, Said::default(), tx, None);
        b.beat("a", a, 0, Said::default());
        book.down.store(true, Ordering::SeqCst);
        assert!(b.tick().await.is_err());
        assert!(b.tick().await.is_err());
        assert!(said(&mut rx).is_empty());
        assert_eq!(b.attending(), 1);
        book.down.store(false, Ordering::SeqCst);
        // No heartbeat since: the one before the outage is still due.
        assert_eq!(b.tick().await.unwrap().renewed, 1);
        assert_eq!(book.calls.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_newer_stream_replaces_the_old_one() {
        let b = LeaseBatcher::new(Arc::new(Book::default()));
        let (tx, _rx) = mpsc::channel(OUTBOX);
        let old = b.attend("a", 1, Said::default(), tx.clone(), None);
        let new = b.attend("a", 1, Said::default(), tx, None);
        assert_ne!(old, new);
        assert!(matches!(b.beat("a", old, 0, Said::default()), Beat::Gone));
        // The old stream ending leaves the new one attending.
        b.leave("a", old);
        assert_eq!(b.attending(), 1);
        assert!(matches!(b.beat("a", new, 0, Said::default()), Beat::Due));
        b.leave("a", new);
        assert_eq!(b.attending(), 0);
    }

    /// A heartbeat that says something new is reported at the next tick, with every other such
    /// host in one call; one that repeats the last (or the join) is not; a host the same tick
    /// fences is left out; a failed report is made again next tick with what the host says
    /// by then.
    #[tokio::test]
    async fn changed_heartbeats_are_reported_once_per_tick() {
        let book = Arc::new(Book::default());
        let b = LeaseBatcher::new(book.clone());
        let (tx, _rx) = mpsc::channel(OUTBOX);
        let a = b.attend("a", 1, says(4096, &["base"]), tx.clone(), None);
        let c = b.attend("c", 1, says(4096, &["base"]), tx.clone(), None);
        let f = b.attend("f", 2, says(4096, &[]), tx, None);
        // As at the join: nothing to report.
        b.beat("a", a, 0, says(4096, &["base"]));
        assert_eq!(b.tick().await.unwrap().reported, 0);
        assert!(book.reports.lock().unwrap().is_empty());

        b.beat("a", a, 0, says(4096, &["base", "node"]));
        b.beat("c", c, 0, says(2048, &["base"]));
        b.beat("f", f, 0, says(1024, &[]));
        let t = b.tick().await.unwrap();
        assert_eq!((t.renewed, t.fenced, t.reported), (2, 1, 2));
        let sent = book.reports.lock().unwrap().clone();
        assert_eq!(sent.len(), 1, "one call per tick");
        let got: Vec<(&str, i64, i64, Vec<String>)> = sent[0]
            .iter()
            .map(|u| {
                (
                    u.host_id.as_str(),
                    u.epoch,
                    u.capacity.memory_mib,
                    u.templates.clone(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("a", 1, 4096, vec!["base".to_owned(), "node".to_owned()]),
                ("c", 1, 2048, vec!["base".to_owned()]),
            ]
        );
        // Reported: the same heartbeat again is nothing new.
        b.beat("a", a, 0, says(4096, &["base", "node"]));
        assert_eq!(b.tick().await.unwrap().reported, 0);

        // The store fails the renewal: nothing reported, asked again with the newest.
        b.beat("a", a, 0, says(1024, &["base"]));
        book.down.store(true, Ordering::SeqCst);
        assert!(b.tick().await.is_err());
        b.beat("a", a, 0, says(512, &["base"]));
        book.down.store(false, Ordering::SeqCst);
        assert_eq!(b.tick().await.unwrap().reported, 1);
        let last = book.reports.lock().unwrap().last().cloned().unwrap();
        assert_eq!(last.len(), 1);
        assert_eq!(last[0].capacity.memory_mib, 512);
        assert_eq!(book.reports.lock().unwrap().len(), 2);
    }
}
