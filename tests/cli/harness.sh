# The shared part of the CLI tests, sourced by them: a scratch folder, the
# pass/fail counters and how a failure shows what the command printed.
#
#   ok NAME          a check passed
#   fail NAME WHY    a check failed: prints WHY and the last command's
#                    stdout and stderr ($tmp/out, $tmp/err)
#   run CMD...       runs CMD with a 60 s timeout, output to $tmp/out, $tmp/err
#   run_cpu_timed CMD...
#                    runs CMD as run does and sets cpu_ms to the processor
#                    time it used (user + system), which a loaded machine
#                    inflates far less than it inflates wall-clock time
#   finish           prints the counts; its status is the script's
command -v jq >/dev/null || { echo "FAIL: jq is missing (scripts/install-deps.sh installs it)"; exit 1; }
passed=0
failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ok() {
  echo "ok   $1"
  passed=$((passed + 1))
}

fail() {
  echo "FAIL $1: $2"
  for f in "$tmp/out" "$tmp/err"; do
    if [[ -s $f ]]; then sed 's/^/  | /' "$f" | head -10; fi
  done
  failed=$((failed + 1))
}

run() {
  timeout 60 "$@" >"$tmp/out" 2>"$tmp/err"
}

run_cpu_timed() {
  local TIMEFORMAT='%3U %3S' LC_NUMERIC=C seconds status user system
  seconds=$( { time timeout 60 "$@" >"$tmp/out" 2>"$tmp/err"; } 2>&1)
  status=$?
  read -r user system <<<"$seconds"
  cpu_ms=$(awk -v u="$user" -v s="$system" 'BEGIN { printf "%d", (u + s) * 1000 }')
  return $status
}

finish() {
  echo "$passed passed, $failed failed"
  [[ $failed -eq 0 ]]
}
