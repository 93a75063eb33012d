package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/gttsplit/gttsplit/internal/cli"
	"github.com/gttsplit/gttsplit/internal/natsauth"
)

func newNATSUsers(stdout io.Writer) *cobra.Command {
	var hostsFile string
	c := &cobra.Command{
		Use:   "nats-users [--hosts-file FILE] [HOST...]",
		Short: "Write the NATS users of a fleet: one per GPU host, and the aggregators'",
		Long: `nats-users writes the accounts file the fleet's NATS servers include
(deploy/nats/accounts.conf): one user per host, named after it, which may
publish only that host's events and read only its own replies; the
aggregators' user, which administers the events stream (nats.stream), the
buckets and their consumers; and the system account. Each password is read
by the servers from their environment: NATS_<HOST>_PASSWORD,
NATS_AGGREGATOR_PASSWORD, NATS_SYS_PASSWORD. The hosts are the arguments
and the lines of --hosts-file ('#' starts a comment). A collector's host
key must name its host. Details: docs/security.md.`,
		Example: `  aggregator nats-users strix01 strix02 > accounts.conf
  aggregator nats-users --hosts-file hosts.txt > accounts.conf`,
		Args: cli.Args(cobra.ArbitraryArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			hosts := args
			if hostsFile != "" {
				f, err := os.Open(hostsFile)
				if err != nil {
					return cli.Usage(fmt.Errorf("--hosts-file: %w", err))
				}
				more, err := natsauth.ReadHosts(f)
				f.Close()
				if err != nil {
					return cli.Usage(fmt.Errorf("--hosts-file: %w", err))
				}
				hosts = append(hosts, more...)
			}
			if len(hosts) == 0 {
				return cli.Usage(errors.New("no host: give the GPU hosts as arguments or in --hosts-file"))
			}
			b, err := natsauth.AccountsConf(hosts, cfg.NATS.Stream)
			if err != nil {
				return cli.Usage(err)
			}
			_, err = stdout.Write(b)
			return err
		},
	}
	c.Flags().StringVar(&hostsFile, "hosts-file", "", "file of GPU hosts, one per line")
	return c
}
