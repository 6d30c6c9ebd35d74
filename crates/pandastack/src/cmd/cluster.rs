//! `pandastack cluster init` and `pandastack cluster cert`: the cluster's PKI for multi-host
//! PandaStack (server replicas and one agent per host over mutual TLS), from
//! `pandastack-cluster`. An agent's bundle is `pandastack agent --identity`, a replica's
//! `pandastack server --cluster`.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use pandastack_cluster::{write_bundle, ClusterCa, Role, San, DEFAULT_DAYS};

#[derive(Debug, clap::Args)]
pub struct ClusterArgs {
    #[command(subcommand)]
    what: ClusterWhat,
}

#[derive(Debug, clap::Subcommand)]
enum ClusterWhat {
    /// Make the cluster CA: DIR/ca.pem (0644) and DIR/ca.key (0600). Refuses a DIR that has one.
    Init(InitArgs),
    /// Issue a host's certificate from the CA in --dir into a new bundle directory --out:
    /// ca.pem, cert.pem, key.pem (0600).
    Cert(CertArgs),
}

#[derive(Debug, clap::Args)]
struct InitArgs {
    /// Directory for the CA (made 0700 if missing); keep it off the cluster's hosts.
    #[arg(long)]
    dir: PathBuf,
}

#[derive(Debug, clap::Args)]
struct CertArgs {
    /// The CA's directory (from `cluster init`).
    #[arg(long)]
    dir: PathBuf,
    /// What the host is: `agent` (a host agent) or `server` (a control-plane replica).
    #[arg(long)]
    role: Role,
    /// The host's name (an agent's host id): a-z, 0-9 and '-', at most 63 characters. It is
    /// also a DNS name in the certificate.
    #[arg(long)]
    name: String,
    /// More DNS names the host is reached by (repeatable).
    #[arg(long = "dns", value_name = "NAME")]
    dns: Vec<String>,
    /// IP addresses the host is reached at (repeatable).
    #[arg(long = "ip", value_name = "ADDR")]
    ip: Vec<IpAddr>,
    /// Days the certificate is valid for (no longer than the CA).
    #[arg(long, default_value_t = DEFAULT_DAYS)]
    days: u32,
    /// New directory for the bundle (made 0700); refused if it already holds one.
    #[arg(long)]
    out: PathBuf,
}

pub async fn run(args: ClusterArgs) -> anyhow::Result<ExitCode> {
    match args.what {
        ClusterWhat::Init(a) => init(&a.dir),
        ClusterWhat::Cert(a) => cert(a),
    }
}

fn init(dir: &Path) -> anyhow::Result<ExitCode> {
    let ca = ClusterCa::init(dir).context("make the cluster CA")?;
    let d = dir.display();
    println!("made the CA of cluster {} in {d}:", ca.id());
    println!(
        "  {d}/ca.pem  the CA certificate (0644), valid until {}",
        ca.not_after().date()
    );
    println!("  {d}/ca.key  its private key (0600): keep it here, on none of the hosts");
    println!("next, a certificate for each host:");
    println!(
        "  pandastack cluster cert --dir {d} --role agent|server --name NAME [--dns DNS]... [--ip IP]... --out DIR"
    );
    Ok(ExitCode::SUCCESS)
}

fn cert(a: CertArgs) -> anyhow::Result<ExitCode> {
    let ca = ClusterCa::open(&a.dir).context("open the cluster CA")?;
    let sans: Vec<San> = (a.dns.iter().cloned().map(San::Dns))
        .chain(a.ip.iter().copied().map(San::Ip))
        .collect();
    let issued = ca
        .issue(a.role, &a.name, &sans, a.days)
        .with_context(|| format!("issue a certificate for {} {}", a.role, a.name))?;
    write_bundle(&a.out, &issued, &ca).context("write the bundle")?;
    let o = a.out.display();
    println!(
        "issued {} of cluster {}, valid until {}:",
        issued.peer,
        ca.id(),
        issued.not_after.date()
    );
    println!("  {o}/cert.pem  its certificate (0644)");
    println!("  {o}/key.pem   its private key (0600)");
    println!("  {o}/ca.pem    the cluster CA, the only one it trusts (0644)");
    let mut names = vec![a.name.clone()];
    names.extend(a.dns.iter().map(|d| d.to_ascii_lowercase()));
    names.extend(a.ip.iter().map(IpAddr::to_string));
    println!(
        "it names pandastack://{}/{}, reachable as {}",
        a.role,
        a.name,
        names.join(", ")
    );
    println!(
        "copy {o} whole to host {} (mode 0700, owned by the user pandastack runs as)",
        a.name
    );
    let using = match a.role {
        Role::Agent => "pandastack agent --identity",
        Role::Server => "pandastack server --cluster",
    };
    println!("use it as `{using} {o}`");
    Ok(ExitCode::SUCCESS)
}
