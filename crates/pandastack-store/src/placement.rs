//! Placement: the host a new sandbox goes to, chosen in the transaction that writes its row
//! ([`crate::SandboxRepo::insert_placed`]), so creates in flight count against their host.
//!
//! ```text
//!   hosts (each row holds its use: vm_memory_mib, vms — kept by triggers, see `use_counters`)
//!     └─► WHERE ready, lease live, compat key, not excluded, memory and slots left
//!           └─► ORDER BY holds the template, least memory left after the create, id; LIMIT 1
//!                 PostgreSQL: that one row read again FOR UPDATE in the same statement (see below)
//!                 none (or pinned)? every host (or the pinned one, locked) judged here: the
//!                                   choice, or why none fits (NoCapacity)
//! ```
//!
//! The SQL choice and [`judge`] are the same rules written twice: an unpinned create that fits
//! reads one row; only one that does not (or a pinned one) reads every host it may name, to
//! say why none fits. The tests at the bottom hold the two to each other.
//!
//! A candidate is `ready`, holds a live lease (`lease_until > now`; the single-node in-process
//! host, which holds none, only when the create is pinned to it), has the compatibility key
//! the create names (if any), is not among the hosts that refused this create, and has room:
//! `used + memory ≤ memory_mib` where `used` is the memory of its sandboxes in a state that
//! holds a VM (`starting`, `running`, `paused` — a create under way is `starting`), and fewer
//! such sandboxes than its `slots` when it reported any. A host that reported no memory is
//! never chosen, except the in-process host when pinned (its own create checks it).
//!
//! Concurrency: on SQLite the create's transaction took the database's write lock before
//! placing (its workspace-limit check writes first), so nothing changes under it. On
//! PostgreSQL the statement that chooses locks the chosen row (`FOR UPDATE`): a create that
//! chose the same host waits for the first to commit, and PostgreSQL then reads the row again
//! as that create left it (its use raised by the trigger of its insert) and returns it only if
//! it still fits. The best id is chosen by an unlocked subquery (a top-1 sort) and only that
//! row is locked: a lock over the ordered scan would fully sort every candidate's whole row,
//! most of the statement's time at 200 hosts. A host filled while waiting for it, a host that
//! fits now but did not when the statement looked (another create's delete committed
//! meanwhile), or a deadlock PostgreSQL broke, rolls the create back to be placed again from a
//! new transaction ([`Retry`], at most [`PLACE_TRIES`] times).

use sqlx::any::AnyRow;

use crate::{col, parsed, Backend, HostState, StoreError};

/// What a create needs of its host.
#[derive(Debug, Clone, Copy)]
pub struct Demand<'a> {
    /// The memory its VM will take.
    pub memory_mib: i64,
    /// The template it starts from: a host holding it is preferred.
    pub template: Option<&'a str>,
    /// Only hosts with this compatibility key (a snapshot's restore).
    pub compat_key: Option<&'a str>,
    /// Only this host (pinned: fork, snapshot or volume locality).
    pub host: Option<&'a str>,
    /// Hosts that refused this create already.
    pub exclude: &'a [String],
    /// Unix ms: leases that end before this are not live.
    pub now_ms: i64,
}

/// Where a create went, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub host_id: String,
    pub reason: PlaceReason,
    /// Memory the host has left once this create's VM runs (0 for the in-process host, which
    /// reports none).
    pub free_memory_mib: i64,
    /// How many hosts could have taken it.
    pub candidates: usize,
}

/// Why a host was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlaceReason {
    /// The create named it.
    Pinned,
    /// It holds the create's template (the best fit among those that do).
    TemplateLocal,
    /// No candidate holds the template (or none was named): the one left fullest.
    BestFit,
}

impl std::fmt::Display for PlaceReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PlaceReason::Pinned => "pinned",
            PlaceReason::TemplateLocal => "template-local",
            PlaceReason::BestFit => "best fit",
        })
    }
}

/// How many times a create on PostgreSQL is placed in all when the host it chose was filled by
/// other creates before it could lock it.
const PLACE_TRIES: usize = 8;

/// One host as placement sees it.
struct Load {
    id: String,
    state: HostState,
    lease_until: i64,
    compat_key: Option<String>,
    memory_mib: i64,
    slots: i64,
    /// Holds the create's template.
    local: bool,
    /// Memory of its sandboxes that hold a VM, and how many they are.
    used: i64,
    running: i64,
}

/// Why a host cannot take a create; the order is the order of the checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Unfit {
    Dead,
    Draining,
    NoLease,
    Lapsed,
    Compat,
    Excluded,
    Slots,
    NoMemory,
    Memory,
}

impl Unfit {
    /// After a count of hosts: "2 draining".
    fn plural(self, memory_mib: i64) -> String {
        match self {
            Unfit::Dead => "dead".into(),
            Unfit::Draining => "draining".into(),
            Unfit::NoLease => "without a lease (the in-process host: only when pinned)".into(),
            Unfit::Lapsed => "with a lapsed lease".into(),
            Unfit::Compat => "with another compatibility key".into(),
            Unfit::Excluded => "refused this create".into(),
            Unfit::Slots => "with every slot taken".into(),
            Unfit::NoMemory => "reporting no memory".into(),
            Unfit::Memory => format!("with less than {memory_mib} MiB free"),
        }
    }

    /// After "host X, which": "is draining".
    fn singular(self, memory_mib: i64) -> String {
        match self {
            Unfit::Dead => "is dead".into(),
            Unfit::Draining => "is draining".into(),
            Unfit::NoLease => "holds no lease".into(),
            Unfit::Lapsed => "has a lapsed lease".into(),
            Unfit::Compat => "has another compatibility key".into(),
            Unfit::Excluded => "refused this create".into(),
            Unfit::Slots => "has every slot taken".into(),
            Unfit::NoMemory => "reports no memory".into(),
            Unfit::Memory => format!("has less than {memory_mib} MiB free"),
        }
    }
}

/// Whether host `h` can take demand `d`: the memory it has left after, or why not.
fn judge(h: &Load, d: &Demand<'_>) -> Result<i64, Unfit> {
    match h.state {
        HostState::Dead => return Err(Unfit::Dead),
        HostState::Draining => return Err(Unfit::Draining),
        HostState::Ready => {}
    }
    let in_process = h.lease_until == 0;
    if in_process {
        if d.host.is_none() {
            return Err(Unfit::NoLease);
        }
    } else if h.lease_until <= d.now_ms {
        return Err(Unfit::Lapsed);
    }
    if d.compat_key
        .is_some_and(|k| h.compat_key.as_deref() != Some(k))
    {
        return Err(Unfit::Compat);
    }
    if d.exclude.contains(&h.id) {
        return Err(Unfit::Excluded);
    }
    if h.slots > 0 && h.running >= h.slots {
        return Err(Unfit::Slots);
    }
    if h.memory_mib <= 0 {
        return if in_process {
            Ok(0)
        } else {
            Err(Unfit::NoMemory)
        };
    }
    let free = h
        .memory_mib
        .saturating_sub(h.used)
        .saturating_sub(d.memory_mib.max(0));
    if free < 0 {
        return Err(Unfit::Memory);
    }
    Ok(free)
}

/// Whether host `h` holds the template; `$1` is the template pattern (`,name,`, or '' for
/// none).
const LOCAL: &str = "CAST(CASE WHEN $1 <> '' AND replace(h.templates, $1, '') <> h.templates \
     THEN 1 ELSE 0 END AS BIGINT)";

/// The columns of a [`Load`] but `local` ([`LOCAL`]); the host's use is kept on its row
/// (`vm_memory_mib`, `vms`: see `use_counters`).
const HOST_COLUMNS: &str =
    "h.id, h.state, h.lease_until, h.compat_key, h.memory_mib, h.slots, h.vm_memory_mib, h.vms";

fn load(r: &AnyRow) -> Result<Load, StoreError> {
    Ok(Load {
        id: col(r, "id")?,
        state: parsed(r, "state", HostState::parse)?,
        lease_until: col(r, "lease_until")?,
        compat_key: col(r, "compat_key")?,
        memory_mib: col(r, "memory_mib")?,
        slots: col(r, "slots")?,
        local: col::<i64>(r, "local")? != 0,
        used: col(r, "vm_memory_mib")?,
        running: col(r, "vms")?,
    })
}

/// Every host (or only the pinned one, locked when `lock`: PostgreSQL) with what its
/// sandboxes use.
async fn hosts(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    d: &Demand<'_>,
    pattern: &str,
    lock: bool,
) -> Result<Vec<Load>, StoreError> {
    let only_host = match d.host {
        Some(_) => " WHERE h.id = $2",
        None => "",
    };
    let for_update = if lock { " FOR UPDATE" } else { "" };
    let sql =
        format!("SELECT {HOST_COLUMNS}, {LOCAL} AS local FROM hosts h{only_host}{for_update}");
    let mut q = sqlx::query(&sql).bind(pattern);
    if let Some(h) = d.host {
        q = q.bind(h);
    }
    let rows = q.fetch_all(&mut **tx).await?;
    rows.iter().map(load).collect()
}

/// A host chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Choice {
    id: String,
    /// Holds the create's template.
    local: bool,
    /// Memory left after the create.
    free: i64,
    /// How many hosts could have taken it.
    candidates: usize,
}

/// The best host for the unpinned demand `d`, chosen by the database (see the module doc), with
/// its row: `None` when no host fits.
///
/// With `lock` (PostgreSQL) the statement locks the row it returns (`FOR UPDATE`). A host
/// another create holds is waited for, then its row is read again as that create left it and
/// returned only if it still fits (else nothing: the create is placed again, see [`place`]),
/// so what comes back is the host as it is now: the use it holds is on the row itself.
async fn choose_in_sql(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    backend: Backend,
    d: &Demand<'_>,
    pattern: &str,
    lock: bool,
) -> Result<Option<(Choice, Load)>, StoreError> {
    // Parameters are numbered in the order they first appear: SQLite numbers `$N` that way.
    let free = "h.memory_mib - h.vm_memory_mib - $2";
    let mut next = 4;
    let compat = match d.compat_key {
        Some(_) => {
            next += 1;
            " AND h.compat_key = $4".to_owned()
        }
        None => String::new(),
    };
    let exclude = if d.exclude.is_empty() {
        String::new()
    } else {
        let marks: Vec<String> = (next..next + d.exclude.len())
            .map(|i| format!("${i}"))
            .collect();
        format!(" AND h.id NOT IN ({})", marks.join(", "))
    };
    // Ids in byte order, as `judge`'s caller sorts them (PostgreSQL's default collation may not).
    let by_id = match backend {
        Backend::Postgres => "h.id COLLATE \"C\"",
        Backend::Sqlite => "h.id",
    };
    let for_update = if lock { " FOR UPDATE OF h" } else { "" };
    let fits = format!(
        "h.state = 'ready' AND h.lease_until <> 0 AND h.lease_until > $3 \
         AND h.memory_mib > 0 AND {free} >= 0 AND (h.slots <= 0 OR h.vms < h.slots){compat}{exclude}"
    );
    // The best id is chosen unlocked (a top-1 sort of narrow rows); only its row is read again
    // and locked. A lock taken over the ordered scan itself would sort every whole row first.
    let sql = format!(
        "SELECT {HOST_COLUMNS}, {LOCAL} AS local, CAST({free} AS BIGINT) AS free, \
         (SELECT CAST(COUNT(*) AS BIGINT) FROM hosts h WHERE {fits}) AS candidates \
         FROM hosts h WHERE h.id = (SELECT h.id FROM hosts h WHERE {fits} \
         ORDER BY {LOCAL} DESC, {free}, {by_id} LIMIT 1) AND {fits}{for_update}"
    );
    let mut q = sqlx::query(&sql)
        .bind(pattern)
        .bind(d.memory_mib.max(0))
        .bind(d.now_ms);
    if let Some(k) = d.compat_key {
        q = q.bind(k);
    }
    for id in d.exclude {
        q = q.bind(id);
    }
    let Some(r) = q.fetch_optional(&mut **tx).await? else {
        return Ok(None);
    };
    let choice = Choice {
        id: col(&r, "id")?,
        local: col::<i64>(&r, "local")? != 0,
        free: col(&r, "free")?,
        candidates: usize::try_from(col::<i64>(&r, "candidates")?).unwrap_or(0),
    };
    Ok(Some((choice, load(&r)?)))
}

/// The best of `all` for demand `d` by [`judge`], or why each cannot take it.
fn choose_judged(all: &[Load], d: &Demand<'_>) -> Result<Choice, Vec<Unfit>> {
    let mut fits: Vec<(&Load, i64)> = Vec::new();
    let mut unfit: Vec<Unfit> = Vec::new();
    for h in all {
        match judge(h, d) {
            Ok(free) => fits.push((h, free)),
            Err(why) => unfit.push(why),
        }
    }
    let candidates = fits.len();
    let best = fits.into_iter().min_by(|(a, fa), (b, fb)| {
        b.local
            .cmp(&a.local)
            .then(fa.cmp(fb))
            .then_with(|| a.id.cmp(&b.id))
    });
    match best {
        Some((h, free)) => Ok(Choice {
            id: h.id.clone(),
            local: h.local,
            free,
            candidates,
        }),
        None => Err(unfit),
    }
}

/// The form of `d`'s template that `hosts.templates` holds (`,name,`; '' for none).
fn template_pattern(d: &Demand<'_>) -> String {
    d.template
        .filter(|t| !t.is_empty() && !t.contains(','))
        .map(|t| format!(",{t},"))
        .unwrap_or_default()
}

/// Chooses the host for demand `d` inside a create's transaction `tx` (see the module doc).
/// [`StoreError::NoCapacity`] when no host fits, saying why for each. `Ok(None)`: a host fits
/// now that did not when this transaction looked (PostgreSQL: creates and deletes of other
/// transactions committed meanwhile) — roll `tx` back and call again from a new transaction,
/// through [`Retry`].
pub(crate) async fn place(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    backend: Backend,
    d: &Demand<'_>,
    raced: usize,
) -> Result<Option<Placement>, StoreError> {
    let pattern = template_pattern(d);
    let lock = backend == Backend::Postgres;
    let refused = |unfit: Vec<Unfit>| StoreError::NoCapacity {
        why: why(d, &unfit, raced),
    };
    let (choice, reason) = match d.host {
        // Pinned: its row (locked), judged.
        Some(_) => match choose_judged(&hosts(tx, d, &pattern, lock).await?, d) {
            Ok(c) => (c, PlaceReason::Pinned),
            Err(unfit) => return Err(refused(unfit)),
        },
        None => match choose_in_sql(tx, backend, d, &pattern, lock).await? {
            Some((c, now)) => {
                // The row as it is now fits (the statement re-checked it under the lock); a
                // second word on it costs nothing, and its room left is the row's as it is now.
                let Ok(free) = judge(&now, d) else {
                    return Ok(None);
                };
                let reason = if c.local {
                    PlaceReason::TemplateLocal
                } else {
                    PlaceReason::BestFit
                };
                (Choice { free, ..c }, reason)
            }
            // Nothing fits: every host judged, to say why (on PostgreSQL one freed since the
            // query above means choosing again).
            None => match choose_judged(&hosts(tx, d, &pattern, false).await?, d) {
                Ok(_) => return Ok(None),
                Err(unfit) => return Err(refused(unfit)),
            },
        },
    };
    Ok(Some(Placement {
        host_id: choice.id,
        reason,
        free_memory_mib: choice.free,
        candidates: choice.candidates,
    }))
}

/// A create's placement tried again after a race ([`place`] answered `None`), at most
/// [`PLACE_TRIES`] times in all.
#[derive(Debug, Default)]
pub(crate) struct Retry {
    pub(crate) raced: usize,
}

impl Retry {
    /// What a caller does with [`place`]'s answer: `Ok(Some)` go on; `Ok(None)` roll the
    /// transaction back and place again; `Err` give up. A deadlock PostgreSQL broke (two creates
    /// each waiting for a host the other locked while choosing) is a race like any other.
    pub(crate) fn outcome(
        &mut self,
        placed: Result<Option<Placement>, StoreError>,
    ) -> Result<Option<Placement>, StoreError> {
        match placed {
            Ok(Some(p)) => Ok(Some(p)),
            Ok(None) => self.again().map(|()| None),
            Err(StoreError::Db(sqlx::Error::Database(e)))
                if e.code().as_deref() == Some("40P01") =>
            {
                self.again().map(|()| None)
            }
            Err(e) => Err(e),
        }
    }

    /// Counts one more race: `Err` once every try was taken.
    fn again(&mut self) -> Result<(), StoreError> {
        self.raced += 1;
        if self.raced >= PLACE_TRIES {
            return Err(StoreError::NoCapacity {
                why: format!(
                    "{PLACE_TRIES} hosts chosen in turn were each filled by other creates \
                     first; try again"
                ),
            });
        }
        Ok(())
    }
}

/// The text of [`StoreError::NoCapacity`]: "3 hosts: 1 draining, 2 with less than 2048 MiB
/// free", or for a pinned create "host h1 (pinned), which is draining".
fn why(d: &Demand<'_>, unfit: &[Unfit], raced: usize) -> String {
    let mut causes = unfit.to_vec();
    causes.sort();
    let mut text = match (d.host, causes.first()) {
        (Some(h), None) => format!("host {h} (pinned) is not known"),
        (Some(h), Some(&c)) => format!("host {h} (pinned), which {}", c.singular(d.memory_mib)),
        (None, None) => "no hosts".into(),
        (None, Some(_)) => {
            let mut counts: Vec<(Unfit, usize)> = Vec::new();
            for c in causes.iter().copied() {
                match counts.last_mut() {
                    Some((last, n)) if *last == c => *n += 1,
                    _ => counts.push((c, 1)),
                }
            }
            let parts: Vec<String> = counts
                .iter()
                .map(|(c, n)| format!("{n} {}", c.plural(d.memory_mib)))
                .collect();
            let n = causes.len();
            let hosts = if n == 1 { "host" } else { "hosts" };
            format!("{n} {hosts}: {}", parts.join(", "))
        }
    };
    if raced > 0 {
        text.push_str(&format!(
            " ({raced} filled by other creates while this one was placed)"
        ));
    }
    text
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const NOW: i64 = 1_000_000;

    fn host(id: &str) -> Load {
        Load {
            id: id.into(),
            state: HostState::Ready,
            lease_until: NOW + 1,
            compat_key: Some("k1".into()),
            memory_mib: 4096,
            slots: 0,
            local: false,
            used: 0,
            running: 0,
        }
    }

    fn demand(memory_mib: i64) -> Demand<'static> {
        Demand {
            memory_mib,
            template: None,
            compat_key: None,
            host: None,
            exclude: &[],
            now_ms: NOW,
        }
    }

    #[test]
    fn judge_checks_each_rule() {
        let d = demand(1024);
        assert_eq!(judge(&host("a"), &d), Ok(3072));
        let full = Load {
            used: 3073,
            ..host("a")
        };
        assert_eq!(judge(&full, &d), Err(Unfit::Memory));
        let exact = Load {
            used: 3072,
            ..host("a")
        };
        assert_eq!(judge(&exact, &d), Ok(0));
        let slots = Load {
            slots: 2,
            running: 2,
            ..host("a")
        };
        assert_eq!(judge(&slots, &d), Err(Unfit::Slots));
        let lapsed = Load {
            lease_until: NOW,
            ..host("a")
        };
        assert_eq!(judge(&lapsed, &d), Err(Unfit::Lapsed));
        let draining = Load {
            state: HostState::Draining,
            ..host("a")
        };
        assert_eq!(judge(&draining, &d), Err(Unfit::Draining));
        let silent = Load {
            memory_mib: 0,
            ..host("a")
        };
        assert_eq!(judge(&silent, &d), Err(Unfit::NoMemory));
        let compat = Demand {
            compat_key: Some("k2"),
            ..d
        };
        assert_eq!(judge(&host("a"), &compat), Err(Unfit::Compat));
        let refused = ["a".to_owned()];
        let excluded = Demand {
            exclude: &refused,
            ..d
        };
        assert_eq!(judge(&host("a"), &excluded), Err(Unfit::Excluded));
        assert_eq!(judge(&host("b"), &excluded), Ok(3072));

        // The in-process host: only when pinned, and then without a memory report.
        let local = Load {
            lease_until: 0,
            memory_mib: 0,
            ..host("a")
        };
        assert_eq!(judge(&local, &d), Err(Unfit::NoLease));
        let pinned = Demand {
            host: Some("a"),
            ..d
        };
        assert_eq!(judge(&local, &pinned), Ok(0));
    }

    #[test]
    fn why_counts_each_cause() {
        let d = demand(2048);
        assert_eq!(
            why(&d, &[Unfit::Memory, Unfit::Draining, Unfit::Memory], 0),
            "3 hosts: 1 draining, 2 with less than 2048 MiB free"
        );
        assert_eq!(why(&d, &[], 0), "no hosts");
        assert_eq!(
            why(&d, &[Unfit::Dead], 1),
            "1 host: 1 dead (1 filled by other creates while this one was placed)"
        );
        let pinned = Demand {
            host: Some("h1"),
            ..d
        };
        assert_eq!(
            why(&pinned, &[Unfit::Slots], 0),
            "host h1 (pinned), which has every slot taken"
        );
        assert_eq!(why(&pinned, &[], 0), "host h1 (pinned) is not known");
    }

    /// A store per backend: SQLite in `dir`, and PostgreSQL when `PANDASTACK_TEST_POSTGRES`
    /// names a server (a fresh database on it).
    pub(crate) async fn stores(dir: &std::path::Path) -> Vec<crate::Store> {
        let mut out = vec![crate::Store::open(&dir.join("state.db")).await.unwrap()];
        if let Ok(admin) = std::env::var("PANDASTACK_TEST_POSTGRES") {
            if admin != "skip" {
                use sqlx::Connection;
                let name = format!("t_{:016x}", rand::random::<u64>());
                let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap();
                sqlx::query(&format!("CREATE DATABASE {name}"))
                    .execute(&mut conn)
                    .await
                    .unwrap();
                let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap_or(&admin);
                out.push(
                    crate::Store::connect(&format!("{base}/{name}"))
                        .await
                        .unwrap(),
                );
            }
        }
        out
    }

    /// A small deterministic generator (xorshift).
    pub(crate) struct Rng(pub(crate) u64);

    impl Rng {
        pub(crate) fn pick<'a, T>(&mut self, from: &'a [T]) -> &'a T {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            &from[usize::try_from(self.0 % from.len() as u64).unwrap()]
        }
    }

    /// Sixty hosts of every kind placement tells apart (states, leases, keys, memory, slots,
    /// templates, ids that sort differently by byte and by locale) with sandboxes in every
    /// state; the SQL choice must be [`judge`]'s for each of many demands.
    #[tokio::test]
    async fn the_sql_choice_is_the_one_judge_makes() {
        let dir = tempfile::tempdir().unwrap();
        for store in stores(dir.path()).await {
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
            let (ws, _, _) = store
                .keys()
                .create_workspace_with_key("ws", 10_000, 10_000)
                .await
                .unwrap();
            let mut ids = Vec::new();
            for i in 0..60 {
                let id = format!("{}{}", rng.pick(&["h-", "h", "H-", "h-a"]), i % 7);
                let id = format!("{id}{}", if ids.contains(&id) { i } else { 0 });
                let joining = crate::Joining {
                    id: id.clone(),
                    name: id.clone(),
                    address: format!("{id}:7443"),
                    capacity: crate::HostCapacity {
                        vcpus: 4,
                        memory_mib: 1,
                        disk_bytes: 1,
                        free_slots: 1,
                        creates_in_flight: 0,
                        slots: 1,
                    },
                    compat_key: "k1".into(),
                    templates: Vec::new(),
                };
                store.hosts().join(&joining, 1, NOW).await.unwrap();
                for _ in 0..*rng.pick(&[0, 1, 2, 4]) {
                    let mut r = crate::SandboxRow::service(&ws.id, &id, "base", Default::default());
                    r.memory_mib = *rng.pick(&[256, 512, 1024]);
                    r.state = *rng.pick(&[
                        crate::SandboxState::Running,
                        crate::SandboxState::Starting,
                        crate::SandboxState::Paused,
                        crate::SandboxState::Stopped,
                        crate::SandboxState::Hibernated,
                        crate::SandboxState::Lost,
                    ]);
                    store.sandboxes().insert(&r).await.unwrap();
                }
                sqlx::query(
                    "UPDATE hosts SET state = $1, lease_until = $2, compat_key = $3, \
                     memory_mib = $4, slots = $5, templates = $6 WHERE id = $7",
                )
                .bind(*rng.pick(&["ready", "ready", "ready", "ready", "draining", "dead"]))
                .bind(*rng.pick(&[NOW + 10_000, NOW + 10_000, NOW + 10_000, NOW, 0]))
                .bind(*rng.pick(&[Some("k1"), Some("k1"), Some("k2"), None]))
                .bind(*rng.pick(&[0_i64, 1024, 2048, 2048, 4096]))
                .bind(*rng.pick(&[0_i64, 0, 1, 2, 4]))
                .bind(*rng.pick(&["", ",minimal,", ",base,minimal,", ",minimal2,"]))
                .bind(&id)
                .execute(&store.pool)
                .await
                .unwrap();
                ids.push(id);
            }
            let mut fitted = 0;
            for memory_mib in [0, 256, 512, 1024, 2048, 3000] {
                for template in [None, Some("minimal"), Some("base"), Some("")] {
                    for compat_key in [None, Some("k1"), Some("k2")] {
                        for exclude in [vec![], ids[..20].to_vec()] {
                            let d = Demand {
                                memory_mib,
                                template,
                                compat_key,
                                host: None,
                                exclude: &exclude,
                                now_ms: NOW,
                            };
                            let pattern = template_pattern(&d);
                            let mut tx = store.pool.begin().await.unwrap();
                            // On PostgreSQL the locking form, as creates run it.
                            let lock = store.backend == Backend::Postgres;
                            let sql = choose_in_sql(&mut tx, store.backend, &d, &pattern, lock)
                                .await
                                .unwrap()
                                .map(|(c, _)| c);
                            let all = hosts(&mut tx, &d, &pattern, false).await.unwrap();
                            let judged = choose_judged(&all, &d).ok();
                            assert_eq!(sql, judged, "{:?} on {:?}", d, store.backend);
                            fitted += usize::from(sql.is_some());
                            tx.rollback().await.unwrap();
                        }
                    }
                }
            }
            assert!(
                fitted > 20,
                "{fitted} demands fitted: the case tells too little"
            );
        }
    }
}
