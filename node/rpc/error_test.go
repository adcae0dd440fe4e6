package rpc

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestNewError_CategoryAndRetryable(t *testing.T) {
	tests := []struct {
		code      int
		category  string
		retryable bool
	}{
		{CodeParseError, CategoryProtocol, false},
		{CodeInvalidRequest, CategoryProtocol, false},
		{CodeMethodNotFound, CategoryProtocol, false},
		{CodeInvalidParams, CategoryProtocol, false},
		{CodeInternal, CategoryInternal, false},
		{CodeAuthRequired, CategoryAuth, false},
		{CodeTokenExpired, CategoryAuth, true},
		{CodePermissionDenied, CategoryAuth, false},
		{CodeAddressNotFound, CategoryRouting, false},
		{CodeDeliveryFailed, CategoryRouting, true},
		{CodeAddressAmbiguous, CategoryRouting, false},
		{CodeAgentExists, CategoryAgent, false},
		{CodeNotResponding, CategoryAgent, true},
		{CodeSpawnFailed, CategoryAgent, false},
		{CodeExhausted, CategoryResource, true},
		{CodeRateLimited, CategoryResource, true},
		{CodeQuotaExceeded, CategoryResource, false},
		{CodeFederationUnavailable, CategoryFederation, true},
		{CodeFederationRouteRejected, CategoryFederation, false},
		{CodeLoopDetected, CategoryFederation, false},
		{CodeMaxHopsExceeded, CategoryFederation, false},
		{10003, CategoryMail, false},
		{13001, CategoryTrajectory, false},
		{-32050, CategoryInternal, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.code), func(t *testing.T) {
			e := NewError(tt.code, "")
			if e.Message == "" || e.Data == nil || e.Data.Category != tt.category || e.Data.Retryable != tt.retryable {
				t.Fatalf("NewError(%d) = %+v %+v", tt.code, e, e.Data)
			}
			raw, _ := json.Marshal(e)
			if !strings.Contains(string(raw), `"retryable":`) || !strings.Contains(string(raw), `"category":"`+tt.category+`"`) {
				t.Fatalf("wire form %s lacks category/retryable", raw)
			}
		})
	}
}

func TestInvalidParams(t *testing.T) {
	e := InvalidParams("to", "required")
	if e.Code != CodeInvalidParams || !strings.Contains(e.Message, "to") {
		t.Fatalf("%+v", e)
	}
	if e.Data.Details["field"] != "to" || e.Data.Details["reason"] != "required" {
		t.Fatalf("details %v", e.Data.Details)
	}
}

func TestError_WithCopies(t *testing.T) {
	base := NewError(CodeRateLimited, "slow down")
	d := base.WithDetails(map[string]any{"k": 1})
	r := d.WithRetryAfter(1500*time.Microsecond + time.Second)
	if base.Data.Details != nil || base.Data.RetryAfterMs != 0 {
		t.Fatalf("base modified: %+v", base.Data)
	}
	if d.Data.Details["k"] != 1 || d.Data.RetryAfterMs != 0 {
		t.Fatalf("details copy: %+v", d.Data)
	}
	if r.Data.RetryAfterMs != 1002 || !r.Data.Retryable || r.Data.Details["k"] != 1 {
		t.Fatalf("retry copy: %+v", r.Data)
	}
	if !IsCode(fmt.Errorf("wrapped: %w", r), CodeRateLimited) || IsCode(errors.New("x"), CodeRateLimited) {
		t.Fatal("IsCode")
	}
	if got := r.Error(); got != "rpc error 4001: slow down" {
		t.Fatalf("Error() = %q", got)
	}
}

func TestAppendResponse_UnencodableResult(t *testing.T) {
	b, err := appendResponse(nil, []byte("1"), map[string]any{"f": func() {}}, nil)
	if err == nil {
		t.Fatal("expected the encoding error to be reported")
	}
	var r wireResp
	if json.Unmarshal(b, &r) != nil || r.Error == nil || r.Error.Code != CodeInternal || string(r.ID) != "1" {
		t.Fatalf("response %s", b)
	}
	// Details that cannot be encoded are dropped, the error still goes out.
	b, _ = appendResponse(nil, nil, nil, NewError(CodeAgentNotFound, "x").WithDetails(map[string]any{"f": func() {}}))
	if json.Unmarshal(b, &r) != nil || r.Error == nil || r.Error.Code != CodeAgentNotFound {
		t.Fatalf("response %s", b)
	}
}

func TestConfig_Validate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		ok     bool
	}{
		{"default", func(*Config) {}, true},
		{"tiny frame", func(c *Config) { c.MaxFrameBytes = 10 }, false},
		{"no batch", func(c *Config) { c.MaxBatchLen = 0 }, false},
		{"no queue", func(c *Config) { c.SendQueueLen = 0 }, false},
		{"no queue bytes", func(c *Config) { c.SendQueueBytes = 0 }, false},
		{"no write timeout", func(c *Config) { c.WriteTimeout = 0 }, false},
		{"no ping", func(c *Config) { c.PingInterval = 0 }, false},
		{"no pong", func(c *Config) { c.PongTimeout = 0 }, false},
		{"no handshake", func(c *Config) { c.HandshakeTimeout = 0 }, false},
		{"negative grace", func(c *Config) { c.CloseGracePeriod = -1 }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mutate(&c)
			err := c.Validate()
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrInvalidConfig)) {
				t.Fatalf("Validate = %v", err)
			}
			if _, err := NewServer(c, newTestHandler()); (err == nil) != tt.ok {
				t.Fatalf("NewServer = %v", err)
			}
		})
	}
	if _, err := NewServer(DefaultConfig(), nil); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("nil handler: %v", err)
	}
}
