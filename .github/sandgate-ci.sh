#!/bin/sh
# sandgate in CI: the one script the recipe (docs/ci.md) and the composite action
# (.github/actions/sandgate/action.yml) call, and the one the test suite runs
# (suite::ci_recipe), so that the commands the documentation shows are the commands tested.
#
#   sandgate-ci.sh install [SOURCE]     cargo install sandgate from SOURCE (a checkout of
#                                       sandgate, default .), then `sandgate doctor`
#   sandgate-ci.sh audit -- CMD...      run CMD under `sandgate build --no-ask` (an unknown host
#                                       is refused at once, and recorded), then write the
#                                       allowlist the recorded runs needed to $SANDGATE_ALLOWLIST
#                                       for a person to review and commit
#   sandgate-ci.sh enforce -- CMD...    make the committed $SANDGATE_ALLOWLIST this directory's
#                                       configuration, then run CMD under
#                                       `sandgate build --no-ask`
#   sandgate-ci.sh summary              append the destinations refused so far to
#                                       $GITHUB_STEP_SUMMARY (the job summary)
#
# audit and enforce exit with CMD's status; every other failure exits 2.
#
# Variables: SANDGATE (the binary; default `sandgate`), SANDGATE_ALLOWLIST (default
# .github/sandgate-allow.toml, relative to the working directory), GITHUB_STEP_SUMMARY (set by
# GitHub Actions; default: standard output).
#
# Why the allowlist lives under .github/: a top-level dot-directory of the working directory is
# read-only inside `sandgate build`, so the job's own commands cannot widen the list the next
# `enforce` installs.

set -eu

SANDGATE=${SANDGATE:-sandgate}
ALLOWLIST=${SANDGATE_ALLOWLIST:-.github/sandgate-allow.toml}

die() {
    echo "sandgate-ci: $*" >&2
    exit 2
}

# Where to append Markdown for the job summary.
summary_file() {
    if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
        echo "$GITHUB_STEP_SUMMARY"
    else
        echo /dev/stdout
    fi
}

# The command after `--`, as "$@" of the caller (checked here, shifted there).
need_command() {
    [ "${1:-}" = "--" ] || die "usage: sandgate-ci.sh $MODE -- CMD [ARG]..."
    [ $# -ge 2 ] || die "usage: sandgate-ci.sh $MODE -- CMD [ARG]... (no command given)"
}

install() {
    source=${1:-.}
    cargo install --locked --path "$source"
    # What a launch needs here (user namespaces, nftables, Landlock), said before the job runs.
    "$SANDGATE" doctor
}

audit() {
    need_command "$@"
    shift
    status=0
    "$SANDGATE" build --no-ask -- "$@" || status=$?
    mkdir -p "$(dirname -- "$ALLOWLIST")"
    # The command could write where the allowlist goes (a SANDGATE_ALLOWLIST outside a top-level
    # dot-directory): a link there would send the proposal into a file of its choosing, such as
    # $GITHUB_PATH or $GITHUB_ENV, which make the runner run code in later steps.
    [ ! -L "$ALLOWLIST" ] || die "$ALLOWLIST is a symbolic link; refusing to write through it"
    # Every recorded run of this directory's sandboxes so far (an audit of several commands is
    # several calls), so the file is complete each time. A temporary file first: a failed
    # `learn` leaves the previous proposal in place. mktemp creates a new file under a name
    # nobody can guess (a fixed one, `.tmp.$$`, could be a link the command planted).
    tmp=$(mktemp "$ALLOWLIST.XXXXXXXX") || die "cannot create a temporary file next to $ALLOWLIST"
    if ! "$SANDGATE" learn --from-log --tier build >"$tmp"; then
        rm -f -- "$tmp"
        die "sandgate learn --from-log failed"
    fi
    mv -f -- "$tmp" "$ALLOWLIST"
    echo "sandgate-ci: the proposed allowlist is in $ALLOWLIST: review it and commit it" >&2
    {
        echo "### sandgate audit: proposed allowlist"
        echo
        echo "Review and commit as \`$ALLOWLIST\`; \`sandgate-ci.sh enforce\` uses it."
        echo
        echo '```toml'
        cat -- "$ALLOWLIST"
        echo '```'
    } >>"$(summary_file)"
    return "$status"
}

enforce() {
    need_command "$@"
    shift
    [ -f "$ALLOWLIST" ] ||
        die "no allowlist at $ALLOWLIST: run \`sandgate-ci.sh audit\` and commit what it proposes"
    # `config edit` writes this directory's configuration file (outside the checkout, where no
    # sandbox can write) and refuses a file that does not load: the editor it runs copies the
    # committed file in.
    SANDGATE_CI_ALLOWLIST=$(cd "$(dirname -- "$ALLOWLIST")" && pwd -P)/$(basename -- "$ALLOWLIST")
    export SANDGATE_CI_ALLOWLIST
    # shellcheck disable=SC2016 # expanded by the shell `config edit` runs the editor with
    VISUAL='cp -- "$SANDGATE_CI_ALLOWLIST"' "$SANDGATE" config edit >/dev/null ||
        die "$ALLOWLIST does not load as a sandgate configuration (see above)"
    status=0
    "$SANDGATE" build --no-ask -- "$@" || status=$?
    return "$status"
}

summary() {
    # One row per host that was refused at least once (by the proxy or the firewall); the line
    # "would have asked (unattended run): ..." lists what an allowlist entry would let through.
    table=$("$SANDGATE" log --summary) || die "sandgate log --summary failed"
    refused=$(printf '%s\n' "$table" | awk '
        NR == 1 { header = $0; next }
        /^would have asked/ { asked = $0; next }
        $4 ~ /^[0-9]+$/ && $4 > 0 { rows = rows $0 "\n" }
        END { if (rows != "") printf "%s\n%s", header, rows; if (asked != "") print asked }')
    {
        echo "### sandgate: refused destinations"
        echo
        if [ -z "$refused" ]; then
            echo "None: every destination this job's sandboxes tried was allowed."
        else
            echo '```text'
            printf '%s\n' "$refused"
            echo '```'
        fi
    } >>"$(summary_file)"
}

MODE=${1:-}
[ $# -ge 1 ] && shift
case "$MODE" in
install) install "$@" ;;
audit) audit "$@" ;;
enforce) enforce "$@" ;;
summary) summary ;;
*) die "usage: sandgate-ci.sh install [SOURCE] | audit -- CMD... | enforce -- CMD... | summary" ;;
esac
