# Shared by .ci/fuzz and .ci/python-client (sourced, not run): a Python
# virtualenv with the pinned tools of .ci/requirements.txt, and the debug
# server on a throw-away data dir.
#
# Sets TARGET_DIR, VENV and CI_TMP; after ci_binaries, the executables'
# paths; after start_server, SERVER_URL and SERVER_KEY.

set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ci_step() { printf '\n==> %s\n' "$*"; }

# Cargo's target directory (honours CARGO_TARGET_DIR and cargo config).
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps --locked |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
[ -n "$TARGET_DIR" ] || { echo "cannot find cargo's target directory" >&2; exit 1; }
VENV="$TARGET_DIR/ci-venv"

# Everything made at run time goes in one temp dir, removed on exit, after the
# processes started in the background (CI_PIDS) are stopped.
CI_TMP=$(mktemp -d "${TMPDIR:-/tmp}/agent-platform-ci.XXXXXX")
CI_PIDS=()
ci_cleanup() {
    local pid
    for pid in "${CI_PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || continue
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$CI_TMP"
}
trap ci_cleanup EXIT
trap 'exit 130' INT TERM

# A Python 3.10+ interpreter that can make virtualenvs; installs Debian's if there is none.
ci_python() {
    local py
    for py in python3.11 python3 python; do
        if command -v "$py" >/dev/null &&
            "$py" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
            command -v "$py"
            return
        fi
    done
    echo "no Python 3.10+ with venv found; installing Debian's" >&2
    apt-get update -qq >&2 && apt-get install -y -qq python3 python3-venv >&2
    command -v python3
}

# The executables `cargo test --workspace` builds, named by `cargo xtask
# test-binaries`: AGENT_PLATFORM_BIN (the server), FAKE_UPSTREAM_BIN (the tests'
# fake model provider), E2E_TEST_BIN and SERVER_UNIT_TEST_BIN. .ci/run exports
# them once after its test run; a script run alone asks cargo here (a no-op
# after `cargo test --workspace`). Cargo is never asked with another target
# selection, which would resolve other features and compile the server again.
ci_binaries() {
    if [ -z "${AGENT_PLATFORM_BIN:-}" ] || [ -z "${FAKE_UPSTREAM_BIN:-}" ] || [ -z "${FAKE_MCP_BIN:-}" ] ||
        [ -z "${E2E_TEST_BIN:-}" ] || [ -z "${SERVER_UNIT_TEST_BIN:-}" ]; then
        local exports
        exports=$(cargo xtask test-binaries)
        eval "$exports"
    fi
}

# Creates (or reuses, when .ci/requirements.txt has not changed) the virtualenv
# under the target dir and puts it first on PATH.
ci_venv() {
    local req=.ci/requirements.txt stamp="$VENV/.requirements.txt"
    if [ -x "$VENV/bin/python" ] && cmp -s "$req" "$stamp"; then
        echo "virtualenv $VENV is up to date"
    else
        echo "making $VENV and installing .ci/requirements.txt"
        rm -rf "$VENV"
        "$(ci_python)" -m venv "$VENV"
        "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
            --requirement "$req"
        cp "$req" "$stamp"
    fi
    export PATH="$VENV/bin:$PATH" VIRTUAL_ENV="$VENV"
    export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
}

# Runs "$@" in the background, stopped on exit; its stdout goes to the file $CI_TMP/$name.out,
# its stderr to $CI_TMP/$name.err. Sets BG_PID.
ci_background() {
    local name=$1
    shift
    "$@" >"$CI_TMP/$name.out" 2>"$CI_TMP/$name.err" &
    BG_PID=$!
    CI_PIDS+=("$BG_PID")
}

# Waits up to 30 s until `cond` (a shell command) succeeds while process $2 runs.
ci_wait_for() {
    local what=$1 pid=$2 cond=$3
    for _ in $(seq 300); do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "$what exited early:" >&2
            cat "$CI_TMP"/*.err >&2 || true
            exit 1
        fi
        if eval "$cond"; then return; fi
        sleep 0.1
    done
    echo "$what did not start within 30 s:" >&2
    cat "$CI_TMP"/*.err >&2 || true
    exit 1
}

# Starts `agent-platform serve` ($AGENT_PLATFORM_BIN: call ci_binaries first) on a free port and an
# empty data dir, extra arguments going to `serve`; waits until it answers
# and sets SERVER_URL and SERVER_KEY (the first key, printed on stdout).
#
# With AGENT_PLATFORM_TEST_BACKEND=postgres, the server runs on a new database
# of the cluster of AGENT_PLATFORM_TEST_DATABASE_URL (see .ci/postgres).
start_server() {
    local bin="${AGENT_PLATFORM_BIN:?call ci_binaries first}" store=()
    [ -x "$bin" ] || { echo "$bin is missing" >&2; exit 1; }
    if [ "${AGENT_PLATFORM_TEST_BACKEND:-sled}" = postgres ]; then
        local url
        url=$(.ci/postgres createdb "ci_$(date +%s%N)")
        store=(AGENT_PLATFORM_STORE_BACKEND=postgres "AGENT_PLATFORM_DATABASE_URL=$url")
        echo "the server runs on PostgreSQL (${url%%\?*})"
    fi
    ci_background server env AGENT_PLATFORM_LOG_LEVEL=error "${store[@]}" \
        "$bin" serve --bind 127.0.0.1:0 --data-dir "$CI_TMP/data" "$@"
    # The banner (stderr) names the address; the key follows on stdout.
    ci_wait_for "the server" "$BG_PID" '
        SERVER_URL=$(sed -n "s/.* listening on \(http:[^ ]*\).*/\1/p" "$CI_TMP/server.err" | head -n1)
        SERVER_KEY=$(grep -m1 "^ap_" "$CI_TMP/server.out" || true)
        [ -n "$SERVER_URL" ] && [ -n "$SERVER_KEY" ] &&
            python -c "import sys, urllib.request as u; sys.exit(u.urlopen(sys.argv[1], timeout=2).status != 200)" \
                "$SERVER_URL/api/healthz" 2>/dev/null'
    echo "server up at $SERVER_URL (data dir $CI_TMP/data)"
    export SERVER_URL SERVER_KEY
}
