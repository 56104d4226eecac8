# shellcheck shell=bash
# Build steps ("pieces"), each skipped while its outputs are there: sourced by the toolchain's
# bootstrap (scripts/toolchain/bootstrap.sh) and the real node's build (scripts/node/build.sh).
#
#   piece <name> <have-fn> <build-fn>   build unless <have-fn> succeeds; <have-fn> must succeed after
#   q <cmd...>                          inside a build: run quietly into the piece's log, and on a
#                                       failure show its tail and stop
#
# The caller defines log and die and sets PIECES_LOG_DIR (a log per piece) and TIMINGS (a line per
# piece built); with PIECES_TOTAL set, each piece says its number and a present one says so.
# PIECES_BUILT lists what was built ("<name> <seconds>s").

PIECE_LOG=/dev/null
PIECES_SEEN=0
PIECES_BUILT=()

q() {
  if ! "$@" >>"$PIECE_LOG" 2>&1; then
    tail -n 40 "$PIECE_LOG" >&2
    die "failed: $* (full log: $PIECE_LOG)"
  fi
}

piece() {
  local name=$1 have=$2 build=$3 t0 seconds count=""
  PIECES_SEEN=$((PIECES_SEEN + 1))
  [[ -z ${PIECES_TOTAL:-} ]] || count=" ($PIECES_SEEN/$PIECES_TOTAL)"
  if $have; then
    [[ -z $count ]] || log "$name: present, skipping$count"
    return 0
  fi
  PIECE_LOG="$PIECES_LOG_DIR/$name.log"
  : >"$PIECE_LOG"
  log "building $name$count... (log: $PIECE_LOG)"
  t0=$(date +%s)
  $build
  $have || die "$name: build finished but its outputs are missing"
  seconds=$(($(date +%s) - t0))
  log "built $name in ${seconds}s"
  PIECES_BUILT+=("$name ${seconds}s")
  echo "$(date -u +%FT%TZ) cold-piece $name ${seconds}s" >>"$TIMINGS"
}
