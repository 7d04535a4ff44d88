/*
 * srtfloor: the least a live SRT fan-out server can do, as a yardstick for the cost
 * of SRT players. It reads one MPEG-TS file into memory and plays it as an endless
 * live stream, paced by the file's PCRs, to every SRT caller that connects (any
 * stream id). Nothing is done per player but the sends and reading its ACKs:
 *
 *  - The stream is cut into 1316-byte payloads (seven TS packets), each due at the
 *    file's last PCR before it (plus the pass's length on every loop).
 *  - Every interval (-i, the merge window) each player gets all the payloads due that
 *    it has not had, each behind its own 16-byte SRT data header, the payloads never
 *    copied (iovecs into the file); a run of them as one UDP_SEGMENT (GSO) message,
 *    the messages of all players in sendmmsg calls (-G: one datagram per message).
 *  - With -C each player has its own socket connect()ed to it (bound to the same
 *    address and port, SO_REUSEPORT): sends skip the route lookup, and the kernel
 *    gives the player's datagrams to that socket.
 *  - Every datagram from players is read (recvmmsg) and dropped, except handshakes
 *    and shutdowns; with -A each full ACK is answered with an ACKACK, as an SRT
 *    sender does for the round-trip estimate, sent at the end of the receive batch.
 *  - The handshake is the HSv5 caller-listener one, without SYN cookie checks,
 *    encryption, retransmission or anything else: enough for libsrt-style callers
 *    (sluice-bench's players) to connect and receive.
 *
 * Build: gcc -O2 -Wall -Wextra -o srtfloor srtfloor.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif

#define TS 188
#define PAYLOAD (7 * TS)           /* 1316 */
#define HDR 16                     /* the SRT header */
#define DGRAM (HDR + PAYLOAD)      /* 1332 */
#define MAX_SEGS 48                /* 48 * 1332 < 65507 */
#define BATCH 1024                 /* messages per sendmmsg */
#define RBATCH 64                  /* datagrams per recvmmsg */
#define RBUF 2048
#define BEHIND 4096                /* payloads a player may lag before it skips to live */

/* ---- options ---- */

static const char *opt_file;
static const char *opt_addr = "0.0.0.0";
static int opt_port = 9000;
static int opt_interval_ms = 40;
static int opt_gso = 1;
static int opt_connected;
static int opt_ackack;
static int opt_seconds;
static int opt_stats_s = 5;

static void usage(FILE *to, const char *me)
{
    fprintf(to,
            "usage: %s -f FILE.ts [options]\n"
            "Plays FILE as a looped live MPEG-TS stream over SRT to every caller (any stream id).\n"
            "  -f FILE   the MPEG-TS file (read into memory once; paced by its PCRs)\n"
            "  -a ADDR   listen address (IPv4, default 0.0.0.0)\n"
            "  -p PORT   listen port (default 9000)\n"
            "  -i MS     send interval, the merge window: each player gets everything new\n"
            "            every MS milliseconds (default 40)\n"
            "  -G        no GSO: one datagram per message (still sendmmsg)\n"
            "  -C        a connected socket per player\n"
            "  -A        answer each full ACK with an ACKACK\n"
            "  -d SEC    exit after SEC seconds (default 0: run until killed)\n"
            "  -s SEC    print figures to stderr every SEC seconds (default 5; 0: never)\n"
            "  -h        this help\n",
            me);
}

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("srtfloor: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

static int number(const char *s, int min, int max, char flag)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < min || v > max)
        die("-%c wants a number from %d to %d, not \"%s\"", flag, min, max, s);
    return (int)v;
}

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3]; }

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* ---- the file: payloads and when each is due ---- */

static uint8_t *file_bytes;
static size_t npayloads;
static int64_t *due_us;  /* per payload, from the start of a pass */
static int64_t pass_us;  /* one pass through the file */

static void load(const char *path)
{
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        die("%s: %s", path, strerror(errno));
    size_t size = (size_t)st.st_size;
    file_bytes = malloc(size ? size : 1);
    if (!file_bytes)
        die("out of memory");
    for (size_t got = 0; got < size;) {
        ssize_t n = read(fd, file_bytes + got, size - got);
        if (n <= 0)
            die("%s: short read", path);
        got += (size_t)n;
    }
    close(fd);
    npayloads = size / PAYLOAD;
    if (npayloads == 0 || file_bytes[0] != 0x47)
        die("%s: not an MPEG-TS file", path);
    due_us = calloc(npayloads, sizeof *due_us);
    if (!due_us)
        die("out of memory");
    int64_t first = -1, last = 0, pcrs = 0, at = 0;
    for (size_t i = 0; i < npayloads * 7; i++) {
        const uint8_t *p = file_bytes + i * TS;
        if (i % 7 == 0)
            due_us[i / 7] = at;
        if (p[0] != 0x47)
            die("%s: lost TS sync at byte %zu", path, i * TS);
        /* An adaptation field with a PCR: its 33-bit base, 90 kHz. */
        if ((p[3] & 0x20) && p[4] >= 7 && (p[5] & 0x10)) {
            int64_t base = (int64_t)p[6] << 25 | p[7] << 17 | p[8] << 9 | p[9] << 1 | p[10] >> 7;
            if (first < 0)
                first = base;
            if (base >= last) {
                last = base;
                at = (base - first) * 100 / 9;
                pcrs++;
            }
        }
    }
    if (pcrs < 2)
        die("%s: fewer than two PCRs to pace by", path);
    /* The next pass starts one mean PCR gap after the last PCR. */
    pass_us = at + at / (pcrs - 1);
    fprintf(stderr, "srtfloor: %s: %zu payloads, %lld ms a pass, %.2f Mbit/s\n", path, npayloads,
            (long long)(pass_us / 1000), (double)npayloads * PAYLOAD * 8 / (double)pass_us);
}

/* Absolute payload n (counting over passes): its bytes and when it is due. */
static const uint8_t *payload(uint64_t n) { return file_bytes + (n % npayloads) * PAYLOAD; }
static int64_t due(uint64_t n) { return (int64_t)(n / npayloads) * pass_us + due_us[n % npayloads]; }

/* ---- players ---- */

struct player {
    struct sockaddr_in peer;
    uint32_t peer_id; /* the caller's socket id: our packets' destination */
    uint32_t id;      /* ours */
    uint32_t seq;     /* next sequence number */
    uint32_t msgno;
    uint64_t next;    /* next absolute payload */
    int64_t start_us;
    int fd;           /* -C: the connected socket; else -1 */
    int dead;         /* shut down: freed after the events at hand */
    uint8_t response[128];
    size_t response_len;
};

static struct player **players;
static size_t nplayers, cap_players;
/* Our socket ids are a slot number in the low bits (random above): a lookup is one read. */
#define SLOTS (1u << 17)
static struct player *slots[SLOTS];
static uint32_t next_slot = 1;
static struct player *graveyard[4096];
static size_t ngraves;
static int main_fd, epfd;
static uint64_t head; /* payloads due so far */
static int64_t epoch;

static struct {
    uint64_t bytes, datagrams, send_calls, send_fail, recv_calls, recvd, acks, naks, joined, left;
} stats;

static struct player *find(const struct sockaddr_in *from, uint32_t peer_id)
{
    for (size_t i = 0; i < nplayers; i++) {
        struct player *p = players[i];
        if (p->peer_id == peer_id && p->peer.sin_port == from->sin_port &&
            p->peer.sin_addr.s_addr == from->sin_addr.s_addr)
            return p;
    }
    return NULL;
}

static struct player *by_id(uint32_t id)
{
    struct player *p = slots[id % SLOTS];
    return p && p->id == id ? p : NULL;
}

/* Gone from the players; freed by bury() once no event at hand can point to it. */
static void drop_player(struct player *p)
{
    for (size_t i = 0; i < nplayers; i++)
        if (players[i] == p) {
            players[i] = players[--nplayers];
            break;
        }
    slots[p->id % SLOTS] = NULL;
    if (p->fd >= 0)
        close(p->fd);
    p->dead = 1;
    if (ngraves == sizeof graveyard / sizeof graveyard[0])
        die("too many players leaving at once");
    graveyard[ngraves++] = p;
    stats.left++;
}

static void bury(void)
{
    while (ngraves)
        free(graveyard[--ngraves]);
}

static int udp_socket(void)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        die("socket: %s", strerror(errno));
    int one = 1, big = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)opt_port)};
    if (inet_pton(AF_INET, opt_addr, &a.sin_addr) != 1)
        die("-a %s: not an IPv4 address", opt_addr);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0)
        die("bind %s:%d: %s", opt_addr, opt_port, strerror(errno));
    return fd;
}

static void send_to(int fd, const struct sockaddr_in *to, const void *buf, size_t len)
{
    stats.send_calls++;
    if (sendto(fd, buf, len, 0, (const struct sockaddr *)to, to ? sizeof *to : 0) < 0)
        stats.send_fail++;
}

/* A handshake control packet: 16-byte header, then the 48-byte CIF. */
static size_t handshake(uint8_t *out, uint32_t dest, uint32_t version, uint32_t enc_ext,
                        uint32_t isn, uint32_t type, uint32_t id, uint32_t cookie, const uint8_t *ip)
{
    memset(out, 0, 64);
    put32(out, 0x80000000u); /* control, type 0: handshake */
    put32(out + 12, dest);
    put32(out + 16, version);
    put32(out + 20, enc_ext);
    put32(out + 24, isn);
    put32(out + 28, 1500);
    put32(out + 32, 8192);
    put32(out + 36, type);
    put32(out + 40, id);
    put32(out + 44, cookie);
    memcpy(out + 48, ip, 16);
    return 64;
}

static void on_handshake(const uint8_t *d, size_t n, const struct sockaddr_in *from)
{
    if (n < 64)
        return;
    uint32_t type = be32(d + 36), caller = be32(d + 40), isn = be32(d + 24) & 0x7fffffffu;
    uint8_t out[128];
    if (type == 1) { /* induction: version 5, the SRT magic, a cookie */
        uint32_t cookie = (from->sin_addr.s_addr * 2654435761u) ^ from->sin_port;
        size_t len = handshake(out, caller, 5, 0x4A17, isn, 1, 0, cookie, d + 48);
        send_to(main_fd, from, out, len);
        return;
    }
    if (type != 0xffffffffu)
        return;
    struct player *p = find(from, caller);
    if (!p) {
        /* The caller's HSREQ latency word, echoed in our HSRSP. */
        uint32_t latency = (120u << 16) | 120u;
        for (size_t at = 64; at + 4 <= n;) {
            uint32_t ext = be32(d + at), words = ext & 0xffff;
            if ((ext >> 16) == 1 && words >= 3 && at + 16 <= n)
                latency = be32(d + at + 12);
            at += 4 + (size_t)words * 4;
        }
        p = calloc(1, sizeof *p);
        if (!p)
            die("out of memory");
        p->peer = *from;
        p->peer_id = caller;
        uint32_t slot = next_slot;
        for (uint32_t tries = 0; slots[slot]; tries++) {
            if (tries == SLOTS)
                die("more than %u players", SLOTS - 1);
            slot = slot % (SLOTS - 1) + 1;
        }
        next_slot = slot % (SLOTS - 1) + 1;
        p->id = ((uint32_t)rand() * SLOTS + slot) & 0x3fffffffu;
        slots[slot] = p;
        p->seq = isn;
        p->msgno = 1;
        p->next = head;
        p->start_us = now_us();
        p->fd = -1;
        size_t len = handshake(p->response, caller, 5, 1 /* HSREQ flag */, isn, 0xffffffffu, p->id, 0, d + 48);
        put32(p->response + len, 2u << 16 | 3); /* HSRSP, three words */
        put32(p->response + len + 4, 0x00010500u);
        put32(p->response + len + 8, 0x3f); /* TSBPD both ways, crypt, TLPKTDROP, NAKREPORT, REXMITFLG */
        put32(p->response + len + 12, latency);
        p->response_len = len + 16;
        if (opt_connected) {
            p->fd = udp_socket();
            if (connect(p->fd, (const struct sockaddr *)from, sizeof *from) != 0)
                die("connect: %s", strerror(errno));
            struct epoll_event ev = {.events = EPOLLIN, .data.ptr = p};
            if (epoll_ctl(epfd, EPOLL_CTL_ADD, p->fd, &ev) != 0)
                die("epoll_ctl: %s", strerror(errno));
        }
        if (nplayers == cap_players) {
            cap_players = cap_players ? cap_players * 2 : 1024;
            players = realloc(players, cap_players * sizeof *players);
            if (!players)
                die("out of memory");
        }
        players[nplayers++] = p;
        stats.joined++;
    }
    send_to(main_fd, from, p->response, p->response_len);
}

/* ACKACKs owed at the end of a receive batch. */
static struct mmsghdr ackack_msgs[RBATCH];
static struct iovec ackack_iov[RBATCH];
static uint8_t ackack_buf[RBATCH][20];
static struct sockaddr_in ackack_to[RBATCH];
static size_t nackacks;

static void flush_ackacks(int fd)
{
    if (!nackacks)
        return;
    stats.send_calls++;
    if (sendmmsg(fd, ackack_msgs, (unsigned)nackacks, 0) < 0)
        stats.send_fail++;
    nackacks = 0;
}

/* One datagram from a player (or a caller). */
static void on_datagram(const uint8_t *d, size_t n, const struct sockaddr_in *from, struct player *p)
{
    stats.recvd++;
    if (n < HDR || !(d[0] & 0x80))
        return; /* data from a player: nothing to do */
    uint32_t dest = be32(d + 12), ctype = (be32(d) >> 16) & 0x7fff;
    if (dest == 0 && ctype == 0) {
        on_handshake(d, n, from);
        return;
    }
    if (ctype == 2) {
        stats.acks++;
        /* A full ACK (more than the light ACK's one word) gets its ACKACK. */
        if (opt_ackack && n > HDR + 4) {
            if (!p)
                p = by_id(dest);
            if (!p || nackacks == RBATCH)
                return;
            size_t k = nackacks++;
            uint8_t *b = ackack_buf[k];
            memset(b, 0, sizeof ackack_buf[k]);
            put32(b, 0x80060000u);
            put32(b + 4, be32(d + 4));
            put32(b + 8, (uint32_t)(now_us() - p->start_us));
            put32(b + 12, p->peer_id);
            ackack_iov[k] = (struct iovec){b, 20};
            ackack_to[k] = p->peer;
            /* A player's own socket is connected: no address. */
            ackack_msgs[k].msg_hdr = (struct msghdr){
                .msg_name = p->fd >= 0 ? NULL : &ackack_to[k],
                .msg_namelen = p->fd >= 0 ? 0 : sizeof ackack_to[k],
                .msg_iov = &ackack_iov[k], .msg_iovlen = 1};
        }
    } else if (ctype == 3) {
        stats.naks++;
    } else if (ctype == 5) { /* shutdown */
        if (!p)
            p = by_id(dest);
        if (p && !p->dead)
            drop_player(p);
    }
}

/* Reads all that waits on fd (p: the player whose connected socket it is). */
static void drain(int fd, struct player *p)
{
    static uint8_t bufs[RBATCH][RBUF];
    static struct sockaddr_in from[RBATCH];
    static struct iovec iov[RBATCH];
    static struct mmsghdr msgs[RBATCH];
    for (;;) {
        for (int i = 0; i < RBATCH; i++) {
            iov[i] = (struct iovec){bufs[i], RBUF};
            msgs[i].msg_hdr = (struct msghdr){.msg_name = &from[i], .msg_namelen = sizeof from[i],
                                              .msg_iov = &iov[i], .msg_iovlen = 1};
        }
        stats.recv_calls++;
        int n = recvmmsg(fd, msgs, RBATCH, MSG_DONTWAIT, NULL);
        if (n <= 0)
            return;
        for (int i = 0; i < n; i++) {
            on_datagram(bufs[i], msgs[i].msg_len, &from[i], p);
            if (p && p->dead) {
                nackacks = 0;
                return; /* the player (and its socket) is gone */
            }
        }
        flush_ackacks(fd);
        if (n < RBATCH)
            return;
    }
}

/* ---- the sends ---- */

static struct mmsghdr msgs[BATCH];
static struct iovec iovs[BATCH * MAX_SEGS * 2];
static uint8_t hdrs[BATCH * MAX_SEGS][HDR];
static union {
    char buf[CMSG_SPACE(sizeof(uint16_t))];
    struct cmsghdr align;
} ctrl[BATCH];
static size_t nmsgs, niovs;

static void flush_sends(int fd)
{
    size_t at = 0;
    while (at < nmsgs) {
        stats.send_calls++;
        int n = sendmmsg(fd, msgs + at, (unsigned)(nmsgs - at), 0);
        if (n <= 0) { /* the socket is full: the rest is lost, as UDP may lose it */
            stats.send_fail += nmsgs - at;
            break;
        }
        at += (size_t)n;
    }
    nmsgs = niovs = 0;
}

/* Queues payloads [from, to) of player p as one message (GSO when more than one). */
static void queue(struct player *p, uint64_t from, uint64_t to, int64_t now)
{
    if (nmsgs == BATCH || niovs + (to - from) * 2 > sizeof iovs / sizeof iovs[0])
        flush_sends(main_fd);
    struct iovec *iov = &iovs[niovs];
    uint32_t ts = (uint32_t)(now - p->start_us);
    for (uint64_t n = from; n < to; n++) {
        uint8_t *h = hdrs[niovs / 2];
        put32(h, p->seq);
        put32(h + 4, 0xc0000000u | (p->msgno & 0x03ffffffu)); /* a solo message */
        put32(h + 8, ts);
        put32(h + 12, p->peer_id);
        p->seq = (p->seq + 1) & 0x7fffffffu;
        p->msgno = (p->msgno + 1) & 0x03ffffffu;
        if (p->msgno == 0)
            p->msgno = 1;
        iovs[niovs++] = (struct iovec){h, HDR};
        iovs[niovs++] = (struct iovec){(void *)payload(n), PAYLOAD};
    }
    struct msghdr *m = &msgs[nmsgs].msg_hdr;
    *m = (struct msghdr){.msg_name = p->fd >= 0 ? NULL : &p->peer,
                         .msg_namelen = p->fd >= 0 ? 0 : sizeof p->peer,
                         .msg_iov = iov, .msg_iovlen = (to - from) * 2};
    if (to - from > 1) {
        m->msg_control = ctrl[nmsgs].buf;
        m->msg_controllen = sizeof ctrl[nmsgs].buf;
        struct cmsghdr *c = CMSG_FIRSTHDR(m);
        c->cmsg_level = SOL_UDP;
        c->cmsg_type = UDP_SEGMENT;
        c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        uint16_t seg = DGRAM;
        memcpy(CMSG_DATA(c), &seg, sizeof seg);
    }
    nmsgs++;
    stats.datagrams += to - from;
    stats.bytes += (to - from) * DGRAM;
}

static void send_all(int64_t now)
{
    while (due(head) <= now - epoch)
        head++;
    for (size_t i = 0; i < nplayers; i++) {
        struct player *p = players[i];
        if (head - p->next > BEHIND)
            p->next = head - 1;
        uint64_t run = opt_gso ? MAX_SEGS : 1;
        while (p->next < head) {
            uint64_t to = p->next + run < head ? p->next + run : head;
            queue(p, p->next, to, now);
            p->next = to;
        }
        if (p->fd >= 0)
            flush_sends(p->fd);
    }
    flush_sends(main_fd);
}

int main(int argc, char **argv)
{
    int opt;
    while ((opt = getopt(argc, argv, "f:a:p:i:GCAd:s:h")) != -1) {
        switch (opt) {
        case 'f': opt_file = optarg; break;
        case 'a': opt_addr = optarg; break;
        case 'p': opt_port = number(optarg, 1, 65535, 'p'); break;
        case 'i': opt_interval_ms = number(optarg, 1, 10000, 'i'); break;
        case 'G': opt_gso = 0; break;
        case 'C': opt_connected = 1; break;
        case 'A': opt_ackack = 1; break;
        case 'd': opt_seconds = number(optarg, 0, 1 << 30, 'd'); break;
        case 's': opt_stats_s = number(optarg, 0, 1 << 20, 's'); break;
        case 'h': usage(stdout, argv[0]); return 0;
        default: usage(stderr, argv[0]); return 2;
        }
    }
    if (!opt_file || optind != argc) {
        usage(stderr, argv[0]);
        return 2;
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    srand((unsigned)now_us());
    load(opt_file);
    main_fd = udp_socket();
    epfd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epfd < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, main_fd, &ev) != 0)
        die("epoll: %s", strerror(errno));
    fprintf(stderr, "srtfloor: srt://%s:%d (any stream id), sends every %d ms, %s%s%s\n", opt_addr,
            opt_port, opt_interval_ms, opt_gso ? "GSO runs" : "no GSO",
            opt_connected ? ", a connected socket per player" : "", opt_ackack ? ", ACKACKs" : "");

    epoch = now_us();
    int64_t next_send = epoch, start = epoch, last = epoch;
    uint64_t last_bytes = 0;
    struct epoll_event evs[256];
    for (;;) {
        int64_t now = now_us();
        if (now >= next_send) {
            send_all(now);
            next_send += (int64_t)opt_interval_ms * 1000;
            if (next_send < now)
                next_send = now + (int64_t)opt_interval_ms * 1000;
            if (opt_seconds && now - start >= (int64_t)opt_seconds * 1000000)
                break;
            if (opt_stats_s && now - last >= (int64_t)opt_stats_s * 1000000) {
                fprintf(stderr,
                        "srtfloor: %zu players, %.1f Mbit/s, %llu datagrams in %llu send calls (%llu lost), "
                        "%llu received in %llu calls, %llu ACKs, %llu NAKs\n",
                        nplayers, (double)(stats.bytes - last_bytes) * 8 / (double)(now - last),
                        (unsigned long long)stats.datagrams, (unsigned long long)stats.send_calls,
                        (unsigned long long)stats.send_fail, (unsigned long long)stats.recvd,
                        (unsigned long long)stats.recv_calls, (unsigned long long)stats.acks,
                        (unsigned long long)stats.naks);
                last = now, last_bytes = stats.bytes;
            }
            continue;
        }
        int wait_ms = (int)((next_send - now + 999) / 1000);
        int n = epoll_wait(epfd, evs, 256, wait_ms);
        for (int i = 0; i < n; i++) {
            struct player *p = evs[i].data.ptr;
            if (!p)
                drain(main_fd, NULL);
            else if (!p->dead) /* one dropped earlier in this loop may have an event here */
                drain(p->fd, p);
        }
        bury();
    }
    return 0;
}
