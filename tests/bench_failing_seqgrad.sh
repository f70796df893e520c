#!/usr/bin/env bash
# A seqgrad whose `bench step_seed` crashes (exit 134, as an abort would); everything else is the
# real binary ($REAL_SEQGRAD). tests/meson.build's bench_side_fails runs bench/run.sh with it.
if [ "$1" = bench ] && [[ " $* " == *" step_seed "* ]]; then echo "bench_failing_seqgrad: abort" >&2; exit 134; fi
exec "$REAL_SEQGRAD" "$@"
