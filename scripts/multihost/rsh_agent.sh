#!/usr/bin/env bash
# Open MPI's plm_rsh_agent for the hosts of hosts.sh: `rsh_agent.sh HOST CMD...` runs CMD (a shell
# command line, as ssh would get it: orted and its arguments) on HOST, inside its namespaces
# instead of over ssh. The environment passes through as it is (nsenter keeps it).
set -euo pipefail
while [[ ${1:-} == -* ]]; do shift; done  # ssh-style options Open MPI may add (none by default)
host=${1:?rsh_agent.sh HOST CMD...}
shift
exec "$(dirname "$0")/hosts.sh" exec "$host" /bin/sh -c "$*"
