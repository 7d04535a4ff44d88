#!/usr/bin/env python3
"""Tables (Markdown), summaries (JSON) and plots (PNG) for the bench/*.sh scenarios.

Reads sluice-bench's JSON reports (and the `JSON.client` files with the client's own
`user sys wall` seconds) from the scenario's output folder. Plots need matplotlib
(`pip install matplotlib`); without it the tables are still written.

Usage: report.py SUBCOMMAND OUTDIR ... (see the scenario scripts).
"""
import datetime
import glob
import json
import os
import platform
import re
import sys

KNEE_CORES = 0.9  # a server core this busy is saturated


def load(path):
    with open(path) as f:
        return json.load(f)


def client_cpu(path):
    """(cpu seconds, cores) of the client process, or (None, None)."""
    try:
        u, s, w = (float(x) for x in open(path + ".client").read().split()[-3:])
        return u + s, (u + s) / w if w else None
    except (OSError, ValueError):
        return None, None


def machine_cores(path):
    """Cores busy on the whole machine (every process) during the run, from /proc/stat."""
    try:
        a = [int(x) for x in open(path + ".stat0").read().split()[1:]]
        b = [int(x) for x in open(path + ".stat1").read().split()[1:]]
    except (OSError, ValueError):
        return None
    d = [y - x for x, y in zip(a, b)]
    total = sum(d[:8])
    return (total - d[3] - d[4]) / total * os.cpu_count() if total else None


def fmt(x, f="{:.2f}"):
    return "-" if x is None else f.format(x)


def header(title, extra=""):
    return [
        f"# {title}",
        "",
        f"{datetime.datetime.now():%Y-%m-%d %H:%M}, {platform.node()}, {os.cpu_count()} cores, loopback; "
        f"server pinned to core 0, clients to core 1{extra}.",
        "",
    ]


def write(out, name, lines, summary=None):
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, name + ".md"), "w") as f:
        f.write(text)
    if summary is not None:
        with open(os.path.join(out, name + ".summary.json"), "w") as f:
            json.dump(summary, f, indent=1)
    print(text)


def plt_or_none():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        return plt
    except ImportError:
        print("(matplotlib not installed: no plot; pip install matplotlib)", file=sys.stderr)
        return None


def save(plt, fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    print(f"plot: {path}")


PROTO_LABEL = {
    "rtsp": "rtsp (tcp)",
    "rtsp-udp": "rtsp (udp)",
    "rtsp-pp": "rtsp (tcp, per packet)",
    "rtsp-udp-pp": "rtsp (udp, per packet)",
    "flv-tls": "flv (https)",
    "ws-flv-tls": "ws-flv (wss)",
    "hls-tls": "hls (https)",
    "ll-hls-tls": "ll-hls (https)",
}


def rtp_lost(r):
    """RTP packets lost and players that lost any, for RTSP runs; '-' otherwise."""
    t = r.get("rtp")
    return "-" if t is None else f"{t['lost']} ({t['players_with_loss']})"


def fk(r):
    f = r.get("first_keyframe_ms") or {}
    return f"{f.get('p50', 0):.1f}/{f.get('p99', 0):.1f}"


def past_knee(r, path):
    """Whether this step is at or past the knee, and why."""
    s = r["server"]
    _, ccores = client_cpu(path)
    why = []
    if r["failed"]:
        why.append(f"{r['failed']} failed")
    if r["stalls"]:
        why.append(f"{r['stalls']} stalls")
    if s["cpu_cores"] >= KNEE_CORES:
        why.append(f"server core {s['cpu_cores']:.2f} busy")
    if ccores is not None and ccores >= KNEE_CORES:
        why.append(f"client core {ccores:.2f} busy")
    return why


# ---------------------------------------------------------------- (b) players per core
def cmd_past_knee(path):
    why = past_knee(load(path), path)
    if why:
        print(f"past the knee: {', '.join(why)}")
    sys.exit(0 if why else 1)


def cmd_players_per_core(out, proto, merge, *servers):
    lines = header(f"Players per core: {proto} players on one worker, merge window {merge} ms")
    lines += [
        "| server | players | ok | Mbit/s | server cores | CPU-s/GB | client cores | machine busy cores | stalls | max lag ms | first keyframe p50/p99 ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    curves, summary = {}, {}
    for srv in servers:
        files = glob.glob(os.path.join(out, f"ppc-{srv}-{proto}-*.json"))
        steps = sorted((int(re.search(r"-(\d+)\.json$", f).group(1)), f) for f in files)
        pts, knee, last_ok = [], None, None
        for n, f in steps:
            r = load(f)
            s = r["server"]
            _, cc = client_cpu(f)
            pts.append((n, s["cpu_cores"], r["mbit_s"]))
            why = past_knee(r, f)
            if why and knee is None:
                knee = (n, why)
            elif not why and knee is None:
                last_ok = n
            lines.append(
                f"| {srv} | {n} | {r['ok']} | {r['mbit_s']:.0f} | {s['cpu_cores']:.3f} | {s['cpu_s_per_gb']:.3f} | "
                f"{fmt(cc)} | {fmt(machine_cores(f))} | {r['stalls']} | {r['max_lag_ms']:.0f} | {fk(r)} |"
            )
        if not pts:
            continue
        curves[srv] = pts
        # Players per core by a least-squares line through the points before the knee.
        good = [p for p in pts if last_ok is None or p[0] <= last_ok] or pts
        if len(good) >= 2:
            mx = sum(p[0] for p in good) / len(good)
            my = sum(p[1] for p in good) / len(good)
            sxx = sum((p[0] - mx) ** 2 for p in good)
            slope = sum((p[0] - mx) * (p[1] - my) for p in good) / sxx if sxx else 0
            per_core = (1 - (my - slope * mx)) / slope if slope > 0 else None
        else:
            slope, per_core = None, None
        summary[srv] = {
            "last_ok_players": last_ok,
            "knee_players": knee[0] if knee else None,
            "knee_why": knee[1] if knee else None,
            "cores_per_1000_players": slope * 1000 if slope else None,
            "players_per_core_extrapolated": per_core,
        }
    lines.append("")
    for srv, k in summary.items():
        if k["knee_players"]:
            knee_s = f"knee at {k['knee_players']} players ({', '.join(k['knee_why'])}); last clean step {k['last_ok_players']}"
        else:
            knee_s = f"no knee up to {k['last_ok_players']} players (add larger steps with -s)"
        per = k["players_per_core_extrapolated"]
        slope = k["cores_per_1000_players"]
        lines.append(
            f"- **{srv}**: {knee_s}; {slope:.3f} cores per 1000 players, so about {per:.0f} players per core by the line."
            if per
            else f"- **{srv}**: {knee_s}."
        )
    write(out, "players-per-core", lines, summary)
    plt = plt_or_none()
    if plt and curves:
        fig, ax = plt.subplots(figsize=(6.4, 4))
        for srv, pts in curves.items():
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=srv)
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set_xlabel(f"{proto} players (2 Mbit/s each)")
        ax.set_ylabel("server CPU (cores)")
        ax.set_title(f"Server CPU vs players, one worker, {merge} ms merge")
        ax.set_ylim(0, 1.1)
        ax.grid(alpha=0.3)
        ax.legend()
        save(plt, fig, os.path.join(out, "players-per-core.png"))


# ---------------------------------------------------------------- (c) scaling
def thread_cpu(path):
    """Per-thread CPU seconds of the server over the play run, from the snapshots."""
    try:
        a = dict(l.split()[:2] for l in open(path + ".threads0"))
        b = dict(l.split()[:2] for l in open(path + ".threads1"))
    except OSError:
        return {}
    return {t: (int(b[t]) - int(a.get(t, 0))) / os.sysconf("SC_CLK_TCK") for t in b}


def cmd_scaling(out, proto, *loads):
    lines = header(
        f"Scaling: the same {proto} load on 1 and 2 workers",
        "; with 2 workers the server runs on cores 0-1 and so do the clients"
        if (os.cpu_count() or 2) < 4
        else f"; here: 1 worker on core 0, 2 workers on cores 0-1, clients on cores 2-{os.cpu_count() - 1} in both",
    )
    lines += [
        "| players | workers | server cores | ok | Mbit/s | CPU-s/GB | Gbit per CPU-s | client cores | stalls | busiest threads (CPU-s) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    summary = {}
    for n in loads:
        row = {}
        for w in (1, 2):
            f = os.path.join(out, f"scaling-w{w}-{proto}-{n}.json")
            if not os.path.exists(f):
                continue
            r = load(f)
            s = r["server"]
            _, cc = client_cpu(f)
            eff = r["mbit_s"] / 1000 / s["cpu_cores"] if s["cpu_cores"] else 0
            th = sorted(thread_cpu(f).values(), reverse=True)[:3]
            row[w] = {"mbit_s": r["mbit_s"], "cpu_cores": s["cpu_cores"], "gbit_per_cpu_s": eff,
                      "stalls": r["stalls"], "ok": r["ok"], "threads_cpu_s": th}
            lines.append(
                f"| {n} | {w} | {'0' if w == 1 else '0-1'} | {r['ok']} | {r['mbit_s']:.0f} | {s['cpu_s_per_gb']:.3f} | {eff:.2f} | "
                f"{'-' if cc is None else f'{cc:.2f}'} | {r['stalls']} | {', '.join(f'{t:.2f}' for t in th)} |"
            )
        if 1 in row and 2 in row:
            row["throughput_ratio"] = row[2]["mbit_s"] / row[1]["mbit_s"]
            row["efficiency_ratio"] = row[2]["gbit_per_cpu_s"] / row[1]["gbit_per_cpu_s"]
        summary[n] = row
    lines.append("")
    for n, row in summary.items():
        if "throughput_ratio" in row:
            lines.append(
                f"- {n} players: 2 workers deliver {row['throughput_ratio']:.2f}x the Mbit/s of 1 worker, "
                f"at {row['efficiency_ratio']:.2f}x the throughput per CPU-second."
            )
    write(out, "scaling", lines, summary)


# ---------------------------------------------------------------- (d) memory
def cmd_memory(out, n, *runs):
    """runs: SERVER:PROTO for the idle part; the slow part is found by file name."""
    lines = header(f"Memory: RSS per idle player ({n} players joining a stream whose ring is full)")
    lines += [
        "| server | protocol | ok | RSS before MiB | RSS with players MiB | KiB per player | target |",
        "|---|---|---|---|---|---|---|",
    ]
    target = {"rtmp": 12, "flv": 32, "ws-flv": 32}
    summary = {"idle": {}, "slow": {}}
    for run in runs:
        srv, proto = run.split(":")
        f = os.path.join(out, f"mem-idle-{srv}-{proto}.json")
        if not os.path.exists(f):
            continue
        r = load(f)
        s = r["server"]
        t = target.get(proto) if srv == "sluice" else None
        summary["idle"][run] = s["rss_per_player_kib"]
        lines.append(
            f"| {srv} | {proto} | {r['ok']}/{r['count']} | {s['rss_before_kib'] / 1024:.1f} | {s['rss_end_kib'] / 1024:.1f} | "
            f"{s['rss_per_player_kib']:.1f} | {'' if t is None else ('≤ %d: %s' % (t, 'holds' if s['rss_per_player_kib'] <= t else 'MISSED'))} |"
        )
    slow = sorted(glob.glob(os.path.join(out, "mem-slow-*-0.json")))
    series = {}
    if slow:
        lines += [
            "",
            f"RSS over time, {n} players, with 30% of them reading at a tenth of the bitrate vs none "
            "(server RSS only: kernel socket buffers are not in it; see the TCP memory column).",
            "",
            "| server | protocol | slow players | ok | Mbit/s | stalls (fast players) | RSS window start→end MiB | RSS max MiB | TCP mem max MiB (all sockets) | max / no-slow max | drift, last half |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
    for f0 in slow:
        key = re.search(r"mem-slow-(.+)-0\.json$", f0).group(1)
        base_max = None
        for frac in ("0", "0.3"):
            f = os.path.join(out, f"mem-slow-{key}-{frac}.json")
            if not os.path.exists(f):
                continue
            r = load(f)
            s = r["server"]
            samples = s["samples"]
            series[(key, frac)] = [(x["t_s"], x["rss_kib"] / 1024) for x in samples]
            fast_stalls = sum(p["stalls"] for p in r.get("players", []) if not p["slow"])
            tcp = tcp_mem_max(f)
            mx = s["rss_max_kib"]
            base_max = base_max or mx
            # Drift over the second half of the window (the first half includes settling).
            t0, t1 = samples[0]["t_s"], samples[-1]["t_s"]
            mid = min(samples, key=lambda x: abs(x["t_s"] - (t0 + t1) / 2 - (t1 - t0) / 4))
            drift = (s["rss_end_kib"] - mid["rss_kib"]) / 1024
            summary["slow"][f"{key}-{frac}"] = {"rss_max_kib": mx, "ratio": mx / base_max, "drift_mib": drift,
                                                "ok": r["ok"], "stalls_fast": fast_stalls, "tcp_mem_max_mib": tcp}
            srv, proto = key.split("-", 1)
            lines.append(
                f"| {srv} | {proto} | {r['slow_players']} | {r['ok']}/{r['count']} | {r['mbit_s']:.0f} | {fast_stalls} | "
                f"{s['rss_start_kib'] / 1024:.1f}→{s['rss_end_kib'] / 1024:.1f} | {mx / 1024:.1f} | "
                f"{'-' if tcp is None else f'{tcp:.0f}'} | {mx / base_max:.2f} | {drift:+.1f} MiB |"
            )
    write(out, "memory", lines, summary)
    plt = plt_or_none()
    if plt and series:
        fig, ax = plt.subplots(figsize=(6.4, 4))
        for (key, frac), pts in sorted(series.items()):
            ax.plot([p[0] for p in pts], [p[1] for p in pts],
                    label=f"{key}, {'30% slow' if frac != '0' else 'no slow'}")
        ax.set_xlabel("seconds since the players started")
        ax.set_ylabel("server RSS (MiB)")
        ax.set_title(f"Server RSS over time, {n} players")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend()
        save(plt, fig, os.path.join(out, "memory-over-time.png"))


def tcp_mem_max(path):
    """Largest TCP memory (MiB, all sockets of the machine) from a sockstat log."""
    try:
        page = os.sysconf("SC_PAGE_SIZE")
        vals = [int(m.group(1)) for m in re.finditer(r"TCP:.* mem (\d+)", open(path + ".sockstat").read())]
        return max(vals) * page / 2**20 if vals else None
    except OSError:
        return None


# ---------------------------------------------------------------- (e) publishers
def cmd_publishers(out, clip_kbit, *servers):
    """SERVERS are labels: `sluice`, `nginx` (RTMP), `sluice-rtsp`, `sluice-rtsp-udp`."""
    clip_kbit = float(clip_kbit)
    lines = header(f"Publishers: N publishers of a {clip_kbit:.0f} kbit/s clip on one worker")
    lines += [
        "RTMP unless the server is marked `-rtsp` (ANNOUNCE/RECORD, RTP interleaved on TCP) or "
        "`-rtsp-udp` (RTP over UDP); RTSP bytes are RTP packets with their headers.",
        "",
        "| server | publishers | ok | ingest Mbit/s | of expected | server cores | CPU ms/s per publisher | CPU-s/GB | RSS/publisher KiB | client cores | machine busy cores |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    summary, curves = {}, {}
    for srv in servers:
        # Exactly pub-SRV-N.json: pub-sluice-* must not take pub-sluice-rtsp-N.json.
        mine = re.compile(rf"pub-{re.escape(srv)}-(\d+)\.json")
        steps = sorted(
            (int(m.group(1)), os.path.join(out, m.group(0)))
            for m in (mine.fullmatch(os.path.basename(f)) for f in glob.glob(os.path.join(out, "pub-*.json")))
            if m
        )
        rows = []
        for n, f in steps:
            r = load(f)
            s = r["server"]
            _, cc = client_cpu(f)
            frac = r["mbit_s"] * 1000 / (n * clip_kbit)
            per = s["cpu_cores"] / n * 1000
            rows.append({"n": n, "ok": r["ok"], "mbit_s": r["mbit_s"], "of_expected": frac,
                         "cpu_cores": s["cpu_cores"], "cpu_ms_per_s_per_pub": per, "client_cores": cc,
                         "rss_per_publisher_kib": s["rss_per_player_kib"]})
            lines.append(
                f"| {srv} | {n} | {r['ok']} | {r['mbit_s']:.0f} | {frac:.2f} | {s['cpu_cores']:.3f} | {per:.3f} | "
                f"{s['cpu_s_per_gb'] or 0:.2f} | {s['rss_per_player_kib']:.0f} | {fmt(cc)} | {fmt(machine_cores(f))} |"
            )
        summary[srv] = rows
        curves[srv] = [(x["n"], x["cpu_cores"]) for x in rows]
    lines += [
        "",
        "RSS/publisher: the server's RSS at the end of the run less before it, per publisher, after a ramp and "
        "the run's seconds of media (a server that keeps a time window of each stream is still filling it).",
    ]
    write(out, "publishers", lines, summary)
    plt = plt_or_none()
    if plt and curves:
        fig, ax = plt.subplots(figsize=(6.4, 4))
        for srv, pts in curves.items():
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=srv)
        ax.set_xlabel(f"publishers ({clip_kbit:.0f} kbit/s each)")
        ax.set_ylabel("server CPU (cores)")
        ax.set_title("Server CPU vs publishers, one worker")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend()
        save(plt, fig, os.path.join(out, "publishers.png"))


def cmd_stop_publishers(path, clip_kbit, n):
    """Exit 0 when this publisher step is past the knee."""
    r = load(path)
    frac = r["mbit_s"] * 1000 / (int(n) * float(clip_kbit))
    _, cc = client_cpu(path)
    why = []
    if r["failed"]:
        why.append(f"{r['failed']} failed")
    if frac < 0.95:
        why.append(f"ingest {frac:.2f} of expected")
    if r["server"]["cpu_cores"] >= KNEE_CORES:
        why.append("server core saturated")
    if cc is not None and cc >= KNEE_CORES:
        why.append("client core saturated")
    if why:
        print("past the knee: " + ", ".join(why))
    sys.exit(0 if why else 1)


# ---------------------------------------------------------------- (f) latency
def cmd_latency(out, merge, *runs):
    lines = header(f"Latency: time to first keyframe, merge window {merge} ms")
    lines += [
        "Players join one at a time (idle: no other player) or while 1000 players are already playing (loaded).",
        "",
        "| server | protocol | load | joined | first keyframe p50 ms | p99 | max | connect p50 ms | lag over min p50/max ms (background) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    summary = {}
    for run in runs:
        srv, proto = run.split(":")
        for load_name in ("idle", "loaded"):
            f = os.path.join(out, f"lat-{srv}-{proto}-{load_name}.json")
            if not os.path.exists(f):
                continue
            r = load(f)
            k = r["first_keyframe_ms"]
            bg = ""
            fb = os.path.join(out, f"lat-{srv}-{proto}-background.json")
            if load_name == "loaded" and os.path.exists(fb):
                b = load(fb)
                lags = sorted(p["max_lag_ms"] for p in b["players"] if p["error_kind"] is None)
                if lags:
                    bg = f"{lags[len(lags) // 2]:.0f}/{lags[-1]:.0f}"
            summary[f"{run}:{load_name}"] = k
            lines.append(
                f"| {srv} | {proto} | {load_name} | {r['ok']} | {k['p50']:.1f} | {k['p99']:.1f} | {k['max']:.1f} | "
                f"{r['connect_ms']['p50']:.1f} | {bg} |"
            )
    lines += [
        "",
        "Publish-to-play delay: the bench publisher stamps its wall-clock send time into each H.264 frame "
        "(an SEI NAL unit); players compare it with their clock on arrival (frames stamped after the player "
        "started, so a GOP cache's burst is left out). One player alone, and the N background players.",
        "",
        "| server | protocol | 1 player p50 ms | p99 | max | N players p50 ms | p99 | max |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        srv, proto = run.split(":")
        cells = []
        for name in ("one", "background"):
            f = os.path.join(out, f"lat-{srv}-{proto}-{name}.json")
            l = load(f).get("publish_latency_ms") if os.path.exists(f) else None
            cells += [f"{l['p50']:.1f}", f"{l['p99']:.1f}", f"{l['max']:.1f}"] if l else ["-", "-", "-"]
            summary[f"{run}:publish_latency:{name}"] = l
        lines.append(f"| {srv} | {proto} | " + " | ".join(cells) + " |")
    probe = os.path.join(out, "lat-probe.json")
    if os.path.exists(probe):
        p = load(probe)
        lines += [
            "",
            "Publish-to-play delay through Sluice (HTTP-FLV, `bench/flv_probe.py`): frame arrival at one extra player "
            "against when the realtime publisher was due to send that frame (publisher start + tag timestamp; "
            f"the start is taken when the publisher's TCP connection was accepted, ± a few ms).",
            "",
            "| load | frames | delay p50 ms | p90 | p99 | max | min |",
            "|---|---|---|---|---|---|---|",
        ]
        for k, v in p.items():
            lines.append(f"| {k} | {v['n']} | {v['p50']:.0f} | {v['p90']:.0f} | {v['p99']:.0f} | {v['max']:.0f} | {v['min']:.0f} |")
        summary["probe"] = p
    write(out, "latency", lines, summary)


# ---------------------------------------------------------------- (a) fan-out with peers
def cmd_fanout(out, n, merge, *runs):
    lines = header(f"Fan-out cost, {n} players, merge window {merge} ms", "")
    rows, spread = [], {}
    for run in runs:
        srv, proto = run.split(":")
        f = os.path.join(out, f"{srv}-{proto}.json")
        if os.path.exists(f):
            reps = [load(x) for x in [f] + sorted(glob.glob(f[: -len(".json")] + ".r[0-9]*.json"))]
            reps = [r for r in reps if r["server"]["cpu_s_per_gb"] is not None] or reps[:1]
            reps.sort(key=lambda r: r["server"]["cpu_s_per_gb"] or 0)
            # The median repetition stands for the row (the lower middle one of an even count).
            rows.append((srv, proto, reps[(len(reps) - 1) // 2]))
            if len(reps) > 1:
                spread[run] = (len(reps), reps[0]["server"]["cpu_s_per_gb"], reps[-1]["server"]["cpu_s_per_gb"])
    floors = {s: r["server"]["cpu_s_per_gb"] for s, _, r in rows if s in ("floor", "srtfloor")}
    # SRT rows against the SRT floor (bench/floor/srtfloor.c), the rest against the HTTP-FLV floor.
    floor_of = lambda p: floors.get("srtfloor" if p == "srt" else "floor")
    # nginx-rtmp's row of the same family: RTMP for rtmp, its HLS (TS files) for hls and
    # ll-hls, the same over HTTPS for hls-tls and ll-hls-tls.
    family = lambda p: {"ll-hls": "hls", "ll-hls-tls": "hls-tls"}.get(p, p)
    ng = {p: r["server"]["cpu_s_per_gb"] for s, p, r in rows if s == "nginx"}
    lines += [
        "| server | protocol | players ok | Mbit/s | CPU-s/GB | × floor | × nginx-rtmp | RSS/player KiB | first keyframe p50/p99 ms | stalls | RTP lost (players) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    summary = {}
    for srv, proto, r in rows:
        s = r["server"]
        c = s["cpu_s_per_gb"]
        floor = floor_of(proto)
        k = spread.get(f"{srv}:{proto}")
        summary[f"{srv}:{proto}"] = {"cpu_s_per_gb": c, "reps": k[0] if k else 1, "min": k[1] if k else c,
                                     "max": k[2] if k else c, "x_floor": c / floor if floor and c else None}
        cell = f"{c:.3f}" + (f" ({k[1]:.3f}-{k[2]:.3f})" if k else "")
        lines.append(
            f"| {srv} | {PROTO_LABEL.get(proto, proto)} | {r['ok']}/{r['count']} | {r['mbit_s']:.0f} | {cell} | "
            f"{c / floor if floor else float('nan'):.2f} | {c / ng[family(proto)] if ng.get(family(proto)) else float('nan'):.2f} | "
            f"{s['rss_per_player_kib']:.1f} | {fk(r)} | {r['stalls']} | {rtp_lost(r)} |"
        )
    lines += [
        "",
        "× floor: against the floor's row (bench/floor/floor.c, HTTP-FLV), SRT rows against the SRT floor's "
        "(bench/floor/srtfloor.c) when it ran (-x srtfloor). "
        "× nginx-rtmp: against nginx-rtmp's row of the same family (RTMP for rtmp; its HLS, TS files served "
        "with sendfile, for hls and ll-hls; the same files over HTTPS, read and encrypted by OpenSSL, for the (https) "
        "rows of hls and ll-hls). (https), (wss): HTTP/1.1 over TLS 1.3 (sluice-bench --insecure, one rustls "
        "client with aws-lc-rs; the server's certificate is ECDSA P-256); Mbit/s counts plaintext. HLS first keyframe: the first segment (ll-hls: part) received in "
        "full; HLS players start three segments (ll-hls: the last independent part) back from the live edge.",
        "RTSP: RTP interleaved on the RTSP connection (TCP) or over UDP to a port pair per track; Mbit/s counts "
        "the `$` headers over TCP and RTP+RTCP datagrams over UDP. RTP lost: sequence numbers never received "
        "(UDP loss, or the server skipping a lagging player to a keyframe).",
    ]
    if spread:
        n_reps = max(k[0] for k in spread.values())
        lines += [f"Each row ran {n_reps} times, interleaved with the other rows: CPU-s/GB is the median run's "
                  "(min-max in brackets), and the row's other columns are that run's."]
    write(out, "fanout", [re.sub(r"\| nan(?= \|)", "|", l) for l in lines], summary)


# ---------------------------------------------------------------- issue 3's targets, from one run
FRAME_MS = 40  # one frame of the 25 fps clip


def opt_load(path):
    return load(path) if os.path.exists(path) else None


def cmd_targets(out, merge):
    """Reads what bench/all.sh's scenarios wrote in OUT and says which targets hold."""
    merge = float(merge)
    rows = []  # (target, measured, verdict)

    def add(target, measured, ok):
        rows.append((target, measured, "n/a" if ok is None else ("holds" if ok else "**missed**")))

    fan = opt_load(os.path.join(out, "fanout.summary.json")) or {}
    cpu = lambda run: fan.get(run, {}).get("cpu_s_per_gb")
    reps = lambda run: "" if fan.get(run, {}).get("reps", 1) == 1 else f" (median of {fan[run]['reps']}, {fan[run]['min']:.3f}-{fan[run]['max']:.3f})"
    floor = cpu("floor:flv")
    for proto in ("rtmp", "flv", "rtsp"):
        c = cpu(f"sluice:{proto}")
        if c and floor:
            add(f"(a) fan-out {PROTO_LABEL.get(proto, proto)} ≤ 1.3x floor",
                f"{c:.3f}{reps(f'sluice:{proto}')} vs {floor:.3f}{reps('floor:flv')} CPU-s/GB = {c / floor:.2f}x", c / floor <= 1.3)
    for proto, what in (("rtmp", "RTMP cheaper than nginx-rtmp"), ("hls", "HLS ≤ nginx-rtmp's HLS (sendfile)")):
        c, n = cpu(f"sluice:{proto}"), cpu(f"nginx:{proto}")
        if c and n:
            add(f"(a) {what}", f"{c:.3f} vs {n:.3f} CPU-s/GB = {c / n:.2f}x", c < n if proto == "rtmp" else c <= n)
    ppc = opt_load(os.path.join(out, "players-per-core.summary.json")) or {}
    for srv, k in ppc.items():
        per = k.get("players_per_core_extrapolated")
        knee = f"knee at {k['knee_players']} ({', '.join(k['knee_why'])})" if k.get("knee_players") else f"no knee up to {k.get('last_ok_players')}"
        add(f"(b) players per core, {srv}", f"{knee}; ~{per:.0f} players/core by the line" if per else knee, None)
    sc = opt_load(os.path.join(out, "scaling.summary.json")) or {}
    for n, row in sc.items():
        if "throughput_ratio" in row:
            measurable = (os.cpu_count() or 2) >= 4
            add(f"(c) 2 workers ≥ 1.8x of 1 ({n} players)",
                f"{row['throughput_ratio']:.2f}x Mbit/s, {row['efficiency_ratio']:.2f}x per CPU-s"
                + ("" if measurable else "; 2 cores: clients share the server's cores, not measurable"),
                row["throughput_ratio"] >= 1.8 if measurable else None)
    mem = opt_load(os.path.join(out, "memory.summary.json")) or {"idle": {}, "slow": {}}
    for proto, most in (("rtmp", 12), ("flv", 32)):
        v = mem["idle"].get(f"sluice:{proto}")
        if v is not None:
            ng = mem["idle"].get("nginx:rtmp") if proto == "rtmp" else None
            add(f"(d) ≤ {most} KiB per idle {proto} player", f"{v:.1f} KiB" + (f" (nginx-rtmp {ng:.1f})" if ng else ""), v <= most)
    for key, v in mem["slow"].items():
        if key.endswith("-0.3"):
            add("(d) 30% slow players: RSS ≤ 1.2x, flat", f"{v['ratio']:.2f}x, {v['drift_mib']:+.1f} MiB over the last half, "
                f"{v['stalls_fast']} stalls of fast players", v["ratio"] <= 1.2 and abs(v["drift_mib"]) <= 0.05 * v["rss_max_kib"] / 1024 + 1)
    pub = opt_load(os.path.join(out, "publishers.summary.json")) or {}
    for srv, steps in pub.items():
        good = [x["n"] for x in steps if x["ok"] == x["n"] and x["of_expected"] >= 0.95]
        add(f"(e) concurrent publishers, {srv}", f"{max(good) if good else 0} at full rate (of {', '.join(str(x['n']) for x in steps)})", None)
    lat = opt_load(os.path.join(out, "latency.summary.json")) or {}
    bound = merge + FRAME_MS
    for key, v in sorted(lat.items()):
        m = re.fullmatch(r"sluice:([a-z-]+):publish_latency:(one|background)", key)
        if m and v and m.group(1) in ("rtmp", "flv", "ws-flv", "rtsp"):
            who = "1 player" if m.group(2) == "one" else "N players"
            add(f"(f) added latency ≤ merge + 1 frame ({bound:.0f} ms), {m.group(1)}, {who}",
                f"p50 {v['p50']:.0f}, p99 {v['p99']:.0f}, max {v['max']:.0f} ms", v["p99"] <= bound)
        m = re.fullmatch(r"sluice:([a-z-]+):loaded", key)
        if m and v:
            add(f"(f) first frame ≤ 50 ms on a loaded server, {m.group(1)}", f"p50 {v['p50']:.1f}, p99 {v['p99']:.1f} ms", v["p99"] <= 50)
    lines = header("Issue 3's targets, from one run of bench/all.sh")
    lines += ["| target | measured | verdict |", "|---|---|---|"]
    lines += [f"| {t} | {m} | {v} |" for t, m, v in rows]
    lines += ["", "Latency is judged on p99 (max in the cell); n/a: a figure without a target, or not measurable here."]
    write(out, "targets", lines, {t: {"measured": m, "verdict": v} for t, m, v in rows})


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {
        "past-knee": cmd_past_knee,
        "players-per-core": cmd_players_per_core,
        "scaling": cmd_scaling,
        "memory": cmd_memory,
        "publishers": cmd_publishers,
        "stop-publishers": cmd_stop_publishers,
        "latency": cmd_latency,
        "fanout": cmd_fanout,
        "targets": cmd_targets,
    }[cmd](*args)
