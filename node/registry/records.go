package registry

import (
	"encoding/json"
	"slices"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Conversions between the contract types and their protobuf records. Raw
// JSON fields map to bytes; empty bytes mean absent (nil RawMessage).

func raw(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return json.RawMessage(slices.Clone(b))
}

func agentFromRecord(r *concordv1.AgentRecord) Agent {
	lc := r.GetLifecycle()
	return Agent{
		ID:          r.GetId(),
		Name:        r.GetName(),
		Description: r.GetDescription(),
		Role:        r.GetRole(),
		Parent:      r.GetParent(),
		Scopes:      slices.Clone(r.GetScopes()),
		State:       r.GetState(),
		OwnerID:     r.GetOwnerId(),
		Visibility:  r.GetVisibility(),
		SessionID:   r.GetSessionId(),
		HomeNode:    r.GetHomeNode(),
		Lifecycle: Lifecycle{
			CreatedAt:    lc.GetCreatedAt(),
			StartedAt:    lc.GetStartedAt(),
			StoppedAt:    lc.GetStoppedAt(),
			LastActiveAt: lc.GetLastActiveAt(),
			OrphanedAt:   lc.GetOrphanedAt(),
			ExitReason:   lc.GetExitReason(),
		},
		Capabilities:         raw(r.GetCapabilities()),
		CapabilityDescriptor: raw(r.GetCapabilityDescriptor()),
		Environment:          raw(r.GetEnvironment()),
		Metadata:             raw(r.GetMetadata()),
		PermissionOverrides:  raw(r.GetPermissionOverrides()),
		PersistentIdentity:   raw(r.GetPersistentIdentity()),
		Relationships:        raw(r.GetRelationships()),
		Meta:                 raw(r.GetMeta()),
	}
}

// AgentRecord converts an Agent to its protobuf record (for proposers
// building AgentRegisterRequest).
func AgentRecord(a *Agent) *concordv1.AgentRecord {
	return &concordv1.AgentRecord{
		Id:          a.ID,
		Name:        a.Name,
		Description: a.Description,
		Role:        a.Role,
		Parent:      a.Parent,
		Scopes:      slices.Clone(a.Scopes),
		State:       a.State,
		OwnerId:     a.OwnerID,
		Visibility:  a.Visibility,
		SessionId:   a.SessionID,
		HomeNode:    a.HomeNode,
		Lifecycle: &concordv1.LifecycleRecord{
			CreatedAt:    a.Lifecycle.CreatedAt,
			StartedAt:    a.Lifecycle.StartedAt,
			StoppedAt:    a.Lifecycle.StoppedAt,
			LastActiveAt: a.Lifecycle.LastActiveAt,
			OrphanedAt:   a.Lifecycle.OrphanedAt,
			ExitReason:   a.Lifecycle.ExitReason,
		},
		Capabilities:         a.Capabilities,
		CapabilityDescriptor: a.CapabilityDescriptor,
		Environment:          a.Environment,
		Metadata:             a.Metadata,
		PermissionOverrides:  a.PermissionOverrides,
		PersistentIdentity:   a.PersistentIdentity,
		Relationships:        a.Relationships,
		Meta:                 a.Meta,
	}
}

func scopeFromRecord(r *concordv1.ScopeRecord) Scope {
	return Scope{
		ID:                r.GetId(),
		Name:              r.GetName(),
		Description:       r.GetDescription(),
		Parent:            r.GetParent(),
		JoinPolicy:        r.GetJoinPolicy(),
		AutoJoinRoles:     slices.Clone(r.GetAutoJoinRoles()),
		Visibility:        r.GetVisibility(),
		MessageVisibility: r.GetMessageVisibility(),
		SendPolicy:        r.GetSendPolicy(),
		Persistent:        r.GetPersistent(),
		AutoDelete:        r.GetAutoDelete(),
		OwnerID:           r.GetOwnerId(),
		Metadata:          raw(r.GetMetadata()),
		Members:           slices.Clone(r.GetMembers()),
	}
}

// ScopeRecord converts a Scope to its protobuf record.
func ScopeRecord(sc *Scope) *concordv1.ScopeRecord {
	return &concordv1.ScopeRecord{
		Id:                sc.ID,
		Name:              sc.Name,
		Description:       sc.Description,
		Parent:            sc.Parent,
		JoinPolicy:        sc.JoinPolicy,
		AutoJoinRoles:     slices.Clone(sc.AutoJoinRoles),
		Visibility:        sc.Visibility,
		MessageVisibility: sc.MessageVisibility,
		SendPolicy:        sc.SendPolicy,
		Persistent:        sc.Persistent,
		AutoDelete:        sc.AutoDelete,
		OwnerId:           sc.OwnerID,
		Metadata:          sc.Metadata,
		Members:           slices.Clone(sc.Members),
	}
}

func subscriptionFromRecord(r *concordv1.SubscriptionRecord) Subscription {
	return Subscription{
		ID:            r.GetId(),
		SessionID:     r.GetSessionId(),
		Filter:        raw(r.GetFilter()),
		Options:       raw(r.GetOptions()),
		CreatedAt:     r.GetCreatedAt(),
		CursorEventID: r.GetCursorEventId(),
		CursorSeq:     r.GetCursorSeq(),
	}
}

// SubscriptionRecord converts a Subscription to its protobuf record.
func SubscriptionRecord(sub *Subscription) *concordv1.SubscriptionRecord {
	return &concordv1.SubscriptionRecord{
		Id:            sub.ID,
		SessionId:     sub.SessionID,
		Filter:        sub.Filter,
		Options:       sub.Options,
		CreatedAt:     sub.CreatedAt,
		CursorEventId: sub.CursorEventID,
		CursorSeq:     sub.CursorSeq,
	}
}

func policyFromRecord(r *concordv1.DisconnectPolicyRecord) DisconnectPolicy {
	return DisconnectPolicy{
		AgentBehavior:     r.GetAgentBehavior(),
		GracePeriodMs:     r.GetGracePeriodMs(),
		NotifySubscribers: r.GetNotifySubscribers(),
	}
}

// PolicyRecord converts a DisconnectPolicy to its protobuf record.
func PolicyRecord(p DisconnectPolicy) *concordv1.DisconnectPolicyRecord {
	return &concordv1.DisconnectPolicyRecord{
		AgentBehavior:     p.AgentBehavior,
		GracePeriodMs:     p.GracePeriodMs,
		NotifySubscribers: p.NotifySubscribers,
	}
}

func sessionFromRecord(r *concordv1.SessionRecord) Session {
	s := Session{
		ID:               r.GetId(),
		ParticipantID:    r.GetParticipantId(),
		ParticipantType:  r.GetParticipantType(),
		Name:             r.GetName(),
		HomeNode:         r.GetHomeNode(),
		Connected:        r.GetConnected(),
		CreatedAt:        r.GetCreatedAt(),
		LastActiveAt:     r.GetLastActiveAt(),
		ClosedAt:         r.GetClosedAt(),
		DisconnectPolicy: policyFromRecord(r.GetDisconnectPolicy()),
		DetachedAt:       r.GetDetachedAt(),
		ResumeTokenHash:  slices.Clone(r.GetResumeTokenHash()),
	}
	for _, sub := range r.GetSubscriptions() {
		s.Subscriptions = append(s.Subscriptions, subscriptionFromRecord(sub))
	}
	return s
}

func sessionRecord(e *sessionEntry) *concordv1.SessionRecord {
	s := &e.s
	r := &concordv1.SessionRecord{
		Id:               s.ID,
		ParticipantId:    s.ParticipantID,
		ParticipantType:  s.ParticipantType,
		Name:             s.Name,
		HomeNode:         s.HomeNode,
		Connected:        s.Connected,
		CreatedAt:        s.CreatedAt,
		LastActiveAt:     s.LastActiveAt,
		ClosedAt:         s.ClosedAt,
		DisconnectPolicy: PolicyRecord(s.DisconnectPolicy),
		DetachedAt:       s.DetachedAt,
		ResumeTokenHash:  s.ResumeTokenHash,
		Epoch:            e.epoch,
		TtlMs:            e.ttlMs,
		GraceDone:        e.graceDone,
	}
	for i := range s.Subscriptions {
		r.Subscriptions = append(r.Subscriptions, SubscriptionRecord(&s.Subscriptions[i]))
	}
	return r
}

// setEventRecord sets every field of r from ev (Persist reuses one r).
func setEventRecord(r *concordv1.EventRecord, ev *Event) {
	r.Position, r.Id, r.Type, r.Timestamp, r.Source = ev.Position, ev.ID, ev.Type, ev.Timestamp, ev.Source
	r.Data, r.CausedBy, r.AgentIds, r.ScopeIds = ev.Data, ev.CausedBy, ev.AgentIDs, ev.ScopeIDs
}

func eventFromRecord(r *concordv1.EventRecord) Event {
	return Event{
		Position:  r.GetPosition(),
		ID:        r.GetId(),
		Type:      r.GetType(),
		Timestamp: r.GetTimestamp(),
		Source:    r.GetSource(),
		Data:      raw(r.GetData()),
		CausedBy:  slices.Clone(r.GetCausedBy()),
		AgentIDs:  slices.Clone(r.GetAgentIds()),
		ScopeIDs:  slices.Clone(r.GetScopeIds()),
	}
}
