// Command proxy-exporter serves a node proxy's metrics in Prometheus' text format on a port of its own, and passes
// to its own stdout the lines of tinyproxy's log an operator needs (every line but the once-a-second probe's).
//
// It reads two things tinyproxy already makes, and nothing else: its stats page (over loopback, with the StatHost
// name; connections open, connections accepted, bad, denied) and its log file (the causes: Allow, Filter, capacity,
// upstream failures, config reloads; and the access log's lines, patch 0025: each passed on as it is, counted by
// result, and the lines tinyproxy dropped over its AccessLogRate summed from its access-dropped lines). tinyproxy never waits for it: the log is a regular file in a volume both
// containers mount, which tinyproxy appends to and the exporter reads, then frees what it has read by punching a
// hole (the file's size grows, its blocks do not). The exporter's death leaves tinyproxy serving; the file then grows
// until the exporter is back, which resumes where it stopped (its offset is kept beside the log).
//
// Standard library only; built with CGO_ENABLED=0 -trimpath by scripts/image.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	fallocPunchHole = 0x02 // FALLOC_FL_PUNCH_HOLE
	fallocKeepSize  = 0x01 // FALLOC_FL_KEEP_SIZE
	seekData        = 3    // SEEK_DATA
	blockSize       = 4096
	maxLine         = 64 << 10
)

// A log line's message, after tinyproxy's `LEVEL     Mon dd hh:mm:ss.mmm [pid]: ` prefix, and what it counts.
var (
	linePattern      = regexp.MustCompile(`^([A-Z]+) +[A-Z][a-z]{2} +\d+ \d\d:\d\d:\d\d\.\d{3} \[\d+\]: (.*)$`)
	userinfoPattern  = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s"]*@`)
	generationFormat = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)
	acceptRefusal    = regexp.MustCompile(`^Refused (\d+) connection\(s\) at accept: (.*) \(last from [0-9A-Fa-f.:]+\)$`)
	statsPatterns    = map[string]*regexp.Regexp{
		"open":   regexp.MustCompile(`Number of open connections: (\d+)`),
		"reqs":   regexp.MustCompile(`Number of requests: (\d+)`),
		"bad":    regexp.MustCompile(`Number of bad connections: (\d+)`),
		"denied": regexp.MustCompile(`Number of denied connections: (\d+)`),
	}
)

const statHostMessage = "Request for the stathost."

// The access log's messages (patch 0025): one JSON object each.
const (
	accessPrefix  = `{"log":"access",`
	droppedPrefix = `{"log":"access-dropped",`
)

// countAccess counts an access line by its result, or an access-dropped line's count; false when msg is neither.
func (c *counters) countAccess(msg string) bool {
	switch {
	case strings.HasPrefix(msg, accessPrefix):
		var line struct {
			Result string `json:"result"`
		}
		if json.Unmarshal([]byte(msg), &line) == nil {
			if _, ok := c.access[line.Result]; ok {
				c.access[line.Result]++
			}
		}
		return true
	case strings.HasPrefix(msg, droppedPrefix):
		var line struct {
			Dropped uint64 `json:"dropped"`
		}
		if json.Unmarshal([]byte(msg), &line) == nil {
			c.accessDropped += line.Dropped
		}
		return true
	}
	return false
}

type counters struct {
	stathost       uint64
	refusals       map[string]uint64 // by cause
	upstream       map[string]uint64 // by cause
	capacity       uint64
	deadlines      map[string]uint64 // by phase
	reloads        map[string]uint64 // by result
	starts         uint64
	messages       map[string]uint64 // by level
	access         map[string]uint64 // access lines, by result
	accessDropped  uint64            // access lines tinyproxy dropped over AccessLogRate
	generation     string
	generationRead bool
	starting       bool // between "Initializing" and the first load, which is no reload
}

func newCounters() *counters {
	return &counters{
		refusals:  map[string]uint64{"allow": 0, "filter": 0, "connect_port": 0, "client_share": 0},
		deadlines: map[string]uint64{"request_head": 0, "response_head": 0},
		upstream:  map[string]uint64{"unreachable": 0, "no_upstream": 0, "auth": 0},
		reloads:   map[string]uint64{"success": 0, "failure": 0},
		messages:  map[string]uint64{"critical": 0, "error": 0, "warning": 0, "notice": 0},
		access:    map[string]uint64{"ok": 0, "refused": 0, "error": 0},
	}
}

type exporter struct {
	mu             sync.Mutex
	logPath        string
	statsAddr      string
	statHost       string
	generationPath string
	countersPath   string            // the kernel rules' listing (nft -j), "" when not exported
	firewall       map[string]uint64 // by rule: the last listing that parsed
	maxClients     int
	out            io.Writer
	client         *http.Client

	file    *os.File
	offset  int64
	partial []byte
	c       *counters
}

// count takes one log line: counts it and says whether it goes to stdout.
func (e *exporter) count(line string) bool {
	m := linePattern.FindStringSubmatch(line)
	if m == nil {
		return true
	}
	level, msg := strings.ToLower(m[1]), m[2]
	if _, ok := e.c.messages[level]; ok {
		e.c.messages[level]++
	}
	if e.c.countAccess(msg) {
		return true // passed on: an access line holds no '@' (tinyproxy keeps only what follows a host's last '@'), so the redaction below leaves it as it is
	}
	switch {
	case msg == statHostMessage:
		e.c.stathost++
		return false
	case strings.HasPrefix(msg, "Unauthorized connection from "):
		e.c.refusals["allow"]++
	case strings.HasPrefix(msg, "Proxying refused on filtered "):
		e.c.refusals["filter"]++
	case strings.HasPrefix(msg, "Maximum number of connections reached"): // before patch 0006
		e.c.capacity++
	case acceptRefusal.MatchString(msg): // patch 0006: a line a second per cause, with the count
		m := acceptRefusal.FindStringSubmatch(msg)
		n, _ := strconv.ParseUint(m[1], 10, 64)
		switch { // "not in Allow" is not counted here: check_acl logs each such connection ("Unauthorized ...")
		case strings.HasPrefix(m[2], "over its client's share"):
			e.c.refusals["client_share"] += n
		case strings.HasPrefix(m[2], "MaxClients in use"):
			e.c.capacity += n
		}
	case strings.HasPrefix(msg, "Closed a connection from ") && strings.Contains(msg, " within RequestHeadTimeout "): // patch 0007
		e.c.deadlines["request_head"]++
	case strings.HasPrefix(msg, "No response head from ") && strings.Contains(msg, " within ResponseHeadTimeout "): // patch 0007
		e.c.deadlines["response_head"]++
	case strings.HasPrefix(msg, "Refused CONNECT method on port "): // patch 0005: at Notice
		e.c.refusals["connect_port"]++
	case msg == "Could not connect to upstream proxy.":
		e.c.upstream["unreachable"]++
	case strings.HasPrefix(msg, "No upstream proxy defined for "):
		e.c.upstream["no_upstream"]++
	case strings.HasPrefix(msg, "Upstream proxy ") && strings.HasSuffix(msg, " 407 Proxy Authentication Required"): // patch 0005
		e.c.upstream["auth"]++
	case msg == "Reloading config file finished":
		if !e.c.starting {
			e.c.reloads["success"]++
		}
		e.c.starting = false
		e.readGeneration()
	case msg == "Reloading config file failed!":
		if !e.c.starting {
			e.c.reloads["failure"]++
		}
		e.c.starting = false
	case strings.HasPrefix(msg, "Initializing tinyproxy"):
		e.c.starts++
		e.c.starting = true
		e.readGeneration()
	}
	return true
}

// readGeneration takes the config generation the pod provides, at tinyproxy's start and at each reload it logs: the
// generation tinyproxy loaded. A file that is missing or not one short token gives no generation.
func (e *exporter) readGeneration() {
	if e.generationPath == "" {
		return
	}
	e.c.generationRead = true
	data, err := os.ReadFile(e.generationPath)
	value := strings.TrimSpace(string(data))
	if err != nil || !generationFormat.MatchString(value) {
		e.c.generation = ""
		return
	}
	e.c.generation = value
}

// drain reads the log from where it stopped to its end, counts and passes on whole lines, then frees what it read.
func (e *exporter) drain() {
	if e.file == nil {
		f, err := os.OpenFile(e.logPath, os.O_RDWR, 0)
		if err != nil {
			return
		}
		e.file = f
		e.offset = e.resumeOffset()
		e.partial = nil
	} else if e.replaced() {
		e.drainFile()
		e.file.Close()
		e.file = nil
		e.drain()
		return
	}
	e.drainFile()
}

func (e *exporter) drainFile() {
	if _, err := e.file.Seek(e.offset, io.SeekStart); err != nil {
		return
	}
	r := bufio.NewReaderSize(e.file, 64<<10)
	for {
		chunk, err := r.ReadSlice('\n')
		e.offset += int64(len(chunk))
		if err == nil {
			line := append(e.partial, chunk[:len(chunk)-1]...)
			e.partial = nil
			e.take(string(line))
			continue
		}
		if errors.Is(err, bufio.ErrBufferFull) || (len(chunk) > 0 && err == io.EOF) {
			e.partial = append(e.partial, chunk...)
			if len(e.partial) > maxLine {
				e.take(string(e.partial))
				e.partial = nil
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
		}
		break
	}
	e.saveOffset()
	if hole := e.offset - int64(len(e.partial)); hole >= blockSize {
		// Errors (a file system without holes) leave the file growing, never tinyproxy failing.
		_ = syscall.Fallocate(int(e.file.Fd()), fallocPunchHole|fallocKeepSize, 0, hole/blockSize*blockSize)
	}
}

func (e *exporter) take(line string) {
	if e.count(line) {
		fmt.Fprintln(e.out, userinfoPattern.ReplaceAllString(line, "${1}<redacted>@"))
	}
}

// replaced says whether the path now names another file than the one open (a new volume, a file removed).
func (e *exporter) replaced() bool {
	a, err1 := os.Stat(e.logPath)
	b, err2 := e.file.Stat()
	if err1 != nil || err2 != nil {
		return err1 == nil
	}
	return !os.SameFile(a, b)
}

func (e *exporter) statePath() string { return e.logPath + ".offset" }

// resumeOffset is where a restarted exporter goes on: the offset it saved for this file, else the first byte not
// punched away, else the start.
func (e *exporter) resumeOffset() int64 {
	info, err := e.file.Stat()
	if err != nil {
		return 0
	}
	st, _ := info.Sys().(*syscall.Stat_t)
	if data, err := os.ReadFile(e.statePath()); err == nil && st != nil {
		var ino uint64
		var off int64
		if n, _ := fmt.Sscanf(string(data), "%d %d", &ino, &off); n == 2 && ino == st.Ino && off <= info.Size() {
			return off
		}
	}
	if off, err := syscall.Seek(int(e.file.Fd()), 0, seekData); err == nil {
		return off
	}
	return 0
}

func (e *exporter) saveOffset() {
	info, err := e.file.Stat()
	if err != nil {
		return
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return
	}
	tmp := e.statePath() + ".new"
	if os.WriteFile(tmp, []byte(fmt.Sprintf("%d %d\n", st.Ino, e.offset-int64(len(e.partial)))), 0o600) == nil {
		_ = os.Rename(tmp, e.statePath())
	}
}

// stats fetches tinyproxy's stats page over loopback, as the kubelet's probe does.
func (e *exporter) stats() (map[string]uint64, error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+e.statsAddr+"/", nil)
	if err != nil {
		return nil, err
	}
	req.Host = e.statHost
	resp, err := e.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("stats page: HTTP %d", resp.StatusCode)
	}
	values := map[string]uint64{}
	for name, p := range statsPatterns {
		m := p.FindSubmatch(body)
		if m == nil {
			return nil, fmt.Errorf("stats page: no %q", name)
		}
		v, err := strconv.ParseUint(string(m[1]), 10, 64)
		if err != nil {
			return nil, err
		}
		values[name] = v
	}
	return values, nil
}

type family struct {
	name, kind, help string
	samples          []string
}

func (f *family) add(labels string, value uint64) {
	f.samples = append(f.samples, fmt.Sprintf("%s%s %d", f.name, labels, value))
}

func (e *exporter) metrics() []byte {
	// The stats first, then the log: the stats request's own log line is then counted, so that
	// connections minus stathost requests is exactly the clients' connections.
	values, err := e.stats()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.drain()
	var fams []*family
	newFam := func(name, kind, help string) *family {
		f := &family{name: name, kind: kind, help: help}
		fams = append(fams, f)
		return f
	}
	up := newFam("tinyproxy_up", "gauge", "1 when tinyproxy's stats page answered this scrape.")
	if err != nil {
		up.add("", 0)
	} else {
		up.add("", 1)
		open := values["open"]
		if open > 0 {
			open-- // the stats request's own connection
		}
		newFam("tinyproxy_connections_open", "gauge", "Connections open, the exporter's own left out.").add("", open)
		newFam("tinyproxy_connections_total", "counter",
			"Connections tinyproxy accepted (its 'requests'), the probes' and the exporter's included.").add("", values["reqs"])
		newFam("tinyproxy_bad_connections_total", "counter",
			"Requests tinyproxy judged bad: malformed, a CONNECT port not allowed, and (counted twice) the Filter's refusals.").add("", values["bad"])
		newFam("tinyproxy_denied_connections_total", "counter",
			"Connections refused by Allow, Filter or authentication.").add("", values["denied"])
	}
	if e.maxClients > 0 {
		newFam("tinyproxy_max_clients", "gauge", "tinyproxy's MaxClients.").add("", uint64(e.maxClients))
	}
	c := e.c
	newFam("tinyproxy_stathost_requests_total", "counter",
		"Requests for the stats page (probes, the exporter), from the log since the exporter started.").add("", c.stathost)
	ref := newFam("tinyproxy_refusals_total", "counter", "Requests refused, by cause, from the log.")
	for _, k := range sortedKeys(c.refusals) {
		ref.add(fmt.Sprintf(`{cause="%s"}`, k), c.refusals[k])
	}
	newFam("tinyproxy_capacity_reached_total", "counter",
		"Connections refused at accept because MaxClients (less the loopback reserve, for other clients than loopback) was in use, from the log.").add("", c.capacity)
	dl := newFam("tinyproxy_deadline_exceeded_total", "counter",
		"Connections closed at a phase's deadline, by phase (request_head: RequestHeadTimeout; response_head: ResponseHeadTimeout, answered 504), from the log.")
	for _, k := range sortedKeys(c.deadlines) {
		dl.add(fmt.Sprintf(`{phase="%s"}`, k), c.deadlines[k])
	}
	upf := newFam("tinyproxy_upstream_failures_total", "counter",
		"Requests the upstream proxy did not serve, by cause (unreachable, no_upstream, auth: it answered 407), from the log.")
	for _, k := range sortedKeys(c.upstream) {
		upf.add(fmt.Sprintf(`{cause="%s"}`, k), c.upstream[k])
	}
	rel := newFam("tinyproxy_config_reloads_total", "counter", "Config reloads, by result, from the log.")
	for _, k := range sortedKeys(c.reloads) {
		rel.add(fmt.Sprintf(`{result="%s"}`, k), c.reloads[k])
	}
	newFam("tinyproxy_starts_total", "counter", "tinyproxy starts seen in the log.").add("", c.starts)
	acc := newFam("tinyproxy_access_log_lines_total", "counter",
		"Access log lines (one per connection, at most AccessLogRate a second), by result, from the log.")
	for _, k := range sortedKeys(c.access) {
		acc.add(fmt.Sprintf(`{result="%s"}`, k), c.access[k])
	}
	newFam("tinyproxy_access_log_dropped_total", "counter",
		"Access log lines tinyproxy dropped over AccessLogRate (its access-dropped lines' counts), from the log.").
		add("", c.accessDropped)
	msgs := newFam("tinyproxy_log_messages_total", "counter", "Log lines, by level.")
	for _, k := range sortedKeys(c.messages) {
		msgs.add(fmt.Sprintf(`{level="%s"}`, k), c.messages[k])
	}
	if e.countersPath != "" {
		e.readCounters()
		if e.firewall != nil {
			fw := newFam("tinyproxy_firewall_refusals_total", "counter",
				"Connections the kernel rules refused, by rule (their counters, listed every 15 s): tinyproxy's own to a "+
					"refused destination (node, deny-ranges, cluster-ranges), and clients' beyond their rate of new "+
					"connections (per-client-rate).")
			for _, k := range sortedKeys(e.firewall) {
				fw.add(fmt.Sprintf(`{rule="%s"}`, k), e.firewall[k])
			}
		}
	}
	if e.generationPath != "" {
		if !c.generationRead {
			e.readGeneration()
		}
		if c.generation != "" {
			newFam("tinyproxy_config_info", "gauge", "The config generation tinyproxy last loaded.").
				add(fmt.Sprintf(`{generation="%s"}`, c.generation), 1)
		}
	}
	var b bytes.Buffer
	for _, f := range fams {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", f.name, f.help, f.name, f.kind)
		for _, s := range f.samples {
			b.WriteString(s + "\n")
		}
	}
	return b.Bytes()
}

// firewallRules are the refusing rules' comments in the proxy's nftables table (render/proxy.py FIREWALL_RULES).
var firewallRules = []string{"node", "deny-ranges", "cluster-ranges", "per-client-rate"}

// readCounters takes the refusing rules' counters from `nft -j list table` output, summed by comment (a rule per
// address family shares one). A listing that does not parse (being rewritten, or no table yet) keeps the last.
func (e *exporter) readCounters() {
	data, err := os.ReadFile(e.countersPath)
	if err != nil {
		return
	}
	var listing struct {
		Nftables []struct {
			Rule *struct {
				Comment string                       `json:"comment"`
				Expr    []map[string]json.RawMessage `json:"expr"`
			} `json:"rule"`
		} `json:"nftables"`
	}
	if json.Unmarshal(data, &listing) != nil || len(listing.Nftables) == 0 {
		return
	}
	counts := map[string]uint64{}
	for _, rule := range firewallRules {
		counts[rule] = 0
	}
	for _, item := range listing.Nftables {
		if item.Rule == nil {
			continue
		}
		if _, known := counts[item.Rule.Comment]; !known {
			continue
		}
		for _, expr := range item.Rule.Expr {
			raw, ok := expr["counter"]
			if !ok {
				continue
			}
			var counter struct {
				Packets uint64 `json:"packets"`
			}
			if json.Unmarshal(raw, &counter) == nil {
				counts[item.Rule.Comment] += counter.Packets
			}
		}
	}
	e.firewall = counts
}

func sortedKeys(m map[string]uint64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func main() {
	listen := flag.String("listen", ":9888", "address to serve /metrics on")
	statsAddr := flag.String("stats", "127.0.0.1:8888", "tinyproxy's address (loopback) for its stats page")
	statHost := flag.String("stat-host", "tinyproxy.stats", "tinyproxy's StatHost")
	logPath := flag.String("log", "", "tinyproxy's LogFile")
	generation := flag.String("generation-file", "", "a file holding the config generation (one token, never derived from a credential)")
	maxClients := flag.Int("max-clients", 0, "tinyproxy's MaxClients, exported as tinyproxy_max_clients")
	interval := flag.Duration("interval", time.Second, "how often the log is read between scrapes")
	counters := flag.String("firewall-counters", "", "a file holding `nft -j list table` of the proxy's rules, exported as tinyproxy_firewall_refusals_total")
	flag.Parse()
	if *logPath == "" {
		fmt.Fprintln(os.Stderr, "proxy-exporter: --log is required (tinyproxy's LogFile)")
		os.Exit(2)
	}
	if _, _, err := net.SplitHostPort(*listen); err != nil {
		fmt.Fprintf(os.Stderr, "proxy-exporter: --listen %q: %v (expected e.g. :9888)\n", *listen, err)
		os.Exit(2)
	}
	e := &exporter{
		logPath: *logPath, statsAddr: *statsAddr, statHost: *statHost, generationPath: *generation,
		maxClients: *maxClients, out: os.Stdout, c: newCounters(), countersPath: *counters,
		client: &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}},
	}
	go func() {
		for range time.Tick(*interval) {
			e.mu.Lock()
			e.drain()
			e.mu.Unlock()
		}
	}()
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		body := e.metrics()
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = w.Write(body)
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	server := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(os.Stderr, "proxy-exporter: serving %s, reading %s and %s\n", *listen, *logPath, *statsAddr)
	if err := server.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, "proxy-exporter:", err)
		os.Exit(1)
	}
}
