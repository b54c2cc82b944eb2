// Package runtimelog writes vgpu-runtime's and vgpu-hook's messages where
// the caller of an OCI runtime looks for runc's: the --log file in
// --log-format, and stderr.
package runtimelog

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

// Logger writes our messages where the caller of runc looks for runc's: the
// --log file in --log-format (docker and containerd read the last "error" line of
// the json log and print its msg), and stderr.
type Logger struct {
	Path   string // --log; "" = none
	Format string // --log-format: "json" or "text"
	Stderr io.Writer
}

func (l *Logger) line(level, msg string, now time.Time) []byte {
	ts := now.UTC().Format(time.RFC3339Nano)
	if l.Format == "json" {
		b, _ := json.Marshal(struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
			Time  string `json:"time"`
		}{level, msg, ts})
		return append(b, '\n')
	}
	// logrus' text format, as runc writes it.
	return []byte(fmt.Sprintf("time=%q level=%s msg=%s\n", ts, level, strconv.Quote(msg)))
}

func (l *Logger) write(level, msg string) {
	if l.Path != "" {
		if f, err := os.OpenFile(l.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err == nil {
			_, _ = f.Write(l.line(level, msg, time.Now()))
			_ = f.Close()
		}
	}
}

// Error records msg in the log file and on stderr.
func (l *Logger) Error(msg string) {
	l.write("error", msg)
	if l.Stderr != nil {
		fmt.Fprintln(l.Stderr, "vgpu-runtime: "+msg)
	}
}

// Warn records msg in the log file only (stderr of a successful create is not
// ours to fill).
func (l *Logger) Warn(msg string) { l.write("warning", msg) }
