// Package metricsserver serves a daemon's Prometheus metrics so that no
// client, local or remote, can take from the daemon what its own work
// needs: a cap on the connections open at once and timeouts on every phase
// of a request, so that an idle or slow client is dropped. At the cap a new
// connection closes the oldest one that is not in a request (net/http's
// ConnState says which): idle connections, however many are opened, never
// keep a scrape waiting in the accept queue behind them. `vgpu node` enforces limits in the same process: a listener
// that let any local user hold its descriptors would skip every
// enforcement round.
package metricsserver

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Options of Listen; zero fields take the defaults.
type Options struct {
	MaxConns          int           // connections open at once (64)
	ReadHeaderTimeout time.Duration // 5 s
	ReadTimeout       time.Duration // 10 s
	WriteTimeout      time.Duration // 30 s: a scrape of a busy host
	IdleTimeout       time.Duration // 30 s between requests of a keep-alive connection
	ErrorLog          io.Writer     // where Serve's errors go (nil: discarded)
}

// Defaults: a few scrapers and a person with curl at once; never more
// descriptors than the daemon can spare.
const (
	DefaultMaxConns = 64
)

func (o *Options) fill() {
	if o.MaxConns <= 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.ReadHeaderTimeout <= 0 {
		o.ReadHeaderTimeout = 5 * time.Second
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = 10 * time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 30 * time.Second
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 30 * time.Second
	}
}

// Server is a running metrics server.
type Server struct {
	srv *http.Server
	ln  net.Listener
}

// Listen listens on addr (host:port) and serves h there until Close.
func Listen(addr string, h http.Handler, o Options) (*Server, error) {
	o.fill()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	cap := &capListener{Listener: ln, max: o.MaxConns, conns: map[net.Conn]*connInfo{}}
	s := &Server{ln: cap, srv: &http.Server{
		Handler:           h,
		ConnState:         cap.track,
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		ReadTimeout:       o.ReadTimeout,
		WriteTimeout:      o.WriteTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    16 << 10,
	}}
	go func() {
		if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) && o.ErrorLog != nil {
			fmt.Fprintln(o.ErrorLog, "metrics:", err)
		}
	}()
	return s, nil
}

// Addr is the address it listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops it and closes its connections.
func (s *Server) Close() error { return s.srv.Close() }

// capListener holds at most max connections open: at the cap, accepting
// one closes the oldest connection that is not serving a request (new or
// idle between requests); with every one in a request, the new one is
// closed instead.
type capListener struct {
	net.Listener
	max   int
	mu    sync.Mutex
	seq   uint64
	conns map[net.Conn]*connInfo
}

type connInfo struct {
	seq   uint64 // order of acceptance
	state http.ConnState
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.admit(c) {
			return c, nil
		}
		c.Close()
	}
}

// admit makes room for c (closing the oldest connection not in a request)
// and records it; false when every open connection is in a request.
func (l *capListener) admit(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.conns) >= l.max {
		var oldest net.Conn
		for oc, ci := range l.conns {
			if ci.state != http.StateActive && (oldest == nil || ci.seq < l.conns[oldest].seq) {
				oldest = oc
			}
		}
		if oldest == nil {
			return false
		}
		delete(l.conns, oldest)
		oldest.Close()
	}
	l.seq++
	l.conns[c] = &connInfo{seq: l.seq, state: http.StateNew}
	return true
}

// track is the server's ConnState hook.
func (l *capListener) track(c net.Conn, st http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ci, ok := l.conns[c]
	if !ok {
		return // closed by admit already
	}
	if st == http.StateClosed || st == http.StateHijacked {
		delete(l.conns, c)
		return
	}
	ci.state = st
}
