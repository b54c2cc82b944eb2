// Package metricsserver serves a daemon's Prometheus metrics so that no
// client, local or remote, can take from the daemon what its own work
// needs: a cap on the connections served at once (the rest wait in the
// kernel's accept queue, holding none of the daemon's descriptors) and
// timeouts on every phase of a request, so that an idle or slow client is
// dropped. `vgpu node` enforces limits in the same process: a listener
// that let any local user hold its descriptors would skip every
// enforcement round.
package metricsserver

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
)

// Options of Listen; zero fields take the defaults.
type Options struct {
	MaxConns          int           // connections served at once (16)
	ReadHeaderTimeout time.Duration // 5 s
	ReadTimeout       time.Duration // 10 s
	WriteTimeout      time.Duration // 30 s: a scrape of a busy host
	IdleTimeout       time.Duration // 30 s between requests of a keep-alive connection
	ErrorLog          io.Writer     // where Serve's errors go (nil: discarded)
}

// Defaults: a few scrapers and a person with curl at once; never more
// descriptors than the daemon can spare.
const (
	DefaultMaxConns = 16
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
	s := &Server{ln: netutil.LimitListener(ln, o.MaxConns), srv: &http.Server{
		Handler:           h,
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
