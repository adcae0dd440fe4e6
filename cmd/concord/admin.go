package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/concordmap/concord/node/client/admin"
	"github.com/concordmap/concord/node/cluster"
)

// adminFlags locate the node an operator command talks to (its gRPC port).
type adminFlags struct {
	addr    string
	timeout time.Duration
	tls     clientTLSFlags
}

func (f *adminFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.addr, "addr", "127.0.0.1:7701", "gRPC address of any node of the system")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 5*time.Second, "deadline for the request")
	f.tls.bind(cmd.Flags())
}

// call runs fn with an admin client of the node (see callConn).
func (f *adminFlags) call(ctx context.Context, fn func(context.Context, *admin.Client) error) error {
	return f.callConn(ctx, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		return fn(ctx, admin.New(cc))
	})
}

// callConn dials the node and runs fn with a deadline: TLS with --ca-file
// (presenting the operator certificate when given), plaintext otherwise
// (nodes started with --insecure or --dev); the operator token, when
// given, travels as gRPC metadata, and every call carries the admin marker
// (cluster.AdminMetadataKey): it is an operator's.
func (f *adminFlags) callConn(ctx context.Context, fn func(context.Context, grpc.ClientConnInterface) error) error {
	creds := insecure.NewCredentials()
	tc, err := f.tls.config()
	if err != nil {
		return err
	}
	if tc != nil {
		creds = credentials.NewTLS(tc)
	}
	tok, err := f.tls.token()
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return fmt.Errorf("connect to %s: %w", f.addr, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	if tok != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
	}
	if err := fn(cluster.WithAdminMarker(ctx), conn); err != nil {
		if tc == nil && plaintextRefused(err) {
			return fmt.Errorf("%s: %w (no --ca-file given, so the CLI spoke plaintext: a node serves TLS unless it runs with --dev or --insecure; "+
				"pass --ca-file or set CONCORD_CA_FILE)", f.addr, err)
		}
		return fmt.Errorf("%s: %w", f.addr, err)
	}
	return nil
}

// plaintextRefused reports whether err looks like a TLS port hanging up on
// a plaintext client: the connection was made (not refused) and then
// ended before any gRPC answer.
func plaintextRefused(err error) bool {
	return status.Code(err) == codes.Unavailable && !strings.Contains(err.Error(), "connection refused") &&
		(strings.Contains(err.Error(), "server preface") || strings.Contains(err.Error(), "connection reset") ||
			strings.Contains(err.Error(), "EOF"))
}

func newMembersCmd() *cobra.Command {
	var f adminFlags
	cmd := &cobra.Command{
		Use:   "members",
		Short: "List the gossip members of the system as one node sees them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.call(cmd.Context(), func(ctx context.Context, c *admin.Client) error {
				ms, err := c.Members(ctx)
				if err != nil {
					return err
				}
				return printMembers(cmd.OutOrStdout(), ms)
			})
		},
	}
	f.register(cmd)
	return cmd
}

func printMembers(w io.Writer, ms []admin.Member) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATUS\tGOSSIP\tHTTP\tGRPC\tRAFT\tVERSION")
	for _, m := range ms {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.ID, m.Status, m.Gossip, m.HTTP, m.GRPC, m.Raft, m.Version)
	}
	return tw.Flush()
}

func newRaftCmd() *cobra.Command {
	raftCmd := &cobra.Command{Use: "raft", Short: "Inspect and change the Raft configuration"}
	var peers, remove adminFlags
	peersCmd := &cobra.Command{
		Use:   "peers",
		Short: "List the Raft servers, their suffrage and the leader",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return peers.call(cmd.Context(), func(ctx context.Context, c *admin.Client) error {
				ps, err := c.RaftPeers(ctx)
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NODE\tADDRESS\tSUFFRAGE\tLEADER")
				for _, p := range ps {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%v\n", p.ID, p.Address, p.Suffrage, p.Leader)
				}
				return tw.Flush()
			})
		},
	}
	peers.register(peersCmd)
	var force bool
	removeCmd := &cobra.Command{
		Use:   "remove-peer NODE_ID",
		Short: "Remove a server from the Raft configuration (e.g. one that will never return)",
		Long: `Remove a server from the Raft configuration (e.g. one that will never return).

A server that gossip still sees alive is refused: the leader would add it back
at once. Stop it first (a dead server is also removed by itself after
--dead-server-cleanup), or stop it with --leave-on-shutdown for a graceful
leave. --force removes it while it runs and keeps it out of Raft until it
leaves, dies or rejoins at another address.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return remove.call(cmd.Context(), func(ctx context.Context, c *admin.Client) error {
				if err := c.RemovePeer(ctx, args[0], force); err != nil {
					return err
				}
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "removed %s from the raft configuration\n", args[0])
				return err
			})
		},
	}
	remove.register(removeCmd)
	removeCmd.Flags().BoolVar(&force, "force", false, "remove the server even though gossip sees it alive, and keep it out until it leaves, dies or rejoins")
	raftCmd.AddCommand(peersCmd, removeCmd)
	return raftCmd
}

func newKeygenCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "keygen",
		Short: "Print a new random gossip encryption key (base64, 32 bytes) for --gossip-key-file or concord keyring install",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key := make([]byte, 32)
			if _, err := rand.Read(key); err != nil {
				return fmt.Errorf("read random key: %w", err)
			}
			_, err := fmt.Fprintln(cmd.OutOrStdout(), base64.StdEncoding.EncodeToString(key))
			return err
		},
	}
}
