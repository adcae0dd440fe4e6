package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/concordmap/concord/node/client/admin"
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

func newTokenCreateCmd() *cobra.Command {
	var f adminFlags
	var spec admin.KeySpec
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create an API key; its secret is printed once",
		Long: `Create an API key bound to a participant id pattern, the participant types
and (optionally) the capabilities it allows. The key is printed once, on
stdout: only its hash is stored. Connect with
  map/connect {..., "auth": {"method": "api-key", "token": "<key>"}}`,
		Example: `  concord acl token create --participant 'worker-*' --types agent
  concord acl token create --participant ops --types system --description "operator console"
  concord acl token create --participant gw-lab --types gateway --gateway-sources lab --gateway-targets dev,dc2`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if spec.TTL < 0 {
				return fmt.Errorf("--ttl must be >= 0")
			}
			return f.call(cmd.Context(), func(ctx context.Context, c *admin.Client) error {
				key, secret, err := c.CreateAPIKey(ctx, spec)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "created API key %s for participant %s (%s)\n",
					key.ID, key.Participant, strings.Join(key.Types, ","))
				_, err = fmt.Fprintln(cmd.OutOrStdout(), secret)
				return err
			})
		},
	}
	f.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&spec.Participant, "participant", "", `participant id the key connects as: an id, a prefix ending in "*", or "*" (required)`)
	fl.StringSliceVar(&spec.Types, "types", []string{"agent"}, "participant types allowed: agent, client, system, gateway")
	fl.StringSliceVar(&spec.Capabilities, "capability", nil, `capability flags allowed (e.g. messaging.canSend,lifecycle.canStop); default: the type's defaults`)
	fl.StringVar(&spec.Description, "description", "", "note shown by list")
	fl.DurationVar(&spec.TTL, "ttl", 0, "expire the key after this long (0: never)")
	fl.StringSliceVar(&spec.GatewaySources, "gateway-sources", nil, `for --types gateway: the foreign systems the gateway may route for (map/federation/route sources; "*" = any)`)
	fl.StringSliceVar(&spec.GatewayTargets, "gateway-targets", nil, `for --types gateway: the systems it may route to (this system, linked systems; "*" = any)`)
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
			return f.call(cmd.Context(), func(ctx context.Context, c *admin.Client) error {
				keys, err := c.ListAPIKeys(ctx)
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tPARTICIPANT\tTYPES\tCAPABILITIES\tGATEWAY\tCREATED\tEXPIRES\tDESCRIPTION")
				for _, k := range keys {
					caps := strings.Join(k.Capabilities, ",")
					if caps == "" {
						caps = "(type defaults)"
					}
					exp := "never"
					if !k.Expires.IsZero() {
						exp = k.Expires.Format(time.RFC3339)
					}
					gw := "-" // routes for SOURCES to TARGETS (map/federation/route)
					if len(k.GatewaySources)+len(k.GatewayTargets) > 0 {
						gw = strings.Join(k.GatewaySources, ",") + "->" + strings.Join(k.GatewayTargets, ",")
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Participant,
						strings.Join(k.Types, ","), caps, gw, k.Created.Format(time.RFC3339), exp, k.Description)
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
			return f.call(cmd.Context(), func(ctx context.Context, c *admin.Client) error {
				if err := c.RevokeAPIKey(ctx, args[0]); err != nil {
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
