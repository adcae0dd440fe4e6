package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/concordmap/concord/node/client/admin"
)

// newFederationCmd groups `concord federation token|link|list|status|unlink`,
// clients of the Federation admin methods on any node's gRPC port.
func newFederationCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "federation",
		Short: "Link this system with other Concord systems and foreign MAP servers",
		Long: "Peering: run `federation token --peer <their-system-id>` on one system, then\n" +
			"`federation link --token <token>` on the other. Links are Raft state on both sides.\n" +
			"A foreign MAP server: `federation link --kind map --system-id ID --url ws(s)://HOST/PATH`.",
	}
	cmd.AddCommand(newFedTokenCmd(), newFedLinkCmd(), newFedListCmd("list", false), newFedListCmd("status", true), newFedUnlinkCmd())
	return cmd
}

// policyFlags are a link's export/import policies and transitive switch.
type policyFlags struct {
	export, imp string
	transitive  bool
	maxHops     uint32
	bufMsgs     uint32
	bufBytes    uint64
	bufAge      time.Duration
	overflow    string
}

func (p *policyFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&p.export, "export", "none", "what this system shows the peer: none, all, role:R, name:GLOB, tag:T (metadata.tags)")
	cmd.Flags().StringVar(&p.imp, "import", "all", "what this system accepts from the peer (same forms)")
	cmd.Flags().BoolVar(&p.transitive, "transitive", false, "let messages cross this link on their way to a third system")
	cmd.Flags().Uint32Var(&p.maxHops, "max-hops", 5, "hop bound of envelopes this system originates over the link")
	cmd.Flags().Uint32Var(&p.bufMsgs, "buffer-messages", 1000, "outage buffer: messages held per node while the link is down")
	cmd.Flags().Uint64Var(&p.bufBytes, "buffer-bytes", 10<<20, "outage buffer: bytes held per node")
	cmd.Flags().DurationVar(&p.bufAge, "buffer-age", time.Hour, "outage buffer: oldest message kept")
	cmd.Flags().StringVar(&p.overflow, "buffer-overflow", "drop-oldest", "full buffer: drop-oldest, drop-newest or reject-new")
}

// buffer is the outage buffer policy the flags describe.
func (p *policyFlags) buffer() (admin.Buffer, error) {
	if !admin.ValidOverflow(p.overflow) {
		return admin.Buffer{}, fmt.Errorf("--buffer-overflow %q: want drop-oldest, drop-newest or reject-new", p.overflow)
	}
	if p.bufMsgs == 0 || p.bufBytes == 0 || p.bufAge <= 0 {
		return admin.Buffer{}, fmt.Errorf("--buffer-messages, --buffer-bytes and --buffer-age must be > 0")
	}
	return admin.Buffer{MaxMessages: p.bufMsgs, MaxBytes: p.bufBytes, MaxAge: p.bufAge, Overflow: p.overflow}, nil
}

// parse returns the link settings the flags describe.
func (p *policyFlags) parse() (st admin.LinkSettings, err error) {
	if st.Export, err = admin.ParsePolicy(p.export); err != nil {
		return st, fmt.Errorf("--export: %w", err)
	}
	if st.Import, err = admin.ParsePolicy(p.imp); err != nil {
		return st, fmt.Errorf("--import: %w", err)
	}
	st.Transitive, st.MaxHops = p.transitive, p.maxHops
	st.Buffer, err = p.buffer()
	return st, err
}

func newFedTokenCmd() *cobra.Command {
	var (
		f    adminFlags
		p    policyFlags
		peer string
		ttl  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "token --peer SYSTEM_ID",
		Short: "Issue a one-time peering token for another system (prints it)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := p.parse()
			if err != nil {
				return err
			}
			return f.call(cmd.Context(), func(ctx context.Context, c *admin.Client) error {
				token, err := c.CreatePeeringToken(ctx, peer, ttl, st)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintln(cmd.OutOrStdout(), token)
				return err
			})
		},
	}
	f.register(cmd)
	p.register(cmd)
	cmd.Flags().StringVar(&peer, "peer", "", "system id of the system that will redeem the token (required)")
	cmd.Flags().DurationVar(&ttl, "ttl", time.Hour, "how long the token stays redeemable")
	_ = cmd.MarkFlagRequired("peer")
	return cmd
}

func newFedLinkCmd() *cobra.Command {
	var (
		f     adminFlags
		p     policyFlags
		m     mapLinkFlags
		token string
	)
	cmd := &cobra.Command{
		Use:   "link --token TOKEN | link --kind map --system-id ID --url ws(s)://HOST/PATH",
		Short: "Link this system with another Concord system (a token) or a foreign MAP server (--kind map)",
		Long: "--kind concord (default) redeems a peering token printed by `federation token` on the other system.\n" +
			"--kind map links a foreign MAP server by its WebSocket URL: one node of this system (chosen by the\n" +
			"leader, moved when it dies) connects there as a MAP participant, registers a proxy agent for each\n" +
			"exported agent and imports the foreign agents as remote agents of --system-id. Credentials come from\n" +
			"--auth-token-file (never a flag value); --map-ca-file pins the CA of a wss:// server.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := p.parse()
			if err != nil {
				return err
			}
			switch m.kind {
			case "concord":
				if token == "" || m.systemID != "" || m.url != "" {
					return fmt.Errorf("--kind concord takes --token (and no --system-id or --url)")
				}
			case "map":
				if token != "" || st.Transitive {
					return fmt.Errorf("--kind map takes --system-id and --url (no --token, no --transitive)")
				}
				spec, err := m.spec(st)
				if err != nil {
					return err
				}
				return f.call(cmd.Context(), func(ctx context.Context, c *admin.Client) error {
					l, err := c.CreateMapLink(ctx, spec)
					if err != nil {
						return err
					}
					_, err = fmt.Fprintf(cmd.OutOrStdout(), "linked to MAP system %s at %s (auth %s)\n", l.PeerSystemID, l.URL, l.Auth)
					return err
				})
			default:
				return fmt.Errorf("--kind %q: want concord or map", m.kind)
			}
			return f.call(cmd.Context(), func(ctx context.Context, c *admin.Client) error {
				l, err := c.CreateLink(ctx, strings.TrimSpace(token), st)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "linked to %s (%s)\n", l.PeerSystemID, strings.Join(l.PeerAddrs, ","))
				return err
			})
		},
	}
	f.register(cmd)
	p.register(cmd)
	m.register(cmd)
	cmd.Flags().StringVar(&token, "token", "", "token printed by `federation token` on the other system (--kind concord)")
	return cmd
}

// mapLinkFlags describe a link of kind map.
type mapLinkFlags struct {
	kind, systemID, url, authMethod, tokenFile, caFile string
}

func (m *mapLinkFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&m.kind, "kind", "concord", "what to link: concord (a Concord system, by token) or map (a foreign MAP server, by URL)")
	fl.StringVar(&m.systemID, "system-id", "", "--kind map: the id this system gives the foreign system (agents appear as ID:agent:X)")
	fl.StringVar(&m.url, "url", "", "--kind map: the foreign server's MAP WebSocket URL, ws:// or wss://")
	fl.StringVar(&m.authMethod, "auth-method", "bearer", "--kind map: how --auth-token-file's token is presented in map/connect: bearer or api-key")
	fl.StringVar(&m.tokenFile, "auth-token-file", "", "--kind map: file holding the token or API key for the foreign server (stored in Raft, never printed)")
	fl.StringVar(&m.caFile, "map-ca-file", "", "--kind map: PEM CA the wss:// server's certificate must chain to (default: system roots)")
}

func (m *mapLinkFlags) spec(st admin.LinkSettings) (admin.MapLinkSpec, error) {
	spec := admin.MapLinkSpec{SystemID: m.systemID, URL: m.url, LinkSettings: st}
	if m.systemID == "" || m.url == "" {
		return spec, fmt.Errorf("--kind map needs --system-id and --url")
	}
	if m.tokenFile != "" {
		tok, err := secretFrom(m.tokenFile, "")
		if err != nil {
			return spec, fmt.Errorf("--auth-token-file: %w", err)
		}
		if m.authMethod != "bearer" && m.authMethod != "api-key" {
			return spec, fmt.Errorf("--auth-method %q: want bearer or api-key", m.authMethod)
		}
		spec.AuthMethod, spec.Token = m.authMethod, string(tok)
	}
	if m.caFile != "" {
		ca, err := os.ReadFile(m.caFile)
		if err != nil {
			return spec, fmt.Errorf("--map-ca-file: %w", err)
		}
		spec.CAPEM = ca
	}
	return spec, nil
}

func newFedListCmd(use string, detail bool) *cobra.Command {
	var f adminFlags
	short := "List this system's links"
	if detail {
		short = "Show each link as the node sees it: state, streams, RTT, queue, counters"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.call(cmd.Context(), func(ctx context.Context, c *admin.Client) error {
				res, err := c.ListLinks(ctx)
				if err != nil {
					return err
				}
				return printLinks(cmd.OutOrStdout(), res, detail)
			})
		},
	}
	f.register(cmd)
	return cmd
}

func printLinks(w io.Writer, res admin.Links, detail bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if detail {
		fmt.Fprintf(tw, "# system %s, node %s\n", res.SystemID, res.NodeID)
		fmt.Fprintln(tw, "PEER\tKIND\tSTATE\tSTREAMS\tSERVER\tRTT\tQUEUE\tSENT\tRECEIVED\tDROPPED\tRECONNECTS\tIMPORTED")
	} else {
		fmt.Fprintln(tw, "PEER\tKIND\tSERVERS\tEXPORT\tIMPORT\tTRANSITIVE\tMAX_HOPS\tBUFFER\tTLS")
	}
	for _, st := range res.Links {
		if detail && st.Kind == "map" {
			fmt.Fprintf(tw, "%s\tmap\t%s\t%d proxies\t%s (holder %s)\t-\t%d (%d B)\t%d\t%d\t%d\t%d\t%d agents (v%d), %d inbound errors\n",
				st.PeerSystemID, st.State, st.ProxiesUp, st.URL, orDash(st.Holder), st.QueueDepth, st.QueueBytes, st.Sent, st.Received,
				st.Dropped, st.Reconnects, st.ImportedAgents, st.ImportedVersion, st.InboundErrors)
			continue
		}
		if detail {
			fmt.Fprintf(tw, "%s\tconcord\t%s\t%d\t%s\t%s\t%d (%d B)\t%d\t%d\t%d\t%d\t%d agents (v%d)\n", st.PeerSystemID, st.State,
				st.StreamsUp, st.ConnectedTo, st.RTT, st.QueueDepth,
				st.QueueBytes, st.Sent, st.Received, st.Dropped, st.Reconnects, st.ImportedAgents, st.ImportedVersion)
			continue
		}
		b := st.Buffer
		servers := strings.Join(st.PeerAddrs, ",")
		if st.Kind == "map" {
			servers = st.URL + " (auth " + st.Auth + ", holder " + orDash(st.Holder) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%v\t%d\t%d msgs/%d B/%v %s\t%v\n", st.PeerSystemID, st.Kind, servers,
			st.Export, st.Import, st.Transitive, st.MaxHops,
			b.MaxMessages, b.MaxBytes, b.MaxAge, b.Overflow, st.HasPeerCA)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newFedUnlinkCmd() *cobra.Command {
	var f adminFlags
	cmd := &cobra.Command{
		Use:   "unlink SYSTEM_ID",
		Short: "Remove the link to a system (and its imported directory) on this side",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.call(cmd.Context(), func(ctx context.Context, c *admin.Client) error {
				res, err := c.Unlink(ctx, args[0])
				if err != nil {
					return err
				}
				switch {
				case res.PeerNotified:
					_, err = fmt.Fprintf(cmd.OutOrStdout(), "unlinked %s (it removed its side too)\n", args[0])
				case res.PeerError == "": // a map link: the foreign server keeps no side
					_, err = fmt.Fprintf(cmd.OutOrStdout(), "unlinked %s\n", args[0])
				default:
					_, err = fmt.Fprintf(cmd.OutOrStdout(), "unlinked %s here; %s was not reached (%s): unlink there too\n",
						args[0], args[0], res.PeerError)
				}
				return err
			})
		},
	}
	f.register(cmd)
	return cmd
}
