package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/concordmap/concord/node/client/admin"
	"github.com/concordmap/concord/node/membership"
)

// errNotEverywhere is returned when a keyring change did not reach every
// member: the output lists which, and the step is safe to run again.
var errNotEverywhere = errors.New("the change did not reach every member (see above); fix them and run it again")

func newKeyringCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keyring",
		Short: "List and rotate the gossip encryption key on every node",
		Long: `List and rotate the gossip encryption key on every node of the system.

Rotation without downtime, one step at a time (each reaches every alive node
through the node given with --addr):

  concord keygen > new.key
  concord keyring install --gossip-key-file new.key  # every node decrypts with both keys
  concord keyring use FINGERPRINT                    # every node encrypts with the new one
  concord keyring remove OLD_FINGERPRINT             # the old key is gone

Keys are named by fingerprint (concord keyring list); a key itself is only
ever read from a file or stdin, never from the command line. Each node keeps
its ring in <data-dir>/gossip-keyring.json. A node that was down during a
step misses it: see README, "Rotating the gossip key".`,
	}
	var list, install, use, remove adminFlags
	listCmd := &cobra.Command{
		Use:   "list",
		Short: "List every node's installed keys by fingerprint",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return list.call(cmd.Context(), func(ctx context.Context, c *admin.Client) error {
				nodes, err := c.KeyringList(ctx)
				if err != nil {
					return err
				}
				return printKeyrings(cmd.OutOrStdout(), nodes)
			})
		},
	}
	list.register(listCmd)

	var keyFile string
	installCmd := &cobra.Command{
		Use:   "install --gossip-key-file FILE",
		Short: "Install a key on every node (read from FILE, or stdin with -)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key, err := readKeyFile(keyFile, cmd.InOrStdin())
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "installing key %s\n", membership.KeyFingerprint(key))
			return install.call(cmd.Context(), func(ctx context.Context, c *admin.Client) error {
				nodes, err := c.KeyringInstall(ctx, key)
				if err != nil {
					return err
				}
				return printResults(cmd.OutOrStdout(), nodes)
			})
		},
	}
	install.register(installCmd)
	installCmd.Flags().StringVar(&keyFile, "gossip-key-file", "", "file holding the base64 key (concord keygen); - reads stdin")
	_ = installCmd.MarkFlagRequired("gossip-key-file")

	useCmd := &cobra.Command{
		Use:   "use FINGERPRINT",
		Short: "Make an installed key the primary (encrypting) key on every node",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return use.call(cmd.Context(), func(ctx context.Context, c *admin.Client) error {
				nodes, err := c.KeyringUse(ctx, args[0])
				if err != nil {
					return err
				}
				return printResults(cmd.OutOrStdout(), nodes)
			})
		},
	}
	use.register(useCmd)

	removeCmd := &cobra.Command{
		Use:   "remove FINGERPRINT",
		Short: "Remove a key that is not primary from every node",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return remove.call(cmd.Context(), func(ctx context.Context, c *admin.Client) error {
				nodes, err := c.KeyringRemove(ctx, args[0])
				if err != nil {
					return err
				}
				return printResults(cmd.OutOrStdout(), nodes)
			})
		},
	}
	remove.register(removeCmd)
	cmd.AddCommand(listCmd, installCmd, useCmd, removeCmd)
	return cmd
}

// readKeyFile reads a base64 key from path, or from stdin when path is -.
func readKeyFile(path string, stdin io.Reader) ([]byte, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(io.LimitReader(stdin, 4096))
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("--gossip-key-file: %w", err)
	}
	return decodeKey(string(b), "--gossip-key-file")
}

func printKeyrings(w io.Writer, nodes []admin.NodeKeyring) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tKEY\tPRIMARY\tERROR")
	failed := false
	for _, n := range nodes {
		if n.Error != "" {
			failed = true
			fmt.Fprintf(tw, "%s\t-\t-\t%s\n", n.NodeID, n.Error)
			continue
		}
		for _, k := range n.Keys {
			fmt.Fprintf(tw, "%s\t%s\t%v\t\n", n.NodeID, k.Fingerprint, k.Primary)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if failed {
		return errors.New("some nodes did not answer (see above)")
	}
	return nil
}

func printResults(w io.Writer, nodes []admin.NodeResult) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tRESULT")
	failed := false
	for _, n := range nodes {
		result := "ok"
		if n.Error != "" {
			failed, result = true, n.Error
		}
		fmt.Fprintf(tw, "%s\t%s\n", n.NodeID, result)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if failed {
		return errNotEverywhere
	}
	return nil
}
