#!/usr/bin/env bash
# Usage: bad_inputs.sh LOOM_BINARY BAD_DIR
#
# For every malformed module in BAD_DIR, `loom verify FILE` must exit with
# status 1 (not a signal, an abort or a hang) and print exactly one line to
# stderr, `FILE:LINE:COL: error: MESSAGE`, at the LINE:COL the file's first
# line expects (`// EXPECT: LINE:COL: MESSAGE-SUBSTRING`), with a message that
# contains the expected substring (case-insensitive).
set -uo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 LOOM_BINARY BAD_DIR" >&2
  exit 2
fi
loom=$1
dir=$2

passed=0
failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() {
  echo "FAIL $1: $2"
  if [[ -s $tmp/stderr ]]; then sed 's/^/  stderr: /' "$tmp/stderr" | head -5; fi
  failed=$((failed + 1))
}

shopt -s nullglob
files=("$dir"/*.hlo)
if [[ ${#files[@]} -eq 0 ]]; then
  echo "no .hlo files in $dir"
  exit 1
fi

for file in "${files[@]}"; do
  name=$(basename "$file")
  first=$(head -n 1 "$file")
  if [[ ! $first =~ ^//\ EXPECT:\ ([0-9]+):([0-9]+):\ (.+)$ ]]; then
    : >"$tmp/stderr"
    fail "$name" "first line is not '// EXPECT: LINE:COL: MESSAGE'"
    continue
  fi
  want_loc="${BASH_REMATCH[1]}:${BASH_REMATCH[2]}"
  want_msg="${BASH_REMATCH[3]}"

  timeout 10 "$loom" verify "$file" >"$tmp/stdout" 2>"$tmp/stderr"
  status=$?
  case $status in
    1) ;;
    124) fail "$name" "timed out after 10 s"; continue ;;
    0) fail "$name" "exit status 0: the malformed module was accepted"; continue ;;
    *)
      if ((status > 128)); then
        fail "$name" "killed by signal $((status - 128)) (exit status $status)"
      else
        fail "$name" "exit status $status, expected 1"
      fi
      continue
      ;;
  esac

  lines=$(grep -c "" "$tmp/stderr")
  if [[ $lines -ne 1 ]]; then
    fail "$name" "stderr has $lines lines, expected exactly one"
    continue
  fi
  line=$(head -n 1 "$tmp/stderr")
  prefix="$file:$want_loc: error: "
  if [[ ${line:0:${#prefix}} != "$prefix" ]]; then
    fail "$name" "expected stderr to start with '$prefix'"
    continue
  fi
  message=${line:${#prefix}}
  if [[ ${message,,} != *"${want_msg,,}"* ]]; then
    fail "$name" "message does not contain '$want_msg'"
    continue
  fi
  passed=$((passed + 1))
done

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
