// A forward proxy on net/http, written for bench/bench_engines.py as a candidate engine to measure, not a product:
// absolute-form forwarding and CONNECT tunnels, each client address's connections counted at accept (reset beyond
// its share), a deadline per phase (the request's head, the connect, the response's head, idle), and a stats page on
// the host the kubelet's probe asks for. Standard library only.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type config struct {
	listen                         string
	share, maxClients, reserve     int
	allow                          []netip.Prefix
	connectPorts                   map[string]bool
	requestHead, connect, respHead time.Duration
	idle                           time.Duration
	maxHeaderBytes                 int
	statHost                       string
}

// limiter counts each client address's open connections and all of them, from accept until Close.
type limiter struct {
	cfg      *config
	mu       sync.Mutex
	perIP    map[netip.Addr]int
	open     int
	refused  map[string]*atomic.Int64
	accepted atomic.Int64
}

type counted struct {
	net.Conn
	l    *limiter
	ip   netip.Addr
	once sync.Once
}

func (c *counted) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.open--
		if c.l.perIP[c.ip]--; c.l.perIP[c.ip] <= 0 {
			delete(c.l.perIP, c.ip)
		}
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

type listener struct {
	net.Listener
	l *limiter
}

func reset(c net.Conn) {
	if t, ok := c.(*net.TCPConn); ok {
		_ = t.SetLinger(0)
	}
	_ = c.Close()
}

func (ln *listener) Accept() (net.Conn, error) {
	for {
		c, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
		if err != nil {
			reset(c)
			continue
		}
		ip := ap.Addr().Unmap()
		if cause := ln.l.admit(ip); cause != "" {
			ln.l.refused[cause].Add(1)
			reset(c)
			continue
		}
		ln.l.accepted.Add(1)
		return &counted{Conn: c, l: ln.l, ip: ip}, nil
	}
}

// admit takes a slot for ip, or says why not.
func (l *limiter) admit(ip netip.Addr) string {
	loopback := ip.IsLoopback()
	allowed := loopback
	for _, p := range l.cfg.allow {
		allowed = allowed || p.Contains(ip)
	}
	if !allowed {
		return "not in Allow"
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.open >= l.cfg.maxClients:
		return "MaxClients"
	case !loopback && l.open >= l.cfg.maxClients-l.cfg.reserve:
		return "loopback reserve"
	case !loopback && l.perIP[ip] >= l.cfg.share:
		return "over its client's share"
	}
	l.perIP[ip]++
	l.open++
	return ""
}

var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade"}

type proxy struct {
	cfg       *config
	l         *limiter
	transport *http.Transport
	dialer    *net.Dialer
	requests  atomic.Int64
	failures  atomic.Int64
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	switch {
	case r.Method == http.MethodConnect:
		p.tunnel(w, r)
	case r.URL.IsAbs() && r.URL.Scheme == "http":
		p.forward(w, r)
	case !r.URL.IsAbs() && strings.EqualFold(stripPort(r.Host), p.cfg.statHost):
		p.stats(w)
	default:
		http.Error(w, "not a proxy request", http.StatusBadRequest)
	}
}

func stripPort(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		return h
	}
	return host
}

func (p *proxy) stats(w http.ResponseWriter) {
	p.l.mu.Lock()
	open, clients := p.l.open, len(p.l.perIP)
	p.l.mu.Unlock()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	w.Header().Set("Content-Type", "text/plain")
	fmt.Fprintf(w, "Number of open connections: %d\nClients: %d\nAccepted: %d\nRequests: %d\nFailed: %d\n",
		open, clients, p.l.accepted.Load(), p.requests.Load(), p.failures.Load())
	for cause, n := range p.l.refused {
		fmt.Fprintf(w, "Refused (%s): %d\n", cause, n.Load())
	}
	fmt.Fprintf(w, "Goroutines: %d\nHeapInuse: %d\nSys: %d\n", runtime.NumGoroutine(), m.HeapInuse, m.Sys)
}

func (p *proxy) fail(w http.ResponseWriter, err error) {
	p.failures.Add(1)
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, context.DeadlineExceeded):
		http.Error(w, "timeout", http.StatusGatewayTimeout)
	default:
		http.Error(w, "bad gateway", http.StatusBadGateway)
	}
}

func (p *proxy) forward(w http.ResponseWriter, r *http.Request) {
	out := r.Clone(r.Context())
	out.RequestURI = ""
	for _, h := range hopByHop {
		out.Header.Del(h)
	}
	if c := r.Header.Get("Connection"); c != "" {
		for _, h := range strings.Split(c, ",") {
			out.Header.Del(strings.TrimSpace(h))
		}
	}
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		p.fail(w, err)
		return
	}
	defer resp.Body.Close()
	for _, h := range hopByHop {
		resp.Header.Del(h)
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// idleConn closes a tunnel idle for longer than idle: each read and write pushes the deadline on.
type idleConn struct {
	net.Conn
	idle time.Duration
}

func (c idleConn) Read(b []byte) (int, error) {
	_ = c.Conn.SetDeadline(time.Now().Add(c.idle))
	return c.Conn.Read(b)
}

func (p *proxy) tunnel(w http.ResponseWriter, r *http.Request) {
	_, port, err := net.SplitHostPort(r.Host)
	if err != nil || !p.cfg.connectPorts[port] {
		http.Error(w, "CONNECT to this port is not allowed", http.StatusForbidden)
		return
	}
	upstream, err := p.dialer.DialContext(r.Context(), "tcp", r.Host)
	if err != nil {
		p.fail(w, err)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		upstream.Close()
		http.Error(w, "no hijack", http.StatusInternalServerError)
		return
	}
	client, buf, err := hj.Hijack()
	if err != nil {
		upstream.Close()
		return
	}
	_, _ = client.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))
	a, b := idleConn{client, p.cfg.idle}, idleConn{upstream, p.cfg.idle}
	done := make(chan struct{}, 2)
	go func() {
		if n := buf.Reader.Buffered(); n > 0 {
			pending, _ := buf.Reader.Peek(n)
			_, _ = b.Write(pending)
		}
		_, _ = io.Copy(b, a)
		done <- struct{}{}
	}()
	go func() { _, _ = io.Copy(a, b); done <- struct{}{} }()
	<-done
	client.Close()
	upstream.Close()
	<-done
}

func main() {
	cfg := &config{connectPorts: map[string]bool{}}
	var allow, ports string
	flag.StringVar(&cfg.listen, "listen", ":8888", "address to listen on")
	flag.IntVar(&cfg.share, "share", 16, "connections per client address (MaxConnectionsPerClient)")
	flag.IntVar(&cfg.maxClients, "max-clients", 512, "connections in all (MaxClients)")
	flag.IntVar(&cfg.reserve, "loopback-reserve", 32, "of max-clients, kept for loopback")
	flag.StringVar(&allow, "allow", "127.0.0.0/8,::1/128", "client ranges, comma-separated (loopback always)")
	flag.StringVar(&ports, "connect-ports", "443", "CONNECT ports, comma-separated")
	flag.DurationVar(&cfg.requestHead, "request-head", 30*time.Second, "the request's head from accept")
	flag.DurationVar(&cfg.connect, "connect", 30*time.Second, "connect to the origin")
	flag.DurationVar(&cfg.respHead, "response-head", 120*time.Second, "the response's head")
	flag.DurationVar(&cfg.idle, "idle", 600*time.Second, "idle between requests, and in a tunnel")
	flag.IntVar(&cfg.maxHeaderBytes, "max-header-bytes", 64<<10, "request line and headers")
	flag.StringVar(&cfg.statHost, "stat-host", "proxy-component.invalid", "the stats page's host")
	flag.Parse()
	for _, s := range strings.Split(allow, ",") {
		if s = strings.TrimSpace(s); s != "" {
			cfg.allow = append(cfg.allow, netip.MustParsePrefix(s))
		}
	}
	for _, s := range strings.Split(ports, ",") {
		if _, err := strconv.Atoi(s); err == nil {
			cfg.connectPorts[s] = true
		}
	}
	l := &limiter{cfg: cfg, perIP: map[netip.Addr]int{}, refused: map[string]*atomic.Int64{}}
	for _, cause := range []string{"not in Allow", "MaxClients", "loopback reserve", "over its client's share"} {
		l.refused[cause] = new(atomic.Int64)
	}
	dialer := &net.Dialer{Timeout: cfg.connect}
	p := &proxy{cfg: cfg, l: l, dialer: dialer, transport: &http.Transport{
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		ResponseHeaderTimeout: cfg.respHead,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   16,
		DisableCompression:    true,
	}}
	inner, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		log.Fatal(err)
	}
	server := &http.Server{
		Handler:           p,
		ReadHeaderTimeout: cfg.requestHead,
		IdleTimeout:       cfg.idle,
		MaxHeaderBytes:    cfg.maxHeaderBytes,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	fmt.Fprintf(os.Stderr, "goproxy listening on %s\n", cfg.listen)
	log.Fatal(server.Serve(&listener{Listener: inner, l: l}))
}
