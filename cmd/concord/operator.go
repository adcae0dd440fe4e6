package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/concordmap/concord/node/client/admin"
)

func newOperatorCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "operator", Short: "Autopilot health and draining of servers (see README, Operating)"}
	cmd.AddCommand(newOperatorHealthCmd(), newOperatorDrainCmd())
	return cmd
}

func newOperatorHealthCmd() *cobra.Command {
	var (
		f      adminFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Show every server as the leader's autopilot sees it, and the system's failure tolerance",
		Long: `Show every server of the Raft configuration as the leader's autopilot sees it:
voter or non-voter, gossip status, how long ago it heard from the leader, how
many log entries it trails by, and whether it is healthy (it is then eligible
for promotion once stable). The failure tolerance is how many more voters may
fail with a quorum left. Exit status 1 when a server is unhealthy (with --json
too, after printing).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var h admin.Health
			err := f.call(cmd.Context(), func(ctx context.Context, c *admin.Client) error {
				var err error
				h, err = c.Health(ctx)
				return err
			})
			if err != nil {
				return err
			}
			print := printHealth
			if asJSON {
				print = printHealthJSON
			}
			if err := print(cmd.OutOrStdout(), h); err != nil {
				return err
			}
			if !h.Healthy {
				return fmt.Errorf("the system is not healthy (see the servers marked unhealthy)")
			}
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as one JSON object (durations in milliseconds, times RFC 3339)")
	return cmd
}

// healthJSON is the --json form of the report: numbers as numbers, times
// RFC 3339, unknowns null, so scripts need no parsing of the table.
type healthJSON struct {
	Leader           string `json:"leader"`
	Healthy          bool   `json:"healthy"`
	FailureTolerance int    `json:"failureTolerance"`
	TargetVoters     int    `json:"targetVoters"`
	MinQuorum        int    `json:"minQuorum"`
	// SystemFSMLevel is the FSM level recorded in replicated state (0: none).
	SystemFSMLevel int                `json:"systemFsmLevel"`
	ObservedAt     time.Time          `json:"observedAt"`
	Servers        []serverHealthJSON `json:"servers"`
}

type serverHealthJSON struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	// Role is leader, voter or non-voter.
	Role     string `json:"role"`
	Voter    bool   `json:"voter"`
	Leader   bool   `json:"leader"`
	Status   string `json:"status"`
	Version  string `json:"version"`
	Healthy  bool   `json:"healthy"`
	Draining bool   `json:"draining"`
	FSMLevel int    `json:"fsmLevel"`
	// LastContactMs is null when unknown (never heard, unreachable).
	LastContactMs *int64     `json:"lastContactMs"`
	LastIndex     uint64     `json:"lastIndex"`
	TrailingLogs  uint64     `json:"trailingLogs"`
	StableSince   *time.Time `json:"stableSince"`
	Reason        string     `json:"reason,omitempty"`
}

func printHealthJSON(w io.Writer, h admin.Health) error {
	out := healthJSON{Leader: h.LeaderID, Healthy: h.Healthy, FailureTolerance: h.FailureTolerance,
		TargetVoters: h.TargetVoters, MinQuorum: h.MinQuorum, SystemFSMLevel: h.SystemFSMLevel, ObservedAt: h.ObservedAt.UTC(), Servers: []serverHealthJSON{}}
	for _, s := range h.Servers {
		sj := serverHealthJSON{ID: s.ID, Address: s.Address, Role: serverRole(s), Voter: s.Voter, Leader: s.Leader,
			Status: s.Status, Version: s.Version, Healthy: s.Healthy, Draining: s.Draining, FSMLevel: s.FSMLevel,
			LastIndex: s.LastIndex, TrailingLogs: s.TrailingLogs, Reason: s.Reason}
		if s.LastContact >= 0 {
			ms := s.LastContact.Milliseconds()
			sj.LastContactMs = &ms
		}
		if !s.StableSince.IsZero() {
			t := s.StableSince.UTC()
			sj.StableSince = &t
		}
		out.Servers = append(out.Servers, sj)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// serverRole is leader, voter or non-voter.
func serverRole(s admin.ServerHealth) string {
	switch {
	case s.Leader:
		return "leader"
	case s.Voter:
		return "voter"
	}
	return "non-voter"
}

func printHealth(w io.Writer, h admin.Health) error {
	fmt.Fprintf(w, "leader %s, healthy %v, failure tolerance %d (target voters %d, min quorum %d), system FSM level %s\n",
		h.LeaderID, h.Healthy, h.FailureTolerance, h.TargetVoters, h.MinQuorum, levelName(h.SystemFSMLevel))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tROLE\tSTATUS\tLAST CONTACT\tLAST INDEX\tTRAILING\tHEALTHY\tSTABLE SINCE\tVERSION\tFSM LEVEL\tNOTE")
	for _, s := range h.Servers {
		role := serverRole(s)
		contact := "-"
		if s.LastContact >= 0 {
			contact = s.LastContact.String()
		}
		since := "-"
		if !s.StableSince.IsZero() {
			since = s.StableSince.UTC().Format(time.RFC3339)
		}
		var note []string
		if s.Draining {
			note = append(note, "draining")
		}
		if s.Reason != "" {
			note = append(note, s.Reason)
		}
		version := s.Version
		if version == "" {
			version = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%v\t%s\t%s\t%s\t%s\n", s.ID, role, s.Status, contact, s.LastIndex, s.TrailingLogs,
			s.Healthy, since, version, levelName(s.FSMLevel), strings.Join(note, "; "))
	}
	return tw.Flush()
}

// levelName prints an FSM level, "-" for 0 (none recorded, or unknown).
func levelName(l int) string {
	if l <= 0 {
		return "-"
	}
	return strconv.Itoa(l)
}

func newOperatorDrainCmd() *cobra.Command {
	var (
		f         adminFlags
		drain     time.Duration
		promotion time.Duration
		force     bool
	)
	cmd := &cobra.Command{
		Use:   "drain NODE_ID",
		Short: "Move a node's participants to other nodes, then have it leave the cluster",
		Long: `Drain a node before scaling in or replacing it. The node stops taking new
sessions (/v1/ready turns unready, new MAP connections get 503), sends every
connected participant an x-concord/reconnect notification listing the other
nodes and closes its connection with WebSocket 1012; clients resume their
sessions (subscriptions included) on another node. The node hands leadership
away if it has it, leaves the cluster (the leader removes it from Raft at
once) and shuts down. The command returns once the drain has started.

Two waits, each with its own bound, come before the leave:
  1. --timeout: until no session is left on the node. When it passes, the
     sessions still there are dropped (their clients resume elsewhere).
  2. --promotion-timeout, for a voter only: until the autopilot has promoted
     a non-voter in its place and demoted the drained node, so the voters
     stay at --raft-voters while the replacement first becomes stable. When
     it passes the node leaves while still a voter: the voters are one short
     until the autopilot promotes a replacement.
A non-voter, or a voter with no non-voter to replace it, skips the second.

The leader admits drains one at a time, counting the drains in flight
(recorded in Raft once every server runs a version that does, so a new
leader counts them too): draining a voter is refused when, with the other drains, the voters left
plus the non-voters that can be promoted would be fewer than the servers'
--min-quorum (so of two drains asked at once, the second may be refused:
retry once the first has finished). Start another server first, or pass
--force to accept tolerating one failure fewer until another server joins.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.call(cmd.Context(), func(ctx context.Context, c *admin.Client) error {
				// The node refuses a drain below --min-quorum unless forced;
				// a forced one says what it costs (best effort: an older
				// leader may not report health).
				if force {
					if h, err := c.Health(ctx); err == nil {
						if w := drainWarning(h, args[0]); w != "" {
							fmt.Fprintln(cmd.ErrOrStderr(), "warning: "+w)
						}
					}
				}
				d, err := c.Drain(ctx, args[0], admin.DrainOptions{Timeout: drain, PromotionTimeout: promotion, Force: force})
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "draining %s: %d connections asked to reconnect to %s\n",
					d.NodeID, d.Sessions, strings.Join(d.ReconnectTo, ", "))
				return err
			})
		},
	}
	cmd.Flags().StringVar(&f.addr, "addr", "127.0.0.1:7701", "gRPC address of any node of the system")
	cmd.Flags().DurationVar(&drain, "timeout", 0, "how long the node waits for its sessions to move (default: the node's --drain-timeout, 2m)")
	cmd.Flags().DurationVar(&promotion, "promotion-timeout", 0,
		"then, for a voter, how long it waits for a replacement's promotion before it leaves while still a voter (default: the node's --drain-promotion-timeout, 1m)")
	cmd.Flags().BoolVar(&force, "force", false, "drain a voter even when that leaves fewer voters than --min-quorum, counting the drains in flight and the non-voters that can replace them")
	f.timeout = 10 * time.Second
	f.tls.bind(cmd.Flags())
	return cmd
}

// drainWarning says what draining id costs when it is a voter that no
// healthy non-voter can replace and the voters are at --min-quorum: a
// server that leaves is removed from Raft at once, so the system goes on
// with fewer voters than the minimum (and tolerates fewer failures) until
// another server joins. "" when nothing is lost.
func drainWarning(h admin.Health, id string) string {
	target, voters, spares := (*admin.ServerHealth)(nil), 0, 0
	for i, s := range h.Servers {
		switch {
		case s.ID == id:
			target = &h.Servers[i]
			if s.Voter {
				voters++
			}
		case s.Voter:
			voters++
		case s.Healthy && !s.Draining:
			spares++
		}
	}
	if target == nil || !target.Voter || spares > 0 || voters > h.MinQuorum {
		return ""
	}
	return fmt.Sprintf("%s votes and no healthy non-voter can take its place: once it leaves, the system keeps %d voters, "+
		"below --min-quorum %d, and tolerates one failure fewer until another server joins (it is then promoted)",
		id, voters-1, h.MinQuorum)
}
