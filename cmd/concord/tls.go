package main

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/concordmap/concord/node/pki"
)

// newTLSCmd is `concord tls`: create a system CA and node/operator
// certificates (the conventions of README "Security").
func newTLSCmd() *cobra.Command {
	root := &cobra.Command{Use: "tls", Short: "Create the certificates of a system (CA, servers, operators)"}
	ca := &cobra.Command{Use: "ca", Short: "Manage the system's certificate authority"}
	ca.AddCommand(newTLSCACreateCmd())
	cert := &cobra.Command{Use: "cert", Short: "Issue server and operator certificates"}
	cert.AddCommand(newTLSCertCreateCmd())
	root.AddCommand(ca, cert)
	return root
}

func newTLSCACreateCmd() *cobra.Command {
	var systemID, dir string
	var days int
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a CA for a system: SYSTEM-ca.pem and SYSTEM-ca-key.pem (keep the key offline)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := pki.CreateCA(systemID, pki.Validity{Duration: daysOr(days, pki.DefaultCAValidity)})
			if err != nil {
				return err
			}
			certFile, keyFile := pki.CAFiles(systemID)
			return writePair(cmd, dir, certFile, keyFile, p)
		},
	}
	cmd.Flags().StringVar(&systemID, "system-id", "default", "id of the system the CA signs for (the nodes' --system-id)")
	cmd.Flags().StringVar(&dir, "dir", ".", "directory to write the files into")
	cmd.Flags().IntVar(&days, "days", 5*365, "validity in days")
	return cmd
}

func newTLSCertCreateCmd() *cobra.Command {
	var (
		server, client         bool
		systemID, nodeID, name string
		addrs                  []string
		caFile, caKeyFile, dir string
		days                   int
	)
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Issue a server (--server --node-id) or operator (--client --name) certificate signed by the system CA",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if server == client {
				return fmt.Errorf("give exactly one of --server and --client")
			}
			defCert, defKey := pki.CAFiles(systemID)
			if caFile == "" {
				caFile = filepath.Join(dir, defCert)
			}
			if caKeyFile == "" {
				caKeyFile = filepath.Join(dir, defKey)
			}
			pair, err := pki.ReadPair(caFile, caKeyFile)
			if err != nil {
				return fmt.Errorf("read the CA (concord tls ca create --system-id %s): %w", systemID, err)
			}
			ca, err := pki.LoadCA(pair)
			if err != nil {
				return err
			}
			if ca.SystemID != "" && ca.SystemID != systemID {
				return fmt.Errorf("the CA in %s is for system %q, not %q", caFile, ca.SystemID, systemID)
			}
			v := pki.Validity{Duration: daysOr(days, pki.DefaultLeafValidity)}
			var p pki.Pair
			var certFile, keyFile string
			if server {
				if nodeID == "" {
					return fmt.Errorf("--server needs --node-id")
				}
				p, err = ca.IssueServer(pki.ServerRequest{SystemID: systemID, NodeID: nodeID, Addrs: addrs, Validity: v})
				certFile, keyFile = pki.ServerFiles(systemID, nodeID)
			} else {
				if name == "" {
					return fmt.Errorf("--client needs --name")
				}
				p, err = ca.IssueClient(pki.ClientRequest{SystemID: systemID, Name: name, Validity: v})
				certFile, keyFile = pki.ClientFiles(systemID, name)
			}
			if err != nil {
				return err
			}
			return writePair(cmd, dir, certFile, keyFile, p)
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&server, "server", false, "a node's certificate (server and client auth): needs --node-id")
	fl.BoolVar(&client, "client", false, "an operator's certificate for the CLI (client auth): needs --name")
	fl.StringVar(&systemID, "system-id", "default", "id of the system")
	fl.StringVar(&nodeID, "node-id", "", "--server: the node's --node-id")
	fl.StringVar(&name, "name", "", "--client: the operator's name")
	fl.StringSliceVar(&addrs, "addr", nil, "--server: extra IP addresses or DNS names the node is reached at (repeatable; 127.0.0.1 and localhost are always in)")
	fl.StringVar(&caFile, "ca-file", "", "CA certificate (default DIR/SYSTEM-ca.pem)")
	fl.StringVar(&caKeyFile, "ca-key-file", "", "CA key (default DIR/SYSTEM-ca-key.pem)")
	fl.StringVar(&dir, "dir", ".", "directory of the CA files and of the new files")
	fl.IntVar(&days, "days", 365, "validity in days")
	return cmd
}

func daysOr(days int, def time.Duration) time.Duration {
	if days <= 0 {
		return def
	}
	return time.Duration(days) * 24 * time.Hour
}

func writePair(cmd *cobra.Command, dir, certFile, keyFile string, p pki.Pair) error {
	if err := pki.WriteFiles(dir, certFile, keyFile, p); err != nil {
		return err
	}
	_, err := fmt.Fprintf(cmd.OutOrStdout(), "wrote %s and %s\n", filepath.Join(dir, certFile), filepath.Join(dir, keyFile))
	return err
}
