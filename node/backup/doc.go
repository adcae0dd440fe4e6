// Package backup is the client side of operator backups: `concord snapshot
// save`, `restore` and `inspect`. It streams snapshot files to and from the
// Snapshots gRPC service of any node (a follower passes the call to the
// leader), writes them atomically, and inspects them offline.
//
// The file format and the consistency rules (save after a barrier on the
// leader; restore checked completely before anything changes, then
// installed on every replica through raft) live in raftstore (backup.go,
// snapfile.go); this package re-exports what the CLI needs so cmd/concord
// does not import raftstore (STYLE.md §1).
package backup
