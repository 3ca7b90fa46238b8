#!/usr/bin/env bash
# The two entry points of the README, on a fresh Debian machine as root:
#   sandbox/run.sh demo   set up (once), bring up the sandbox and run the demo handoffs
#   sandbox/run.sh test   set up (once) and run the test suite against a real sandbox
# Extra arguments go to `handoff demo` or pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-}
[ $# -gt 0 ] && shift
case "$what" in
  demo|test) ;;
  *) echo "usage: sandbox/run.sh demo|test [args...]" >&2; exit 2 ;;
esac
sandbox/setup.sh
export DO_NOT_TRACK=1 PREFECT_SERVER_ANALYTICS_ENABLED=false
if [ "$what" = demo ]; then
  exec uv run --frozen handoff demo "$@"
fi
uv run --frozen ruff check .
# The documentation site, strictly (a broken link or anchor fails), into a throwaway
# directory; its output only when it fails (`--quiet` would also hide the warnings that
# --strict counts).
site=$(mktemp -d)
if ! docs_log=$(NO_MKDOCS_2_WARNING=1 uv run --frozen mkdocs build --strict --site-dir "$site" 2>&1); then
  echo "$docs_log" >&2; rm -rf "$site"; exit 1
fi
rm -rf "$site"
# Three workers, each with its own sandbox: most of a handoff test is waiting on pods,
# probes and clocks (two workers left the 2 cores 60-75 % idle through the handoff
# files, three 12-16 %), so three share them. Four were faster (22-23 min) but the
# cores never idle and two load races showed (docs/performance.md). Whole files go to one worker, as
# their fixtures are per module, longest first as last recorded (tests/schedule.py), not
# xdist's most-tests-first. `-n 0` (or HANDOFF_TEST_WORKERS=0) runs in one process.
exec uv run --frozen pytest -n "${HANDOFF_TEST_WORKERS:-3}" --dist loadfile \
  --no-loadscope-reorder "$@"
