// tool: the real-node lane's client and servers, one static binary (CGO_ENABLED=0, standard library only) that the
// test runs on the host, in its network namespaces and, mounted read-only, inside pods on the real node.
//
//	tool fetch URL...                  GET each URL with Go's default client (proxy from the environment: HTTP_PROXY,
//	                                   HTTPS_PROXY, NO_PROXY); one JSON object: URL -> "ok <status> <body>" or "error <msg>"
//	tool serve ADDR NAME [CERT KEY]    answer every request "NAME saw PATH from IP" (TLS with CERT and KEY); print
//	                                   "ready" once listening
//	tool load URL SECONDS RATE         GET URL RATE times a second for SECONDS, each on a new connection, 2 s timeout
//	                                   each; one JSON object: sent, ok, failed, the failures' offsets and errors, and
//	                                   the longest time between two successful answers (ms). SECONDS 0: until its
//	                                   standard input closes (at most an hour), so a test stops it on a condition
//	tool hold ADDR COUNT SECONDS       open COUNT idle TCP connections to ADDR (host:port), one after another, 2 s
//	                                   timeout each; print one JSON object (held, reset: accepted then reset by the
//	                                   proxy within a second, refused, other) once all were tried, then keep the held
//	                                   ones open for SECONDS
//	tool flood ADDR MEGABYTES          one request to the proxy at ADDR whose headers are MEGABYTES of 100 kB lines,
//	                                   each with its own name; one JSON object: bytes sent, the write error if one
//	                                   stopped it, and the answer's status line
//	tool tunnels URL COUNT SECONDS     COUNT long tunnels: each its own client (proxy from the environment) that GETs
//	                                   the https URL once a second for SECONDS over one kept-alive connection, the
//	                                   CONNECT tunnel through the proxy; print "open" once each has its connection,
//	                                   then one JSON object: per tunnel the requests, the failed ones and the
//	                                   connections it took (1: never cut). SECONDS 0: until standard input closes
//	tool silent ADDR                   accept TCP connections on ADDR and never answer nor read (an origin that
//	                                   hangs); print "ready" once listening
//	tool mix ADDR SHARE SECONDS URL    SHARE connection slots to the proxy at ADDR for SECONDS, each kept busy in
//	                                   turn with one kind: a GET of URL (a silent origin) left waiting; the same GET
//	                                   reset by its client 0.4 s later (SO_LINGER 0), again and again; a request line
//	                                   dripped a byte every 100 ms; a 16,300-byte request line never ended. A slot
//	                                   whose connection ends opens another. One JSON object: per kind, the connections
//	                                   opened and how they ended (closed by the proxy, reset by it, held to the end,
//	                                   reset by the client, not connected)
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

func fetch(urls []string) {
	client := &http.Client{Timeout: 10 * time.Second}
	out := map[string]string{}
	for _, url := range urls {
		resp, err := client.Get(url)
		if err != nil {
			out[url] = "error " + err.Error()
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			out[url] = "error " + err.Error()
			continue
		}
		out[url] = fmt.Sprintf("ok %d %s", resp.StatusCode, body)
	}
	enc, _ := json.Marshal(out)
	fmt.Println(string(enc))
}

func silent(addr string) {
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("ready")
	var held []net.Conn
	for {
		conn, err := listener.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		held = append(held, conn) // never read, never answered, never closed
	}
}

// slot runs one connection of a kind until it ends or the deadline passes; it says how it ended.
func slot(addr, kind, url string, deadline time.Time) string {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		time.Sleep(200 * time.Millisecond)
		return "not-connected"
	}
	defer conn.Close()
	conn.SetDeadline(deadline)
	ended := func(err error) string {
		var timeout net.Error
		switch {
		case errors.As(err, &timeout) && timeout.Timeout():
			return "held"
		case err != nil && strings.Contains(err.Error(), "reset"):
			time.Sleep(100 * time.Millisecond) // refused at accept: do not spin
			return "reset-by-proxy"
		default:
			return "closed-by-proxy"
		}
	}
	switch kind {
	case "silent":
		if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: origin.example\r\n\r\n", url); err != nil {
			return ended(err)
		}
		_, err := io.Copy(io.Discard, conn)
		if err == nil {
			return "closed-by-proxy"
		}
		return ended(err)
	case "reset":
		if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: origin.example\r\n\r\n", url); err != nil {
			return ended(err)
		}
		time.Sleep(400 * time.Millisecond)
		conn.(*net.TCPConn).SetLinger(0)
		return "reset-by-client"
	case "drip":
		line := "GET " + url + strings.Repeat("x", 100000)
		for i := 0; i < len(line); i++ {
			if _, err := conn.Write([]byte{line[i]}); err != nil {
				return ended(err)
			}
			if time.Now().After(deadline) {
				return "held"
			}
			time.Sleep(100 * time.Millisecond)
		}
		return "held"
	default: // long
		if _, err := fmt.Fprintf(conn, "GET %s%s", url, strings.Repeat("a", 16300)); err != nil {
			return ended(err)
		}
		_, err := io.Copy(io.Discard, conn)
		if err == nil {
			return "closed-by-proxy"
		}
		return ended(err)
	}
}

func mix(addr string, share, seconds int, url string) {
	deadline := time.Now().Add(time.Duration(seconds) * time.Second)
	kinds := []string{"silent", "reset", "drip", "long"}
	var mu sync.Mutex
	counts := map[string]map[string]int{}
	var wg sync.WaitGroup
	for i := 0; i < share; i++ {
		kind := kinds[i%len(kinds)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				how := slot(addr, kind, url, deadline)
				mu.Lock()
				if counts[kind] == nil {
					counts[kind] = map[string]int{}
				}
				counts[kind][how]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	enc, _ := json.Marshal(counts)
	fmt.Println(string(enc))
}

func serve(addr, name string, tlsFiles []string) {
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		fmt.Fprintf(w, "%s saw %s from %s", name, r.URL.Path, host)
	})
	fmt.Println("ready")
	if len(tlsFiles) == 2 {
		err = http.ServeTLS(listener, handler, tlsFiles[0], tlsFiles[1])
	} else {
		err = http.Serve(listener, handler)
	}
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

// stopped: with SECONDS 0, closed when standard input closes; otherwise nil (never ready: the count of requests
// or seconds ends the run).
func stopped(seconds int) <-chan struct{} {
	if seconds > 0 {
		return nil
	}
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(done)
	}()
	time.AfterFunc(time.Hour, func() { os.Exit(3) })
	return done
}

type failure struct {
	OffsetMs int64  `json:"offsetMs"`
	Error    string `json:"error"`
}

func load(url string, seconds, rate int) {
	client := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, DisableKeepAlives: true},
	}
	start := time.Now()
	var mu sync.Mutex
	var wg sync.WaitGroup
	var failures []failure
	var okAt []int64
	total := 0
	end := stopped(seconds)
	ticker := time.NewTicker(time.Second / time.Duration(rate))
	for i := 0; seconds == 0 || i < seconds*rate; i++ {
		if i > 0 {
			select {
			case <-ticker.C:
			case <-end:
			}
		}
		if isClosed(end) {
			break
		}
		total++
		wg.Add(1)
		go func(sent time.Time) {
			defer wg.Done()
			resp, err := client.Get(url)
			msg := ""
			if err != nil {
				msg = err.Error()
			} else {
				_, _ = io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					msg = "status " + strconv.Itoa(resp.StatusCode)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if msg != "" {
				failures = append(failures, failure{sent.Sub(start).Milliseconds(), msg})
			} else {
				okAt = append(okAt, time.Since(start).Milliseconds())
			}
		}(time.Now())
	}
	ticker.Stop()
	wg.Wait()
	sort.Slice(failures, func(a, b int) bool { return failures[a].OffsetMs < failures[b].OffsetMs })
	sort.Slice(okAt, func(a, b int) bool { return okAt[a] < okAt[b] })
	var gap int64
	for i := 1; i < len(okAt); i++ {
		if okAt[i]-okAt[i-1] > gap {
			gap = okAt[i] - okAt[i-1]
		}
	}
	enc, _ := json.Marshal(map[string]any{
		"sent": total, "ok": len(okAt), "failed": len(failures), "failures": failures, "longestGapMs": gap,
	})
	fmt.Println(string(enc))
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func hold(addr string, count, seconds int) {
	var open []net.Conn
	refused, other := 0, 0
	for i := 0; i < count; i++ {
		conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
		switch {
		case err == nil:
			open = append(open, conn)
		case strings.Contains(err.Error(), "connection refused"):
			refused++
		default:
			other++
		}
	}
	// tinyproxy accepts a connection beyond the client's share and resets it at once (patch 0006): a read within a
	// second tells the held ones (no byte, the deadline) from the reset ones (an error), all read at once.
	results := make(chan bool, len(open))
	for _, conn := range open {
		go func(c net.Conn) {
			c.SetReadDeadline(time.Now().Add(time.Second))
			_, err := c.Read(make([]byte, 1))
			var timeout net.Error
			results <- err != nil && errors.As(err, &timeout) && timeout.Timeout()
		}(conn)
	}
	reset := 0
	for range open {
		if !<-results {
			reset++
		}
	}
	enc, _ := json.Marshal(map[string]int{"held": len(open) - reset, "reset": reset, "refused": refused, "other": other})
	fmt.Println(string(enc))
	time.Sleep(time.Duration(seconds) * time.Second)
	for _, conn := range open {
		conn.Close()
	}
}

func flood(addr string, megabytes int) {
	out := map[string]any{}
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		out["dialError"] = err.Error()
	} else {
		defer conn.Close()
		value := strings.Repeat("a", 99_980)
		sent := 0
		_, err = fmt.Fprintf(conn, "GET http://origin.example/flood HTTP/1.1\r\nHost: origin.example\r\n")
		for i := 0; err == nil && sent < megabytes*1_000_000; i++ {
			var n int
			n, err = fmt.Fprintf(conn, "X-Flood-%d: %s\r\n", i, value)
			sent += n
		}
		out["sent"] = sent
		if err != nil {
			out["writeError"] = err.Error()
		}
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, _ := bufio.NewReader(conn).ReadString('\n')
		out["status"] = strings.TrimSpace(line)
	}
	enc, _ := json.Marshal(out)
	fmt.Println(string(enc))
}

type tunnelResult struct {
	Requests    int      `json:"requests"`
	Failed      int      `json:"failed"`
	Connections int      `json:"connections"`
	Errors      []string `json:"errors"`
}

func tunnels(url string, count, seconds int) {
	results := make([]tunnelResult, count)
	end := stopped(seconds)
	var opened, done sync.WaitGroup
	opened.Add(count)
	done.Add(count)
	for i := 0; i < count; i++ {
		go func(r *tunnelResult) {
			defer done.Done()
			transport := &http.Transport{Proxy: http.ProxyFromEnvironment, MaxConnsPerHost: 1, IdleConnTimeout: time.Hour}
			client := &http.Client{Timeout: 10 * time.Second, Transport: transport}
			first := true
			for s := 0; seconds == 0 || s < seconds; s++ {
				if s > 0 && isClosed(end) {
					break
				}
				trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
					if !info.Reused {
						r.Connections++
					}
				}}
				req, _ := http.NewRequest("GET", url, nil)
				req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
				r.Requests++
				resp, err := client.Do(req)
				if err == nil {
					_, err = io.ReadAll(resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != 200 {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				if err != nil {
					r.Failed++
					r.Errors = append(r.Errors, err.Error())
				}
				if first {
					first = false
					opened.Done()
				}
				time.Sleep(time.Second)
			}
		}(&results[i])
	}
	opened.Wait()
	fmt.Println("open")
	done.Wait()
	enc, _ := json.Marshal(results)
	fmt.Println(string(enc))
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: tool fetch URL... | serve ADDR NAME [CERT KEY] | load URL SECONDS RATE | hold ADDR COUNT SECONDS | flood ADDR MEGABYTES | tunnels URL COUNT SECONDS | silent ADDR | mix ADDR SHARE SECONDS URL")
		os.Exit(2)
	}
	switch args := os.Args[2:]; os.Args[1] {
	case "fetch":
		fetch(args)
	case "serve":
		if len(args) != 2 && len(args) != 4 {
			os.Exit(2)
		}
		serve(args[0], args[1], args[2:])
	case "load":
		if len(args) != 3 {
			os.Exit(2)
		}
		seconds, err1 := strconv.Atoi(args[1])
		rate, err2 := strconv.Atoi(args[2])
		if err1 != nil || err2 != nil || rate < 1 {
			os.Exit(2)
		}
		load(args[0], seconds, rate)
	case "silent":
		if len(args) != 1 {
			os.Exit(2)
		}
		silent(args[0])
	case "mix":
		if len(args) != 4 {
			os.Exit(2)
		}
		share, err1 := strconv.Atoi(args[1])
		seconds, err2 := strconv.Atoi(args[2])
		if err1 != nil || err2 != nil || share < 1 || seconds < 1 {
			os.Exit(2)
		}
		mix(args[0], share, seconds, args[3])
	case "tunnels":
		if len(args) != 3 {
			os.Exit(2)
		}
		count, err1 := strconv.Atoi(args[1])
		seconds, err2 := strconv.Atoi(args[2])
		if err1 != nil || err2 != nil || count < 1 {
			os.Exit(2)
		}
		tunnels(args[0], count, seconds)
	case "hold", "flood":
		numbers := make([]int, len(args)-1)
		for i, arg := range args[1:] {
			n, err := strconv.Atoi(arg)
			if err != nil {
				os.Exit(2)
			}
			numbers[i] = n
		}
		if os.Args[1] == "hold" && len(numbers) == 2 {
			hold(args[0], numbers[0], numbers[1])
		} else if os.Args[1] == "flood" && len(numbers) == 1 {
			flood(args[0], numbers[0])
		} else {
			os.Exit(2)
		}
	default:
		os.Exit(2)
	}
}
