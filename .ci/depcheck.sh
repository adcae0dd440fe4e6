#!/usr/bin/env bash
# depcheck: fail when a package imports against the direction in STYLE.md §1:
#   proto <- {consensus, raftstore, federation} <- node <- cmd ; cluster-test may import anything.
set -euo pipefail
mod=github.com/concordmap/concord
fail=0
check() { # check <package pattern> <forbidden import regex> <rule>
  local pkgs
  pkgs=$(go list "$1" 2>/dev/null || true)
  for p in $pkgs; do
    bad=$(go list -f '{{join .Imports "\n"}}{{"\n"}}{{join .TestImports "\n"}}' "$p" | grep -E "$2" | sort -u || true)
    if [ -n "$bad" ]; then
      echo "depcheck: $p imports $(echo $bad | tr '\n' ' ')— $3"; fail=1
    fi
  done
}
check "./proto/..."      "^$mod/(consensus|raftstore|federation|node|cmd|cluster-test)" "proto is a leaf"
check "./consensus/..."  "^$mod/(raftstore|federation|node|cmd|cluster-test)|^github.com/hashicorp/raft|^google.golang.org/grpc" "consensus is pure: no sibling, no raft, no grpc"
check "./raftstore/..."  "^$mod/(consensus|federation|node|cmd|cluster-test)" "raftstore knows nothing of MAP"
check "./federation/..." "^$mod/(consensus|raftstore|node|cmd|cluster-test)" "federation must not depend on node internals"
check "./node/..."       "^$mod/(cmd|cluster-test)" "nothing imports cmd or cluster-test"
if [ "$fail" -ne 0 ]; then exit 1; fi
echo "depcheck: ok"
