#!/usr/bin/env bash
# The shell steps of the twice GitHub Action (action.yml at the repository's root). Every step
# of the action that runs a command calls this script, and the test suite runs it as it is
# (twice/tests/it/action.rs), so the action cannot drift from the command line.
#
#   twice-action.sh cache-key   where the binaries live, and the cache key of this source tree
#   twice-action.sh install     install from the package input (a wheel or the npm platform
#                               tarball), else reuse the binaries found there, or `cargo install`
#   twice-action.sh run         run twice as the inputs say; job summary; outputs
#
# Inputs come as TWICE_INPUT_* environment variables, never spliced into the script's text
# (action.yml maps `${{ inputs.x }}` to them), so an input cannot inject shell. The GitHub
# files the runner provides (GITHUB_OUTPUT, GITHUB_PATH, GITHUB_STEP_SUMMARY) are appended to
# when they are set; outside Actions they are optional.
set -euo pipefail

# The twice source tree the action runs from: the action's own checkout.
source_dir() {
    if [[ -n "${GITHUB_ACTION_PATH:-}" ]]; then
        printf '%s\n' "$GITHUB_ACTION_PATH"
    else
        (cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    fi
}

fail() {
    printf 'twice-action: %s\n' "$*" >&2
    # An error annotation when running in Actions, so the run's page shows it.
    if [[ -n "${GITHUB_ACTIONS:-}" ]]; then
        printf '::error title=twice::%s\n' "$*"
    fi
    exit 2
}

output() {
    if [[ -n "${GITHUB_OUTPUT:-}" ]]; then
        printf '%s=%s\n' "$1" "$2" >>"$GITHUB_OUTPUT"
    fi
}

# Where installed binaries go and are cached: one directory per source tree, so a cache
# restored for another version of twice is never used by mistake.
install_root() {
    printf '%s\n' "${RUNNER_TOOL_CACHE:-${HOME}/.cache}/twice-action"
}

# A digest of everything that goes into the binaries: the manifests, the lockfile, the Rust
# sources, the scenario catalog (embedded in `twice`), and the compiler.
source_digest() {
    local dir
    dir="$(source_dir)"
    (
        cd "$dir"
        find . -path ./target -prune -o -path ./examples -prune -o -path ./.git -prune -o \
            -type f \( -name '*.rs' -o -name '*.toml' -o -name 'Cargo.lock' \) -print |
            LC_ALL=C sort | xargs sha256sum
        rustc --version 2>/dev/null || echo "no rustc"
    ) | sha256sum | cut -c1-16
}

cmd_cache_key() {
    local root key
    root="$(install_root)"
    key="twice-$(uname -s)-$(uname -m)-$(source_digest)"
    printf 'twice-action: cache key %s, install root %s\n' "$key" "$root" >&2
    output key "$key"
    output root "$root"
}

# Where binaries from a package input go: beside the cached ones, never over them, so that a
# cache saved under the source's key only ever holds what that source built.
package_bin() {
    printf '%s\n' "$(install_root)/from-package/bin"
}

# Installs twice from PACKAGE into package_bin: a twice-kit wheel (`*.whl`, into a venv of its
# own: its scripts are the binaries) or the npm platform package's tarball
# (`twice-kit-<platform>-<arch>-*.tgz`, whose `package/bin/` holds them). No Rust needed.
install_package() {
    local package="$1" bin dir
    bin="$(package_bin)"
    dir="$(dirname "$bin")"
    [[ -f "$package" ]] || fail "the package input names ${package}, which is not a file"
    rm -rf "$dir"
    mkdir -p "$bin"
    case "$package" in
    *.whl)
        command -v python3 >/dev/null 2>&1 || fail "python3 is not on the PATH: a wheel needs it (actions/setup-python)"
        python3 -m venv "$dir/venv" >&2 || fail "python3 -m venv failed (see the log above)"
        "$dir/venv/bin/pip" install --quiet --disable-pip-version-check "$package" >&2 ||
            fail "pip install ${package} failed (see the log above)"
        ln -s "$dir/venv/bin/twice" "$bin/twice"
        ln -s "$dir/venv/bin/twice-executor" "$bin/twice-executor"
        ;;
    *.tgz)
        tar -xzf "$package" -C "$dir" || fail "${package} is not a gzipped tarball"
        [[ -x "$dir/package/bin/twice" ]] ||
            fail "${package} holds no package/bin/twice: give the platform package (twice-kit-linux-x64-VERSION.tgz and the like), not twice-kit's"
        ln -s "$dir/package/bin/twice" "$bin/twice"
        ln -s "$dir/package/bin/twice-executor" "$bin/twice-executor"
        ;;
    *) fail "the package input must be a wheel (.whl) or the npm platform package (.tgz), not ${package}" ;;
    esac
    "$bin/twice" --version >/dev/null 2>&1 || fail "the twice in ${package} does not run on this machine"
    printf 'twice-action: installed %s from %s\n' "$("$bin/twice" --version)" "$package" >&2
}

cmd_install() {
    local root bin
    root="$(install_root)"
    bin="$root/bin"
    if [[ -n "${TWICE_INPUT_PACKAGE:-}" ]]; then
        install_package "$TWICE_INPUT_PACKAGE"
        bin="$(package_bin)"
    elif [[ -x "$bin/twice" && -x "$bin/twice-executor" ]] && "$bin/twice" --version >/dev/null 2>&1; then
        printf 'twice-action: reusing %s (%s)\n' "$bin/twice" "$("$bin/twice" --version)" >&2
    else
        command -v cargo >/dev/null 2>&1 ||
            fail "cargo is not on the PATH: add a Rust toolchain step (dtolnay/rust-toolchain@stable) before this action"
        printf 'twice-action: installing twice from %s into %s\n' "$(source_dir)" "$root" >&2
        # Word-split on purpose: extra flags such as `--debug` or `--jobs 2`.
        # shellcheck disable=SC2086
        cargo install --locked --path "$(source_dir)/twice" --root "$root" ${TWICE_INPUT_INSTALL_FLAGS:-} >&2 ||
            fail "cargo install failed (see the log above)"
    fi
    if [[ -n "${GITHUB_PATH:-}" ]]; then
        printf '%s\n' "$bin" >>"$GITHUB_PATH"
    fi
    output twice "$bin/twice"
}

# Appends FILE to the job summary, if there is one.
to_summary() {
    if [[ -n "${GITHUB_STEP_SUMMARY:-}" && -f "$1" ]]; then
        cat "$1" >>"$GITHUB_STEP_SUMMARY"
        printf '\n' >>"$GITHUB_STEP_SUMMARY"
    fi
}

cmd_run() {
    local twice command report_dir
    twice="$(install_root)/bin/twice"
    if [[ -n "${TWICE_INPUT_PACKAGE:-}" ]]; then
        twice="$(package_bin)/twice"
    fi
    [[ -x "$twice" ]] || twice="$(command -v twice || true)"
    [[ -n "$twice" ]] || fail "no twice binary: run the install step first"
    command="${TWICE_INPUT_COMMAND:-run}"
    report_dir="${TWICE_INPUT_REPORT_DIR:-twice-report}"
    if [[ -n "${TWICE_INPUT_WORKING_DIRECTORY:-}" ]]; then
        cd "$TWICE_INPUT_WORKING_DIRECTORY" || fail "no working directory ${TWICE_INPUT_WORKING_DIRECTORY}"
    fi

    local -a args
    case "$command" in
        run)
            args=(run --report-dir "$report_dir")
            [[ -z "${TWICE_INPUT_EXECUTOR:-}" ]] || args+=(--executor "$TWICE_INPUT_EXECUTOR")
            [[ -z "${TWICE_INPUT_SHARD:-}" ]] || args+=(--shard "$TWICE_INPUT_SHARD")
            [[ -z "${TWICE_INPUT_BASELINE:-}" ]] || args+=(--baseline "$TWICE_INPUT_BASELINE")
            ;;
        check-executor)
            [[ -n "${TWICE_INPUT_EXECUTOR:-}" ]] || fail "command check-executor needs the executor input"
            [[ -z "${TWICE_INPUT_SHARD:-}" ]] || fail "check-executor runs whole: drop the shard input"
            [[ -z "${TWICE_INPUT_BASELINE:-}" ]] || fail "check-executor takes no baseline: use command run"
            args=(check-executor "$TWICE_INPUT_EXECUTOR" --report-dir "$report_dir")
            ;;
        merge)
            [[ -n "${TWICE_INPUT_MERGE:-}" ]] || fail "command merge needs the merge input (the shards' report directories)"
            local -a shards
            read -r -a shards <<<"$TWICE_INPUT_MERGE"
            args=(report merge "${shards[@]}" --out "$report_dir")
            ;;
        *) fail "unknown command \"$command\" (run, check-executor or merge)" ;;
    esac
    if [[ "$command" != merge ]]; then
        [[ -z "${TWICE_INPUT_CASES:-}" ]] || args+=(--cases "$TWICE_INPUT_CASES")
        [[ -z "${TWICE_INPUT_SEED:-}" ]] || args+=(--seed "$TWICE_INPUT_SEED")
        local scenario
        for scenario in ${TWICE_INPUT_SCENARIOS:-}; do
            args+=(--scenario "$scenario")
        done
        [[ "${TWICE_INPUT_STRICT:-false}" != true ]] || args+=(--strict)
    fi
    if [[ -n "${TWICE_INPUT_ARGS:-}" ]]; then
        local -a extra
        read -r -a extra <<<"$TWICE_INPUT_ARGS"
        args+=("${extra[@]}")
    fi

    printf 'twice-action: %s' "$twice" >&2
    printf ' %q' "${args[@]}" >&2
    printf '\n' >&2
    local code=0
    "$twice" "${args[@]}" || code=$?

    output exit-code "$code"
    output report-dir "$report_dir"
    # The job summary: the conformance table first (check-executor), then the run's summary.
    to_summary "$report_dir/conformance.md"
    to_summary "$report_dir/summary.md"
    if [[ ! -f "$report_dir/summary.md" && -n "${GITHUB_STEP_SUMMARY:-}" ]]; then
        printf '# twice could not run\n\n`twice %s` exited %s before writing a report: the step'"'"'s log says why.\n' \
            "$command" "$code" >>"$GITHUB_STEP_SUMMARY"
    fi
    return "$code"
}

case "${1:-}" in
    cache-key) cmd_cache_key ;;
    install) cmd_install ;;
    run) cmd_run ;;
    *) fail "usage: twice-action.sh cache-key|install|run" ;;
esac
