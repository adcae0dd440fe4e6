#!/usr/bin/env bash
# depcheck: fail when a package imports against the direction in STYLE.md §1:
#   proto <- {consensus, raftstore, federation} <- node <- cmd ; cluster-test may import anything.
# and when the consensus reducer (package consensus itself, not consensus/local)
# reaches for I/O, a clock, randomness, goroutines or locks.
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
check_prod() { # check_prod <package> <forbidden import regex> <rule>: non-test imports only
  local bad
  bad=$(go list -f '{{join .Imports "\n"}}' "$1" | grep -E "$2" | sort -u || true)
  if [ -n "$bad" ]; then
    echo "depcheck: $1 imports $(echo $bad | tr '\n' ' ')— $3"; fail=1
  fi
}
check_code() { # check_code <dir> <forbidden code regex> <rule>: grep non-test .go files, comments stripped
  local hits
  hits=$(for f in "$1"/*.go; do
    case "$f" in *_test.go) continue ;; esac
    sed -e 's|//.*$||' "$f" | grep -nE "$2" | sed "s|^|$f:|" || true
  done)
  if [ -n "$hits" ]; then
    echo "depcheck: $3:"; echo "$hits" | sed 's/^/  /'; fail=1
  fi
}
check "./proto/..."      "^$mod/(consensus|raftstore|federation|node|cmd|cluster-test)" "proto is a leaf"
check "./consensus/..."  "^$mod/(raftstore|federation|node|cmd|cluster-test)|^github.com/hashicorp/raft|^google.golang.org/grpc" "consensus is pure: no sibling, no raft, no grpc"
check "./raftstore/..."  "^$mod/(consensus|federation|node|cmd|cluster-test)" "raftstore knows nothing of MAP"
check "./federation/..." "^$mod/(consensus|raftstore|node|cmd|cluster-test)" "federation must not depend on node internals"
check "./node/..."       "^$mod/(cmd|cluster-test)" "nothing imports cmd or cluster-test"
# cmd -> node only: the admin subcommands call node/client/admin, never the
# generated stubs. cluster-test has no rule: it may import anything.
check "./cmd/..."        "^$mod/(proto|consensus|raftstore|federation|cluster-test)(/|$)" "cmd talks to node packages only (STYLE.md §1)"

# The reducer: the I/O, clock and concurrency live in consensus/local.
check_prod "./consensus" "^(os|os/.*|log|log/.*|net|net/.*|math/rand|math/rand/v2|crypto/rand|io/fs|syscall|unsafe|$mod/consensus/.*)$" \
  "the consensus reducer does no I/O, logging or randomness (use consensus/local)"
check_code "consensus" 'time\.(Now|Since|Until|Sleep|After|AfterFunc|Tick|NewTimer|NewTicker)\b' \
  "the consensus reducer reads no clock and never waits (inputs carry their time)"
check_code "consensus" '(^|[;{}[:space:]])go[[:space:]]+(func[[:space:](]|[A-Za-z_][A-Za-z0-9_.]*\()' \
  "the consensus reducer starts no goroutine"
check_code "consensus" 'sync\.(Mutex|RWMutex|WaitGroup|Once|OnceFunc|OnceValue|OnceValues|Cond|Map)\b|sync/atomic' \
  "the consensus reducer takes no locks (sync.Pool for scratch buffers only)"
if [ "$fail" -ne 0 ]; then exit 1; fi
echo "depcheck: ok"
