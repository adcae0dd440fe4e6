package mapsvc

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"

	"github.com/concordmap/concord/node/registry"
	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// connectParams is the decoded map/connect params (map-protocol.md §3.1).
type connectParams struct {
	participantType string
	participantID   string
	name            string
	capabilities    json.RawMessage
	sessionID       string
	resumeToken     string
	reclaim         []string
	policy          *registry.DisconnectPolicy
	authMethod      string
	credential      string // auth.token or auth.credential; never logged

	anonCharged bool // the anonymous session limit took this connect's token
}

func decodeConnect(raw json.RawMessage) (connectParams, *rpc.Error) {
	p := decodeParams(raw)
	var cp connectParams
	v, ok := p.integer("protocolVersion")
	switch {
	case p.err() != nil:
	case !ok:
		p.fail("protocolVersion", "is required")
	case v != 1:
		return cp, rpc.InvalidParams("protocolVersion", "unsupported protocol version").
			WithDetails(map[string]any{"supportedVersions": []int{1}})
	}
	cp.participantType = p.enum("participantType", TypeAgent, TypeClient, TypeSystem, TypeGateway)
	if cp.participantType == "" && p.err() == nil {
		p.fail("participantType", "is required")
	}
	cp.participantID = p.str("participantId")
	cp.name = p.str("name")
	cp.capabilities = p.object("capabilities")
	cp.sessionID = p.str("sessionId")
	cp.resumeToken = p.str("resumeToken")
	cp.reclaim = p.strs("reclaimAgents")
	if p.has("disconnectPolicy") {
		dp := p.sub("disconnectPolicy")
		pol := registry.DisconnectPolicy{AgentBehavior: dp.enum("agentBehavior",
			registry.BehaviorUnregister, registry.BehaviorOrphan, registry.BehaviorGracePeriod)}
		if pol.AgentBehavior == "" && dp.err() == nil {
			dp.fail("agentBehavior", "is required")
		}
		if g, ok := dp.integer("gracePeriodMs"); ok {
			if g < 0 {
				dp.fail("gracePeriodMs", "must be >= 0")
			}
			pol.GracePeriodMs = g
		}
		pol.NotifySubscribers, _ = dp.boolean("notifySubscribers")
		p.merge(dp)
		cp.policy = &pol
	}
	if p.has("auth") {
		ap := p.sub("auth")
		cp.authMethod = ap.reqStr("method")
		if cp.credential = ap.str("token"); cp.credential == "" {
			cp.credential = ap.str("credential")
		}
		p.merge(ap)
	}
	return cp, p.err()
}

// connectResult is the map/connect result: ConnectResponse plus the SDK
// fields (map-protocol.md §3.1).
type connectResult struct {
	ProtocolVersion int              `json:"protocolVersion"`
	SessionID       string           `json:"sessionId"`
	ParticipantID   string           `json:"participantId"`
	Capabilities    Capabilities     `json:"capabilities"`
	SystemInfo      systemInfo       `json:"systemInfo"`
	ResumeToken     string           `json:"resumeToken"`
	Reconnected     bool             `json:"reconnected"`
	ReclaimedAgents []registry.Agent `json:"reclaimedAgents"`
	OwnedAgents     []string         `json:"ownedAgents"`
	Principal       principal        `json:"principal"`
}

type systemInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	NodeID  string `json:"nodeId"`
}

type principal struct {
	ID        string `json:"id"`
	Issuer    string `json:"issuer,omitempty"`
	ExpiresAt int64  `json:"expiresAt,omitempty"`
}

// connect serves map/connect: a new session, or a resume of an existing
// one by sessionId and/or resumeToken.
func (s *Service) connect(ctx context.Context, c *rpc.Conn, raw json.RawMessage) (any, error) {
	cp, perr := decodeConnect(raw)
	if perr != nil {
		return nil, perr
	}
	if connectReadsRegistry(&cp) {
		if err := s.awaitFence(ctx, fenceAll); err != nil {
			return nil, err
		}
	}
	method := cp.authMethod
	if method == "" {
		method = AuthNone
	}
	pr, err := s.auth.Authenticate(ctx, method, cp.credential)
	if err != nil {
		s.log.Info("map/connect refused", "auth_method", method, "participant_id", cp.participantID, "peer", c.RemoteAddr(), "err", err)
		return nil, err
	}
	target, err := s.resumeTarget(ctx, c.RemoteAddr(), pr, &cp)
	if err != nil {
		return nil, err
	}
	if cp.participantID, err = s.bindPrincipal(pr, &cp, target != ""); err != nil {
		s.log.Info("map/connect refused", "auth_method", method, "principal", pr.ID, "participant_id", cp.participantID, "err", err)
		return nil, err
	}
	st := stateOf(c)
	if st == nil {
		st = &connState{}
		c.SetValue(st)
	}
	if cur := st.snapshot(); cur.sessionID != "" {
		if target == cur.sessionID {
			// The SDK's reconnect() on the same transport: nothing moves.
			return s.result(cur.sessionID, &cur, true, nil, nil)
		}
		return nil, errAlreadyConnected
	}
	lvl := slog.LevelInfo
	if pr.Anonymous() {
		lvl = slog.LevelDebug // every anonymous connect at Info would drown the log
	}
	s.log.Log(ctx, lvl, "map/connect authenticated", "auth_method", method, "principal", pr.ID, "participant_id", cp.participantID, "participant_type", cp.participantType)
	st.mu.Lock()
	st.principal = pr
	st.mu.Unlock()
	caps := defaultCapabilities(cp.participantType, s.cfg.Fanout != nil)
	if pr.Capabilities != nil {
		caps.restrict(pr.Capabilities)
	}
	caps.narrow(cp.capabilities)
	caps.Extensions = append([]Extension{}, s.cfg.Extensions...)
	if target != "" {
		res, err := s.resume(ctx, c, st, &cp, target, caps)
		var re *registry.Error
		if errors.As(err, &re) && re.Code == registry.CodeInvalidRequest && re.Field == "sessionId" {
			// Expired between our read and the apply: start afresh, as
			// for an unknown session.
			return s.openFresh(ctx, c, st, &cp, caps)
		}
		return res, err
	}
	return s.openFresh(ctx, c, st, &cp, caps)
}

// resumeTarget returns the session a connect resumes ("" = a new session).
// The resume token is "<sessionId>.<secret>", so an AgentConnection, which
// sends only resumeToken, is recognised. An unknown session starts afresh
// (map-protocol.md §3.4), once Config.Barrier has caught this replica up;
// a known one needs its token (1001 otherwise).
func (s *Service) resumeTarget(ctx context.Context, remote string, pr *Principal, cp *connectParams) (string, error) {
	sid := cp.sessionID
	if cp.resumeToken != "" {
		tokSID, _, _ := strings.Cut(cp.resumeToken, ".")
		if sid != "" && tokSID != sid {
			return "", authFailed("resumeToken does not belong to sessionId")
		}
		sid = tokSID
	}
	if sid == "" {
		return "", nil
	}
	sess, ok := s.reg.Session(sid)
	if !ok && s.cfg.Barrier != nil {
		// The barrier may write (a follower's NOOP): an anonymous caller
		// naming unknown sessions pays for it like for a new session.
		if err := s.anonSessionRefusal(remote, pr, cp); err != nil {
			return "", err
		}
	}
	if !ok && s.cfg.Barrier != nil && s.cfg.Barrier(ctx) == nil {
		// This replica may lag the session's creation (a participant a
		// drain sent here right after it connected elsewhere): catch up
		// once before treating the session as unknown.
		sess, ok = s.reg.Session(sid)
	}
	if !ok {
		return "", nil
	}
	if len(sess.ResumeTokenHash) > 0 && string(hashToken(cp.resumeToken)) != string(sess.ResumeTokenHash) {
		return "", authFailed("a valid resumeToken is required to resume this session")
	}
	if sess.ParticipantType != cp.participantType || !s.actsFor(cp.participantID, &sess) {
		return "", authFailed("the session belongs to another participant")
	}
	return sid, nil
}

// actsFor reports whether a connect's participantId may resume sess: the
// session's own participant id, or the id of an agent the session owns —
// the SDK's AgentConnection resumes with participantId = its agent id and
// the token, whatever participant id the first connect was given.
func (s *Service) actsFor(participantID string, sess *registry.Session) bool {
	if participantID == "" || participantID == sess.ParticipantID {
		return true
	}
	a, ok := s.reg.Agent(participantID)
	return ok && a.SessionID == sess.ID
}

func authFailed(reason string) *rpc.Error {
	return rpc.NewError(rpc.CodeAuthFailed, "").WithDetails(map[string]any{"reason": reason})
}

func hashToken(tok string) []byte {
	if tok == "" {
		return nil
	}
	h := sha256.Sum256([]byte(tok))
	return h[:]
}

func (s *Service) newResumeToken(sessionID string) string {
	var secret [32]byte
	_, _ = rand.Read(secret[:]) // crypto/rand.Read never fails (Go 1.24+)
	return sessionID + "." + base64.RawURLEncoding.EncodeToString(secret[:])
}

// openFresh proposes a new session, unless the anonymous session limit
// refuses it (anonlimit.go).
func (s *Service) openFresh(ctx context.Context, c *rpc.Conn, st *connState, cp *connectParams, caps Capabilities) (any, error) {
	if err := s.anonSessionRefusal(c.RemoteAddr(), st.snapshot().principal, cp); err != nil {
		return nil, err
	}
	sid := s.newID()
	pid := cp.participantID
	if pid == "" {
		pid = cp.participantType + "-" + strings.ToLower(s.newID())
	}
	policy := s.cfg.DefaultDisconnectPolicy
	if cp.policy != nil {
		policy = s.fillPolicy(*cp.policy)
	}
	token := s.newResumeToken(sid)
	defer s.sessions.beginOpen(sid)() // until attach put it in the table (detachOrphans)
	st.mu.Lock()
	st.pendingSession, st.pendingEpoch = sid, 1
	st.mu.Unlock()
	req := &concordv1.SessionOpenRequest{
		Meta: s.meta(pid, 1+len(cp.reclaim)),
		Session: &concordv1.SessionRecord{
			Id: sid, ParticipantId: pid, ParticipantType: cp.participantType, Name: cp.name,
			HomeNode: s.cfg.NodeID, DisconnectPolicy: registry.PolicyRecord(policy),
			ResumeTokenHash: hashToken(token),
		},
		ReclaimAgents: cp.reclaim,
	}
	if len(cp.reclaim) > 0 && s.fsmLevel(ctx) >= registry.FSMLevelResumeEpoch {
		req.ReclaimFromSessions = s.agentSessions(cp.reclaim)
	}
	res, err := s.proposeFenced(ctx, concordv1.CommandType_COMMAND_TYPE_SESSION_OPEN, req)
	if err != nil {
		return nil, err
	}
	return s.attach(ctx, c, st, res.(registry.SessionResult), cp.participantType, caps, token)
}

// fillPolicy gives a grace-period policy without gracePeriodMs the
// default grace period.
func (s *Service) fillPolicy(p registry.DisconnectPolicy) registry.DisconnectPolicy {
	if p.AgentBehavior == registry.BehaviorGracePeriod && p.GracePeriodMs == 0 {
		p.GracePeriodMs = s.cfg.DefaultDisconnectPolicy.GracePeriodMs
	}
	return p
}

// attach records a successful SESSION_OPEN on the connection and in the
// local session table, restores subscriptions, and builds the result.
func (s *Service) attach(ctx context.Context, c *rpc.Conn, st *connState, sr registry.SessionResult, ptype string, caps Capabilities, token string) (any, error) {
	st.mu.Lock()
	st.sessionID, st.participantID, st.participantType = sr.Session.ID, sr.Session.ParticipantID, ptype
	st.caps, st.epoch, st.resumeToken = caps, sr.Epoch, token
	st.pendingSession, st.pendingEpoch = "", 0
	cur := connState{sessionID: st.sessionID, participantID: st.participantID, participantType: ptype, caps: caps, epoch: sr.Epoch, resumeToken: token, principal: st.principal}
	st.mu.Unlock()
	c.Authenticated() // leaves the pre-auth limits and timeout
	if old := s.sessions.put(sr.Session.ID, c, st); old != nil {
		// The session was still attached to another connection here: that
		// connection lost it. Its Closed sees the newer epoch and does not
		// detach.
		_ = old.Close("session resumed on another connection")
	}
	if f := s.cfg.Fanout; f != nil {
		// A resumed session's subscriptions are read from the local
		// replica, which may not have applied the SESSION_OPEN yet when
		// the leader's result answered it (fence.go). A fresh session has
		// none to restore, so it does not wait: its Attach may find the
		// session unknown here, and that loses nothing.
		var err error
		if sr.Resumed {
			err = s.awaitFence(ctx, fenceAll)
		}
		if err == nil {
			err = f.Attach(ctx, sr.Session.ID, sr.Epoch)
		}
		switch {
		case err != nil && sr.Resumed:
			s.log.Warn("restore subscriptions failed", "session_id", sr.Session.ID, "err", err)
		case err != nil:
			s.log.Debug("fresh session not yet applied here; no subscriptions to restore", "session_id", sr.Session.ID, "err", err)
		}
	}
	s.log.Debug("session attached", "session_id", sr.Session.ID, "resumed", sr.Resumed, "epoch", sr.Epoch)
	owned := sr.OwnedAgents
	if owned == nil {
		owned = []string{}
	}
	return s.result(sr.Session.ID, &cur, sr.Resumed, sr.Reclaimed, owned)
}

// result builds the map/connect answer. owned lists the agents the session
// owns, as the SESSION_OPEN's result said; nil reads them from the local
// replica.
func (s *Service) result(sid string, cs *connState, reconnected bool, reclaimed []registry.Agent, owned []string) (any, error) {
	if owned == nil {
		owned = []string{}
		for _, a := range s.reg.SessionAgents(sid) {
			if a.OwnerID != "" {
				owned = append(owned, a.ID)
			}
		}
	}
	if reclaimed == nil {
		reclaimed = []registry.Agent{}
	}
	return connectResult{
		ProtocolVersion: 1,
		SessionID:       sid,
		ParticipantID:   cs.participantID,
		Capabilities:    s.effectiveCaps(cs), // with the participant's ceiling, if the system set one
		SystemInfo:      systemInfo{Name: s.cfg.System.Name, Version: s.cfg.System.Version, NodeID: s.cfg.NodeID},
		ResumeToken:     cs.resumeToken,
		Reconnected:     reconnected,
		ReclaimedAgents: reclaimed,
		OwnedAgents:     owned,
		Principal:       principalOf(cs.principal),
	}, nil
}

func principalOf(p *Principal) principal {
	if p == nil {
		return principal{ID: "anonymous"} // auth method none (§3.6)
	}
	return principal{ID: p.ID, Issuer: p.Issuer, ExpiresAt: p.ExpiresAt}
}
