#!/bin/sh
# A real five-node Slurm cluster on this machine (munge, MariaDB, slurmdbd, slurmctld, one slurmd
# per node), all in one directory. Needs root and the packages of tools/system-packages.sh.
#   tests/slurm/cluster.sh start            then: eval "$(tests/slurm/cluster.sh env)"
#   tests/slurm/cluster.sh status | stop
# SNAKEDDP_SLURM_DIR picks the directory (default /tmp/snakeddp-slurm). See cluster.py.
exec python3 "$(dirname "$0")/cluster.py" "$@"
