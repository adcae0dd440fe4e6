package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"time"
)

// runView is the part of x-concord/runs/get the demo watches.
type runView struct {
	RunID     string `json:"runId"`
	RequestID string `json:"requestId"`
	Status    string `json:"status"`
	Phase     string `json:"phase"`
	Round     int    `json:"round"`
	State     struct {
		EventCount int `json:"eventCount"`
	} `json:"state"`
}

// leaderKill is what killLeaderMidDebate saw.
type leaderKill struct {
	leader, next     *node
	elected, movedOn time.Duration // from the kill to the new leader, to the run's next event
	after            runView       // the run once it moved on
}

// killLeaderMidDebate waits until the debate's first round is under way,
// tells announce, kill -9s the Raft leader, and measures how long until a
// new leader is elected and the run makes progress again (new engine
// events committed). It watches the run from a node that does not lead.
func killLeaderMidDebate(ctx context.Context, nodes []*node, requestID string, announce func(before runView, leader *node)) (leaderKill, error) {
	leader, err := currentLeader(ctx, nodes, nil)
	if err != nil {
		return leaderKill{}, err
	}
	var watcher *node
	for _, n := range nodes {
		if n != leader {
			watcher = n
			break
		}
	}
	c, err := dialClient(ctx, watcher)
	if err != nil {
		return leaderKill{}, err
	}
	defer c.Close(context.Background())

	before, err := waitRun(ctx, c, requestID, func(r runView) bool { return r.Phase == "debate" && r.Round >= 1 })
	if err != nil {
		return leaderKill{}, err
	}
	announce(before, leader)
	killed := time.Now()
	leader.proc.kill9()
	next, err := currentLeader(ctx, nodes, leader)
	if err != nil {
		return leaderKill{}, err
	}
	elected := time.Since(killed)
	after, err := waitRun(ctx, c, requestID, func(r runView) bool { return r.State.EventCount > before.State.EventCount })
	if err != nil {
		return leaderKill{}, err
	}
	return leaderKill{leader: leader, next: next, elected: elected, movedOn: time.Since(killed), after: after}, nil
}

// waitRun polls the run of requestID until cond holds.
func waitRun(ctx context.Context, c interface {
	CallResult(ctx context.Context, method string, params, out any) error
}, requestID string, cond func(runView) bool) (runView, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	runID := ""
	for {
		if runID == "" {
			var list struct{ Runs []runView }
			if err := c.CallResult(ctx, "x-concord/runs/list", map[string]any{}, &list); err == nil {
				for _, r := range list.Runs {
					if r.RequestID == requestID {
						runID = r.RunID
					}
				}
			}
		}
		if runID != "" {
			var got struct{ Run runView }
			err := c.CallResult(ctx, "x-concord/runs/get", map[string]any{"runId": runID, "include": []string{"state"}}, &got)
			if err == nil {
				if got.Run.Status != "running" && !cond(got.Run) {
					return got.Run, fmt.Errorf("run %s ended (%s) before the demo could watch it", runID, got.Run.Status)
				}
				if cond(got.Run) {
					return got.Run, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return runView{}, errors.New("timed out watching the run")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func execOutput(bin string, args ...string) ([]byte, error) {
	return exec.Command(bin, args...).Output()
}

func trimNL(b []byte) []byte { return bytes.TrimRight(b, "\r\n") }
