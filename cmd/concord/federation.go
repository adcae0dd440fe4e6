package main

import (
	"context"
	"encoding/json"
	"errors"
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
			"`federation link --peering-token-file <file>` on the other (the token is a secret: never\n" +
			"put it on a command line). Links are Raft state on both sides.\n" +
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
	guaranteed  bool
	outMsgs     uint32
	outBytes    uint64
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
	cmd.Flags().BoolVar(&p.guaranteed, "guaranteed", false, "every message over the link is guaranteed (kept in Raft until the peer acknowledges), not only those with meta.delivery \"guaranteed\"")
	cmd.Flags().Uint32Var(&p.outMsgs, "outbox-messages", admin.DefaultOutboxMessages, "guaranteed outbox: messages held in Raft for the peer")
	cmd.Flags().Uint64Var(&p.outBytes, "outbox-bytes", admin.DefaultOutboxBytes, "guaranteed outbox: bytes held in Raft for the peer")
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
	if p.outMsgs == 0 || p.outBytes == 0 {
		return st, fmt.Errorf("--outbox-messages and --outbox-bytes must be > 0")
	}
	st.Outbox = admin.Outbox{Guaranteed: p.guaranteed, MaxMessages: p.outMsgs, MaxBytes: p.outBytes}
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
		f         adminFlags
		p         policyFlags
		m         mapLinkFlags
		tokenFile string
		tokenArg  string
	)
	cmd := &cobra.Command{
		Use:   "link --peering-token-file FILE | link --kind map --system-id ID --url ws(s)://HOST/PATH",
		Short: "Link this system with another Concord system (a peering token) or a foreign MAP server (--kind map)",
		Long: "--kind concord (default) redeems a peering token printed by `federation token` on the other\n" +
			"system. The token is read from --peering-token-file (\"-\" reads standard input): a secret passed\n" +
			"as a flag value leaks through the process list and shell history.\n" +
			"--kind map links a foreign MAP server by its WebSocket URL: one node of this system (chosen by the\n" +
			"leader, moved when it dies) connects there as a MAP participant, registers a proxy agent for each\n" +
			"exported agent and imports the foreign agents as remote agents of --system-id. Credentials come from\n" +
			"--auth-token-file (never a flag value); --map-ca-file pins the CA of a wss:// server.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("token") {
				return errTokenFlag
			}
			switch m.kind {
			case "concord":
				if m.systemID != "" || m.url != "" {
					return fmt.Errorf("--system-id and --url are for --kind map")
				}
			case "map":
				return m.link(cmd, &f, &p, tokenFile)
			default:
				return fmt.Errorf("--kind %q: want concord or map", m.kind)
			}
			token, err := readPeeringToken(tokenFile, cmd.InOrStdin())
			if err != nil {
				return err
			}
			st, err := p.parse()
			if err != nil {
				return err
			}
			return f.call(cmd.Context(), func(ctx context.Context, c *admin.Client) error {
				l, err := c.CreateLink(ctx, token, st)
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
	cmd.Flags().StringVar(&tokenFile, "peering-token-file", "", "file holding the token printed by `federation token` on the other system, - for stdin (required)")
	// The old --token VALUE is refused with the way to do it instead.
	cmd.Flags().StringVar(&tokenArg, "token", "", "refused: use --peering-token-file")
	_ = cmd.Flags().MarkHidden("token")
	return cmd
}

var errTokenFlag = errors.New("--token is no longer accepted: a token on the command line leaks through the process list " +
	"and shell history; write it to a file (mode 0600) and pass --peering-token-file FILE, or pipe it to --peering-token-file -")

// maxTokenBytes bounds what readPeeringToken reads (a token is a few KB:
// the peer's CA certificate and addresses).
const maxTokenBytes = 1 << 20

// readPeeringToken reads a peering token from file, or from stdin when
// file is "-"; surrounding whitespace is dropped.
func readPeeringToken(file string, stdin io.Reader) (string, error) {
	var (
		b   []byte
		err error
	)
	switch file {
	case "":
		return "", errors.New("--peering-token-file is required (the file holding the token, - for stdin)")
	case "-":
		b, err = io.ReadAll(io.LimitReader(stdin, maxTokenBytes+1))
	default:
		var fh *os.File
		if fh, err = os.Open(file); err == nil {
			b, err = io.ReadAll(io.LimitReader(fh, maxTokenBytes+1))
			_ = fh.Close()
		}
	}
	if err != nil {
		return "", fmt.Errorf("read peering token: %w", err)
	}
	if len(b) > maxTokenBytes {
		return "", fmt.Errorf("peering token in %s is larger than %d bytes", file, maxTokenBytes)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("peering token in %s is empty", file)
	}
	return token, nil
}

// mapLinkFlags describe a link of kind map.
type mapLinkFlags struct {
	kind, systemID, url, authMethod, tokenFile, caFile string
}

func (m *mapLinkFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&m.kind, "kind", "concord", "what to link: concord (a Concord system, by peering token) or map (a foreign MAP server, by URL)")
	fl.StringVar(&m.systemID, "system-id", "", "--kind map: the id this system gives the foreign system (agents appear as ID:agent:X)")
	fl.StringVar(&m.url, "url", "", "--kind map: the foreign server's MAP WebSocket URL, ws:// or wss://")
	fl.StringVar(&m.authMethod, "auth-method", "bearer", "--kind map: how --auth-token-file's token is presented in map/connect: bearer or api-key")
	fl.StringVar(&m.tokenFile, "auth-token-file", "", "--kind map: file holding the token or API key for the foreign server (stored in Raft, never printed)")
	fl.StringVar(&m.caFile, "map-ca-file", "", "--kind map: PEM CA the wss:// server's certificate must chain to (default: system roots)")
}

// link runs `federation link --kind map`.
func (m *mapLinkFlags) link(cmd *cobra.Command, f *adminFlags, p *policyFlags, peeringTokenFile string) error {
	st, err := p.parse()
	if err != nil {
		return err
	}
	if peeringTokenFile != "" || st.Transitive || st.Outbox.Guaranteed {
		return fmt.Errorf("--kind map takes --system-id and --url (no peering token, --transitive or --guaranteed)")
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
	var (
		f      adminFlags
		asJSON bool
	)
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
				if asJSON {
					res, err := c.ListLinksJSON(ctx)
					if err != nil {
						return err
					}
					return printJSON(cmd.OutOrStdout(), res)
				}
				res, err := c.ListLinks(ctx)
				if err != nil {
					return err
				}
				return printLinks(cmd.OutOrStdout(), res, detail)
			})
		},
	}
	f.register(cmd)
	if detail {
		cmd.Flags().BoolVar(&asJSON, "json", false, "print the links as one JSON object (the body of GET /v1/federation/links, plus pendingUnlinks)")
	}
	return cmd
}

// printJSON writes v as indented JSON and a newline.
func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

func printLinks(w io.Writer, res admin.Links, detail bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if detail {
		fmt.Fprintf(tw, "# system %s, node %s\n", res.SystemID, res.NodeID)
		fmt.Fprintln(tw, "PEER\tKIND\tSTATE\tSTREAMS\tSERVER\tRTT\tQUEUE\tOUTBOX\tSENT\tRECEIVED\tDROPPED\tRECONNECTS\tDIRECT\tIMPORTED")
	} else {
		fmt.Fprintln(tw, "PEER\tKIND\tSERVERS\tEXPORT\tIMPORT\tTRANSITIVE\tMAX_HOPS\tBUFFER\tOUTBOX\tTLS")
	}
	for _, st := range res.Links {
		if detail && st.Kind == "map" {
			fmt.Fprintf(tw, "%s\tmap\t%s\t%d proxies\t%s (holder %s)\t-\t%d (%d B)\t-\t%d\t%d\t%d\t%d\t-\t%d agents (v%d), %d inbound errors\n",
				st.PeerSystemID, st.State, st.ProxiesUp, st.URL, orDash(st.Holder), st.QueueDepth, st.QueueBytes, st.Sent, st.Received,
				st.Dropped, st.Reconnects, st.ImportedAgents, st.ImportedVersion, st.InboundErrors)
			continue
		}
		if detail {
			fmt.Fprintf(tw, "%s\tconcord\t%s\t%d\t%s\t%s\t%d (%d B)\t%d (%d B)\t%d\t%d\t%d\t%d\t%d up, %d sent, %d received\t%d agents (v%d)\n", st.PeerSystemID, st.State,
				st.StreamsUp, st.ConnectedTo, st.RTT, st.QueueDepth, st.QueueBytes, st.OutboxDepth, st.OutboxBytes,
				st.Sent, st.Received, st.Dropped, st.Reconnects, st.DirectStreams, st.DirectSent, st.DirectReceived,
				st.ImportedAgents, st.ImportedVersion)
			continue
		}
		b, o := st.Buffer, st.Outbox
		mode := "best-effort"
		if o.Guaranteed {
			mode = "guaranteed"
		}
		servers := strings.Join(st.PeerAddrs, ",")
		if st.Kind == "map" {
			servers = st.URL + " (auth " + st.Auth + ", holder " + orDash(st.Holder) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%v\t%d\t%d msgs/%d B/%v %s\t%s %d msgs/%d B\t%v\n", st.PeerSystemID, st.Kind, servers,
			st.Export, st.Import, st.Transitive, st.MaxHops,
			b.MaxMessages, b.MaxBytes, b.MaxAge, b.Overflow, mode, o.MaxMessages, o.MaxBytes, st.HasPeerCA)
	}
	for _, p := range res.PendingUnlinks {
		fmt.Fprintf(tw, "# unlinked %s at %s; the peer has not confirmed yet (retrying; `federation unlink --force %s` stops)\n",
			p.PeerSystemID, p.RemovedAt.UTC().Format(time.RFC3339), p.PeerSystemID)
	}
	for _, g := range res.Gateways {
		fmt.Fprintf(tw, "# gateway %s: served by SDK gateway session %s (participant %s) since %s\n",
			g.SystemID, g.SessionID, orDash(g.ParticipantID), g.BoundAt.UTC().Format(time.RFC3339))
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
	var (
		f     adminFlags
		force bool
	)
	cmd := &cobra.Command{
		Use:   "unlink SYSTEM_ID",
		Short: "Remove the link to a system (and its imported directory and outbox) on this side; the peer is told until it confirms",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.call(cmd.Context(), func(ctx context.Context, c *admin.Client) error {
				res, err := c.Unlink(ctx, args[0], force)
				if err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				switch {
				case res.MapLink:
					_, err = fmt.Fprintf(w, "unlinked %s (a MAP server keeps no side of the link)\n", args[0])
				case res.PeerNotified:
					_, err = fmt.Fprintf(w, "unlinked %s (it removed its side too)\n", args[0])
				case res.Pending:
					_, err = fmt.Fprintf(w, "unlinked %s here; %s was not reached (%s): this system keeps telling it until it confirms "+
						"(see `federation list`; `unlink --force %s` stops)\n", args[0], args[0], res.PeerError, args[0])
				case res.PeerError != "":
					_, err = fmt.Fprintf(w, "unlinked %s here (forced); %s was not reached (%s): unlink there too\n", args[0], args[0], res.PeerError)
				default:
					_, err = fmt.Fprintf(w, "dropped the pending unlink of %s (forced): unlink there too if it still exists\n", args[0])
				}
				return err
			})
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&force, "force", false, "do not wait for the peer's confirmation (it is gone for good); also drops a pending unlink")
	return cmd
}
