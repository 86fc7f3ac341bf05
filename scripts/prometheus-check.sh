#!/usr/bin/env bash
# Feature `metrics` against a real Prometheus server (CI runs it; it needs no GPU):
# 1. installs Debian's `prometheus` package when prometheus or promtool is missing;
# 2. starts Prometheus, scraping every second the metrics example (examples/metrics_prometheus.rs)
#    and a small file server that serves `gpu-ledger metrics --format openmetrics` of the
#    example's ledger as OpenMetrics;
# 3. runs the example (Level::Scopes by default) to its end, writes the CLI's Prometheus and
#    OpenMetrics text of its ledger, and checks both texts and the example's /metrics with
#    `promtool check metrics`;
# 4. compares the ledger's rows, series by series, with what Prometheus' HTTP API returns for both
#    jobs (after two scrapes at least), with a direct scrape of /metrics, and with the CLI's text
#    (scripts/prometheus_compare.py).
# Every process it starts is stopped by its PID when it ends; the work directory (under target/)
# is removed on success and kept, with its logs, on failure.
#
# Settings (environment): LEVEL (scopes; timeline needs a GPU), ITERATIONS (400), SAMPLE_EVERY
# (unset: every iteration traced), EXAMPLE (a prebuilt example binary: no cargo build), CLI (a
# prebuilt gpu-ledger binary), KEEP_WORK=1 (keep the work directory), WAIT (seconds the
# comparison waits for the scrapes, 90), PROMETHEUS: `require` (the default: installed when
# missing, or the check fails), `auto` (where there is none and none can be installed, the
# comparison reads /metrics directly and the promtool checks are skipped, said in the output) or
# `skip` (direct reads of /metrics even where Prometheus is installed).
#
# In gpu-bundle/ (scripts/gpu-bundle.sh copies this script, the comparison and the binaries there)
# it runs with no Rust: on a GPU host,
#   LEVEL=timeline SAMPLE_EVERY=100 ITERATIONS=1000 PROMETHEUS=auto gpu-bundle/prometheus-check.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
compare_py=$here/prometheus_compare.py
if [[ -f $here/../Cargo.toml ]]; then
  cd "$here/.."
  work_root=$PWD/target
else
  # A bundle: the binaries beside this script, the work directory in the current one.
  EXAMPLE=${EXAMPLE:-$here/metrics_prometheus}
  CLI=${CLI:-$here/gpu-ledger}
  work_root=$PWD
fi
export CARGO_INCREMENTAL=0
PROMETHEUS=${PROMETHEUS:-require}
case $PROMETHEUS in require | auto | skip) ;; *)
  echo "prometheus-check: PROMETHEUS=$PROMETHEUS: give require, auto or skip" >&2
  exit 2
  ;;
esac
LEVEL=${LEVEL:-scopes}
ITERATIONS=${ITERATIONS:-400}
WAIT=${WAIT:-90}

passed=0
failed=0
pids=()
work=""

say() { echo "prometheus-check: $*"; }
fail() {
  echo "prometheus-check: FAILED: $*" >&2
  [[ -n $work ]] && echo "prometheus-check: logs and files kept in $work" >&2
  KEEP_WORK=1
  exit 1
}
check() { # check DESCRIPTION COMMAND...: counts one check, and says what failed
  local what=$1
  shift
  if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "prometheus-check: FAILED: $what" >&2; fi
}
cleanup() {
  local pid
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  if [[ -n $work && ${KEEP_WORK:-0} != 1 && $failed == 0 ]]; then
    rm -rf -- "$work"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A TCP port free on 127.0.0.1 now (another process may take it before it is used: the servers
# below are retried on another port when they cannot listen).
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# GET URL's body on stdout; fails on any error.
http_get() {
  python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "$1"
}

# Waits up to $2 seconds until `$3...` succeeds, while process $1 lives.
wait_until() {
  local pid=$1 seconds=$2
  shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    kill -0 "$pid" 2>/dev/null || return 2
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

# 1. Prometheus and promtool.
install_prometheus() {
  command -v apt-get >/dev/null || {
    echo "there is no apt-get here: install a Prometheus release (2.x) and put prometheus and promtool on PATH"
    return 1
  }
  local sudo=()
  ((EUID == 0)) || sudo=(sudo -n)
  say "installing Debian's prometheus package" >&2
  "${sudo[@]}" apt-get update -qq >/dev/null ||
    { echo "apt-get update failed: the package registry must be reachable to install prometheus"; return 1; }
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends prometheus >/dev/null ||
    { echo "apt-get install prometheus failed"; return 1; }
}
with_prometheus=1
if [[ $PROMETHEUS == skip ]]; then
  with_prometheus=0
  say "PROMETHEUS=skip: comparing with direct scrapes of /metrics only"
elif ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
  if ! why=$(install_prometheus); then
    [[ $PROMETHEUS == auto ]] || fail "$why"
    with_prometheus=0
    say "no Prometheus here ($why): comparing with direct scrapes of /metrics only"
  fi
fi
((with_prometheus)) && say "$(prometheus --version 2>&1 | head -n 1)"

# 2. The example and the command line.
if [[ -z ${EXAMPLE:-} || -z ${CLI:-} ]]; then
  cargo build --features metrics --example metrics_prometheus -p gpu-ledger 2>&1 | tail -n 1
  cargo build -p gpu-ledger-cli 2>&1 | tail -n 1
fi
EXAMPLE=${EXAMPLE:-target/debug/examples/metrics_prometheus}
CLI=${CLI:-target/debug/gpu-ledger}
[[ -x $EXAMPLE ]] || fail "no example binary at $EXAMPLE"
[[ -x $CLI ]] || fail "no gpu-ledger binary at $CLI"

mkdir -p "$work_root"
work=$(mktemp -d "$work_root/prometheus-check.XXXXXX")
ledger=$work/run.jsonl

# Serves $work/cli.om as OpenMetrics on port $1 (404 until it exists).
serve_openmetrics() {
  python3 - "$1" "$work/cli.om" <<'PY' &
import http.server, sys
port, path = int(sys.argv[1]), sys.argv[2]
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        try:
            body = open(path, "rb").read()
        except FileNotFoundError:
            self.send_error(404, "the CLI's OpenMetrics text is not written yet")
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/openmetrics-text; version=1.0.0; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
PY
  pids+=($!)
}

# 3. Prometheus, the OpenMetrics file server and the example, each retried on another port when
# the one chosen was taken meanwhile.
start_prometheus() {
  local attempt
  for attempt in 1 2 3; do
    prom_port=$(free_port)
    app_port=$(free_port)
    om_port=$(free_port)
    cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: gpu_ledger
    static_configs:
      - targets: ['127.0.0.1:$app_port']
  - job_name: gpu_ledger_cli
    static_configs:
      - targets: ['127.0.0.1:$om_port']
EOF
    promtool check config "$work/prometheus.yml" >"$work/promtool-config.log" 2>&1 ||
      fail "promtool rejects the generated configuration: $(cat "$work/promtool-config.log")"
    prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
      --web.listen-address="127.0.0.1:$prom_port" --log.level=warn >"$work/prometheus.log" 2>&1 &
    prom_pid=$!
    pids+=("$prom_pid")
    if wait_until "$prom_pid" 30 http_get "http://127.0.0.1:$prom_port/-/ready"; then
      return 0
    fi
    say "Prometheus did not come up on port $prom_port (attempt $attempt): $(tail -n 2 "$work/prometheus.log")"
    kill "$prom_pid" 2>/dev/null || true
  done
  fail "Prometheus did not start; its log: $(tail -n 20 "$work/prometheus.log")"
}
if ((with_prometheus)); then
  start_prometheus
  say "Prometheus on 127.0.0.1:$prom_port"
  serve_openmetrics "$om_port"
else
  app_port=$(free_port)
fi

example_args=(--level "$LEVEL" --iterations "$ITERATIONS" --ledger "$ledger" --linger 600)
[[ -n ${SAMPLE_EVERY:-} ]] && example_args+=(--sample-every "$SAMPLE_EVERY")
for attempt in 1 2 3; do
  "$EXAMPLE" --listen "127.0.0.1:$app_port" "${example_args[@]}" >"$work/example.log" 2>&1 &
  app_pid=$!
  pids+=("$app_pid")
  if wait_until "$app_pid" 300 grep -q '^finished: ' "$work/example.log"; then
    break
  fi
  grep -q 'could not listen' "$work/example.log" ||
    fail "the example did not finish; its output: $(tail -n 20 "$work/example.log")"
  ((attempt < 3)) || fail "the example could not listen: $(tail -n 3 "$work/example.log")"
  say "port $app_port was taken; the example tries another"
  if ((with_prometheus)); then
    # Prometheus scrapes the port it was configured with: start over on new ports.
    kill "$prom_pid" 2>/dev/null || true
    start_prometheus
    serve_openmetrics "$om_port"
  else
    app_port=$(free_port)
  fi
done
say "$(grep '^finished: ' "$work/example.log") at level $LEVEL; the example serves 127.0.0.1:$app_port"

# 4. The command line's texts and promtool.
"$CLI" metrics "$ledger" -o "$work/cli.prom"
"$CLI" metrics "$ledger" --format openmetrics -o "$work/cli.om.tmp"
mv "$work/cli.om.tmp" "$work/cli.om"
promtool_clean() { # promtool check metrics < FILE: exit 0, no lint problem
  promtool check metrics <"$1" >"$1.promtool" 2>&1
}
http_get "http://127.0.0.1:$app_port/metrics" >"$work/scrape.prom" || fail "GET /metrics of the example failed"
if command -v promtool >/dev/null; then
  check "promtool check metrics on gpu-ledger metrics' output" promtool_clean "$work/cli.prom"
  check "promtool check metrics on the example's /metrics" promtool_clean "$work/scrape.prom"
  for f in cli.prom scrape.prom; do
    [[ -s $work/$f.promtool ]] && say "promtool on $f: $(cat "$work/$f.promtool")"
  done
else
  say "no promtool here: the texts are not linted"
fi

# 5. The ledger against Prometheus (both jobs), a direct scrape and the CLI's text.
sources=(--scrape "http://127.0.0.1:$app_port/metrics" --text "$work/cli.prom")
if ((with_prometheus)); then
  sources+=(--prometheus "http://127.0.0.1:$prom_port" gpu_ledger --prometheus "http://127.0.0.1:$prom_port" gpu_ledger_cli)
fi
set +e
python3 "$compare_py" --ledger "$ledger" --wait "$WAIT" "${sources[@]}" | tee "$work/compare.log"
compare=${PIPESTATUS[0]}
set -e
read -r cp cf < <(sed -nE 's/^([0-9]+) passed, ([0-9]+) failed$/\1 \2/p' "$work/compare.log" | tail -n 1) || true
passed=$((passed + ${cp:-0}))
failed=$((failed + ${cf:-0}))
if ((compare != 0 && ${cf:-0} == 0)); then
  failed=$((failed + 1))
  echo "prometheus-check: FAILED: the comparison did not run to its end (exit $compare)" >&2
fi
echo "prometheus-check: $passed passed, $failed failed"
if ((failed > 0)); then
  KEEP_WORK=1
  echo "prometheus-check: logs and files kept in $work" >&2
  exit 1
fi
