package consensus

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// EventLogWriter writes argue's JSONL run log: one line
// {"v":1,"kind":"argue.event","seq":n,"loggedAt":...,"event":{...}} per
// event, in call order. seq starts at 0 and is consumed even by a failed
// write, whose error goes to that caller while later writes proceed (spec
// §19). loggedAt is the event's own time unless LoggedAt is set, so logs of
// replayed runs are byte-identical. Not safe for concurrent use.
type EventLogWriter struct {
	w   io.Writer
	seq int64
	// LoggedAt, when set, supplies the loggedAt timestamp (ISO-8601).
	LoggedAt func(Event) string
}

// NewEventLogWriter returns a writer appending to w.
func NewEventLogWriter(w io.Writer) *EventLogWriter { return &EventLogWriter{w: w} }

type logLine struct {
	V        int    `json:"v"`
	Kind     string `json:"kind"`
	Seq      int64  `json:"seq"`
	LoggedAt string `json:"loggedAt"`
	Event    *Event `json:"event"`
}

// Write appends one event line.
func (l *EventLogWriter) Write(ev Event) error {
	seq := l.seq
	l.seq++
	at := ev.At
	if l.LoggedAt != nil {
		at = l.LoggedAt(ev)
	}
	b, err := marshalNoEscape(logLine{V: 1, Kind: "argue.event", Seq: seq, LoggedAt: at, Event: &ev})
	if err != nil {
		return fmt.Errorf("encode event %d: %w", seq, err)
	}
	if _, err := l.w.Write(b); err != nil {
		return fmt.Errorf("write event %d: %w", seq, err)
	}
	return nil
}

// marshalNoEscape encodes v on one line without HTML escaping (argue uses
// JSON.stringify, which leaves <, > and & alone).
func marshalNoEscape(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// WriteEventsJSONL writes every event as a JSONL run log.
func WriteEventsJSONL(w io.Writer, events []Event) error {
	l := NewEventLogWriter(w)
	for _, ev := range events {
		if err := l.Write(ev); err != nil {
			return err
		}
	}
	return nil
}

// WriteResultJSON writes the result as indented JSON (two spaces) and a
// trailing newline, like argue's CLI.
func WriteResultJSON(w io.Writer, res *Result) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(res); err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	_, err := w.Write(b.Bytes())
	return err
}
