package cluster

import (
	"fmt"
	"unicode/utf8"

	"github.com/concordmap/concord/node/internal/jsonkit"
	"github.com/concordmap/concord/node/router"
	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// The relay is a door like the MAP endpoint: what a peer sends reaches
// clients as part of a JSON-RPC frame (the message becomes the params of a
// map/message notification, an event's data the body of a map/event), so a
// frame a client could not parse, or a message without the fields every
// MAP Message has, is refused here with BAD_ENVELOPE instead of being
// spliced into a frame. Who may open a relay stream at all is the
// transport's business (mTLS, node membership).

// checkRelayMessage checks the shape of a relayed MAP Message: one valid
// JSON object with a non-empty string id and from, and a to.
func checkRelayMessage(msg []byte) error {
	// The rpc scanner leaves UTF-8 to its caller, as the MAP endpoint does.
	if !utf8.Valid(msg) || !rpc.ValidJSON(msg) {
		return fmt.Errorf("%w: message is not valid JSON", router.ErrBadEnvelope)
	}
	var vals [3][]byte
	switch {
	case !jsonkit.Lookup(msg, messageKeys[:], vals[:]):
		return fmt.Errorf("%w: message is not a JSON object", router.ErrBadEnvelope)
	case !nonEmptyString(vals[0]) || !nonEmptyString(vals[1]) || vals[2] == nil:
		return fmt.Errorf("%w: message lacks id, from or to", router.ErrBadEnvelope)
	}
	return nil
}

// messageKeys are the members every MAP Message has: id, from, to.
var messageKeys = [3]string{"id", "from", "to"}

// checkRelayEvent checks a relayed event: an id and a type, and data (when
// present) that is one valid JSON object.
func checkRelayEvent(ev *concordv1.RelayEvent) error {
	switch {
	case ev == nil:
		return fmt.Errorf("%w: event missing", router.ErrBadEnvelope)
	case ev.GetId() == "" || ev.GetType() == "":
		return fmt.Errorf("%w: event lacks id or type", router.ErrBadEnvelope)
	case len(ev.GetData()) == 0:
		return nil
	case !utf8.Valid(ev.GetData()) || !rpc.ValidJSON(ev.GetData()) || !jsonkit.Lookup(ev.GetData(), nil, nil):
		return fmt.Errorf("%w: event data is not a JSON object", router.ErrBadEnvelope)
	}
	return nil
}

// nonEmptyString reports whether val (valid JSON) is a string other than "".
func nonEmptyString(val []byte) bool {
	return len(val) > 2 && val[0] == '"'
}
