#!/usr/bin/env bash
# Runs the README's two commands as a new user would, on a fresh Debian 12
# machine that has nothing but g++ and make: builds such a root with
# debootstrap, clones this repository's HEAD into it (with ../shared beside
# it, as CI has), and runs `make demo` and then `make test` inside it.
# Prints both exit codes and exits non-zero unless both are 0.
#
# The root gets its own /dev: a tmpfs with the few device nodes a build and
# the tests need (null, zero, full, random, urandom, tty, a private devpts and
# a /dev/shm for MPI), inside a private mount namespace, so that nothing
# mounted for it is visible outside and this machine's /dev is never bound
# into it. /proc and /sys are mounted for the root alone as well.
#
# Usage (as root): scripts/fresh-machine-check.sh [--root DIR] [--mirror URL] [--keep]
#   --root DIR    where to build the root (default /var/tmp/loom-fresh-root;
#                 emptied first)
#   --mirror URL  the Debian mirror (default: this machine's, else deb.debian.org)
#   --keep        keep the root afterwards (default: delete it)
# Logs: DIR.logs/{debootstrap,demo,test}.log
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
root=/var/tmp/loom-fresh-root
mirror=
keep=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --root) root=$2; shift 2 ;;
    --mirror) mirror=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "fresh-machine-check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

if [[ $(id -u) -ne 0 ]]; then
  echo "fresh-machine-check: must run as root (debootstrap, mount namespaces, mknod)" >&2
  exit 2
fi
if ! command -v debootstrap >/dev/null; then
  echo "fresh-machine-check: installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi
if [[ -z $mirror ]]; then
  mirror=$(grep -rhoE '(^deb|^URIs:) +https?://[^ ]*/debian/?( |$)' /etc/apt/sources.list \
    /etc/apt/sources.list.d/ 2>/dev/null | awk '{print $2}' | head -1 || true)
  mirror=${mirror:-http://deb.debian.org/debian}
fi
case $root in
  / | /var | /var/tmp | /tmp | "") echo "fresh-machine-check: refusing root '$root'" >&2; exit 2 ;;
esac

logs=$root.logs
rm -rf "$root" "$logs"
mkdir -p "$root" "$logs"
cleanup() { [[ $keep -eq 1 ]] || rm -rf "$root"; }
trap cleanup EXIT

echo "fresh-machine-check: debootstrap bookworm from $mirror into $root (log: $logs/debootstrap.log)"
debootstrap --variant=minbase --include=g++,make bookworm "$root" "$mirror" \
  >"$logs/debootstrap.log" 2>&1 || {
  echo "fresh-machine-check: debootstrap failed; see $logs/debootstrap.log" >&2
  tail -20 "$logs/debootstrap.log" >&2
  exit 1
}

# A clean checkout of what is committed, and the shared data beside it.
mkdir -p "$root/work"
git clone --quiet --no-hardlinks "$repo" "$root/work/main"
if [[ -d $repo/../shared ]]; then cp -a "$repo/../shared" "$root/work/shared"; fi
cp /etc/resolv.conf "$root/etc/resolv.conf"
echo "fresh-machine-check: checkout $(git -C "$root/work/main" rev-parse --short HEAD)"

# Everything below runs in a private mount namespace (and PID namespace, so
# that nothing the tests start outlives it).
unshare --mount --pid --fork --kill-child env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
  ROOT="$root" LOGS="$logs" bash -euo pipefail -c '
  mount --make-rprivate /
  mount -t tmpfs -o mode=755,nosuid,size=64m loom-dev "$ROOT/dev"
  for node in "null c 1 3" "zero c 1 5" "full c 1 7" "random c 1 8" "urandom c 1 9" "tty c 5 0"; do
    set -- $node
    mknod -m 666 "$ROOT/dev/$1" "$2" "$3" "$4"
  done
  ln -s /proc/self/fd "$ROOT/dev/fd"
  ln -s /proc/self/fd/0 "$ROOT/dev/stdin"
  ln -s /proc/self/fd/1 "$ROOT/dev/stdout"
  ln -s /proc/self/fd/2 "$ROOT/dev/stderr"
  mkdir "$ROOT/dev/pts" "$ROOT/dev/shm"
  mount -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts "$ROOT/dev/pts"
  ln -s pts/ptmx "$ROOT/dev/ptmx"
  mount -t tmpfs -o mode=1777,nosuid,nodev loom-shm "$ROOT/dev/shm"
  mount -t proc -o nosuid,nodev,noexec proc "$ROOT/proc"
  mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$ROOT/sys"
  run() {
    local name=$1 code=0
    shift
    chroot "$ROOT" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      HOME=/root TERM=dumb LANG=C.UTF-8 bash -c "cd /work/main && $*" >"$LOGS/$name.log" 2>&1 ||
      code=$?
    echo "$code" >"$LOGS/$name.code"
  }
  run demo make demo
  run test make test
'

demo=$(cat "$logs/demo.code")
test=$(cat "$logs/test.code")
echo "fresh-machine-check: make demo exit $demo (log: $logs/demo.log)"
tail -3 "$logs/demo.log" | sed 's/^/    /'
echo "fresh-machine-check: make test exit $test (log: $logs/test.log)"
grep -E 'tests passed|tests failed' "$logs/test.log" | tail -1 | sed 's/^/    /' || true
[[ $demo -eq 0 && $test -eq 0 ]]
