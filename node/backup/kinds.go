package backup

import (
	"google.golang.org/protobuf/proto"

	"github.com/concordmap/concord/federation"
	"github.com/concordmap/concord/node/acl"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// recordKind names the kind of one snapshot record of a module (agent,
// scope, session, event, run, link, api_key, ...), so inspect can count
// what a snapshot holds rather than only how many records each module
// wrote. Records are decoded only to find their kind; a module this binary
// does not know answers "" (counted as unknown).
func recordKind(module string, data []byte) string {
	switch module {
	case "registry":
		return oneofKind(&concordv1.RegistryRecord{}, data)
	case "runs":
		return oneofKind(&concordv1.RunsRecord{}, data)
	case federation.ModuleName:
		return oneofKind(&concordv1.FedSnapshotRecord{}, data)
	case "acl":
		return acl.SnapshotRecordKind(data)
	}
	return ""
}

// oneofKind decodes data into m, a record message whose content is the
// oneof "record", and returns the name of the field set.
func oneofKind(m proto.Message, data []byte) string {
	if err := proto.Unmarshal(data, m); err != nil {
		return "undecodable"
	}
	r := m.ProtoReflect()
	od := r.Descriptor().Oneofs().ByName("record")
	if od == nil {
		return ""
	}
	f := r.WhichOneof(od)
	if f == nil {
		return "" // a kind added by a newer version
	}
	return string(f.Name())
}
