#!/usr/bin/env bash
# Debian packages the tests start for real: OpenMPI (mpirun), Slurm + munge + MariaDB (a local
# cluster), a JDK (a local Spark cluster), Chromium (renders the report), gcc (the GPU stand-ins' NVML).
# Installs only what is missing; needs root or sudo.
set -euo pipefail
packages=(openmpi-bin libopenmpi-dev)
# The local Slurm test cluster (tests/slurm/cluster.py): daemons, client commands, accounting.
packages+=(slurmctld slurmd slurmdbd slurm-client munge mariadb-server)
# The JVM of the standalone Spark test cluster and of the spark platform's driver (scripts/spark_cluster.py).
packages+=(openjdk-17-jre-headless)
# Headless rendering of the HTML report, with a font for its figures.
packages+=(chromium fonts-dejavu-core)
# The GPU stand-ins' libnvidia-ml.so.1 (tests/gpu_standin/nvml.c), compiled once by the tests.
packages+=(gcc libc6-dev)

missing=()
for pkg in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]} == 0)); then
    exit 0
fi
sudo=""
if [[ $(id -u) != 0 ]]; then
    command -v sudo >/dev/null || { echo "system-packages: need root or sudo to install ${missing[*]}" >&2; exit 1; }
    sudo="sudo"
fi
echo "system-packages: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
