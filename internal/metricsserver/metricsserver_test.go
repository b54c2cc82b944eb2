package metricsserver

import (
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// Idle connections from anyone (no request sent) hold at most MaxConns of
// the daemon's descriptors, are dropped after ReadHeaderTimeout, and a
// scrape is served once they are.
func TestIdleConnectionsCannotStarveTheDaemon(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "vgpu_node_up 1\n") // the client's read checks what arrived
	})
	s, err := Listen("127.0.0.1:0", h, Options{MaxConns: 4, ReadHeaderTimeout: 300 * time.Millisecond, ReadTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	before := openFDs(t)
	var conns []net.Conn
	for i := 0; i < 64; i++ {
		c, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	time.Sleep(100 * time.Millisecond)
	// our 64 client ends + at most MaxConns server ends (+ slack for the runtime)
	if held := openFDs(t) - before - len(conns); held > 4+2 {
		t.Fatalf("64 idle connections hold %d of the server's descriptors, want at most 4", held)
	}
	// the idle ones are dropped (ReadHeaderTimeout): each queued one gets
	// its turn and is dropped in turn, and a scrape gets through
	cl := &http.Client{Timeout: 30 * time.Second}
	resp, err := cl.Get("http://" + s.Addr().String() + "/metrics")
	if err != nil {
		t.Fatalf("scrape behind 64 idle connections: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "vgpu_node_up 1\n" {
		t.Fatalf("scrape: %q", b)
	}
}

// A local user's idle connections, however many, do not keep a scrape
// waiting: at the cap each new connection closes the oldest idle one, so
// the scrape is served at once rather than after every idle connection's
// ReadHeaderTimeout in turn (300 of them behind a cap of 16 took 90 s).
func TestScrapeServedBesideManyIdleConnections(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "vgpu_node_up 1\n") // the client's read checks what arrived
	})
	s, err := Listen("127.0.0.1:0", h, Options{}) // the defaults vgpu node runs with
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < 300; i++ {
		c, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	// well under the default ReadHeaderTimeout (5 s): an answer within it
	// cannot come from idle connections timing out
	cl := &http.Client{Timeout: 4 * time.Second}
	resp, err := cl.Get("http://" + s.Addr().String() + "/metrics")
	if err != nil {
		t.Fatalf("scrape beside 300 idle connections: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "vgpu_node_up 1\n" {
		t.Fatalf("scrape: %q", b)
	}
}
