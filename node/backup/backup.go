package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"

	"google.golang.org/grpc"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
	"github.com/concordmap/concord/raftstore"
)

// Info describes a snapshot file (see raftstore.SnapshotInfo).
type Info = raftstore.SnapshotInfo

// Errors a caller may branch on (errors.Is).
var (
	// ErrUnsupportedVersion: the file was written in a format version this
	// binary does not read. Nothing was changed.
	ErrUnsupportedVersion = raftstore.ErrUnsupportedVersion
	// ErrCorrupt: not a snapshot file, truncated, or a checksum mismatch.
	// Nothing was changed.
	ErrCorrupt = raftstore.ErrCorruptSnapshotFile
)

// chunkBytes is the size of one chunk sent to the node.
const chunkBytes = 256 << 10

// Inspect reads and verifies the snapshot file at path.
func Inspect(path string) (Info, error) {
	f, err := os.Open(path)
	if err != nil {
		return Info{}, fmt.Errorf("open snapshot: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && !st.Mode().IsRegular() {
		return Info{}, fmt.Errorf("%s: %w: not a regular file (%s)", path, ErrCorrupt, st.Mode().Type())
	}
	info, err := raftstore.InspectSnapshotKinds(f, recordKind)
	if err != nil {
		return Info{}, fmt.Errorf("%s: %w", path, err)
	}
	return info, nil
}

// Save streams a snapshot of the system's state from the node behind cc
// into path. It writes a temporary file beside path, verifies it, syncs it
// and renames it into place, so path never holds a partial snapshot. A
// call cut by a leadership change is retried until ctx ends.
func Save(ctx context.Context, cc grpc.ClientConnInterface, path string) (Info, error) {
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		// Found now, not by the rename after the whole download.
		return Info{}, fmt.Errorf("save snapshot to %s: not a regular file (%s)", path, st.Mode().Type())
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return Info{}, fmt.Errorf("create snapshot file: %w", err)
	}
	keep := false
	defer func() {
		if !keep {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := withRetry(ctx, func(opts ...grpc.CallOption) (struct{}, error) { return struct{}{}, download(ctx, cc, tmp, opts...) }); err != nil {
		return Info{}, err
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return Info{}, fmt.Errorf("rewind snapshot file: %w", err)
	}
	info, err := raftstore.InspectSnapshotKinds(tmp, recordKind)
	if err != nil {
		return Info{}, fmt.Errorf("verify saved snapshot: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return Info{}, fmt.Errorf("sync snapshot file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return Info{}, fmt.Errorf("close snapshot file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return Info{}, fmt.Errorf("rename snapshot file: %w", err)
	}
	keep = true
	return info, nil
}

// download streams a snapshot into f from its start (truncating what an
// earlier attempt wrote).
func download(ctx context.Context, cc grpc.ClientConnInterface, f *os.File, opts ...grpc.CallOption) error {
	if err := f.Truncate(0); err != nil {
		return fmt.Errorf("truncate snapshot file: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("rewind snapshot file: %w", err)
	}
	stream, err := concordv1.NewSnapshotsClient(cc).Save(ctx, &concordv1.SnapshotsSaveRequest{}, opts...)
	if err != nil {
		return fmt.Errorf("save snapshot: %w", err)
	}
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("save snapshot: %w", err)
		}
		if _, err := f.Write(chunk.GetData()); err != nil {
			return fmt.Errorf("write snapshot file: %w", err)
		}
	}
}

// Restored is the outcome of a restore.
type Restored struct {
	Info Info
	// Index is the leader's log index at which the restored state took
	// effect.
	Index uint64
}

// Restore replaces the whole state of the system behind cc with the
// snapshot file at path. The file is verified locally first, so a corrupt
// or too new file is refused without contacting the node; the leader
// checks it again before it changes anything. A call cut by a leadership
// change (whose outcome may be unknown) is repeated until ctx ends:
// restoring the same file twice gives the same state.
func Restore(ctx context.Context, cc grpc.ClientConnInterface, path string) (Restored, error) {
	info, err := Inspect(path)
	if err != nil {
		return Restored{}, err
	}
	idx, err := withRetry(ctx, func(opts ...grpc.CallOption) (uint64, error) { return upload(ctx, cc, path, opts...) })
	if err != nil {
		return Restored{}, err
	}
	return Restored{Info: info, Index: idx}, nil
}

// upload streams the file at path to Restore and returns the index at
// which the restored state took effect.
func upload(ctx context.Context, cc grpc.ClientConnInterface, path string, opts ...grpc.CallOption) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("open snapshot: %w", err)
	}
	defer f.Close()
	stream, err := concordv1.NewSnapshotsClient(cc).Restore(ctx, opts...)
	if err != nil {
		return 0, fmt.Errorf("restore snapshot: %w", err)
	}
	buf := make([]byte, chunkBytes)
	for {
		n, rerr := io.ReadFull(f, buf)
		if n > 0 {
			if err := stream.Send(&concordv1.SnapshotChunk{Data: buf[:n]}); err != nil {
				break // the node ended the call; CloseAndRecv says why
			}
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			return 0, fmt.Errorf("read snapshot: %w", rerr)
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return 0, fmt.Errorf("restore snapshot: %w", err)
	}
	return resp.GetRestoredIndex(), nil
}

// WriteInfo prints info for humans, as `concord snapshot inspect` shows it.
func WriteInfo(w io.Writer, info Info) error {
	created := "unknown"
	if !info.Created.IsZero() {
		created = info.Created.Format("2006-01-02T15:04:05.000Z07:00")
	}
	_, err := fmt.Fprintf(w, "index           %d\nterm            %d\nsize            %d bytes\n"+
		"file version    %d\nformat version  %d\ncreated         %s\nsaved by        node %q, system %q, concord %s\nmodules\n",
		info.Index, info.Term, info.Size, info.FileVersion, info.FormatVersion, created,
		info.NodeID, info.SystemID, printable(info.Version))
	if err != nil {
		return err
	}
	for _, m := range info.Modules {
		kinds := ""
		if len(m.Kinds) > 0 {
			parts := make([]string, 0, len(m.Kinds))
			for _, k := range m.Kinds {
				parts = append(parts, fmt.Sprintf("%s %d", printable(k.Kind), k.Records))
			}
			kinds = " (" + strings.Join(parts, ", ") + ")"
		}
		if _, err := fmt.Fprintf(w, "  %-14s %d records%s\n", printable(m.Name), m.Records, kinds); err != nil {
			return err
		}
	}
	return nil
}

// printable returns s as is when every rune prints, else quoted: a file's
// labels are the file's, and a crafted one must not send escape sequences
// to the operator's terminal.
func printable(s string) string {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}
