package main

import (
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/embed"
)

// newEtcdCommand runs a single-member etcd from go.etcd.io/etcd/server/v3/embed
// (etcd's own main pulls in the gateway and grpc-proxy besides; the tests need
// one member on loopback). It serves until SIGTERM or SIGINT.
func newEtcdCommand() *cobra.Command {
	var dataDir, clientURL, peerURL, logLevel string
	cmd := &cobra.Command{
		Use:          "etcd",
		Short:        "single-member etcd (embedded go.etcd.io/etcd/server/v3)",
		SilenceUsage: true,
		RunE: func(*cobra.Command, []string) error {
			cfg := embed.NewConfig()
			cfg.Name = "default"
			cfg.Dir = dataDir
			cfg.LogLevel = logLevel
			cu, err := url.Parse(clientURL)
			if err != nil {
				return fmt.Errorf("--listen-client-urls %q: %w", clientURL, err)
			}
			pu, err := url.Parse(peerURL)
			if err != nil {
				return fmt.Errorf("--listen-peer-urls %q: %w", peerURL, err)
			}
			cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
			cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
			cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
			e, err := embed.StartEtcd(cfg)
			if err != nil {
				return err
			}
			defer e.Close()
			select {
			case <-e.Server.ReadyNotify():
				fmt.Fprintf(os.Stderr, "etcd: ready, serving %s\n", clientURL)
			case <-time.After(120 * time.Second):
				return fmt.Errorf("etcd: not ready after 120 s")
			}
			sig := make(chan os.Signal, 1)
			signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
			select {
			case err := <-e.Err():
				return err
			case s := <-sig:
				fmt.Fprintf(os.Stderr, "etcd: %v, stopping\n", s)
				return nil
			}
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "default.etcd", "directory of the member's data")
	cmd.Flags().StringVar(&clientURL, "listen-client-urls", "http://127.0.0.1:2379", "URL to serve clients on (also advertised)")
	cmd.Flags().StringVar(&peerURL, "listen-peer-urls", "http://127.0.0.1:2380", "URL to serve peers on (also advertised)")
	cmd.Flags().StringVar(&logLevel, "log-level", "warn", "debug, info, warn or error")
	return cmd
}
