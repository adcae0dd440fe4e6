package membership

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/concordmap/concord/node/internal/backoff"
)

var errOnlySelf = errors.New("no other member reached")

// joinLoop joins JoinAddrs until this node knows another member, then
// closes Joined. Success is judged by the member count rather than by
// Join's result: a seed list usually includes the node itself, and joining
// only oneself must not count, or nodes started together would each form a
// cluster of one. Someone joining us counts too (observe closes Joined,
// which also ends the wait between attempts).
func (m *Membership) joinLoop(ctx context.Context, ml *memberlist.Memberlist, r *rand.Rand) {
	defer m.wg.Done()
	keyFailures := 0 // consecutive attempts refused for the key
	for attempt := 0; ; attempt++ {
		if m.leaving.Load() {
			return // a join now would undo the leave
		}
		if ml.NumMembers() > 1 {
			m.log.Info("joined", "members", ml.NumMembers(), "attempts", attempt)
			m.markJoined()
			return
		}
		n, err := ml.Join(m.cfg.JoinAddrs)
		if ml.NumMembers() > 1 {
			m.log.Info("joined", "members", ml.NumMembers(), "contacted", n, "attempts", attempt+1)
			m.markJoined()
			return
		}
		if err == nil {
			err = errOnlySelf
		}
		if keyRefused(err) {
			if keyFailures++; keyFailures >= keyMismatchAttempts {
				m.giveUp(m.keyMismatchError(err))
				return
			}
		} else {
			keyFailures = 0
		}
		delay := backoff.Delay(attempt, m.cfg.JoinRetryInterval, m.cfg.JoinMaxBackoff, r)
		m.log.Warn("join failed, will retry", "attempt", attempt+1, "retry_in", delay, "err", err)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			m.log.Warn("join abandoned", "attempts", attempt+1, "err", ctx.Err())
			return
		case <-m.stop:
			t.Stop()
			return
		case <-m.joined:
			t.Stop()
			m.log.Info("joined", "members", ml.NumMembers(), "attempts", attempt+1)
			return
		case <-t.C:
		}
	}
}

// keyMismatchAttempts is how many join attempts in a row must fail for the
// key before the loop gives up: one is already conclusive (a decryption
// failure is not a network fault), the second rules out a seed that was
// mid-restart with another config.
const keyMismatchAttempts = 2

// keyRefusals are the phrases memberlist's errors carry when the two sides
// of a stream cannot decrypt each other: a different key, or encryption on
// one side only. memberlist has no typed errors for them, so its text is
// matched here, in this one place (tested against the real library).
var keyRefusals = []string{
	"no installed keys could decrypt the message",
	"encryption is configured but remote state is not encrypted",
	"remote state is encrypted and encryption is not configured",
}

func keyRefused(err error) bool {
	msg := strings.ToLower(err.Error())
	for _, p := range keyRefusals {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// keyMismatchError says what is wrong and what to do, naming the key by its
// fingerprint (never the key itself).
func (m *Membership) keyMismatchError(cause error) error {
	local := "none (plaintext)"
	if m.keyring != nil {
		local = KeyFingerprint(m.keyring.GetPrimaryKey())
	}
	fix := "start every node of the system with the same key (--gossip-key-file or CONCORD_GOSSIP_KEY)"
	if m.cfg.KeyringFile != "" {
		fix += "; the key in use is the one in the keyring " + m.cfg.KeyringFile +
			": if the system's key was rotated while this node was down, stop it, delete that file and start it with the current key"
	}
	return fmt.Errorf("%w: the seeds %s and this node cannot decrypt each other's gossip (this node's primary key is %s): %s (memberlist: %w)",
		ErrGossipKey, strings.Join(m.cfg.JoinAddrs, ","), local, fix, cause)
}

// giveUp records a fatal join error and closes Fatal.
func (m *Membership) giveUp(err error) {
	m.mu.Lock()
	m.fatalErr = err
	m.mu.Unlock()
	close(m.fatal)
}

// Fatal is closed when membership gives up joining for good because
// retrying cannot help (FatalErr says why: ErrGossipKey). The node's start
// watches it to fail within seconds instead of waiting out its deadline.
func (m *Membership) Fatal() <-chan struct{} { return m.fatal }

// FatalErr returns why Fatal was closed, nil while it is open.
func (m *Membership) FatalErr() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fatalErr
}
