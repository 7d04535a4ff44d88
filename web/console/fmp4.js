// A small Media Source player for Sluice's fragmented MP4 live streams: HTTP-fMP4
// (`http://HOST/app/name.mp4`, read with fetch as it comes) and WebSocket-fMP4
// (`ws://HOST/app/name.mp4`, one binary message per fragment).
//
// The stream is an init segment (`ftyp` + `moov`) and then a `moof` + `mdat` per frame
// from a keyframe on. The player reads the codecs from the init segment (MSE needs them
// before it takes any media), then appends the bytes as they arrive. When the stream's
// tracks change, Sluice ends the stream; a player that wants to go on connects again.
//
// Use: `const p = SluiceFmp4.play(url, videoElement, (message) => ...); p.destroy();`
(function () {
  'use strict';

  // Seconds of media kept behind the playhead; older is removed so the buffer stays small.
  const KEEP_S = 20;
  // Further behind the live edge than this, the player jumps near it.
  const MAX_BEHIND_S = 3;

  const text = (b, at) => String.fromCharCode(b[at], b[at + 1], b[at + 2], b[at + 3]);
  const u32 = (b, at) => ((b[at] << 24) | (b[at + 1] << 16) | (b[at + 2] << 8) | b[at + 3]) >>> 0;
  const hex = (n) => n.toString(16).padStart(2, '0');

  // The boxes between `start` and `end` of `b`: { type, body, end }.
  function boxes(b, start, end) {
    const out = [];
    let at = start;
    while (at + 8 <= end) {
      const size = u32(b, at);
      if (size < 8 || at + size > end) break;
      out.push({ type: text(b, at + 4), body: at + 8, end: at + size });
      at += size;
    }
    return out;
  }

  function child(b, box, type, skip) {
    return boxes(b, box.body + (skip || 0), box.end).find((c) => c.type === type);
  }

  // The RFC 6381 codec of one sample entry, or null for one we do not know.
  function codecOf(b, entry) {
    const visual = 78; // SampleEntry (8) + VisualSampleEntry fields (70)
    const audio = 28; // SampleEntry (8) + AudioSampleEntry fields (20)
    switch (entry.type) {
      case 'avc1': case 'avc3': {
        const c = child(b, entry, 'avcC', visual);
        return c ? entry.type + '.' + hex(b[c.body + 1]) + hex(b[c.body + 2]) + hex(b[c.body + 3]) : null;
      }
      case 'hvc1': case 'hev1': {
        const c = child(b, entry, 'hvcC', visual);
        if (!c) return null;
        const p = b[c.body + 1];
        const space = ['', 'A', 'B', 'C'][p >> 6];
        let compat = u32(b, c.body + 2), rev = 0;
        for (let i = 0; i < 32; i++) { rev = (rev << 1) | (compat & 1); compat >>>= 1; }
        const tier = p & 0x20 ? 'H' : 'L';
        return entry.type + '.' + space + (p & 0x1f) + '.' + (rev >>> 0).toString(16).toUpperCase() +
          '.' + tier + b[c.body + 12] + '.B0';
      }
      case 'av01': {
        const c = child(b, entry, 'av1C', visual);
        if (!c) return 'av01.0.04M.08';
        const profile = b[c.body + 1] >> 5, level = b[c.body + 1] & 0x1f;
        const f = b[c.body + 2];
        const depth = f & 0x40 ? (profile === 2 && f & 0x20 ? 12 : 10) : 8;
        return 'av01.' + profile + '.' + String(level).padStart(2, '0') + (f & 0x80 ? 'H' : 'M') +
          '.' + String(depth).padStart(2, '0');
      }
      case 'vp09': {
        const c = child(b, entry, 'vpcC', visual);
        if (!c) return 'vp09.00.31.08';
        const at = c.body + 4; // full box: version and flags first
        return 'vp09.' + String(b[at]).padStart(2, '0') + '.' + String(b[at + 1]).padStart(2, '0') +
          '.' + String(b[at + 2] >> 4).padStart(2, '0');
      }
      case 'mp4a': return 'mp4a.40.2';
      case 'Opus': return 'opus';
      default: return null;
    }
  }

  // The MIME type (with codecs) the init segment `b` describes.
  function mimeOf(b) {
    const moov = boxes(b, 0, b.length).find((x) => x.type === 'moov');
    if (!moov) throw new Error('no moov in the init segment');
    const codecs = [];
    let video = false;
    for (const trak of boxes(b, moov.body, moov.end).filter((x) => x.type === 'trak')) {
      const path = ['mdia', 'minf', 'stbl', 'stsd'];
      let box = trak;
      for (const t of path) box = box && child(b, box, t);
      if (!box) continue;
      const entry = boxes(b, box.body + 8, box.end)[0]; // full box + entry_count
      const codec = entry && codecOf(b, entry);
      if (!codec) throw new Error('unknown sample entry ' + (entry && entry.type));
      if (entry.type !== 'mp4a' && entry.type !== 'Opus') video = true;
      codecs.push(codec);
    }
    return (video ? 'video' : 'audio') + '/mp4; codecs="' + codecs.join(',') + '"';
  }

  function play(url, video, onError) {
    const fail = onError || ((m) => console.error('fmp4:', m));
    const source = new MediaSource();
    video.src = URL.createObjectURL(source);
    let buffer = null;
    let head = new Uint8Array(0); // bytes before the init segment was whole
    const queue = [];
    let stopped = false;
    let socket = null;
    const abort = new AbortController();

    function pump() {
      if (!buffer || buffer.updating || stopped) return;
      const t = video.currentTime;
      const b = video.buffered;
      if (b.length) {
        if (t < b.start(0) || b.end(b.length - 1) - t > MAX_BEHIND_S) {
          // Start at (or catch up to) what is there: the stream's times are the server's.
          video.currentTime = Math.max(b.start(0), b.end(b.length - 1) - 0.5);
        } else if (t - b.start(0) > KEEP_S * 2) {
          buffer.remove(b.start(0), t - KEEP_S);
          return;
        }
      }
      if (!queue.length) return;
      let n = 0;
      for (const c of queue) n += c.length;
      const all = new Uint8Array(n);
      let at = 0;
      for (const c of queue.splice(0)) { all.set(c, at); at += c.length; }
      try {
        buffer.appendBuffer(all);
      } catch (e) {
        fail('append: ' + e);
        stop();
      }
    }

    function input(chunk) {
      if (stopped) return;
      if (buffer) { queue.push(chunk); pump(); return; }
      const joined = new Uint8Array(head.length + chunk.length);
      joined.set(head);
      joined.set(chunk, head.length);
      head = joined;
      const top = boxes(head, 0, head.length);
      const moov = top.find((x) => x.type === 'moov');
      if (!moov) return;
      if (source.readyState !== 'open') return; // sourceopen calls again
      let mime;
      try {
        mime = mimeOf(head.subarray(0, moov.end));
        buffer = source.addSourceBuffer(mime);
      } catch (e) {
        fail(String(e.message || e));
        stop();
        return;
      }
      buffer.addEventListener('updateend', pump);
      buffer.addEventListener('error', () => fail('source buffer error'));
      queue.push(head);
      head = null;
      pump();
    }

    source.addEventListener('sourceopen', () => { if (head && head.length) input(new Uint8Array(0)); });
    const timer = setInterval(pump, 500);

    function stop() {
      stopped = true;
      clearInterval(timer);
      abort.abort();
      if (socket) socket.close();
    }

    if (/^wss?:/.test(url)) {
      socket = new WebSocket(url);
      socket.binaryType = 'arraybuffer';
      socket.onmessage = (e) => input(new Uint8Array(e.data));
      socket.onerror = () => fail('websocket error');
      socket.onclose = () => { if (!stopped) fail('the stream ended'); };
    } else {
      fetch(url, { signal: abort.signal }).then(async (r) => {
        if (!r.ok) throw new Error('HTTP ' + r.status);
        const reader = r.body.getReader();
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          input(value);
        }
        if (!stopped) fail('the stream ended');
      }).catch((e) => { if (!stopped) fail(String(e.message || e)); });
    }
    return { destroy: stop };
  }

  window.SluiceFmp4 = { play, mimeOf };
})();
