// Sluice web console: polls the JSON API and draws the overview or one stream's page.
// Text from the API only ever enters the DOM as text nodes (textContent), never as
// markup: stream names and peers come from whoever publishes.
'use strict';

(() => {
  const POLL_MS = 2000;
  // Two minutes of bandwidth at one sample per poll.
  const HISTORY = 60;
  const TOKEN_KEY = 'sluice.api.token';

  const $ = (id) => document.getElementById(id);

  // Builds an element; string children become text nodes, so API data stays text.
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (k === 'class') node.className = v;
      else if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
      else if (k in node) node[k] = v;
      else node.setAttribute(k, v);
    }
    for (const c of children) {
      if (c === null || c === undefined || c === false) continue;
      node.append(c instanceof Node ? c : String(c));
    }
    return node;
  }

  // ---- formatting ----

  function bytes(n) {
    if (!Number.isFinite(n)) return '–';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i === 0 ? n : n.toFixed(n < 10 ? 1 : 0)) + ' ' + units[i];
  }

  function bits(perSecond) {
    if (!Number.isFinite(perSecond)) return '–';
    const units = ['b/s', 'kb/s', 'Mb/s', 'Gb/s'];
    let i = 0;
    while (perSecond >= 1000 && i < units.length - 1) { perSecond /= 1000; i++; }
    return perSecond.toFixed(perSecond < 10 && i > 0 ? 1 : 0) + ' ' + units[i];
  }

  function duration(s) {
    s = Math.floor(s || 0);
    if (s < 60) return s + ' s';
    if (s < 3600) return Math.floor(s / 60) + ' min ' + (s % 60) + ' s';
    const h = Math.floor(s / 3600);
    if (h < 48) return h + ' h ' + Math.floor((s % 3600) / 60) + ' min';
    return Math.floor(h / 24) + ' d ' + (h % 24) + ' h';
  }

  function video(v) {
    if (!v) return '–';
    return v.width ? `${v.codec} ${v.width}×${v.height}` : v.codec;
  }

  function audio(a) {
    if (!a) return '–';
    const parts = [a.codec];
    if (a.sample_rate) parts.push((a.sample_rate / 1000) + ' kHz');
    if (a.channels) parts.push(a.channels === 1 ? 'mono' : a.channels === 2 ? 'stereo' : a.channels + ' ch');
    return parts.join(' ');
  }

  function viewerTotal(viewers) {
    return Object.values(viewers || {}).reduce((a, b) => a + b, 0);
  }

  // Only the protocols someone watches with, so the column stays narrow.
  function viewerList(viewers) {
    const used = Object.entries(viewers || {}).filter(([, n]) => n > 0);
    if (used.length === 0) return el('span', { class: 'muted' }, 'none');
    return el('span', { class: 'chips' },
      ...used.map(([proto, n]) => el('span', { class: 'chip' }, `${proto} ${n}`)));
  }

  function streamHref(key) {
    return '#/stream/' + key.split('/').map(encodeURIComponent).join('/');
  }

  function apiPath(key) {
    return key.split('/').map(encodeURIComponent).join('/');
  }

  // ---- the API, with the bearer token when the server wants one ----

  class AuthNeeded extends Error {}

  let token = sessionStorage.getItem(TOKEN_KEY) || '';

  async function api(method, path) {
    const headers = { Accept: 'application/json' };
    if (token) headers.Authorization = 'Bearer ' + token;
    const res = await fetch('/api/v1/' + path, { method, headers, cache: 'no-store' });
    let body = null;
    try { body = await res.json(); } catch (_) { /* an empty or non-JSON answer */ }
    if (res.status === 401 || res.status === 403) {
      askToken(res.status, body && body.error);
      throw new AuthNeeded(body && body.error || 'HTTP ' + res.status);
    }
    if (!res.ok) throw new Error((body && body.error) || `${method} ${path}: HTTP ${res.status}`);
    return body;
  }

  function askToken(status, why) {
    const form = $('token-form');
    const wrong = status === 403 && token;
    $('token-why').textContent = wrong
      ? 'The server refused this token' + (why ? ` (${why})` : '') + '.'
      : 'The server asks for a token' + (why ? ` (${why})` : '') + '.';
    if (form.hidden) {
      form.hidden = false;
      $('token').focus();
    }
  }

  $('token-form').addEventListener('submit', (e) => {
    e.preventDefault();
    token = $('token').value.trim();
    sessionStorage.setItem(TOKEN_KEY, token);
    $('token').value = '';
    $('token-form').hidden = true;
    poll();
  });

  $('forget-token').addEventListener('click', () => {
    token = '';
    sessionStorage.removeItem(TOKEN_KEY);
    poll();
  });

  // ---- state kept between polls ----

  const history = []; // {t, out, in} in bits per second
  let previous = null; // {t, byKey: Map(key -> {out, in})}
  let streams = [];

  // Rates from counters summed over the streams present in both polls: a stream that
  // ends or starts between two polls would otherwise show as a drop or a spike.
  function sample(list) {
    const now = performance.now();
    const byKey = new Map(list.map((s) => [s.key, { out: s.bytes_out, in: s.bytes_in }]));
    if (previous) {
      const dt = (now - previous.t) / 1000;
      let out = 0;
      let inn = 0;
      for (const [key, c] of byKey) {
        const p = previous.byKey.get(key);
        if (!p) continue;
        out += Math.max(0, c.out - p.out);
        inn += Math.max(0, c.in - p.in);
      }
      if (dt > 0) {
        history.push({ out: out * 8 / dt, in: inn * 8 / dt });
        if (history.length > HISTORY) history.shift();
      }
    }
    previous = { t: now, byKey };
  }

  // ---- drawing ----

  function renderServer(info) {
    $('server').textContent = `v${info.version} · up ${duration(info.uptime_s)} · ${info.workers} workers`;
  }

  // A stream's snapshot (/app/name.jpg), its URL kept for the snapshot's interval so
  // each poll's new row shows the cached picture instead of asking again.
  const thumbs = new Map();
  function thumb(s) {
    if (!s.live || !s.video) return el('span', { class: 'thumb' });
    let t = thumbs.get(s.key);
    if (!t || Date.now() - t.at > 10000) {
      const path = '/' + s.key.split('/').map(encodeURIComponent).join('/');
      const q = s.play_query ? '&' + s.play_query : '';
      t = { at: Date.now(), src: path + '.jpg?width=160' + q };
      thumbs.set(s.key, t);
    }
    const img = el('img', { class: 'thumb', src: t.src, alt: '', loading: 'lazy' });
    // Snapshots off, or none yet: no picture rather than a broken one.
    img.onerror = () => { img.style.visibility = 'hidden'; };
    return img;
  }

  function renderStreams(list) {
    $('streams-count').textContent = list.length ? String(list.length) : '';
    $('streams-empty').hidden = list.length > 0;
    const rows = list.map((s) => {
      const pub = s.publisher
        ? el('span', {}, s.publisher.protocol, ' ', el('span', { class: 'muted' }, s.publisher.peer))
        : el('span', { class: 'muted' }, s.live ? '–' : 'not live');
      const close = el('button', {
        type: 'button',
        class: 'danger',
        title: 'Close this stream and disconnect its publisher',
        onclick: () => closeStream(s.key),
      }, 'Close');
      return el('tr', {},
        el('td', {},
          thumb(s),
          el('span', { class: s.live ? 'dot live' : 'dot', title: s.live ? 'live' : 'not live' }),
          el('a', { href: streamHref(s.key), class: 'key' }, s.key)),
        el('td', {}, video(s.video)),
        el('td', {}, audio(s.audio)),
        el('td', { class: 'num' }, bits(s.bitrate_in_kbps * 1000)),
        el('td', {}, viewerList(s.viewers)),
        el('td', {}, pub),
        el('td', { class: 'actions' }, close));
    });
    $('streams').tBodies[0].replaceChildren(...rows);
  }

  function renderWorkers(list) {
    const rows = list.map((w) => {
      const pct = Math.round(Math.min(1, Math.max(0, w.busy)) * 100);
      const level = pct >= 85 ? 'hot' : pct >= 60 ? 'warm' : '';
      const fill = el('div', { class: 'fill ' + level });
      // Through the CSSOM: the page's CSP allows no inline style attributes.
      fill.style.width = pct + '%';
      return el('div', { class: 'worker' },
        el('span', { class: 'worker-name' }, `#${w.worker}`),
        el('div', { class: 'bar', role: 'meter', 'aria-label': `worker ${w.worker} busy`, 'aria-valuemin': '0', 'aria-valuemax': '100', 'aria-valuenow': String(pct) }, fill),
        el('span', { class: 'num' }, pct + ' %'),
        el('span', { class: 'muted small worker-extra' },
          `${w.connections} conn · worst delay ${Number(w.worst_delay_ms).toFixed(1)} ms`));
    });
    $('workers').replaceChildren(...rows);
  }

  function renderClients(list) {
    $('clients-count').textContent = list.length ? String(list.length) : '';
    const rows = list.map((c) => el('tr', {},
      el('td', { class: 'num' }, c.id),
      el('td', {}, c.protocol),
      el('td', {}, c.peer),
      el('td', {}, el('span', { class: 'role ' + c.role }, c.role)),
      el('td', {}, c.stream ? el('a', { href: streamHref(c.stream) }, c.stream) : '–'),
      el('td', { class: 'num' }, bytes(c.bytes_in)),
      el('td', { class: 'num' }, bytes(c.bytes_out)),
      el('td', { class: 'num' }, c.role === 'play' ? c.lag_ms + ' ms' : '–'),
      el('td', { class: 'num' }, c.skips),
      el('td', { class: 'num' }, duration(c.age_s)),
      el('td', { class: 'num' }, c.worker),
      el('td', { class: 'actions' }, el('button', {
        type: 'button',
        title: 'Disconnect this client',
        onclick: () => kick(c.id),
      }, 'Kick'))));
    $('clients').tBodies[0].replaceChildren(...rows);
  }

  // A small area chart; sized to its box in device pixels so it stays sharp.
  function drawChart() {
    const canvas = $('bw');
    if (canvas.offsetParent === null) return;
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth;
    const h = canvas.clientHeight;
    if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
      canvas.width = Math.round(w * dpr);
      canvas.height = Math.round(h * dpr);
    }
    const g = canvas.getContext('2d');
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    const style = getComputedStyle(document.documentElement);
    const color = (name) => style.getPropertyValue(name).trim();
    const peak = Math.max(1, ...history.map((s) => Math.max(s.out, s.in)));
    // Round the scale up to 1, 2 or 5 times a power of ten, for a readable label.
    const pow = Math.pow(10, Math.floor(Math.log10(peak)));
    const top = [1, 2, 5, 10].map((m) => m * pow).find((v) => v >= peak);
    const pad = { l: 4, r: 4, t: 16, b: 4 };
    const x = (i) => pad.l + (w - pad.l - pad.r) * (i / (HISTORY - 1));
    const y = (v) => h - pad.b - (h - pad.t - pad.b) * (v / top);
    g.strokeStyle = color('--grid');
    g.lineWidth = 1;
    g.beginPath();
    for (const f of [0, 0.5, 1]) {
      const yy = Math.round(y(top * f)) + 0.5;
      g.moveTo(pad.l, yy);
      g.lineTo(w - pad.r, yy);
    }
    g.stroke();
    g.fillStyle = color('--muted');
    g.font = '11px system-ui, sans-serif';
    g.fillText(bits(top), pad.l + 2, pad.t - 4);
    if (history.length === 0) {
      g.fillText('measuring…', pad.l + 2, h / 2);
      return;
    }
    // Newest sample at the right edge; a lone first sample drawn as a short level
    // line, since a one-point path draws nothing.
    const points = history.length === 1 ? [history[0], history[0]] : history;
    const offset = HISTORY - points.length;
    const line = (key) => {
      g.beginPath();
      points.forEach((s, i) => {
        const px = x(offset + i);
        const py = y(s[key]);
        if (i === 0) g.moveTo(px, py); else g.lineTo(px, py);
      });
    };
    line('out');
    g.lineTo(x(HISTORY - 1), y(0));
    g.lineTo(x(offset), y(0));
    g.closePath();
    g.fillStyle = color('--out-fill');
    g.fill();
    line('out');
    g.strokeStyle = color('--out');
    g.lineWidth = 2;
    g.stroke();
    line('in');
    g.strokeStyle = color('--in');
    g.lineWidth = 1.5;
    g.setLineDash([4, 3]);
    g.stroke();
    g.setLineDash([]);
    const last = history[history.length - 1];
    $('bw-now').textContent = `${bits(last.out)} out · ${bits(last.in)} in`;
  }

  // ---- actions ----

  async function closeStream(key) {
    if (!confirm(`Close the stream ${key}? Its publisher is disconnected and its players stop.`)) return;
    try {
      await api('DELETE', 'streams/' + apiPath(key));
      setStatus(`closed ${key}`);
    } catch (e) {
      if (!(e instanceof AuthNeeded)) setStatus(String(e.message || e), true);
    }
    poll();
  }

  async function kick(id) {
    if (!confirm(`Disconnect client ${id}?`)) return;
    try {
      await api('DELETE', 'clients/' + encodeURIComponent(id));
      setStatus(`kicked client ${id}`);
    } catch (e) {
      if (!(e instanceof AuthNeeded)) setStatus(String(e.message || e), true);
    }
    poll();
  }

  function setStatus(text, error) {
    const s = $('status');
    s.textContent = text;
    s.classList.toggle('error', !!error);
  }

  // ---- the stream page and its player ----

  let route = { page: 'overview' };
  let player = null; // { kind, destroy() }
  let kind = 'flv';

  function parseRoute() {
    const m = location.hash.match(/^#\/stream\/(.+)$/);
    if (!m) return { page: 'overview' };
    let key;
    try {
      key = m[1].split('/').map(decodeURIComponent).join('/');
    } catch (_) {
      return { page: 'overview' };
    }
    return { page: 'stream', key };
  }

  // The players are large; load them the first time a stream page is opened.
  const scripts = {};
  function loadScript(src) {
    if (!scripts[src]) {
      scripts[src] = new Promise((resolve, reject) => {
        const s = el('script', { src });
        s.onload = resolve;
        s.onerror = () => reject(new Error('cannot load ' + src));
        document.head.append(s);
      });
    }
    return scripts[src];
  }

  // `query`: what the API says a player adds when reading needs authorization.
  function playUrls(key, query) {
    const http = location.origin;
    const ws = (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host;
    const path = '/' + key.split('/').map(encodeURIComponent).join('/');
    const q = query ? '?' + query : '';
    return {
      'HTTP-FLV': http + path + '.flv' + q,
      'WS-FLV': ws + path + '.flv' + q,
      'HTTP-TS': http + path + '.ts' + q,
      'HTTP-fMP4': http + path + '.mp4' + q,
      'WS-fMP4': ws + path + '.mp4' + q,
      'HLS (TS)': http + path + '.m3u8' + q,
      'LL-HLS (fMP4)': http + path + '/index.m3u8' + q,
      'WebRTC (WHEP)': http + path + '/whep' + q,
    };
  }

  // A fresh viewer token for `key` when the server wants one (it lasts 120 s: a player
  // connects with it, and HLS keeps its token in a cookie from there).
  async function playQuery(key) {
    try {
      const s = await api('GET', 'streams/' + apiPath(key));
      return s && s.play_query ? s.play_query : '';
    } catch (_) {
      return '';
    }
  }

  function stopPlayer() {
    if (player) {
      try { player.destroy(); } catch (_) { /* already torn down */ }
      player = null;
    }
    const v = $('video');
    v.removeAttribute('src');
    v.load();
  }

  function note(text, error) {
    const n = $('player-note');
    n.textContent = text;
    n.classList.toggle('error', !!error);
  }

  let playerGen = 0;
  async function startPlayer(key) {
    stopPlayer();
    // A later start (another stream, kind or refresh) supersedes this one.
    const gen = ++playerGen;
    const v = $('video');
    const want = kind;
    const urls = playUrls(key, await playQuery(key));
    if (gen !== playerGen || want !== kind || parseRoute().key !== key) return;
    try {
      if (want === 'webrtc') {
        const url = urls['WebRTC (WHEP)'];
        const pc = new RTCPeerConnection();
        pc.addTransceiver('video', { direction: 'recvonly' });
        pc.addTransceiver('audio', { direction: 'recvonly' });
        const media = new MediaStream();
        pc.ontrack = (e) => { media.addTrack(e.track); v.srcObject = media; };
        let resource = null;
        player = {
          destroy: () => {
            pc.close();
            v.srcObject = null;
            if (resource) fetch(resource, { method: 'DELETE' }).catch(() => {});
          },
        };
        await pc.setLocalDescription(await pc.createOffer());
        const r = await fetch(url, {
          method: 'POST', headers: { 'Content-Type': 'application/sdp' }, body: pc.localDescription.sdp,
        });
        if (r.status !== 201) {
          note(`WHEP: ${r.status} ${await r.text()}`, true);
          return;
        }
        const location = r.headers.get('Location');
        if (location) resource = new URL(location, url).href;
        await pc.setRemoteDescription({ type: 'answer', sdp: await r.text() });
        if (gen !== playerGen) { player.destroy(); return; }
        note('WebRTC (WHEP) · ' + url);
      } else if (want === 'flv') {
        await loadScript('/console/vendor/mpegts.js');
        if (gen !== playerGen || want !== kind || parseRoute().key !== key) return;
        const mpegts = window.mpegts;
        if (!mpegts.getFeatureList().mseLivePlayback) {
          note('This browser cannot play HTTP-FLV (no Media Source Extensions); try HLS.', true);
          return;
        }
        const p = mpegts.createPlayer(
          { type: 'flv', isLive: true, url: urls['HTTP-FLV'] },
          // Live: play what arrives, and catch up when the buffer grows.
          { enableStashBuffer: false, liveBufferLatencyChasing: true });
        p.on(mpegts.Events.ERROR, (type, detail) => note(`player error: ${type} ${detail}`, true));
        p.attachMediaElement(v);
        p.load();
        player = { destroy: () => { p.pause(); p.unload(); p.detachMediaElement(); p.destroy(); } };
        note('mpegts.js · ' + urls['HTTP-FLV']);
      } else if (want === 'fmp4') {
        await loadScript('/console/fmp4.js');
        if (gen !== playerGen || want !== kind || parseRoute().key !== key) return;
        if (!window.MediaSource) {
          note('This browser cannot play fMP4 (no Media Source Extensions); try HLS.', true);
          return;
        }
        player = window.SluiceFmp4.play(urls['HTTP-fMP4'], v, (m) => note('player error: ' + m, true));
        note('fMP4 (Media Source) · ' + urls['HTTP-fMP4']);
      } else {
        const url = urls['LL-HLS (fMP4)'];
        await loadScript('/console/vendor/hls.light.min.js');
        if (gen !== playerGen || want !== kind || parseRoute().key !== key) return;
        const Hls = window.Hls;
        if (Hls.isSupported()) {
          const h = new Hls({ lowLatencyMode: true });
          h.on(Hls.Events.ERROR, (_, d) => { if (d.fatal) note(`player error: ${d.type} ${d.details}`, true); });
          h.loadSource(url);
          h.attachMedia(v);
          player = { destroy: () => h.destroy() };
          note('hls.js (Low-Latency HLS) · ' + url);
        } else if (v.canPlayType('application/vnd.apple.mpegurl')) {
          // Safari on iOS: no Media Source, but HLS of its own.
          v.src = url;
          note('native HLS · ' + url);
        } else {
          note('This browser cannot play HLS.', true);
          return;
        }
      }
      v.play().catch(() => { /* autoplay refused: the controls remain */ });
    } catch (e) {
      note(String(e.message || e), true);
    }
  }

  function setKind(k) {
    kind = k;
    for (const b of document.querySelectorAll('.toggle button')) {
      b.setAttribute('aria-pressed', String(b.dataset.kind === k));
    }
  }

  for (const b of document.querySelectorAll('.toggle button')) {
    b.addEventListener('click', () => {
      if (b.dataset.kind === kind) return;
      setKind(b.dataset.kind);
      if (route.page === 'stream') startPlayer(route.key);
    });
  }

  function figure(dl, name, value) {
    dl.append(el('dt', {}, name), el('dd', {}, value));
  }

  function renderStream(key) {
    const s = streams.find((x) => x.key === key);
    const badge = $('sp-live');
    badge.textContent = s ? (s.live ? 'live' : 'not live') : 'no such stream';
    badge.className = 'badge' + (s && s.live ? ' live' : '');
    const dl = el('dl', { id: 'sp-figures', class: 'figures' });
    if (s) {
      const v = $('video');
      const pub = s.publisher ? `${s.publisher.protocol} from ${s.publisher.peer} (client ${s.publisher.client})` : '–';
      figure(dl, 'Publisher', pub);
      figure(dl, 'Video', video(s.video) + (s.b_frames ? ' · B-frames: WebRTC players may stall' : ''));
      figure(dl, 'Audio', audio(s.audio));
      figure(dl, 'Bitrate in', bits(s.bitrate_in_kbps * 1000));
      figure(dl, 'Received', `${bytes(s.bytes_in)} · ${s.frames_in} frames`);
      figure(dl, 'Sent', bytes(s.bytes_out));
      figure(dl, 'Viewers', el('span', {}, String(viewerTotal(s.viewers)), ' ', viewerList(s.viewers)));
      figure(dl, 'Skips', String(s.skips));
      figure(dl, 'Ring', `${bytes(s.ring.bytes)} · ${s.ring.frames} frames · ${(s.ring.span_ms / 1000).toFixed(1)} s`);
      figure(dl, 'HLS memory', bytes(s.hls_bytes));
      figure(dl, 'This player', v.currentTime > 0 ? `at ${v.currentTime.toFixed(1)} s` : 'starting…');
    }
    $('sp-figures').replaceWith(dl);
  }

  function renderUrls(key) {
    const dl = el('dl', { id: 'sp-urls', class: 'figures urls' });
    for (const [name, url] of Object.entries(playUrls(key))) {
      figure(dl, name, el('code', {}, url));
    }
    $('sp-urls').replaceWith(dl);
  }

  function show() {
    const next = parseRoute();
    const changed = next.page !== route.page || next.key !== route.key;
    route = next;
    $('overview').hidden = route.page !== 'overview';
    $('stream-page').hidden = route.page !== 'stream';
    if (route.page === 'stream') {
      document.title = route.key + ' · Sluice';
      $('sp-title').textContent = route.key;
      renderUrls(route.key);
      renderStream(route.key);
      if (changed || !player) startPlayer(route.key);
    } else {
      document.title = 'Sluice console';
      stopPlayer();
      drawChart();
    }
  }

  window.addEventListener('hashchange', show);
  window.addEventListener('resize', drawChart);

  // ---- polling ----

  // The cluster's nodes (GET /api/v1/cluster): hidden on a server that is not a node.
  function renderCluster(c) {
    $('cluster-card').hidden = !c || c.node === null;
    if (!c || c.node === null) return;
    $('cluster-count').textContent = c.directory_up
      ? `${c.nodes.length} nodes` : 'directory unreachable';
    const rows = c.nodes.map((n) => el('tr', {},
      el('td', {}, n.id === c.node ? `${n.id} (this one)` : n.id),
      el('td', { class: 'num' }, String(n.load.connections)),
      el('td', { class: 'num' }, String(n.streams.length)),
      el('td', { class: 'num' }, bits(n.load.egress_bps)),
      el('td', { class: 'num' }, Number(n.load.cpu).toFixed(2)),
      el('td', {}, n.draining ? 'draining' : 'serving')));
    $('cluster').tBodies[0].replaceChildren(...rows);
  }

  let timer = null;
  let inFlight = false;

  async function poll() {
    clearTimeout(timer);
    if (inFlight) return;
    inFlight = true;
    $('forget-token').hidden = !token;
    try {
      const [server, s, clients, workers] = await Promise.all([
        api('GET', 'server'), api('GET', 'streams'), api('GET', 'clients'), api('GET', 'workers'),
      ]);
      $('token-form').hidden = true;
      streams = s.streams;
      sample(streams);
      renderServer(server);
      renderStreams(streams);
      renderWorkers(workers.workers);
      // Apart: a directory that does not answer (503) leaves the rest of the page.
      api('GET', 'cluster').then(renderCluster, () => renderCluster({ node: '?', directory_up: false, nodes: [] }));
      renderClients(clients.clients);
      if (route.page === 'stream') renderStream(route.key);
      else drawChart();
      setStatus('updated ' + new Date().toLocaleTimeString());
    } catch (e) {
      if (e instanceof AuthNeeded) setStatus('waiting for a token', true);
      else setStatus('cannot reach the API: ' + (e.message || e), true);
    } finally {
      inFlight = false;
      // Hidden tabs poll too, so the bandwidth history has no holes when one returns.
      timer = setTimeout(poll, POLL_MS);
    }
  }

  show();
  poll();
})();
