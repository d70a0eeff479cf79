package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const prefix = "NOTICE    Nov 27 04:27:12.039 [13623]: "

func newTest(t *testing.T) (*exporter, *bytes.Buffer, string) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "tinyproxy.log")
	if err := os.WriteFile(path, nil, 0o660); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	return &exporter{logPath: path, out: &out, c: newCounters()}, &out, path
}

func appendLog(t *testing.T, path string, lines ...string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, l := range lines {
		if _, err := f.WriteString(l + "\n"); err != nil {
			t.Fatal(err)
		}
	}
}

// Each cause is counted from its line, the first load after a start is no reload, probe lines are not passed on,
// and a URL's user and password never are.
func TestCountsAndPassesOn(t *testing.T) {
	e, out, path := newTest(t)
	appendLog(t, path,
		prefix+"Initializing tinyproxy ...",
		prefix+"Reloading config file finished",
		prefix+"Request for the stathost.",
		prefix+`Unauthorized connection from "10.1.2.3".`,
		prefix+`Proxying refused on filtered domain "169.254.169.254"`,
		"WARNING   Nov 27 04:27:12.039 [13623]: Could not connect to upstream proxy.",
		prefix+"Refused CONNECT method on port 25",
		"WARNING   Nov 27 04:27:12.039 [13623]: Upstream proxy proxy.corp:3128 refused the request: 407 Proxy Authentication Required",
		"WARNING   Nov 27 04:27:12.039 [13623]: No upstream proxy defined for example.com.",
		"WARNING   Nov 27 04:27:12.039 [13623]: Maximum number of connections reached. Refusing new connections.",
		prefix+"Reloading config file finished",
		"WARNING   Nov 27 04:27:12.039 [13623]: Reloading config file failed!",
		"ERROR     Nov 27 04:27:12.039 [13623]: upstream http://svc:pw@proxy.corp:3128 said no",
	)
	e.drain()
	c := e.c
	if c.starts != 1 || c.reloads["success"] != 1 || c.reloads["failure"] != 1 || c.stathost != 1 ||
		c.refusals["allow"] != 1 || c.refusals["filter"] != 1 || c.refusals["connect_port"] != 1 ||
		c.upstream["unreachable"] != 1 || c.upstream["auth"] != 1 || c.upstream["no_upstream"] != 1 || c.capacity != 1 {
		t.Fatalf("counts: %+v", c)
	}
	text := out.String()
	if strings.Contains(text, "stathost") || strings.Contains(text, "svc:pw") || !strings.Contains(text, "http://<redacted>@proxy.corp") {
		t.Fatalf("passed on:\n%s", text)
	}
	if strings.Count(text, "\n") != 12 {
		t.Fatalf("want 12 lines passed on, got:\n%s", text)
	}
}

// Patch 0006's refusals at accept come a line a second per cause with their count; patch 0007's deadlines a line each.
func TestAcceptRefusalsAndDeadlines(t *testing.T) {
	e, out, path := newTest(t)
	appendLog(t, path,
		prefix+"Refused 12 connection(s) at accept: over its client's share (MaxConnectionsPerClient) (last from 10.99.0.2)",
		prefix+"Refused 3 connection(s) at accept: not in Allow (last from fe80::1)",
		prefix+"Refused 5 connection(s) at accept: MaxClients in use (LoopbackReserve kept for loopback) (last from 10.99.0.3)",
		prefix+"Refused 1 connection(s) at accept: over its client's share (MaxConnectionsPerClient) (last from fd00::2)",
		prefix+"Closed a connection from 10.99.0.2: no complete request within RequestHeadTimeout (30s)",
		prefix+`No response head from "example.com" within ResponseHeadTimeout (120s) for 10.99.0.2`,
		prefix+"Refused 7 connection(s) at accept: something new (last from 10.99.0.2)",
	)
	e.drain()
	c := e.c
	// The Allow refusals are counted from check_acl's own line per connection, not from the summary.
	if c.refusals["client_share"] != 13 || c.refusals["allow"] != 0 || c.capacity != 5 ||
		c.deadlines["request_head"] != 1 || c.deadlines["response_head"] != 1 {
		t.Fatalf("counts: %+v", c)
	}
	if strings.Count(out.String(), "\n") != 7 {
		t.Fatalf("want every line passed on, got:\n%s", out.String())
	}
	e.statsAddr, e.client = "127.0.0.1:1", &http.Client{Timeout: time.Second} // no tinyproxy: tinyproxy_up 0
	text := string(e.metrics())
	for _, want := range []string{
		`tinyproxy_refusals_total{cause="client_share"} 13`,
		`tinyproxy_capacity_reached_total 5`,
		`tinyproxy_deadline_exceeded_total{phase="request_head"} 1`,
		`tinyproxy_deadline_exceeded_total{phase="response_head"} 1`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Fatalf("missing %q in:\n%s", want, text)
		}
	}
}

// A restarted exporter goes on at the saved offset: nothing read twice, nothing lost; a partial line waits.
func TestResumesWhereItStopped(t *testing.T) {
	e, out, path := newTest(t)
	appendLog(t, path, prefix+`Unauthorized connection from "10.0.0.1".`)
	e.drain()
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(prefix + `Unauthorized connection from "10.0.0.2".` + "\n" + prefix + "Unauthorized conn")
	f.Close()
	e.drain()
	e.file.Close()
	next := &exporter{logPath: path, out: out, c: newCounters()}
	appendLog(t, path, `ection from "10.0.0.3".`)
	next.drain()
	if e.c.refusals["allow"] != 2 || next.c.refusals["allow"] != 1 {
		t.Fatalf("first %d, second %d", e.c.refusals["allow"], next.c.refusals["allow"])
	}
	if strings.Count(out.String(), "Unauthorized connection") != 3 {
		t.Fatalf("passed on:\n%s", out.String())
	}
}

// Read blocks are punched away: the file keeps its size and loses its blocks.
func TestFreesWhatItRead(t *testing.T) {
	e, _, path := newTest(t)
	line := prefix + "Request for the stathost."
	for i := 0; i < 2000; i++ {
		appendLog(t, path, line)
	}
	e.drain()
	var st = mustStat(t, path)
	if st.size < 100000 || st.blocks*512 >= st.size/2 {
		t.Fatalf("size %d, allocated %d", st.size, st.blocks*512)
	}
	if e.c.stathost != 2000 {
		t.Fatalf("stathost %d", e.c.stathost)
	}
}

// The kernel rules' counters, from a listing the image's nft would write (`nft -j list table inet proxy-component`
// of the rendered table, counters set): summed by rule across families; a listing that does not parse keeps the last.
func TestFirewallCounters(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "firewall.json")
	listing, err := os.ReadFile("testdata/firewall.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, listing, 0o640); err != nil {
		t.Fatal(err)
	}
	e, _, _ := newTest(t)
	e.countersPath = path
	e.statsAddr, e.client = "127.0.0.1:1", &http.Client{Timeout: time.Second} // no tinyproxy: tinyproxy_up 0
	text := string(e.metrics())
	for _, want := range []string{
		`tinyproxy_firewall_refusals_total{rule="node"} 3`,
		`tinyproxy_firewall_refusals_total{rule="deny-ranges"} 3`,
		`tinyproxy_firewall_refusals_total{rule="cluster-ranges"} 4`,
		`tinyproxy_firewall_refusals_total{rule="per-client-rate"} 7`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Fatalf("missing %q in:\n%s", want, text)
		}
	}
	// An earlier layout's rules (the kernel counted connections before patch 0006) are not exported.
	for _, gone := range []string{"per-client-connections", "loopback-reserve"} {
		if strings.Contains(text, gone) {
			t.Fatalf("%q exported from an earlier layout's listing:\n%s", gone, text)
		}
	}
	if err := os.WriteFile(path, []byte(`{"nftables": [{"rule": `), 0o640); err != nil { // being rewritten
		t.Fatal(err)
	}
	if again := string(e.metrics()); !strings.Contains(again, `tinyproxy_firewall_refusals_total{rule="node"} 3`+"\n") {
		t.Fatalf("a partial listing lost the last counts:\n%s", again)
	}
	none, _, _ := newTest(t)
	none.countersPath = filepath.Join(dir, "missing.json")
	none.statsAddr, none.client = e.statsAddr, e.client
	if strings.Contains(string(none.metrics()), "tinyproxy_firewall_refusals_total") {
		t.Fatal("no listing yet: no firewall series")
	}
}

// jsonString is how tinyproxy's access log writes a string (access-log.c json_text): '"' and '\' escaped, every byte
// below 0x20 or above 0x7e as \u00XX.
func jsonString(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			fmt.Fprintf(&b, `\u%04x`, c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// Patch 0025's access lines are passed on byte for byte, whatever host a client named (quotes, backslashes, control
// and high bytes, what looks like a URL with a user), and counted by result; access-dropped lines sum their counts.
func TestAccessLinesPassedOnUnchanged(t *testing.T) {
	e, out, path := newTest(t)
	hosts := []string{"origin.example", `a"b\c`, "x\x01\x1f\x7f\x80\xff", "http://user:pw", "::1", "%41@", ""}
	var lines []string
	for i, host := range hosts {
		result := []string{"ok", "refused", "error"}[i%3]
		lines = append(lines, prefix+fmt.Sprintf(`{"log":"access","time":"2026-11-28T18:49:05.123Z","client":"fd00:10:244::5",`+
			`"client_port":55204,"method":"CONNECT","host":"%s","port":443,"upstream":false,"status":200,"result":"%s",`+
			`"cause":"","bytes_from_client":123,"bytes_to_client":456,"duration_ms":1234}`, jsonString(host), result))
	}
	lines = append(lines,
		prefix+`{"log":"access-dropped","time":"2026-11-28T18:49:06.001Z","dropped":41}`,
		prefix+`{"log":"access-dropped","time":"2026-11-28T18:49:07.002Z","dropped":1}`,
	)
	appendLog(t, path, lines...)
	e.drain()
	if got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n"); strings.Join(got, "\n") != strings.Join(lines, "\n") {
		t.Fatalf("passed on:\n%s\nwant:\n%s", out.String(), strings.Join(lines, "\n"))
	}
	for _, line := range lines {
		msg := strings.TrimPrefix(line, prefix)
		if !json.Valid([]byte(msg)) {
			t.Fatalf("not JSON: %s", msg)
		}
	}
	if c := e.c; c.access["ok"] != 3 || c.access["refused"] != 2 || c.access["error"] != 2 || c.accessDropped != 42 ||
		c.messages["notice"] != uint64(len(lines)) {
		t.Fatalf("counts: %+v", c)
	}
	e.statsAddr, e.client = "127.0.0.1:1", &http.Client{Timeout: time.Second} // no tinyproxy: tinyproxy_up 0
	text := string(e.metrics())
	for _, want := range []string{
		`tinyproxy_access_log_lines_total{result="ok"} 3`,
		`tinyproxy_access_log_lines_total{result="refused"} 2`,
		`tinyproxy_access_log_lines_total{result="error"} 2`,
		`tinyproxy_access_log_dropped_total 42`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Fatalf("missing %q in:\n%s", want, text)
		}
	}
}
