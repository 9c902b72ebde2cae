#!/usr/bin/env bash
# fuzz.sh: run every Go fuzz target of the module, one at a time, each for
# FUZZTIME (default 20s), then print a summary. Exits non-zero if any target
# fails (a crasher, a build error, a failing seed).
#
#   FUZZTIME=15s ./scripts/fuzz.sh              # every target
#   ./scripts/fuzz.sh FuzzClassify 'FuzzParse.*' # only targets whose name matches
#
# Targets are the `func FuzzXxx(f *testing.F)` of the module's *_test.go files
# (sdk/, node_modules and testdata are skipped). A file with a `//go:build`
# line naming `integration` is fuzzed with -tags integration. FUZZPARALLEL
# sets go test's -parallel (default: GOMAXPROCS). FUZZMINIMIZETIME (default
# 5s) bounds the minimisation of each new input: go test's default of 60s
# would eat a short FUZZTIME whole on targets with large seeds. Targets that
# need PostgreSQL get it from tooling/dbtest: DRAINER_TEST_DATABASE_URL, else
# a throwaway local cluster per fuzz process (set the variable to save the
# start-up of one cluster per worker).
#
# A crasher is written by go test to <package>/testdata/fuzz/FuzzXxx/<hash>.
# Commit that file: `go test ./...` then runs it as a regular test case, so
# the bug stays fixed.
set -euo pipefail

FUZZTIME=${FUZZTIME:-20s}
FUZZMINIMIZETIME=${FUZZMINIMIZETIME:-5s}
GO=${GO:-go}

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

# target lines: "<package dir> <FuzzName> <tags>", sorted for a stable order.
targets=()
while IFS= read -r file; do
	dir=./$(dirname "${file#./}")
	tags=""
	if grep -qE '^//go:build .*\bintegration\b' "$file"; then
		tags=integration
	fi
	while IFS= read -r name; do
		targets+=("$dir $name $tags")
	done < <(sed -nE 's/^func (Fuzz[A-Za-z0-9_]*)\(.*\*testing\.F\).*/\1/p' "$file")
done < <(find . \( -path ./sdk -o -name node_modules -o -name testdata -o -name .git \) -prune \
	-o -type f -name '*_test.go' -print | sort)

if [ ${#targets[@]} -eq 0 ]; then
	echo "fuzz.sh: no fuzz targets found under $root" >&2
	exit 1
fi

# Optional name filters (anchored extended regular expressions).
if [ $# -gt 0 ]; then
	selected=()
	for t in "${targets[@]}"; do
		read -r _ name _ <<<"$t"
		for pat in "$@"; do
			if [[ $name =~ ^($pat)$ ]]; then
				selected+=("$t")
				break
			fi
		done
	done
	if [ ${#selected[@]} -eq 0 ]; then
		echo "fuzz.sh: no fuzz target matches: $*" >&2
		exit 2
	fi
	targets=("${selected[@]}")
fi

logdir=$(mktemp -d "${TMPDIR:-/tmp}/drainer-fuzz.XXXXXX")
echo "fuzz.sh: ${#targets[@]} target(s), ${FUZZTIME} each; logs in $logdir"

summary=()
crashers=()
failed=0
for t in "${targets[@]}"; do
	read -r dir name tags <<<"$t"
	log="$logdir/${dir//\//_}.$name.log"
	args=(test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" -fuzzminimizetime "$FUZZMINIMIZETIME")
	if [ -n "$tags" ]; then
		args+=(-tags "$tags")
	fi
	if [ -n "${FUZZPARALLEL:-}" ]; then
		args+=(-parallel "$FUZZPARALLEL")
	fi
	args+=("$dir")
	echo
	echo "=== $name ($dir${tags:+, -tags $tags})"
	echo "    $GO ${args[*]}"
	start=$SECONDS
	status=ok
	if ! "$GO" "${args[@]}" 2>&1 | tee "$log"; then
		status=FAIL
		failed=$((failed + 1))
	fi
	elapsed=$((SECONDS - start))
	# Last progress line: "fuzz: elapsed: 15s, execs: 123456 (0/sec), new interesting: …";
	# its rate is that of the last interval, so report the average instead.
	execs=$({ grep -oE 'fuzz: elapsed: [0-9hms]+, execs: [0-9]+' "$log" || true; } | tail -n1 | awk '{
		d = $3; sub(/,$/, "", d); secs = 0
		while (match(d, /^[0-9]+[hms]/)) {
			u = substr(d, RLENGTH, 1)
			secs += substr(d, 1, RLENGTH - 1) * (u == "h" ? 3600 : u == "m" ? 60 : 1)
			d = substr(d, RLENGTH + 1)
		}
		printf "%d (%d/s)", $5, (secs > 0 ? $5 / secs : $5)
	}')
	summary+=("$(printf '%-5s %-22s %-28s %-22s %ss' "$status" "$name" "$dir" "${execs:--}" "$elapsed")")
	while IFS= read -r crasher; do
		crashers+=("$dir $crasher $name")
	done < <(sed -nE 's/.*Failing input written to (testdata\/fuzz\/[^ ]+).*/\1/p' "$log")
done

echo
echo "=== summary (FUZZTIME=$FUZZTIME)"
printf '%-5s %-22s %-28s %-22s %s\n' result target package execs time
printf '%s\n' "${summary[@]}"

if [ ${#crashers[@]} -gt 0 ]; then
	echo
	echo "Crashers (go test wrote them to the package's testdata/fuzz):"
	for c in "${crashers[@]}"; do
		read -r dir path name <<<"$c"
		echo "  ${dir#./}/$path"
		echo "    reproduce: $GO test -run '^${name}\$/^$(basename "$path")\$' $dir"
	done
	echo "Fix the bug, then commit each file above: it stays as a regular test"
	echo "case that \`go test ./...\` runs on every build."
fi

if [ "$failed" -gt 0 ]; then
	echo
	echo "fuzz.sh: $failed of ${#targets[@]} target(s) failed; logs in $logdir" >&2
	exit 1
fi
echo
echo "fuzz.sh: all ${#targets[@]} target(s) passed"
rm -rf "$logdir"
