/*
 * floor: the least a live HTTP-FLV fan-out server can do, as a yardstick for the
 * cost of fan-out. It reads one FLV file into memory and plays it as an endless
 * live stream, paced by the file's timestamps, to every client that connects
 * (any path, any method). Nothing is done per client but the write:
 *
 *  - One producer appends the tags that are due to one shared ring of stream bytes,
 *    with timestamps rebased on every pass through the file so they keep growing.
 *  - Every interval (-i, the merge window) each client gets one non-blocking writev
 *    of all the stream bytes it has not had yet, straight from the ring.
 *  - A new client gets the response head, the FLV header, the metadata and the
 *    sequence headers, then the stream from its newest keyframe.
 *  - A client more than the bound (-b) behind, with a newer keyframe than its
 *    position, is moved to the newest keyframe once its current tag is complete,
 *    or closed with -K.
 *  - With -t N, N threads each accept on their own SO_REUSEPORT socket and serve
 *    their own clients from the same ring.
 *
 * Build: gcc -O2 -Wall -Wextra -o floor floor.c -lpthread
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
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
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define NONE UINT64_MAX
#define MAX_REQUEST 16384

/* ---- options ---- */

static const char *opt_file;
static const char *opt_addr = "0.0.0.0";
static int opt_port = 8088;
static int opt_interval_ms = 40;
static int opt_threads = 1;
static size_t opt_bound = 8u << 20;
static int opt_close_slow;
static int opt_seconds;
static int opt_stats_s = 5;
static int opt_tick_ms; /* -T: an idle timer, for what a periodic wake-up costs */

static void usage(FILE *to, const char *me)
{
    fprintf(to,
            "usage: %s -f FILE.flv [options]\n"
            "Plays FILE as a looped live HTTP-FLV stream to every client, on any path.\n"
            "  -f FILE   the FLV file (read into memory once)\n"
            "  -a ADDR   listen address (default 0.0.0.0)\n"
            "  -p PORT   listen port (default 8088)\n"
            "  -i MS     write interval, the merge window: each client gets one write\n"
            "            of everything new every MS milliseconds (default 40)\n"
            "  -t N      worker threads, each with its own SO_REUSEPORT listener (default 1)\n"
            "  -b KIB    backlog bound per client in KiB (default 8192): a client further\n"
            "            behind is moved to the newest keyframe\n"
            "  -K        close such a client instead\n"
            "  -d SEC    exit after SEC seconds (default 0: run until killed)\n"
            "  -s SEC    print figures to stderr every SEC seconds (default 5; 0: never)\n"
            "  -T MS     also wake every MS ms for nothing (an experiment: the cost of a\n"
            "            periodic timer, such as a server's housekeeping tick; default off)\n"
            "  -h        this help\n",
            me);
}

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("floor: ", stderr);
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

/* ---- the file ---- */

/* A tag of the file that goes into the live stream. */
struct media_tag {
    const uint8_t *data; /* the tag body */
    uint32_t size;       /* body bytes */
    uint32_t ts;         /* milliseconds, relative to the first media tag */
    uint8_t type;        /* 8 audio, 9 video, 18 script */
    uint8_t keyframe;
};

static uint8_t *file_bytes;
static struct media_tag *tags;
static size_t ntags;
static uint32_t loop_ms; /* one pass through the file */

/* What every client gets first: response head, FLV header, metadata, sequence headers. */
static uint8_t *prefix;
static size_t prefix_len;

static uint32_t be24(const uint8_t *p) { return (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2]; }

enum kind { K_FRAME, K_HEADER, K_DROP };

/* Sorts a tag: a coded frame, a header a new client needs, or something to leave out. */
static enum kind classify(uint8_t type, const uint8_t *b, uint32_t n, int *keyframe)
{
    *keyframe = 0;
    if (type == 18)
        return K_HEADER;
    if (n == 0)
        return K_DROP;
    if (type == 9) {
        int frame_type = (b[0] >> 4) & 7;
        if (b[0] & 0x80) { /* Enhanced RTMP: the packet type is in the low nibble */
            int packet = b[0] & 0x0f;
            if (packet == 0 || packet == 5)
                return K_HEADER; /* SequenceStart, MPEG2TSSequenceStart */
            if (packet == 2 || frame_type == 5)
                return K_DROP; /* SequenceEnd, command frames */
            *keyframe = frame_type == 1 && (packet == 1 || packet == 3);
            return K_FRAME;
        }
        int codec = b[0] & 0x0f;
        if (frame_type == 5)
            return K_DROP;
        if (codec == 7 || codec == 12 || codec == 13) { /* AVC, HEVC, AV1 (legacy ids) */
            if (n < 2)
                return K_DROP;
            if (b[1] == 0)
                return K_HEADER;
            if (b[1] == 2)
                return K_DROP; /* end of sequence: it would end the loop for decoders */
        }
        *keyframe = frame_type == 1;
        return K_FRAME;
    }
    if (type == 8) {
        int format = b[0] >> 4;
        if (format == 9) /* Enhanced RTMP audio */
            return (b[0] & 0x0f) == 0 ? K_HEADER : K_FRAME;
        if (format == 10 && n >= 2 && b[1] == 0) /* AAC AudioSpecificConfig */
            return K_HEADER;
        return K_FRAME;
    }
    return K_DROP;
}

static void append(uint8_t **buf, size_t *len, size_t *cap, const void *src, size_t n)
{
    if (*len + n > *cap) {
        *cap = (*len + n) * 2;
        *buf = realloc(*buf, *cap);
        if (!*buf)
            die("out of memory");
    }
    memcpy(*buf + *len, src, n);
    *len += n;
}

/* Writes an FLV tag header (11 bytes) for a body of SIZE bytes at TS ms. */
static void tag_header(uint8_t *h, uint8_t type, uint32_t size, uint32_t ts)
{
    h[0] = type;
    h[1] = (uint8_t)(size >> 16), h[2] = (uint8_t)(size >> 8), h[3] = (uint8_t)size;
    h[4] = (uint8_t)(ts >> 16), h[5] = (uint8_t)(ts >> 8), h[6] = (uint8_t)ts;
    h[7] = (uint8_t)(ts >> 24);
    h[8] = h[9] = h[10] = 0;
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

static void load(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        die("%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0)
        die("%s: %s", path, strerror(errno));
    size_t n = (size_t)st.st_size;
    file_bytes = malloc(n ? n : 1);
    if (!file_bytes || fread(file_bytes, 1, n, f) != n)
        die("%s: cannot read it", path);
    fclose(f);
    if (n < 13 || memcmp(file_bytes, "FLV", 3) != 0)
        die("%s: not an FLV file", path);
    uint32_t header_len = (uint32_t)file_bytes[5] << 24 | be24(file_bytes + 6);
    if (header_len < 9 || (size_t)header_len + 4 > n)
        die("%s: bad FLV header", path);

    static const char head[] = "HTTP/1.1 200 OK\r\n"
                               "Content-Type: video/x-flv\r\n"
                               "Cache-Control: no-cache\r\n"
                               "Access-Control-Allow-Origin: *\r\n"
                               "Connection: close\r\n\r\n";
    size_t cap = 0;
    append(&prefix, &prefix_len, &cap, head, sizeof head - 1);
    append(&prefix, &prefix_len, &cap, file_bytes, 9);
    put_be32(prefix + prefix_len - 4, 9); /* our header is 9 bytes, whatever the file's */
    static const uint8_t zero[4];
    append(&prefix, &prefix_len, &cap, zero, 4);

    tags = calloc(n / 15 + 1, sizeof *tags);
    if (!tags)
        die("out of memory");
    size_t at = header_len + 4;
    int64_t first_ts = -1;
    uint32_t last_ts = 0, last_video = 0, video_gap = 0;
    int seen_video = 0, seen_frame = 0;
    while (at + 11 <= n) {
        const uint8_t *h = file_bytes + at;
        uint8_t type = h[0] & 0x1f;
        uint32_t size = be24(h + 1);
        uint32_t ts = be24(h + 4) | (uint32_t)h[7] << 24;
        if (at + 11 + size + 4 > n)
            break; /* cut short: play what is whole */
        const uint8_t *body = h + 11;
        at += 11 + size + 4;
        if (h[0] & 0x20)
            continue; /* encrypted */
        int keyframe;
        enum kind k = classify(type, body, size, &keyframe);
        if (k == K_DROP)
            continue;
        if (k == K_HEADER && !seen_frame) {
            uint8_t th[11], pts[4];
            tag_header(th, type, size, 0);
            put_be32(pts, 11 + size);
            append(&prefix, &prefix_len, &cap, th, 11);
            append(&prefix, &prefix_len, &cap, body, size);
            append(&prefix, &prefix_len, &cap, pts, 4);
            continue;
        }
        seen_frame |= k == K_FRAME;
        if (first_ts < 0)
            first_ts = ts;
        if (ts < (uint32_t)first_ts)
            ts = (uint32_t)first_ts;
        struct media_tag *t = &tags[ntags++];
        t->data = body, t->size = size, t->type = type, t->keyframe = (uint8_t)keyframe;
        t->ts = ts - (uint32_t)first_ts;
        if (t->ts > last_ts)
            last_ts = t->ts;
        if (type == 9 && k == K_FRAME) {
            if (seen_video && t->ts > last_video)
                video_gap = t->ts - last_video;
            last_video = t->ts, seen_video = 1;
        }
    }
    size_t keyframes = 0;
    for (size_t i = 0; i < ntags; i++)
        keyframes += tags[i].keyframe;
    if (keyframes == 0)
        die("%s: no video keyframe to start clients on", path);
    /* The next pass starts one frame after the last tag of this one. */
    loop_ms = last_ts + (video_gap ? video_gap : 40);
    fprintf(stderr, "floor: %s: %zu tags, %zu keyframes, %u ms a pass, %zu header bytes\n", path,
            ntags, keyframes, loop_ms, prefix_len);
}

/* ---- the producer and the ring ---- */

static uint8_t *ring;
static uint64_t ring_size;

/* Offsets of the tags produced, for finding a tag boundary: starts[n % IDX]. */
#define IDX (1u << 20)
static uint64_t *starts;

static struct {
    pthread_mutex_t lock;
    uint64_t end;     /* stream bytes produced (atomic) */
    uint64_t key;     /* stream offset of the newest keyframe tag, or NONE (atomic) */
    uint64_t count;   /* tags produced (atomic) */
    size_t next;      /* next tag of the file */
    uint64_t pass;    /* passes through the file so far */
    int64_t epoch_us; /* when the stream's time 0 was */
} prod = {.lock = PTHREAD_MUTEX_INITIALIZER, .key = NONE};

static void ring_put(uint64_t off, const void *src, size_t n)
{
    size_t i = (size_t)(off % ring_size);
    size_t first = n < ring_size - i ? n : (size_t)(ring_size - i);
    memcpy(ring + i, src, first);
    memcpy(ring, (const uint8_t *)src + first, n - first);
}

/* Appends every tag due by NOW to the ring. Any thread may call it. */
static void produce(int64_t now)
{
    pthread_mutex_lock(&prod.lock);
    uint64_t end = prod.end, key = prod.key, count = prod.count;
    for (;;) {
        struct media_tag *t = &tags[prod.next];
        uint64_t ts = prod.pass * loop_ms + t->ts;
        int64_t due = prod.epoch_us + (int64_t)ts * 1000;
        if (due > now)
            break;
        if (now - due > 2000000) { /* we were stopped: resume from now, not in a burst */
            prod.epoch_us += now - due;
            continue;
        }
        uint8_t h[11], pts[4];
        tag_header(h, t->type, t->size, (uint32_t)ts);
        put_be32(pts, 11 + t->size);
        __atomic_store_n(&starts[count % IDX], end, __ATOMIC_RELAXED);
        if (t->keyframe)
            key = end;
        ring_put(end, h, 11);
        ring_put(end + 11, t->data, t->size);
        ring_put(end + 11 + t->size, pts, 4);
        end += 15 + t->size;
        count++;
        if (++prod.next == ntags)
            prod.next = 0, prod.pass++;
    }
    __atomic_store_n(&prod.count, count, __ATOMIC_RELEASE);
    __atomic_store_n(&prod.key, key, __ATOMIC_RELEASE);
    __atomic_store_n(&prod.end, end, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&prod.lock);
}

static uint64_t start_of(uint64_t tag) { return __atomic_load_n(&starts[tag % IDX], __ATOMIC_RELAXED); }

/* The first tag boundary at or after POS, or NONE if POS is older than the index. */
static uint64_t boundary_from(uint64_t pos)
{
    uint64_t end = __atomic_load_n(&prod.end, __ATOMIC_ACQUIRE);
    uint64_t count = __atomic_load_n(&prod.count, __ATOMIC_ACQUIRE);
    if (pos >= end)
        return end;
    uint64_t lo = count > IDX / 2 ? count - IDX / 2 : 0, hi = count; /* [lo, hi) */
    if (lo == hi || start_of(lo) > pos)
        return NONE;
    while (hi - lo > 1) { /* start_of(lo) <= pos; find the last such */
        uint64_t mid = lo + (hi - lo) / 2;
        if (start_of(mid) <= pos)
            lo = mid;
        else
            hi = mid;
    }
    if (start_of(lo) == pos)
        return pos;
    return lo + 1 < count ? start_of(lo + 1) : end;
}

/* ---- clients ---- */

struct client {
    int fd;
    int streaming;     /* the request head has been read */
    size_t index;      /* in its worker's list */
    uint32_t req_len;  /* request bytes read so far */
    uint8_t req_tail[3];
    size_t head_sent;  /* bytes of the prefix written */
    uint64_t pos;      /* next stream byte to write, or NONE before the first keyframe */
    uint64_t stop_at;  /* while catching up: the end of the tag being written, or NONE */
};

struct worker {
    int id, epfd, listen_fd, tick_fd;
    struct client **clients;
    size_t nclients, cap;
    /* figures, read by the stats printer */
    uint64_t bytes, accepted, closed, skipped, dropped;
    pthread_t thread;
};

static struct worker *workers;

static void count_add(uint64_t *c, uint64_t n) { __atomic_fetch_add(c, n, __ATOMIC_RELAXED); }

static void client_close(struct worker *w, struct client *c)
{
    close(c->fd);
    struct client *last = w->clients[--w->nclients];
    w->clients[c->index] = last;
    last->index = c->index;
    free(c);
    count_add(&w->closed, 1);
}

/* Moves a client that fell too far behind to the newest keyframe (or closes it).
 * Returns 0 when it was closed. */
static int catch_up(struct worker *w, struct client *c)
{
    if (opt_close_slow) {
        count_add(&w->dropped, 1);
        client_close(w, c);
        return 0;
    }
    uint64_t b = boundary_from(c->pos);
    if (b == NONE) {
        count_add(&w->dropped, 1);
        client_close(w, c);
        return 0;
    }
    if (b == c->pos) {
        c->pos = __atomic_load_n(&prod.key, __ATOMIC_ACQUIRE);
        count_add(&w->skipped, 1);
    } else {
        c->stop_at = b; /* finish the tag in flight first */
    }
    return 1;
}

/* Writes what the client has not had yet, in one writev. Returns 0 when it was closed. */
static int flush(struct worker *w, struct client *c)
{
    if (c->pos == NONE) {
        c->pos = __atomic_load_n(&prod.key, __ATOMIC_ACQUIRE);
        if (c->pos == NONE)
            return 1;
    }
    uint64_t end = __atomic_load_n(&prod.end, __ATOMIC_ACQUIRE);
    /* Behind by more than the bound, and a newer keyframe to go to. */
    if (c->stop_at == NONE && end - c->pos > opt_bound &&
        c->pos < __atomic_load_n(&prod.key, __ATOMIC_ACQUIRE) && !catch_up(w, c))
        return 0;
    /* Never send bytes the ring may have overwritten (a bound below half the ring
     * keeps clients well clear of that). */
    if (end - c->pos > ring_size / 2 + opt_bound) {
        count_add(&w->dropped, 1);
        client_close(w, c);
        return 0;
    }
    uint64_t upto = c->stop_at == NONE ? end : c->stop_at;
    struct iovec iov[3];
    int n = 0;
    if (c->head_sent < prefix_len)
        iov[n++] = (struct iovec){prefix + c->head_sent, prefix_len - c->head_sent};
    if (upto > c->pos) {
        size_t i = (size_t)(c->pos % ring_size), len = (size_t)(upto - c->pos);
        size_t first = len < ring_size - i ? len : (size_t)(ring_size - i);
        iov[n++] = (struct iovec){ring + i, first};
        if (len > first)
            iov[n++] = (struct iovec){ring, len - first};
    }
    if (n == 0)
        return 1;
    ssize_t wrote = writev(c->fd, iov, n);
    if (wrote < 0) {
        if (errno == EAGAIN || errno == EINTR)
            return 1;
        client_close(w, c);
        return 0;
    }
    count_add(&w->bytes, (uint64_t)wrote);
    size_t rest = (size_t)wrote;
    if (c->head_sent < prefix_len) {
        size_t h = prefix_len - c->head_sent < rest ? prefix_len - c->head_sent : rest;
        c->head_sent += h;
        rest -= h;
    }
    c->pos += rest;
    if (c->stop_at != NONE && c->pos == c->stop_at) {
        uint64_t key = __atomic_load_n(&prod.key, __ATOMIC_ACQUIRE);
        if (key > c->pos)
            c->pos = key;
        c->stop_at = NONE;
        count_add(&w->skipped, 1);
    }
    return 1;
}

/* Reads from a client: the request head, then anything (ignored) until it closes. */
static void client_read(struct worker *w, struct client *c)
{
    uint8_t buf[4096];
    for (;;) {
        ssize_t n = read(c->fd, buf, sizeof buf);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            client_close(w, c);
            return;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return;
        }
        if (c->streaming)
            continue;
        /* Look for the blank line that ends the head, also across reads. */
        uint8_t look[3 + sizeof buf];
        size_t keep = c->req_len < 3 ? c->req_len : 3;
        memcpy(look, c->req_tail + 3 - keep, keep);
        memcpy(look + keep, buf, (size_t)n);
        size_t len = keep + (size_t)n;
        c->req_len += (uint32_t)n;
        if (memmem(look, len, "\r\n\r\n", 4) || memmem(look, len, "\n\n", 2)) {
            c->streaming = 1;
            c->pos = __atomic_load_n(&prod.key, __ATOMIC_ACQUIRE);
            if (!flush(w, c))
                return;
            continue;
        }
        if (c->req_len > MAX_REQUEST) {
            client_close(w, c);
            return;
        }
        for (size_t i = 0; i < 3; i++) /* the last three bytes seen */
            c->req_tail[i] = len >= 3 - i ? look[len - 3 + i] : 0;
    }
}

static void accept_all(struct worker *w)
{
    for (;;) {
        int fd = accept4(w->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE)
                fprintf(stderr, "floor: out of file descriptors\n");
            return;
        }
        struct client *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->fd = fd, c->pos = NONE, c->stop_at = NONE;
        if (w->nclients == w->cap) {
            w->cap = w->cap ? w->cap * 2 : 1024;
            w->clients = realloc(w->clients, w->cap * sizeof *w->clients);
            if (!w->clients)
                die("out of memory");
        }
        c->index = w->nclients;
        w->clients[w->nclients++] = c;
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
        if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            client_close(w, c);
            continue;
        }
        count_add(&w->accepted, 1);
    }
}

static int listener(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        die("socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0)
        die("SO_REUSEPORT: %s", strerror(errno));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)opt_port)};
    if (inet_pton(AF_INET, opt_addr, &sa.sin_addr) != 1)
        die("-a wants an IPv4 address, not \"%s\"", opt_addr);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0)
        die("bind %s:%d: %s", opt_addr, opt_port, strerror(errno));
    if (listen(fd, 4096) != 0)
        die("listen: %s", strerror(errno));
    return fd;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct epoll_event evs[256];
    int64_t interval = (int64_t)opt_interval_ms * 1000;
    int64_t next_tick = now_us() + interval;
    for (;;) {
        int64_t wait_us = next_tick - now_us();
        int timeout = wait_us > 0 ? (int)((wait_us + 999) / 1000) : 0;
        int n = epoll_wait(w->epfd, evs, 256, timeout);
        if (n < 0 && errno != EINTR)
            die("epoll_wait: %s", strerror(errno));
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == NULL) {
                accept_all(w);
                continue;
            }
            if (evs[i].data.ptr == &opt_tick_ms) { /* -T: read the timer, nothing else */
                uint64_t expirations;
                if (read(w->tick_fd, &expirations, sizeof expirations) < 0 && errno != EAGAIN)
                    die("timerfd read: %s", strerror(errno));
                continue;
            }
            struct client *c = evs[i].data.ptr;
            if (evs[i].events & (EPOLLERR | EPOLLHUP))
                client_close(w, c);
            else
                client_read(w, c); /* EPOLLRDHUP too: the read sees the end */
        }
        int64_t now = now_us();
        if (now < next_tick)
            continue;
        produce(now);
        for (size_t i = 0; i < w->nclients;) {
            struct client *c = w->clients[i];
            if (!c->streaming || flush(w, c))
                i++; /* else it was closed, and the last client took slot i */
        }
        next_tick += interval;
        if (next_tick <= now)
            next_tick = now + interval;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int opt;
    while ((opt = getopt(argc, argv, "f:a:p:i:t:b:Kd:s:T:h")) != -1) {
        switch (opt) {
        case 'f': opt_file = optarg; break;
        case 'a': opt_addr = optarg; break;
        case 'p': opt_port = number(optarg, 1, 65535, 'p'); break;
        case 'i': opt_interval_ms = number(optarg, 1, 10000, 'i'); break;
        case 't': opt_threads = number(optarg, 1, 256, 't'); break;
        case 'b': opt_bound = (size_t)number(optarg, 16, 1 << 21, 'b') << 10; break;
        case 'K': opt_close_slow = 1; break;
        case 'd': opt_seconds = number(optarg, 0, 1 << 30, 'd'); break;
        case 's': opt_stats_s = number(optarg, 0, 1 << 20, 's'); break;
        case 'T': opt_tick_ms = number(optarg, 0, 10000, 'T'); break;
        case 'h': usage(stdout, argv[0]); return 0;
        default: usage(stderr, argv[0]); return 2;
        }
    }
    if (!opt_file || optind != argc) {
        usage(stderr, argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }

    load(opt_file);
    /* Room for the bound twice over plus a few seconds of stream: a client is never
     * more than the bound (and one tick) behind, so its bytes are still there. */
    ring_size = (uint64_t)opt_bound * 2 + (32u << 20);
    ring = malloc((size_t)ring_size);
    starts = calloc(IDX, sizeof *starts);
    if (!ring || !starts)
        die("out of memory");
    prod.epoch_us = now_us();
    produce(prod.epoch_us);

    workers = calloc((size_t)opt_threads, sizeof *workers);
    if (!workers)
        die("out of memory");
    for (int i = 0; i < opt_threads; i++) {
        struct worker *w = &workers[i];
        w->id = i;
        w->listen_fd = listener();
        w->epfd = epoll_create1(EPOLL_CLOEXEC);
        if (w->epfd < 0)
            die("epoll_create1: %s", strerror(errno));
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
        if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->listen_fd, &ev) != 0)
            die("epoll_ctl: %s", strerror(errno));
        if (opt_tick_ms > 0) {
            w->tick_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
            if (w->tick_fd < 0)
                die("timerfd_create: %s", strerror(errno));
            struct timespec every = {opt_tick_ms / 1000, (long)(opt_tick_ms % 1000) * 1000000};
            struct itimerspec its = {every, every};
            struct epoll_event tev = {.events = EPOLLIN, .data.ptr = &opt_tick_ms};
            if (timerfd_settime(w->tick_fd, 0, &its, NULL) != 0 ||
                epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->tick_fd, &tev) != 0)
                die("timerfd: %s", strerror(errno));
        }
    }
    for (int i = 0; i < opt_threads; i++)
        if (pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]) != 0)
            die("pthread_create failed");
    fprintf(stderr, "floor: http://%s:%d/ (any path), %d thread(s), writes every %d ms\n",
            opt_addr, opt_port, opt_threads, opt_interval_ms);

    /* The main thread only keeps time: figures and the -d deadline. */
    int64_t start = now_us(), last = start;
    uint64_t last_bytes = 0;
    for (;;) {
        sleep(1);
        int64_t now = now_us();
        if (opt_seconds && now - start >= (int64_t)opt_seconds * 1000000)
            break;
        if (!opt_stats_s || now - last < (int64_t)opt_stats_s * 1000000)
            continue;
        uint64_t bytes = 0, in = 0, out = 0, skipped = 0, dropped = 0;
        for (int i = 0; i < opt_threads; i++) {
            bytes += __atomic_load_n(&workers[i].bytes, __ATOMIC_RELAXED);
            in += __atomic_load_n(&workers[i].accepted, __ATOMIC_RELAXED);
            out += __atomic_load_n(&workers[i].closed, __ATOMIC_RELAXED);
            skipped += __atomic_load_n(&workers[i].skipped, __ATOMIC_RELAXED);
            dropped += __atomic_load_n(&workers[i].dropped, __ATOMIC_RELAXED);
        }
        fprintf(stderr, "floor: %llu clients, %.1f Mbit/s, %llu MB sent, %llu moved to a keyframe, %llu closed as slow\n",
                (unsigned long long)(in - out), (double)(bytes - last_bytes) * 8 / (double)(now - last),
                (unsigned long long)(bytes / 1000000), (unsigned long long)skipped,
                (unsigned long long)dropped);
        last = now, last_bytes = bytes;
    }
    return 0;
}
