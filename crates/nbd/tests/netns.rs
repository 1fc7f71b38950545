//! An array whose members live on other "hosts": each host is a network namespace this test
//! makes (`ip netns`, a veth pair, a /30 of 10.233.0.0/16), running nbdkit's file plugin on
//! its own address; the array runs here and reaches them over TCP. Hosts are killed and
//! brought back, the network is cut and restored. Traffic stays on those addresses, and every
//! wait is for an event under a hang guard. Needs root (CAP_NET_ADMIN); without it, or
//! without `ip` or nbdkit, the tests are recorded as skipped.

mod common;

use common::{Rng, HANG_GUARD};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use uraid_core::geometry::Level;
use uraid_engine::{Array, ArrayOptions, DeviceState, Member};
use uraid_nbd::{ClientOptions, NbdMember, NbdUri};

fn ip(args: &[&str]) -> bool {
    Command::new("ip").args(args).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// Whether namespaces can be made here; records the skip otherwise.
fn netns_available(test: &str) -> bool {
    if !uraid_testkit::nbdkit::available(test) {
        return false;
    }
    // Tests run in parallel: each probe needs its own name.
    static PROBES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let probe = format!("uraid-probe-{}-{}", std::process::id(), PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    if ip(&["netns", "add", &probe]) {
        ip(&["netns", "del", &probe]);
        return true;
    }
    uraid_testkit::skip(test, "cannot create a network namespace here (needs root / CAP_NET_ADMIN and iproute2)");
    false
}

/// One host: a namespace, the veth pair to it, an image file and nbdkit serving it.
struct Host {
    ns: String,
    veth: String,
    addr: String,
    image: PathBuf,
    server: Option<Child>,
}

impl Host {
    fn new(dir: &Path, index: usize) -> Host {
        // Unique in this process (tests run in parallel) and, by the pid, across processes.
        static HOSTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let k = HOSTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        assert!(k < 60, "a /30 per host in one /24");
        let pid = std::process::id();
        let (ns, veth, peer) = (format!("uraid-{pid}-{k}"), format!("ur{}h{k}", pid % 10_000), format!("ur{}n{k}", pid % 10_000));
        let net = pid % 250;
        let (here, there) = (format!("10.233.{net}.{}", 4 * k + 1), format!("10.233.{net}.{}", 4 * k + 2));
        let ok = ip(&["netns", "add", &ns])
            && ip(&["link", "add", &veth, "type", "veth", "peer", "name", &peer])
            && ip(&["link", "set", &peer, "netns", &ns])
            && ip(&["addr", "add", &format!("{here}/30"), "dev", &veth])
            && ip(&["link", "set", &veth, "up"])
            && ip(&["netns", "exec", &ns, "ip", "addr", "add", &format!("{there}/30"), "dev", &peer])
            && ip(&["netns", "exec", &ns, "ip", "link", "set", &peer, "up"])
            && ip(&["netns", "exec", &ns, "ip", "link", "set", "lo", "up"]);
        let image = dir.join(format!("host{index}-{k}.img"));
        std::fs::write(&image, vec![0u8; 24 << 20]).expect("image");
        let mut host = Host { ns, veth, addr: there, image, server: None };
        assert!(ok, "setting up host {index}'s namespace failed");
        host.start();
        host
    }

    /// Starts nbdkit in the namespace and waits until it accepts connections from here.
    fn start(&mut self) {
        let file = format!("file={}", self.image.display());
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns, "nbdkit", "-f", "--exit-with-parent", "-i", &self.addr, "-p", "10809", "file", &file])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn nbdkit in the namespace");
        self.server = Some(child);
        let start = Instant::now();
        while TcpStream::connect_timeout(&format!("{}:10809", self.addr).parse().unwrap(), Duration::from_secs(1)).is_err() {
            assert!(start.elapsed() < HANG_GUARD, "nbdkit in {} did not start listening: hung", self.ns);
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The host dies: its server is gone (its disk, a file, keeps what reached it).
    fn kill(&mut self) {
        if let Some(mut c) = self.server.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The link to the host goes down (no reset reaches anyone) or comes back.
    fn link(&self, up: bool) {
        assert!(ip(&["link", "set", &self.veth, if up { "up" } else { "down" }]), "ip link set {}", self.veth);
    }

    fn uri(&self) -> NbdUri {
        NbdUri::parse(&format!("nbd://{}:10809/", self.addr)).unwrap()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.kill();
        ip(&["link", "del", &self.veth]);
        ip(&["netns", "del", &self.ns]);
    }
}

fn members(hosts: &[Host], options: ClientOptions) -> Vec<Arc<dyn Member>> {
    hosts.iter().map(|h| Arc::new(NbdMember::connect(&h.uri(), true, options).expect("connect")) as Arc<dyn Member>).collect()
}

fn write_random(array: &Array, model: &mut [u8], seed: u64) {
    let mut rng = Rng::new(seed);
    for _ in 0..40 {
        let len = 1 + rng.below(300_000) as usize;
        let off = rng.below((model.len() - len) as u64) as usize;
        let data = rng.bytes(len);
        array.write(off as u64, &data).expect("write");
        model[off..off + len].copy_from_slice(&data);
    }
    array.flush().expect("flush");
}

fn read_back(array: &Array, model: &[u8], what: &str) {
    let mut got = vec![0u8; model.len()];
    array.read(0, &mut got).unwrap_or_else(|e| panic!("{what}: read: {e}"));
    assert!(got == model, "{what}: the array does not read back what was written");
}

fn states(array: &Array) -> Vec<DeviceState> {
    array.devices().into_iter().map(|d| d.state).collect()
}

#[test]
fn an_array_across_three_hosts_rides_out_a_host_restart_and_a_network_cut() {
    if !netns_available("netns: host restart and network cut") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut hosts: Vec<Host> = (0..3).map(|i| Host::new(dir.path(), i)).collect();
    // Patient members: a restart or a cut shorter than the hang guard is ridden out.
    let options = ClientOptions { connections: 2, failfast: HANG_GUARD, reply_timeout: HANG_GUARD };
    let m = members(&hosts, options);
    common::create_on(Level::Raid5, &m);
    let (array, _) = Array::assemble(m, &ArrayOptions { writable: true, ..Default::default() }).expect("assemble");
    let mut model = vec![0u8; array.size_bytes() as usize];
    array.read(0, &mut model).expect("read");
    write_random(&array, &mut model, 1);

    // Host 1 dies and comes back: everything it acknowledged was flushed, so its member
    // reconnects and nothing is failed.
    hosts[1].kill();
    hosts[1].start();
    read_back(&array, &model, "after host 1 restarted");
    write_random(&array, &mut model, 2);
    assert!(states(&array).iter().all(|s| matches!(s, DeviceState::InSync(_))), "{:?}", array.devices());

    // Host 2's link goes down while a reader runs, and comes back: TCP carries on.
    hosts[2].link(false);
    std::thread::scope(|s| {
        let reader = s.spawn(|| read_back(&array, &model, "across the network cut"));
        hosts[2].link(true);
        reader.join().expect("reader");
    });
    write_random(&array, &mut model, 3);
    read_back(&array, &model, "after the cut");
    assert!(states(&array).iter().all(|s| matches!(s, DeviceState::InSync(_))), "{:?}", array.devices());
    array.close().expect("close");
}

#[test]
fn a_host_cut_off_past_failfast_is_failed_and_the_array_serves_degraded() {
    if !netns_available("netns: host cut off for good") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let hosts: Vec<Host> = (0..3).map(|i| Host::new(dir.path(), i)).collect();
    let options = ClientOptions { connections: 1, failfast: Duration::from_secs(2), reply_timeout: Duration::from_secs(1) };
    let m = members(&hosts, options);
    common::create_on(Level::Raid5, &m);
    let (array, _) = Array::assemble(m, &ArrayOptions { writable: true, ..Default::default() }).expect("assemble");
    let mut model = vec![0u8; array.size_bytes() as usize];
    array.read(0, &mut model).expect("read");
    write_random(&array, &mut model, 4);

    hosts[0].link(false);
    // Reads go on: host 0's member times out, is failed, and its data is rebuilt.
    read_back(&array, &model, "with host 0 unreachable");
    let d0 = &array.devices()[0];
    assert_eq!(d0.state, DeviceState::Faulty, "{d0:?}");
    write_random(&array, &mut model, 5);
    read_back(&array, &model, "degraded");
    hosts[0].link(true);
}
