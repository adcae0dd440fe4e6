#!/usr/bin/env bash
# etcd-compare.sh: committed-write throughput and latency of a 3-node Concord
# beside a 3-node etcd on the same machine, in one run, alternating (issue 10).
#
#   make bench-etcd                      # or: bash cluster-test/bench/etcd-compare.sh
#   REPS=5 DURATION=10s bash cluster-test/bench/etcd-compare.sh
#
# It installs etcd (server and its `benchmark` tool) from the Go module proxy
# into a temporary GOBIN (set ETCD_BIN_DIR to a directory already holding
# `server` and `benchmark` to skip that), builds bin/concord, starts both
# clusters on loopback with data in a temporary directory (fsync on, as
# shipped; both plaintext on loopback, Concord with --insecure like the
# etcd nodes without TLS), and runs REPS alternating repetitions of:
#
#   64 clients x 1 in flight over the 3 nodes   etcd `benchmark put --clients 64 --conns 64`
#                                               vs `concord bench write --clients 64`
#   1 client on the leader, 1 on a follower     the same with --clients 1 (p50)
#   10,000 sessions connected through a follower (Concord only)
#
# and prints the median of each figure. Never run by CI: it takes minutes,
# downloads etcd and wants the machine to itself.
set -euo pipefail

REPS=${REPS:-3}
DURATION=${DURATION:-10s}
SESSIONS=${SESSIONS:-10000}
ETCD_VERSION=${ETCD_VERSION:-v3.7.3}
# The benchmark tool lives in etcd's root module, whose newest version on the
# module proxy may lag the server's.
ETCD_BENCH_VERSION=${ETCD_BENCH_VERSION:-v3.6.8}
ETCD_VAL_SIZE=${ETCD_VAL_SIZE:-64}
CONCORD_PORT_BASE=${CONCORD_PORT_BASE:-37700}
ETCD_PORT_BASE=${ETCD_PORT_BASE:-32379}

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d -t concord-etcd-compare.XXXXXX)
PIDS=()

cleanup() {
	for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "etcd-compare: $*" >&2; }

# duration_s converts DURATION (Go syntax, seconds or minutes) to seconds.
duration_s() {
	case $DURATION in
	*m) echo $((${DURATION%m} * 60)) ;;
	*s) echo "${DURATION%s}" ;;
	*) echo "$DURATION" ;;
	esac
}

install_etcd() {
	if [[ -n ${ETCD_BIN_DIR:-} ]]; then
		BIN=$ETCD_BIN_DIR
	else
		BIN=$WORK/gobin
		mkdir -p "$BIN"
		# etcd's go.mod files carry replace directives, so `go install
		# module@version` refuses them; a throwaway main module that
		# requires the version builds the same packages.
		local m
		for m in "server go.etcd.io/etcd/server/v3 $ETCD_VERSION go.etcd.io/etcd/server/v3" \
			"bench go.etcd.io/etcd/v3 $ETCD_BENCH_VERSION go.etcd.io/etcd/v3/tools/benchmark"; do
			set -- $m
			log "installing $4 ($2@$3)"
			mkdir -p "$WORK/mod-$1"
			(cd "$WORK/mod-$1" && go mod init "etcdcompare/$1" >/dev/null 2>&1 &&
				GOFLAGS=-mod=mod go get "$2@$3" >/dev/null 2>&1 &&
				GOBIN=$BIN GOFLAGS=-mod=mod go install "$4") || {
				log "could not install $2@$3 from the module proxy"
				exit 1
			}
		done
	fi
	[[ -x $BIN/server && -x $BIN/benchmark ]] || {
		log "$BIN lacks server or benchmark"
		exit 1
	}
}

# wait_http url: until url answers 2xx, for 30 s.
wait_http() {
	local i
	for i in $(seq 1 150); do
		curl -fsS --max-time 2 "$1" >/dev/null 2>&1 && return 0
		sleep 0.2
	done
	log "no answer from $1"
	return 1
}

start_etcd() {
	local cluster="" i
	for i in 1 2 3; do
		cluster+="e$i=http://127.0.0.1:$((ETCD_PORT_BASE + 10 * (i - 1) + 1)),"
	done
	for i in 1 2 3; do
		local c=$((ETCD_PORT_BASE + 10 * (i - 1)))
		"$BIN/server" --name "e$i" --data-dir "$WORK/etcd$i" \
			--listen-client-urls "http://127.0.0.1:$c" --advertise-client-urls "http://127.0.0.1:$c" \
			--listen-peer-urls "http://127.0.0.1:$((c + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((c + 1))" \
			--initial-cluster "${cluster%,}" --initial-cluster-state new --initial-cluster-token etcd-compare \
			>"$WORK/etcd$i.log" 2>&1 &
		PIDS+=($!)
	done
	for i in 1 2 3; do wait_http "http://127.0.0.1:$((ETCD_PORT_BASE + 10 * (i - 1)))/health"; done
}

start_concord() {
	(cd "$ROOT" && go build -o "$WORK/concord" ./cmd/concord)
	local key join="" i
	key=$("$WORK/concord" keygen)
	for i in 1 2 3; do join+="127.0.0.1:$((CONCORD_PORT_BASE + 10 * (i - 1) + 3)),"; done
	for i in 1 2 3; do
		local p=$((CONCORD_PORT_BASE + 10 * (i - 1)))
		CONCORD_GOSSIP_KEY="$key" "$WORK/concord" server --node-id "node$i" --system-id bench --data-dir "$WORK/concord$i" \
			--http-addr "127.0.0.1:$p" --grpc-addr "127.0.0.1:$((p + 1))" \
			--raft-addr "127.0.0.1:$((p + 2))" --gossip-addr "127.0.0.1:$((p + 3))" \
			--join "${join%,}" --bootstrap-expect 3 --insecure --http-open-reads --allow-anonymous agent,client \
			--anonymous-session-rate 0 \
			>"$WORK/concord$i.log" 2>&1 &
		PIDS+=($!)
	done
	for i in 1 2 3; do wait_http "http://127.0.0.1:$((CONCORD_PORT_BASE + 10 * (i - 1)))/v1/ready"; done
}

# concord_roles sets C_LEADER and C_FOLLOWER to MAP URLs.
concord_roles() {
	local i p st
	C_LEADER="" C_FOLLOWER=""
	for i in 1 2 3; do
		p=$((CONCORD_PORT_BASE + 10 * (i - 1)))
		st=$(curl -fsS --max-time 5 "http://127.0.0.1:$p/v1/status")
		if [[ $(json_str "$st" nodeId) == "$(json_str "$st" leaderId)" ]]; then
			C_LEADER="ws://127.0.0.1:$p/map"
		else
			C_FOLLOWER="ws://127.0.0.1:$p/map"
		fi
	done
	[[ -n $C_LEADER && -n $C_FOLLOWER ]] || {
		log "no Concord leader agreed"
		exit 1
	}
}

# etcd_roles sets E_LEADER and E_FOLLOWER to client URLs.
etcd_roles() {
	local i u st
	E_LEADER="" E_FOLLOWER=""
	for i in 1 2 3; do
		u="http://127.0.0.1:$((ETCD_PORT_BASE + 10 * (i - 1)))"
		st=$(curl -fsS --max-time 5 -X POST "$u/v3/maintenance/status" -d '{}')
		if [[ $(json_str "$st" leader) == "$(json_str "$st" member_id)" ]]; then
			E_LEADER=$u
		else
			E_FOLLOWER=$u
		fi
	done
	[[ -n $E_LEADER && -n $E_FOLLOWER ]] || {
		log "no etcd leader agreed"
		exit 1
	}
}

# json_str json key: the first value of "key" (string or number), unquoted.
json_str() { grep -o "\"$2\":[^,}]*" <<<"$1" | head -1 | cut -d: -f2- | tr -d '" '; }

# etcd_put endpoints clients total: prints "writes_per_sec p50_ms p99_ms".
etcd_put() {
	local out
	out=$("$BIN/benchmark" --endpoints "$1" --clients "$2" --conns "$2" \
		put --total "$3" --key-size 8 --val-size "$ETCD_VAL_SIZE" --sequential-keys 2>/dev/null)
	awk '/Requests\/sec:/ {r=$2} / 50% in / {p50=$3*1000} / 99% in / {p99=$3*1000}
		END {printf "%.1f %.3f %.3f\n", r, p50, p99}' <<<"$out"
}

# concord_write clients url...: prints "writes_per_sec p50_ms p99_ms".
concord_write() {
	local n=$1 args=() u out
	shift
	for u in "$@"; do args+=(--url "$u"); done
	out=$("$WORK/concord" bench write "${args[@]}" --clients "$n" --duration "$DURATION" --json 2>/dev/null)
	[[ $(json_str "$out" errors) == 0 ]] || log "concord bench write reported errors: $out"
	echo "$(json_str "$out" writes_per_sec) $(json_str "$out" p50_ms) $(json_str "$out" p99_ms)"
}

# Results: one file per figure, one value per repetition.
record() { echo "$2" >>"$WORK/res-$1"; }
median() { sort -g "$WORK/res-$1" 2>/dev/null | awk '{v[NR]=$1} END {if (NR) printf "%.6g\n", v[int((NR+1)/2)]; else print "-"}'; }

main() {
	command -v curl >/dev/null || {
		log "curl is required"
		exit 1
	}
	install_etcd
	log "starting 3 etcd and 3 Concord nodes under $WORK"
	start_etcd
	start_concord
	etcd_roles
	concord_roles
	local eps="http://127.0.0.1:$ETCD_PORT_BASE,http://127.0.0.1:$((ETCD_PORT_BASE + 10)),http://127.0.0.1:$((ETCD_PORT_BASE + 20))"
	local curls=("ws://127.0.0.1:$CONCORD_PORT_BASE/map" "ws://127.0.0.1:$((CONCORD_PORT_BASE + 10))/map" "ws://127.0.0.1:$((CONCORD_PORT_BASE + 20))/map")
	local secs r w p50 p99 rest out
	secs=$(duration_s)
	for r in $(seq 1 "$REPS"); do
		log "repetition $r/$REPS"
		# etcd's benchmark counts requests, not time: size the run from
		# the previous repetition's rate so both sides run about as long.
		read -r w p50 p99 <<<"$(etcd_put "$eps" 64 "$(rate_total e64 "$secs" 4000)")"
		record e64 "$w"; record e64p50 "$p50"; record e64p99 "$p99"
		read -r w p50 p99 <<<"$(concord_write 64 "${curls[@]}")"
		record c64 "$w"; record c64p50 "$p50"; record c64p99 "$p99"
		read -r w p50 rest <<<"$(etcd_put "$E_LEADER" 1 "$(rate_total e1l "$secs" 500)")"
		record e1l "$w"; record e1lp50 "$p50"
		read -r w p50 rest <<<"$(concord_write 1 "$C_LEADER")"
		record c1l "$w"; record c1lp50 "$p50"
		read -r w p50 rest <<<"$(etcd_put "$E_FOLLOWER" 1 "$(rate_total e1f "$secs" 500)")"
		record e1f "$w"; record e1fp50 "$p50"
		read -r w p50 rest <<<"$(concord_write 1 "$C_FOLLOWER")"
		record c1f "$w"; record c1fp50 "$p50"
		out=$("$WORK/concord" bench sessions --url "$C_FOLLOWER" --sessions "$SESSIONS" --json 2>/dev/null || true)
		record csess "$(json_str "$out" elapsed_ms)"
	done
	report
}

# rate_total figure secs default: the request count that takes secs at the
# median rate measured so far for figure (default rate before the first).
rate_total() {
	local m
	m=$(median "$1")
	[[ $m == - ]] && m=$3
	awk -v m="$m" -v s="$2" 'BEGIN {n=int(m*s); if (n<100) n=100; print n}'
}

report() {
	ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a+0>0 && b+0>0) printf "%.2f", a/b; else print "-"}'; }
	echo
	echo "Medians of $REPS alternating repetitions, $DURATION each (etcd $ETCD_VERSION, benchmark $ETCD_BENCH_VERSION, value $ETCD_VAL_SIZE B; fsync on)"
	printf '%-50s %12s %12s %10s\n' "figure" "concord" "etcd" "c/e"
	row() { printf '%-50s %12s %12s %10s\n' "$1" "$(median "$2")" "$(median "$3")" "$(ratio "$(median "$2")" "$(median "$3")")"; }
	row "64 clients over 3 nodes: writes/s" c64 e64
	row "64 clients over 3 nodes: p50 ms" c64p50 e64p50
	row "64 clients over 3 nodes: p99 ms" c64p99 e64p99
	row "1 client on the leader: p50 ms" c1lp50 e1lp50
	row "1 client on the leader: writes/s" c1l e1l
	row "1 client on a follower: p50 ms" c1fp50 e1fp50
	row "1 client on a follower: writes/s" c1f e1f
	printf '%-50s %12s %12s %10s\n' "$SESSIONS sessions via a follower: ms" "$(median csess)" "-" "-"
}

main "$@"
