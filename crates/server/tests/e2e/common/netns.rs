//! A user and network namespace of a test's own (`unshare -rn`), where multicast can be
//! sent and received without anything leaving the test: UDP ingest joins groups in
//! it, UDP output sends to them.

use super::{tools_present, wait_for, Kill};
use std::process::{Command, Stdio};
use std::time::Duration;

/// A user and network namespace of the test's own, held by `unshare -rn sleep`: only a
/// loopback, with an address of its own (so multicast has a source address that a
/// source-specific join can name) and multicast routed on it. Nothing in it reaches
/// outside.
pub struct Netns {
    holder: Kill,
}

/// The loopback's own address in the namespace: multicast goes out from it.
pub const NS_SOURCE: &str = "10.99.0.1";

impl Netns {
    /// The namespace, set up; `None` (the test skips) where namespaces are impossible
    /// and `SLUICE_REQUIRE_TOOLS` is not set.
    pub fn new() -> Option<Netns> {
        let checks: &[&[&str]] = &[
            &["unshare", "-rn", "true"],
            &["nsenter", "--version"],
            &["ip", "-V"],
        ];
        if !tools_present(
            "user and network namespaces (unshare -rn, nsenter, ip)",
            false,
            checks,
        ) {
            return None;
        }
        let holder = Kill(
            Command::new("unshare")
                .args(["-rn", "sleep", "600"])
                .stdin(Stdio::null())
                .spawn()
                .expect("unshare"),
        );
        let ns = Netns { holder };
        let ours = std::fs::read_link("/proc/self/ns/net").expect("own netns");
        let theirs = format!("/proc/{}/ns/net", ns.holder.0.id());
        let made = wait_for(Duration::from_secs(15), || {
            std::fs::read_link(&theirs).is_ok_and(|l| l != ours)
        });
        assert!(made, "the namespace: never made");
        for args in [
            &["link", "set", "lo", "up"][..],
            &["link", "set", "lo", "multicast", "on"],
            &["addr", "add", &format!("{NS_SOURCE}/32"), "dev", "lo"],
            &["route", "add", "224.0.0.0/4", "dev", "lo", "src", NS_SOURCE],
        ] {
            let status = ns.command("ip").args(args).status().expect("ip");
            assert!(status.success(), "ip {args:?} in the namespace");
        }
        Some(ns)
    }

    /// What runs a program inside the namespace.
    pub fn prefix(&self) -> Vec<String> {
        ["nsenter", "-t", &self.holder.0.id().to_string()]
            .into_iter()
            .map(String::from)
            .chain(["-U", "-n", "--preserve-credentials"].map(String::from))
            .collect()
    }

    /// `program` inside the namespace.
    pub fn command(&self, program: &str) -> Command {
        let prefix = self.prefix();
        let mut c = Command::new(&prefix[0]);
        c.args(&prefix[1..]).arg(program);
        c
    }

    /// An HTTP GET from inside the namespace: status and body.
    pub fn get(&self, url: &str) -> (u16, Vec<u8>) {
        let out = self
            .command("curl")
            .args(["-s", "-m", "10", "-w", "\n%{http_code}", url])
            .output()
            .expect("curl");
        let text = out.stdout;
        let cut = text.iter().rposition(|&b| b == b'\n').unwrap_or(0);
        let status = String::from_utf8_lossy(&text[cut..])
            .trim()
            .parse()
            .unwrap_or(0);
        (status, text[..cut].to_vec())
    }

    /// ffprobe inside the namespace: its stream lines and how many video packets it
    /// read of the first 120 packets.
    pub fn probe(&self, url: &str) -> (String, usize) {
        let out = self
            .command("ffprobe")
            .args(["-v", "error", "-rw_timeout", "10000000"])
            .args(["-read_intervals", "%+#120"])
            .args([
                "-show_entries",
                "stream=codec_name,width,height:packet=codec_type",
            ])
            .args(["-of", "csv=p=0", url])
            .output()
            .expect("ffprobe");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        // A packet line is `video` and, where it has one, its time.
        let video = text
            .lines()
            .filter(|l| *l == "video" || l.starts_with("video,"))
            .count();
        (text, video)
    }
}
