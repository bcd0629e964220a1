#!/usr/bin/env bash
# rehearse.sh BUNDLE: the dress rehearsal of a GPU run on a machine without a GPU (CI's).
# Runs BUNDLE/run.sh and requires an honest record: a non-zero exit status, record.md and
# summary.txt written, every test binary of the bundle reported "skipped" with at least
# one skip and a reason for each, nothing counted as passed, no benchmark line counted
# as a package.
set -uo pipefail
bundle="${1:?usage: rehearse.sh BUNDLE}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
fail() { echo "rehearsal: $*" >&2; echo "--- summary.txt:" >&2; cat "$out/summary.txt" >&2 2>/dev/null; exit 1; }
"$bundle/run.sh" "$out" >"$out/.stdout" 2>&1
rc=$?
[ "$rc" != 0 ] || fail "run.sh exited 0 on a machine without a GPU"
for f in env.txt tests.txt summary.txt record.md; do [ -s "$out/$f" ] || fail "$f is missing or empty"; done
grep -q '^verdict: FAIL' "$out/summary.txt" || fail "the verdict is not FAIL"
while read -r _ pkg; do
	grep -qE "^  skipped +${pkg//./\\.} +0 passed +0 failed +[1-9][0-9]* skipped" "$out/summary.txt" ||
		fail "$pkg is not reported as skipped with nothing passed"
done <"$bundle/tests/packages.txt"
! grep -qE '^  ok ' "$out/summary.txt" || fail "a step is ok without a GPU"
! grep -q '(no reason given)' "$out/record.md" || fail "a skip has no reason"
n="$(grep -cE '^- `' "$out/record.md")"
grep -q "^#### Skips ($n)\$" "$out/record.md" || fail "record.md lists $n skips but its count says otherwise"
cells="$(grep -m1 -E '^\| [0-9]{4}-' "$out/record.md" | awk -F' \\| ' '{ print $NF }' | tr ',' '\n' | grep -c .)"
[ "$cells" = "$(grep -c . "$bundle/tests/packages.txt")" ] || fail "the table row has $cells package cells for $(grep -c . "$bundle/tests/packages.txt") test binaries"
echo "rehearsal ok: run.sh exit $rc, $n skips listed, $(grep -c . "$bundle/tests/packages.txt") test binaries skipped, nothing passed"
