#!/usr/bin/env bash
# Mutation testing of the walls' decision cores (issue 37). cargo-mutants changes one operator or
# return value at a time and runs the crate's own unit tests (`cargo test --lib`, plus the
# property tests for `decision`); a mutant that survives is a decision no test pins. Equivalent mutants are excluded in .cargo/mutants.toml,
# each with its reason.
#
# Usage: bench/mutants.sh [CORE...]
#   cores: guard patterns hook (the default: the three of issue 37), sni filter decision,
#   http relay mounts gitwall toplevel firewall tree
#   JOBS=1 (parallel builds; the machine is shared), NICE=15, OUT=target/mutants,
#   EXTRA="--iterate" (test again only what the last run of the core did not catch)
# Needs `cargo install --locked cargo-mutants` (tested with 27.1.0).
#
# Where the time goes: each mutant is one incremental build of the mutated crate's lib test
# binary (10-20 s on one core) and one run of its unit tests (under a second, except for the
# survivors, which run them all). The first build of a run compiles the workspace crates once.
#
# The mutated tree is a copy (under /tmp); it builds into this checkout's target directory so
# the dependencies are not built again. Cargo names a workspace crate's artifacts the same
# wherever the tree is, so a build of this checkout and a mutant's build would take each other's
# artifacts for their own (a mutant's tests could then run unmutated code and "survive"): a
# per-package profile setting that changes nothing but the artifacts' names keeps them apart.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-1}
NICE=${NICE:-15}
OUT=${OUT:-target/mutants}
cores=("$@")
[ ${#cores[@]} -gt 0 ] || cores=(guard patterns hook)

read -ra extra <<< "${EXTRA:-}"
note=""
[ ${#extra[@]} -eq 0 ] || note=" (${extra[*]}: only the mutants this run tested)"
apart=()
for p in sandgate-config sandgate-proxy sandgate-hook sandgate-sandbox sandgate-firewall \
    sandgate-test-support; do
    apart+=("--cargo-arg=--config=profile.dev.package.$p.codegen-units=255")
done

for core in "${cores[@]}"; do
    tests=(--cargo-arg=--lib)
    only=() # test names to run, when the crate's other unit tests are slow and cannot catch these
    pick=() # the core's functions, when the file holds I/O too (regexes over the mutants' names)
    then=() # a second pass with these tests, over what the first one did not catch
    case $core in
        guard) args=(-p sandgate-proxy -f proxy/src/guard.rs) ;;
        patterns) args=(-p sandgate-config -f config/src/pattern.rs -f config/src/matcher.rs) ;;
        hook) args=(-p sandgate-hook -f hook/src/shell.rs -f hook/src/claude.rs) ;;
        sni) args=(-p sandgate-proxy -f proxy/src/sni.rs) ;;
        filter) args=(-p sandgate-sandbox -f sandbox/src/linux/filter.rs) only=(-- linux::filter::) ;;
        decision)
            args=(-p sandgate-config -f config/src/policy.rs -f config/src/decision.rs)
            tests+=(--cargo-arg=--test=derive_props) # "a child never allows what its parent denies"
            ;;
        http) # the rule matcher and the proxy's use of it (method overrides)
            args=(-p sandgate-config -f config/src/intercept.rs
                -p sandgate-proxy -f proxy/src/intercept.rs)
            pick=(-F 'config/src/intercept\.rs:.*(HttpRule|ambiguous_path|glob_path)'
                -F 'InterceptSettings::(intercepts|rules_for)'
                -F 'proxy/src/intercept\.rs:.*(method_overrides|http_rules)')
            ;;
        relay) # which requests the plain-HTTP relay takes itself (the rest go to hyper)
            args=(-p sandgate-proxy -f proxy/src/relay.rs) only=(-- relay::)
            pick=(-F '(in |replace )(classify|range|hop_by_hop|tokens|named)( |$)'
                -F '(in |replace )(content_length|crlf_only)( |$)')
            ;;
        mounts) # the mount plan, not its executor
            args=(-p sandgate-sandbox -f sandbox/src/linux/mounts.rs) only=(-- linux::mounts::)
            pick=(-F '(in |replace )(kept_under_tmp|pins|plan|MountOp::step|flag_names)( |$)'
                -F 'for MountOp>::fmt')
            ;;
        gitwall) # in two passes: the one test that builds some forty layouts with git takes 19 s,
            # the rest 2 s; it runs only for the mutants the others did not catch
            args=(-p sandgate-sandbox -f sandbox/src/gitwall.rs)
            only=(--timeout=30 -- -- gitwall:: --skip git_layouts_protect_what_git_reads)
            then=(--timeout=120 -- gitwall::)
            ;;
        toplevel) # the rule and the host tools' list it is made of
            args=(-p sandgate-sandbox -f sandbox/src/top_level.rs -p sandgate-config
                -f config/src/dotfiles.rs)
            only=(-- -- top_level:: dotfiles::) # two filters: past cargo, to the test binaries
            ;;
        firewall) # with the golden rule text and the command sequences (not the kernel tests)
            args=(-p sandgate-firewall -f firewall/src/nft.rs -f firewall/src/pf.rs)
            tests+=(--cargo-arg=--test=golden --cargo-arg=--test=sequencing)
            ;;
        tree) # without the test that reads 20 000 directories: tree_bounds_tests has small bounds
            args=(-p sandgate-sandbox -f sandbox/src/tree.rs)
            only=(-- -- tree --skip past_the_count_bound)
            ;;
        *) echo "unknown core: $core" >&2; exit 2 ;;
    esac
    start=$(date +%s)
    mkdir -p "$OUT/$core"
    dir=$OUT/$core/mutants.out
    n() { wc -l < "$dir/$1.txt"; }
    mutants() {
        CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target} CARGO_BUILD_JOBS=$JOBS \
            nice -n "$NICE" cargo mutants -j "$JOBS" --no-shuffle -o "$OUT/$core" "${args[@]}" \
            "${pick[@]}" "${tests[@]}" "${apart[@]}" "$@" || true # survivors: non-zero
        [ -f "$dir/caught.txt" ] || { echo "== $core: cargo mutants did not run" >&2; exit 1; }
    }
    mutants "${extra[@]}" "${only[@]}"
    caught=$(( $(n caught) + $(n timeout) ))
    viable=$(( caught + $(n missed) ))
    all=$(( viable + $(n unviable) ))
    if [ ${#then[@]} -gt 0 ] && [ "$(n missed)" -gt 0 ]; then
        mutants --iterate "${then[@]}"
        caught=$(( viable - $(n missed) ))
    fi
    echo "== $core: $all mutants, $viable viable, $caught caught" \
        "($(( viable ? 100 * caught / viable : 100 ))%), $(n missed) missed," \
        "$(( $(date +%s) - start ))s$note; survivors in $dir/missed.txt"
done
