# Sourced by the benchmarks that run on the shaped testbed (BRIEF section 5).
#
# enter_shaped_loopback SCRIPT ARGS...: outside the testbed, re-runs SCRIPT
# with ARGS in a private network namespace (as root: it needs unshare and
# tc); inside it, shapes the loopback link to 2 Gbit/s and lets mpirun run
# as root. The script calls it before its work, with "$0" and its arguments.
enter_shaped_loopback() {
  if [[ ${LOOM_IN_NAMESPACE:-} != 1 ]]; then
    [[ $(id -u) -eq 0 ]] || { echo "run as root: it needs unshare and tc" >&2; exit 1; }
    LOOM_IN_NAMESPACE=1 exec unshare -n "$@"
  fi
  ip link set lo up
  tc qdisc add dev lo root tbf rate 2gbit burst 512kb latency 100ms
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
}
