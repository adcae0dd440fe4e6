package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// newACLCmd is `concord acl token create|list|revoke`: MAP API keys,
// through the AclAdmin service of any node (an admin API).
func newACLCmd() *cobra.Command {
	aclCmd := &cobra.Command{Use: "acl", Short: "Manage MAP participant credentials (API keys)"}
	tokenCmd := &cobra.Command{Use: "token", Short: "Create, list and revoke API keys"}
	tokenCmd.AddCommand(newTokenCreateCmd(), newTokenListCmd(), newTokenRevokeCmd())
	aclCmd.AddCommand(tokenCmd)
	return aclCmd
}

func aclCall(ctx context.Context, f *adminFlags, fn func(context.Context, concordv1.AclAdminClient) error) error {
	return f.callConn(ctx, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		return fn(ctx, concordv1.NewAclAdminClient(cc))
	})
}

func newTokenCreateCmd() *cobra.Command {
	var f adminFlags
	var req concordv1.AclCreateTokenRequest
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create an API key; its secret is printed once",
		Long: `Create an API key bound to a participant id pattern, the participant types
and (optionally) the capabilities it allows. The key is printed once, on
stdout: only its hash is stored. Connect with
  map/connect {..., "auth": {"method": "api-key", "token": "<key>"}}`,
		Example: `  concord acl token create --participant 'worker-*' --types agent
  concord acl token create --participant ops --types system --description "operator console"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ttl < 0 {
				return fmt.Errorf("--ttl must be >= 0")
			}
			req.TtlSeconds = int64(ttl / time.Second)
			return aclCall(cmd.Context(), &f, func(ctx context.Context, c concordv1.AclAdminClient) error {
				res, err := c.CreateToken(ctx, &req)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "created API key %s for participant %s (%s)\n",
					res.GetKey().GetId(), res.GetKey().GetParticipantIdPattern(), strings.Join(res.GetKey().GetParticipantTypes(), ","))
				_, err = fmt.Fprintln(cmd.OutOrStdout(), res.GetToken())
				return err
			})
		},
	}
	f.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&req.ParticipantIdPattern, "participant", "", `participant id the key connects as: an id, a prefix ending in "*", or "*" (required)`)
	fl.StringSliceVar(&req.ParticipantTypes, "types", []string{"agent"}, "participant types allowed: agent, client, system, gateway")
	fl.StringSliceVar(&req.Capabilities, "capability", nil, `capability flags allowed (e.g. messaging.canSend,lifecycle.canStop); default: the type's defaults`)
	fl.StringVar(&req.Description, "description", "", "note shown by list")
	fl.DurationVar(&ttl, "ttl", 0, "expire the key after this long (0: never)")
	_ = cmd.MarkFlagRequired("participant")
	return cmd
}

func newTokenListCmd() *cobra.Command {
	var f adminFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List API keys (never their secrets)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return aclCall(cmd.Context(), &f, func(ctx context.Context, c concordv1.AclAdminClient) error {
				res, err := c.ListTokens(ctx, &concordv1.AclListTokensRequest{})
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tPARTICIPANT\tTYPES\tCAPABILITIES\tCREATED\tEXPIRES\tDESCRIPTION")
				for _, k := range res.GetKeys() {
					caps := strings.Join(k.GetCapabilities(), ",")
					if caps == "" {
						caps = "(type defaults)"
					}
					exp := "never"
					if k.GetExpiresMs() > 0 {
						exp = time.UnixMilli(k.GetExpiresMs()).UTC().Format(time.RFC3339)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.GetId(), k.GetParticipantIdPattern(),
						strings.Join(k.GetParticipantTypes(), ","), caps,
						time.UnixMilli(k.GetCreatedMs()).UTC().Format(time.RFC3339), exp, k.GetDescription())
				}
				return tw.Flush()
			})
		},
	}
	f.register(cmd)
	return cmd
}

func newTokenRevokeCmd() *cobra.Command {
	var f adminFlags
	cmd := &cobra.Command{
		Use:   "revoke KEY_ID",
		Short: "Revoke an API key: new connects with it fail",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return aclCall(cmd.Context(), &f, func(ctx context.Context, c concordv1.AclAdminClient) error {
				if _, err := c.RevokeToken(ctx, &concordv1.AclRevokeTokenRequest{Id: args[0]}); err != nil {
					return err
				}
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "revoked API key %s\n", args[0])
				return err
			})
		},
	}
	f.register(cmd)
	return cmd
}
