// whipload: a neutral WebRTC (WHIP) load client built on pion, the publishing twin of
// whepload. It opens N WHIP sessions, each a PeerConnection with one H.264 and one
// Opus track (sendonly), and sends media paced in real time and looped: the access
// units of an Annex B file (25 fps) and the Opus packets of an Ogg file (20 ms), read
// once and shared by every publisher. It reports sessions connected (ICE and DTLS
// done) and failed, the time to connected, media bytes sent, and the CPU and RSS of
// the server under test (-pid, with its child processes). Traffic stays on loopback:
// local candidates are 127.0.0.1 only, and remote candidates outside 127.0.0.0/8 are
// dropped from the answer before it is applied.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/interceptor"
	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media"
	"github.com/pion/webrtc/v4/pkg/media/h264reader"
	"github.com/pion/webrtc/v4/pkg/media/oggreader"
)

const (
	videoFrame = 40 * time.Millisecond // 25 fps
	audioFrame = 20 * time.Millisecond // one Opus packet per Ogg page
)

type session struct {
	connected   atomic.Bool  // connected now
	connectedMs atomic.Int64 // ms from the start of the session to connected; 0 = never
	failed      atomic.Bool  // disconnected, failed or closed since
	bytes       atomic.Int64 // media bytes written once connected
	err         atomic.Value // string
}

func main() {
	url := flag.String("url", "", "WHIP endpoint, http://127.0.0.1:PORT/app/stream/whip; {i} becomes the publisher's index")
	n := flag.Int("n", 10, "publishers")
	dur := flag.Duration("duration", 20*time.Second, "how long to publish after the ramp")
	ramp := flag.Int("ramp", 50, "sessions started per second")
	pid := flag.Int("pid", 0, "server process to measure (with its children)")
	out := flag.String("json", "", "write the summary as JSON here")
	token := flag.String("token", "", "bearer token for the WHIP POST")
	h264 := flag.String("h264", "whip.h264", "H.264 Annex B file (25 fps, SPS and PPS before each IDR)")
	ogg := flag.String("ogg", "whip.ogg", "Ogg Opus file, one 20 ms packet per page")
	flag.Parse()
	if *url == "" || !isLoopbackURL(*url) {
		fmt.Fprintln(os.Stderr, "whipload: -url must be an http URL on 127.0.0.0/8")
		os.Exit(2)
	}
	video, err := readH264(*h264)
	if err != nil {
		fmt.Fprintln(os.Stderr, "whipload:", err)
		os.Exit(2)
	}
	audio, err := readOpus(*ogg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "whipload:", err)
		os.Exit(2)
	}
	se := webrtc.SettingEngine{}
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	se.SetIPFilter(func(ip net.IP) bool { return ip.IsLoopback() })
	se.SetIncludeLoopbackCandidate(true)
	me := &webrtc.MediaEngine{}
	if err := me.RegisterDefaultCodecs(); err != nil {
		panic(err)
	}
	// What a browser's sender does too: sender reports, and retransmission on NACK.
	ir := &interceptor.Registry{}
	if err := webrtc.ConfigureRTCPReports(ir); err != nil {
		panic(err)
	}
	if err := webrtc.ConfigureNack(me, ir); err != nil {
		panic(err)
	}
	api := webrtc.NewAPI(webrtc.WithSettingEngine(se), webrtc.WithMediaEngine(me), webrtc.WithInterceptorRegistry(ir))
	client := &http.Client{Timeout: 10 * time.Second}

	sessions := make([]*session, *n)
	pcs := make([]*webrtc.PeerConnection, *n)
	stop := make(chan struct{})
	var wg, senders sync.WaitGroup
	deadline := time.Now().Add(time.Duration(float64(*n)/float64(*ramp)*float64(time.Second)) + *dur)
	hard := time.AfterFunc(time.Until(deadline)+30*time.Second, func() { fmt.Fprintln(os.Stderr, "whipload: hard deadline"); os.Exit(3) })
	defer hard.Stop()
	for i := 0; i < *n; i++ {
		s := &session{}
		sessions[i] = s
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			u := strings.ReplaceAll(*url, "{i}", strconv.Itoa(i))
			pc, vt, at, err := start(api, client, u, *token, s)
			pcs[i] = pc
			if err != nil {
				s.err.Store(err.Error())
				return
			}
			senders.Add(1)
			go func() {
				defer senders.Done()
				send(s, vt, at, video, audio, stop)
			}()
		}(i)
		time.Sleep(time.Second / time.Duration(*ramp))
	}
	wg.Wait()
	// measure from the end of the ramp
	time.Sleep(2 * time.Second)
	c0, r0 := procTicks(*pid)
	b0 := sumBytes(sessions)
	m0 := time.Now()
	time.Sleep(time.Until(deadline))
	c1, r1 := procTicks(*pid)
	b1 := sumBytes(sessions)
	wall := time.Since(m0).Seconds()
	close(stop)
	senders.Wait()
	summary(sessions, *n, wall, b1-b0, c1-c0, r0, r1, *pid, *out)
	for _, pc := range pcs {
		if pc != nil {
			pc.Close()
		}
	}
}

func isLoopbackURL(u string) bool {
	rest, ok := strings.CutPrefix(u, "http://")
	if !ok {
		return false
	}
	host := rest
	if i := strings.IndexByte(host, '/'); i >= 0 {
		host = host[:i]
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// readH264: the file's access units, each its NAL units with 4-byte start codes (what
// pion's H.264 payloader splits). A unit starts at an AUD, SPS or PPS after a slice,
// or at a slice whose first_mb_in_slice is 0 (its first bit set) after a slice.
func readH264(path string) ([][]byte, error) {
	f, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r, err := h264reader.NewReader(bytes.NewReader(f))
	if err != nil {
		return nil, err
	}
	var units [][]byte
	var cur []byte
	slice := false
	for {
		nal, err := r.NextNAL()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		t := nal.UnitType
		isSlice := t == h264reader.NalUnitTypeCodedSliceNonIdr || t == h264reader.NalUnitTypeCodedSliceIdr
		starts := t == h264reader.NalUnitTypeAUD || t == h264reader.NalUnitTypeSPS || t == h264reader.NalUnitTypePPS ||
			(isSlice && len(nal.Data) > 1 && nal.Data[1]&0x80 != 0)
		if slice && starts {
			units = append(units, cur)
			cur, slice = nil, false
		}
		if t == h264reader.NalUnitTypeAUD {
			continue
		}
		cur = append(cur, 0, 0, 0, 1)
		cur = append(cur, nal.Data...)
		slice = slice || isSlice
	}
	if slice {
		units = append(units, cur)
	}
	if len(units) == 0 {
		return nil, fmt.Errorf("%s: no H.264 access units", path)
	}
	return units, nil
}

// readOpus: the file's Opus packets, one per Ogg page after OpusHead and OpusTags
// (ffmpeg -page_duration 20000 writes them so).
func readOpus(path string) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, _, err := oggreader.NewWith(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var packets [][]byte
	var last uint64
	for {
		payload, h, err := r.ParseNextPage()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if bytes.HasPrefix(payload, []byte("OpusTags")) {
			continue
		}
		if len(packets) > 0 && h.GranulePosition-last > 960 {
			return nil, fmt.Errorf("%s: a page holds more than 20 ms (write it with -page_duration 20000)", path)
		}
		last = h.GranulePosition
		packets = append(packets, payload)
	}
	if len(packets) == 0 {
		return nil, fmt.Errorf("%s: no Opus packets", path)
	}
	return packets, nil
}

func start(api *webrtc.API, client *http.Client, url, token string, s *session) (*webrtc.PeerConnection, *webrtc.TrackLocalStaticSample, *webrtc.TrackLocalStaticSample, error) {
	pc, err := api.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		return nil, nil, nil, err
	}
	vt, err := webrtc.NewTrackLocalStaticSample(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeH264, ClockRate: 90000,
		SDPFmtpLine: "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f"}, "video", "whipload")
	if err != nil {
		return pc, nil, nil, err
	}
	at, err := webrtc.NewTrackLocalStaticSample(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2}, "audio", "whipload")
	if err != nil {
		return pc, nil, nil, err
	}
	for _, t := range []*webrtc.TrackLocalStaticSample{vt, at} {
		tr, err := pc.AddTransceiverFromTrack(t, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionSendonly})
		if err != nil {
			return pc, nil, nil, err
		}
		// RTCP must be read for the interceptors (NACK, reports) to see it.
		go func(sender *webrtc.RTPSender) {
			buf := make([]byte, 1500)
			for {
				if _, _, err := sender.Read(buf); err != nil {
					return
				}
			}
		}(tr.Sender())
	}
	began := time.Now()
	pc.OnConnectionStateChange(func(st webrtc.PeerConnectionState) {
		switch st {
		case webrtc.PeerConnectionStateConnected:
			s.connectedMs.CompareAndSwap(0, time.Since(began).Milliseconds()+1)
			s.connected.Store(true)
		case webrtc.PeerConnectionStateDisconnected, webrtc.PeerConnectionStateFailed, webrtc.PeerConnectionStateClosed:
			// The server's refusal after ICE and DTLS (a limit) reads so too.
			s.connected.Store(false)
			s.failed.Store(true)
		}
	})
	offer, err := pc.CreateOffer(nil)
	if err != nil {
		return pc, nil, nil, err
	}
	gathered := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(offer); err != nil {
		return pc, nil, nil, err
	}
	<-gathered
	req, _ := http.NewRequest("POST", url, bytes.NewBufferString(pc.LocalDescription().SDP))
	req.Header.Set("Content-Type", "application/sdp")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return pc, nil, nil, err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if resp.StatusCode != 201 {
		return pc, nil, nil, fmt.Errorf("WHIP POST: HTTP %d", resp.StatusCode)
	}
	answer := loopbackOnly(string(body))
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: answer}); err != nil {
		return pc, nil, nil, err
	}
	return pc, vt, at, nil
}

// send paces the shared media in real time, looped, from the publisher's first
// access unit: one Opus packet every 20 ms and an access unit every other one. Media
// written before the session is connected is dropped by pion and not counted.
func send(s *session, vt, at *webrtc.TrackLocalStaticSample, video, audio [][]byte, stop <-chan struct{}) {
	tick := time.NewTicker(audioFrame)
	defer tick.Stop()
	var a, v int
	for k := 0; ; k++ {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		on := s.connected.Load()
		if err := at.WriteSample(media.Sample{Data: audio[a], Duration: audioFrame}); err == nil && on {
			s.bytes.Add(int64(len(audio[a])))
		}
		a = (a + 1) % len(audio)
		if k%2 == 0 {
			if err := vt.WriteSample(media.Sample{Data: video[v], Duration: videoFrame}); err == nil && on {
				s.bytes.Add(int64(len(video[v])))
			}
			v = (v + 1) % len(video)
		}
	}
}

// loopbackOnly drops candidate lines whose address is not in 127.0.0.0/8.
func loopbackOnly(sdp string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(sdp, "\n") {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "a=candidate:") {
			f := strings.Fields(t)
			if len(f) < 6 || net.ParseIP(f[4]) == nil || !net.ParseIP(f[4]).IsLoopback() {
				continue
			}
		}
		b.WriteString(line)
	}
	return b.String()
}

func sumBytes(ss []*session) int64 {
	var t int64
	for _, s := range ss {
		t += s.bytes.Load()
	}
	return t
}

// procTicks: utime+stime ticks and RSS (KB) of pid and its children.
func procTicks(pid int) (int64, int64) {
	if pid == 0 {
		return 0, 0
	}
	pids := []int{pid}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, _, ok := stat(p); ok && pp == pid {
			pids = append(pids, p)
		}
	}
	var ticks, rss int64
	for _, p := range pids {
		if _, t, ok := stat(p); ok {
			ticks += t
		}
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/status")
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "VmRSS:") {
				f := strings.Fields(l)
				if len(f) > 1 {
					v, _ := strconv.ParseInt(f[1], 10, 64)
					rss += v
				}
			}
		}
	}
	return ticks, rss
}

func stat(pid int) (ppid int, ticks int64, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return ppid, ut + st, true
}

func pct(v []int64, p float64) int64 {
	if len(v) == 0 {
		return -1
	}
	sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
	return v[int(p*float64(len(v)-1))]
}

func summary(ss []*session, n int, wall float64, bytes, ticks, r0, r1 int64, pid int, out string) {
	var conn, failed int
	var times []int64
	errs := map[string]int{}
	for _, s := range ss {
		e, hasErr := s.err.Load().(string)
		if hasErr {
			errs[e]++
		}
		if s.connected.Load() && !s.failed.Load() {
			conn++
		} else {
			failed++
		}
		if v := s.connectedMs.Load(); v > 0 {
			times = append(times, v)
		}
	}
	res := map[string]any{
		"sessions": n, "connected": conn, "failed": failed,
		"connected_ms_p50": pct(times, 0.5), "connected_ms_p99": pct(times, 0.99),
		"bytes_in_window": bytes, "window_s": wall,
		"mbit_s_per_session": float64(bytes) * 8 / 1e6 / wall / float64(max(conn, 1)),
		"errors":             errs,
	}
	if pid != 0 {
		cpu := float64(ticks) / 100
		res["server_cpu_s"] = cpu
		res["server_cores"] = cpu / wall
		if bytes > 0 {
			res["server_cpu_s_per_gb"] = cpu / (float64(bytes) / 1e9)
		}
		res["server_rss_kb_start"] = r0
		res["server_rss_kb_end"] = r1
	}
	js, _ := json.MarshalIndent(res, "", "  ")
	if out != "" {
		os.WriteFile(out, js, 0o644)
	}
	fmt.Printf("whip n=%d connected=%d failed=%d connected_p50=%dms connected_p99=%dms mbit/s/session=%.3f errors=%v",
		n, conn, failed, pct(times, 0.5), pct(times, 0.99), res["mbit_s_per_session"], errs)
	if v, ok := res["server_cpu_s_per_gb"]; ok {
		fmt.Printf(" server=%.2fCPU-s/GB cores=%.3f rss=%dKB", v, res["server_cores"], r1)
	}
	fmt.Println()
}
